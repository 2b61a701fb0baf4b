//! core/v1 Service: kube's defaults and validation, kubectl's columns, and its addresses —
//! a ClusterIP from the service range (`--service-cluster-ip-range`: see `plinth serve`'s
//! choice of ranges) and a
//! node port from 30000–32767 for `NodePort`/`LoadBalancer`, allocated when the Service is
//! created (none for headless and `ExternalName` Services).

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use plinth_core::{ApiError, Cause};
use serde_json::{Map, Value, json};

use plinth_registry::ListOptions;
use plinth_registry::resources::{ResourceDef, age_cell, column};
use plinth_registry::schema::{Schema, array, obj, strings, top};
use plinth_registry::strategy::{FieldPath, ListMerge, Strategy};

use plinth_registry::service_range::range as service_range;
pub use plinth_registry::service_range::{dns_ip, kubernetes_ip, set_service_range};

const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;
const TYPES: &[&str] = &["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];

/// The `services` resource.
pub fn resource() -> ResourceDef {
    let mut def = ResourceDef::new("", "v1", "Service", "services")
        .short_names(&["svc"])
        .categories(&["all"])
        .with_status()
        .connect("proxy", crate::core::proxy::service)
        .discovered("proxy", Some(("", "v1", "ServiceProxyOptions")), &["create", "delete", "get", "patch", "update"])
        .selectable(&["spec.clusterIP", "spec.type"])
        .columns(vec![
            column("Type", "string", "The type of the service.", 0, |o, _| json!(text(o, "/spec/type", "ClusterIP"))),
            column("Cluster-IP", "string", "The IP address of the service.", 0, |o, _| json!(text(o, "/spec/clusterIP", "<none>"))),
            column("External-IP", "string", "The external IP address of the service.", 0, |o, _| json!(external_ip(o))),
            column("Port(s)", "string", "The ports of the service.", 0, |o, _| json!(ports_cell(o))),
            column("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0, |o, now| age_cell(o, "metadata.creationTimestamp", now)),
            column("Selector", "string", "The label selector of the service.", 1, |o, _| json!(selector_cell(o))),
        ])
        .no_age_column()
        .schema(schema())
        .strategy(Services);
    def.allocate = Some(allocate);
    def.allocate_on_update = true;
    def
}

fn text(o: &Value, pointer: &str, default: &str) -> String {
    match o.pointer(pointer).and_then(Value::as_str) {
        Some(s) if !s.is_empty() => s.to_owned(),
        _ => default.to_owned(),
    }
}

fn external_ip(service: &Value) -> String {
    let kind = text(service, "/spec/type", "ClusterIP");
    if kind == "ExternalName" {
        return text(service, "/spec/externalName", "<none>");
    }
    let mut ips: Vec<String> = service
        .pointer("/spec/externalIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    ips.extend(
        service
            .pointer("/status/loadBalancer/ingress")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|i| {
                i["ip"]
                    .as_str()
                    .or(i["hostname"].as_str())
                    .map(str::to_owned)
            }),
    );
    if !ips.is_empty() {
        return ips.join(",");
    }
    if kind == "LoadBalancer" {
        "<pending>".into()
    } else {
        "<none>".into()
    }
}

fn ports_cell(service: &Value) -> String {
    let ports: Vec<String> = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let protocol = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64() {
                Some(node) => format!("{}:{node}/{protocol}", p["port"]),
                None => format!("{}/{protocol}", p["port"]),
            }
        })
        .collect();
    if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    }
}

fn selector_cell(service: &Value) -> String {
    let pairs: Vec<String> = service
        .pointer("/spec/selector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// The shape of a Service.
pub fn schema() -> Schema {
    top(vec![
        (
            "spec",
            obj(vec![
                (
                    "ports",
                    array(obj(vec![
                        ("name", Schema::String),
                        ("protocol", Schema::String),
                        ("appProtocol", Schema::String),
                        ("port", Schema::Int),
                        ("targetPort", Schema::IntOrString),
                        ("nodePort", Schema::Int),
                    ])),
                ),
                ("selector", strings()),
                ("clusterIP", Schema::String),
                ("clusterIPs", array(Schema::String)),
                ("type", Schema::String),
                ("externalIPs", array(Schema::String)),
                ("sessionAffinity", Schema::String),
                ("loadBalancerIP", Schema::String),
                ("loadBalancerSourceRanges", array(Schema::String)),
                ("externalName", Schema::String),
                ("externalTrafficPolicy", Schema::String),
                ("healthCheckNodePort", Schema::Int),
                ("publishNotReadyAddresses", Schema::Bool),
                ("sessionAffinityConfig", Schema::Any),
                ("ipFamilies", array(Schema::String)),
                ("ipFamilyPolicy", Schema::String),
                ("allocateLoadBalancerNodePorts", Schema::Bool),
                ("loadBalancerClass", Schema::String),
                ("internalTrafficPolicy", Schema::String),
                ("trafficDistribution", Schema::String),
            ]),
        ),
        (
            "status",
            obj(vec![
                ("loadBalancer", Schema::Any),
                ("conditions", array(Schema::Any)),
            ]),
        ),
    ])
}

fn set_default(map: &mut Map<String, Value>, key: &str, value: Value) {
    if map.get(key).is_none_or(Value::is_null) {
        map.insert(key.to_owned(), value);
    }
}

/// Each port's protocol (TCP) and target port (the port) when not given.
fn default_ports(ports: Option<&mut Value>) {
    for port in ports.and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(p) = port.as_object_mut() {
            set_default(p, "protocol", json!("TCP"));
            let number = p.get("port").cloned().unwrap_or(Value::Null);
            // Go clients send an unset IntOrString as 0; kube defaults it as absent.
            if p.get("targetPort") == Some(&json!(0)) {
                p.remove("targetPort");
            }
            set_default(p, "targetPort", number);
        }
    }
}

/// The defaults a Service's type brings (on create, and on an update to another type).
fn type_defaults(spec: &mut serde_json::Map<String, Value>) {
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    let kind = spec["type"].as_str().unwrap_or("ClusterIP").to_owned();
    if kind != "ExternalName" {
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
        set_default(spec, "ipFamilies", json!(["IPv4"]));
        set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
    }
    if kind == "NodePort" || kind == "LoadBalancer" {
        set_default(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
}

fn headless(spec: &Value) -> bool {
    spec["clusterIP"] == "None"
}

#[derive(Debug)]
struct Services;

impl Strategy for Services {
    /// kube's status strategy: the request's status and metadata, the stored spec.
    fn merge_status(&self, current: &Value, new: &Value) -> Option<Value> {
        Some(plinth_registry::strategy::with_stored_spec(current, new))
    }

    fn prepare_create(&self, object: &mut Value) {
        let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        type_defaults(spec);
        if spec["sessionAffinity"] == "ClientIP" {
            set_default(
                spec,
                "sessionAffinityConfig",
                json!({"clientIP": {"timeoutSeconds": 10800}}),
            );
        }
        // One address given as `clusterIP` is the list's first.
        if let Some(ip) = spec
            .get("clusterIP")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            && spec.get("clusterIPs").is_none_or(Value::is_null)
        {
            let ip = ip.to_owned();
            spec.insert("clusterIPs".into(), json!([ip]));
        }
        default_ports(spec.get_mut("ports"));
        if let Some(status) = object.as_object_mut() {
            status.insert("status".into(), json!({"loadBalancer": {}}));
        }
    }

    fn prepare_update(&self, object: &mut Value, old: &Value) {
        // Addresses stay as allocated.
        for key in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if object
                .pointer(&format!("/spec/{key}"))
                .is_none_or(Value::is_null)
                && let Some(value) = old.pointer(&format!("/spec/{key}")).cloned()
                && let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.insert(key.to_owned(), value);
            }
        }
        default_ports(object.pointer_mut("/spec/ports"));
        drop_type_dependent_fields(object, old);
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            type_defaults(spec);
        }
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let spec = object.get("spec").unwrap_or(&Value::Null);
        let mut causes = Vec::new();
        let kind = spec["type"].as_str().unwrap_or("ClusterIP");
        if !TYPES.contains(&kind) {
            causes.push(Cause::not_supported("spec.type", &json!(kind), TYPES));
        }
        let affinity = spec["sessionAffinity"].as_str().unwrap_or("None");
        if !["ClientIP", "None"].contains(&affinity) {
            causes.push(Cause::not_supported(
                "spec.sessionAffinity",
                &json!(affinity),
                &["ClientIP", "None"],
            ));
        }
        let ports = spec["ports"].as_array().cloned().unwrap_or_default();
        if kind == "ExternalName" {
            if spec["externalName"].as_str().is_none_or(str::is_empty) {
                causes.push(Cause::required("spec.externalName", ""));
            }
        } else if ports.is_empty() && !headless(spec) {
            causes.push(Cause::required("spec.ports", ""));
        }
        let mut names = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let path = format!("spec.ports[{i}]");
            let name = port["name"].as_str().unwrap_or("");
            if ports.len() > 1 && name.is_empty() {
                causes.push(Cause::required(format!("{path}.name"), ""));
            } else if !name.is_empty() {
                if names.contains(&name) {
                    causes.push(Cause::new(
                        "FieldValueDuplicate",
                        format!("{path}.name"),
                        format!("Duplicate value: {name:?}"),
                    ));
                }
                for m in plinth_core::validation::dns1123_label(name) {
                    causes.push(Cause::invalid(format!("{path}.name"), &json!(name), &m));
                }
                names.push(name);
            }
            match port["port"].as_i64() {
                Some(p) if (1..=65535).contains(&p) => {}
                Some(p) => causes.push(Cause::invalid(
                    format!("{path}.port"),
                    &json!(p),
                    "must be between 1 and 65535, inclusive",
                )),
                None => causes.push(Cause::required(format!("{path}.port"), "")),
            }
            let protocol = port["protocol"].as_str().unwrap_or("TCP");
            if !["TCP", "UDP", "SCTP"].contains(&protocol) {
                causes.push(Cause::not_supported(
                    format!("{path}.protocol"),
                    &json!(protocol),
                    &["SCTP", "TCP", "UDP"],
                ));
            }
            if let Some(node_port) = port["nodePort"].as_i64() {
                if kind == "ClusterIP" {
                    causes.push(Cause::forbidden(
                        format!("{path}.nodePort"),
                        "may not be used when `type` is 'ClusterIP'",
                    ));
                } else if !NODE_PORTS.contains(&u16::try_from(node_port).unwrap_or(0)) {
                    causes.push(Cause::invalid(
                        format!("{path}.nodePort"),
                        &json!(node_port),
                        "provided port is not in the valid range. The range of valid ports is 30000-32767",
                    ));
                }
            }
        }
        if let Some(ip) = spec["clusterIP"]
            .as_str()
            .filter(|s| !s.is_empty() && *s != "None")
            && ip.parse::<Ipv4Addr>().is_err()
        {
            causes.push(Cause::invalid(
                "spec.clusterIPs[0]",
                &json!(ip),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
        if let Some(old) = old {
            let before = old
                .pointer("/spec/clusterIP")
                .and_then(Value::as_str)
                .unwrap_or("");
            let after = spec["clusterIP"].as_str().unwrap_or("");
            if !before.is_empty() && before != after && kind != "ExternalName" {
                causes.push(Cause::invalid(
                    "spec.clusterIPs[0]",
                    &json!(after),
                    "may not change once set",
                ));
            }
        }
        causes
    }

    fn lists(&self) -> &[(FieldPath, ListMerge)] {
        &[("spec.ports", ListMerge::Keyed("port"))]
    }
}

/// Addresses handed out but maybe not stored yet (a create between allocation and write):
/// not given again for a while.
static RESERVED: Mutex<Option<HashMap<String, Instant>>> = Mutex::new(None);
const RESERVATION: Duration = Duration::from_secs(30);

fn reserve(taken: &BTreeSet<String>, candidates: impl Iterator<Item = String>) -> Option<String> {
    let mut reserved = RESERVED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let reserved = reserved.get_or_insert_with(HashMap::new);
    reserved.retain(|_, at| at.elapsed() < RESERVATION);
    let chosen = candidates
        .into_iter()
        .find(|c| !taken.contains(c) && !reserved.contains_key(c))?;
    reserved.insert(chosen.clone(), Instant::now());
    Some(chosen)
}

/// kube's `dropTypeDependentFields`: a Service changing to a type that no longer needs what
/// was allocated or defaulted for the old one loses it — when the request left it as it was
/// (a value the user changed stays, for validation to judge).
fn drop_type_dependent_fields(object: &mut Value, old: &Value) {
    let kind = |o: &Value| {
        o.pointer("/spec/type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_owned()
    };
    let (was, now) = (kind(old), kind(object));
    let node_ports = |o: &Value| -> Vec<Value> {
        o.pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| p["nodePort"].clone())
            .collect()
    };
    let same_node_ports = node_ports(object) == node_ports(old);
    let unchanged = |object: &Value, key: &str| {
        object.pointer(&format!("/spec/{key}")) == old.pointer(&format!("/spec/{key}"))
    };
    let needs_node_port = |k: &str| k == "NodePort" || k == "LoadBalancer";
    let mut dropped = Vec::new();
    if was != "ExternalName" && now == "ExternalName" {
        if unchanged(object, "clusterIP") && unchanged(object, "clusterIPs") {
            dropped.extend(["clusterIP", "clusterIPs"]);
        }
        for key in ["ipFamilies", "ipFamilyPolicy", "internalTrafficPolicy"] {
            if unchanged(object, key) {
                dropped.push(key);
            }
        }
    }
    if needs_node_port(&was) && !needs_node_port(&now) {
        for key in ["externalTrafficPolicy", "healthCheckNodePort"] {
            if unchanged(object, key) {
                dropped.push(key);
            }
        }
        if same_node_ports
            && let Some(ports) = object
                .pointer_mut("/spec/ports")
                .and_then(Value::as_array_mut)
        {
            for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                port.remove("nodePort");
            }
        }
    }
    if was == "LoadBalancer" && now != "LoadBalancer" {
        for key in ["allocateLoadBalancerNodePorts", "loadBalancerClass"] {
            if unchanged(object, key) {
                dropped.push(key);
            }
        }
    }
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        for key in dropped {
            spec.remove(key);
        }
    }
}

/// Allocates a Service's ClusterIP and node ports (kube's service REST `Create`, and
/// `Update` for a type that needs more than the old one): what every other Service holds is
/// taken; a requested address must be free and in the range; what the Service itself holds
/// already stays its own.
fn allocate<'a>(
    objects: &'a dyn plinth_registry::resources::Objects,
    service: &'a mut Value,
) -> BoxFuture<'a, Result<(), ApiError>> {
    Box::pin(async move {
        let name = plinth_core::meta::name(service).unwrap_or("").to_owned();
        let invalid = |cause: Cause| ApiError::invalid("", "Service", &name, vec![cause]);
        let kind = service
            .pointer("/spec/type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_owned();
        if kind == "ExternalName" {
            return Ok(());
        }
        let def = objects
            .resource("", "v1", "services")
            .ok_or_else(|| ApiError::internal("services are not served"))?;
        let all = objects.list(&def, None, &ListOptions::default()).await?;
        let namespace = plinth_core::meta::namespace(service)
            .unwrap_or("")
            .to_owned();
        let is_self = |s: &Value| {
            plinth_core::meta::name(s) == Some(name.as_str())
                && plinth_core::meta::namespace(s) == Some(namespace.as_str())
        };
        let stored = all["items"]
            .as_array()
            .and_then(|items| items.iter().find(|s| is_self(s)))
            .cloned();
        let items: Vec<Value> = all["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| !is_self(s))
            .cloned()
            .collect();
        let own_ip = stored
            .as_ref()
            .and_then(|s| s.pointer("/spec/clusterIP"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let own_ports: BTreeSet<i64> = stored
            .as_ref()
            .and_then(|s| s.pointer("/spec/ports"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p["nodePort"].as_i64())
            .collect();
        let ips: BTreeSet<String> = items
            .iter()
            .filter_map(|s| s.pointer("/spec/clusterIP").and_then(Value::as_str))
            .map(str::to_owned)
            .collect();
        let ports: BTreeSet<String> = items
            .iter()
            .flat_map(|s| {
                s.pointer("/spec/ports")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|p| p["nodePort"].as_i64().map(|n| n.to_string()))
            .collect();
        let requested = service
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if requested != "None" && own_ip.as_deref() != Some(requested.as_str()) {
            let ip = if requested.is_empty() {
                // .0 is the network, .1 the kubernetes Service's and .10 the cluster DNS's
                // (both asked for by address), the last the broadcast.
                let range = service_range();
                let candidates = (2..range.size().saturating_sub(1))
                    .filter(|n| *n != 10)
                    .filter_map(|n| range.nth(n))
                    .map(|ip| ip.to_string());
                reserve(&ips, candidates).ok_or_else(|| {
                    ApiError::internal("failed to allocate a serviceIP: range is full")
                })?
            } else {
                let range = service_range();
                let in_range = requested.parse::<Ipv4Addr>().is_ok_and(|ip| {
                    range
                        .index_of(ip)
                        .is_some_and(|n| n > 0 && n + 1 < range.size())
                });
                if !in_range {
                    return Err(invalid(Cause::invalid(
                        "spec.clusterIPs",
                        &json!([requested]),
                        &format!(
                            "failed to allocate IP {requested}: the provided IP ({requested}) is not in the valid range. The range of valid IPs is {range}"
                        ),
                    )));
                }
                if ips.contains(&requested)
                    || reserve(&ips, std::iter::once(requested.clone())).is_none()
                {
                    return Err(invalid(Cause::invalid(
                        "spec.clusterIPs",
                        &json!([requested]),
                        &format!(
                            "failed to allocate IP {requested}: provided IP is already allocated"
                        ),
                    )));
                }
                requested
            };
            service["spec"]["clusterIP"] = json!(ip);
            service["spec"]["clusterIPs"] = json!([ip]);
        }
        if kind == "NodePort" || kind == "LoadBalancer" {
            let mut taken = ports;
            for port in service
                .pointer_mut("/spec/ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                match port["nodePort"].as_i64() {
                    Some(asked) if own_ports.contains(&asked) => {
                        taken.insert(asked.to_string());
                    }
                    Some(asked) => {
                        if taken.contains(&asked.to_string()) {
                            return Err(invalid(Cause::invalid(
                                "spec.ports[0].nodePort",
                                &json!(asked),
                                "provided port is already allocated",
                            )));
                        }
                        taken.insert(asked.to_string());
                    }
                    None => {
                        let chosen = reserve(&taken, NODE_PORTS.map(|p| p.to_string()))
                            .ok_or_else(|| {
                                ApiError::internal("failed to allocate a nodePort: range is full")
                            })?;
                        taken.insert(chosen.clone());
                        port["nodePort"] = json!(chosen.parse::<u16>().unwrap_or(0));
                    }
                }
            }
        }
        Ok(())
    })
}
