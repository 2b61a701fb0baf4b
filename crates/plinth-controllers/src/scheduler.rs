//! The scheduler (kube-scheduler's default profile, its filters in small): a pending Pod of
//! `default-scheduler` goes to a Ready, schedulable node whose taints it tolerates, whose
//! labels its `nodeSelector` and required node affinity match, with room for its requests
//! (CPU, memory, pod count), no pod its required anti-affinity on `kubernetes.io/hostname`
//! excludes and the pods its required affinity there asks for; among those, the least
//! loaded. A pod that fits nowhere gets kube's `FailedScheduling` event and
//! `PodScheduled=False` (`Unschedulable`), and is tried again.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use plinth_core::selector::LabelSelector;
use plinth_registry::{Client, Part, WriteOptions};

use crate::informer::{Informer, Queue, SharedInformers, key_of};
use serde_json::{Value, json};
use tokio::sync::watch;

const COMPONENT: &str = "default-scheduler";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// Starts the scheduler on the shared pod and node informers (no list per decision); it ends
/// when `stopping` becomes true.
pub fn spawn_scheduler(
    registry: Client,
    informers: &SharedInformers,
    stopping: watch::Receiver<bool>,
) {
    let queue = Queue::default();
    let pods = {
        let queue = queue.clone();
        informers.start(("", "pods"), move |c| {
            if let Some(pod) = c.new.filter(|p| pending(p)) {
                queue.add(key_of(pod));
            }
        })
    };
    // A node change (a new node, one turning Ready) is seen by the next tick's retry.
    let nodes = informers.start(("", "nodes"), |_| {});
    tokio::spawn(async move {
        let mut stopping = stopping;
        let mut reported: HashMap<String, String> = HashMap::new();
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        pods.synced().await;
        nodes.synced().await;
        loop {
            tokio::select! {
                key = queue.next(&mut stopping) => {
                    let Some(key) = key else { return };
                    if let Some(pod) = pods.get(&key).filter(|p| pending(p)) {
                        schedule(&registry, &pods, &nodes, &pod, &mut reported).await;
                    }
                }
                _ = ticks.tick() => {
                    // Pods that fit nowhere are tried again.
                    for pod in pods.all_values() {
                        if pending(&pod) {
                            queue.add(key_of(&pod));
                        }
                    }
                    reported.retain(|_, m| !m.is_empty());
                }
            }
        }
    });
}

fn pending(pod: &Value) -> bool {
    let unassigned = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    let ours = pod
        .pointer("/spec/schedulerName")
        .and_then(Value::as_str)
        .is_none_or(|s| s == COMPONENT);
    let deleting = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    let gated = pod
        .pointer("/spec/schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty());
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    unassigned && ours && !deleting && !gated && !finished
}

/// CPU (millicores) and memory (bytes) a pod asks for: its containers' requests summed, or
/// its largest init container's if more.
fn requests(pod: &Value) -> (i64, i64) {
    let of = |c: &Value| {
        let cpu = c
            .pointer("/resources/requests/cpu")
            .and_then(plinth_core::quantity::millis)
            .unwrap_or(0);
        let memory = c
            .pointer("/resources/requests/memory")
            .and_then(plinth_core::quantity::bytes)
            .unwrap_or(0);
        (cpu, memory)
    };
    let list = |key: &str| -> Vec<(i64, i64)> {
        pod.pointer(&format!("/spec/{key}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(of)
            .collect()
    };
    let main = list("containers")
        .into_iter()
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let init = list("initContainers")
        .into_iter()
        .fold((0, 0), |a, b| (a.0.max(b.0), a.1.max(b.1)));
    (main.0.max(init.0), main.1.max(init.1))
}

pub(crate) fn ready(node: &Value) -> bool {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

pub(crate) fn tolerates(pod: &Value, taint: &Value) -> bool {
    pod.pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|t| {
            let effect_ok = t["effect"]
                .as_str()
                .is_none_or(|e| e.is_empty() || Some(e) == taint["effect"].as_str());
            let key = t["key"].as_str().unwrap_or("");
            let key_ok = key.is_empty() || Some(key) == taint["key"].as_str();
            let value_ok = match t["operator"].as_str().unwrap_or("Equal") {
                "Exists" => true,
                _ => t["value"].as_str().unwrap_or("") == taint["value"].as_str().unwrap_or(""),
            };
            effect_ok && key_ok && (value_ok || key.is_empty() && t["operator"] == "Exists")
        })
}

/// One `nodeSelectorRequirement` against a node's labels.
fn requirement_met(requirement: &Value, labels: &BTreeMap<String, String>) -> bool {
    let key = requirement["key"].as_str().unwrap_or("");
    let values: Vec<&str> = requirement["values"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let value = labels.get(key);
    let number = |s: &str| s.parse::<i64>().ok();
    match requirement["operator"].as_str().unwrap_or("") {
        "In" => value.is_some_and(|v| values.contains(&v.as_str())),
        "NotIn" => value.is_none_or(|v| !values.contains(&v.as_str())),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((value.and_then(|v| number(v)), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a > b)
        }
        "Lt" => {
            matches!((value.and_then(|v| number(v)), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

pub(crate) fn affinity_met(pod: &Value, node: &Value) -> bool {
    let node_labels = plinth_core::meta::labels(node);
    let selector_ok = pod
        .pointer("/spec/nodeSelector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| node_labels.get(k).map(String::as_str) == v.as_str());
    let terms = pod
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array);
    let name = plinth_core::meta::name(node).unwrap_or("");
    let affinity_ok = terms.is_none_or(|terms| {
        terms.iter().any(|term| {
            let expressions = term["matchExpressions"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|r| requirement_met(r, &node_labels));
            let fields = term["matchFields"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|r| {
                    let by_name: BTreeMap<String, String> =
                        [("metadata.name".to_owned(), name.to_owned())].into();
                    requirement_met(r, &by_name)
                });
            expressions && fields
        })
    });
    selector_ok && affinity_ok
}

/// Whether `pod`'s required pod affinity on the node's hostname holds: each term's selector
/// matches a pod already on the node.
fn affinity_held(pod: &Value, others: &[&Value]) -> bool {
    pod.pointer("/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|t| t["topologyKey"] == HOSTNAME)
        .all(|term| {
            let selector = term
                .get("labelSelector")
                .filter(|s| s.is_object())
                .and_then(|s| LabelSelector::from_object(s).ok());
            let namespaces: Vec<&str> = term["namespaces"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            others.iter().any(|other| {
                let namespace = plinth_core::meta::namespace(other).unwrap_or("");
                let same = if namespaces.is_empty() {
                    plinth_core::meta::namespace(pod) == Some(namespace)
                } else {
                    namespaces.contains(&namespace)
                };
                same && selector
                    .as_ref()
                    .is_some_and(|s| s.matches(&plinth_core::meta::labels(other)))
            })
        })
}

/// Whether a pod already on the node makes `pod`'s required anti-affinity (on the node's
/// hostname) fail, or the other pod's anti-affinity rules out `pod`.
fn anti_affinity_conflict(pod: &Value, others: &[&Value]) -> bool {
    let terms = |p: &Value| -> Vec<Value> {
        p.pointer("/spec/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t["topologyKey"] == HOSTNAME)
            .collect()
    };
    let matches = |term: &Value, owner: &Value, candidate: &Value| {
        let same_namespace = term["namespaces"]
            .as_array()
            .filter(|n| !n.is_empty())
            .map_or_else(
                || plinth_core::meta::namespace(owner) == plinth_core::meta::namespace(candidate),
                |n| {
                    n.iter()
                        .any(|ns| ns.as_str() == plinth_core::meta::namespace(candidate))
                },
            );
        let selector = term
            .get("labelSelector")
            .filter(|s| s.is_object())
            .and_then(|s| LabelSelector::from_object(s).ok());
        same_namespace && selector.is_some_and(|s| s.matches(&plinth_core::meta::labels(candidate)))
    };
    let own = terms(pod);
    others.iter().any(|other| {
        own.iter().any(|t| matches(t, pod, other))
            || terms(other).iter().any(|t| matches(t, other, pod))
    })
}

/// Why `node` cannot take `pod` (kube's wording), or `None` when it can.
fn unfit(pod: &Value, node: &Value, on_node: &[&Value]) -> Option<String> {
    if node.pointer("/spec/unschedulable") == Some(&json!(true)) {
        return Some("node(s) were unschedulable".into());
    }
    if !ready(node) {
        return Some("node(s) had untolerated taint {node.kubernetes.io/not-ready: }".into());
    }
    for taint in node
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let blocking = matches!(taint["effect"].as_str(), Some("NoSchedule" | "NoExecute"));
        if blocking && !tolerates(pod, taint) {
            return Some(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint["key"].as_str().unwrap_or(""),
                taint["value"].as_str().unwrap_or("")
            ));
        }
    }
    if !affinity_met(pod, node) {
        return Some("node(s) didn't match Pod's node affinity/selector".into());
    }
    let allocatable = |r: &str| node.pointer(&format!("/status/allocatable/{r}"));
    let pods_max = allocatable("pods")
        .and_then(plinth_core::quantity::bytes)
        .unwrap_or(110);
    if i64::try_from(on_node.len()).unwrap_or(i64::MAX) >= pods_max {
        return Some("Too many pods".into());
    }
    let (cpu, memory) = requests(pod);
    let (used_cpu, used_memory) = on_node
        .iter()
        .map(|p| requests(p))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    if let Some(cap) = allocatable("cpu").and_then(plinth_core::quantity::millis)
        && cpu > 0
        && used_cpu + cpu > cap
    {
        return Some("Insufficient cpu".into());
    }
    if let Some(cap) = allocatable("memory").and_then(plinth_core::quantity::bytes)
        && memory > 0
        && used_memory + memory > cap
    {
        return Some("Insufficient memory".into());
    }
    if anti_affinity_conflict(pod, on_node) {
        return Some("node(s) didn't match pod anti-affinity rules".into());
    }
    if !affinity_held(pod, on_node) {
        return Some("node(s) didn't match pod affinity rules".into());
    }
    None
}

/// How long a binding may take to reach the pod cache before the next decision goes ahead
/// without it (kube's scheduler "assumes" the pod bound instead).
const BOUND_WAIT: Duration = Duration::from_secs(5);

async fn schedule(
    registry: &Client,
    pod_cache: &Informer,
    node_cache: &Informer,
    pod: &Value,
    reported: &mut HashMap<String, String>,
) {
    let nodes = node_cache.all_values();
    let pods = pod_cache.all_values();
    let uid = plinth_core::meta::meta_str(pod, "uid")
        .unwrap_or("")
        .to_owned();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut best: Option<(usize, String)> = None;
    for node in &nodes {
        let name = plinth_core::meta::name(node).unwrap_or("").to_owned();
        let on_node: Vec<&Value> = pods
            .iter()
            .map(|p| &**p)
            .filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str) == Some(&name))
            .filter(|p| {
                !matches!(
                    p.pointer("/status/phase").and_then(Value::as_str),
                    Some("Succeeded" | "Failed")
                )
            })
            .collect();
        match unfit(pod, node, &on_node) {
            Some(reason) => *reasons.entry(reason).or_default() += 1,
            None => {
                if best.as_ref().is_none_or(|(load, _)| on_node.len() < *load) {
                    best = Some((on_node.len(), name));
                }
            }
        }
    }
    let name = plinth_core::meta::name(pod).unwrap_or("").to_owned();
    let namespace = plinth_core::meta::namespace(pod)
        .unwrap_or("default")
        .to_owned();
    let Some(def) = registry.resources.get("", "v1", "pods") else {
        return;
    };
    match best {
        Some((_, node)) => {
            let bound = registry
                .modify(
                    &def,
                    Some(&namespace),
                    &name,
                    Part::Main,
                    &WriteOptions::internal(COMPONENT),
                    |current| {
                        if !pending(current) {
                            return Ok(false);
                        }
                        current["spec"]["nodeName"] = json!(node);
                        Ok(true)
                    },
                )
                .await;
            match bound {
                Ok(Some(_)) => {
                    // The next decision counts this pod on its node: wait until the cache
                    // shows the binding.
                    let key = format!("{namespace}/{name}");
                    pod_cache
                        .wait_until(BOUND_WAIT, |cache| {
                            cache.get(&key).is_none_or(|p| !pending(&p))
                        })
                        .await;
                    reported.remove(&uid);
                    crate::events::record(
                        registry,
                        pod,
                        "Normal",
                        "Scheduled",
                        &format!("Successfully assigned {namespace}/{name} to {node}"),
                        COMPONENT,
                    )
                    .await;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(pod = %name, error = %e.message, "scheduler: binding failed")
                }
            }
        }
        None => {
            let total = nodes.len();
            let message = if total == 0 {
                "no nodes available to schedule pods".to_owned()
            } else {
                let parts: Vec<String> = reasons
                    .iter()
                    .map(|(reason, count)| format!("{count} {reason}"))
                    .collect();
                format!(
                    "0/{total} nodes are available: {}. preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling.",
                    parts.join(", ")
                )
            };
            if reported.get(&uid) == Some(&message) {
                return;
            }
            reported.insert(uid, message.clone());
            crate::events::record(
                registry,
                pod,
                "Warning",
                "FailedScheduling",
                &message,
                COMPONENT,
            )
            .await;
            let now = plinth_core::meta::format_time(plinth_registry::now());
            let _ = registry
                .modify(
                    &def,
                    Some(&namespace),
                    &name,
                    Part::Status,
                    &WriteOptions::internal(COMPONENT),
                    |current| {
                        let condition = json!({"type": "PodScheduled", "status": "False",
                            "reason": "Unschedulable", "message": message,
                            "lastProbeTime": null, "lastTransitionTime": now});
                        let conditions = current["status"]["conditions"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default();
                        let mut kept: Vec<Value> = conditions
                            .into_iter()
                            .filter(|c| c["type"] != "PodScheduled")
                            .collect();
                        kept.push(condition);
                        current["status"]["conditions"] = json!(kept);
                        Ok(true)
                    },
                )
                .await;
        }
    }
}
