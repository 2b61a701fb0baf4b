//! core/v1 Endpoints: the addresses behind a Service, kept by the endpoints controller.

use plinth_core::Cause;
use serde_json::{Value, json};

use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::{Schema, array, obj, object_reference, top};
use plinth_registry::strategy::Strategy;

/// The `endpoints` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("", "v1", "Endpoints", "endpoints")
        .short_names(&["ep"])
        .columns(vec![column(
            "Endpoints",
            "string",
            "Endpoints is the list of endpoints in the set.",
            0,
            |o, _| json!(endpoints_cell(o)),
        )])
        .schema(schema())
        .strategy(Endpoints)
}

/// kubectl's `ENDPOINTS`: `ip:port` pairs, three then `+ N more...`.
fn endpoints_cell(object: &Value) -> String {
    let mut shown = Vec::new();
    for subset in object["subsets"].as_array().into_iter().flatten() {
        for address in subset["addresses"].as_array().into_iter().flatten() {
            let ip = address["ip"].as_str().unwrap_or("");
            let ports = subset["ports"].as_array().cloned().unwrap_or_default();
            if ports.is_empty() {
                shown.push(ip.to_owned());
            }
            for port in ports {
                shown.push(format!("{ip}:{}", port["port"]));
            }
        }
    }
    match shown.len() {
        0 => "<none>".into(),
        n if n > 3 => format!("{} + {} more...", shown[..3].join(","), n - 3),
        _ => shown.join(","),
    }
}

fn address() -> Schema {
    obj(vec![
        ("ip", Schema::String),
        ("hostname", Schema::String),
        ("nodeName", Schema::String),
        ("targetRef", object_reference()),
    ])
}

/// The shape of Endpoints.
pub fn schema() -> Schema {
    top(vec![(
        "subsets",
        array(obj(vec![
            ("addresses", array(address())),
            ("notReadyAddresses", array(address())),
            (
                "ports",
                array(obj(vec![
                    ("name", Schema::String),
                    ("port", Schema::Int),
                    ("protocol", Schema::String),
                    ("appProtocol", Schema::String),
                ])),
            ),
        ])),
    )])
}

#[derive(Debug)]
struct Endpoints;

impl Strategy for Endpoints {
    fn prepare_create(&self, object: &mut Value) {
        for port in object
            .get_mut("subsets")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(|s| s.get_mut("ports").and_then(Value::as_array_mut))
            .flatten()
        {
            if port.get("protocol").is_none_or(Value::is_null) {
                port["protocol"] = json!("TCP");
            }
        }
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        self.prepare_create(object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        for (i, subset) in object["subsets"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            for key in ["addresses", "notReadyAddresses"] {
                for (j, address) in subset[key].as_array().into_iter().flatten().enumerate() {
                    let ip = address["ip"].as_str().unwrap_or("");
                    if ip.parse::<std::net::IpAddr>().is_err() {
                        causes.push(Cause::invalid(
                            format!("subsets[{i}].{key}[{j}].ip"),
                            &json!(ip),
                            "must be a valid IP address",
                        ));
                    }
                }
            }
            for (j, port) in subset["ports"].as_array().into_iter().flatten().enumerate() {
                let ok = port["port"]
                    .as_i64()
                    .is_some_and(|p| (1..=65535).contains(&p));
                if !ok {
                    causes.push(Cause::invalid(
                        format!("subsets[{i}].ports[{j}].port"),
                        &port["port"],
                        "must be between 1 and 65535, inclusive",
                    ));
                }
            }
        }
        causes
    }
}
