//! A webhook of a Mutating/ValidatingWebhookConfiguration, parsed once when the configuration
//! changes, and whether a write goes to it: rules (operations, groups, versions, resources
//! with subresources, scope), `matchPolicy`, `namespaceSelector`, `objectSelector`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use plinth_core::ApiError;
use serde_json::Value;

use super::Request;
pub(super) use super::matching::labels;
use super::matching::{Matcher, strings};
pub use plinth_registry::callout::Endpoint;
use plinth_registry::resources::Objects;

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
    matcher: Matcher,
    /// `failurePolicy: Ignore`.
    pub ignore_failures: bool,
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

pub use plinth_types::admissionregistration::MATCH_VARIABLES;

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

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
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
        let tls = match plinth_registry::callout::tls(text(client, "caBundle")) {
            Ok(tls) => Arc::new(tls),
            Err(e) => {
                tracing::warn!(webhook = %name, error = %e, "webhook left out");
                continue;
            }
        };
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
            matcher: Matcher::parse(
                hook.get("rules"),
                None,
                text(hook, "matchPolicy"),
                hook.get("namespaceSelector"),
                hook.get("objectSelector"),
            ),
            ignore_failures: text(hook, "failurePolicy") == "Ignore",
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

impl Webhook {
    /// Whether the write goes to this webhook, and in which version; a dry run reaching one
    /// with side effects is refused as kube refuses it.
    ///
    /// # Errors
    /// 400 for a dry run this webhook may not see.
    pub fn matches(
        &self,
        objects: &dyn Objects,
        request: &Request<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
        namespace_labels: &Option<BTreeMap<String, String>>,
    ) -> Result<Option<Matched>, ApiError> {
        let Some(version) = self
            .matcher
            .matches(objects, request, object, old, namespace_labels)
        else {
            return Ok(None);
        };
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
