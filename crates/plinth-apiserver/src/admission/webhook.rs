//! A webhook of a Mutating/ValidatingWebhookConfiguration, parsed once when the configuration
//! changes, and whether a write goes to it: rules (operations, groups, versions, resources
//! with subresources, scope), `matchPolicy`, `namespaceSelector`, `objectSelector`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use plinth_core::ApiError;
use plinth_core::selector::LabelSelector;
use serde_json::Value;

use super::{Operation, Request};
pub use crate::callout::Endpoint;
use crate::registry::Registry;

/// One rule of `rules`.
#[derive(Clone, Debug, Default)]
struct Rule {
    operations: Vec<String>,
    groups: Vec<String>,
    versions: Vec<String>,
    resources: Vec<String>,
    scope: String,
}

/// One webhook, ready to match and call.
#[derive(Clone)]
pub struct Webhook {
    /// Its name (`owners.tenants.example.com`).
    pub name: String,
    /// The configuration it is part of.
    pub configuration: String,
    /// Where to send reviews.
    pub endpoint: Endpoint,
    /// TLS settings: the configuration's `caBundle` as trust (the system's without one).
    pub tls: Arc<rustls::ClientConfig>,
    rules: Vec<Rule>,
    /// `failurePolicy: Ignore`.
    pub ignore_failures: bool,
    equivalent: bool,
    namespace_selector: LabelSelector,
    object_selector: LabelSelector,
    /// `sideEffects` is `None` or `NoneOnDryRun`: it may see dry-run requests.
    pub dry_run_safe: bool,
    /// `timeoutSeconds`.
    pub timeout: Duration,
    /// `admission.k8s.io/v1` or `v1beta1`: the first of `admissionReviewVersions` served.
    pub review_version: &'static str,
    /// `reinvocationPolicy: IfNeeded`.
    pub reinvoke: bool,
    /// `matchConditions`: all must hold for the webhook to be called.
    match_conditions: Vec<(String, Arc<plinth_schema::Expression>)>,
}

/// The variables a match condition may name (kube's, but `authorizer`, which is not built).
pub const MATCH_VARIABLES: [&str; 3] = ["object", "oldObject", "request"];

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// What a matching webhook is sent: the resource and kind as its rule names them (another
/// version of the same resource under `matchPolicy: Equivalent`).
#[derive(Clone, Debug)]
pub struct Matched {
    /// The API version the webhook sees.
    pub version: String,
}

fn strings(value: &Value, key: &str) -> Vec<String> {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

fn selector(value: Option<&Value>) -> LabelSelector {
    value
        .and_then(|v| LabelSelector::from_object(v).ok())
        .unwrap_or_default()
}

/// The webhooks of a configuration object (`mutating`: a MutatingWebhookConfiguration), in
/// their order; one that cannot be used (a caBundle that does not parse) is left out with a
/// log line.
pub fn parse(configuration: &Value, mutating: bool) -> Vec<Webhook> {
    let config_name = plinth_core::meta::name(configuration)
        .unwrap_or("")
        .to_owned();
    let mut out = Vec::new();
    for hook in configuration
        .get("webhooks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = text(hook, "name").to_owned();
        let client = hook.get("clientConfig").unwrap_or(&Value::Null);
        let endpoint = Endpoint::of(client);
        let tls = match crate::callout::tls(text(client, "caBundle")) {
            Ok(tls) => Arc::new(tls),
            Err(e) => {
                tracing::warn!(webhook = %name, error = %e, "webhook left out");
                continue;
            }
        };
        let rules = hook
            .get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| Rule {
                operations: strings(r, "operations"),
                groups: strings(r, "apiGroups"),
                versions: strings(r, "apiVersions"),
                resources: strings(r, "resources"),
                scope: match text(r, "scope") {
                    "" => "*".to_owned(),
                    s => s.to_owned(),
                },
            })
            .collect();
        let mut match_conditions = Vec::new();
        let mut compiled = true;
        for condition in hook
            .get("matchConditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match plinth_schema::Expression::compile(
                text(condition, "expression"),
                &MATCH_VARIABLES,
            ) {
                Ok(expression) => {
                    match_conditions
                        .push((text(condition, "name").to_owned(), Arc::new(expression)));
                }
                Err(e) => {
                    tracing::warn!(webhook = %name, error = %e, "webhook left out");
                    compiled = false;
                }
            }
        }
        if !compiled {
            continue;
        }
        let versions = strings(hook, "admissionReviewVersions");
        let review_version = versions
            .iter()
            .find_map(|v| match v.as_str() {
                "v1" => Some("admission.k8s.io/v1"),
                "v1beta1" => Some("admission.k8s.io/v1beta1"),
                _ => None,
            })
            .unwrap_or("admission.k8s.io/v1");
        out.push(Webhook {
            name,
            configuration: config_name.clone(),
            endpoint,
            tls,
            rules,
            ignore_failures: text(hook, "failurePolicy") == "Ignore",
            equivalent: text(hook, "matchPolicy") != "Exact",
            namespace_selector: selector(hook.get("namespaceSelector")),
            object_selector: selector(hook.get("objectSelector")),
            dry_run_safe: matches!(text(hook, "sideEffects"), "None" | "NoneOnDryRun"),
            timeout: Duration::from_secs(
                hook.get("timeoutSeconds")
                    .and_then(Value::as_u64)
                    .unwrap_or(10)
                    .clamp(1, 30),
            ),
            review_version,
            reinvoke: mutating && text(hook, "reinvocationPolicy") == "IfNeeded",
            match_conditions,
        });
    }
    out
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

/// Whether `entry` of a rule's `resources` names `resource` with `subresource`: `pods`,
/// `pods/status`, `pods/*` (the resource and its subresources), `*/status`, `*` (every
/// resource, no subresource), `*/*` — kube's rule matcher.
fn names_resource(entry: &str, resource: &str, subresource: &str) -> bool {
    let (r, s) = entry.split_once('/').unwrap_or((entry, ""));
    (r == "*" || r == resource) && (s == "*" || s == subresource)
}

impl Rule {
    fn matches(
        &self,
        operation: Operation,
        group: &str,
        version: &str,
        request: &Request<'_>,
    ) -> bool {
        let namespaced = request.def.namespaced;
        let scope_ok = match self.scope.as_str() {
            "Cluster" => !namespaced,
            "Namespaced" => namespaced,
            _ => true,
        };
        scope_ok
            && listed(&self.operations, operation.as_str())
            && listed(&self.groups, group)
            && listed(&self.versions, version)
            && self
                .resources
                .iter()
                .any(|r| names_resource(r, &request.def.plural, request.subresource))
    }
}

/// An object's labels (none for no object).
pub(super) fn labels(object: Option<&Value>) -> BTreeMap<String, String> {
    object
        .and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

impl Webhook {
    /// Whether the write goes to this webhook, and in which version; a dry run reaching one
    /// with side effects is refused as kube refuses it.
    ///
    /// # Errors
    /// 400 for a dry run this webhook may not see.
    pub fn matches(
        &self,
        registry: &Registry,
        request: &Request<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
        namespace_labels: &Option<BTreeMap<String, String>>,
    ) -> Result<Option<Matched>, ApiError> {
        let def = request.def;
        let group = def.group_version.group.as_str();
        let version = def.group_version.version.as_str();
        let exact = self
            .rules
            .iter()
            .any(|r| r.matches(request.operation, group, version, request));
        let version = if exact {
            version.to_owned()
        } else if self.equivalent {
            // The same resource in another version it is served in.
            let other = registry
                .resources
                .all()
                .into_iter()
                .filter(|d| {
                    d.group_version.group == group
                        && d.plural == def.plural
                        && d.group_version.version != version
                })
                .map(|d| d.group_version.version.clone())
                .find(|v| {
                    self.rules
                        .iter()
                        .any(|r| r.matches(request.operation, group, v, request))
                });
            match other {
                Some(v) => v,
                None => return Ok(None),
            }
        } else {
            return Ok(None);
        };
        if let Some(ns_labels) = namespace_labels
            && !self.namespace_selector.matches(ns_labels)
        {
            return Ok(None);
        }
        if !self.object_selector.is_empty()
            && !self.object_selector.matches(&labels(object))
            && !self.object_selector.matches(&labels(old))
        {
            return Ok(None);
        }
        if !self.match_conditions.is_empty() {
            let null = Value::Null;
            let review = super::call::review_request(request, &version, "", None, None);
            let bindings = [
                ("object", object.unwrap_or(&null)),
                ("oldObject", old.unwrap_or(&null)),
                ("request", &review),
            ];
            for (name, expression) in &self.match_conditions {
                match expression.evaluate(&bindings) {
                    Ok(plinth_schema::Evaluated::Bool(true)) => {}
                    Ok(plinth_schema::Evaluated::Bool(false)) => return Ok(None),
                    outcome => {
                        let why = match outcome {
                            Err(e) => e,
                            Ok(other) => {
                                format!("expression did not evaluate to a bool: {other:?}")
                            }
                        };
                        if self.ignore_failures {
                            tracing::warn!(webhook = %self.name, condition = %name, error = %why, "match condition failed, failing open");
                            return Ok(None);
                        }
                        return Err(ApiError::internal(format!(
                            "admission webhook {:?} matchCondition {name:?}: {why}",
                            self.name
                        )));
                    }
                }
            }
        }
        if request.dry_run && !self.dry_run_safe {
            return Err(ApiError::bad_request(format!(
                "admission webhook {:?} does not support dry run",
                self.name
            )));
        }
        Ok(Some(Matched { version }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_entries_name_subresources_as_kube_does() {
        assert!(names_resource("pods", "pods", ""));
        assert!(!names_resource("pods", "pods", "status"));
        assert!(names_resource("pods/status", "pods", "status"));
        assert!(names_resource("pods/*", "pods", "status"));
        assert!(names_resource("pods/*", "pods", ""));
        assert!(names_resource("*/status", "widgets", "status"));
        assert!(names_resource("*", "widgets", ""));
        assert!(!names_resource("*", "widgets", "status"));
        assert!(names_resource("*/*", "widgets", "status"));
        assert!(names_resource("*/*", "widgets", ""));
    }
}
