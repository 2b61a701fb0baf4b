//! One container's supervisor: runs it, restarts it by its policy with kube's back-off,
//! stops it gracefully.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::env::host_name;
use nix::sys::signal::Signal;

use super::runtime::{APPLETS, Launch, cpu_cgroup, memory_cgroup, oom_killed};
use super::state::{ContainerState, Kind, Terminated, now_text};
use super::table::Running;
use super::worker::{Phase, Worker};
use crate::images;
use crate::logs;
use crate::probes;
use crate::sandbox;

/// How a run of a container ended.
pub(super) struct Exit {
    /// Its exit code (`128 + N` when signal `N` ended it).
    code: i32,
    /// `Completed`, `Error` or `OOMKilled`.
    reason: String,
    /// Its termination message.
    message: String,
    /// When it started (RFC 3339).
    started: String,
}

/// The kubelet's limits: the file's first 4 KiB; of the log, the last 80 lines' first 2 KiB.
const MESSAGE_FILE_BYTES: usize = 4096;
const MESSAGE_LOG_LINES: usize = 80;
const MESSAGE_LOG_BYTES: usize = 2048;

/// A run's termination message as the kubelet makes it: what the container wrote to its
/// termination message file, else (policy `FallbackToLogsOnError`, the run failed) the tail
/// of its log.
/// A fresh copy of directory `from` at `to` (what was there before goes), with the modes of
/// its entries.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    if to.exists() {
        std::fs::remove_dir_all(to)?;
    }
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::fs::metadata(from)?.permissions())?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Runs a lifecycle hook (`exec`, `httpGet`, `tcpSocket` or `sleep`) within `limit`.
async fn run_hook(
    hook: &Value,
    target: &probes::Target<'_>,
    limit: Duration,
) -> Result<(), String> {
    if let Some(sleep) = hook.pointer("/sleep/seconds").and_then(Value::as_u64) {
        let _ = tokio::time::timeout(limit, tokio::time::sleep(Duration::from_secs(sleep))).await;
        return Ok(());
    }
    let mut hook = hook.clone();
    hook["timeoutSeconds"] = json!(limit.as_secs().max(1));
    match tokio::time::timeout(limit, probes::run(&hook, target)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!("timed out after {}s", limit.as_secs())),
    }
}

fn termination_message(
    container: &Value,
    file: Option<&(PathBuf, String)>,
    code: i32,
    log: &std::path::Path,
) -> String {
    let written = file
        .and_then(|(source, _)| std::fs::read(source).ok())
        .map(|mut bytes| {
            bytes.truncate(MESSAGE_FILE_BYTES);
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default();
    if written.is_empty()
        && code != 0
        && container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    {
        return logs::tail_text(log, MESSAGE_LOG_LINES, MESSAGE_LOG_BYTES);
    }
    written
}

impl Worker {
    /// Runs one container for as long as its restart policy says; returns its last exit
    /// code when it ends for good (`None` when stopped).
    pub(super) async fn supervise(self: Arc<Self>, container: Value, kind: Kind) -> Option<i32> {
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
            if self.terminating() {
                return None;
            }
            let prepared = match self.environment(&container).await {
                Ok(env) => match self.subpath_problem(&container, &env) {
                    Some(problem) => Err(("CreateContainerConfigError".to_owned(), problem)),
                    None => self.command(&container, &env).map(|argv| (argv, env)),
                },
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
                    self.update(&name, |s| {
                        s.state = ContainerState::waiting(&reason, &message)
                    });
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
                    security: Some(self.security(&container)),
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
            let (code, reason, message, started_text) =
                match outcome.map(|e| (e.code, e.reason, e.message, e.started)) {
                    Ok(done) => done,
                    Err(message) => {
                        // The process could not be started at all.
                        self.update(&name, |s| {
                            s.state = ContainerState::waiting("RunContainerError", &message)
                        });
                        if self
                            .stopping_within(backoff.max(Duration::from_secs(10)))
                            .await
                        {
                            return None;
                        }
                        continue;
                    }
                };
            let terminated = ContainerState::Terminated(Terminated {
                exit_code: i64::from(code),
                reason,
                message,
                started_at: Some(started_text),
                finished_at: now_text(),
                container_id: Some(format!(
                    "plinth://{}-{name}-{run}",
                    pod.metadata.uid.as_deref().unwrap_or("")
                )),
            });
            self.update(&name, |s| {
                s.state = terminated.clone();
                // An init container that completed is ready (the kubelet's rule).
                s.ready = kind == Kind::Init && code == 0;
                s.started = false;
            });
            let stopping = self.terminating();
            let restart = !stopping
                && match kind {
                    Kind::Sidecar => true,
                    Kind::Init => code != 0 && policy != "Never",
                    Kind::Regular => match policy.as_str() {
                        "Always" => true,
                        "OnFailure" => code != 0,
                        _ => false,
                    },
                    Kind::Ephemeral => false,
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
                    s.last_state = Some(terminated.clone());
                    s.restart_count += 1;
                });
                continue;
            }
            let message = format!(
                "back-off {} restarting failed container={name} pod={pod_label}",
                plinth_core::meta::human_duration(i64::try_from(backoff.as_secs()).unwrap_or(300))
            );
            self.update(&name, |s| {
                s.last_state = Some(terminated.clone());
                s.state = ContainerState::waiting("CrashLoopBackOff", &message);
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
    /// requests. Returns how it ended.
    pub(super) async fn run_once(
        self: &Arc<Self>,
        container: &Value,
        kind: Kind,
        mut argv: Vec<String>,
        env: Vec<(String, String)>,
        log: &std::path::Path,
        run: u32,
    ) -> Result<Exit, String> {
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
            .and_then(|image| self.image(image))
            .and_then(|entry| entry.wrapper.clone())
            .and_then(|wrapper| images::applet_dir(&wrapper, &self.agent.config.data_dir));
        if let Some(dir) = applets {
            let inside = if self.runtime.isolates() {
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
        if self.runtime.isolates()
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
        // The image's own files: shown at their paths inside, or (not isolated) run from
        // where they are.
        if let Some(entry) = container["image"].as_str().and_then(|i| self.image(i)) {
            for (inside, source) in &entry.files {
                if self.runtime.isolates() {
                    // A directory is the container's own, fresh each run, as an image's
                    // layer is (a test moves a web server's index page away); a file is
                    // shown as it is.
                    let layer = self
                        .dir
                        .join("image-files")
                        .join(&name)
                        .join(inside.trim_matches('/').replace('/', "_"));
                    let (source, read_only) = if std::path::Path::new(source).is_dir()
                        && copy_tree(std::path::Path::new(source), &layer).is_ok()
                    {
                        (layer, false)
                    } else {
                        (PathBuf::from(source), true)
                    };
                    extra_mounts.push(sandbox::Mount {
                        source,
                        target: inside.clone(),
                        read_only,
                    });
                } else if argv.first() == Some(inside) {
                    argv[0] = source.clone();
                }
            }
        }
        // The image's own directories, each container's (under any volume mounted there).
        let mut image_dirs = Vec::new();
        if self.runtime.isolates()
            && let Some(entry) = container["image"].as_str().and_then(|i| self.image(i))
        {
            for dir in &entry.dirs {
                let source = self
                    .dir
                    .join("image-dirs")
                    .join(&name)
                    .join(dir.trim_matches('/').replace('/', "_"));
                if std::fs::create_dir_all(&source).is_ok() {
                    image_dirs.push(sandbox::Mount {
                        source,
                        target: dir.clone(),
                        read_only: false,
                    });
                }
            }
        }
        // The pod's name files over the machine's, unless the container mounts its own
        // there (the kubelet then leaves its `/etc/hosts` alone).
        if self.runtime.isolates() {
            let own: Vec<&str> = container["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["mountPath"].as_str())
                .map(|p| p.trim_end_matches('/'))
                .collect();
            for (file, target) in [
                ("etc-hosts", "/etc/hosts"),
                ("resolv.conf", "/etc/resolv.conf"),
            ] {
                let source = self.dir.join(file);
                if source.is_file() && !own.contains(&target) {
                    extra_mounts.push(sandbox::Mount {
                        source,
                        target: target.to_owned(),
                        read_only: false,
                    });
                }
            }
        }
        let pod_spec = serde_json::to_value(pod.spec.as_ref()).unwrap_or(Value::Null);
        let sysctls = crate::security::sysctls(&pod_spec)
            .map_err(|name| format!("forbidden sysctl: {name:?} not allowlisted"))?;
        // The termination message file (`terminationMessagePath`), fresh for each run and
        // writable by any user the container runs as.
        let termination = self.termination_file(container, &name);
        if let Some((source, target)) = &termination {
            extra_mounts.push(sandbox::Mount {
                source: source.clone(),
                target: target.clone(),
                read_only: false,
            });
        }
        let launch = Launch {
            argv,
            env: env.clone(),
            working_dir: container["workingDir"]
                .as_str()
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .or_else(|| {
                    container["image"]
                        .as_str()
                        .and_then(|i| self.image(i))
                        .and_then(|entry| entry.workdir.clone())
                }),
            root: self.dir.join("root").join(&name),
            mounts: image_dirs
                .into_iter()
                .chain(self.mounts(container, &env))
                .chain(extra_mounts)
                .collect(),
            cgroups: cgroups.clone(),
            hostname: host_name(&pod),
            hide: vec![self.agent.config.data_dir.clone()],
            stdin: container["stdin"] == true,
            netns: self.netns.clone(),
            security: Some(self.security(container)),
            sysctls,
        };
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .await
            .map_err(|e| format!("log {}: {e}", log.display()))?;
        let file = Arc::new(tokio::sync::Mutex::new(file));
        let mut child = self.runtime.start(&launch)?;
        let pid = child.id().unwrap_or(0);
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
        let sandbox_pid = self.runtime.namespaces_of(pid).await;
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
                security: launch.security.clone(),
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
        let hooked = self.post_start(container, sandbox_pid, &env).await;
        if let Err(error) = &hooked {
            tracing::info!(container = %name, %error, "postStart hook failed; stopping");
            self.event(
                Some(&name),
                true,
                "FailedPostStartHook",
                "PostStartHook failed",
            )
            .await;
            let grace = pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(30);
            let deadline =
                Instant::now() + Duration::from_secs(u64::try_from(grace.max(0)).unwrap_or(30));
            self.terminate(container, &mut child, pid, sandbox_pid, &env, deadline)
                .await;
        }
        let has_startup = container.get("startupProbe").is_some_and(Value::is_object);
        let has_readiness = container
            .get("readinessProbe")
            .is_some_and(Value::is_object);
        let hook_failed = hooked.is_err();
        self.update(&name, |s| {
            if hook_failed {
                return;
            }
            s.state = ContainerState::Running {
                started_at: started_text.clone(),
            };
            s.started = !has_startup;
            s.ready =
                !matches!(kind, Kind::Init | Kind::Ephemeral) && !has_startup && !has_readiness;
            s.container_id = format!("plinth://{uid}-{name}-{run}");
        });
        let (kill_tx, mut kill_rx) = tokio::sync::mpsc::channel::<String>(1);
        let probes: Vec<_> = ["startupProbe", "readinessProbe", "livenessProbe"]
            .into_iter()
            .filter(|p| !hook_failed && container.get(*p).is_some_and(Value::is_object))
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
        let mut stop = self.phase.subscribe();
        let stopped = async {
            let _ = stop.wait_for(Phase::is_terminating).await;
        };
        let status = tokio::select! {
            status = child.wait() => status,
            () = stopped => {
                let deadline = self.phase.borrow().deadline().unwrap_or_else(Instant::now);
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
        let message = match hooked {
            Err(error) => format!("PostStartHook failed: {error}"),
            Ok(()) => termination_message(container, termination.as_ref(), code, log),
        };
        Ok(Exit {
            code,
            reason: reason.to_owned(),
            message,
            started: started_text,
        })
    }

    /// The host file shown at the container's `terminationMessagePath` (default
    /// `/dev/termination-log`) and that path; none when the runtime cannot show files.
    fn termination_file(&self, container: &Value, name: &str) -> Option<(PathBuf, String)> {
        use std::os::unix::fs::PermissionsExt;
        if !self.runtime.isolates() {
            return None;
        }
        let target = container["terminationMessagePath"]
            .as_str()
            .filter(|p| p.starts_with('/'))
            .unwrap_or("/dev/termination-log")
            .to_owned();
        let source = self.dir.join("termination").join(name);
        std::fs::create_dir_all(source.parent()?).ok()?;
        std::fs::write(&source, b"").ok()?;
        std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o666)).ok()?;
        Some((source, target))
    }

    /// Who the container runs as and what it may do: its and its pod's `securityContext`.
    pub(super) fn security(&self, container: &Value) -> crate::security::Security {
        let pod = self.current();
        let spec = serde_json::to_value(pod.spec.as_ref()).unwrap_or(Value::Null);
        crate::security::Security::of(&spec, container)
    }

    /// Runs the container's `postStart` hook, if it has one, as the kubelet does: after the
    /// container started, before it is reported running; a failure is the container's
    /// (`FailedPostStartHook`), which is then stopped. Gives up when the pod stops.
    async fn post_start(
        &self,
        container: &Value,
        sandbox_pid: Option<u32>,
        env: &[(String, String)],
    ) -> Result<(), String> {
        // No bound but the pod's end: the kubelet waits for a hook as long as it takes.
        let limit = Duration::from_secs(u64::from(u32::MAX));
        let mut stop = self.phase.subscribe();
        tokio::select! {
            outcome = self.hook("postStart", container, sandbox_pid, env, limit) => outcome,
            _ = stop.wait_for(Phase::is_terminating) => Ok(()),
        }
    }

    /// Runs the container's lifecycle hook `which` (`postStart`, `preStop`) within `limit`
    /// in the container, if it has one.
    async fn hook(
        &self,
        which: &str,
        container: &Value,
        sandbox_pid: Option<u32>,
        env: &[(String, String)],
        limit: Duration,
    ) -> Result<(), String> {
        let Some(hook) = container
            .get("lifecycle")
            .and_then(|l| l.get(which))
            .filter(|h| h.is_object())
        else {
            return Ok(());
        };
        let clients = self.clients(container, env);
        let security = self.security(container);
        let target = probes::Target {
            pod_ip: &self.ip,
            container,
            sandbox_pid,
            env,
            clients: &clients,
            security: Some(&security),
        };
        run_hook(hook, &target, limit).await
    }

    /// Stops a container by `deadline`: its `preStop` hook, `SIGTERM`, then `SIGKILL`.
    pub(super) async fn terminate(
        &self,
        container: &Value,
        child: &mut tokio::process::Child,
        pid: u32,
        sandbox_pid: Option<u32>,
        env: &[(String, String)],
        deadline: Instant,
    ) {
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = self
            .hook("preStop", container, sandbox_pid, env, left)
            .await;
        let name = container["name"].as_str().unwrap_or("");
        self.event(
            Some(name),
            false,
            "Killing",
            &format!("Stopping container {name}"),
        )
        .await;
        self.runtime.signal(pid, Signal::SIGTERM);
        let left = deadline.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, child.wait()).await.is_err() {
            self.runtime.signal(pid, Signal::SIGKILL);
        }
    }
}
