//! One pod's worker: follows the pod (sync), stops it when it is deleted (terminate), cleans
//! up after it (terminated).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};
use serde_json::Value;
use tokio::sync::{Notify, watch};

use super::runtime::Runtime;
use super::state::{
    ContainerState, Kind, PodState, Status, Terminal, Terminated, containers, has_init, now_text,
};
use crate::agent::Agent;
use crate::volumes;

/// Where a pod's worker is, in the kubelet's terms: syncing the pod (starting and keeping its
/// containers), or terminating it (stopping them by a deadline: the grace period). Terminated
/// is the worker's end, when `Worker::start` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Starting and keeping the containers.
    Syncing,
    /// Stopping them by `deadline`.
    Terminating {
        /// When every container must have stopped (`SIGKILL` then).
        deadline: Instant,
    },
}

impl Phase {
    /// Whether the containers are to stop.
    pub(super) fn is_terminating(&self) -> bool {
        matches!(self, Self::Terminating { .. })
    }

    /// When they must have stopped, once terminating.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match self {
            Self::Syncing => None,
            Self::Terminating { deadline } => Some(*deadline),
        }
    }
}

/// The pod's status message when it outlived its `activeDeadlineSeconds` (the kubelet's).
pub(super) const DEADLINE_MESSAGE: &str =
    "Pod was active on the node longer than the specified deadline";

pub(super) struct Worker {
    pub(super) agent: Arc<Agent>,
    pub(super) pod: Mutex<Pod>,
    pub(super) dir: PathBuf,
    pub(super) ip: String,
    pub(super) started_at: String,
    pub(super) state: Mutex<PodState>,
    pub(super) changed: Notify,
    /// Syncing, until the pod is to stop: then terminating, by a deadline.
    pub(super) phase: watch::Sender<Phase>,
    /// What runs the containers.
    pub(super) runtime: Arc<dyn Runtime>,
    pub(super) volumes: Mutex<BTreeMap<String, PathBuf>>,
    /// The pod's network namespace, where pods have their own.
    pub(super) netns: Option<PathBuf>,
    /// Its making, until a container waits for it (or the pod ends first).
    pub(super) sandbox: Mutex<Option<tokio::task::JoinHandle<Result<(), String>>>>,
    /// Whether the namespace is there (true where the pod has none to make).
    pub(super) made: watch::Sender<bool>,
    /// Held while a status is computed and written: two writes in flight at once could
    /// land in either order, an older status last (see `write_once`).
    pub(super) writing: tokio::sync::Mutex<()>,
}

impl Worker {
    pub(super) async fn start(agent: Arc<Agent>, mut updates: watch::Receiver<Option<Pod>>) {
        let Some(pod) = updates.borrow().clone() else {
            return;
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let dir = agent.config.data_dir.join("pods").join(&uid);
        let existing_ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
        let host_network = super::on_host_network(&pod);
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
        let private = agent
            .network
            .get()
            .and_then(crate::network::Mode::private)
            .filter(|_| !host_network)
            .cloned();
        let mut netns = None;
        let mut sandbox = None;
        if let Some(private) = &private
            && let Ok(address) = ip.parse()
        {
            // The pod's sandbox, a namespace of its own (kube's RunPodSandbox), is made while
            // its volumes are; its containers wait for it (see `sandbox_ready`).
            netns = Some(private.namespace_path(&uid));
            let (private, uid) = (private.clone(), uid.clone());
            sandbox = Some(tokio::spawn(async move {
                private.pod_up(&uid, address).await.map(|_| ())
            }));
        }
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
                let state = earlier
                    .as_ref()
                    .and_then(|s| ContainerState::from_json(&s["state"]));
                let ran = state
                    .as_ref()
                    .is_some_and(|s| s.is_running() || s.is_terminated());
                let last_state = match state {
                    Some(ContainerState::Running { started_at }) => {
                        Some(ContainerState::Terminated(Terminated {
                            exit_code: 137,
                            reason: "Error".into(),
                            message: "the node agent restarted".into(),
                            started_at: Some(started_at),
                            finished_at: now_text(),
                            container_id: None,
                        }))
                    }
                    Some(s) if ran => Some(s),
                    _ => earlier
                        .as_ref()
                        .and_then(|s| ContainerState::from_json(&s["lastState"])),
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
                    state: ContainerState::waiting(
                        // The kubelet's default: a pod with init containers shows all its
                        // containers not yet started as `PodInitializing`.
                        if has_init(&pod) {
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
                (ip.clone(), netns.clone()),
            );
        }
        let (phase, _) = watch::channel(Phase::Syncing);
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
                deadline_exceeded: false,
            }),
            changed: Notify::new(),
            phase,
            runtime: super::runtime::of(agent.config.sandbox.as_ref()),
            volumes: Mutex::new(BTreeMap::new()),
            netns,
            made: watch::channel(sandbox.is_none()).0,
            writing: tokio::sync::Mutex::new(()),
            sandbox: Mutex::new(sandbox),
        });
        // Host ports (kube's portmap): served at the node's address while the pod runs.
        if !host_network && let Ok(address) = ip.parse() {
            let spec = serde_json::to_value(pod.spec.as_ref()).unwrap_or(Value::Null);
            for problem in agent.host_ports.open(&uid, address, &spec) {
                worker.event(None, true, "FailedHostPort", &problem).await;
            }
        }
        let writer = tokio::spawn(worker.clone().write_status());
        let lifecycle = tokio::spawn(worker.clone().lifecycle());
        let refresher = tokio::spawn(worker.clone().refresh_volumes());
        let deadline = tokio::spawn(worker.clone().active_deadline());
        // Follow the pod until it is deleted; ephemeral containers start as they are added.
        let mut deleted_from_api = false;
        let mut debuggers = Vec::new();
        loop {
            let current = updates.borrow_and_update().clone();
            match current {
                None => {
                    deleted_from_api = true;
                    worker.terminate_by(Instant::now());
                }
                Some(pod) => {
                    let grace = pod.metadata.deletion_grace_period_seconds;
                    let deleting = pod.metadata.deletion_timestamp.is_some();
                    let added = worker.added_ephemeral(&pod);
                    if let Ok(mut current) = worker.pod.lock() {
                        *current = pod;
                    }
                    for container in added {
                        let worker = worker.clone();
                        debuggers.push(tokio::spawn(async move {
                            if worker.network_made().await {
                                worker.supervise(container, Kind::Ephemeral).await
                            } else {
                                None
                            }
                        }));
                    }
                    if deleting {
                        let seconds = u64::try_from(grace.unwrap_or(0).max(0)).unwrap_or(0);
                        worker.terminate_by(Instant::now() + Duration::from_secs(seconds));
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
                    worker.terminate_by(Instant::now());
                },
                () = worker.changed.notified() => {},
            }
        }
        let _ = lifecycle.await;
        for debugger in debuggers {
            let _ = debugger.await;
        }
        refresher.abort();
        deadline.abort();
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
            match api
                .delete(pod.metadata.name.as_deref().unwrap_or(""), &params)
                .await
            {
                // Gone already (its deletion ended another way): nothing left to do.
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => tracing::warn!(error = %e, "could not delete a stopped pod"),
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
        volumes::unmount_all(&worker.dir);
        let _ = std::fs::remove_dir_all(worker.dir.join("volumes"));
        let _ = std::fs::remove_dir_all(worker.dir.join("root"));
        agent.host_ports.close(&uid);
        if let Some(private) = &private
            && worker.netns.is_some()
        {
            // A namespace still being made is finished before it is removed.
            let making = worker.sandbox.lock().ok().and_then(|mut s| s.take());
            if let Some(making) = making {
                let _ = making.await;
            }
            private.pod_down(&uid).await;
        }
    }

    /// Records an event on the pod (about `container`, if named).
    pub(super) async fn event(
        &self,
        container: Option<&str>,
        warning: bool,
        reason: &str,
        message: &str,
    ) {
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

    /// The ephemeral containers of `pod` the worker has not seen yet, each given a status
    /// (waiting to be created) — none once the pod is stopping.
    fn added_ephemeral(&self, pod: &Pod) -> Vec<Value> {
        if self.terminating() {
            return Vec::new();
        }
        let Ok(mut state) = self.state.lock() else {
            return Vec::new();
        };
        let mut added = Vec::new();
        for container in super::state::ephemeral(pod) {
            let name = container["name"].as_str().unwrap_or("").to_owned();
            if name.is_empty() || state.statuses.iter().any(|s| s.name == name) {
                continue;
            }
            state.statuses.push(Status {
                name,
                image: container["image"].as_str().unwrap_or("").to_owned(),
                kind: Kind::Ephemeral,
                state: ContainerState::waiting("ContainerCreating", ""),
                last_state: None,
                ready: false,
                started: false,
                restart_count: 0,
                container_id: String::new(),
            });
            added.push(container);
        }
        if !added.is_empty() {
            self.changed.notify_one();
        }
        added
    }

    pub(super) fn current(&self) -> Pod {
        self.pod.lock().map(|p| p.clone()).unwrap_or_default()
    }

    pub(super) fn finished(&self) -> bool {
        self.state.lock().is_ok_and(|s| s.terminal.is_some())
    }

    pub(super) fn terminate_by(&self, deadline: Instant) {
        self.phase
            .send_if_modified(|current| match current.deadline() {
                Some(existing) if existing <= deadline => false,
                _ => {
                    *current = Phase::Terminating { deadline };
                    true
                }
            });
    }

    /// Whether the pod's containers are to stop.
    pub(super) fn terminating(&self) -> bool {
        self.phase.borrow().is_terminating()
    }

    pub(super) fn update(&self, name: &str, change: impl FnOnce(&mut Status)) {
        if let Ok(mut state) = self.state.lock()
            && let Some(status) = state.statuses.iter_mut().find(|s| s.name == name)
        {
            change(status);
        }
        self.changed.notify_waiters();
        self.changed.notify_one();
    }

    /// Init containers in order, then the containers; the pod's end when they are done.
    pub(super) async fn lifecycle(self: Arc<Self>) {
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
        self.write_name_files(&pod);
        if !self.sandbox_ready().await {
            self.mark_all_terminated();
            return;
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
                let stopped = self.terminating();
                for s in running {
                    let _ = s.await;
                }
                self.mark_all_terminated();
                if !stopped || self.deadline_exceeded() {
                    self.set_terminal(Terminal::Failed);
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
                status.state = ContainerState::waiting("PodInitializing", "");
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
        self.terminate_by(Instant::now() + Duration::from_secs(2));
        for s in running {
            let _ = s.await;
        }
        let stopped_by_delete = self.current().metadata.deletion_timestamp.is_some();
        if !stopped_by_delete || self.deadline_exceeded() {
            let ok = codes.iter().all(|c| *c == Some(0)) && !self.deadline_exceeded();
            self.set_terminal(if ok {
                Terminal::Succeeded
            } else {
                Terminal::Failed
            });
        } else {
            self.mark_all_terminated();
            self.set_terminal(self.ended_by_deletion());
        }
    }

    /// How a pod stopped because it is deleted ends, as the kubelet's `getPhase` for a
    /// terminal pod says (kube 1.27 on, so a Job's pod failure policy sees the disruption):
    /// once every regular container has run and stopped, `Succeeded` when each ended with 0,
    /// else `Failed`; one that never started leaves the phase as it was.
    fn ended_by_deletion(&self) -> Terminal {
        let Ok(state) = self.state.lock() else {
            return Terminal::Stopped;
        };
        let (mut stopped, mut succeeded) = (0, 0);
        for status in state.statuses.iter().filter(|s| s.kind == Kind::Regular) {
            match &status.state {
                ContainerState::Terminated(t) => {
                    stopped += 1;
                    succeeded += usize::from(t.exit_code == 0);
                }
                _ if status
                    .last_state
                    .as_ref()
                    .is_some_and(ContainerState::is_terminated) =>
                {
                    stopped += 1;
                }
                _ => return Terminal::Stopped,
            }
        }
        match stopped {
            0 => Terminal::Stopped,
            _ if stopped == succeeded => Terminal::Succeeded,
            _ => Terminal::Failed,
        }
    }

    /// Whether the pod outlived its `activeDeadlineSeconds`.
    pub(super) fn deadline_exceeded(&self) -> bool {
        self.state.lock().is_ok_and(|s| s.deadline_exceeded)
    }

    /// Ends the pod once it has been active longer than its `activeDeadlineSeconds` (read
    /// again each second: the field can be set or lowered on a running pod), as the
    /// kubelet's active deadline handler: phase `Failed`, reason `DeadlineExceeded`, its
    /// containers stopped within the grace period.
    pub(super) async fn active_deadline(self: Arc<Self>) {
        let started = plinth_core::meta::parse_time(&self.started_at);
        loop {
            if self.stopping_within(Duration::from_secs(1)).await || self.finished() {
                return;
            }
            let pod = self.current();
            let spec = pod.spec.as_ref();
            let (Some(seconds), Some(started)) =
                (spec.and_then(|s| s.active_deadline_seconds), started)
            else {
                continue;
            };
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            if now < started.saturating_add(seconds) {
                continue;
            }
            if let Ok(mut state) = self.state.lock() {
                state.deadline_exceeded = true;
            }
            self.event(None, true, "DeadlineExceeded", DEADLINE_MESSAGE)
                .await;
            let grace = spec
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(30);
            let grace = Duration::from_secs(u64::try_from(grace.max(0)).unwrap_or(30));
            self.terminate_by(Instant::now() + grace);
            self.changed.notify_one();
            return;
        }
    }

    pub(super) fn set_terminal(&self, terminal: Terminal) {
        if let Ok(mut state) = self.state.lock() {
            state.terminal = Some(terminal);
        }
        self.changed.notify_one();
        self.changed.notify_waiters();
    }

    /// When the pod ends: no container is ready, and one still shown running is shown
    /// killed (one that never ran stays waiting).
    pub(super) fn mark_all_terminated(&self) {
        if let Ok(mut state) = self.state.lock() {
            for status in &mut state.statuses {
                if status.state.is_terminated() {
                    continue;
                }
                status.ready = false;
                if status.state.is_running() {
                    status.state = ContainerState::Terminated(Terminated {
                        exit_code: 137,
                        reason: "Error".into(),
                        finished_at: now_text(),
                        ..Terminated::default()
                    });
                }
            }
        }
    }

    pub(super) async fn wait_started(&self, name: &str) {
        loop {
            let notified = self.changed.notified();
            let done = self.state.lock().is_ok_and(|s| {
                s.statuses
                    .iter()
                    .any(|c| c.name == name && (c.started || c.state.is_terminated()))
            });
            if done || self.terminating() {
                return;
            }
            let _ = tokio::time::timeout(Duration::from_millis(500), notified).await;
        }
    }

    /// Sleeps `period`, or less when the pod is stopping; returns whether it is.
    /// Waits for the pod's network namespace, made while its volumes were; one that could
    /// not be made is tried again, each failure an event, as the kubelet retries a pod's
    /// sandbox. False when the pod stops first.
    async fn sandbox_ready(&self) -> bool {
        let making = self.sandbox.lock().ok().and_then(|mut s| s.take());
        let Some(making) = making else {
            return true;
        };
        let mut made = making
            .await
            .unwrap_or_else(|e| Err(format!("pod namespace task: {e}")));
        let mut attempt = 0u32;
        loop {
            let error = match made {
                Ok(()) => {
                    self.made.send_replace(true);
                    return true;
                }
                Err(e) => e,
            };
            let uid = self.current().metadata.uid.unwrap_or_default();
            tracing::warn!(pod = %uid, error = %error, "pod network namespace not made");
            self.event(
                None,
                true,
                "FailedCreatePodSandBox",
                &format!("Failed to create pod sandbox: {error}"),
            )
            .await;
            attempt = attempt.saturating_add(1);
            let wait = Duration::from_millis(200 * u64::from(attempt.min(25)));
            if self.stopping_within(wait).await {
                return false;
            }
            let private = self
                .agent
                .network
                .get()
                .and_then(crate::network::Mode::private)
                .cloned();
            made = match (private, self.ip.parse()) {
                (Some(private), Ok(address)) => private.pod_up(&uid, address).await.map(|_| ()),
                _ => Err("the node's pod network is gone".to_owned()),
            };
        }
    }

    /// Waits until the pod's network namespace is there (an ephemeral container added
    /// before it was); false when the pod stops first.
    async fn network_made(&self) -> bool {
        let mut made = self.made.subscribe();
        let mut phase = self.phase.subscribe();
        tokio::select! {
            made = made.wait_for(|m| *m) => made.is_ok(),
            _ = phase.wait_for(Phase::is_terminating) => false,
        }
    }

    pub(super) async fn stopping_within(&self, period: Duration) -> bool {
        let mut stop = self.phase.subscribe();
        if stop.borrow().is_terminating() {
            return true;
        }
        let stopped = tokio::select! {
            () = tokio::time::sleep(period) => false,
            () = async { let _ = stop.wait_for(Phase::is_terminating).await; } => true,
        };
        stopped || self.terminating()
    }

    /// The pod's `/etc/hosts` and `/etc/resolv.conf` (kept in its directory, shown inside its
    /// containers), as the kubelet writes them.
    fn write_name_files(&self, pod: &Pod) {
        let pod = serde_json::to_value(pod).unwrap_or(Value::Null);
        let domain = crate::network::DOMAIN;
        let machine_hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        let hosts = plinth_net::podfiles::hosts_file(
            &pod,
            std::slice::from_ref(&self.ip),
            domain,
            &machine_hosts,
        );
        let machine = plinth_net::podfiles::Resolv::parse(
            &std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
        );
        // The cluster's DNS server when this node answers it.
        let cluster_dns = self
            .agent
            .proxy
            .dns_served
            .load(std::sync::atomic::Ordering::SeqCst)
            .then(|| self.agent.proxy.dns_address())
            .flatten()
            .map(|ip| ip.to_string());
        let resolv =
            plinth_net::podfiles::resolv_conf(&pod, cluster_dns.as_deref(), domain, &machine);
        let _ = std::fs::create_dir_all(&self.dir);
        let _ = std::fs::write(self.dir.join("etc-hosts"), hosts);
        let _ = std::fs::write(self.dir.join("resolv.conf"), resolv.render());
    }

    /// Rewrites the API-backed volumes now and then, so that a changed ConfigMap shows.
    pub(super) async fn refresh_volumes(self: Arc<Self>) {
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
}
