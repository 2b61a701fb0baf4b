//! What every reconciler needs: finalizers, owner references, status conditions, events.
//!
//! ```
//! use plinth_runtime::helpers::{set_condition, Condition};
//! let mut conditions: Vec<Condition> = Vec::new();
//! set_condition(&mut conditions, "Ready", false, "Creating", "waiting for the namespace", Some(1));
//! let since = conditions[0].last_transition_time.clone();
//! // The same status again keeps the transition time; the reason and message follow.
//! set_condition(&mut conditions, "Ready", false, "Creating", "waiting for the config", Some(2));
//! assert_eq!(conditions.len(), 1);
//! assert_eq!(conditions[0].last_transition_time, since);
//! assert_eq!(conditions[0].message, "waiting for the config");
//! ```

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::controller::ReconcileError;

fn retry(e: kube::Error) -> ReconcileError {
    ReconcileError::Api(e)
}

/// Sets `object`'s finalizers to `finalizers`, at its resourceVersion (a conflict is retried
/// by the caller's backoff).
async fn write_finalizers<K>(
    api: &Api<K>,
    object: &K,
    finalizers: Vec<String>,
) -> Result<(), ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": object.resource_version()}});
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .map(drop)
    .map_err(retry)
}

/// Adds `finalizer` to `object` if it lacks it; returns whether it wrote.
///
/// # Errors
/// A retryable error if the write fails (a conflict included).
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// let env = plinth_testenv::TestEnv::start().await?;
/// let api: kube::Api<ConfigMap> = kube::Api::namespaced(env.client(), "default");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("guarded".into());
/// let cm = api.create(&Default::default(), &cm).await?;
/// use plinth_runtime::helpers::ensure_finalizer;
/// assert!(ensure_finalizer(&api, &cm, "example.com/cleanup").await?);
/// let cm = api.get("guarded").await?;
/// // Already there: nothing written.
/// assert!(!ensure_finalizer(&api, &cm, "example.com/cleanup").await?);
/// assert_eq!(cm.metadata.finalizers, Some(vec!["example.com/cleanup".to_owned()]));
/// # Ok(()) }
/// ```
pub async fn ensure_finalizer<K>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
) -> Result<bool, ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    if object.finalizers().iter().any(|f| f == finalizer) {
        return Ok(false);
    }
    let mut finalizers = object.finalizers().to_vec();
    finalizers.push(finalizer.to_owned());
    write_finalizers(api, object, finalizers).await?;
    Ok(true)
}

/// Removes `finalizer` from `object` (idempotent).
///
/// # Errors
/// A retryable error if the write fails.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// let env = plinth_testenv::TestEnv::start().await?;
/// let api: kube::Api<ConfigMap> = kube::Api::namespaced(env.client(), "default");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("guarded".into());
/// let cm = api.create(&Default::default(), &cm).await?;
/// use plinth_runtime::helpers::{ensure_finalizer, remove_finalizer};
/// ensure_finalizer(&api, &cm, "example.com/cleanup").await?;
/// let cm = api.get("guarded").await?;
/// remove_finalizer(&api, &cm, "example.com/cleanup").await?;
/// assert_eq!(api.get("guarded").await?.metadata.finalizers, None);
/// # Ok(()) }
/// ```
pub async fn remove_finalizer<K>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
) -> Result<(), ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    if !object.finalizers().iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let finalizers = object
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    write_finalizers(api, object, finalizers).await
}

/// What a finalizer-guarded reconcile is asked to do (see [`finalizer`]).
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// let env = plinth_testenv::TestEnv::start().await?;
/// let api: kube::Api<ConfigMap> = kube::Api::namespaced(env.client(), "default");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("guarded".into());
/// let cm = api.create(&Default::default(), &cm).await?;
/// use plinth_runtime::controller::Action;
/// use plinth_runtime::helpers::{finalizer, FinalizerEvent};
/// let action = finalizer(&api, "example.com/cleanup", std::sync::Arc::new(cm), |event| async move {
///     match event {
///         FinalizerEvent::Apply(_live) => Ok(Action::Done),
///         FinalizerEvent::Cleanup(_deleted) => Ok(Action::Done),
///     }
/// })
/// .await?;
/// // A live object without the finalizer gets it first; the next reconcile applies.
/// assert_eq!(action, Action::Done);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub enum FinalizerEvent<K> {
    /// The object lives (and carries the finalizer): bring the world in line with it.
    Apply(std::sync::Arc<K>),
    /// The object is being deleted: clean up what it owns outside the cluster; the finalizer
    /// is removed when this succeeds with [`Action::Done`](crate::controller::Action::Done).
    /// A clean-up that waits for something (a final backup Job) returns
    /// [`Action::RequeueAfter`](crate::controller::Action::RequeueAfter): the finalizer stays
    /// and the clean-up runs again after that long — a requeue, never a sleep.
    Cleanup(std::sync::Arc<K>),
}

/// The whole add–run–remove flow of a finalizer (kube-runtime's `finalizer`): a live object
/// without `name` gets it first (and is reconciled again when that write comes back); a live
/// object with it is applied; a deleted object with it is cleaned up, then the finalizer goes;
/// a deleted object without it is left alone.
///
/// # Errors
/// The reconcile's own error, or a retryable one if a finalizer write fails.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// let env = plinth_testenv::TestEnv::start().await?;
/// let api: kube::Api<ConfigMap> = kube::Api::namespaced(env.client(), "default");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("guarded".into());
/// let cm = api.create(&Default::default(), &cm).await?;
/// use plinth_runtime::controller::Action;
/// use plinth_runtime::helpers::{finalizer, FinalizerEvent};
/// let reconcile = |object: std::sync::Arc<ConfigMap>| {
///     let api = api.clone();
///     async move {
///         finalizer(&api, "example.com/cleanup", object, |event| async move {
///             match event {
///                 FinalizerEvent::Apply(_) => Ok(Action::Done),
///                 // Clean up what the object owns outside the cluster, then let it go.
///                 FinalizerEvent::Cleanup(_) => Ok(Action::Done),
///             }
///         })
///         .await
///     }
/// };
/// reconcile(std::sync::Arc::new(cm)).await?; // adds the finalizer
/// api.delete("guarded", &Default::default()).await?; // held by it
/// reconcile(std::sync::Arc::new(api.get("guarded").await?)).await?; // cleans up, removes it
/// assert!(api.get_opt("guarded").await?.is_none());
/// # Ok(()) }
/// ```
pub async fn finalizer<K, F, Fut>(
    api: &Api<K>,
    name: &str,
    object: std::sync::Arc<K>,
    reconcile: F,
) -> Result<crate::controller::Action, ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    F: FnOnce(FinalizerEvent<K>) -> Fut,
    Fut: std::future::Future<Output = Result<crate::controller::Action, ReconcileError>>,
{
    finalizer_when(api, name, true, object, reconcile).await
}

/// [`finalizer`] for objects that may not want clean-up (a `deletionPolicy: Retain`, say):
/// while `wanted`, as [`finalizer`]; when not, a live object that still carries `name` has it
/// removed (no clean-up runs, now or at deletion) and is applied without it, and a deleted
/// one is let go at once.
///
/// # Errors
/// The reconcile's own error, or a retryable one if a finalizer write fails.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// let env = plinth_testenv::TestEnv::start().await?;
/// let api: kube::Api<ConfigMap> = kube::Api::namespaced(env.client(), "default");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("guarded".into());
/// let cm = api.create(&Default::default(), &cm).await?;
/// use plinth_runtime::controller::Action;
/// use plinth_runtime::helpers::{ensure_finalizer, finalizer_when, FinalizerEvent};
/// ensure_finalizer(&api, &cm, "example.com/cleanup").await?;
/// let cm = std::sync::Arc::new(api.get("guarded").await?);
/// // `deletionPolicy: Retain`, say: the finalizer goes and no clean-up will run.
/// finalizer_when(&api, "example.com/cleanup", false, cm, |_| async { Ok(Action::Done) }).await?;
/// assert_eq!(api.get("guarded").await?.metadata.finalizers, None);
/// # Ok(()) }
/// ```
pub async fn finalizer_when<K, F, Fut>(
    api: &Api<K>,
    name: &str,
    wanted: bool,
    object: std::sync::Arc<K>,
    reconcile: F,
) -> Result<crate::controller::Action, ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    F: FnOnce(FinalizerEvent<K>) -> Fut,
    Fut: std::future::Future<Output = Result<crate::controller::Action, ReconcileError>>,
{
    let deleting = object.meta().deletion_timestamp.is_some();
    let has = object.finalizers().iter().any(|f| f == name);
    match (deleting, has, wanted) {
        (false, false, true) => {
            ensure_finalizer(api, &object, name).await?;
            Ok(crate::controller::Action::Done)
        }
        (_, true, false) => {
            // No longer wanted: removed without clean-up; a live object's write comes back as
            // a change to apply, a deleted one goes.
            remove_finalizer(api, &object, name).await?;
            Ok(crate::controller::Action::Done)
        }
        (false, _, _) => reconcile(FinalizerEvent::Apply(object)).await,
        (true, true, true) => {
            let action = reconcile(FinalizerEvent::Cleanup(object.clone())).await?;
            if action == crate::controller::Action::Done {
                remove_finalizer(api, &object, name).await?;
            }
            Ok(action)
        }
        (true, false, _) => Ok(crate::controller::Action::Done),
    }
}

/// An owner reference to `owner` marking it the controller (and blocking its foreground
/// deletion until the dependent is gone).
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// let env = plinth_testenv::TestEnv::start().await?;
/// let api: kube::Api<ConfigMap> = kube::Api::namespaced(env.client(), "default");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("guarded".into());
/// let cm = api.create(&Default::default(), &cm).await?;
/// let owner = plinth_runtime::helpers::controller_reference(&cm).expect("a created object");
/// assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("ConfigMap", "guarded"));
/// assert_eq!((owner.controller, owner.block_owner_deletion), (Some(true), Some(true)));
/// # Ok(()) }
/// ```
pub fn controller_reference<K>(owner: &K) -> Option<OwnerReference>
where
    K: Resource,
    K::DynamicType: Default,
{
    let mut reference = owner.controller_owner_ref(&K::DynamicType::default())?;
    reference.block_owner_deletion = Some(true);
    Some(reference)
}

/// A status condition (metav1.Condition's fields).
///
/// # Example
///
/// ```
/// use plinth_runtime::helpers::Condition;
/// // As it appears in a status: metav1.Condition's JSON.
/// let ready: Condition = serde_json::from_value(serde_json::json!({
///     "type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z",
///     "reason": "Reconciled", "message": "", "observedGeneration": 3
/// }))
/// .unwrap();
/// assert_eq!((ready.type_.as_str(), ready.observed_generation), ("Ready", Some(3)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
// The schema's description is the first line only: the example is for rustdoc, not for the
// CRDs of operators whose status embeds conditions (`kubectl explain` shows it).
#[cfg_attr(
    feature = "schemars",
    schemars(description = "A status condition (metav1.Condition's fields).")
)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`, `Progressing`...
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When `status` last changed (RFC 3339).
    pub last_transition_time: String,
    /// A CamelCase reason.
    pub reason: String,
    /// A human-readable message.
    pub message: String,
    /// The generation it was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Sets condition `type_` in `conditions`, keeping its transition time when its status is
/// unchanged.
///
/// # Example
///
/// ```
/// use plinth_runtime::helpers::set_condition;
/// let mut conditions = Vec::new();
/// set_condition(&mut conditions, "Ready", false, "Creating", "waiting", Some(1));
/// set_condition(&mut conditions, "Ready", true, "Reconciled", "", Some(1));
/// assert_eq!(conditions.len(), 1);
/// assert_eq!((conditions[0].status.as_str(), conditions[0].reason.as_str()), ("True", "Reconciled"));
/// ```
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" };
    let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = now;
            }
            existing.status = status.to_owned();
            reason.clone_into(&mut existing.reason);
            message.clone_into(&mut existing.message);
            existing.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            last_transition_time: now,
            reason: reason.to_owned(),
            message: message.to_owned(),
            observed_generation: generation,
        }),
    }
}

/// Records events (`events.k8s.io/v1`) about objects.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// let env = plinth_testenv::TestEnv::start().await?;
/// let api: kube::Api<ConfigMap> = kube::Api::namespaced(env.client(), "default");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("guarded".into());
/// let cm = api.create(&Default::default(), &cm).await?;
/// use plinth_runtime::helpers::EventRecorder;
/// let events = EventRecorder::new(env.client(), "example.com/my-operator", "my-operator-0");
/// events.publish(&cm, false, "Configured", "Reconcile", "settings applied").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EventRecorder {
    client: kube::Client,
    controller: String,
    instance: String,
}

impl Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// A recorder reporting as `controller` (e.g. `platform.plinth.dev/tenant-operator`) from
    /// `instance` (the pod or host name).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api: kube::Api<ConfigMap> = kube::Api::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("guarded".into());
    /// let cm = api.create(&Default::default(), &cm).await?;
    /// let events = plinth_runtime::helpers::EventRecorder::new(env.client(), "example.com/my-operator", "host-1");
    /// events.publish(&cm, true, "Invalid", "Validate", "no key `mode`").await?;
    /// # Ok(()) }
    /// ```
    pub fn new(client: kube::Client, controller: &str, instance: &str) -> Self {
        Self {
            client,
            controller: controller.to_owned(),
            instance: instance.to_owned(),
        }
    }

    /// Publishes a `Normal` (or, when `warning`, `Warning`) event about `object`. Events go to
    /// the object's namespace (`default` for cluster-scoped objects).
    ///
    /// # Errors
    /// If the event cannot be created.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api: kube::Api<ConfigMap> = kube::Api::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("guarded".into());
    /// let cm = api.create(&Default::default(), &cm).await?;
    /// use k8s_openapi::api::events::v1::Event;
    /// let events = plinth_runtime::helpers::EventRecorder::new(env.client(), "example.com/my-operator", "host-1");
    /// events.publish(&cm, false, "Configured", "Reconcile", "settings applied").await?;
    /// let recorded: kube::Api<Event> = kube::Api::namespaced(env.client(), "default");
    /// let listed = recorded.list(&Default::default()).await?;
    /// let event = listed.items.iter().find(|e| e.reason.as_deref() == Some("Configured")).unwrap();
    /// assert_eq!(event.regarding.as_ref().and_then(|r| r.name.as_deref()), Some("guarded"));
    /// assert_eq!(event.type_.as_deref(), Some("Normal"));
    /// # Ok(()) }
    /// ```
    pub async fn publish<K>(
        &self,
        object: &K,
        warning: bool,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), kube::Error>
    where
        K: Resource,
        K::DynamicType: Default,
    {
        let reference = object.object_ref(&K::DynamicType::default());
        let namespace = object
            .meta()
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let event: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({
            "metadata": {"generateName": format!("{}.", object.meta().name.clone().unwrap_or_default())},
            "eventTime": MicroTime(Timestamp::now()),
            "reportingController": self.controller,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "note": note,
            "type": if warning { "Warning" } else { "Normal" },
            "regarding": reference,
        }))
        .map_err(kube::Error::SerdeError)?;
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), &namespace);
        events
            .create(&PostParams::default(), &event)
            .await
            .map(drop)
    }
}

/// Runs `write` again while it fails with 409 Conflict (at most `attempts` times): for a write
/// computed from a fresh read each time (client-go's `RetryOnConflict`).
///
/// # Errors
/// The last error, or any error other than a conflict.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// let env = plinth_testenv::TestEnv::start().await?;
/// let api: kube::Api<ConfigMap> = kube::Api::namespaced(env.client(), "default");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("guarded".into());
/// let cm = api.create(&Default::default(), &cm).await?;
/// use plinth_runtime::helpers::retry_on_conflict;
/// // Read, change, write — again from a fresh read if someone else wrote in between.
/// let updated = retry_on_conflict(5, || async {
///     let mut current = api.get("guarded").await?;
///     current.data.get_or_insert_with(Default::default).insert("mode".into(), "fast".into());
///     api.replace("guarded", &Default::default(), &current).await
/// })
/// .await?;
/// assert_eq!(updated.data.unwrap()["mode"], "fast");
/// # Ok(()) }
/// ```
pub async fn retry_on_conflict<T, F, Fut>(attempts: usize, mut write: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        match write().await {
            Err(kube::Error::Api(e)) if e.code == 409 && tries < attempts.max(1) => {
                tokio::time::sleep(std::time::Duration::from_millis(10 * tries as u64)).await;
            }
            other => return other,
        }
    }
}
