//! The pods of the simulated nodes: one watch of every pod; each pod bound to a simulated
//! node moves through its phases on a timer (started after the start delay, finished after
//! its run time where its `restartPolicy` lets it finish), its status written when what it
//! should show differs from what it shows — level-triggered, so a restart of the simulator
//! or a write that failed is caught up by the next look.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::config::{Config, parse_duration, stopped};

const ANNOTATION_START_DELAY: &str = "sim.plinth.dev/start-delay";
const ANNOTATION_RUN_FOR: &str = "sim.plinth.dev/run-for";
const ANNOTATION_EXIT_CODE: &str = "sim.plinth.dev/exit-code";
const ANNOTATION_READY: &str = "sim.plinth.dev/ready";
/// How long after a failed write the pod is looked at again.
const RETRY: Duration = Duration::from_millis(500);

fn now_text() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
    plinth_core::meta::format_time(seconds)
}

/// The addresses of one node's `/24` (`.2` to `.254`; `.1` is the node's).
#[derive(Default)]
struct Pool {
    used: HashSet<u8>,
}

impl Pool {
    fn take(&mut self) -> Option<u8> {
        let free = (2..=254).find(|n| !self.used.contains(n))?;
        self.used.insert(free);
        Some(free)
    }
}

/// How a run of a pod's containers ended.
#[derive(Clone, Debug)]
struct Exit {
    code: i32,
    started: String,
    finished: String,
}

/// What the simulator knows of one pod beyond the pod itself.
struct Sim {
    pod: Arc<Pod>,
    node: usize,
    /// When the pod was first seen bound.
    seen: Instant,
    address: Option<Ipv4Addr>,
    /// The current run: since when (as a clock and as status text).
    running: Option<(Instant, String)>,
    /// When the pod itself started (`status.startTime`).
    start_time: Option<String>,
    restarts: u32,
    /// The last run that ended (a restart's `lastState`).
    last: Option<Exit>,
    /// The pod's end, when it has one.
    finished: Option<Exit>,
    /// The pod's deletion was sent.
    deleted: bool,
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn duration_annotation(pod: &Pod, key: &str) -> Option<Duration> {
    annotation(pod, key).and_then(|t| parse_duration(t).ok())
}

fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// How long a run of the pod lasts, when it ends at all.
fn run_for(config: &Config, pod: &Pod) -> Option<Duration> {
    match duration_annotation(pod, ANNOTATION_RUN_FOR) {
        Some(d) => Some(d),
        None if restart_policy(pod) != "Always" => Some(config.run_for),
        None => None,
    }
}

/// A number from 0 to 1 that is the same for the same pod and run (FNV-1a, then splitmix).
fn draw(uid: &str, run: u32) -> f64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in uid.bytes().chain(run.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let mut z = hash.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// The exit code of run `run` of the pod.
fn exit_code(config: &Config, pod: &Pod, uid: &str, run: u32) -> i32 {
    if let Some(code) = annotation(pod, ANNOTATION_EXIT_CODE).and_then(|c| c.parse().ok()) {
        return code;
    }
    i32::from(draw(uid, run) < config.failure_rate)
}

fn condition(kind: &str, ok: bool, reason: Option<&str>, previous: &Value, now: &str) -> Value {
    let status = if ok { "True" } else { "False" };
    let since = previous["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind && c["status"] == status)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .unwrap_or(now)
        .to_owned();
    let mut c = json!({"type": kind, "status": status, "lastProbeTime": null,
        "lastTransitionTime": since});
    if let Some(reason) = reason {
        c["reason"] = json!(reason);
    }
    c
}

/// Whether every readiness gate's condition is `True` in `status`.
fn gates_met(pod: &Pod, status: &Value) -> bool {
    let gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .cloned()
        .unwrap_or_default();
    gates.iter().all(|g| {
        status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == g.condition_type.as_str() && c["status"] == "True")
    })
}

/// The status the pod should show now, once it started.
fn desired(sim: &Sim, node_address: Ipv4Addr) -> Option<Value> {
    let since = match (&sim.running, &sim.finished) {
        (Some((_, since)), _) => since.clone(),
        (None, Some(exit)) => exit.started.clone(),
        (None, None) => return None,
    };
    let pod = &sim.pod;
    let previous = serde_json::to_value(&pod.status).unwrap_or(Value::Null);
    let now = now_text();
    let spec = pod.spec.as_ref()?;
    let finished = sim.finished.as_ref();
    let containers_ready = finished.is_none() && annotation(pod, ANNOTATION_READY) != Some("false");
    let ready = containers_ready && gates_met(pod, &previous);
    let image = |c: &k8s_openapi::api::core::v1::Container| c.image.clone().unwrap_or_default();
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let statuses: Vec<Value> = spec
        .containers
        .iter()
        .map(|c| {
            let state = match finished {
                Some(exit) => json!({"terminated": {
                    "exitCode": exit.code,
                    "reason": if exit.code == 0 { "Completed" } else { "Error" },
                    "startedAt": exit.started, "finishedAt": exit.finished,
                    "containerID": format!("simulated://{uid}/{}", c.name)}}),
                None => json!({"running": {"startedAt": since}}),
            };
            let mut status = json!({
                "name": c.name, "image": image(c), "imageID": format!("simulated://{}", image(c)),
                "containerID": format!("simulated://{uid}/{}", c.name),
                "ready": containers_ready, "started": finished.is_none(),
                "restartCount": sim.restarts, "state": state,
            });
            if let Some(last) = &sim.last {
                status["lastState"] = json!({"terminated": {
                    "exitCode": last.code, "reason": "Error",
                    "startedAt": last.started, "finishedAt": last.finished}});
            }
            status
        })
        .collect();
    let init: Vec<Value> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            let sidecar = c.restart_policy.as_deref() == Some("Always");
            let state = if sidecar && finished.is_none() {
                json!({"running": {"startedAt": since}})
            } else {
                json!({"terminated": {"exitCode": 0, "reason": "Completed",
                    "startedAt": since, "finishedAt": since}})
            };
            json!({"name": c.name, "image": image(c), "imageID": format!("simulated://{}", image(c)),
                "containerID": format!("simulated://{uid}/{}", c.name),
                "ready": sidecar && finished.is_none(), "started": sidecar && finished.is_none(),
                "restartCount": 0, "state": state})
        })
        .collect();
    let phase = match finished {
        Some(exit) if exit.code == 0 => "Succeeded",
        Some(_) => "Failed",
        None => "Running",
    };
    let not_ready_reason = if finished.is_some() {
        Some("PodCompleted")
    } else if !containers_ready {
        Some("ContainersNotReady")
    } else if !ready {
        Some("ReadinessGatesNotReady")
    } else {
        None
    };
    let mut status = json!({
        "phase": phase,
        "hostIP": node_address.to_string(),
        "hostIPs": [{"ip": node_address.to_string()}],
        "startTime": sim.start_time.clone().unwrap_or_else(|| since.clone()),
        "conditions": [
            condition("PodReadyToStartContainers", finished.is_none(), None, &previous, &now),
            condition("Initialized", true, None, &previous, &now),
            condition("Ready", ready, if ready { None } else { not_ready_reason }, &previous, &now),
            condition("ContainersReady", containers_ready, if containers_ready { None } else { not_ready_reason }, &previous, &now),
            condition("PodScheduled", true, None, &previous, &now),
        ],
        "containerStatuses": statuses,
    });
    if let Some(address) = sim.address {
        status["podIP"] = json!(address.to_string());
        status["podIPs"] = json!([{"ip": address.to_string()}]);
    }
    if !init.is_empty() {
        status["initContainerStatuses"] = json!(init);
    }
    Some(status)
}

/// Whether `current` already shows what `desired` says (the fields a reader acts on).
fn shows(current: &Value, desired: &Value) -> bool {
    let condition = |v: &Value, kind: &str| {
        v["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == kind)
            .map(|c| c["status"].clone())
    };
    let containers = |v: &Value, key: &str| -> Vec<(Value, Value, Value, bool)> {
        v[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["name"].clone(),
                    c["ready"].clone(),
                    c["restartCount"].clone(),
                    c["state"].get("running").is_some(),
                )
            })
            .collect()
    };
    current["phase"] == desired["phase"]
        && current["podIP"] == desired["podIP"]
        && ["Ready", "ContainersReady", "Initialized", "PodScheduled"]
            .iter()
            .all(|k| condition(current, k) == condition(desired, k))
        && containers(current, "containerStatuses") == containers(desired, "containerStatuses")
        && containers(current, "initContainerStatuses")
            == containers(desired, "initContainerStatuses")
}

/// What a look at a pod decided.
enum Action {
    /// Nothing now; look again at this time, if ever.
    Wait(Option<Instant>),
    /// Write this status (then look again at the time, if any).
    Write(Value, Option<Instant>),
    /// Remove the pod (it is being deleted).
    Delete,
}

struct Simulator {
    config: Arc<Config>,
    nodes: HashMap<String, usize>,
    pools: Vec<Pool>,
    pods: HashMap<String, Sim>,
    due: BinaryHeap<Reverse<(Instant, u64, String)>>,
    sequence: u64,
    in_flight: HashSet<String>,
    /// Pods looked at while a write for them was in flight: looked at again after it.
    dirty: HashSet<String>,
}

impl Simulator {
    fn at(&mut self, when: Instant, uid: &str) {
        self.sequence += 1;
        self.due
            .push(Reverse((when, self.sequence, uid.to_owned())));
    }

    fn forget(&mut self, uid: &str) {
        if let Some(sim) = self.pods.remove(uid)
            && let Some(address) = sim.address
            && let Some(pool) = self.pools.get_mut(sim.node)
        {
            pool.used.remove(&address.octets()[3]);
        }
    }

    fn seen(&mut self, pod: Pod, listing: bool) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .and_then(|n| self.nodes.get(n))
            .copied();
        let Some(node) = node else {
            // Not (or no longer) on a simulated node.
            if self.pods.contains_key(&uid) {
                self.forget(&uid);
            }
            return;
        };
        let now = Instant::now();
        let pod = Arc::new(pod);
        match self.pods.get_mut(&uid) {
            Some(sim) => sim.pod = pod,
            None => {
                let mut sim = Sim {
                    pod: pod.clone(),
                    node,
                    seen: now,
                    address: None,
                    running: None,
                    start_time: None,
                    restarts: 0,
                    last: None,
                    finished: None,
                    deleted: false,
                };
                // A pod the simulator ran before it restarted goes on from what it shows.
                if listing
                    || pod
                        .status
                        .as_ref()
                        .and_then(|s| s.start_time.as_ref())
                        .is_some()
                {
                    adopt(&mut sim, &mut self.pools[node]);
                }
                self.pods.insert(uid.clone(), sim);
            }
        }
        self.at(now, &uid);
    }

    /// Looks at pod `uid`: what it should show or do now, and when to look again.
    fn look(&mut self, uid: &str) -> Action {
        let config = self.config.clone();
        let Some(sim) = self.pods.get_mut(uid) else {
            return Action::Wait(None);
        };
        let pod = sim.pod.clone();
        if pod.metadata.deletion_timestamp.is_some() {
            if sim.deleted {
                return Action::Wait(None);
            }
            return Action::Delete;
        }
        let now = Instant::now();
        let mut next = None;
        if sim.running.is_none() && sim.finished.is_none() {
            let delay =
                duration_annotation(&pod, ANNOTATION_START_DELAY).unwrap_or(config.start_delay);
            let due = sim.seen + delay;
            if now < due {
                return Action::Wait(Some(due));
            }
            if sim.address.is_none() {
                let [a, b, c] = crate::nodes::subnet(sim.node);
                sim.address = self.pools[sim.node]
                    .take()
                    .map(|d| Ipv4Addr::new(a, b, c, d));
            }
            let text = now_text();
            sim.start_time = Some(text.clone());
            sim.running = Some((now, text));
        }
        if let (Some((started, since)), Some(length)) =
            (sim.running.clone(), run_for(&config, &pod))
        {
            let due = started + length;
            if now >= due {
                let code = exit_code(&config, &pod, uid, sim.restarts);
                let exit = Exit {
                    code,
                    started: since,
                    finished: now_text(),
                };
                let restarts = match restart_policy(&pod) {
                    "Never" => false,
                    "OnFailure" => code != 0,
                    _ => true,
                };
                if restarts {
                    sim.restarts += 1;
                    sim.last = Some(exit);
                    sim.running = Some((now, now_text()));
                    next = Some(now + length);
                } else {
                    sim.running = None;
                    sim.finished = Some(exit);
                }
            } else {
                next = Some(due);
            }
        }
        let address = crate::nodes::address(sim.node);
        match desired(sim, address) {
            Some(status) => {
                let current = serde_json::to_value(&pod.status).unwrap_or(Value::Null);
                if shows(&current, &status) {
                    Action::Wait(next)
                } else {
                    Action::Write(status, next)
                }
            }
            None => Action::Wait(next),
        }
    }
}

/// Takes up a pod already bound (and perhaps run) before the simulator (re)started.
fn adopt(sim: &mut Sim, pool: &mut Pool) {
    let status = sim.pod.status.clone().unwrap_or_default();
    if let Some(ip) = status
        .pod_ip
        .as_deref()
        .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
    {
        pool.used.insert(ip.octets()[3]);
        sim.address = Some(ip);
    }
    let Some(start) = status.start_time else {
        return;
    };
    let text = serde_json::to_value(&start)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(now_text);
    sim.start_time = Some(text.clone());
    sim.restarts = status
        .container_statuses
        .iter()
        .flatten()
        .map(|c| u32::try_from(c.restart_count).unwrap_or(0))
        .max()
        .unwrap_or(0);
    match status.phase.as_deref() {
        Some("Succeeded" | "Failed") => {
            let code = i32::from(status.phase.as_deref() == Some("Failed"));
            sim.finished = Some(Exit {
                code,
                started: text.clone(),
                finished: text,
            });
        }
        // The current run counts from now: the simulator cannot know how far it got.
        _ => sim.running = Some((Instant::now(), text)),
    }
}

/// A write's outcome: the pod, and whether to look again soon.
type Done = (String, bool);

async fn write(client: kube::Client, pod: Arc<Pod>, action: Action) -> bool {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    let api: Api<Pod> = Api::namespaced(client, namespace);
    let result = match action {
        Action::Write(status, _) => api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Strategic(json!({"status": status})),
            )
            .await
            .map(drop),
        Action::Delete => {
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: pod.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            api.delete(name, &params).await.map(drop)
        }
        Action::Wait(_) => Ok(()),
    };
    match result {
        Ok(()) => true,
        // Gone or replaced: the watch says what comes next.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => true,
        Err(e) => {
            tracing::debug!(pod = %name, error = %e, "simulated pod: write failed; retrying");
            false
        }
    }
}

/// Moves the simulated nodes' pods until `stopping`.
pub(crate) async fn run(
    config: Arc<Config>,
    client: kube::Client,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let mut sim = Simulator {
        nodes: (0..config.count)
            .map(|i| (config.node_name(i), i))
            .collect(),
        pools: (0..config.count).map(|_| Pool::default()).collect(),
        config: config.clone(),
        pods: HashMap::new(),
        due: BinaryHeap::new(),
        sequence: 0,
        in_flight: HashSet::new(),
        dirty: HashSet::new(),
    };
    let api: Api<Pod> = Api::all(client.clone());
    let mut events = watcher(api, watcher::Config::default()).boxed();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<Done>();
    let permits = Arc::new(tokio::sync::Semaphore::new(config.concurrency.max(1)));
    let mut listed: Option<HashSet<String>> = None;
    loop {
        let next = sim.due.peek().map(|Reverse((at, _, _))| *at);
        tokio::select! {
            () = stopped(&mut stopping) => return,
            event = events.next() => match event {
                None => return,
                Some(Ok(watcher::Event::Init)) => listed = Some(HashSet::new()),
                Some(Ok(watcher::Event::InitApply(pod))) => {
                    if let (Some(listed), Some(uid)) = (listed.as_mut(), pod.metadata.uid.clone()) {
                        listed.insert(uid);
                    }
                    sim.seen(pod, true);
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    // Pods deleted while the watch was down.
                    if let Some(listed) = listed.take() {
                        let gone: Vec<String> =
                            sim.pods.keys().filter(|u| !listed.contains(*u)).cloned().collect();
                        for uid in gone {
                            sim.forget(&uid);
                        }
                    }
                }
                Some(Ok(watcher::Event::Apply(pod))) => sim.seen(pod, false),
                Some(Ok(watcher::Event::Delete(pod))) => {
                    if let Some(uid) = pod.metadata.uid.as_deref() {
                        sim.forget(uid);
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "simulated nodes: pod watch failed; retrying");
                    tokio::time::sleep(RETRY).await;
                }
            },
            Some((uid, ok)) = done_rx.recv() => {
                sim.in_flight.remove(&uid);
                if sim.dirty.remove(&uid) || !ok {
                    let when = if ok { Instant::now() } else { Instant::now() + RETRY };
                    sim.at(when, &uid);
                }
            }
            () = sleep_until(next), if next.is_some() => {
                let now = Instant::now();
                while let Some(Reverse((at, _, _))) = sim.due.peek() {
                    if *at > now {
                        break;
                    }
                    let Some(Reverse((_, _, uid))) = sim.due.pop() else { break };
                    if sim.in_flight.contains(&uid) {
                        sim.dirty.insert(uid);
                        continue;
                    }
                    let action = sim.look(&uid);
                    let again = match &action {
                        Action::Wait(at) | Action::Write(_, at) => *at,
                        Action::Delete => None,
                    };
                    if let Some(at) = again {
                        sim.at(at, &uid);
                    }
                    if matches!(action, Action::Wait(_)) {
                        continue;
                    }
                    let Some(pod) = sim.pods.get_mut(&uid).map(|s| {
                        if matches!(action, Action::Delete) {
                            s.deleted = true;
                        }
                        s.pod.clone()
                    }) else {
                        continue;
                    };
                    sim.in_flight.insert(uid.clone());
                    let (client, done, permits) = (client.clone(), done_tx.clone(), permits.clone());
                    tokio::spawn(async move {
                        let _permit = permits.acquire_owned().await;
                        let ok = write(client, pod, action).await;
                        let _ = done.send((uid, ok));
                    });
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_stable_and_spread() {
        assert_eq!(draw("a", 0), draw("a", 0));
        assert_ne!(draw("a", 0), draw("a", 1));
        let below = (0..10_000u32)
            .filter(|i| draw(&format!("pod-{i}"), 0) < 0.1)
            .count();
        assert!((800..1200).contains(&below), "{below} of 10000 under 0.1");
    }

    #[test]
    fn a_run_shows_running_then_finished() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "d", "uid": "u1"},
            "spec": {"restartPolicy": "Never", "nodeName": "sim-0",
                "containers": [{"name": "c", "image": "busybox"}]},
        }))
        .unwrap();
        let mut sim = Sim {
            pod: Arc::new(pod),
            node: 0,
            seen: Instant::now(),
            address: Some(Ipv4Addr::new(127, 128, 0, 2)),
            running: Some((Instant::now(), "2026-12-06T00:00:00Z".into())),
            start_time: Some("2026-12-06T00:00:00Z".into()),
            restarts: 0,
            last: None,
            finished: None,
            deleted: false,
        };
        let running = desired(&sim, Ipv4Addr::new(127, 128, 0, 1)).unwrap();
        assert_eq!(running["phase"], "Running");
        assert_eq!(running["podIP"], "127.128.0.2");
        assert!(!shows(&Value::Null, &running));
        assert!(shows(&running, &running));
        sim.running = None;
        sim.finished = Some(Exit {
            code: 3,
            started: "a".into(),
            finished: "b".into(),
        });
        let failed = desired(&sim, Ipv4Addr::new(127, 128, 0, 1)).unwrap();
        assert_eq!(failed["phase"], "Failed");
        assert_eq!(
            failed["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            3
        );
        assert!(!shows(&running, &failed));
    }
}
