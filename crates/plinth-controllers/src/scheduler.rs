//! The scheduler (kube-scheduler's default profile, its filters in small): a pending Pod of
//! `default-scheduler` goes to a Ready, schedulable node whose taints it tolerates, whose
//! labels its `nodeSelector` and required node affinity match, with room for its requests
//! (CPU, memory, pod count), no pod its required anti-affinity on `kubernetes.io/hostname`
//! excludes and the pods its required affinity there asks for; among those, the least
//! loaded. Pending pods are tried in priority order (`spec.priority`, then age). A pod that
//! fits nowhere gets kube's `FailedScheduling` event and `PodScheduled=False`
//! (`Unschedulable`), and is tried again; unless its `preemptionPolicy` is `Never`, it
//! preempts: on the node where evicting the fewest lower-priority pods (the lowest first)
//! makes room, those pods get `DisruptionTarget` and a `Preempted` event and are deleted, and
//! the pod is nominated to the node (`status.nominatedNodeName`), which pods of lower
//! priority then count as taken.

use plinth_core::At as _;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plinth_core::selector::LabelSelector;
use plinth_registry::{Client, Part, WriteOptions};

use crate::informer::{Informer, Queue, SharedInformers, key_of};
use plinth_core::{Frozen, Tree};
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
            if let Some(pod) = c.new.filter(pending) {
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
        let binder = Binder {
            assumed: Arc::default(),
            permits: Arc::new(tokio::sync::Semaphore::new(BINDS_IN_FLIGHT)),
            queue: queue.clone(),
        };
        pods.synced().await;
        nodes.synced().await;
        loop {
            tokio::select! {
                key = queue.next(&mut stopping) => {
                    let Some(key) = key else { return };
                    // The keys queued now are decided on one snapshot, kept up to date with
                    // the batch's own bindings (reading the cache once, not once per pod).
                    let mut batch = vec![key];
                    while batch.len() < BATCH && !queue.is_empty() {
                        match queue.next(&mut stopping).await {
                            Some(key) => batch.push(key),
                            None => return,
                        }
                    }
                    let mut snapshot = Snapshot::take(&pods, &nodes, &binder);
                    for key in batch {
                        let taken = binder.assumed.lock().is_ok_and(|a| a.contains_key(&key));
                        if taken {
                            continue;
                        }
                        if let Some(pod) = pods.get(&key).filter(pending) {
                            schedule(&registry, &pods, &mut snapshot, &pod, &mut reported, &binder).await;
                        }
                    }
                }
                _ = ticks.tick() => {
                    // Pods that fit nowhere are tried again, the highest priority first.
                    let mut waiting: Vec<_> = pods.all_values().into_iter().filter(pending).collect();
                    waiting.sort_by(|a, b| {
                        priority(b).cmp(&priority(a)).then_with(|| created(a).cmp(created(b)))
                    });
                    for pod in waiting {
                        queue.add(key_of(&pod));
                    }
                    reported.retain(|_, m| !m.is_empty());
                }
            }
        }
    });
}

/// Whether `pod` names a node.
fn has_node(pod: &Frozen) -> bool {
    pod.at("/spec/nodeName")
        .and_then(Frozen::as_str)
        .is_some_and(|n| !n.is_empty())
}

fn pending<T: Tree + ?Sized>(pod: &T) -> bool {
    let unassigned = pod
        .path(&["spec", "nodeName"])
        .and_then(Tree::text)
        .is_none_or(str::is_empty);
    let ours = pod
        .path(&["spec", "schedulerName"])
        .and_then(Tree::text)
        .is_none_or(|s| s == COMPONENT);
    let deleting = pod
        .path(&["metadata", "deletionTimestamp"])
        .is_some_and(|t| !t.is_null());
    let gated = pod
        .path(&["spec", "schedulingGates"])
        .is_some_and(|g| !g.elements().is_empty());
    let finished = matches!(
        pod.path(&["status", "phase"]).and_then(Tree::text),
        Some("Succeeded" | "Failed")
    );
    unassigned && ours && !deleting && !gated && !finished
}

/// A pod's priority (`spec.priority`, set by the Priority admission plugin; 0 when absent).
fn priority(pod: &Frozen) -> i64 {
    pod.at("/spec/priority")
        .and_then(Frozen::as_i64)
        .unwrap_or(0)
}

fn created(pod: &Frozen) -> &str {
    pod.at("/metadata/creationTimestamp")
        .and_then(Frozen::as_str)
        .unwrap_or("")
}

fn deleting(pod: &Frozen) -> bool {
    pod.at("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// The containers of `pod`'s spec under `key` (`containers`, `initContainers`).
fn containers<'a>(pod: &'a Frozen, key: &str) -> impl Iterator<Item = &'a Frozen> {
    pod.at(&format!("/spec/{key}"))
        .and_then(Frozen::as_array)
        .into_iter()
        .flatten()
}

/// CPU (millicores) and memory (bytes) a pod asks for: its containers' requests summed, or
/// its largest init container's if more.
fn requests(pod: &Frozen) -> (i64, i64) {
    let of = |c: &Frozen| {
        let cpu = c
            .at("/resources/requests/cpu")
            .and_then(plinth_core::quantity::millis)
            .unwrap_or(0);
        let memory = c
            .at("/resources/requests/memory")
            .and_then(plinth_core::quantity::bytes)
            .unwrap_or(0);
        (cpu, memory)
    };
    let main = containers(pod, "containers")
        .map(of)
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let init = containers(pod, "initContainers")
        .map(of)
        .fold((0, 0), |a, b| (a.0.max(b.0), a.1.max(b.1)));
    (main.0.max(init.0), main.1.max(init.1))
}

/// What `pod` asks for of every resource other than cpu and memory (extended resources,
/// `ephemeral-storage`, huge pages), in thousandths: its containers' sum or its largest init
/// container's, whichever is more (kube's NodeResourcesFit).
fn other_requests(pod: &Frozen) -> BTreeMap<String, i64> {
    let of = |c: &Frozen| -> BTreeMap<String, i64> {
        c.at("/resources/requests")
            .and_then(Frozen::as_object)
            .into_iter()
            .flatten()
            .filter(|(name, _)| !matches!(*name, "cpu" | "memory"))
            .filter_map(|(name, v)| Some((name.to_owned(), plinth_core::quantity::millis(v)?)))
            .collect()
    };
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    for container in containers(pod, "containers").map(of) {
        for (name, n) in container {
            *total.entry(name).or_default() += n;
        }
    }
    for init in containers(pod, "initContainers").map(of) {
        for (name, n) in init {
            let entry = total.entry(name).or_default();
            *entry = (*entry).max(n);
        }
    }
    total
}

pub(crate) fn ready(node: &Frozen) -> bool {
    node.at("/status/conditions")
        .and_then(Frozen::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

pub(crate) fn tolerates(pod: &Frozen, taint: &Frozen) -> bool {
    pod.at("/spec/tolerations")
        .and_then(Frozen::as_array)
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
fn requirement_met(requirement: &Frozen, labels: &BTreeMap<String, String>) -> bool {
    let key = requirement["key"].as_str().unwrap_or("");
    let values: Vec<&str> = requirement["values"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Frozen::as_str)
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

pub(crate) fn affinity_met(pod: &Frozen, node: &Frozen) -> bool {
    let node_labels = plinth_core::meta::labels(node);
    let selector_ok = pod
        .at("/spec/nodeSelector")
        .and_then(Frozen::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| node_labels.get(k).map(String::as_str) == v.as_str());
    let terms = pod
        .at("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Frozen::as_array);
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
fn affinity_held(pod: &Frozen, others: &[&Frozen]) -> bool {
    pod.at("/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution")
        .and_then(Frozen::as_array)
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
                .filter_map(Frozen::as_str)
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
fn anti_affinity_conflict(pod: &Frozen, others: &[&Frozen]) -> bool {
    fn terms(p: &Frozen) -> Vec<&Frozen> {
        p.at("/spec/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution")
            .and_then(Frozen::as_array)
            .unwrap_or_default()
            .iter()
            .filter(|t| t["topologyKey"] == HOSTNAME)
            .collect()
    }
    let matches = |term: &Frozen, owner: &Frozen, candidate: &Frozen| {
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

/// The NodePorts filter's reason.
const PORTS_TAKEN: &str = "node(s) didn't have free ports for the requested pod ports";

/// The host ports a pod asks for: protocol, host IP (`0.0.0.0` when unset), port.
fn host_ports(pod: &Frozen) -> Vec<(String, String, i64)> {
    ["initContainers", "containers"]
        .iter()
        .flat_map(|list| {
            pod.get("spec")
                .and_then(|spec| spec.get(*list))
                .and_then(Frozen::as_array)
                .into_iter()
                .flatten()
        })
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .filter_map(|p| {
            let port = p["hostPort"].as_i64().filter(|p| *p > 0)?;
            let ip = match p["hostIP"].as_str() {
                None | Some("") => "0.0.0.0",
                Some(ip) => ip,
            };
            Some((
                p["protocol"].as_str().unwrap_or("TCP").to_owned(),
                ip.to_owned(),
                port,
            ))
        })
        .collect()
}

/// kube's NodePorts filter: a port `pod` asks for is taken on the node (same protocol and
/// port, and the same host IP or either on every address).
fn host_ports_taken(pod: &Frozen, on_node: &[&Frozen]) -> bool {
    let wanted = host_ports(pod);
    if wanted.is_empty() {
        return false;
    }
    on_node
        .iter()
        .flat_map(|p| host_ports(p))
        .any(|(proto, ip, port)| {
            wanted.iter().any(|(p, i, n)| {
                *p == proto && *n == port && (i == &ip || i == "0.0.0.0" || ip == "0.0.0.0")
            })
        })
}

/// Why `node` cannot take `pod` (kube's wording), or `None` when it can.
fn unfit(pod: &Frozen, node: &Frozen, on_node: &[&Frozen]) -> Option<String> {
    let used = on_node
        .iter()
        .map(|p| requests(p))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    unfit_with(pod, node, on_node, used, on_node.len())
}

/// [`unfit`] with what the node's pods request already summed, and how many they are: of a
/// [`plain`] pod, `on_node` need only hold the node's pods with anti-affinity terms.
fn unfit_with(
    pod: &Frozen,
    node: &Frozen,
    on_node: &[&Frozen],
    (used_cpu, used_memory): (i64, i64),
    count: usize,
) -> Option<String> {
    if node.at("/spec/unschedulable").is_some_and(|u| *u == true) {
        return Some("node(s) were unschedulable".into());
    }
    if !ready(node) {
        return Some("node(s) had untolerated taint {node.kubernetes.io/not-ready: }".into());
    }
    for taint in node
        .at("/spec/taints")
        .and_then(Frozen::as_array)
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
    if host_ports_taken(pod, on_node) {
        return Some(PORTS_TAKEN.into());
    }
    let allocatable = |r: &str| node.at(&format!("/status/allocatable/{r}"));
    let pods_max = allocatable("pods")
        .and_then(plinth_core::quantity::bytes)
        .unwrap_or(110);
    if i64::try_from(count).unwrap_or(i64::MAX) >= pods_max {
        return Some("Too many pods".into());
    }
    let (cpu, memory) = requests(pod);
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
    for (resource, wanted) in other_requests(pod) {
        if wanted <= 0 {
            continue;
        }
        let cap = node["status"]["allocatable"]
            .get(&resource)
            .and_then(plinth_core::quantity::millis)
            .unwrap_or(0);
        let used: i64 = on_node
            .iter()
            .filter_map(|p| other_requests(p).get(&resource).copied())
            .sum();
        if used + wanted > cap {
            return Some(format!("Insufficient {resource}"));
        }
    }
    if anti_affinity_conflict(pod, on_node) {
        return Some("node(s) didn't match pod anti-affinity rules".into());
    }
    if !affinity_held(pod, on_node) {
        return Some("node(s) didn't match pod affinity rules".into());
    }
    None
}

/// Where pods take room, indexed once per batch of decisions (and kept up to date as the
/// batch binds pods): the pods bound to each node and not finished — the bindings this
/// scheduler made and the cache does not show yet among them — with the CPU and memory
/// they request, and the pending pods nominated to each node.
#[derive(Default)]
struct Placed {
    bound: HashMap<String, Load>,
    nominated: HashMap<String, Vec<Arc<Frozen>>>,
}

/// The pods bound to one node and what they request.
#[derive(Default)]
struct Load {
    pods: Vec<Arc<Frozen>>,
    /// Those with required anti-affinity terms (which other pods must respect).
    with_terms: Vec<Arc<Frozen>>,
    cpu: i64,
    memory: i64,
}

const ANTI_AFFINITY: &str =
    "/spec/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution";
const AFFINITY: &str = "/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution";

fn has_terms(pod: &Frozen, path: &str) -> bool {
    pod.at(path)
        .and_then(Frozen::as_array)
        .is_some_and(|t| !t.is_empty())
}

/// Whether a node's fitness for `pod` depends on the node's other pods only through
/// their count, their CPU and memory and their anti-affinity terms: no host ports, no pod
/// (anti-)affinity of its own, no other resources.
fn plain(pod: &Frozen) -> bool {
    host_ports(pod).is_empty()
        && !has_terms(pod, ANTI_AFFINITY)
        && !has_terms(pod, AFFINITY)
        && other_requests(pod).is_empty()
}

impl Placed {
    /// Where `pods` (the cache) and the `assumed` ones take room, each pod counted once: a
    /// pod decided on counts as its assumed copy until the cache shows it bound, then as the
    /// cache's (its assumption is forgotten a little later, after the binding's event).
    fn of(pods: &[Arc<Frozen>], assumed: &HashMap<String, Arc<Frozen>>) -> Self {
        let mut placed = Self::default();
        let mut seen_bound = std::collections::HashSet::new();
        let mut counted = Vec::with_capacity(pods.len() + assumed.len());
        for pod in pods {
            if !assumed.is_empty() {
                let key = key_of(pod);
                if assumed.contains_key(&key) {
                    if !has_node(pod) {
                        continue;
                    }
                    seen_bound.insert(key);
                }
            }
            counted.push(pod);
        }
        counted.extend(
            assumed
                .iter()
                .filter(|(key, _)| !seen_bound.contains(*key))
                .map(|(_, pod)| pod),
        );
        for pod in counted {
            if let Some(node) = pod
                .at("/spec/nodeName")
                .and_then(Frozen::as_str)
                .filter(|n| !n.is_empty())
            {
                let finished = matches!(
                    pod.at("/status/phase").and_then(Frozen::as_str),
                    Some("Succeeded" | "Failed")
                );
                if !finished {
                    let node = node.to_owned();
                    placed.add(&node, pod.clone());
                }
            } else if pending(pod)
                && let Some(node) = pod.at("/status/nominatedNodeName").and_then(Frozen::as_str)
            {
                placed
                    .nominated
                    .entry(node.to_owned())
                    .or_default()
                    .push(pod.clone());
            }
        }
        placed
    }

    /// Counts `pod` on node `node` from now on.
    fn add(&mut self, node: &str, pod: Arc<Frozen>) {
        let (cpu, memory) = requests(&pod);
        let load = self.bound.entry(node.to_owned()).or_default();
        load.cpu += cpu;
        load.memory += memory;
        if has_terms(&pod, ANTI_AFFINITY) {
            load.with_terms.push(pod.clone());
        }
        load.pods.push(pod);
    }

    /// For a [`plain`] `pod`: the node's pods with anti-affinity terms, what all its pods
    /// request, and how many they are (as [`Placed::occupants`] counts them).
    fn summary(&self, pod: &Frozen, name: &str) -> (Vec<&Frozen>, (i64, i64), usize) {
        let uid = plinth_core::meta::meta_str(pod, "uid");
        let mine = priority(pod);
        let load = self.bound.get(name);
        let mut used = load.map_or((0, 0), |l| (l.cpu, l.memory));
        let mut count = load.map_or(0, |l| l.pods.len());
        let mut with_terms: Vec<&Frozen> = load
            .into_iter()
            .flat_map(|l| l.with_terms.iter())
            .map(|p| &**p)
            .collect();
        for p in self.nominated.get(name).into_iter().flatten() {
            if priority(p) >= mine && plinth_core::meta::meta_str(p, "uid") != uid {
                let (cpu, memory) = requests(p);
                used = (used.0 + cpu, used.1 + memory);
                count += 1;
                if has_terms(p, ANTI_AFFINITY) {
                    with_terms.push(p);
                }
            }
        }
        (with_terms, used, count)
    }

    /// The pods that take room on node `name` as `pod` sees it: those bound there and not
    /// finished, and the pending pods of at least its priority nominated to it (kube's
    /// scheduler counts nominated pods the same way, so that the room a preemption made goes
    /// to its preemptor); with the CPU and memory they request.
    fn occupants(&self, pod: &Frozen, name: &str) -> (Vec<&Frozen>, (i64, i64)) {
        let uid = plinth_core::meta::meta_str(pod, "uid");
        let mine = priority(pod);
        let load = self.bound.get(name);
        let mut used = load.map_or((0, 0), |l| (l.cpu, l.memory));
        let mut on_node: Vec<&Frozen> = Vec::new();
        for p in load.into_iter().flat_map(|l| l.pods.iter()) {
            if plinth_core::meta::meta_str(p, "uid") == uid {
                let (cpu, memory) = requests(p);
                used = (used.0 - cpu, used.1 - memory);
            } else {
                on_node.push(p);
            }
        }
        for p in self.nominated.get(name).into_iter().flatten() {
            if priority(p) >= mine && plinth_core::meta::meta_str(p, "uid") != uid {
                let (cpu, memory) = requests(p);
                used = (used.0 + cpu, used.1 + memory);
                on_node.push(p);
            }
        }
        (on_node, used)
    }
}

/// The reasons a node may stop being unfit for a pod when pods leave it.
fn room_reason(reason: &str) -> bool {
    reason == "Too many pods" || reason.starts_with("Insufficient ") || reason == PORTS_TAKEN
}

/// Where `pod` could go by preempting: the node, and the pods to evict there — the fewest
/// lower-priority pods (taken lowest priority first, the newest first among equals) whose
/// leaving makes it fit; of several nodes, the one whose victims' highest priority is lowest,
/// then the fewest victims. Else why no node helps, node by node (kube's dry run: "No
/// preemption victims found for incoming pod" where no pod of lower priority runs, the
/// reason the pod still does not fit where evicting them all would not do, "Preemption is not
/// helpful for scheduling" where pods leaving cannot help).
fn preemption(
    pod: &Frozen,
    nodes: &[Arc<Frozen>],
    placed: &Placed,
) -> Result<(String, Vec<Frozen>), BTreeMap<String, usize>> {
    let mine = priority(pod);
    let mut best: Option<(i64, usize, String, Vec<Frozen>)> = None;
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for node in nodes {
        let name = plinth_core::meta::name(node).unwrap_or("").to_owned();
        let (on_node, _) = placed.occupants(pod, &name);
        if !unfit(pod, node, &on_node).is_some_and(|r| room_reason(&r)) {
            *reasons
                .entry("Preemption is not helpful for scheduling".into())
                .or_default() += 1;
            continue;
        }
        let mut candidates: Vec<&Frozen> = on_node
            .iter()
            .copied()
            .filter(|p| priority(p) < mine && !pending(p) && !deleting(p))
            .collect();
        if candidates.is_empty() {
            *reasons
                .entry("No preemption victims found for incoming pod".into())
                .or_default() += 1;
            continue;
        }
        let without_all: Vec<&Frozen> = on_node
            .iter()
            .copied()
            .filter(|p| !candidates.iter().any(|c| std::ptr::eq(*c, *p)))
            .collect();
        if let Some(reason) = unfit(pod, node, &without_all) {
            *reasons.entry(reason).or_default() += 1;
            continue;
        }
        candidates.sort_by(|a, b| {
            priority(a)
                .cmp(&priority(b))
                .then_with(|| created(b).cmp(created(a)))
        });
        let mut victims = Vec::new();
        let mut left = on_node.clone();
        for candidate in candidates {
            left.retain(|p| !std::ptr::eq(*p, candidate));
            victims.push(candidate.clone());
            if unfit(pod, node, &left).is_none() {
                break;
            }
        }
        let highest = victims.iter().map(priority).max().unwrap_or(0);
        let better = best
            .as_ref()
            .is_none_or(|(h, n, _, _)| (highest, victims.len()) < (*h, *n));
        if better {
            best = Some((highest, victims.len(), name, victims));
        }
    }
    best.map(|(_, _, node, victims)| (node, victims))
        .ok_or(reasons)
}

/// Whether a preemption for `pod` is still under way: it is nominated to a node where a pod
/// of lower priority is terminating.
fn preempting(pod: &Frozen, pods: &[std::sync::Arc<Frozen>]) -> bool {
    let Some(node) = pod.at("/status/nominatedNodeName").and_then(Frozen::as_str) else {
        return false;
    };
    pods.iter().any(|p| {
        p.at("/spec/nodeName").and_then(Frozen::as_str) == Some(node)
            && deleting(p)
            && priority(p) < priority(pod)
    })
}

/// Evicts `victims` for `pod` as kube's scheduler does (a `DisruptionTarget` condition, the
/// delete, a `Preempted` event) and nominates `pod` to `node`.
async fn preempt(registry: &Client, pod: &Frozen, node: &str, victims: &[Frozen]) {
    let Some(def) = registry.resources.get("", "v1", "pods") else {
        return;
    };
    let options = WriteOptions::internal(COMPONENT);
    let uid = plinth_core::meta::meta_str(pod, "uid")
        .unwrap_or("")
        .to_owned();
    for victim in victims {
        let name = plinth_core::meta::name(victim).unwrap_or("").to_owned();
        let namespace = plinth_core::meta::namespace(victim).map(str::to_owned);
        let now = plinth_core::meta::format_time(plinth_registry::now());
        let _ = registry
            .modify(&def, namespace.as_deref(), &name, Part::Status, &options, |current| {
                let mut conditions: Vec<Value> = current["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|c| c["type"] != "DisruptionTarget")
                    .collect();
                conditions.push(json!({"type": "DisruptionTarget", "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": format!("{COMPONENT}: preempting to accommodate a higher priority pod"),
                    "lastProbeTime": null, "lastTransitionTime": now}));
                current["status"]["conditions"] = json!(conditions);
                Ok(true)
            })
            .await;
        match registry
            .delete(
                &def,
                namespace.as_deref(),
                &name,
                &plinth_registry::DeleteOptions::default(),
            )
            .await
        {
            Ok(_) => {
                crate::events::record(
                    registry,
                    victim,
                    "Normal",
                    "Preempted",
                    &format!("Preempted by pod {uid} on node {node}"),
                    COMPONENT,
                )
                .await;
            }
            Err(e) if e.reason == plinth_core::StatusReason::NotFound => {}
            Err(e) => {
                tracing::warn!(pod = %name, error = %e.message, "scheduler: preemption failed")
            }
        }
    }
    let name = plinth_core::meta::name(pod).unwrap_or("").to_owned();
    let namespace = plinth_core::meta::namespace(pod).map(str::to_owned);
    let _ = registry
        .modify(
            &def,
            namespace.as_deref(),
            &name,
            Part::Status,
            &options,
            |current| {
                if current
                    .at("/status/nominatedNodeName")
                    .and_then(Value::as_str)
                    == Some(node)
                {
                    return Ok(false);
                }
                current["status"]["nominatedNodeName"] = json!(node);
                Ok(true)
            },
        )
        .await;
}

/// How long a binding may take to reach the pod cache before the next decision goes ahead
/// without it (kube's scheduler "assumes" the pod bound instead).
const BOUND_WAIT: Duration = Duration::from_secs(5);

/// The most pods decided on one snapshot.
const BATCH: usize = 256;

/// How many bindings are written at once.
const BINDS_IN_FLIGHT: usize = 16;

/// Bindings written in the background, kube's scheduler's "assume" step: a pod is counted on
/// its node from the decision on (the next decision need not wait for the binding to be
/// written and seen), and forgotten once the cache shows it bound — or the write failed, when
/// the pod is tried again.
struct Binder {
    /// Pods decided and not yet seen bound, by key, as bound (`spec.nodeName` set).
    assumed: Arc<Mutex<HashMap<String, Arc<Frozen>>>>,
    permits: Arc<tokio::sync::Semaphore>,
    queue: Queue,
}

impl Binder {
    fn bind(
        &self,
        registry: &Client,
        pod_cache: &Informer,
        def: &Arc<plinth_registry::resources::ResourceDef>,
        pod: &Frozen,
        node: String,
    ) -> Arc<Frozen> {
        let name = plinth_core::meta::name(pod).unwrap_or("").to_owned();
        let namespace = plinth_core::meta::namespace(pod)
            .unwrap_or("default")
            .to_owned();
        let key = format!("{namespace}/{name}");
        let mut placed = pod.to_value();
        placed["spec"]["nodeName"] = json!(node);
        let placed = Arc::new(Frozen::from(placed));
        if let Ok(mut assumed) = self.assumed.lock() {
            assumed.insert(key.clone(), placed.clone());
        }
        let (registry, pod_cache, def, pod) = (
            registry.clone(),
            pod_cache.clone(),
            def.clone(),
            pod.clone(),
        );
        let (assumed, permits, queue) = (
            self.assumed.clone(),
            self.permits.clone(),
            self.queue.clone(),
        );
        tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
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
            let (retry, scheduled) = match bound {
                Ok(Some(_)) => {
                    // Counted as assumed until the cache shows the binding.
                    pod_cache
                        .wait_until(BOUND_WAIT, |cache| {
                            cache.get(&key).is_none_or(|p| !pending(&p))
                        })
                        .await;
                    (false, true)
                }
                Ok(None) => (false, false),
                Err(e) => {
                    tracing::warn!(pod = %name, error = %e.message, "scheduler: binding failed");
                    (true, false)
                }
            };
            // Forgotten before the binding's event is written, so no snapshot counts the pod
            // both as assumed and as the cache's.
            if let Ok(mut assumed) = assumed.lock() {
                assumed.remove(&key);
            }
            if scheduled {
                crate::events::record(
                    &registry,
                    &pod,
                    "Normal",
                    "Scheduled",
                    &format!("Successfully assigned {namespace}/{name} to {node}"),
                    COMPONENT,
                )
                .await;
            }
            if retry {
                queue.add(key);
            }
        });
        placed
    }
}

/// What one batch of decisions reads: the nodes, the pods, where pods take room.
struct Snapshot {
    nodes: Vec<Arc<Frozen>>,
    pods: Vec<Arc<Frozen>>,
    placed: Placed,
}

impl Snapshot {
    fn take(pod_cache: &Informer, node_cache: &Informer, binder: &Binder) -> Self {
        let pods = pod_cache.all_values();
        let assumed = binder.assumed.lock().map(|a| a.clone()).unwrap_or_default();
        let placed = Placed::of(&pods, &assumed);
        Self {
            nodes: node_cache.all_values(),
            pods,
            placed,
        }
    }
}

async fn schedule(
    registry: &Client,
    pod_cache: &Informer,
    snapshot: &mut Snapshot,
    pod: &Frozen,
    reported: &mut HashMap<String, String>,
    binder: &Binder,
) {
    let (nodes, pods, placed) = (&snapshot.nodes, &snapshot.pods, &mut snapshot.placed);
    let uid = plinth_core::meta::meta_str(pod, "uid")
        .unwrap_or("")
        .to_owned();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut best: Option<(usize, String)> = None;
    let simple = plain(pod);
    for node in nodes {
        let name = plinth_core::meta::name(node).unwrap_or("").to_owned();
        let (on_node, used, count) = if simple {
            placed.summary(pod, &name)
        } else {
            let (on_node, used) = placed.occupants(pod, &name);
            let count = on_node.len();
            (on_node, used, count)
        };
        match unfit_with(pod, node, &on_node, used, count) {
            Some(reason) => *reasons.entry(reason).or_default() += 1,
            None => {
                if best.as_ref().is_none_or(|(load, _)| count < *load) {
                    best = Some((count, name));
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
            reported.remove(&uid);
            let bound = binder.bind(registry, pod_cache, &def, pod, node.clone());
            placed.add(&node, bound);
        }
        None => {
            let total = nodes.len();
            // kube's PostFilter: who may preempt, then a dry run over the nodes.
            let histogram = |reasons: &BTreeMap<String, usize>| {
                reasons
                    .iter()
                    .map(|(reason, count)| format!("{count} {reason}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let note = if pod.at("/spec/preemptionPolicy").and_then(Frozen::as_str) == Some("Never")
            {
                " preemption: not eligible due to preemptionPolicy=Never.".to_owned()
            } else if preempting(pod, pods) {
                " preemption: not eligible due to a terminating pod on the nominated node."
                    .to_owned()
            } else {
                match preemption(pod, nodes, placed) {
                    Ok((node, victims)) => {
                        preempt(registry, pod, &node, &victims).await;
                        String::new()
                    }
                    Err(why) => format!(
                        " preemption: 0/{total} nodes are available: {}.",
                        histogram(&why)
                    ),
                }
            };
            let message = if total == 0 {
                "no nodes available to schedule pods".to_owned()
            } else {
                let parts: Vec<String> = reasons
                    .iter()
                    .map(|(reason, count)| format!("{count} {reason}"))
                    .collect();
                format!("0/{total} nodes are available: {}.{note}", parts.join(", "))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: Option<&str>) -> Arc<Frozen> {
        let mut pod = json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        });
        if let Some(node) = node {
            pod["spec"]["nodeName"] = json!(node);
        }
        Arc::new(Frozen::from(pod))
    }

    fn pods_on(placed: &Placed, node: &str) -> Option<usize> {
        placed.bound.get(node).map(|load| load.pods.len())
    }

    #[test]
    fn a_pod_decided_on_takes_room_once_before_and_after_the_cache_shows_it_bound() {
        let assumed = HashMap::from([("default/a".to_owned(), pod("a", Some("n1")))]);
        // Not yet seen bound: its assumed copy counts.
        let placed = Placed::of(&[pod("a", None)], &assumed);
        assert_eq!(pods_on(&placed, "n1"), Some(1));
        // Seen bound while still assumed: the cache's copy counts, not both.
        let placed = Placed::of(&[pod("a", Some("n1")), pod("b", Some("n1"))], &assumed);
        assert_eq!(pods_on(&placed, "n1"), Some(2));
        assert_eq!(placed.bound.get("n1").map(|load| load.cpu), Some(2000));
    }
}
