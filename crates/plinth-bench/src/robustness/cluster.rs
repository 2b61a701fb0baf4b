//! The system under test and the faults done to it: one `plinth serve` on its embedded store,
//! or several on a three-member etcd, all on loopback; servers and members SIGKILLed and
//! restarted, or paused (SIGSTOP) and resumed — each by its own PID.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use plinth_store_etcd::testing::EtcdCluster;

use crate::common::Error;

/// The files that make a server one of the control plane.
const CREDENTIALS: [&str; 4] = ["ca.crt", "ca.key", "admin.token", "sa.key"];

/// What a fault does, and to what.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum FaultKind {
    /// SIGKILL a server, start it again on its data directory.
    KillServer,
    /// SIGSTOP a server for a while, then SIGCONT.
    PauseServer,
    /// SIGKILL an etcd member, start it again.
    KillMember,
    /// SIGSTOP an etcd member for a while, then SIGCONT.
    PauseMember,
}

impl FaultKind {
    pub(crate) fn parse(name: &str) -> Option<FaultKind> {
        Some(match name {
            "kill-server" => FaultKind::KillServer,
            "pause-server" => FaultKind::PauseServer,
            "kill-member" => FaultKind::KillMember,
            "pause-member" => FaultKind::PauseMember,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            FaultKind::KillServer => "SIGKILL a server, restart it",
            FaultKind::PauseServer => "SIGSTOP a server, SIGCONT it",
            FaultKind::KillMember => "SIGKILL an etcd member, restart it",
            FaultKind::PauseMember => "SIGSTOP an etcd member, SIGCONT it",
        }
    }
}

/// One `plinth serve`: its process (while it runs), where it listens and keeps its data.
struct Server {
    child: Option<Child>,
    dir: tempfile::TempDir,
    listen: String,
    kubeconfig: PathBuf,
}

/// The servers, and the etcd members behind them (none: the embedded store).
pub(crate) struct Cluster {
    binary: PathBuf,
    servers: Vec<Server>,
    etcd: Option<EtcdCluster>,
}

fn free_port() -> Result<u16, Error> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn signal(pid: u32, signal: &str) -> Result<(), Error> {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill {signal} {pid} failed").into())
    }
}

impl Server {
    /// Starts (or restarts) the server; returns once it has written its kubeconfig.
    fn spawn(&mut self, binary: &Path, etcd: Option<&str>) -> Result<(), Error> {
        let mut command = Command::new(binary);
        command
            .args([
                "serve",
                "--no-node",
                "--compaction-interval",
                "0s",
                "--listen",
                &self.listen,
                "--data-dir",
            ])
            .arg(self.dir.path());
        if let Some(etcd) = etcd {
            command.args(["--etcd-servers", etcd]);
        }
        let mut child = command
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            BufReader::new(stdout).read_line(&mut line)?;
        }
        self.child = Some(child);
        if line.trim().is_empty() {
            return Err("the server exited before writing its kubeconfig".into());
        }
        self.kubeconfig = PathBuf::from(line.trim());
        Ok(())
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            let _ = signal(pid, "-CONT");
        }
        self.kill();
    }
}

impl Cluster {
    /// `servers` servers on the embedded store (one) or on a new three-member etcd.
    pub(crate) async fn start(
        binary: &Path,
        servers: usize,
        on_etcd: bool,
    ) -> Result<Cluster, Error> {
        // Ports are picked free and bound a moment later: another program on the machine
        // can take one in between, so a start that fails is tried again on fresh ports.
        let mut etcd = None;
        for attempt in 1..=3 {
            if !on_etcd {
                break;
            }
            match EtcdCluster::start(3).await {
                Ok(cluster) => etcd = Some(cluster),
                Err(e) if attempt == 3 => return Err(e.into()),
                Err(e) => eprintln!("etcd did not start ({e}); trying again"),
            }
            if etcd.is_some() {
                break;
            }
        }
        let mut cluster = Cluster {
            binary: binary.to_owned(),
            servers: Vec::new(),
            etcd,
        };
        let count = if on_etcd { servers.max(1) } else { 1 };
        for n in 0..count {
            let mut server = Server {
                child: None,
                dir: tempfile::Builder::new()
                    .prefix("plinth-robustness-")
                    .tempdir()?,
                listen: format!("127.0.0.1:{}", free_port()?),
                kubeconfig: PathBuf::new(),
            };
            if n > 0 {
                for file in CREDENTIALS {
                    std::fs::copy(
                        cluster.servers[0].dir.path().join(file),
                        server.dir.path().join(file),
                    )?;
                }
            }
            let mut attempt = 1;
            while let Err(e) = server.spawn(binary, cluster.endpoints().as_deref()) {
                server.kill();
                if attempt == 3 {
                    return Err(e);
                }
                eprintln!("server {n} did not start ({e}); trying again on another port");
                server.listen = format!("127.0.0.1:{}", free_port()?);
                attempt += 1;
            }
            cluster.servers.push(server);
        }
        Ok(cluster)
    }

    fn endpoints(&self) -> Option<String> {
        self.etcd.as_ref().map(EtcdCluster::endpoints_flag)
    }

    /// How many servers; how many etcd members.
    pub(crate) fn size(&self) -> (usize, usize) {
        (
            self.servers.len(),
            self.etcd.as_ref().map_or(0, |e| e.members.len()),
        )
    }

    /// A client of server `n`.
    pub(crate) async fn client(&self, n: usize) -> Result<Client, Error> {
        let server = &self.servers[n % self.servers.len()];
        let kubeconfig = Kubeconfig::read_from(&server.kubeconfig)?;
        let config =
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }

    /// Does `kind` to server or member `target` (modulo their count), holding a pause for
    /// `pause`; returns once the fault is over (the process restarted or resumed).
    pub(crate) async fn inject(
        &mut self,
        kind: FaultKind,
        target: usize,
        pause: Duration,
    ) -> Result<(), Error> {
        let endpoints = self.endpoints();
        match kind {
            FaultKind::KillServer => {
                let n = target % self.servers.len();
                self.servers[n].kill();
                let binary = self.binary.clone();
                // Its clients know its address: it comes back on the same port.
                let mut attempt = 0;
                loop {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    attempt += 1;
                    match self.servers[n].spawn(&binary, endpoints.as_deref()) {
                        Ok(()) => break,
                        Err(e) if attempt == 10 => return Err(e),
                        Err(_) => self.servers[n].kill(),
                    }
                }
            }
            FaultKind::PauseServer => {
                let n = target % self.servers.len();
                let pid = self.servers[n].pid().ok_or("a server is not running")?;
                signal(pid, "-STOP")?;
                tokio::time::sleep(pause).await;
                signal(pid, "-CONT")?;
            }
            FaultKind::KillMember | FaultKind::PauseMember => {
                let etcd = self.etcd.as_mut().ok_or("no etcd to fault")?;
                let n = target % etcd.members.len();
                let member = &mut etcd.members[n];
                if kind == FaultKind::KillMember {
                    member.kill();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    member.respawn()?;
                } else {
                    let pid = member.pid().ok_or("an etcd member is not running")?;
                    signal(pid, "-STOP")?;
                    tokio::time::sleep(pause).await;
                    signal(pid, "-CONT")?;
                }
            }
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(etcd) = &self.etcd {
            for pid in etcd.members.iter().filter_map(|m| m.pid()) {
                let _ = signal(pid, "-CONT");
            }
        }
    }
}
