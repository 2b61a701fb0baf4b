//! discovery.k8s.io/v1 EndpointSlice: a Service's endpoints with their conditions (ready,
//! serving, terminating), kept by the EndpointSlice controller.

use plinth_core::Cause;
use serde_json::{Value, json};

use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::{Schema, array, obj, object_reference, strings, top};
use plinth_registry::strategy::Strategy;

const ADDRESS_TYPES: &[&str] = &["IPv4", "IPv6", "FQDN"];

/// The `endpointslices` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices")
        .columns(vec![
            column(
                "AddressType",
                "string",
                "The IP protocol for this slice",
                0,
                |o, _| o["addressType"].clone(),
            ),
            column("Ports", "string", "The ports of this slice", 0, |o, _| {
                json!(ports_cell(o))
            }),
            column(
                "Endpoints",
                "string",
                "The endpoints of this slice",
                0,
                |o, _| json!(endpoints_cell(o)),
            ),
        ])
        .schema(schema())
        .strategy(EndpointSlices)
}

fn ports_cell(slice: &Value) -> String {
    let ports: Vec<String> = slice["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            p["port"]
                .as_i64()
                .map_or_else(|| "<unset>".to_owned(), |n| n.to_string())
        })
        .collect();
    if ports.is_empty() {
        "<unset>".into()
    } else {
        ports.join(",")
    }
}

fn endpoints_cell(slice: &Value) -> String {
    let all: Vec<String> = slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    match all.len() {
        0 => "<unset>".into(),
        n if n > 3 => format!("{} + {} more...", all[..3].join(","), n - 3),
        _ => all.join(","),
    }
}

/// The shape of an EndpointSlice.
pub fn schema() -> Schema {
    top(vec![
        ("addressType", Schema::String),
        (
            "endpoints",
            array(obj(vec![
                ("addresses", array(Schema::String)),
                (
                    "conditions",
                    obj(vec![
                        ("ready", Schema::Bool),
                        ("serving", Schema::Bool),
                        ("terminating", Schema::Bool),
                    ]),
                ),
                ("hostname", Schema::String),
                ("targetRef", object_reference()),
                ("deprecatedTopology", strings()),
                ("nodeName", Schema::String),
                ("zone", Schema::String),
                ("hints", Schema::Any),
            ])),
        ),
        (
            "ports",
            array(obj(vec![
                ("name", Schema::String),
                ("protocol", Schema::String),
                ("port", Schema::Int),
                ("appProtocol", Schema::String),
            ])),
        ),
    ])
}

#[derive(Debug)]
struct EndpointSlices;

impl Strategy for EndpointSlices {
    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let kind = object["addressType"].as_str().unwrap_or("");
        if kind.is_empty() {
            causes.push(Cause::required("addressType", ""));
        } else if !ADDRESS_TYPES.contains(&kind) {
            causes.push(Cause::not_supported(
                "addressType",
                &json!(kind),
                ADDRESS_TYPES,
            ));
        }
        if let Some(old) = old
            && old["addressType"] != object["addressType"]
        {
            causes.push(Cause::immutable("addressType", &object["addressType"]));
        }
        for (i, endpoint) in object["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let addresses = endpoint["addresses"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if addresses.is_empty() {
                causes.push(Cause::required(
                    format!("endpoints[{i}].addresses"),
                    "must contain at least 1 address",
                ));
            }
        }
        causes
    }
}
