//! The DaemonSet controller (kube-controller-manager's `daemon`): one pod on every node the
//! template's node selector and affinity admit and whose taints it tolerates (with the
//! tolerations kube adds to daemon pods), placed by the scheduler through a node affinity on
//! the node's name; pods on nodes that no longer qualify removed; templates recorded as
//! ControllerRevisions (`controller-revision-hash` on the pods); a RollingUpdate replaces
//! pods node by node, at most `maxUnavailable` unready at a time; OnDelete only replaces
//! deleted pods.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use plinth_core::{Frozen, Tree};
use plinth_registry::{Client, WriteOptions};
use plinth_types::apps::scaled;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::history::History;
use crate::informer::{Failed, Informer, Queue, SharedInformers, enqueue, key_of, run_workers};
use crate::workload::{
    EXPECTATION_TIMEOUT, PodName, available, claim, controller_of, controller_ref, delete_pod,
    deleting, enqueue_owner, next_available, pod_from_template, ready, uid, write_status,
};

const MANAGER: &str = "daemonset-controller";
const REVISION_LABEL: &str = "controller-revision-hash";

/// Starts the controller; it ends when `stopping` becomes true.
pub fn spawn_daemonset_controller(
    registry: Client,
    informers: &SharedInformers,
    stopping: watch::Receiver<bool>,
) {
    let queue = Queue::default();
    let sets = informers.start(("apps", "daemonsets"), enqueue(&queue));
    let pods = informers.start(("", "pods"), enqueue_owner(&queue, "DaemonSet", None));
    let revisions = informers.start(
        ("apps", "controllerrevisions"),
        enqueue_owner(&queue, "DaemonSet", None),
    );
    // Any node change may change where every DaemonSet runs.
    let nodes = {
        let (queue, sets) = (queue.clone(), sets.clone());
        informers.start(("", "nodes"), move |_| {
            for set in sets.all_keys() {
                queue.add(set);
            }
        })
    };
    tokio::spawn(async move {
        let caches = [&sets, &pods, &revisions, &nodes];
        let (registry, owned_pods, owned_revisions, all_nodes) =
            (&registry, &pods, &revisions, &nodes);
        run_workers(queue, stopping, &caches, &sets, move |set| async move {
            let pass = Pass {
                registry,
                pods: owned_pods,
                revisions: owned_revisions,
                nodes: all_nodes,
                set: &set,
                failed: Failed::default(),
            };
            let wait = pass.sync().await;
            pass.failed.next(wait)
        })
        .await;
    });
}

struct Pass<'a> {
    registry: &'a Client,
    pods: &'a Informer,
    revisions: &'a Informer,
    nodes: &'a Informer,
    set: &'a Frozen,
    /// Whether a write of this pass failed (the key is retried after its backoff).
    failed: Failed,
}

fn name_of(object: &(impl Tree + ?Sized)) -> &str {
    plinth_core::meta::name(object).unwrap_or("")
}

fn hash_of(pod: &Frozen) -> &str {
    pod.at(&format!("/metadata/labels/{REVISION_LABEL}"))
        .and_then(Frozen::as_str)
        .unwrap_or("")
}

/// The node a daemon pod is for (its name in the node affinity, or where it runs).
fn node_of(pod: &Frozen) -> Option<&str> {
    pod.at("/spec/nodeName")
        .and_then(Frozen::as_str)
        .filter(|n| !n.is_empty())
        .or_else(|| {
            pod.at("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values/0")
                .and_then(Frozen::as_str)
        })
}

/// The tolerations kube gives every daemon pod.
fn daemon_tolerations() -> Vec<Value> {
    let mut tolerations = vec![
        json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}),
    ];
    for key in [
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/unschedulable",
    ] {
        tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoSchedule"}));
    }
    tolerations
}

impl Pass<'_> {
    fn namespace(&self) -> &str {
        plinth_core::meta::namespace(self.set).unwrap_or("default")
    }

    /// The template as a pod for `node` would have it (tolerations added), for the checks.
    fn pod_for(&self, template: &Value, node: &str, hash: &str) -> Value {
        let mut template = template.clone();
        let mut tolerations = template["spec"]["tolerations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for t in daemon_tolerations() {
            if !tolerations
                .iter()
                .any(|have| have["key"] == t["key"] && have["effect"] == t["effect"])
            {
                tolerations.push(t);
            }
        }
        template["spec"]["tolerations"] = json!(tolerations);
        template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!({
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}],
        });
        if !template["metadata"]["labels"].is_object() {
            template["metadata"]["labels"] = json!({});
        }
        template["metadata"]["labels"][REVISION_LABEL] = json!(hash);
        template
    }

    /// Whether a daemon pod should run on `node`: selector and affinity, tolerated taints.
    fn should_run(&self, pod: &Value, node: &Frozen) -> bool {
        let probe = Frozen::from(json!({"spec": pod["spec"]}));
        if !crate::scheduler::affinity_met(&probe, node) {
            return false;
        }
        node.at("/spec/taints")
            .and_then(Frozen::as_array)
            .into_iter()
            .flatten()
            .filter(|t| matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute")))
            .all(|t| crate::scheduler::tolerates(&probe, t))
    }

    async fn sync(&self) -> Option<Duration> {
        let controller = controller_ref(self.set, "apps/v1", "DaemonSet");
        let pods = claim(
            self.registry,
            self.pods,
            ("", "pods"),
            self.set,
            &controller,
            MANAGER,
        )
        .await;
        let used: Vec<String> = pods
            .iter()
            .map(|p| format!("{}-{}", name_of(self.set), hash_of(p)))
            .collect();
        let (_, update) = History {
            registry: self.registry,
            revisions: self.revisions,
            owner: self.set,
            controller: &controller,
            manager: MANAGER,
        }
        .sync("", &used)
        .await?;
        let hash = name_of(&update)
            .strip_prefix(&format!("{}-", name_of(self.set)))
            .unwrap_or("")
            .to_owned();
        let template = self
            .set
            .at("/spec/template")
            .map_or(json!({}), Frozen::to_value);
        let mut by_node: BTreeMap<String, Vec<Arc<Frozen>>> = BTreeMap::new();
        for pod in &pods {
            if let Some(node) = node_of(pod) {
                by_node
                    .entry(node.to_owned())
                    .or_default()
                    .push(pod.clone());
            }
        }
        let mut wanted_nodes = Vec::new();
        if !deleting(self.set) {
            for node in self.nodes.all_values() {
                let node_name = name_of(&node).to_owned();
                let pod = self.pod_for(&template, &node_name, &hash);
                if self.should_run(&pod, &node) {
                    wanted_nodes.push(node_name.clone());
                    let on_node: Vec<&Arc<Frozen>> = by_node
                        .get(&node_name)
                        .into_iter()
                        .flatten()
                        .filter(|p| !deleting(p))
                        .collect();
                    // A failed daemon pod is replaced.
                    for failed in on_node.iter().filter(|p| {
                        p.at("/status/phase").and_then(Frozen::as_str) == Some("Failed")
                    }) {
                        self.delete_pod(failed).await;
                    }
                    let failed = |p: &Arc<Frozen>| {
                        p.at("/status/phase").and_then(Frozen::as_str) == Some("Failed")
                    };
                    let alive = on_node.iter().filter(|p| !failed(p)).count();
                    // A replaced pod's successor waits until it has gone.
                    let terminating = by_node
                        .get(&node_name)
                        .into_iter()
                        .flatten()
                        .any(|p| deleting(p) && !failed(p));
                    if alive == 0 && !terminating {
                        self.create_pod(&pod, &controller).await;
                    }
                    // More than one: the extras go (the oldest is kept).
                    for extra in on_node.iter().skip(1) {
                        self.delete_pod(extra).await;
                    }
                }
            }
            // Pods on nodes that should not run one (or that are gone) go.
            for (node, pods) in &by_node {
                if !wanted_nodes.contains(node) {
                    for pod in pods.iter().filter(|p| !deleting(p)) {
                        self.delete_pod(pod).await;
                    }
                }
            }
            self.rolling_update(&pods, &hash, &wanted_nodes).await;
        }
        self.update_status(&wanted_nodes, &hash).await
    }

    /// RollingUpdate: old pods deleted while at most `maxUnavailable` of the nodes that
    /// should run one lack an available daemon pod (kube counts nodes: one whose old pod went
    /// and whose new one is not ready yet, or not even seen yet, is unavailable).
    async fn rolling_update(&self, pods: &[Arc<Frozen>], hash: &str, wanted_nodes: &[String]) {
        let strategy = self.set.at("/spec/updateStrategy");
        if strategy
            .and_then(|s| s["type"].as_str())
            .unwrap_or("RollingUpdate")
            != "RollingUpdate"
        {
            return;
        }
        let nodes = i64::try_from(self.nodes.all_values().len()).unwrap_or(0);
        let max = strategy
            .and_then(|s| s.at("/rollingUpdate/maxUnavailable"))
            .and_then(|v| scaled(&v.to_value(), nodes, true))
            .unwrap_or(1)
            .max(1);
        let live: Vec<&Arc<Frozen>> = pods.iter().filter(|p| !deleting(p)).collect();
        let mut unavailable = i64::try_from(
            wanted_nodes
                .iter()
                .filter(|node| {
                    !live
                        .iter()
                        .any(|p| node_of(p) == Some(node.as_str()) && ready(p))
                })
                .count(),
        )
        .unwrap_or(0);
        // Unready old pods first: replacing them costs nothing.
        let mut old: Vec<&&Arc<Frozen>> = live.iter().filter(|p| hash_of(p) != hash).collect();
        old.sort_by_key(|p| ready(p));
        for pod in old {
            if !ready(pod) {
                self.delete_pod(pod).await;
            } else if unavailable < max {
                self.delete_pod(pod).await;
                unavailable += 1;
            }
        }
    }

    async fn create_pod(&self, template: &Value, controller: &Value) {
        let Some(def) = self.registry.resources.get("", "v1", "pods") else {
            return;
        };
        let prefix = format!("{}-", name_of(self.set));
        let pod = pod_from_template(template, self.set, controller, PodName::Generated(&prefix));
        match self
            .registry
            .create(
                &def,
                Some(self.namespace()),
                pod,
                &WriteOptions::internal(MANAGER),
            )
            .await
        {
            Ok(written) => {
                let name = name_of(&written.object).to_owned();
                self.event(
                    "Normal",
                    "SuccessfulCreate",
                    &format!("Created pod: {name}"),
                )
                .await;
                let key = key_of(&written.object);
                self.pods
                    .wait_until(EXPECTATION_TIMEOUT, |p| p.get(&key).is_some())
                    .await;
            }
            Err(e) => {
                self.failed.mark();
                self.event(
                    "Warning",
                    "FailedCreate",
                    &format!("Error creating: {}", e.message),
                )
                .await
            }
        }
    }

    async fn delete_pod(&self, pod: &Frozen) {
        let message = format!("Deleted pod: {}", name_of(pod));
        delete_pod(self.registry, self.pods, self.set, pod, &message, MANAGER).await;
    }

    async fn event(&self, kind: &str, reason: &str, message: &str) {
        crate::events::record(self.registry, self.set, kind, reason, message, MANAGER).await;
    }

    async fn update_status(&self, wanted: &[String], hash: &str) -> Option<Duration> {
        let owner = uid(self.set);
        let pods: Vec<Arc<Frozen>> = self
            .pods
            .in_namespace(self.namespace())
            .into_iter()
            .filter(|p| controller_of(p).is_some_and(|c| c["uid"] == owner) && !deleting(p))
            .collect();
        let min_ready = self
            .set
            .at("/spec/minReadySeconds")
            .and_then(Frozen::as_i64)
            .unwrap_or(0);
        let now = plinth_registry::now();
        let on = |node: &String| -> Vec<&Arc<Frozen>> {
            pods.iter()
                .filter(|p| node_of(p) == Some(node.as_str()))
                .collect()
        };
        let scheduled = wanted.iter().filter(|n| !on(n).is_empty()).count();
        let misscheduled = pods
            .iter()
            .filter(|p| node_of(p).is_some_and(|n| !wanted.iter().any(|w| w == n)))
            .count();
        let ready_count = wanted
            .iter()
            .filter(|n| on(n).iter().any(|p| ready(p)))
            .count();
        let available_count = wanted
            .iter()
            .filter(|n| on(n).iter().any(|p| available(p, min_ready, now)))
            .count();
        let updated = wanted
            .iter()
            .filter(|n| on(n).iter().any(|p| hash_of(p) == hash))
            .count();
        let status = json!({
            "currentNumberScheduled": scheduled,
            "numberMisscheduled": misscheduled,
            "desiredNumberScheduled": wanted.len(),
            "numberReady": ready_count,
            "observedGeneration": self.set.at("/metadata/generation").map_or(json!(1), Frozen::to_value),
            "updatedNumberScheduled": updated,
            "numberAvailable": available_count,
            "numberUnavailable": wanted.len() - available_count,
        });
        let mut status = status;
        if let Some(map) = status.as_object_mut() {
            map.retain(|k, v| {
                v != 0
                    || matches!(
                        k.as_str(),
                        "currentNumberScheduled"
                            | "numberMisscheduled"
                            | "desiredNumberScheduled"
                            | "numberReady"
                    )
            });
        }
        write_status(
            self.registry,
            ("apps", "daemonsets"),
            self.set,
            status,
            MANAGER,
        )
        .await;
        if min_ready > 0 {
            let ready_pods: Vec<Arc<Frozen>> = pods.into_iter().filter(|p| ready(p)).collect();
            return next_available(&ready_pods, min_ready, now)
                .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(1)));
        }
        None
    }
}
