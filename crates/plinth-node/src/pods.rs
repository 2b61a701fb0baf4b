//! The pods of this node: a watch on the Pods bound to it, one worker per pod, and in each
//! worker one supervisor per container — init containers in order (sidecars left running),
//! then the containers; restarts by `restartPolicy` with kube's back-off (the first at once,
//! then 10 s doubling to five minutes, `CrashLoopBackOff` meanwhile); probes; graceful
//! termination (`preStop`, `SIGTERM`, `SIGKILL` at the end of the grace period); the pod's
//! status as kube reports it.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use crate::Agent;
use crate::images;
use crate::logs;
use crate::probes;
use crate::sandbox;
use crate::volumes;

/// What the agent's server needs of a container: its log directory, the current run's
/// number, and how to run a command in it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Running {
    pub(crate) dir: PathBuf,
    pub(crate) run: u32,
    /// The PID whose namespaces a command enters (the sandbox's init), if any.
    pub(crate) sandbox_pid: Option<u32>,
    /// The container's environment.
    pub(crate) env: Vec<(String, String)>,
    /// The PID the agent started (the sandbox's first stage, or the command itself); 0
    /// before it runs.
    pub(crate) pid: u32,
    /// The process's standard input, kept open for `kubectl attach -i` when the container
    /// asks for one (`stdin: true`); `None` inside once it is closed.
    pub(crate) stdin: Option<Stdin>,
    /// Whether the first attach session closes the standard input (`stdinOnce`).
    pub(crate) stdin_once: bool,
    /// The image's clients, pointed at the pod, for `kubectl exec`.
    pub(crate) clients: images::Clients,
}

/// A container's standard input, shared by its attach sessions until it is closed.
pub(crate) type Stdin = Arc<tokio::sync::Mutex<Option<tokio::process::ChildStdin>>>;

/// (namespace, pod, container) → what is known of the container.
type LogIndex = HashMap<(String, String, String), Running>;

/// Where the pods' containers' logs are, for the agent's server.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    workers: Mutex<HashMap<String, watch::Sender<Option<Pod>>>>,
    /// (namespace, pod) → its address, while it runs here.
    addresses: Mutex<HashMap<(String, String), String>>,
    logs: Mutex<LogIndex>,
}

impl Registry {
    /// The log file of a container's current run (or the previous one).
    pub(crate) fn log_file(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Result<PathBuf, String> {
        let running = self.running(namespace, pod, container)?;
        let (dir, run) = (&running.dir, &running.run);
        if previous {
            if *run == 0 {
                return Err(format!(
                    "previous terminated container \"{container}\" in pod \"{pod}\" not found"
                ));
            }
            return Ok(dir.join(format!("{}.log", run - 1)));
        }
        Ok(dir.join(format!("{run}.log")))
    }

    /// What is known of a container that has started.
    pub(crate) fn running(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<Running, String> {
        let logs = self.logs.lock().map_err(|_| "poisoned".to_owned())?;
        logs.get(&(namespace.into(), pod.into(), container.into()))
            .cloned()
            .ok_or_else(|| {
                format!("container \"{container}\" in pod \"{pod}\" is waiting to start: ContainerCreating")
            })
    }

    fn set_running(&self, pod: &Pod, container: &str, running: Running) {
        if let Ok(mut logs) = self.logs.lock() {
            logs.insert(
                (
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default(),
                    container.to_owned(),
                ),
                running,
            );
        }
    }

    /// Every running container: (namespace, pod, container), the PID whose descendants
    /// are the container's processes, and whether that PID is the sandbox's (not counted).
    pub(crate) fn processes(&self) -> Vec<((String, String, String), u32, bool)> {
        self.logs
            .lock()
            .map(|logs| {
                logs.iter()
                    .filter(|(_, r)| r.pid > 0)
                    .map(|(k, r)| match r.sandbox_pid {
                        Some(init) => (k.clone(), init, true),
                        None => (k.clone(), r.pid, false),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The address of a pod running here.
    pub(crate) fn address(&self, namespace: &str, pod: &str) -> Option<String> {
        self.addresses
            .lock()
            .ok()?
            .get(&(namespace.to_owned(), pod.to_owned()))
            .cloned()
    }

    fn forget(&self, pod: &Pod) {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        if let Ok(mut addresses) = self.addresses.lock() {
            addresses.remove(&(namespace.clone(), name.clone()));
        }
        if let Ok(mut logs) = self.logs.lock() {
            logs.retain(|(ns, p, _), _| !(ns == &namespace && p == &name));
        }
    }
}

/// Watches the pods bound to this node and gives each to its worker until `stopping`.
pub(crate) async fn run(agent: Arc<Agent>, mut stopping: watch::Receiver<bool>) {
    let pods: Api<Pod> = Api::all(agent.client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={}", agent.config.name));
    let mut events = watcher(pods, config).boxed();
    let mut workers = Vec::new();
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = stopping.wait_for(|s| *s) => break,
        };
        let Some(event) = event else { break };
        match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                if let Some(worker) = deliver(&agent, pod) {
                    workers.push(worker);
                }
            }
            Ok(watcher::Event::Delete(pod)) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if let Ok(map) = agent.pods.workers.lock()
                    && let Some(sender) = map.get(&uid)
                {
                    let _ = sender.send(None);
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "pod watch failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    // The node goes away: every container is stopped.
    if let Ok(map) = agent.pods.workers.lock() {
        for sender in map.values() {
            let _ = sender.send(None);
        }
    }
    for worker in workers {
        let _ = worker.await;
    }
}

fn deliver(agent: &Arc<Agent>, pod: Pod) -> Option<tokio::task::JoinHandle<()>> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut map = agent.pods.workers.lock().ok()?;
    if let Some(sender) = map.get(&uid) {
        let _ = sender.send(Some(pod));
        return None;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
    if matches!(phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    let (sender, receiver) = watch::channel(Some(pod));
    map.insert(uid.clone(), sender);
    let agent = agent.clone();
    Some(tokio::spawn(async move {
        Worker::start(agent.clone(), receiver).await;
        if let Ok(mut map) = agent.pods.workers.lock() {
            map.remove(&uid);
        }
    }))
}

/// What kind of container a supervisor runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Init,
    Sidecar,
    Regular,
}

/// A container's status as the pod reports it.
#[derive(Clone, Debug)]
struct Status {
    name: String,
    image: String,
    kind: Kind,
    state: Value,
    last_state: Value,
    ready: bool,
    started: bool,
    restart_count: i64,
    container_id: String,
}

impl Status {
    fn to_json(&self) -> Value {
        let mut status = json!({
            "name": self.name,
            "image": self.image,
            "imageID": self.image,
            "state": self.state,
            "lastState": self.last_state,
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.started,
        });
        if !self.container_id.is_empty() {
            status["containerID"] = json!(self.container_id);
        }
        status
    }
}

/// What the parts of one pod's worker share.
struct PodState {
    statuses: Vec<Status>,
    initialized: bool,
    terminal: Option<&'static str>,
    conditions: BTreeMap<String, (String, String)>,
}

struct Worker {
    agent: Arc<Agent>,
    pod: Mutex<Pod>,
    dir: PathBuf,
    ip: String,
    started_at: String,
    state: Mutex<PodState>,
    changed: Notify,
    /// Becomes `Some(deadline)` when the containers are to stop.
    stop: watch::Sender<Option<Instant>>,
    volumes: Mutex<BTreeMap<String, PathBuf>>,
}

fn now_text() -> String {
    plinth_core::meta::format_time(crate::node::now())
}

fn waiting(reason: &str, message: &str) -> Value {
    if message.is_empty() {
        json!({"waiting": {"reason": reason}})
    } else {
        json!({"waiting": {"reason": reason, "message": message}})
    }
}

impl Worker {
    async fn start(agent: Arc<Agent>, mut updates: watch::Receiver<Option<Pod>>) {
        let Some(pod) = updates.borrow().clone() else {
            return;
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let dir = agent.config.data_dir.join("pods").join(&uid);
        let existing_ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let ip = if host_network {
            Some("127.0.0.1".to_owned())
        } else {
            agent.ips.lock().ok().and_then(|mut ips| {
                match existing_ip.as_deref().and_then(|ip| ip.parse().ok()) {
                    Some(ip) => {
                        ips.claim(ip);
                        Some(ip.to_string())
                    }
                    None => ips.allocate().map(|ip| ip.to_string()),
                }
            })
        };
        let Some(ip) = ip else {
            tracing::warn!(pod = %uid, "no pod address left on this node");
            return;
        };
        // A pod this node ran before (the agent restarted): its containers start again, each
        // counted as a restart, what ran before as their last state.
        let before = serde_json::to_value(pod.status.as_ref()).unwrap_or(Value::Null);
        let previous = |name: &str| -> Option<Value> {
            ["containerStatuses", "initContainerStatuses"]
                .iter()
                .filter_map(|k| before.get(*k).and_then(Value::as_array))
                .flatten()
                .find(|s| s["name"] == name)
                .cloned()
        };
        let statuses = containers(&pod)
            .into_iter()
            .map(|(kind, c)| {
                let name = c["name"].as_str().unwrap_or("").to_owned();
                let earlier = previous(&name);
                let ran = earlier.as_ref().is_some_and(|s| {
                    s.pointer("/state/running").is_some()
                        || s.pointer("/state/terminated").is_some()
                });
                let last_state = match earlier.as_ref() {
                    Some(s) if s.pointer("/state/running").is_some() => json!({"terminated": {
                        "exitCode": 137, "reason": "Error",
                        "message": "the node agent restarted",
                        "startedAt": s.pointer("/state/running/startedAt"),
                        "finishedAt": now_text()}}),
                    Some(s) if ran => s["state"].clone(),
                    Some(s) => s["lastState"].clone(),
                    None => json!({}),
                };
                let restart_count = earlier
                    .as_ref()
                    .and_then(|s| s["restartCount"].as_i64())
                    .unwrap_or(0)
                    + i64::from(ran && kind != Kind::Init);
                Status {
                    name,
                    image: c["image"].as_str().unwrap_or("").to_owned(),
                    kind,
                    state: waiting(
                        if kind == Kind::Regular && has_init(&pod) {
                            "PodInitializing"
                        } else {
                            "ContainerCreating"
                        },
                        "",
                    ),
                    last_state,
                    ready: false,
                    started: false,
                    restart_count,
                    container_id: String::new(),
                }
            })
            .collect();
        if let Ok(mut addresses) = agent.pods.addresses.lock() {
            addresses.insert(
                (
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default(),
                ),
                ip.clone(),
            );
        }
        let (stop, _) = watch::channel(None);
        let worker = Arc::new(Worker {
            agent: agent.clone(),
            pod: Mutex::new(pod.clone()),
            dir,
            ip: ip.clone(),
            started_at: pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map_or_else(now_text, |t| {
                    plinth_core::meta::format_time(t.0.as_second())
                }),
            state: Mutex::new(PodState {
                statuses,
                initialized: !has_init(&pod),
                terminal: None,
                conditions: BTreeMap::new(),
            }),
            changed: Notify::new(),
            stop,
            volumes: Mutex::new(BTreeMap::new()),
        });
        let writer = tokio::spawn(worker.clone().write_status());
        let lifecycle = tokio::spawn(worker.clone().lifecycle());
        let refresher = tokio::spawn(worker.clone().refresh_volumes());
        // Follow the pod until it is deleted.
        let mut deleted_from_api = false;
        loop {
            let current = updates.borrow_and_update().clone();
            match current {
                None => {
                    deleted_from_api = true;
                    worker.stop_by(Instant::now());
                }
                Some(pod) => {
                    let grace = pod.metadata.deletion_grace_period_seconds;
                    let deleting = pod.metadata.deletion_timestamp.is_some();
                    if let Ok(mut current) = worker.pod.lock() {
                        *current = pod;
                    }
                    if deleting {
                        let seconds = u64::try_from(grace.unwrap_or(0).max(0)).unwrap_or(0);
                        worker.stop_by(Instant::now() + Duration::from_secs(seconds));
                    }
                }
            }
            let deleting = worker.current().metadata.deletion_timestamp.is_some();
            // A finished pod (Succeeded/Failed) keeps its record and logs until deleted.
            if deleted_from_api || (deleting && worker.finished()) {
                break;
            }
            tokio::select! {
                changed = updates.changed() => if changed.is_err() {
                    deleted_from_api = true;
                    worker.stop_by(Instant::now());
                },
                () = worker.changed.notified() => {},
            }
        }
        let _ = lifecycle.await;
        refresher.abort();
        worker.changed.notify_one();
        let pod = worker.current();
        if !deleted_from_api && pod.metadata.deletion_timestamp.is_some() {
            // Everything stopped: the pod can go.
            let _ = worker.write_once().await;
            let api: Api<Pod> = Api::namespaced(
                agent.client.clone(),
                pod.metadata.namespace.as_deref().unwrap_or("default"),
            );
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: pod.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            if let Err(e) = api
                .delete(pod.metadata.name.as_deref().unwrap_or(""), &params)
                .await
            {
                tracing::warn!(error = %e, "could not delete a stopped pod");
            }
        }
        writer.abort();
        agent.pods.forget(&pod);
        agent
            .events
            .forget(pod.metadata.uid.as_deref().unwrap_or(""));
        volumes::forget_tokens(&agent, pod.metadata.uid.as_deref().unwrap_or(""));
        if let Ok(ip) = ip.parse()
            && !host_network
            && let Ok(mut ips) = agent.ips.lock()
        {
            ips.release(ip);
        }
        let _ = std::fs::remove_dir_all(worker.dir.join("volumes"));
        let _ = std::fs::remove_dir_all(worker.dir.join("root"));
    }

    /// Records an event on the pod (about `container`, if named).
    async fn event(&self, container: Option<&str>, warning: bool, reason: &str, message: &str) {
        let pod = self.current();
        self.agent
            .events
            .record(
                &self.agent.client,
                &self.agent.config.name,
                &pod,
                crate::events::Said {
                    container,
                    warning,
                    reason,
                    message,
                },
            )
            .await;
    }

    fn current(&self) -> Pod {
        self.pod.lock().map(|p| p.clone()).unwrap_or_default()
    }

    fn finished(&self) -> bool {
        self.state.lock().is_ok_and(|s| s.terminal.is_some())
    }

    fn stop_by(&self, deadline: Instant) {
        self.stop.send_if_modified(|current| match current {
            Some(existing) if *existing <= deadline => false,
            _ => {
                *current = Some(deadline);
                true
            }
        });
    }

    fn update(&self, name: &str, change: impl FnOnce(&mut Status)) {
        if let Ok(mut state) = self.state.lock()
            && let Some(status) = state.statuses.iter_mut().find(|s| s.name == name)
        {
            change(status);
        }
        self.changed.notify_waiters();
        self.changed.notify_one();
    }

    /// Init containers in order, then the containers; the pod's end when they are done.
    async fn lifecycle(self: Arc<Self>) {
        let pod = self.current();
        // Volumes first: a container waits until they are all there.
        loop {
            match volumes::sync(&self.agent, &pod, &self.dir).await {
                Ok(paths) => {
                    if let Ok(mut v) = self.volumes.lock() {
                        *v = paths;
                    }
                    break;
                }
                Err(e) => {
                    tracing::info!(pod = ?pod.metadata.name, error = %e, "volumes not ready");
                    self.event(
                        None,
                        true,
                        "FailedMount",
                        &format!("MountVolume.SetUp failed: {e}"),
                    )
                    .await;
                    if self.stopping_within(Duration::from_secs(2)).await {
                        self.mark_all_terminated();
                        return;
                    }
                }
            }
        }
        let all = containers(&pod);
        let mut running = Vec::new();
        for (kind, container) in all.iter().filter(|(k, _)| *k != Kind::Regular) {
            let supervisor = tokio::spawn(self.clone().supervise(container.clone(), *kind));
            if *kind == Kind::Sidecar {
                // A sidecar counts as done once started.
                self.wait_started(container["name"].as_str().unwrap_or(""))
                    .await;
                running.push(supervisor);
                continue;
            }
            let code = supervisor.await.ok().flatten();
            if code != Some(0) {
                // Failed for good (restartPolicy Never) or stopped.
                let stopped = self.stop.borrow().is_some();
                for s in running {
                    let _ = s.await;
                }
                self.mark_all_terminated();
                if !stopped {
                    self.set_terminal("Failed");
                }
                return;
            }
        }
        if let Ok(mut state) = self.state.lock() {
            state.initialized = true;
            for status in state
                .statuses
                .iter_mut()
                .filter(|s| s.kind == Kind::Regular)
            {
                status.state = waiting("ContainerCreating", "");
            }
        }
        self.changed.notify_one();
        let regular: Vec<_> = all
            .iter()
            .filter(|(k, _)| *k == Kind::Regular)
            .map(|(_, c)| tokio::spawn(self.clone().supervise(c.clone(), Kind::Regular)))
            .collect();
        let mut codes = Vec::new();
        for supervisor in regular {
            codes.push(supervisor.await.ok().flatten());
        }
        // The containers are done: sidecars stop too.
        self.stop_by(Instant::now() + Duration::from_secs(2));
        for s in running {
            let _ = s.await;
        }
        let stopped_by_delete = self.current().metadata.deletion_timestamp.is_some();
        if !stopped_by_delete {
            let ok = codes.iter().all(|c| *c == Some(0));
            self.set_terminal(if ok { "Succeeded" } else { "Failed" });
        } else {
            self.mark_all_terminated();
            self.set_terminal("Terminated");
        }
    }

    fn set_terminal(&self, phase: &'static str) {
        if let Ok(mut state) = self.state.lock() {
            state.terminal = Some(phase);
        }
        self.changed.notify_one();
        self.changed.notify_waiters();
    }

    /// Containers that never ran are shown as terminated when the pod ends.
    fn mark_all_terminated(&self) {
        if let Ok(mut state) = self.state.lock() {
            for status in &mut state.statuses {
                if status.state.get("terminated").is_none() {
                    status.ready = false;
                    if status.state.get("running").is_none() {
                        continue;
                    }
                    status.state = json!({"terminated": {"exitCode": 137, "reason": "Error",
                        "finishedAt": now_text()}});
                }
            }
        }
    }

    async fn wait_started(&self, name: &str) {
        loop {
            let notified = self.changed.notified();
            let done = self.state.lock().is_ok_and(|s| {
                s.statuses
                    .iter()
                    .any(|c| c.name == name && (c.started || c.state.get("terminated").is_some()))
            });
            if done || self.stop.borrow().is_some() {
                return;
            }
            let _ = tokio::time::timeout(Duration::from_millis(500), notified).await;
        }
    }

    /// Sleeps `period`, or less when the pod is stopping; returns whether it is.
    async fn stopping_within(&self, period: Duration) -> bool {
        let mut stop = self.stop.subscribe();
        if stop.borrow().is_some() {
            return true;
        }
        let stopped = tokio::select! {
            () = tokio::time::sleep(period) => false,
            () = async { let _ = stop.wait_for(Option::is_some).await; } => true,
        };
        stopped || self.stop.borrow().is_some()
    }

    /// Rewrites the API-backed volumes now and then, so that a changed ConfigMap shows.
    async fn refresh_volumes(self: Arc<Self>) {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let pod = self.current();
            if let Ok(paths) = volumes::sync(&self.agent, &pod, &self.dir).await
                && let Ok(mut v) = self.volumes.lock()
            {
                *v = paths;
            }
        }
    }

    /// The container's environment, in kube's order: `envFrom`, then `env` (each expanded
    /// with what came before).
    async fn environment(
        &self,
        container: &Value,
    ) -> Result<Vec<(String, String)>, (String, String)> {
        let pod = self.current();
        let pod_json = self.pod_json(&pod);
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = container["name"].as_str().unwrap_or("");
        let mut env: Vec<(String, String)> = vec![
            (
                "PATH".into(),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            ),
            ("HOSTNAME".into(), host_name(&pod)),
            ("HOME".into(), "/root".into()),
        ];
        let links = pod
            .spec
            .as_ref()
            .and_then(|s| s.enable_service_links)
            .unwrap_or(true);
        env.extend(self.agent.proxy.environment(&namespace, links));
        let set = |env: &mut Vec<(String, String)>, key: String, value: String| {
            env.retain(|(k, _)| *k != key);
            env.push((key, value));
        };
        let config_error = |m: String| ("CreateContainerConfigError".to_owned(), m);
        for from in container["envFrom"].as_array().into_iter().flatten() {
            let prefix = from["prefix"].as_str().unwrap_or("");
            for (key, secret) in [("configMapRef", false), ("secretRef", true)] {
                let Some(source) = from.get(key).filter(|v| v.is_object()) else {
                    continue;
                };
                let source_name = source["name"].as_str().unwrap_or("");
                match volumes::all_of(&self.agent, &namespace, secret, source_name)
                    .await
                    .map_err(config_error)?
                {
                    Some(values) => {
                        for (k, v) in values {
                            set(&mut env, format!("{prefix}{k}"), v);
                        }
                    }
                    None if source["optional"] == true => {}
                    None => {
                        let what = if secret { "secret" } else { "configmap" };
                        return Err(config_error(format!("{what} \"{source_name}\" not found")));
                    }
                }
            }
        }
        for var in container["env"].as_array().into_iter().flatten() {
            let key = var["name"].as_str().unwrap_or("").to_owned();
            let value = if let Some(value) = var["value"].as_str() {
                let known = env.clone();
                images::expand(value, &|n| {
                    known.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
                })
            } else if let Some(from) = var.get("valueFrom").filter(|v| v.is_object()) {
                if let Some(path) = from.pointer("/fieldRef/fieldPath").and_then(Value::as_str) {
                    volumes::field_value(&pod_json, path).unwrap_or_default()
                } else if let Some(reference) =
                    from.get("resourceFieldRef").filter(|v| v.is_object())
                {
                    volumes::resource_value(&pod_json, name, reference).unwrap_or_default()
                } else {
                    let (secret, selector) =
                        match (from.get("secretKeyRef"), from.get("configMapKeyRef")) {
                            (Some(s), _) if s.is_object() => (true, s),
                            (_, Some(c)) if c.is_object() => (false, c),
                            _ => continue,
                        };
                    let source = selector["name"].as_str().unwrap_or("");
                    let wanted = selector["key"].as_str().unwrap_or("");
                    match volumes::key_of(&self.agent, &namespace, secret, source, wanted)
                        .await
                        .map_err(config_error)?
                    {
                        Some(v) => v,
                        None if selector["optional"] == true => continue,
                        None => {
                            let what = if secret { "secret" } else { "configmap" };
                            let exists = volumes::all_of(&self.agent, &namespace, secret, source)
                                .await
                                .ok()
                                .flatten()
                                .is_some();
                            return Err(config_error(if exists {
                                format!(
                                    "couldn't find key {wanted} in {}{} {namespace}/{source}",
                                    what[..1].to_uppercase(),
                                    &what[1..]
                                )
                            } else {
                                format!("{what} \"{source}\" not found")
                            }));
                        }
                    }
                }
            } else {
                String::new()
            };
            set(&mut env, key, value);
        }
        Ok(env)
    }

    fn pod_json(&self, pod: &Pod) -> Value {
        let mut value = serde_json::to_value(pod).unwrap_or(Value::Null);
        value["status"]["podIP"] = json!(self.ip);
        value["status"]["hostIP"] = json!("127.0.0.1");
        value
    }

    /// `$(VAR)` expansion in a container with environment `env`: its variables, and the
    /// pod's address as `POD_IP` when it does not define one.
    fn lookup<'a>(&self, env: &'a [(String, String)]) -> impl Fn(&str) -> Option<String> + 'a {
        let ip = self.ip.clone();
        move |name: &str| -> Option<String> {
            env.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .or_else(|| (name == "POD_IP").then(|| ip.clone()))
        }
    }

    /// The clients of a container's image, pointed at the pod.
    fn clients(&self, container: &Value, env: &[(String, String)]) -> images::Clients {
        container["image"]
            .as_str()
            .and_then(|image| self.agent.config.images.lookup(image))
            .map(|entry| entry.clients(&self.lookup(env)))
            .unwrap_or_default()
    }

    /// The argument vector and the sandbox mounts of a container, or why it cannot start.
    fn command(
        &self,
        container: &Value,
        env: &[(String, String)],
    ) -> Result<Vec<String>, (String, String)> {
        let image = container["image"].as_str().unwrap_or("");
        let Some(entry) = self.agent.config.images.lookup(image) else {
            return Err((
                "ErrImagePull".into(),
                format!(
                    "image {image:?} is not in this node's image map: map it to a local executable (plinth node --images FILE)"
                ),
            ));
        };
        let strings = |key: &str| -> Option<Vec<String>> {
            container.get(key).and_then(Value::as_array).map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
        };
        let command = strings("command");
        let args = strings("args");
        let lookup = self.lookup(env);
        let argv = images::argv(entry, command.as_deref(), args.as_deref(), &lookup);
        if argv.is_empty() {
            return Err(("CreateContainerError".into(), "no command specified".into()));
        }
        Ok(argv)
    }

    fn mounts(&self, container: &Value) -> Vec<sandbox::Mount> {
        let volumes = self.volumes.lock().map(|v| v.clone()).unwrap_or_default();
        let pod = self.current();
        let api_backed: Vec<String> = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|v| {
                v.config_map.is_some()
                    || v.secret.is_some()
                    || v.downward_api.is_some()
                    || v.projected.is_some()
            })
            .map(|v| v.name)
            .collect();
        container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                let name = m["name"].as_str()?;
                let mut source = volumes.get(name)?.clone();
                if let Some(sub) = m["subPath"].as_str().filter(|s| !s.is_empty()) {
                    source = source.join(sub.trim_start_matches('/'));
                    if !source.exists() {
                        let _ = std::fs::create_dir_all(&source);
                    }
                }
                Some(sandbox::Mount {
                    source,
                    target: m["mountPath"].as_str().unwrap_or("/").to_owned(),
                    read_only: m["readOnly"] == true || api_backed.iter().any(|v| v == name),
                })
            })
            .collect()
    }

    /// Runs one container for as long as its restart policy says; returns its last exit
    /// code when it ends for good (`None` when stopped).
    async fn supervise(self: Arc<Self>, container: Value, kind: Kind) -> Option<i32> {
        let name = container["name"].as_str().unwrap_or("").to_owned();
        let pod = self.current();
        let policy = pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into());
        let pod_label = format!(
            "{}_{}({})",
            pod.metadata.name.as_deref().unwrap_or(""),
            pod.metadata.namespace.as_deref().unwrap_or(""),
            pod.metadata.uid.as_deref().unwrap_or("")
        );
        // As the kubelet's: the first restart at once, then 10 s doubling to five minutes; a
        // container that ran ten minutes starts the sequence again.
        let mut backoff = Duration::ZERO;
        let mut run: u32 = 0;
        let log_dir = self.dir.join("logs").join(&name);
        let _ = std::fs::create_dir_all(&log_dir);
        loop {
            if self.stop.borrow().is_some() {
                return None;
            }
            let prepared = match self.environment(&container).await {
                Ok(env) => self.command(&container, &env).map(|argv| (argv, env)),
                Err(e) => Err(e),
            };
            let (argv, env) = match prepared {
                Ok(p) => p,
                Err((reason, message)) => {
                    let image = container["image"].as_str().unwrap_or("");
                    let said = if reason == "ErrImagePull" {
                        format!("Failed to pull image {image:?}: {message}")
                    } else {
                        format!("Error: {message}")
                    };
                    self.event(Some(&name), true, "Failed", &said).await;
                    self.update(&name, |s| s.state = waiting(&reason, &message));
                    if self.stopping_within(Duration::from_secs(2)).await {
                        return None;
                    }
                    continue;
                }
            };
            self.agent.pods.set_running(
                &pod,
                &name,
                Running {
                    dir: log_dir.clone(),
                    run,
                    sandbox_pid: None,
                    env: env.clone(),
                    pid: 0,
                    stdin: None,
                    stdin_once: false,
                    clients: self.clients(&container, &env),
                },
            );
            let log = log_dir.join(format!("{run}.log"));
            let _ = std::fs::remove_file(logs::done_marker(&log));
            let started = Instant::now();
            self.event(
                Some(&name),
                false,
                "Pulled",
                &format!(
                    "Container image {:?} already present on machine",
                    container["image"].as_str().unwrap_or("")
                ),
            )
            .await;
            let outcome = self.run_once(&container, kind, argv, env, &log, run).await;
            let _ = std::fs::write(logs::done_marker(&log), b"");
            let (code, reason, started_text) = match outcome {
                Ok(done) => done,
                Err(message) => {
                    // The process could not be started at all.
                    self.update(&name, |s| s.state = waiting("RunContainerError", &message));
                    if self
                        .stopping_within(backoff.max(Duration::from_secs(10)))
                        .await
                    {
                        return None;
                    }
                    continue;
                }
            };
            let terminated = json!({"terminated": {
                "exitCode": code,
                "reason": reason,
                "startedAt": started_text,
                "finishedAt": now_text(),
                "containerID": format!("plinth://{}-{name}-{run}", pod.metadata.uid.as_deref().unwrap_or("")),
            }});
            self.update(&name, |s| {
                s.state = terminated.clone();
                s.ready = false;
                s.started = false;
            });
            let stopping = self.stop.borrow().is_some();
            let restart = !stopping
                && match kind {
                    Kind::Sidecar => true,
                    Kind::Init => code != 0 && policy != "Never",
                    Kind::Regular => match policy.as_str() {
                        "Always" => true,
                        "OnFailure" => code != 0,
                        _ => false,
                    },
                };
            if !restart {
                return (!stopping).then_some(code);
            }
            if started.elapsed() > Duration::from_secs(600) {
                backoff = Duration::ZERO;
            }
            if backoff.is_zero() {
                backoff = Duration::from_secs(10);
                run += 1;
                self.update(&name, |s| {
                    s.last_state = terminated.clone();
                    s.restart_count += 1;
                });
                continue;
            }
            let message = format!(
                "back-off {} restarting failed container={name} pod={pod_label}",
                plinth_core::meta::human_duration(i64::try_from(backoff.as_secs()).unwrap_or(300))
            );
            self.update(&name, |s| {
                s.last_state = terminated.clone();
                s.state = waiting("CrashLoopBackOff", &message);
            });
            self.event(
                Some(&name),
                true,
                "BackOff",
                &format!("Back-off restarting failed container {name} in pod {pod_label}"),
            )
            .await;
            if self.stopping_within(backoff).await {
                return None;
            }
            backoff = (backoff * 2).min(Duration::from_secs(300));
            run += 1;
            self.update(&name, |s| s.restart_count += 1);
        }
    }

    /// Starts the container's process and supervises it until it exits: probes, stop
    /// requests. Returns its exit code, termination reason and start time.
    async fn run_once(
        self: &Arc<Self>,
        container: &Value,
        kind: Kind,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        log: &std::path::Path,
        run: u32,
    ) -> Result<(i32, String, String), String> {
        let name = container["name"].as_str().unwrap_or("").to_owned();
        let pod = self.current();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let cgroup = memory_cgroup(&self.agent.config.name, &uid, &name, run, container);
        let cpu = cpu_cgroup(&self.agent.config.name, &uid, &name, run, container);
        let cgroups: Vec<PathBuf> = cgroup.iter().chain(cpu.iter()).cloned().collect();
        // A multi-call image (busybox) finds its applets first on `PATH`, as in its image.
        let mut env = env;
        let mut extra_mounts = Vec::new();
        let applets = container["image"]
            .as_str()
            .and_then(|image| self.agent.config.images.lookup(image))
            .and_then(|entry| entry.wrapper.clone())
            .and_then(|wrapper| images::applet_dir(&wrapper, &self.agent.config.data_dir));
        if let Some(dir) = applets {
            let inside = if self.agent.config.sandbox.is_some() {
                extra_mounts.push(sandbox::Mount {
                    source: dir,
                    target: APPLETS.to_owned(),
                    read_only: true,
                });
                APPLETS.to_owned()
            } else {
                dir.display().to_string()
            };
            for (key, value) in &mut env {
                if key == "PATH" {
                    *value = format!("{inside}:{value}");
                }
            }
        }
        // A program the image map names under a directory the sandbox makes its own
        // (`/tmp`: a build's target directory, say) is shown at its path inside.
        if self.agent.config.sandbox.is_some()
            && let Some(program) = argv.first()
            && sandbox::replaced(program)
            && std::path::Path::new(program).is_file()
        {
            extra_mounts.push(sandbox::Mount {
                source: PathBuf::from(program),
                target: program.clone(),
                read_only: true,
            });
        }
        let mut command = match &self.agent.config.sandbox {
            Some(exe) => {
                let root = self.dir.join("root").join(&name);
                let _ = std::fs::create_dir_all(&root);
                let spec = sandbox::Spec {
                    argv: argv.clone(),
                    env: env.clone(),
                    cwd: container["workingDir"]
                        .as_str()
                        .filter(|w| !w.is_empty())
                        .map(str::to_owned),
                    root,
                    mounts: self
                        .mounts(container)
                        .into_iter()
                        .chain(extra_mounts)
                        .collect(),
                    cgroups: cgroups.clone(),
                    user: None,
                    hostname: Some(host_name(&pod)),
                    hide: vec![self.agent.config.data_dir.clone()],
                    parent: sandbox::Parent::this(),
                };
                let mut command = tokio::process::Command::new(exe);
                // The environment goes as the sandbox's own (see `sandbox::Spec::env`).
                command
                    .arg("sandbox")
                    .arg(serde_json::to_string(&spec).map_err(|e| e.to_string())?)
                    .env_clear()
                    .envs(spec.env.iter().cloned());
                command
            }
            None => {
                let Some((program, args)) = argv.split_first() else {
                    return Err("no command".into());
                };
                let mut command = tokio::process::Command::new(program);
                command.args(args).env_clear().envs(env.iter().cloned());
                if let Some(dir) = container["workingDir"].as_str().filter(|w| !w.is_empty()) {
                    command.current_dir(dir);
                }
                command.process_group(0);
                command
            }
        };
        // A container goes with the agent's handle on it: an agent that stops without
        // stopping its pods (its runtime dropped, as in a test) leaves none behind.
        command.kill_on_drop(true);
        command
            .stdin(if container["stdin"] == true {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .await
            .map_err(|e| format!("log {}: {e}", log.display()))?;
        let file = Arc::new(tokio::sync::Mutex::new(file));
        let mut child = command.spawn().map_err(|e| {
            format!(
                "failed to start {:?}: {e}",
                argv.first().cloned().unwrap_or_default()
            )
        })?;
        let pid = child.id().unwrap_or(0);
        if self.agent.config.sandbox.is_none() {
            for cg in &cgroups {
                let _ = std::fs::write(cg.join("cgroup.procs"), pid.to_string());
            }
        }
        let stdin = child
            .stdin
            .take()
            .map(|s| Arc::new(tokio::sync::Mutex::new(Some(s))));
        let mut copies = Vec::new();
        if let Some(out) = child.stdout.take() {
            copies.push(tokio::spawn(logs::copy(out, "stdout", file.clone())));
        }
        if let Some(err) = child.stderr.take() {
            copies.push(tokio::spawn(logs::copy(err, "stderr", file.clone())));
        }
        let started_text = now_text();
        // Known to the agent's server (exec, attach) before the container is reported
        // running: `kubectl run -i` attaches as soon as it sees it running.
        let sandbox_pid = if self.agent.config.sandbox.is_some() {
            find_child(pid).await
        } else {
            None
        };
        self.agent.pods.set_running(
            &pod,
            &name,
            Running {
                dir: log
                    .parent()
                    .map(std::path::Path::to_path_buf)
                    .unwrap_or_default(),
                run,
                sandbox_pid,
                env: env.clone(),
                pid,
                stdin,
                stdin_once: container["stdinOnce"] == true,
                clients: self.clients(container, &env),
            },
        );
        self.event(
            Some(&name),
            false,
            "Created",
            &format!("Created container: {name}"),
        )
        .await;
        self.event(
            Some(&name),
            false,
            "Started",
            &format!("Started container {name}"),
        )
        .await;
        let has_startup = container.get("startupProbe").is_some_and(Value::is_object);
        let has_readiness = container
            .get("readinessProbe")
            .is_some_and(Value::is_object);
        self.update(&name, |s| {
            s.state = json!({"running": {"startedAt": started_text}});
            s.started = !has_startup;
            s.ready = kind != Kind::Init && !has_startup && !has_readiness;
            s.container_id = format!("plinth://{uid}-{name}-{run}");
        });
        let (kill_tx, mut kill_rx) = tokio::sync::mpsc::channel::<String>(1);
        let probes: Vec<_> = ["startupProbe", "readinessProbe", "livenessProbe"]
            .into_iter()
            .filter(|p| container.get(*p).is_some_and(Value::is_object))
            .map(|p| {
                tokio::spawn(self.clone().probe_loop(
                    p,
                    container.clone(),
                    sandbox_pid,
                    env.clone(),
                    kill_tx.clone(),
                ))
            })
            .collect();
        drop(kill_tx);
        let mut stop = self.stop.subscribe();
        let stopped = async {
            let _ = stop.wait_for(Option::is_some).await;
        };
        let status = tokio::select! {
            status = child.wait() => status,
            () = stopped => {
                let deadline = (*self.stop.borrow()).unwrap_or_else(Instant::now);
                self.terminate(container, &mut child, pid, sandbox_pid, &env, deadline).await;
                child.wait().await
            }
            reason = async {
                // No probe left to ask (or none at all): nothing comes from here.
                match kill_rx.recv().await {
                    Some(reason) => reason,
                    None => std::future::pending().await,
                }
            } => {
                tracing::info!(container = %name, %reason, "probe failed; restarting");
                self.event(
                    Some(&name),
                    false,
                    "Killing",
                    &format!("Container {name} failed liveness probe, will be restarted"),
                )
                .await;
                let grace = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30);
                let deadline = Instant::now() + Duration::from_secs(u64::try_from(grace.max(0)).unwrap_or(30));
                self.terminate(container, &mut child, pid, sandbox_pid, &env, deadline).await;
                child.wait().await
            }
        };
        for probe in probes {
            probe.abort();
        }
        for copy in copies {
            let _ = copy.await;
        }
        let status = status.map_err(|e| e.to_string())?;
        let code = sandbox::code_of(status);
        let oom = cgroup.as_ref().is_some_and(|cg| oom_killed(cg));
        for cg in &cgroups {
            let _ = std::fs::remove_dir(cg);
        }
        let reason = if oom {
            "OOMKilled"
        } else if code == 0 {
            "Completed"
        } else {
            "Error"
        };
        Ok((code, reason.to_owned(), started_text))
    }

    /// Stops a container by `deadline`: its `preStop` hook, `SIGTERM`, then `SIGKILL`.
    async fn terminate(
        &self,
        container: &Value,
        child: &mut tokio::process::Child,
        pid: u32,
        sandbox_pid: Option<u32>,
        env: &[(String, String)],
        deadline: Instant,
    ) {
        let clients = self.clients(container, env);
        let target = probes::Target {
            pod_ip: &self.ip,
            container,
            sandbox_pid,
            env,
            clients: &clients,
        };
        if let Some(hook) = container
            .pointer("/lifecycle/preStop")
            .filter(|h| h.is_object())
        {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut hook = hook.clone();
            hook["timeoutSeconds"] = json!(left.as_secs().max(1));
            if let Some(sleep) = hook.pointer("/sleep/seconds").and_then(Value::as_u64) {
                let _ = tokio::time::timeout(left, tokio::time::sleep(Duration::from_secs(sleep)))
                    .await;
            } else {
                let _ = tokio::time::timeout(left, probes::run(&hook, &target)).await;
            }
        }
        let name = container["name"].as_str().unwrap_or("");
        self.event(
            Some(name),
            false,
            "Killing",
            &format!("Stopping container {name}"),
        )
        .await;
        signal(
            pid,
            self.agent.config.sandbox.is_none(),
            nix::sys::signal::Signal::SIGTERM,
        );
        let left = deadline.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, child.wait()).await.is_err() {
            signal(
                pid,
                self.agent.config.sandbox.is_none(),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    /// Runs one of a container's probes every `periodSeconds` while the container runs:
    /// the startup probe until it passes (then the others start), readiness marking the
    /// container ready or not by its thresholds, liveness (and a startup probe that fails
    /// for good) asking through `kill` for a restart.
    async fn probe_loop(
        self: Arc<Self>,
        which: &'static str,
        container: Value,
        sandbox_pid: Option<u32>,
        env: Vec<(String, String)>,
        kill: tokio::sync::mpsc::Sender<String>,
    ) {
        let probe = container[which].clone();
        let name = container["name"].as_str().unwrap_or("").to_owned();
        let seconds = |key: &str, default: u64| probe[key].as_u64().unwrap_or(default);
        let period = Duration::from_secs(seconds("periodSeconds", 10).max(1));
        let success_threshold = seconds("successThreshold", 1).max(1);
        let failure_threshold = seconds("failureThreshold", 3).max(1);
        let clients = self.clients(&container, &env);
        if which != "startupProbe" {
            // Readiness and liveness wait for the startup probe.
            loop {
                let started = self
                    .state
                    .lock()
                    .is_ok_and(|s| s.statuses.iter().any(|c| c.name == name && c.started));
                if started {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(seconds("initialDelaySeconds", 0))).await;
        let (mut successes, mut failures) = (0u64, 0u64);
        loop {
            let target = probes::Target {
                pod_ip: &self.ip,
                container: &container,
                sandbox_pid,
                env: &env,
                clients: &clients,
            };
            let outcome = probes::run(&probe, &target).await;
            match outcome {
                Ok(()) => {
                    successes += 1;
                    failures = 0;
                    match which {
                        "startupProbe" => {
                            self.update(&name, |s| {
                                s.started = true;
                                if container.get("readinessProbe").is_none_or(Value::is_null) {
                                    s.ready = true;
                                }
                            });
                            return;
                        }
                        "readinessProbe" if successes >= success_threshold => {
                            let changed = self.state.lock().is_ok_and(|s| {
                                s.statuses.iter().any(|c| c.name == name && !c.ready)
                            });
                            if changed {
                                self.update(&name, |s| s.ready = true);
                            }
                        }
                        _ => {}
                    }
                }
                Err(message) => {
                    failures += 1;
                    successes = 0;
                    tracing::debug!(container = %name, probe = which, %message, "probe failed");
                    let kind = match which {
                        "readinessProbe" => "Readiness",
                        "livenessProbe" => "Liveness",
                        _ => "Startup",
                    };
                    self.event(
                        Some(&name),
                        true,
                        "Unhealthy",
                        &format!("{kind} probe failed: {message}"),
                    )
                    .await;
                    if failures >= failure_threshold {
                        match which {
                            "readinessProbe" => {
                                let changed = self.state.lock().is_ok_and(|s| {
                                    s.statuses.iter().any(|c| c.name == name && c.ready)
                                });
                                if changed {
                                    self.update(&name, |s| s.ready = false);
                                }
                            }
                            _ => {
                                let _ = kill.send(message).await;
                                return;
                            }
                        }
                    }
                }
            }
            tokio::time::sleep(period).await;
        }
    }

    /// Writes the pod's status whenever it changes.
    async fn write_status(self: Arc<Self>) {
        loop {
            let notified = self.changed.notified();
            if let Err(e) = self.write_once().await {
                tracing::debug!(error = %e, "pod status not written; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            let _ = tokio::time::timeout(Duration::from_secs(10), notified).await;
        }
    }

    async fn write_once(&self) -> Result<(), kube::Error> {
        let pod = self.current();
        let status = self.status_json();
        let api: Api<Pod> = Api::namespaced(
            self.agent.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let current = serde_json::to_value(pod.status.as_ref()).unwrap_or(Value::Null);
        if same_status(&current, &status) {
            return Ok(());
        }
        let written = api
            .patch_status(
                pod.metadata.name.as_deref().unwrap_or(""),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await?;
        if let Ok(mut p) = self.pod.lock()
            && p.metadata.uid == written.metadata.uid
        {
            p.status = written.status;
        }
        Ok(())
    }

    fn status_json(&self) -> Value {
        let Ok(mut state) = self.state.lock() else {
            return Value::Null;
        };
        let pod = self.current();
        let gates: Vec<String> = pod
            .spec
            .as_ref()
            .and_then(|s| s.readiness_gates.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|g| g.condition_type)
            .collect();
        let regular: Vec<&Status> = state
            .statuses
            .iter()
            .filter(|s| s.kind == Kind::Regular)
            .collect();
        let sidecars_ready = state
            .statuses
            .iter()
            .filter(|s| s.kind == Kind::Sidecar)
            .all(|s| s.ready);
        let containers_ready =
            !regular.is_empty() && regular.iter().all(|s| s.ready) && sidecars_ready;
        let existing: Vec<Value> = pod
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(&s.conditions).ok())
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default();
        let gates_met = gates.iter().all(|g| {
            existing
                .iter()
                .any(|c| c["type"] == g.as_str() && c["status"] == "True")
        });
        let terminal = state.terminal;
        let phase = match terminal {
            Some("Succeeded") => "Succeeded",
            Some("Failed") => "Failed",
            _ if state.initialized
                && regular.iter().any(|s| {
                    s.state.get("running").is_some()
                        || s.restart_count > 0
                        || s.state.get("terminated").is_some()
                }) =>
            {
                "Running"
            }
            _ => "Pending",
        };
        let done = matches!(phase, "Succeeded" | "Failed");
        let truth = |b: bool| if b { "True" } else { "False" };
        let wanted = [
            (
                "PodReadyToStartContainers",
                truth(!done || terminal.is_some()),
                "",
            ),
            (
                "Initialized",
                truth(state.initialized),
                if state.initialized {
                    ""
                } else {
                    "ContainersNotInitialized"
                },
            ),
            (
                "Ready",
                truth(containers_ready && gates_met && !done),
                if containers_ready && !done {
                    ""
                } else if done {
                    "PodCompleted"
                } else {
                    "ContainersNotReady"
                },
            ),
            (
                "ContainersReady",
                truth(containers_ready && !done),
                if containers_ready && !done {
                    ""
                } else if done {
                    "PodCompleted"
                } else {
                    "ContainersNotReady"
                },
            ),
            ("PodScheduled", "True", ""),
        ];
        let not_ready: Vec<String> = regular
            .iter()
            .filter(|s| !s.ready)
            .map(|s| s.name.clone())
            .collect();
        let mut conditions = Vec::new();
        for (kind, status, reason) in wanted {
            let now = now_text();
            let entry = state
                .conditions
                .entry(kind.to_owned())
                .or_insert_with(|| (status.to_owned(), now.clone()));
            if entry.0 != status {
                *entry = (status.to_owned(), now);
            }
            let mut condition = json!({"type": kind, "status": status, "lastProbeTime": null,
                "lastTransitionTime": entry.1});
            if !reason.is_empty() {
                condition["reason"] = json!(reason);
                if reason == "ContainersNotReady" {
                    condition["message"] = json!(format!(
                        "containers with unready status: [{}]",
                        not_ready.join(" ")
                    ));
                } else if reason == "ContainersNotInitialized" {
                    let pending: Vec<String> = state
                        .statuses
                        .iter()
                        .filter(|s| {
                            s.kind != Kind::Regular
                                && s.state.get("terminated").is_none()
                                && !s.started
                        })
                        .map(|s| s.name.clone())
                        .collect();
                    condition["message"] = json!(format!(
                        "containers with incomplete status: [{}]",
                        pending.join(" ")
                    ));
                }
            }
            conditions.push(condition);
        }
        // Conditions other agents set (readiness gates) stay.
        for c in existing {
            if !conditions.iter().any(|w| w["type"] == c["type"]) {
                conditions.push(c);
            }
        }
        let init: Vec<Value> = state
            .statuses
            .iter()
            .filter(|s| s.kind != Kind::Regular)
            .map(Status::to_json)
            .collect();
        let main: Vec<Value> = state
            .statuses
            .iter()
            .filter(|s| s.kind == Kind::Regular)
            .map(Status::to_json)
            .collect();
        let mut status = json!({
            "phase": phase,
            "conditions": conditions,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "startTime": self.started_at,
            "containerStatuses": main,
        });
        if !init.is_empty() {
            status["initContainerStatuses"] = json!(init);
        }
        status
    }
}

/// Whether the stored status already says what `wanted` does (ignoring what only the server
/// adds).
fn same_status(current: &Value, wanted: &Value) -> bool {
    wanted
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| current.get(k) == Some(v))
}

fn has_init(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// The pod's containers as JSON with their kinds, init containers first.
fn containers(pod: &Pod) -> Vec<(Kind, Value)> {
    let spec = serde_json::to_value(pod.spec.as_ref()).unwrap_or(Value::Null);
    let mut all = Vec::new();
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        let kind = if c["restartPolicy"] == "Always" {
            Kind::Sidecar
        } else {
            Kind::Init
        };
        all.push((kind, c.clone()));
    }
    for c in spec["containers"].as_array().into_iter().flatten() {
        all.push((Kind::Regular, c.clone()));
    }
    all
}

fn signal(pid: u32, group: bool, signal: nix::sys::signal::Signal) {
    let Ok(raw) = i32::try_from(pid) else { return };
    if raw <= 0 {
        return;
    }
    let target = nix::unistd::Pid::from_raw(if group { -raw } else { raw });
    let _ = nix::sys::signal::kill(target, signal);
}

/// The sandbox's init (the first stage's child), once it is there.
async fn find_child(parent: u32) -> Option<u32> {
    for _ in 0..50 {
        let path = format!("/proc/{parent}/task/{parent}/children");
        if let Ok(text) = std::fs::read_to_string(&path)
            && let Some(child) = text.split_whitespace().next().and_then(|c| c.parse().ok())
        {
            return Some(child);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Where a multi-call image's applets appear in its containers.
const APPLETS: &str = "/.plinth/applets";

const MEMORY_CGROUPS: &str = "/sys/fs/cgroup/memory";

/// A memory cgroup with the container's limit, when it has one and cgroups can be made here.
fn memory_cgroup(
    node: &str,
    uid: &str,
    container: &str,
    run: u32,
    spec: &Value,
) -> Option<PathBuf> {
    let limit = spec
        .pointer("/resources/limits/memory")
        .and_then(plinth_core::quantity::bytes)?;
    let dir = PathBuf::from(MEMORY_CGROUPS)
        .join(format!("plinth-{node}"))
        .join(format!("{uid}-{container}-{run}"));
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string()).ok()?;
    let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
    Some(dir)
}

const CPU_CGROUPS: &str = "/sys/fs/cgroup/cpu";

/// A CPU cgroup with the container's limit as a CFS quota (kube's: the limit's millicores
/// in 100 ms periods), when it has one and cgroups can be made here.
fn cpu_cgroup(node: &str, uid: &str, container: &str, run: u32, spec: &Value) -> Option<PathBuf> {
    let millicores = spec
        .pointer("/resources/limits/cpu")
        .and_then(plinth_core::quantity::millis)?;
    let dir = PathBuf::from(CPU_CGROUPS)
        .join(format!("plinth-{node}"))
        .join(format!("{uid}-{container}-{run}"));
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::write(dir.join("cpu.cfs_period_us"), "100000").ok()?;
    // kube's minimum quota is 1 ms.
    let quota = (millicores * 100).max(1000);
    std::fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string()).ok()?;
    Some(dir)
}

fn oom_killed(cgroup: &std::path::Path) -> bool {
    std::fs::read_to_string(cgroup.join("memory.oom_control"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("oom_kill "))
                .and_then(|n| n.trim().parse::<u64>().ok())
        })
        .is_some_and(|n| n > 0)
}

/// A pod's host name: `spec.hostname` (a StatefulSet's or Indexed Job's pod), else its name.
fn host_name(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default()
}
