//! The system under test and the faults done to it: one `plinth serve` on its embedded store,
//! or several on a three-member etcd — on loopback, or (for partitions) each server and member
//! in a network namespace of its own; servers and members SIGKILLed and restarted, paused
//! (SIGSTOP) and resumed — each by its own PID —, or cut off the network and joined again.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use plinth_store_etcd::testing::{EtcdCluster, etcd_binary, etcdctl_binary};

use super::net::{Host, Network};
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
    /// Cut a server off from etcd for a while (its clients still reach it).
    PartitionServer,
    /// SIGKILL an etcd member, start it again.
    KillMember,
    /// SIGSTOP an etcd member for a while, then SIGCONT.
    PauseMember,
    /// Cut an etcd member off from everyone for a while.
    PartitionMember,
}

impl FaultKind {
    pub(crate) fn parse(name: &str) -> Option<FaultKind> {
        Some(match name {
            "kill-server" => FaultKind::KillServer,
            "pause-server" => FaultKind::PauseServer,
            "partition-server" => FaultKind::PartitionServer,
            "kill-member" => FaultKind::KillMember,
            "pause-member" => FaultKind::PauseMember,
            "partition-member" => FaultKind::PartitionMember,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            FaultKind::KillServer => "SIGKILL a server, restart it",
            FaultKind::PauseServer => "SIGSTOP a server, SIGCONT it",
            FaultKind::PartitionServer => "cut a server off from etcd, join it again",
            FaultKind::KillMember => "SIGKILL an etcd member, restart it",
            FaultKind::PauseMember => "SIGSTOP an etcd member, SIGCONT it",
            FaultKind::PartitionMember => "cut an etcd member off, join it again",
        }
    }

    /// Whether the fault is done to a server (else to an etcd member).
    pub(crate) fn to_server(self) -> bool {
        matches!(
            self,
            FaultKind::KillServer | FaultKind::PauseServer | FaultKind::PartitionServer
        )
    }

    /// Whether the fault needs the namespaced network.
    pub(crate) fn partitions(self) -> bool {
        matches!(
            self,
            FaultKind::PartitionServer | FaultKind::PartitionMember
        )
    }
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

/// A command, run inside `netns` when there is one.
fn command(netns: Option<&str>, program: &Path) -> Command {
    match netns {
        Some(netns) => {
            let mut command = Command::new("ip");
            command.args(["netns", "exec", netns]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// A process this run started, stopped by its PID (resumed first if paused).
struct Process(Option<Child>);

impl Process {
    fn pid(&self) -> Option<u32> {
        self.0.as_ref().map(Child::id)
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = signal(child.id(), "-CONT");
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One `plinth serve`: its process (while it runs), where it listens and keeps its data.
struct Server {
    process: Process,
    dir: tempfile::TempDir,
    listen: String,
    netns: Option<String>,
    kubeconfig: PathBuf,
}

impl Server {
    /// Starts (or restarts) the server; returns once it has written its kubeconfig.
    fn spawn(&mut self, binary: &Path, etcd: Option<&str>) -> Result<(), Error> {
        let mut command = command(self.netns.as_deref(), binary);
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
        self.process = Process(Some(child));
        if line.trim().is_empty() {
            return Err("the server exited before writing its kubeconfig".into());
        }
        self.kubeconfig = PathBuf::from(line.trim());
        Ok(())
    }
}

/// An etcd member in a namespace of its own.
struct Member {
    process: Process,
    data: tempfile::TempDir,
    name: String,
    host: Host,
    cluster: String,
}

impl Member {
    fn url(&self, port: u16) -> String {
        format!("http://{}:{port}", self.host.etcd_ip)
    }

    fn spawn(&mut self) -> Result<(), Error> {
        let log = std::fs::File::create(self.data.path().join("etcd.log"))?;
        let child = command(Some(&self.host.netns), &etcd_binary())
            .arg(format!("--name={}", self.name))
            .arg(format!(
                "--data-dir={}",
                self.data.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={}", self.url(2379)))
            .arg(format!("--advertise-client-urls={}", self.url(2379)))
            .arg(format!("--listen-peer-urls={}", self.url(2380)))
            .arg(format!("--initial-advertise-peer-urls={}", self.url(2380)))
            .arg(format!("--initial-cluster={}", self.cluster))
            .arg("--log-level=error")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.process = Process(Some(child));
        Ok(())
    }

    /// Whether the member answers with a quorum behind it.
    fn healthy(&self) -> bool {
        command(Some(&self.host.netns), &etcdctl_binary())
            .args(["--endpoints", &self.url(2379), "endpoint", "health"])
            .args(["--command-timeout=2s"])
            .env("ETCDCTL_API", "3")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

/// Where the etcd members are, if any.
enum Etcd {
    /// The embedded store: no etcd.
    None,
    /// Three members on loopback.
    Loopback(EtcdCluster),
    /// Three members in namespaces (the members first: they stop before the network goes).
    Namespaced(Vec<Member>, Network),
}

/// The servers, and the etcd members behind them.
pub(crate) struct Cluster {
    binary: PathBuf,
    servers: Vec<Server>,
    etcd: Etcd,
}

impl Cluster {
    /// `servers` servers on the embedded store (one) or on a new three-member etcd; with
    /// `namespaced`, every server and member in a network namespace of its own.
    pub(crate) async fn start(
        binary: &Path,
        servers: usize,
        on_etcd: bool,
        namespaced: bool,
    ) -> Result<Cluster, Error> {
        let count = if on_etcd { servers.max(1) } else { 1 };
        let etcd = match (on_etcd, namespaced) {
            (false, _) => Etcd::None,
            (true, false) => Etcd::Loopback(loopback_etcd().await?),
            (true, true) => {
                let network = Network::make(3, count)?;
                let members = namespaced_etcd(&network).await?;
                Etcd::Namespaced(members, network)
            }
        };
        let mut cluster = Cluster {
            binary: binary.to_owned(),
            servers: Vec::new(),
            etcd,
        };
        for n in 0..count {
            let netns = match &cluster.etcd {
                Etcd::Namespaced(_, network) => Some(network.servers[n].clone()),
                _ => None,
            };
            let listen = |netns: &Option<Host>| -> Result<String, Error> {
                Ok(match netns.as_ref().and_then(|h| h.client_ip) {
                    Some(ip) => format!("{ip}:6443"),
                    None => format!("127.0.0.1:{}", free_port()?),
                })
            };
            let mut server = Server {
                process: Process(None),
                dir: tempfile::Builder::new()
                    .prefix("plinth-robustness-")
                    .tempdir()?,
                listen: listen(&netns)?,
                netns: netns.as_ref().map(|h| h.netns.clone()),
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
            // A port picked free can be taken before the server binds it: then another.
            let mut attempt = 1;
            while let Err(e) = server.spawn(binary, cluster.endpoints().as_deref()) {
                server.process.kill();
                if attempt == 3 {
                    return Err(e);
                }
                eprintln!("server {n} did not start ({e}); trying again");
                server.listen = listen(&netns)?;
                attempt += 1;
            }
            cluster.servers.push(server);
        }
        Ok(cluster)
    }

    fn endpoints(&self) -> Option<String> {
        match &self.etcd {
            Etcd::None => None,
            Etcd::Loopback(etcd) => Some(etcd.endpoints_flag()),
            Etcd::Namespaced(members, _) => Some(
                members
                    .iter()
                    .map(|m| m.url(2379))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        }
    }

    /// How many servers; how many etcd members.
    pub(crate) fn size(&self) -> (usize, usize) {
        let members = match &self.etcd {
            Etcd::None => 0,
            Etcd::Loopback(etcd) => etcd.members.len(),
            Etcd::Namespaced(members, _) => members.len(),
        };
        (self.servers.len(), members)
    }

    /// A client of server `n`.
    pub(crate) async fn client(&self, n: usize) -> Result<Client, Error> {
        let server = &self.servers[n % self.servers.len()];
        let kubeconfig = Kubeconfig::read_from(&server.kubeconfig)?;
        let config =
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }

    /// Does `kind` to server or member `target` (modulo their count), holding a pause or a
    /// partition for `hold`; returns once the fault is over (the process restarted or resumed,
    /// the link restored).
    pub(crate) async fn inject(
        &mut self,
        kind: FaultKind,
        target: usize,
        hold: Duration,
    ) -> Result<(), Error> {
        let endpoints = self.endpoints();
        if kind.to_server() {
            let n = target % self.servers.len();
            match kind {
                FaultKind::KillServer => {
                    self.servers[n].process.kill();
                    let binary = self.binary.clone();
                    // Its clients know its address: it comes back on the same one.
                    let mut attempt = 0;
                    loop {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        attempt += 1;
                        match self.servers[n].spawn(&binary, endpoints.as_deref()) {
                            Ok(()) => break,
                            Err(e) if attempt == 10 => return Err(e),
                            Err(_) => self.servers[n].process.kill(),
                        }
                    }
                }
                FaultKind::PauseServer => {
                    let pid = self.servers[n]
                        .process
                        .pid()
                        .ok_or("a server is not running")?;
                    pause(pid, hold).await?;
                }
                _ => {
                    let Etcd::Namespaced(_, network) = &self.etcd else {
                        return Err("partitions need the namespaced network".into());
                    };
                    partition(&network.servers[n], hold).await?;
                }
            }
            return Ok(());
        }
        match &mut self.etcd {
            Etcd::None => Err("no etcd to fault".into()),
            Etcd::Loopback(etcd) => {
                let count = etcd.members.len();
                let member = &mut etcd.members[target % count];
                match kind {
                    FaultKind::KillMember => {
                        member.kill();
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        member.respawn()?;
                    }
                    FaultKind::PauseMember => {
                        pause(member.pid().ok_or("an etcd member is not running")?, hold).await?;
                    }
                    _ => return Err("partitions need the namespaced network".into()),
                }
                Ok(())
            }
            Etcd::Namespaced(members, _) => {
                let count = members.len();
                let member = &mut members[target % count];
                match kind {
                    FaultKind::KillMember => {
                        member.process.kill();
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        member.spawn()?;
                    }
                    FaultKind::PauseMember => {
                        pause(
                            member
                                .process
                                .pid()
                                .ok_or("an etcd member is not running")?,
                            hold,
                        )
                        .await?;
                    }
                    _ => partition(&member.host, hold).await?,
                }
                Ok(())
            }
        }
    }
}

async fn pause(pid: u32, hold: Duration) -> Result<(), Error> {
    signal(pid, "-STOP")?;
    tokio::time::sleep(hold).await;
    signal(pid, "-CONT")
}

async fn partition(host: &Host, hold: Duration) -> Result<(), Error> {
    Network::link(host, false)?;
    tokio::time::sleep(hold).await;
    Network::link(host, true)
}

/// Three members on loopback; a start that fails (a port taken in between) is tried again.
async fn loopback_etcd() -> Result<EtcdCluster, Error> {
    let mut attempt = 1;
    loop {
        match EtcdCluster::start(3).await {
            Ok(cluster) => return Ok(cluster),
            Err(e) if attempt == 3 => return Err(e.into()),
            Err(e) => eprintln!("etcd did not start ({e}); trying again"),
        }
        attempt += 1;
    }
}

/// A member in each of the network's member namespaces, started together, healthy.
async fn namespaced_etcd(network: &Network) -> Result<Vec<Member>, Error> {
    let cluster = network
        .members
        .iter()
        .enumerate()
        .map(|(i, h)| format!("member-{i}=http://{}:2380", h.etcd_ip))
        .collect::<Vec<_>>()
        .join(",");
    let mut members = Vec::new();
    for (i, host) in network.members.iter().enumerate() {
        let mut member = Member {
            process: Process(None),
            data: tempfile::Builder::new().prefix("plinth-etcd-").tempdir()?,
            name: format!("member-{i}"),
            host: host.clone(),
            cluster: cluster.clone(),
        };
        member.spawn()?;
        members.push(member);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for member in &members {
        while !member.healthy() {
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(member.data.path().join("etcd.log"))
                    .unwrap_or_default();
                return Err(format!("{} did not become healthy: {log}", member.name).into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(members)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Etcd::Loopback(etcd) = &self.etcd {
            for pid in etcd.members.iter().filter_map(|m| m.pid()) {
                let _ = signal(pid, "-CONT");
            }
        }
    }
}
