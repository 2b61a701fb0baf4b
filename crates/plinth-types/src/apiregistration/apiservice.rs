//! APIService: a group/version and who serves it, with its `Available` condition.

use plinth_core::Cause;
use serde_json::{Value, json};

use plinth_registry::resources::{NameRule, ResourceDef, age_cell, column};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::strategy::Strategy;

/// The annotation giving an extension server's URL while Services cannot be resolved.
pub const URL_ANNOTATION: &str = "plinth.dev/url";

/// The `apiservices` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("apiregistration.k8s.io", "v1", "APIService", "apiservices")
        .name_rule(NameRule::PathSegment)
        .cluster_scoped()
        .with_status()
        .columns(vec![
            column(
                "Service",
                "string",
                "The service serving it",
                0,
                |o: &Value, _| match o.pointer("/spec/service").filter(|s| s.is_object()) {
                    Some(s) => json!(format!(
                        "{}/{}",
                        s.get("namespace").and_then(Value::as_str).unwrap_or(""),
                        s.get("name").and_then(Value::as_str).unwrap_or("")
                    )),
                    None => json!("Local"),
                },
            ),
            column(
                "Available",
                "string",
                "Whether it answers",
                0,
                |o: &Value, _| {
                    let available = o
                        .pointer("/status/conditions")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .find(|c| c["type"] == "Available");
                    match available {
                        Some(c) if c["status"] == "True" => json!("True"),
                        Some(c) => json!(format!(
                            "{} ({})",
                            c["status"].as_str().unwrap_or("Unknown"),
                            c["reason"].as_str().unwrap_or("")
                        )),
                        None => json!("Unknown"),
                    }
                },
            ),
            column(
                "Age",
                "string",
                "Time since creation",
                0,
                |o: &Value, now| age_cell(o, "metadata.creationTimestamp", now),
            ),
        ])
        .no_age_column()
        .schema(top(vec![
            (
                "spec",
                obj(vec![
                    (
                        "service",
                        obj(vec![
                            ("namespace", Schema::String),
                            ("name", Schema::String),
                            ("port", Schema::Int),
                        ]),
                    ),
                    ("group", Schema::String),
                    ("version", Schema::String),
                    ("insecureSkipTLSVerify", Schema::Bool),
                    ("caBundle", Schema::Bytes),
                    ("groupPriorityMinimum", Schema::Int),
                    ("versionPriority", Schema::Int),
                ]),
            ),
            ("status", obj(vec![("conditions", array(Schema::Any))])),
        ]))
        .strategy(ApiServices)
}

/// The local APIService of a built-in group/version (as kube-apiserver registers them).
pub fn local(group: &str, version: &str) -> Value {
    let name = format!("{version}.{group}");
    json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name, "labels": {"kube-aggregator.kubernetes.io/automanaged": "onstart"}},
        "spec": {"group": group, "version": version, "groupPriorityMinimum": 18000, "versionPriority": 15}})
}

#[derive(Debug)]
struct ApiServices;

impl Strategy for ApiServices {
    fn prepare_create(&self, object: &mut Value) {
        if let Some(service) = object
            .pointer_mut("/spec/service")
            .and_then(Value::as_object_mut)
        {
            service.entry("port").or_insert_with(|| json!(443));
        }
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        self.prepare_create(object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let spec = object.get("spec").unwrap_or(&Value::Null);
        let text = |key: &str| spec.get(key).and_then(Value::as_str).unwrap_or("");
        let (group, version) = (text("group"), text("version"));
        let name = plinth_core::meta::name(object).unwrap_or("");
        if version.is_empty() {
            causes.push(Cause::required("spec.version", ""));
        }
        if name != format!("{version}.{group}") {
            causes.push(Cause::invalid(
                "metadata.name",
                &json!(name),
                &format!("must be `spec.version+\".\"+spec.group`: {version:?}"),
            ));
        }
        let local = spec.get("service").is_none_or(Value::is_null);
        if !local {
            for (key, low, high) in [
                ("groupPriorityMinimum", 1, 20_000),
                ("versionPriority", 1, 1_000),
            ] {
                let value = spec.get(key).and_then(Value::as_i64).unwrap_or(0);
                if !(low..=high).contains(&value) {
                    causes.push(Cause::invalid(
                        format!("spec.{key}"),
                        &json!(value),
                        &format!("must be positive and less than {high}"),
                    ));
                }
            }
            let skip = spec.get("insecureSkipTLSVerify") == Some(&json!(true));
            let bundle = !text("caBundle").is_empty();
            if skip && bundle {
                causes.push(Cause::invalid(
                    "spec.insecureSkipTLSVerify",
                    &json!(true),
                    "may not be true if caBundle is present",
                ));
            }
        }
        causes
    }
}
