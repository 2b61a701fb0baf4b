//! The resource quota controller (kube-controller-manager's `resourcequota`): each quota's
//! `status.hard` follows its spec and `status.used` counts what its namespace holds — at
//! once for a new or changed quota (heard from the shared quota informer), and every few
//! seconds again (objects deleted give their place back), each count read from the watch cache
//! once it has caught up (nothing decoded, nothing listed). Resource names other than object
//! counts (`requests.cpu`, …) are shown as used `0`: compute resources are not counted.

use std::sync::Arc;
use std::time::Duration;

use plinth_admission::quota::{Ledger, resource_of};
use plinth_registry::{Client, Part, WriteOptions};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::informer::{Queue, SharedInformers, enqueue, run_workers};

/// How often every quota is recounted.
const RESYNC: Duration = Duration::from_secs(2);
/// How long after admission counted a create a lower count is not written (the object may
/// still be on its way to storage).
const IN_FLIGHT: Duration = Duration::from_secs(10);

/// Starts the controller on the shared quota informer; it ends when `stopping` becomes true.
pub fn spawn_quota_controller(
    registry: Client,
    informers: &SharedInformers,
    ledger: Arc<Ledger>,
    stopping: watch::Receiver<bool>,
) {
    let queue = Queue::default();
    let quotas = informers.start(("", "resourcequotas"), enqueue(&queue));
    tokio::spawn(async move {
        run_workers(queue, stopping, &[&quotas], &quotas, |quota| {
            let (registry, ledger) = (&registry, &ledger);
            async move {
                recount(registry, ledger, &quota).await;
                // Counted again after a while: deleted objects give their place back.
                Some(RESYNC)
            }
        })
        .await;
    });
}

/// `status` as it should be for `quota`.
async fn desired(registry: &Client, quota: &Value) -> Value {
    let namespace = plinth_core::meta::namespace(quota).unwrap_or("");
    let hard = quota
        .pointer("/spec/hard")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut used = Map::new();
    for name in hard.keys() {
        let mut count = 0usize;
        if let Some((group, plural)) = resource_of(name) {
            let def = registry
                .resources
                .all()
                .into_iter()
                .find(|d| d.group_version.group == group && d.plural == plural && d.namespaced);
            if let Some(def) = def
                && let Ok(counted) = registry.count(&def, Some(namespace)).await
            {
                count = counted;
            }
        }
        used.insert(name.clone(), json!(count.to_string()));
    }
    json!({"hard": hard, "used": used})
}

async fn recount(registry: &Client, ledger: &Ledger, quota: &Value) {
    let Some(def) = registry.resources.get("", "v1", "resourcequotas") else {
        return;
    };
    let (Some(namespace), Some(name)) = (
        plinth_core::meta::namespace(quota),
        plinth_core::meta::name(quota),
    ) else {
        return;
    };
    let status = desired(registry, quota).await;
    if quota.get("status") == Some(&status) {
        return;
    }
    let written = registry
        .modify(
            &def,
            Some(namespace),
            name,
            Part::Status,
            &WriteOptions::internal("kube-controller-manager"),
            |current| {
                if current.get("status") == Some(&status) {
                    return Ok(false);
                }
                let mut status = status.clone();
                // Counts admission has just raised stay until their objects can be seen
                // (asked as the write is decided: admission notes a count before writing it).
                let recent = ledger
                    .counted_at(namespace, name)
                    .is_some_and(|at| at.elapsed() < IN_FLIGHT);
                if recent {
                    for (resource, value) in status["used"].as_object_mut().into_iter().flatten() {
                        let shown = current
                            .pointer("/status/used")
                            .and_then(|u| u.get(resource))
                            .and_then(plinth_types::core::resourcequota::count_of);
                        let counted = plinth_types::core::resourcequota::count_of(value);
                        if let (Some(shown), Some(counted)) = (shown, counted)
                            && shown > counted
                        {
                            *value = json!(shown.to_string());
                        }
                    }
                }
                if current.get("status") == Some(&status) {
                    return Ok(false);
                }
                current["status"] = status;
                Ok(true)
            },
        )
        .await;
    if let Err(e) = written
        && e.reason != plinth_core::StatusReason::NotFound
    {
        tracing::warn!(quota = name, namespace, error = %e.message, "could not update the quota's status");
    }
}
