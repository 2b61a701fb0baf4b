//! networking.k8s.io/v1: Ingresses and their classes, NetworkPolicies (stored and validated;
//! enforcing them belongs to the pod network).

pub mod ingress;
pub mod ingressclass;
pub mod networkpolicy;

use plinth_core::Cause;
use plinth_core::validation::{
    dns1035_label, dns1123_subdomain, path_segment_name, port_name, port_number,
};
use serde_json::{Value, json};

use plinth_registry::schema::{Schema, obj};

use crate::apps::go_invalid;

/// The shape of a `TypedLocalObjectReference`.
pub(crate) fn typed_reference() -> Schema {
    obj(vec![
        ("apiGroup", Schema::String),
        ("kind", Schema::String),
        ("name", Schema::String),
    ])
}

/// A `TypedLocalObjectReference` (an Ingress's resource backend, a class's parameters).
pub(crate) fn validate_typed_reference(reference: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(group) = reference["apiGroup"].as_str() {
        for msg in dns1123_subdomain(group) {
            causes.push(Cause::invalid(
                format!("{path}.apiGroup"),
                &json!(group),
                &msg,
            ));
        }
    }
    for field in ["kind", "name"] {
        match reference[field].as_str().filter(|s| !s.is_empty()) {
            None => causes.push(Cause::required(
                format!("{path}.{field}"),
                &format!("{field} is required"),
            )),
            Some(value) => {
                for msg in path_segment_name(value) {
                    causes.push(Cause::invalid(
                        format!("{path}.{field}"),
                        &json!(value),
                        &msg,
                    ));
                }
            }
        }
    }
    causes
}

/// An Ingress backend: a Service (name and one of port name or number) or a resource.
pub(crate) fn validate_backend(backend: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let resource = backend.get("resource").filter(|v| !v.is_null());
    let service = backend.get("service").filter(|v| !v.is_null());
    match (resource, service) {
        (Some(_), Some(_)) => {
            causes.push(go_invalid(
                path,
                "\"\"",
                "cannot set both resource and service backends",
            ));
        }
        (Some(resource), None) => {
            causes.extend(validate_typed_reference(
                resource,
                &format!("{path}.resource"),
            ));
        }
        (None, Some(service)) => {
            match service["name"].as_str().filter(|s| !s.is_empty()) {
                None => causes.push(Cause::required(format!("{path}.service.name"), "")),
                Some(name) => {
                    for msg in dns1035_label(name) {
                        causes.push(Cause::invalid(
                            format!("{path}.service.name"),
                            &json!(name),
                            &msg,
                        ));
                    }
                }
            }
            let port = &service["port"];
            let name = port["name"].as_str().filter(|s| !s.is_empty());
            let number = port["number"].as_i64().filter(|n| *n != 0);
            match (name, number) {
                (Some(_), Some(_)) => causes.push(go_invalid(
                    path,
                    "\"\"",
                    "cannot set both port name & port number",
                )),
                (Some(name), None) => {
                    for msg in port_name(name) {
                        causes.push(Cause::invalid(
                            format!("{path}.service.port.name"),
                            &json!(name),
                            &msg,
                        ));
                    }
                }
                (None, Some(number)) => {
                    for msg in port_number(number) {
                        causes.push(Cause::invalid(
                            format!("{path}.service.port.number"),
                            &json!(number),
                            &msg,
                        ));
                    }
                }
                (None, None) => {
                    causes.push(Cause::required(path, "port name or number is required"))
                }
            }
        }
        (None, None) => causes.push(go_invalid(
            path,
            "\"\"",
            "resource or service backend is required",
        )),
    }
    causes
}
