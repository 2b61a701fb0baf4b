//! Admission: what the admission webhooks say of a write, between decoding and storage, in
//! kube-apiserver's order — mutating webhooks (one after another, reinvoked once when asked
//! and a later one changed the object) before the type's validation, validating webhooks (all
//! at once) after it, just before the object is stored.
//!
//! Rooms: this file (the request being admitted, the chain), `webhook` (configurations parsed
//! into matchers), `call` (one call: the AdmissionReview over HTTPS, bounded by its timeout),
//! `controller` (the configurations followed from their watches).

mod call;
pub(crate) mod controller;
mod matching;
pub mod policy;
pub mod quota;
pub mod webhook;

use std::sync::{Arc, PoisonError, RwLock};

use plinth_core::{ApiError, StatusReason};
use serde_json::{Value, json};

use crate::auth::User;
use crate::registry::Registry;
use crate::resources::ResourceDef;
pub use webhook::Webhook;

tokio::task_local! {
    /// The audit annotations admission adds to the request being served (the HTTP layer
    /// scopes one per request and writes them into its audit event).
    pub static AUDIT_ANNOTATIONS: std::sync::Mutex<Vec<(String, String)>>;
}

/// Adds an annotation to the current request's audit event (nothing outside a request).
pub fn annotate(key: String, value: String) {
    let _ = AUDIT_ANNOTATIONS.try_with(|annotations| {
        annotations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((key, value));
    });
}

/// What a write does, as admission names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A create (a POST, an apply or a PUT that creates).
    Create,
    /// An update (PUT, PATCH, apply).
    Update,
    /// A delete.
    Delete,
}

impl Operation {
    /// `CREATE`, `UPDATE`, `DELETE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
        }
    }
}

/// One write being admitted (kube's `admission.Attributes`).
#[derive(Debug)]
pub struct Request<'a> {
    /// What it does.
    pub operation: Operation,
    /// The resource written.
    pub def: &'a ResourceDef,
    /// `status`, `approval`, or empty.
    pub subresource: &'a str,
    /// The object's namespace, for namespaced resources.
    pub namespace: Option<&'a str>,
    /// The object's name (empty for a create with `generateName`).
    pub name: &'a str,
    /// Who writes.
    pub user: &'a User,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// The verb's options (`CreateOptions`, `UpdateOptions`, `DeleteOptions`).
    pub options: Value,
}

/// The user the server's own writes are admitted as (kube-apiserver's loopback identity).
pub fn server_user() -> User {
    User::new("system:apiserver", &[crate::auth::MASTERS])
}

/// Whether writes of `def` are admitted at all: never the admission configuration types
/// themselves (a broken webhook or policy could otherwise never be removed), nor types that
/// are answered rather than stored.
pub fn admits(def: &ResourceDef) -> bool {
    def.group_version.group != "admissionregistration.k8s.io" && def.answer.is_none()
}

/// The webhooks in force.
#[derive(Debug, Default)]
pub struct Admission {
    mutating: RwLock<Arc<Vec<Webhook>>>,
    validating: RwLock<Arc<Vec<Webhook>>>,
    policies: RwLock<Arc<policy::Policies>>,
    /// When each quota (namespace, name) last counted a create in: the quota controller
    /// leaves a count it would lower alone for a while after, as the object may not be
    /// stored yet.
    quota_counted:
        std::sync::Mutex<std::collections::HashMap<(String, String), std::time::Instant>>,
}

impl Admission {
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

    /// When quota `name` in `namespace` last counted a create made through this server.
    pub fn quota_counted_at(&self, namespace: &str, name: &str) -> Option<std::time::Instant> {
        self.quota_counted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(namespace.to_owned(), name.to_owned()))
            .copied()
    }

    pub(crate) fn note_quota_counted(&self, namespace: &str, name: &str) {
        self.quota_counted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                (namespace.to_owned(), name.to_owned()),
                std::time::Instant::now(),
            );
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

    /// The mutating webhooks that match, in order, each allowed to change `object`; one that
    /// asked for `reinvocationPolicy: IfNeeded` is called once more when a later one changed
    /// the object after it. Returns the webhooks' warnings.
    ///
    /// # Errors
    /// A denial (the webhook's status, kube's "admission webhook … denied the request"), a
    /// failed call under `failurePolicy: Fail` (500), a patch that does not apply.
    pub async fn mutate(
        &self,
        registry: &Registry,
        request: &Request<'_>,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<Vec<String>, ApiError> {
        let webhooks = self.mutating();
        if webhooks.is_empty() || !admits(request.def) {
            return Ok(Vec::new());
        }
        let namespace_labels = namespace_labels(registry, request, Some(object)).await;
        let mut warnings = Vec::new();
        // For each webhook called: the object as it left it (to see whether a later one
        // changed it since).
        let mut left: Vec<Option<Value>> = vec![None; webhooks.len()];
        for (i, hook) in webhooks.iter().enumerate() {
            let called = mutate_with(
                hook,
                registry,
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
                    registry,
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
    pub async fn validate(
        &self,
        registry: &Registry,
        request: &Request<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<Vec<String>, ApiError> {
        if !admits(request.def) {
            return Ok(Vec::new());
        }
        let webhooks = self.validating();
        let policies = self.policies();
        if webhooks.is_empty() && policies.bindings.is_empty() {
            // ResourceQuota runs last, once the others have allowed the write.
            quota::admit(registry, request).await?;
            return Ok(Vec::new());
        }
        let namespace_labels = namespace_labels(registry, request, object.or(old)).await;
        // Policies first (kube's ValidatingAdmissionPolicy plugin precedes the webhooks).
        let mut warnings = policies
            .validate(registry, request, object, old, &namespace_labels)
            .await?;
        let mut calls = Vec::new();
        for hook in webhooks.iter() {
            if let Some(matched) =
                hook.matches(registry, request, object, old, &namespace_labels)?
            {
                calls.push(async move { call::review(hook, request, &matched, object, old).await });
            }
        }
        for outcome in futures::future::join_all(calls).await {
            warnings.extend(outcome?.warnings);
        }
        quota::admit(registry, request).await?;
        Ok(warnings)
    }
}

/// Calls one mutating webhook if the write matches it, applying its patch; whether it was
/// called.
async fn mutate_with(
    hook: &Webhook,
    registry: &Registry,
    request: &Request<'_>,
    object: &mut Value,
    old: Option<&Value>,
    namespace_labels: &Option<std::collections::BTreeMap<String, String>>,
    warnings: &mut Vec<String>,
) -> Result<bool, ApiError> {
    let Some(matched) = hook.matches(registry, request, Some(object), old, namespace_labels)?
    else {
        return Ok(false);
    };
    let outcome = call::review(hook, request, &matched, Some(object), old).await?;
    warnings.extend(outcome.warnings);
    if let Some(patched) = outcome.patched {
        *object = patched;
    }
    Ok(true)
}

/// The labels a `namespaceSelector` is matched against: the namespace's own for a Namespace,
/// the object's namespace's for a namespaced object, none for other cluster-wide objects.
async fn namespace_labels(
    registry: &Registry,
    request: &Request<'_>,
    object: Option<&Value>,
) -> Option<std::collections::BTreeMap<String, String>> {
    let labels_of = |o: &Value| webhook::labels(Some(o));
    let def = request.def;
    if def.group_version.group.is_empty() && def.plural == "namespaces" {
        return Some(object.map(labels_of).unwrap_or_default());
    }
    let namespace = request.namespace.filter(|_| def.namespaced)?;
    let namespaces = registry.resources.get("", "v1", "namespaces")?;
    Some(
        registry
            .get(&namespaces, None, namespace)
            .await
            .map(|n| labels_of(&n))
            .unwrap_or_default(),
    )
}

/// kube's answer to a webhook that refuses: its status with "admission webhook … denied the
/// request" before the message.
fn denied(webhook: &str, status: Option<&Value>) -> ApiError {
    let status = status.cloned().unwrap_or_else(|| json!({}));
    let message = status.get("message").and_then(Value::as_str).unwrap_or("");
    let why = status.get("reason").and_then(Value::as_str).unwrap_or("");
    let denied_by = format!("admission webhook {webhook:?} denied the request");
    let message = if !message.is_empty() {
        format!("{denied_by}: {message}")
    } else if !why.is_empty() {
        format!("{denied_by}: {why}")
    } else {
        format!("{denied_by} without explanation")
    };
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    let reason = StatusReason::from_name(why).unwrap_or(StatusReason::for_code(code));
    let mut error = ApiError::new(reason, message);
    *error.details = plinth_core::Details::from_status(&status);
    error.details.code = (code != reason.code()).then_some(code);
    error
}
