//! networking.k8s.io/v1 NetworkPolicy: which traffic the selected pods accept and send.
//! Stored, defaulted and validated as kube does; enforcing them is the pod network's work.

use plinth_core::Cause;
use plinth_core::selector::LabelSelector;
use plinth_core::validation::{cidr_strictly_within, parse_cidr, port_name, port_number};
use serde_json::{Value, json};

use crate::apps::{label_selector, selector_cell, selector_go};
use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::strategy::Strategy;

/// The `networkpolicies` resource.
pub fn resource() -> ResourceDef {
    let peer = || {
        obj(vec![
            ("podSelector", label_selector()),
            ("namespaceSelector", label_selector()),
            (
                "ipBlock",
                obj(vec![
                    ("cidr", Schema::String),
                    ("except", array(Schema::String)),
                ]),
            ),
        ])
    };
    let port = || {
        obj(vec![
            ("protocol", Schema::String),
            ("port", Schema::IntOrString),
            ("endPort", Schema::Int),
        ])
    };
    let mut def = ResourceDef::new("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies")
        .short_names(&["netpol"])
        .columns(vec![column(
            "Pod-Selector",
            "string",
            "podSelector selects the pods to which this NetworkPolicy object applies. The array of ingress rules is applied to any pods selected by this field. Multiple network policies can select the same set of pods. In this case, the ingress rules for each are combined additively. This field is NOT optional and follows standard label selector semantics. An empty podSelector matches all pods in this namespace.",
            0,
            |o, _| json!(selector_cell(&o["spec"]["podSelector"])),
        )])
        .schema(top(vec![(
            "spec",
            obj(vec![
                ("podSelector", label_selector()),
                ("ingress", array(obj(vec![("ports", array(port())), ("from", array(peer()))]))),
                ("egress", array(obj(vec![("ports", array(port())), ("to", array(peer()))]))),
                ("policyTypes", array(Schema::String)),
            ]),
        )]))
        .strategy(NetworkPolicies);
    def.generation = true;
    def
}

#[derive(Debug)]
struct NetworkPolicies;

impl Strategy for NetworkPolicies {
    fn prepare_create(&self, object: &mut Value) {
        default_policy(object);
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        default_policy(object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let spec = &object["spec"];
        let mut causes = selector_causes(&spec["podSelector"], "spec.podSelector");
        for (direction, peers) in [("ingress", "from"), ("egress", "to")] {
            for (i, rule) in spec[direction].as_array().into_iter().flatten().enumerate() {
                let at = format!("spec.{direction}[{i}]");
                for (p, port) in rule["ports"].as_array().into_iter().flatten().enumerate() {
                    causes.extend(validate_port(port, &format!("{at}.ports[{p}]")));
                }
                for (p, peer) in rule[peers].as_array().into_iter().flatten().enumerate() {
                    causes.extend(validate_peer(peer, &format!("{at}.{peers}[{p}]")));
                }
            }
        }
        let types = spec["policyTypes"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if types.len() > 2 {
            causes.push(Cause::invalid(
                "spec.policyTypes",
                &json!(types),
                "may not specify more than two policyTypes",
            ));
        } else {
            for (i, kind) in types.iter().enumerate() {
                if !matches!(kind.as_str(), Some("Ingress" | "Egress")) {
                    causes.push(Cause::not_supported(
                        format!("spec.policyTypes[{i}]"),
                        kind,
                        &["Egress", "Ingress"],
                    ));
                }
            }
        }
        causes
    }
}

/// kube's defaults: each port's protocol TCP; `policyTypes` Ingress, plus Egress when there are
/// egress rules.
fn default_policy(object: &mut Value) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for direction in ["ingress", "egress"] {
        for rule in spec
            .get_mut(direction)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            for port in rule
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(port) = port.as_object_mut() {
                    port.entry("protocol").or_insert_with(|| json!("TCP"));
                }
            }
        }
    }
    if spec.get("policyTypes").is_none_or(Value::is_null) {
        let mut types = vec![json!("Ingress")];
        if spec
            .get("egress")
            .and_then(Value::as_array)
            .is_some_and(|e| !e.is_empty())
        {
            types.push(json!("Egress"));
        }
        spec.insert("policyTypes".into(), Value::Array(types));
    }
    spec.entry("podSelector").or_insert_with(|| json!({}));
}

fn selector_causes(selector: &Value, path: &str) -> Vec<Cause> {
    match LabelSelector::from_object(selector) {
        Ok(_) => Vec::new(),
        Err(e) => vec![Cause::invalid(
            path,
            &json!(selector_go(selector)),
            &format!("invalid label selector: {e}"),
        )],
    }
}

fn validate_port(port: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(protocol) = port["protocol"].as_str()
        && !["TCP", "UDP", "SCTP"].contains(&protocol)
    {
        causes.push(Cause::not_supported(
            format!("{path}.protocol"),
            &json!(protocol),
            &["TCP", "UDP", "SCTP"],
        ));
    }
    let end = port.get("endPort").filter(|e| !e.is_null());
    match port.get("port").filter(|p| !p.is_null()) {
        Some(Value::Number(n)) => {
            let number = n.as_i64().unwrap_or(0);
            for msg in port_number(number) {
                causes.push(Cause::invalid(format!("{path}.port"), &json!(number), &msg));
            }
            if let Some(end) = end.and_then(Value::as_i64) {
                if end < number {
                    causes.push(Cause::invalid(
                        format!("{path}.endPort"),
                        &json!(number),
                        "must be greater than or equal to `port`",
                    ));
                }
                for msg in port_number(end) {
                    causes.push(Cause::invalid(format!("{path}.endPort"), &json!(end), &msg));
                }
            }
        }
        Some(named) => {
            if let Some(end) = end {
                causes.push(Cause::invalid(
                    format!("{path}.endPort"),
                    end,
                    "may not be specified when `port` is non-numeric",
                ));
            }
            let name = named.as_str().unwrap_or("");
            for msg in port_name(name) {
                causes.push(Cause::invalid(format!("{path}.port"), &json!(name), &msg));
            }
        }
        None => {
            if let Some(end) = end {
                causes.push(Cause::invalid(
                    format!("{path}.endPort"),
                    end,
                    "may not be specified when `port` is not specified",
                ));
            }
        }
    }
    causes
}

fn validate_peer(peer: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut peers = 0;
    for selector in ["podSelector", "namespaceSelector"] {
        if let Some(s) = peer.get(selector).filter(|s| !s.is_null()) {
            peers += 1;
            causes.extend(selector_causes(s, &format!("{path}.{selector}")));
        }
    }
    let block = peer.get("ipBlock").filter(|b| !b.is_null());
    if let Some(block) = block {
        peers += 1;
        causes.extend(validate_ip_block(block, &format!("{path}.ipBlock")));
    }
    if peers == 0 {
        causes.push(Cause::required(path, "must specify a peer"));
    } else if peers > 1 && block.is_some() {
        causes.push(Cause::forbidden(
            path,
            "may not specify both ipBlock and another peer",
        ));
    }
    causes
}

const CIDR_MSG: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";

fn validate_ip_block(block: &Value, path: &str) -> Vec<Cause> {
    let cidr = block["cidr"].as_str().unwrap_or("");
    if cidr.is_empty() {
        return vec![Cause::required(format!("{path}.cidr"), "")];
    }
    let Some(outer) = parse_cidr(cidr) else {
        return vec![Cause::invalid(
            format!("{path}.cidr"),
            &json!(cidr),
            CIDR_MSG,
        )];
    };
    let mut causes = Vec::new();
    for (i, except) in block["except"].as_array().into_iter().flatten().enumerate() {
        let text = except.as_str().unwrap_or("");
        match parse_cidr(text) {
            None => causes.push(Cause::invalid(
                format!("{path}.except[{i}]"),
                &json!(text),
                CIDR_MSG,
            )),
            Some(inner) if !cidr_strictly_within(outer, inner) => causes.push(Cause::invalid(
                format!("{path}.except[{i}]"),
                &json!(text),
                "must be a strict subset of `cidr`",
            )),
            Some(_) => {}
        }
    }
    causes
}
