//! The container runtime below the pod worker: processes, signals, cgroups.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use nix::sys::signal::Signal;
use serde_json::Value;

use crate::sandbox;

/// What a container is started as: everything the runtime is told.
#[derive(Debug)]
pub(super) struct Launch {
    /// The command and its arguments.
    pub(super) argv: Vec<String>,
    /// The environment (nothing else is inherited).
    pub(super) env: Vec<(String, String)>,
    /// The working directory, if the container names one.
    pub(super) working_dir: Option<String>,
    /// The container's own root directory (an isolating runtime's).
    pub(super) root: PathBuf,
    /// Volumes and files shown inside (an isolating runtime's).
    pub(super) mounts: Vec<sandbox::Mount>,
    /// The cgroups it runs in (its limits).
    pub(super) cgroups: Vec<PathBuf>,
    /// Its host name (an isolating runtime's).
    pub(super) hostname: String,
    /// Directories hidden from it (the agent's own files).
    pub(super) hide: Vec<PathBuf>,
    /// Whether its standard input is kept open (`stdin: true`).
    pub(super) stdin: bool,
    /// The pod's network namespace, if it has one.
    pub(super) netns: Option<PathBuf>,
    /// Its user, groups and capabilities (`securityContext`).
    pub(super) security: Option<crate::security::Security>,
    /// The pod's sysctls (an isolating runtime's: it has the namespaces they belong to).
    pub(super) sysctls: Vec<(String, String)>,
}

/// The container runtime below the pod worker — the kubelet's CRI, in small: it starts a
/// container's process (standard output and error piped to the worker), signals it, and names
/// the process whose namespaces `exec` enters. Two implement it: plain [`Processes`] and the
/// namespaced [`Sandbox`].
pub(super) trait Runtime: Send + Sync {
    /// Whether containers get their own mount namespace (files are shown at paths inside).
    fn isolates(&self) -> bool;

    /// Starts the container's process.
    ///
    /// # Errors
    /// Why it could not start (kube's `RunContainerError` message).
    fn start(&self, launch: &Launch) -> Result<tokio::process::Child, String>;

    /// Sends `signal` to the processes of the container the runtime started as `pid`.
    fn signal(&self, pid: u32, signal: Signal);

    /// The process whose namespaces a command run in the container enters, once it is there.
    fn namespaces_of(&self, pid: u32) -> BoxFuture<'static, Option<u32>>;
}

/// The runtime the agent is configured with: the sandbox when it has its executable, else
/// plain processes.
pub(super) fn of(sandbox: Option<&PathBuf>) -> Arc<dyn Runtime> {
    match sandbox {
        Some(exe) => Arc::new(Sandbox { exe: exe.clone() }),
        None => Arc::new(Processes),
    }
}

/// What both runtimes set on a command: pipes, and the container going with the agent's
/// handle on it (an agent that stops without stopping its pods — its runtime dropped, as in a
/// test — leaves none behind).
fn spawn(
    mut command: tokio::process::Command,
    launch: &Launch,
) -> Result<tokio::process::Child, String> {
    command
        .kill_on_drop(true)
        .stdin(if launch.stdin {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    command.spawn().map_err(|e| {
        format!(
            "failed to start {:?}: {e}",
            launch.argv.first().cloned().unwrap_or_default()
        )
    })
}

fn kill(pid: u32, group: bool, signal: Signal) {
    let Ok(raw) = i32::try_from(pid) else { return };
    if raw <= 0 {
        return;
    }
    let target = nix::unistd::Pid::from_raw(if group { -raw } else { raw });
    let _ = nix::sys::signal::kill(target, signal);
}

/// Containers as plain processes of the agent's, each in its own process group (signalled
/// as a group), joined to its cgroups once started.
#[derive(Debug)]
pub(super) struct Processes;

impl Runtime for Processes {
    fn isolates(&self) -> bool {
        false
    }

    fn start(&self, launch: &Launch) -> Result<tokio::process::Child, String> {
        // As the container's user, with its capabilities, where the agent may change them
        // (it is root).
        let own = match &launch.security {
            Some(security) if nix::unistd::geteuid().is_root() => security.wrap(&launch.argv),
            _ => launch.argv.clone(),
        };
        // In the pod's network namespace, entered by nsenter.
        let argv: Vec<String> = match &launch.netns {
            Some(netns) => [
                "nsenter".to_owned(),
                format!("--net={}", netns.display()),
                "--".to_owned(),
            ]
            .into_iter()
            .chain(own)
            .collect(),
            None => own,
        };
        let Some((program, args)) = argv.split_first() else {
            return Err("no command".into());
        };
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .env_clear()
            .envs(launch.env.iter().cloned());
        if let Some(dir) = &launch.working_dir {
            command.current_dir(dir);
        }
        command.process_group(0);
        let child = spawn(command, launch)?;
        let pid = child.id().unwrap_or(0);
        for cg in &launch.cgroups {
            let _ = std::fs::write(cg.join("cgroup.procs"), pid.to_string());
        }
        Ok(child)
    }

    fn signal(&self, pid: u32, signal: Signal) {
        kill(pid, true, signal);
    }

    fn namespaces_of(&self, _pid: u32) -> BoxFuture<'static, Option<u32>> {
        Box::pin(std::future::ready(None))
    }
}

/// Containers in the agent's sandbox (`plinth sandbox`, see [`crate::sandbox`]): their own
/// mount, PID and UTS namespaces, root and cgroups, set up by its two stages.
#[derive(Debug)]
pub(super) struct Sandbox {
    /// The executable that has the `sandbox` command.
    exe: PathBuf,
}

impl Runtime for Sandbox {
    fn isolates(&self) -> bool {
        true
    }

    fn start(&self, launch: &Launch) -> Result<tokio::process::Child, String> {
        let _ = std::fs::create_dir_all(&launch.root);
        let spec = sandbox::Spec {
            argv: launch.argv.clone(),
            env: launch.env.clone(),
            cwd: launch.working_dir.clone(),
            root: launch.root.clone(),
            mounts: launch.mounts.clone(),
            cgroups: launch.cgroups.clone(),
            security: launch.security.as_ref().map(|s| {
                if sandbox::in_user_namespace() {
                    s.without_identity()
                } else {
                    s.clone()
                }
            }),
            sysctls: launch.sysctls.clone(),
            hostname: Some(launch.hostname.clone()),
            hide: launch.hide.clone(),
            parent: sandbox::Parent::this(),
            netns: launch.netns.clone(),
        };
        let mut command = tokio::process::Command::new(&self.exe);
        // The environment goes as the sandbox's own (see `sandbox::Spec::env`).
        command
            .arg("sandbox")
            .arg(serde_json::to_string(&spec).map_err(|e| e.to_string())?)
            .env_clear()
            .envs(spec.env.iter().cloned());
        spawn(command, launch)
    }

    fn signal(&self, pid: u32, signal: Signal) {
        kill(pid, false, signal);
    }

    /// The sandbox's init (the first stage's child).
    fn namespaces_of(&self, pid: u32) -> BoxFuture<'static, Option<u32>> {
        Box::pin(async move {
            for _ in 0..50 {
                let path = format!("/proc/{pid}/task/{pid}/children");
                if let Ok(text) = std::fs::read_to_string(&path)
                    && let Some(child) = text.split_whitespace().next().and_then(|c| c.parse().ok())
                {
                    return Some(child);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            None
        })
    }
}

/// Where a multi-call image's applets appear in its containers.
pub(super) const APPLETS: &str = "/.plinth/applets";

const MEMORY_CGROUPS: &str = "/sys/fs/cgroup/memory";
const CPU_CGROUPS: &str = "/sys/fs/cgroup/cpu";

/// The cgroup of one run of a container under `hierarchy`, made if it can be.
fn container_cgroup(
    hierarchy: &str,
    node: &str,
    uid: &str,
    container: &str,
    run: u32,
) -> Option<PathBuf> {
    let dir = PathBuf::from(hierarchy)
        .join(format!("plinth-{node}"))
        .join(format!("{uid}-{container}-{run}"));
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// A memory cgroup with the container's limit, when it has one and cgroups can be made here.
pub(super) fn memory_cgroup(
    node: &str,
    uid: &str,
    container: &str,
    run: u32,
    spec: &Value,
) -> Option<PathBuf> {
    let limit = spec
        .pointer("/resources/limits/memory")
        .and_then(plinth_core::quantity::bytes)?;
    let dir = container_cgroup(MEMORY_CGROUPS, node, uid, container, run)?;
    std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string()).ok()?;
    let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
    Some(dir)
}

/// A CPU cgroup with the container's limit as a CFS quota (kube's: the limit's millicores
/// in 100 ms periods), when it has one and cgroups can be made here.
pub(super) fn cpu_cgroup(
    node: &str,
    uid: &str,
    container: &str,
    run: u32,
    spec: &Value,
) -> Option<PathBuf> {
    let millicores = spec
        .pointer("/resources/limits/cpu")
        .and_then(plinth_core::quantity::millis)?;
    let dir = container_cgroup(CPU_CGROUPS, node, uid, container, run)?;
    std::fs::write(dir.join("cpu.cfs_period_us"), "100000").ok()?;
    // kube's minimum quota is 1 ms.
    let quota = (millicores * 100).max(1000);
    std::fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string()).ok()?;
    Some(dir)
}

pub(super) fn oom_killed(cgroup: &std::path::Path) -> bool {
    std::fs::read_to_string(cgroup.join("memory.oom_control"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("oom_kill "))
                .and_then(|n| n.trim().parse::<u64>().ok())
        })
        .is_some_and(|n| n > 0)
}
