//! What the agent's server reads of the pods running here: each container's log directory and
//! run, its processes, the pods' addresses.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

use crate::images;

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
    /// Who commands run in it run as (its `securityContext`).
    pub(crate) security: Option<crate::security::Security>,
}

/// A container's standard input, shared by its attach sessions until it is closed.
pub(crate) type Stdin = Arc<tokio::sync::Mutex<Option<tokio::process::ChildStdin>>>;

/// (namespace, pod, container) → what is known of the container.
type LogIndex = HashMap<(String, String, String), Running>;

/// A pod's address, and its network namespace when it has one.
pub(super) type Reachable = (String, Option<std::path::PathBuf>);

/// Where the pods' containers' logs are, for the agent's server.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub(super) workers: Mutex<HashMap<String, watch::Sender<Option<Pod>>>>,
    /// Pods deleted while their workers still stop them: their files go when they end
    /// (taken under `workers`' lock).
    pub(super) gone: Mutex<std::collections::HashSet<String>>,
    /// (namespace, pod) → its address and network namespace, while it runs here.
    pub(super) addresses: Mutex<HashMap<(String, String), Reachable>>,
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

    pub(super) fn set_running(&self, pod: &Pod, container: &str, running: Running) {
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

    /// How a pod running here is reached for port forwarding: inside its network namespace,
    /// or at its address.
    pub(crate) fn reach(&self, namespace: &str, pod: &str) -> Option<crate::netns::Reach> {
        let addresses = self.addresses.lock().ok()?;
        let (ip, netns) = addresses.get(&(namespace.to_owned(), pod.to_owned()))?;
        Some(match netns {
            Some(path) => crate::netns::Reach::Namespace(path.clone()),
            None => crate::netns::Reach::Address(ip.clone()),
        })
    }

    pub(super) fn forget(&self, pod: &Pod) {
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
