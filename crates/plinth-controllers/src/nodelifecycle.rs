//! The node lifecycle controller (kube-controller-manager's `node-lifecycle-controller` with
//! its taint-based eviction): a node whose agent has not renewed its Lease nor its status
//! for the grace period turns `Ready=Unknown` ("Kubelet stopped posting node status.") and
//! gets the `node.kubernetes.io/unreachable` taints (`not-ready` for `Ready=False`); a
//! `NoExecute` taint evicts the node's pods that do not tolerate it, at once or after their
//! `tolerationSeconds`. A node that comes back loses the taints.

use plinth_core::At as _;
use std::time::Duration;

use plinth_core::Frozen;
use plinth_registry::{Client, DeleteOptions, Part, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::informer::{Informer, SharedInformers};

const MANAGER: &str = "node-lifecycle-controller";
/// The taint of a node whose agent is not heard from.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The taint of a node whose agent says it is not ready.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";

/// How the controller judges nodes.
#[derive(Clone, Copy, Debug)]
pub struct NodeLifecycle {
    /// How long a node may go unheard before it is `Unknown` (kube's
    /// `--node-monitor-grace-period`, 40 s).
    pub grace: Duration,
    /// How often nodes are looked at (`--node-monitor-period`, 5 s).
    pub period: Duration,
}

impl Default for NodeLifecycle {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(40),
            period: Duration::from_secs(5),
        }
    }
}

/// Starts the controller on the shared node and pod informers; it ends when `stopping`
/// becomes true.
pub fn spawn_node_lifecycle(
    registry: Client,
    informers: &SharedInformers,
    settings: NodeLifecycle,
    stopping: watch::Receiver<bool>,
) {
    // A periodic check: the informers are read, not listened to.
    let nodes = informers.start(("", "nodes"), |_| {});
    let pods = informers.start(("", "pods"), |_| {});
    tokio::spawn(run(registry, nodes, pods, settings, stopping));
}

async fn run(
    registry: Client,
    nodes: Informer,
    pods: Informer,
    settings: NodeLifecycle,
    mut stopping: watch::Receiver<bool>,
) {
    nodes.synced().await;
    pods.synced().await;
    let mut ticks = tokio::time::interval(settings.period);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        let pods = pods.all_values();
        for node in nodes.all_values() {
            let node = node.to_value();
            let node = check(&registry, &node, &settings).await.unwrap_or(node);
            evict(&registry, &node, &pods).await;
        }
    }
}

fn time_of(value: Option<&Value>) -> Option<i64> {
    let text = value?.as_str()?;
    // MicroTime (`…:05.123456Z`) or Time.
    let whole = match text.split_once('.') {
        Some((head, _)) => format!("{head}Z"),
        None => text.to_owned(),
    };
    plinth_core::meta::parse_time(&whole)
}

/// When the node's agent was last heard from: its Lease's renewal or its status's heartbeat.
async fn last_heard(registry: &Client, node: &Value) -> Option<i64> {
    let name = plinth_core::meta::name(node)?;
    let heartbeat = node
        .at("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| time_of(c.get("lastHeartbeatTime")));
    let lease = match registry
        .resources
        .get("coordination.k8s.io", "v1", "leases")
    {
        Some(def) => registry
            .get(&def, Some("kube-node-lease"), name)
            .await
            .ok()
            .and_then(|l| time_of(l.at("/spec/renewTime"))),
        None => None,
    };
    heartbeat.max(lease)
}

fn ready_status(node: &Value) -> Option<String> {
    node.at("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str())
        .map(str::to_owned)
}

/// Marks an unheard node `Unknown` and sets the taints its readiness calls for; returns the
/// node as written, if it was.
async fn check(registry: &Client, node: &Value, settings: &NodeLifecycle) -> Option<Value> {
    let def = registry.resources.get("", "v1", "nodes")?;
    let name = plinth_core::meta::name(node)?.to_owned();
    let now = plinth_registry::now();
    let grace = i64::try_from(settings.grace.as_secs()).unwrap_or(40);
    let heard = last_heard(registry, node).await;
    let silent = heard.is_some_and(|t| now - t > grace)
        || (heard.is_none()
            && time_of(node.at("/metadata/creationTimestamp")).is_some_and(|t| now - t > grace));
    if silent && ready_status(node).as_deref() != Some("Unknown") {
        let stamp = plinth_core::meta::format_time(now);
        let written = registry
            .modify(
                &def,
                None,
                &name,
                Part::Status,
                &WriteOptions::internal(MANAGER),
                |current| {
                    let conditions = current["status"]["conditions"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    let mut changed = false;
                    let updated: Vec<Value> = conditions
                        .into_iter()
                        .map(|mut c| {
                            if c["status"] != "Unknown" {
                                c["status"] = json!("Unknown");
                                c["reason"] = json!("NodeStatusUnknown");
                                c["message"] = json!("Kubelet stopped posting node status.");
                                c["lastTransitionTime"] = json!(stamp);
                                changed = true;
                            }
                            c
                        })
                        .collect();
                    current["status"]["conditions"] = json!(updated);
                    Ok(changed)
                },
            )
            .await;
        if let Err(e) = written {
            tracing::warn!(node = %name, error = %e.message, "node lifecycle: status not written");
        }
    }
    let current = registry.get(&def, None, &name).await.ok()?;
    let wanted: Vec<(&str, &str)> = match ready_status(&current).as_deref() {
        Some("Unknown") => vec![(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")],
        Some("False") => vec![(NOT_READY, "NoSchedule"), (NOT_READY, "NoExecute")],
        _ => Vec::new(),
    };
    let stamp = plinth_core::meta::format_time(now);
    let written = registry
        .modify(
            &def,
            None,
            &name,
            Part::Main,
            &WriteOptions::internal(MANAGER),
            |current| {
                let taints = current["spec"]["taints"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let ours = |t: &Value| {
                    t["key"]
                        .as_str()
                        .is_some_and(|k| k == UNREACHABLE || k == NOT_READY)
                };
                let mut kept: Vec<Value> = taints.iter().filter(|t| !ours(t)).cloned().collect();
                for (key, effect) in &wanted {
                    let existing = taints
                        .iter()
                        .find(|t| t["key"] == *key && t["effect"] == *effect)
                        .cloned();
                    kept.push(existing.unwrap_or_else(|| {
                        let mut taint = json!({"key": key, "effect": effect});
                        if *effect == "NoExecute" {
                            taint["timeAdded"] = json!(stamp);
                        }
                        taint
                    }));
                }
                if kept == taints {
                    return Ok(false);
                }
                if kept.is_empty() {
                    if let Some(spec) = current["spec"].as_object_mut() {
                        spec.remove("taints");
                    }
                } else {
                    current["spec"]["taints"] = json!(kept);
                }
                Ok(true)
            },
        )
        .await;
    match written {
        Ok(Some(w)) => Some(w.object),
        Ok(None) => Some(current),
        Err(e) => {
            tracing::warn!(node = %name, error = %e.message, "node lifecycle: taints not written");
            Some(current)
        }
    }
}

/// How long `pod` tolerates `taint`: `None` not at all, `Some(None)` forever.
fn tolerated_for(pod: &Frozen, taint: &Value) -> Option<Option<i64>> {
    pod.at("/spec/tolerations")
        .and_then(Frozen::as_array)
        .into_iter()
        .flatten()
        .filter(|t| {
            let effect_ok = t["effect"]
                .as_str()
                .is_none_or(|e| e.is_empty() || Some(e) == taint["effect"].as_str());
            let key = t["key"].as_str().unwrap_or("");
            let exists = t["operator"] == "Exists";
            let key_ok = (key.is_empty() && exists) || Some(key) == taint["key"].as_str();
            let value_ok = exists
                || t["value"].as_str().unwrap_or("") == taint["value"].as_str().unwrap_or("");
            effect_ok && key_ok && value_ok
        })
        .map(|t| t["tolerationSeconds"].as_i64())
        .reduce(|a, b| match (a, b) {
            (None, _) | (_, None) => None,
            (Some(x), Some(y)) => Some(x.max(y)),
        })
}

/// Deletes the node's pods that a `NoExecute` taint no longer lets stay.
async fn evict(registry: &Client, node: &Value, pods: &[std::sync::Arc<Frozen>]) {
    let Some(name) = plinth_core::meta::name(node) else {
        return;
    };
    let taints: Vec<&Value> = node
        .at("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|t| t["effect"] == "NoExecute")
        .collect();
    if taints.is_empty() {
        return;
    }
    let Some(def) = registry.resources.get("", "v1", "pods") else {
        return;
    };
    let now = plinth_registry::now();
    for pod in pods {
        let on_node = pod.at("/spec/nodeName").and_then(Frozen::as_str) == Some(name);
        let deleting = pod
            .at("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null());
        if !on_node || deleting {
            continue;
        }
        let due = taints.iter().any(|taint| match tolerated_for(pod, taint) {
            None => true,
            Some(None) => false,
            Some(Some(seconds)) => {
                let added = time_of(taint.get("timeAdded")).unwrap_or(now);
                now >= added + seconds
            }
        });
        if !due {
            continue;
        }
        let pod_name = plinth_core::meta::name(pod).unwrap_or("");
        let namespace = plinth_core::meta::namespace(pod).unwrap_or("default");
        crate::events::record(
            registry,
            pod,
            "Normal",
            "TaintManagerEviction",
            &format!("Marking for deletion Pod {namespace}/{pod_name}"),
            "taint-eviction-controller",
        )
        .await;
        if let Err(e) = registry
            .delete(&def, Some(namespace), pod_name, &DeleteOptions::default())
            .await
        {
            tracing::warn!(pod = %pod_name, error = %e.message, "taint eviction: delete failed");
        }
    }
}
