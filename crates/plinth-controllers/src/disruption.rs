//! The disruption controller (kube-controller-manager's `disruption`): each
//! PodDisruptionBudget's status — the pods it expects (its pods, or with a percentage or
//! `maxUnavailable` the replicas of their controllers), how many must stay healthy, how many
//! are, and so how many evictions are allowed — with the `DisruptionAllowed` condition. The
//! pods an eviction took (`disruptedPods`) stop counting as healthy until they go, or for
//! two minutes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use plinth_core::Frozen;
use plinth_registry::Client;
use plinth_types::apps::scaled;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::informer::{Informer, Queue, SharedInformers, enqueue, key_of, run_workers};
use crate::workload::{controller_of, deleting, ready, write_status};

const MANAGER: &str = "disruption-controller";
/// How long an evicted pod is expected to take to go.
const DELETION_TIMEOUT: i64 = 120;

/// Starts the controller; it ends when `stopping` becomes true.
pub fn spawn_disruption_controller(
    registry: Client,
    informers: &SharedInformers,
    stopping: watch::Receiver<bool>,
) {
    let queue = Queue::default();
    let budgets = informers.start(("policy", "poddisruptionbudgets"), enqueue(&queue));
    let pods = {
        let (queue, budgets) = (queue.clone(), budgets.clone());
        informers.start(("", "pods"), move |c| {
            for pod in [c.new, c.old].into_iter().flatten() {
                let namespace = plinth_core::meta::namespace(pod).unwrap_or("default");
                let labels = plinth_core::meta::labels(pod);
                for budget in budgets.in_namespace(namespace) {
                    if selects(&budget, &labels) {
                        queue.add(key_of(&budget));
                    }
                }
            }
        })
    };
    // Scale changes of the pods' controllers change what is expected.
    let sets = {
        let (queue, budgets) = (queue.clone(), budgets.clone());
        let on_change = move |c: crate::informer::Change<'_>| {
            if let Some(o) = c.new.or(c.old) {
                let namespace = plinth_core::meta::namespace(o).unwrap_or("default");
                for budget in budgets.in_namespace(namespace) {
                    queue.add(key_of(&budget));
                }
            }
        };
        (
            informers.start(("apps", "replicasets"), on_change.clone()),
            informers.start(("apps", "statefulsets"), on_change.clone()),
            informers.start(("apps", "deployments"), on_change),
        )
    };
    tokio::spawn(async move {
        let (registry, all_pods, all_sets) = (&registry, &pods, &sets);
        run_workers(
            queue,
            stopping,
            &[&budgets, &pods],
            &budgets,
            move |budget| async move { sync(registry, all_pods, all_sets, &budget).await },
        )
        .await;
    });
}

fn selects(budget: &Frozen, labels: &BTreeMap<String, String>) -> bool {
    plinth_core::selector::LabelSelector::from_object(&budget["spec"]["selector"])
        .is_ok_and(|s| s.matches(labels))
}

/// The replicas the pods' controllers want (kube's `getExpectedScale`): a ReplicaSet's (its
/// Deployment's, when it has one), a StatefulSet's; a pod without a known controller counts
/// as one.
fn expected_scale(pods: &[Arc<Frozen>], sets: &(Informer, Informer, Informer)) -> i64 {
    let (replica_sets, stateful_sets, deployments) = sets;
    let mut scales: BTreeMap<String, i64> = BTreeMap::new();
    let mut loose = 0;
    for pod in pods {
        let namespace = plinth_core::meta::namespace(pod).unwrap_or("default");
        let Some(owner) = controller_of(pod) else {
            loose += 1;
            continue;
        };
        let name = owner["name"].as_str().unwrap_or("");
        let key = format!("{namespace}/{name}");
        let replicas = |o: &Frozen| o.at("/spec/replicas").and_then(Frozen::as_i64).unwrap_or(1);
        let found = match owner["kind"].as_str() {
            Some("ReplicaSet") => replica_sets.get(&key).map(|rs| {
                match controller_of(&rs).filter(|o| o["kind"] == "Deployment") {
                    Some(d) => {
                        let dkey = format!("{namespace}/{}", d["name"].as_str().unwrap_or(""));
                        deployments
                            .get(&dkey)
                            .map_or((key.clone(), replicas(&rs)), |d| (dkey, replicas(&d)))
                    }
                    None => (key.clone(), replicas(&rs)),
                }
            }),
            Some("StatefulSet") => stateful_sets.get(&key).map(|s| (key.clone(), replicas(&s))),
            _ => None,
        };
        match found {
            Some((k, n)) => {
                scales.insert(k, n);
            }
            None => loose += 1,
        }
    }
    scales.values().sum::<i64>() + loose
}

async fn sync(
    registry: &Client,
    pods: &Informer,
    sets: &(Informer, Informer, Informer),
    budget: &Frozen,
) -> Option<Duration> {
    let namespace = plinth_core::meta::namespace(budget).unwrap_or("default");
    let matched: Vec<Arc<Frozen>> = pods
        .in_namespace(namespace)
        .into_iter()
        .filter(|p| selects(budget, &plinth_core::meta::labels(p)))
        .filter(|p| {
            !matches!(
                p.at("/status/phase").and_then(Frozen::as_str),
                Some("Succeeded" | "Failed")
            )
        })
        .collect();
    let spec = &budget["spec"];
    let (expected, desired) = match (&spec["minAvailable"], &spec["maxUnavailable"]) {
        (Frozen::Number(n), _) => (
            i64::try_from(matched.len()).unwrap_or(0),
            n.as_i64().unwrap_or(0),
        ),
        (min, _) if min.is_string() => {
            let expected = expected_scale(&matched, sets);
            (
                expected,
                scaled(&min.to_value(), expected, true).unwrap_or(0),
            )
        }
        (_, max) if !max.is_null() => {
            let expected = expected_scale(&matched, sets);
            (
                expected,
                (expected - scaled(&max.to_value(), expected, true).unwrap_or(0)).max(0),
            )
        }
        _ => (i64::try_from(matched.len()).unwrap_or(0), 0),
    };
    let now = plinth_registry::now();
    // Evicted pods count as gone until they are, for at most the deletion timeout.
    let mut disrupted = serde_json::Map::new();
    let mut next_expiry: Option<i64> = None;
    for (name, at) in budget
        .at("/status/disruptedPods")
        .and_then(Frozen::as_object)
        .into_iter()
        .flatten()
    {
        let since = at
            .as_str()
            .and_then(plinth_core::meta::parse_time)
            .unwrap_or(0);
        let pod = pods.get(&format!("{namespace}/{name}"));
        if pod.is_some_and(|p| !deleting(&p)) && since + DELETION_TIMEOUT > now {
            disrupted.insert(name.to_owned(), at.to_value());
            let left = since + DELETION_TIMEOUT - now;
            next_expiry = Some(next_expiry.map_or(left, |n: i64| n.min(left)));
        }
    }
    let healthy = i64::try_from(
        matched
            .iter()
            .filter(|p| ready(p) && !deleting(p))
            .filter(|p| !disrupted.contains_key(plinth_core::meta::name(p).unwrap_or("")))
            .count(),
    )
    .unwrap_or(0);
    let allowed = (healthy - desired).max(0);
    let (value, reason) = if allowed > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    let generation = budget
        .at("/metadata/generation")
        .map_or(json!(1), Frozen::to_value);
    let previous = budget
        .at("/status/conditions")
        .and_then(Frozen::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "DisruptionAllowed"));
    let transition = match previous {
        Some(c) if c["status"] == value => c["lastTransitionTime"].to_value(),
        _ => json!(plinth_core::meta::format_time(now)),
    };
    let mut status = json!({
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [{
            "type": "DisruptionAllowed",
            "status": value,
            "reason": reason,
            "message": "",
            "observedGeneration": generation,
            "lastTransitionTime": transition,
        }],
    });
    if !disrupted.is_empty() {
        status["disruptedPods"] = Value::Object(disrupted);
    }
    write_status(
        registry,
        ("policy", "poddisruptionbudgets"),
        budget,
        status,
        MANAGER,
    )
    .await;
    next_expiry.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(1) + 1))
}
