//! networking.k8s.io/v1 Ingress: HTTP routes from hosts and paths to Services. Stored and
//! validated as kube validates them; a new Ingress without a class gets the default
//! IngressClass (kube's DefaultIngressClass admission plugin). No controller serves them.

use futures::future::BoxFuture;
use plinth_core::validation::{dns1123_subdomain, parse_ip, wildcard_dns1123_subdomain};
use plinth_core::{ApiError, Cause};
use serde_json::{Value, json};

use plinth_registry::ListOptions;
use plinth_registry::resources::{Objects, ResourceDef, column};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::strategy::Strategy;

use super::{typed_reference, validate_backend};
use crate::apps::go_invalid;

/// The annotation that names an Ingress's class, from before `spec.ingressClassName`.
pub const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// The `ingresses` resource.
pub fn resource() -> ResourceDef {
    let backend = || {
        obj(vec![
            (
                "service",
                obj(vec![
                    ("name", Schema::String),
                    (
                        "port",
                        obj(vec![("name", Schema::String), ("number", Schema::Int)]),
                    ),
                ]),
            ),
            ("resource", typed_reference()),
        ])
    };
    let mut def = ResourceDef::new("networking.k8s.io", "v1", "Ingress", "ingresses")
        .short_names(&["ing"])
        .with_status()
        .columns(vec![
            column("Class", "string", "The name of the IngressClass resource that should be used for additional configuration", 0, |o, _| {
                json!(o.pointer("/spec/ingressClassName").and_then(Value::as_str).unwrap_or("<none>"))
            }),
            column("Hosts", "string", "Hosts that incoming requests are matched against before the ingress rule", 0, |o, _| json!(hosts(o))),
            column("Address", "string", "Address is a list containing ingress points for the load-balancer", 0, |o, _| json!(address(o))),
            column("Ports", "string", "Ports of TLS configurations that open", 0, |o, _| {
                let tls = o.pointer("/spec/tls").and_then(Value::as_array).is_some_and(|t| !t.is_empty());
                json!(if tls { "80, 443" } else { "80" })
            }),
        ])
        .schema(top(vec![
            (
                "spec",
                obj(vec![
                    ("ingressClassName", Schema::String),
                    ("defaultBackend", backend()),
                    (
                        "tls",
                        array(obj(vec![("hosts", array(Schema::String)), ("secretName", Schema::String)])),
                    ),
                    (
                        "rules",
                        array(obj(vec![
                            ("host", Schema::String),
                            (
                                "http",
                                obj(vec![(
                                    "paths",
                                    array(obj(vec![
                                        ("path", Schema::String),
                                        ("pathType", Schema::String),
                                        ("backend", backend()),
                                    ])),
                                )]),
                            ),
                        ])),
                    ),
                ]),
            ),
            (
                "status",
                obj(vec![(
                    "loadBalancer",
                    obj(vec![(
                        "ingress",
                        array(obj(vec![
                            ("ip", Schema::String),
                            ("hostname", Schema::String),
                            (
                                "ports",
                                array(obj(vec![
                                    ("port", Schema::Int),
                                    ("protocol", Schema::String),
                                    ("error", Schema::String),
                                ])),
                            ),
                        ])),
                    )]),
                )]),
            ),
        ]))
        .strategy(Ingresses);
    def.generation = true;
    def.allocate = Some(default_class);
    def
}

/// The Hosts cell: up to three hosts, `*` when no rule names one.
fn hosts(ingress: &Value) -> String {
    let rules = ingress
        .pointer("/spec/rules")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut list = Vec::new();
    let mut more = false;
    for rule in rules {
        if list.len() == 3 {
            more = true;
        }
        if let Some(host) = rule["host"].as_str().filter(|h| !more && !h.is_empty()) {
            list.push(host);
        }
    }
    if list.is_empty() {
        return "*".into();
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", rules.len() - 3)
    } else {
        joined
    }
}

/// The Address cell: the load balancer's IPs or host names, sorted, at most 16 characters.
fn address(ingress: &Value) -> String {
    let mut found: Vec<&str> = ingress
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| {
            i["ip"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or_else(|| i["hostname"].as_str().filter(|s| !s.is_empty()))
        })
        .collect();
    found.sort_unstable();
    found.dedup();
    let joined = found.join(",");
    if joined.len() > 16 {
        format!("{}...", joined.chars().take(13).collect::<String>())
    } else {
        joined
    }
}

/// DefaultIngressClass: a new Ingress that names no class (neither `spec.ingressClassName`
/// nor the annotation) gets the newest IngressClass annotated as the default.
fn default_class<'a>(
    objects: &'a dyn Objects,
    ingress: &'a mut Value,
) -> BoxFuture<'a, Result<(), ApiError>> {
    Box::pin(async move {
        let named = ingress
            .pointer("/spec/ingressClassName")
            .is_some_and(|c| !c.is_null())
            || ingress
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(CLASS_ANNOTATION))
                .is_some();
        if named {
            return Ok(());
        }
        let Some(def) = objects.resource("networking.k8s.io", "v1", "ingressclasses") else {
            return Ok(());
        };
        let classes = objects.list(&def, None, &ListOptions::default()).await?;
        let mut defaults: Vec<&Value> = classes["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| {
                c.pointer("/metadata/annotations")
                    .and_then(|a| a.get(super::ingressclass::DEFAULT_ANNOTATION))
                    .and_then(Value::as_str)
                    == Some("true")
            })
            .collect();
        // The newest first; of two created in the same second, the first by name.
        defaults.sort_by(|a, b| {
            let created = |c: &Value| {
                c.pointer("/metadata/creationTimestamp")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            created(b)
                .cmp(&created(a))
                .then_with(|| plinth_core::meta::name(a).cmp(&plinth_core::meta::name(b)))
        });
        if let (Some(class), Some(spec)) = (
            defaults.first().and_then(|c| plinth_core::meta::name(c)),
            ingress.get_mut("spec").and_then(Value::as_object_mut),
        ) {
            spec.insert("ingressClassName".into(), json!(class));
        }
        Ok(())
    })
}

#[derive(Debug)]
struct Ingresses;

impl Strategy for Ingresses {
    /// kube's status strategy: the request's status and metadata, the stored spec.
    fn merge_status(&self, current: &Value, new: &Value) -> Option<Value> {
        Some(plinth_registry::strategy::with_stored_spec(current, new))
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let spec = &object["spec"];
        let mut causes = Vec::new();
        let rules = spec["rules"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let default_backend = spec.get("defaultBackend").filter(|b| !b.is_null());
        if rules.is_empty() && default_backend.is_none() {
            causes.push(go_invalid(
                "spec",
                "[]networking.IngressRule(nil)",
                "either `defaultBackend` or `rules` must be specified",
            ));
        }
        if let Some(backend) = default_backend {
            causes.extend(validate_backend(backend, "spec.defaultBackend"));
        }
        for (i, rule) in rules.iter().enumerate() {
            let path = format!("spec.rules[{i}]");
            let host = rule["host"].as_str().unwrap_or("");
            if !host.is_empty() {
                if parse_ip(host).is_some() {
                    causes.push(Cause::invalid(
                        format!("{path}.host"),
                        &json!(host),
                        "must be a DNS name, not an IP address",
                    ));
                }
                for msg in host_messages(host) {
                    causes.push(Cause::invalid(format!("{path}.host"), &json!(host), &msg));
                }
            }
            if let Some(http) = rule.get("http").filter(|h| !h.is_null()) {
                causes.extend(validate_http(http, &format!("{path}.http")));
            }
        }
        for (t, tls) in spec["tls"].as_array().into_iter().flatten().enumerate() {
            for (i, host) in tls["hosts"].as_array().into_iter().flatten().enumerate() {
                let host = host.as_str().unwrap_or("");
                for msg in host_messages(host) {
                    causes.push(Cause::invalid(
                        format!("spec.tls[{t}].hosts[{i}]"),
                        &json!(host),
                        &msg,
                    ));
                }
            }
            let secret = tls["secretName"].as_str().unwrap_or("");
            if !secret.is_empty() {
                for msg in dns1123_subdomain(secret) {
                    causes.push(Cause::invalid(
                        format!("spec.tls[{t}].secretName"),
                        &json!(secret),
                        &msg,
                    ));
                }
            }
        }
        if let Some(class) = spec["ingressClassName"].as_str() {
            for msg in dns1123_subdomain(class) {
                causes.push(Cause::invalid("spec.ingressClassName", &json!(class), &msg));
            }
        }
        if old.is_none() {
            let annotation = object
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(CLASS_ANNOTATION))
                .and_then(Value::as_str);
            if let (Some(annotation), Some(class)) = (annotation, spec["ingressClassName"].as_str())
                && annotation != class
            {
                causes.push(Cause::invalid(
                    format!("annotations.{CLASS_ANNOTATION}"),
                    &json!(annotation),
                    "must match `ingressClassName` when both are specified",
                ));
            }
        }
        causes
    }
}

/// What is wrong with a rule's or a TLS entry's host: a wildcard subdomain (`*.example.com`)
/// or a plain one.
fn host_messages(host: &str) -> Vec<String> {
    if host.contains('*') {
        wildcard_dns1123_subdomain(host)
    } else {
        dns1123_subdomain(host)
    }
}

/// An HTTP rule's paths.
fn validate_http(http: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let paths = http["paths"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if paths.is_empty() {
        causes.push(Cause::required(format!("{path}.paths"), ""));
    }
    for (i, entry) in paths.iter().enumerate() {
        let at = format!("{path}.paths[{i}]");
        let Some(kind) = entry["pathType"].as_str() else {
            causes.push(Cause::required(
                format!("{at}.pathType"),
                "pathType must be specified",
            ));
            continue;
        };
        let value = entry["path"].as_str().unwrap_or("");
        match kind {
            "Exact" | "Prefix" => {
                if !value.starts_with('/') {
                    causes.push(Cause::invalid(
                        format!("{at}.path"),
                        &json!(value),
                        "must be an absolute path",
                    ));
                }
                for sequence in ["//", "/./", "/../", "%2f", "%2F"] {
                    if value.contains(sequence) {
                        causes.push(Cause::invalid(
                            format!("{at}.path"),
                            &json!(value),
                            &format!("must not contain '{sequence}'"),
                        ));
                    }
                }
                for suffix in ["/..", "/."] {
                    if value.ends_with(suffix) {
                        causes.push(Cause::invalid(
                            format!("{at}.path"),
                            &json!(value),
                            &format!("cannot end with '{suffix}'"),
                        ));
                    }
                }
            }
            "ImplementationSpecific" => {
                if !value.is_empty() && !value.starts_with('/') {
                    causes.push(Cause::invalid(
                        format!("{at}.path"),
                        &json!(value),
                        "must be an absolute path",
                    ));
                }
            }
            other => causes.push(Cause::not_supported(
                format!("{at}.pathType"),
                &json!(other),
                &["Exact", "ImplementationSpecific", "Prefix"],
            )),
        }
        causes.extend(validate_backend(
            &entry["backend"],
            &format!("{at}.backend"),
        ));
    }
    causes
}
