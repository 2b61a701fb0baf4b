//! The ReplicaSet controller (kube-controller-manager's `replicaset`) and the
//! ReplicationManager (its `replicationcontroller`, the same pass over the older kind whose
//! selector is a map): each ReplicaSet or ReplicationController has `spec.replicas` active
//! pods matching its selector — orphans adopted, strays released,
//! missing pods created from the template, extra ones deleted in kube's order (unscheduled,
//! then pending, not ready, recently ready, most restarted, newest first) — and a status
//! counting its replicas, the ready and the available ones.

use std::sync::Arc;
use std::time::Duration;

use plinth_core::Frozen;
use plinth_registry::{Client, DeleteOptions, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::informer::{Informer, Next, Queue, SharedInformers, enqueue, key_of, run_workers};
use crate::workload::{
    EXPECTATION_TIMEOUT, PodName, active, available, claim, controller_of, controller_ref,
    deleting, enqueue_owner, next_available, pod_from_template, ready, ready_since, write_status,
};

/// The kind a controller of this module keeps.
struct Kind {
    /// Its resource (group, plural).
    resource: (&'static str, &'static str),
    api_version: &'static str,
    kind: &'static str,
    /// The field manager and event source of its writes.
    manager: &'static str,
}

const REPLICA_SETS: Kind = Kind {
    resource: ("apps", "replicasets"),
    api_version: "apps/v1",
    kind: "ReplicaSet",
    manager: "replicaset-controller",
};

const REPLICATION_CONTROLLERS: Kind = Kind {
    resource: ("", "replicationcontrollers"),
    api_version: "v1",
    kind: "ReplicationController",
    manager: "replication-controller",
};

/// At most this many pods are created or deleted in one pass (kube's `burstReplicas`).
const BURST: usize = 500;

/// Starts the ReplicaSet controller; it ends when `stopping` becomes true.
pub fn spawn_replicaset_controller(
    registry: Client,
    informers: &SharedInformers,
    stopping: watch::Receiver<bool>,
) {
    spawn_for(&REPLICA_SETS, registry, informers, stopping);
}

/// Starts the ReplicationManager (ReplicationControllers); it ends when `stopping` becomes
/// true.
pub fn spawn_replication_manager(
    registry: Client,
    informers: &SharedInformers,
    stopping: watch::Receiver<bool>,
) {
    spawn_for(&REPLICATION_CONTROLLERS, registry, informers, stopping);
}

fn spawn_for(
    kind: &'static Kind,
    registry: Client,
    informers: &SharedInformers,
    stopping: watch::Receiver<bool>,
) {
    let queue = Queue::default();
    let sets = informers.start(kind.resource, enqueue(&queue));
    let pods = informers.start(
        ("", "pods"),
        enqueue_owner(&queue, kind.kind, Some(sets.clone())),
    );
    tokio::spawn(async move {
        let (registry, cached) = (&registry, &pods);
        run_workers(
            queue,
            stopping,
            &[&sets, &pods],
            &sets,
            move |set| async move { sync(kind, registry, cached, &set).await },
        )
        .await;
    });
}

/// One pass over a ReplicaSet: a retry after its backoff if a pod could not be created, else
/// when to look again, if a pod's availability is due.
async fn sync(kind: &Kind, registry: &Client, pods: &Informer, set: &Frozen) -> Next {
    let controller = controller_ref(set, kind.api_version, kind.kind);
    let owned: Vec<Arc<Frozen>> =
        claim(registry, pods, ("", "pods"), set, &controller, kind.manager)
            .await
            .into_iter()
            .filter(|p| active(p))
            .collect();
    let wanted = set
        .at("/spec/replicas")
        .and_then(Frozen::as_i64)
        .unwrap_or(1);
    let wanted = usize::try_from(wanted).unwrap_or(0);
    let mut failure = None;
    if !deleting(set) {
        failure = if owned.len() < wanted {
            create_pods(kind, registry, pods, set, &controller, wanted - owned.len()).await
        } else if owned.len() > wanted {
            delete_pods(kind, registry, pods, set, &owned, owned.len() - wanted).await;
            None
        } else {
            None
        };
    }
    // The status counts what the cache shows now (the pass's own writes included).
    let namespace = plinth_core::meta::namespace(set).unwrap_or("default");
    let set_uid = crate::workload::uid(set);
    let current: Vec<Arc<Frozen>> = pods
        .in_namespace(namespace)
        .into_iter()
        .filter(|p| active(p) && controller_of(p).is_some_and(|c| c["uid"] == set_uid))
        .collect();
    let min_ready = set
        .at("/spec/minReadySeconds")
        .and_then(Frozen::as_i64)
        .unwrap_or(0);
    let now = plinth_registry::now();
    let template_labels = crate::workload::labels_of_template(set);
    let count = |f: &dyn Fn(&Frozen) -> bool| current.iter().filter(|p| f(p)).count();
    let mut status = json!({
        "replicas": current.len(),
        "fullyLabeledReplicas": count(&|p| {
            let labels = plinth_core::meta::labels(p);
            template_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
        }),
        "readyReplicas": count(&|p| ready(p)),
        "availableReplicas": count(&|p| available(p, min_ready, now)),
        "observedGeneration": set.at("/metadata/generation").map_or(json!(1), Frozen::to_value),
    });
    let terminating = pods
        .in_namespace(namespace)
        .iter()
        .filter(|p| deleting(p) && controller_of(p).is_some_and(|c| c["uid"] == set_uid))
        .count();
    if terminating > 0 {
        status["terminatingReplicas"] = json!(terminating);
    }
    let failed = failure.is_some();
    // A failure already reported stays as it was (kube sets the condition once, not each pass:
    // the message names a generated pod, and rewriting it would wake this controller forever).
    let reported = set
        .at("/status/conditions")
        .and_then(Frozen::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "ReplicaFailure"));
    if let (Some(_), Some(reported)) = (&failure, reported) {
        status["conditions"] = json!([reported]);
    } else if let Some(message) = failure {
        status["conditions"] = json!([{
            "type": "ReplicaFailure",
            "status": "True",
            "reason": "FailedCreate",
            "message": message,
            "lastTransitionTime": plinth_core::meta::format_time(now),
        }]);
    }
    write_status(registry, kind.resource, set, status, kind.manager).await;
    if failed {
        return Next::Retry;
    }
    if min_ready > 0 {
        let ready_pods: Vec<Arc<Frozen>> = current.into_iter().filter(|p| ready(p)).collect();
        return next_available(&ready_pods, min_ready, now)
            .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(1)))
            .into();
    }
    Next::Idle
}

/// Creates `missing` pods (at most [`BURST`]); the first failure's message.
async fn create_pods(
    kind: &Kind,
    registry: &Client,
    pods: &Informer,
    set: &Frozen,
    controller: &Value,
    missing: usize,
) -> Option<String> {
    let def = registry.resources.get("", "v1", "pods")?;
    let name = plinth_core::meta::name(set).unwrap_or("");
    let namespace = plinth_core::meta::namespace(set).unwrap_or("default");
    let template = set.at("/spec/template").map_or(json!({}), Frozen::to_value);
    let prefix = format!("{name}-");
    let mut created = Vec::new();
    // kube's slow start: batches of 1, 2, 4, … created at once, stopping at the first batch
    // with a failure (a quota or admission refusal does not cost `missing` calls).
    let mut left = missing.min(BURST);
    let mut size = 1;
    while left > 0 {
        let batch = size.min(left);
        left -= batch;
        size *= 2;
        let creates = (0..batch).map(|_| {
            let pod = pod_from_template(&template, set, controller, PodName::Generated(&prefix));
            let def = &def;
            async move {
                let written = registry
                    .create(
                        def,
                        Some(namespace),
                        pod,
                        &WriteOptions::internal(kind.manager),
                    )
                    .await;
                let (kind_of, reason, message) = match &written {
                    Ok(written) => (
                        "Normal",
                        "SuccessfulCreate",
                        format!(
                            "Created pod: {}",
                            plinth_core::meta::name(&written.object).unwrap_or("")
                        ),
                    ),
                    Err(e) => (
                        "Warning",
                        "FailedCreate",
                        format!("Error creating: {}", e.message),
                    ),
                };
                crate::events::record(registry, set, kind_of, reason, &message, kind.manager).await;
                written
                    .map(|w| plinth_core::meta::name(&w.object).unwrap_or("").to_owned())
                    .map_err(|e| e.message)
            }
        });
        let mut failure = None;
        for outcome in futures::future::join_all(creates).await {
            match outcome {
                Ok(pod_name) => created.push(format!("{namespace}/{pod_name}")),
                Err(message) => failure = failure.or(Some(message)),
            }
        }
        if let Some(message) = failure {
            pods.wait_until(EXPECTATION_TIMEOUT, |p| {
                created.iter().all(|k| p.get(k).is_some())
            })
            .await;
            return Some(message);
        }
    }
    // Expectations: the next pass starts from a cache that holds these pods.
    pods.wait_until(EXPECTATION_TIMEOUT, |p| {
        created.iter().all(|k| p.get(k).is_some())
    })
    .await;
    None
}

/// Deletes `extra` of `owned`, the least useful first.
async fn delete_pods(
    kind: &Kind,
    registry: &Client,
    pods: &Informer,
    set: &Frozen,
    owned: &[Arc<Frozen>],
    extra: usize,
) {
    let Some(def) = registry.resources.get("", "v1", "pods") else {
        return;
    };
    let mut ranked: Vec<&Arc<Frozen>> = owned.iter().collect();
    ranked.sort_by_key(|p| deletion_rank(p));
    let mut deleted = Vec::new();
    for pod in ranked.into_iter().take(extra.min(BURST)) {
        let name = plinth_core::meta::name(pod).unwrap_or("");
        let namespace = plinth_core::meta::namespace(pod);
        match registry
            .delete(&def, namespace, name, &DeleteOptions::default())
            .await
        {
            Ok(_) => {
                crate::events::record(
                    registry,
                    set,
                    "Normal",
                    "SuccessfulDelete",
                    &format!("Deleted pod: {name}"),
                    kind.manager,
                )
                .await;
                deleted.push(key_of(pod));
            }
            Err(e) => tracing::debug!(pod = %name, error = %e.message, "pod not deleted"),
        }
    }
    pods.wait_until(EXPECTATION_TIMEOUT, |p| {
        deleted
            .iter()
            .all(|k| p.get(k).is_none_or(|pod| deleting(&pod)))
    })
    .await;
}

/// kube's `ActivePods` order, the pod to delete first sorting first: unscheduled before
/// scheduled, pending before unknown before running, not ready before ready, ready more
/// recently before longer, more restarts before fewer, newer before older.
fn deletion_rank(pod: &Frozen) -> (bool, u8, bool, i64, i64, i64) {
    let scheduled = pod
        .at("/spec/nodeName")
        .and_then(Frozen::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = match pod.at("/status/phase").and_then(Frozen::as_str) {
        Some("Pending") => 0,
        Some("Running") => 2,
        _ => 1,
    };
    let ready_at = ready_since(pod);
    let restarts: i64 = pod
        .at("/status/containerStatuses")
        .and_then(Frozen::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c["restartCount"].as_i64())
        .sum();
    let created = plinth_core::meta::meta_str(pod, "creationTimestamp")
        .and_then(plinth_core::meta::parse_time)
        .unwrap_or(0);
    (
        scheduled,
        phase,
        ready_at.is_some(),
        -ready_at.unwrap_or(0),
        -restarts,
        -created,
    )
}
