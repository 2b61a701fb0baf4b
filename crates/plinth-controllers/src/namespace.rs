//! The namespace lifecycle: every namespace gets its `default` ServiceAccount, and a deleted
//! namespace is emptied — every object of every namespaced type, custom resources included,
//! their finalizers honoured — with progress reported in its status conditions as
//! kube-controller-manager's namespace controller reports it; then its `kubernetes` finalizer is
//! removed and it goes.

use plinth_core::At as _;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use plinth_core::StatusReason;
use plinth_registry::{Client, DeleteOptions, ListOptions, Part, Patch, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::informer::{Change, Informer, Queue, SharedInformers, enqueue, run_workers};

/// How often a terminating namespace is looked at again while content remains.
const RECHECK: Duration = Duration::from_millis(500);

/// Starts the controller on the shared namespace and ServiceAccount informers; it ends when
/// `stopping` becomes true.
pub fn spawn_namespace_controller(
    registry: Client,
    informers: &SharedInformers,
    stopping: watch::Receiver<bool>,
) {
    let queue = Queue::default();
    let namespaces = informers.start(("", "namespaces"), enqueue(&queue));
    // A `default` ServiceAccount deleted comes back (kube's serviceaccounts controller).
    let requeue = queue.clone();
    let accounts = informers.start(("", "serviceaccounts"), move |c: Change<'_>| {
        if let Some(old) = c.old
            && c.new.is_none()
            && plinth_core::meta::name(old) == Some("default")
            && let Some(namespace) = plinth_core::meta::namespace(old)
        {
            requeue.add(namespace.to_owned());
        }
    });
    let finalizing: Arc<Mutex<HashSet<String>>> = Arc::default();
    tokio::spawn(async move {
        run_workers(
            queue,
            stopping,
            &[&namespaces, &accounts],
            &namespaces,
            |namespace| {
                let (registry, accounts, finalizing) = (&registry, &accounts, &finalizing);
                async move {
                    sync(registry, accounts, finalizing, &namespace.to_value()).await;
                    None
                }
            },
        )
        .await;
    });
}

/// A live namespace gets its `default` ServiceAccount; a deleted one is emptied (once at a
/// time: a pass already under way is not started again).
async fn sync(
    registry: &Client,
    accounts: &Informer,
    finalizing: &Arc<Mutex<HashSet<String>>>,
    namespace: &Value,
) {
    let Some(name) = plinth_core::meta::name(namespace).map(str::to_owned) else {
        return;
    };
    let deleting = namespace
        .at("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null());
    if !deleting {
        if accounts.get(&format!("{name}/default")).is_none() {
            ensure_default_service_account(registry, &name).await;
        }
        return;
    }
    let first = finalizing
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name.clone());
    if first {
        let (registry, finalizing) = (registry.clone(), finalizing.clone());
        tokio::spawn(async move {
            finalize(&registry, &name).await;
            finalizing
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&name);
        });
    }
}

async fn ensure_default_service_account(registry: &Client, namespace: &str) {
    let Some(def) = registry.resources.get("", "v1", "serviceaccounts") else {
        return;
    };
    if registry.get(&def, Some(namespace), "default").await.is_ok() {
        return;
    }
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": namespace}});
    match registry
        .create(
            &def,
            Some(namespace),
            sa,
            &WriteOptions::internal("kube-controller-manager"),
        )
        .await
    {
        Ok(_) => {}
        Err(e)
            if matches!(
                e.reason,
                StatusReason::AlreadyExists | StatusReason::Forbidden | StatusReason::NotFound
            ) => {}
        Err(e) => {
            tracing::warn!(namespace, error = %e.message, "could not create the default service account")
        }
    }
}

/// What one pass over a terminating namespace found.
#[derive(Default, PartialEq, Eq)]
struct Progress {
    /// `resource.group` → objects still there (held by finalizers).
    remaining: BTreeMap<String, usize>,
    /// Finalizer → objects still carrying it.
    finalizers: BTreeMap<String, usize>,
    /// Deletions that failed.
    failures: Vec<String>,
}

impl Progress {
    fn done(&self) -> bool {
        self.remaining.is_empty() && self.failures.is_empty()
    }

    /// The namespace's deletion conditions, in kube-controller-manager's words.
    fn conditions(&self) -> Vec<(&'static str, bool, &'static str, String)> {
        let counted = |map: &BTreeMap<String, usize>, how: &str| {
            map.iter()
                .map(|(what, n)| format!("{what}{how}{n} resource instances"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut conditions = vec![
            (
                "NamespaceDeletionDiscoveryFailure",
                false,
                "ResourcesDiscovered",
                "All resources successfully discovered".to_owned(),
            ),
            (
                "NamespaceDeletionGroupVersionParsingFailure",
                false,
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed".to_owned(),
            ),
        ];
        conditions.push(if self.failures.is_empty() {
            (
                "NamespaceDeletionContentFailure",
                false,
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization".to_owned(),
            )
        } else {
            (
                "NamespaceDeletionContentFailure",
                true,
                "ContentDeletionFailed",
                format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    self.failures.len(),
                    self.failures.join(", ")
                ),
            )
        });
        conditions.push(if self.remaining.is_empty() {
            (
                "NamespaceContentRemaining",
                false,
                "ContentRemoved",
                "All content successfully removed".to_owned(),
            )
        } else {
            (
                "NamespaceContentRemaining",
                true,
                "SomeResourcesRemain",
                format!(
                    "Some resources are remaining: {}",
                    counted(&self.remaining, " has ")
                ),
            )
        });
        conditions.push(if self.finalizers.is_empty() {
            (
                "NamespaceFinalizersRemaining",
                false,
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished".to_owned(),
            )
        } else {
            (
                "NamespaceFinalizersRemaining",
                true,
                "SomeFinalizersRemain",
                format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    counted(&self.finalizers, " in ")
                ),
            )
        });
        conditions
    }
}

/// Deletes everything in `namespace` once.
async fn delete_content(registry: &Client, namespace: &str) -> Progress {
    let mut progress = Progress::default();
    for def in registry.resources.namespaced() {
        let resource = format!("{}.{}", def.plural, def.group_version.group);
        let list = match registry
            .list(&def, Some(namespace), &ListOptions::default())
            .await
        {
            Ok(list) => list,
            Err(e) => {
                progress.failures.push(format!("{resource}: {}", e.message));
                continue;
            }
        };
        for item in list["items"].as_array().into_iter().flatten() {
            let name = plinth_core::meta::name(item).unwrap_or("");
            match registry
                .delete(&def, Some(namespace), name, &DeleteOptions::default())
                .await
            {
                Ok(deleted) if deleted.gone => {}
                Ok(deleted) => {
                    *progress.remaining.entry(resource.clone()).or_default() += 1;
                    for finalizer in plinth_core::meta::finalizers(&deleted.object) {
                        *progress.finalizers.entry(finalizer).or_default() += 1;
                    }
                }
                Err(e) if e.reason == StatusReason::NotFound => {}
                Err(e) => {
                    tracing::warn!(namespace, name, error = %e.message, "could not delete namespace content");
                    progress.failures.push(format!("{resource}: {}", e.message));
                }
            }
        }
    }
    progress
}

/// Empties a terminating namespace, reporting progress in its conditions, then releases its
/// `kubernetes` finalizer so that it goes.
async fn finalize(registry: &Client, namespace: &str) {
    let Some(def) = registry.resources.get("", "v1", "namespaces") else {
        return;
    };
    let mut reported: Option<Progress> = None;
    loop {
        let progress = delete_content(registry, namespace).await;
        let done = progress.done();
        if reported.as_ref() != Some(&progress) {
            report(registry, &def, namespace, &progress).await;
            reported = Some(progress);
        }
        if done {
            break;
        }
        tokio::time::sleep(RECHECK).await;
    }
    let Ok(ns) = registry.get(&def, None, namespace).await else {
        return;
    };
    let kept: Vec<Value> = ns
        .at("/spec/finalizers")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter(|v| *v != "kubernetes").cloned().collect())
        .unwrap_or_default();
    let patch = Patch::merge(json!({"spec": {"finalizers": kept}}));
    if let Err(e) = registry
        .patch(
            &def,
            None,
            namespace,
            patch,
            Part::Main,
            &WriteOptions::internal("kube-controller-manager"),
        )
        .await
        && e.reason != StatusReason::NotFound
    {
        tracing::warn!(namespace, error = %e.message, "could not finalize the namespace");
    }
}

/// Writes `progress` into the namespace's status conditions (keeping each condition's
/// lastTransitionTime while its status stays the same).
async fn report(
    registry: &Client,
    def: &plinth_registry::resources::ResourceDef,
    namespace: &str,
    progress: &Progress,
) {
    let now = plinth_core::meta::format_time(plinth_registry::now());
    let conditions = |ns: &mut Value| {
        let old: Vec<Value> = ns
            .at("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let conditions: Vec<Value> = progress
            .conditions()
            .into_iter()
            .map(|(kind, status, reason, message)| {
                let status = if status { "True" } else { "False" };
                let since = old
                    .iter()
                    .find(|c| c["type"] == kind && c["status"] == status)
                    .and_then(|c| c.get("lastTransitionTime").cloned())
                    .unwrap_or_else(|| json!(now));
                json!({"type": kind, "status": status, "lastTransitionTime": since,
                       "reason": reason, "message": message})
            })
            .collect();
        let changed = ns.at("/status/conditions") != Some(&json!(conditions));
        ns["status"]["conditions"] = json!(conditions);
        Ok(changed)
    };
    match registry
        .modify(
            def,
            None,
            namespace,
            Part::Status,
            &WriteOptions::internal("kube-controller-manager"),
            conditions,
        )
        .await
    {
        Err(e) if e.reason != StatusReason::NotFound => {
            tracing::warn!(namespace, error = %e.message, "could not report namespace deletion progress");
        }
        _ => {}
    }
}
