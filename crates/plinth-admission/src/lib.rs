//! Admission: what the admission webhooks say of a write, between decoding and storage, in
//! kube-apiserver's order — mutating webhooks (one after another, reinvoked once when asked
//! and a later one changed the object) before the type's validation, validating webhooks (all
//! at once) after it, just before the object is stored.
//!
//! Rooms: this file (the request being admitted, the chain), `webhook` (configurations parsed
//! into matchers), `call` (one call: the AdmissionReview over HTTPS, bounded by its timeout),
//! `controller` (the configurations followed from their watches).

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod annotations;
mod call;
pub mod controller;
mod matching;
mod noderestriction;
pub mod podsecurity;
pub mod policy;
pub mod quota;
pub mod webhook;

#[cfg(test)]
mod tests;

use std::sync::{Arc, PoisonError, RwLock};

use plinth_core::ApiError;
use serde_json::Value;

pub use annotations::{AUDIT_ANNOTATIONS, annotate};
pub use plinth_registry::admit::{Operation, Request, admits, server_user};
use plinth_registry::resources::Objects;
pub use webhook::Webhook;

/// The webhooks in force.
#[derive(Debug, Default)]
pub struct Admission {
    mutating: RwLock<Arc<Vec<Webhook>>>,
    validating: RwLock<Arc<Vec<Webhook>>>,
    policies: RwLock<Arc<policy::Policies>>,
    /// The creates quota admission has just counted (shared with the quota controller).
    pub quota_ledger: Arc<quota::Ledger>,
    /// The PodSecurity plugin's configuration.
    pub pod_security: podsecurity::Config,
}

impl Admission {
    /// The chain with the PodSecurity plugin configured so (no webhooks or policies yet).
    pub fn with_pod_security(pod_security: podsecurity::Config) -> Self {
        Self {
            pod_security,
            ..Self::default()
        }
    }

    /// Replaces the mutating or the validating webhooks in force (kube orders them by
    /// configuration name, then as listed).
    pub fn set(&self, mutating: bool, webhooks: Vec<Webhook>) {
        let slot = if mutating {
            &self.mutating
        } else {
            &self.validating
        };
        *slot.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(webhooks);
    }

    /// Replaces the ValidatingAdmissionPolicies and bindings in force.
    pub fn set_policies(&self, policies: policy::Policies) {
        *self
            .policies
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(policies);
    }

    fn policies(&self) -> Arc<policy::Policies> {
        self.policies
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether any webhook or policy binding is in force.
    pub fn has_webhooks(&self) -> bool {
        !self.mutating().is_empty()
            || !self.validating().is_empty()
            || !self.policies().bindings.is_empty()
    }

    fn mutating(&self) -> Arc<Vec<Webhook>> {
        self.mutating
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn validating(&self) -> Arc<Vec<Webhook>> {
        self.validating
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait::async_trait]
impl plinth_registry::admit::Admit for Admission {
    /// The mutating webhooks that match, in order, each allowed to change `object`; one that
    /// asked for `reinvocationPolicy: IfNeeded` is called once more when a later one changed
    /// the object after it. Returns the webhooks' warnings.
    ///
    /// # Errors
    /// A denial (the webhook's status, kube's "admission webhook … denied the request"), a
    /// failed call under `failurePolicy: Fail` (500), a patch that does not apply.
    async fn mutate(
        &self,
        objects: &dyn Objects,
        request: &Request<'_>,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<Vec<String>, ApiError> {
        let webhooks = self.mutating();
        if webhooks.is_empty() || !admits(request.def) {
            return Ok(Vec::new());
        }
        let namespace_labels = namespace_labels(objects, request, Some(object)).await;
        let mut warnings = Vec::new();
        // For each webhook called: the object as it left it (to see whether a later one
        // changed it since).
        let mut left: Vec<Option<Value>> = vec![None; webhooks.len()];
        for (i, hook) in webhooks.iter().enumerate() {
            let called = mutate_with(
                hook,
                objects,
                request,
                object,
                old,
                &namespace_labels,
                &mut warnings,
            )
            .await?;
            if called {
                left[i] = Some(object.clone());
            }
        }
        // Reinvocation: once, in order, those that asked and whose output was changed since.
        for (i, hook) in webhooks.iter().enumerate() {
            let stale = left[i].as_ref().is_some_and(|seen| seen != object);
            if hook.reinvoke && stale {
                mutate_with(
                    hook,
                    objects,
                    request,
                    object,
                    old,
                    &namespace_labels,
                    &mut warnings,
                )
                .await?;
            }
        }
        Ok(warnings)
    }

    /// The validating webhooks that match, all called at once; any denial refuses the write.
    /// Returns their warnings.
    ///
    /// # Errors
    /// The first denial or failed call (under `failurePolicy: Fail`), in configuration order.
    async fn validate(
        &self,
        objects: &dyn Objects,
        request: &Request<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<Vec<String>, ApiError> {
        if !admits(request.def) {
            return Ok(Vec::new());
        }
        // The built-in plugins first: NodeRestriction, Priority (a class updated to be the
        // default; a new one is checked as it is created), PodSecurity.
        noderestriction::admit(objects, request, object, old).await?;
        if request.operation == Operation::Update
            && request.def.group_version.group == "scheduling.k8s.io"
            && request.def.plural == "priorityclasses"
            && let Some(class) = object
        {
            plinth_types::scheduling::priorityclass::only_default(objects, class).await?;
        }
        let mut warnings =
            podsecurity::admit(&self.pod_security, objects, request, object, old).await?;
        let webhooks = self.validating();
        let policies = self.policies();
        if webhooks.is_empty() && policies.bindings.is_empty() {
            // ResourceQuota runs last, once the others have allowed the write.
            quota::admit(objects, &self.quota_ledger, request, object, old).await?;
            return Ok(warnings);
        }
        let namespace_labels = namespace_labels(objects, request, object.or(old)).await;
        // Policies next (kube's ValidatingAdmissionPolicy plugin precedes the webhooks).
        warnings.extend(
            policies
                .validate(objects, request, object, old, &namespace_labels)
                .await?,
        );
        let mut calls = Vec::new();
        for hook in webhooks.iter() {
            if let Some(matched) = hook.matches(objects, request, object, old, &namespace_labels)? {
                calls.push(async move {
                    call::review(hook, objects, request, &matched, object, old).await
                });
            }
        }
        for outcome in futures::future::join_all(calls).await {
            warnings.extend(outcome?.warnings);
        }
        quota::admit(objects, &self.quota_ledger, request, object, old).await?;
        Ok(warnings)
    }

    fn admits_deletes(&self, user: &plinth_registry::user::User) -> bool {
        self.has_webhooks() || user.node().is_some()
    }
}

/// Calls one mutating webhook if the write matches it, applying its patch; whether it was
/// called.
async fn mutate_with(
    hook: &Webhook,
    objects: &dyn Objects,
    request: &Request<'_>,
    object: &mut Value,
    old: Option<&Value>,
    namespace_labels: &Option<std::collections::BTreeMap<String, String>>,
    warnings: &mut Vec<String>,
) -> Result<bool, ApiError> {
    let Some(matched) = hook.matches(objects, request, Some(object), old, namespace_labels)? else {
        return Ok(false);
    };
    let outcome = call::review(hook, objects, request, &matched, Some(object), old).await?;
    warnings.extend(outcome.warnings);
    if let Some(patched) = outcome.patched {
        *object = patched;
    }
    Ok(true)
}

/// The labels a `namespaceSelector` is matched against: the namespace's own for a Namespace,
/// the object's namespace's for a namespaced object, none for other cluster-wide objects.
async fn namespace_labels(
    objects: &dyn Objects,
    request: &Request<'_>,
    object: Option<&Value>,
) -> Option<std::collections::BTreeMap<String, String>> {
    let labels_of = |o: &Value| webhook::labels(Some(o));
    let def = request.def;
    if def.group_version.group.is_empty() && def.plural == "namespaces" {
        return Some(object.map(labels_of).unwrap_or_default());
    }
    request.namespace.filter(|_| def.namespaced)?;
    objects.resource("", "v1", "namespaces")?;
    Some(
        namespace_of(objects, request)
            .await
            .map(|n| labels_of(&n))
            .unwrap_or_default(),
    )
}

/// The Namespace of a namespaced write: as the registry read it already, else from `objects`
/// (`None` for a cluster-wide write, or a namespace that does not exist).
async fn namespace_of<'a>(
    objects: &dyn Objects,
    request: &Request<'a>,
) -> Option<std::borrow::Cow<'a, Value>> {
    let namespace = request.namespace.filter(|_| request.def.namespaced)?;
    match request.namespace_object {
        Some(known) => Some(std::borrow::Cow::Borrowed(known)),
        None => objects
            .namespace(namespace)
            .await
            .map(std::borrow::Cow::Owned),
    }
}
