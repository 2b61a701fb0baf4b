//! networking.k8s.io/v1 IngressClass: which controller serves the Ingresses of a class; the
//! one annotated [`DEFAULT_ANNOTATION`] is given to Ingresses that name none.

use plinth_core::Cause;
use plinth_core::validation::{dns1123_label, dns1123_subdomain};
use serde_json::{Value, json};

use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::{Schema, obj, top};
use plinth_registry::strategy::Strategy;

use super::validate_typed_reference;

/// The annotation that makes a class the default.
pub const DEFAULT_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";

/// The `ingressclasses` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("networking.k8s.io", "v1", "IngressClass", "ingressclasses")
        .cluster_scoped()
        .columns(vec![
            column(
                "Controller",
                "string",
                "Controller that is responsible for handling this class",
                0,
                |o, _| o["spec"]["controller"].clone(),
            ),
            column(
                "Parameters",
                "string",
                "A reference to a resource with additional parameters",
                0,
                |o, _| json!(parameters(o)),
            ),
        ])
        .schema(top(vec![(
            "spec",
            obj(vec![
                ("controller", Schema::String),
                (
                    "parameters",
                    obj(vec![
                        ("apiGroup", Schema::String),
                        ("kind", Schema::String),
                        ("name", Schema::String),
                        ("scope", Schema::String),
                        ("namespace", Schema::String),
                    ]),
                ),
            ]),
        )]))
        .strategy(IngressClasses)
}

/// The Parameters cell: `Kind.group/name`, or `<none>`.
fn parameters(class: &Value) -> String {
    let Some(p) = class.pointer("/spec/parameters").filter(|p| p.is_object()) else {
        return "<none>".into();
    };
    let mut text = p["kind"].as_str().unwrap_or("").to_owned();
    if let Some(group) = p["apiGroup"].as_str() {
        text = format!("{text}.{group}");
    }
    format!("{text}/{}", p["name"].as_str().unwrap_or(""))
}

#[derive(Debug)]
struct IngressClasses;

impl Strategy for IngressClasses {
    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let controller = object["spec"]["controller"].as_str().unwrap_or("");
        if controller.len() > 250 {
            causes.push(Cause::too_long("spec.controller", 250));
        }
        causes.extend(domain_prefixed_path("spec.controller", controller));
        if let Some(params) = object.pointer("/spec/parameters").filter(|p| !p.is_null()) {
            causes.extend(validate_typed_reference(params, "spec.parameters"));
            match params["scope"].as_str() {
                None => causes.push(Cause::required("spec.parameters.scope", "")),
                Some("Namespace") => match params["namespace"].as_str() {
                    None => causes.push(Cause::required(
                        "spec.parameters.namespace",
                        "`parameters.scope` is set to 'Namespace'",
                    )),
                    Some(ns) => {
                        for msg in dns1123_label(ns) {
                            causes.push(Cause::invalid(
                                "spec.parameters.namespace",
                                &json!(ns),
                                &msg,
                            ));
                        }
                    }
                },
                Some("Cluster") => {
                    if params.get("namespace").is_some_and(|n| !n.is_null()) {
                        causes.push(Cause::forbidden(
                            "spec.parameters.namespace",
                            "`parameters.scope` is set to 'Cluster'",
                        ));
                    }
                }
                Some(other) => causes.push(Cause::not_supported(
                    "spec.parameters.scope",
                    &json!(other),
                    &["Cluster", "Namespace"],
                )),
            }
        }
        if let Some(old) = old
            && old["spec"]["controller"] != object["spec"]["controller"]
        {
            causes.push(Cause::immutable("spec.controller", &json!(controller)));
        }
        causes
    }
}

/// apimachinery's `IsDomainPrefixedPath`: `example.com/name`.
pub(crate) fn domain_prefixed_path(path: &str, value: &str) -> Vec<Cause> {
    if value.is_empty() {
        return vec![Cause::required(path, "")];
    }
    let Some((host, rest)) = value
        .split_once('/')
        .filter(|(h, r)| !h.is_empty() && !r.is_empty())
    else {
        return vec![Cause::invalid(
            path,
            &json!(value),
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        )];
    };
    let mut causes: Vec<Cause> = dns1123_subdomain(host)
        .iter()
        .map(|msg| Cause::invalid(path, &json!(host), msg))
        .collect();
    let path_ok = rest
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/-._~%!$&'()*+,;=:".contains(&b));
    if !path_ok {
        causes.push(Cause::invalid(
            path,
            &json!(rest),
            "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')",
        ));
    }
    causes
}
