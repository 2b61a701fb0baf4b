//! The resource quota controller (kube-controller-manager's `resourcequota`): each quota's
//! `status.hard` follows its spec and `status.used` counts what its namespace holds — at
//! once for a new or changed quota (heard from the shared quota informer), and every few
//! seconds again (objects deleted give their place back): object counts read from the watch
//! cache once it has caught up (nothing decoded, nothing listed); what pods, Services and
//! claims use (compute requests and limits, node ports, storage) and anything a scoped quota
//! counts, summed over the objects (kube's quota evaluators, in
//! [`plinth_types::core::quota_usage`]).

use plinth_core::At as _;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use plinth_admission::quota::{Ledger, resource_of};
use plinth_registry::{Client, Part, WriteOptions};
use plinth_types::core::quota_usage::{self, Usage};
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
                recount(registry, ledger, &quota.to_value()).await;
                // Counted again after a while: deleted objects give their place back.
                Some(RESYNC)
            }
        })
        .await;
    });
}

/// `status` as it should be for `quota`: object counts from the watch cache; what pods,
/// Services and claims use (and counts under a scoped quota) summed over the objects the
/// quota counts.
async fn desired(registry: &Client, quota: &Value) -> Value {
    let namespace = plinth_core::meta::namespace(quota).unwrap_or("");
    let hard = quota
        .at("/spec/hard")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let scoped = quota.at("/spec/scopes").is_some_and(|s| !s.is_null())
        || quota
            .at("/spec/scopeSelector")
            .is_some_and(|s| !s.is_null());
    let now = plinth_registry::now();
    let mut measured: BTreeMap<(String, String), Usage> = BTreeMap::new();
    let mut used = Map::new();
    for name in hard.keys() {
        let mut amount: i128 = 0;
        if let Some((group, plural)) = resource_of(name) {
            let def = registry
                .resources
                .all()
                .into_iter()
                .find(|d| d.group_version.group == group && d.plural == plural && d.namespaced);
            if let Some(def) = def {
                if scoped || quota_usage::is_measured(&group, &plural) {
                    let key = (group.clone(), plural.clone());
                    if !measured.contains_key(&key) {
                        let total = measure(registry, &def, namespace, quota, now).await;
                        measured.insert(key.clone(), total);
                    }
                    amount = measured[&key].get(name).copied().unwrap_or(0);
                } else if let Ok(counted) = registry.count(&def, Some(namespace)).await {
                    amount = i128::try_from(counted).unwrap_or(0) * 1000;
                }
            }
        }
        used.insert(name.clone(), json!(quota_usage::quantity(name, amount)));
    }
    json!({"hard": hard, "used": used})
}

/// What the objects of `def` in `namespace` that `quota` counts use, summed.
async fn measure(
    registry: &Client,
    def: &plinth_registry::resources::ResourceDef,
    namespace: &str,
    quota: &Value,
    now: i64,
) -> Usage {
    let mut total = Usage::new();
    let Ok(list) = registry
        .list(
            def,
            Some(namespace),
            &plinth_registry::ListOptions::default(),
        )
        .await
    else {
        return total;
    };
    let (group, plural) = (def.group_version.group.as_str(), def.plural.as_str());
    for object in list["items"].as_array().into_iter().flatten() {
        if !quota_usage::quota_counts(quota, group, plural, object) {
            continue;
        }
        for (name, amount) in quota_usage::usage(group, plural, object, now) {
            *total.entry(name).or_insert(0) += amount;
        }
    }
    total
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
                            .at("/status/used")
                            .and_then(|u| u.get(resource))
                            .and_then(quota_usage::milli);
                        let counted = quota_usage::milli(value);
                        if let (Some(shown), Some(counted)) = (shown, counted)
                            && shown > counted
                        {
                            *value = json!(quota_usage::quantity(resource, shown));
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
