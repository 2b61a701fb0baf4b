//! A throw-away etcd for tests and benchmarks: Debian's `etcd` binary on loopback, with a
//! temporary data directory and free ports.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use plinth_store::{StoreError, StoreResult};

use crate::EtcdStore;

/// A running etcd process. Killed (and its data removed) when dropped.
#[derive(Debug)]
pub struct EtcdProcess {
    child: Option<Child>,
    data: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    /// The member's name and the whole cluster's `name=peer-url` list.
    name: String,
    initial_cluster: String,
    /// `--quota-backend-bytes`.
    quota: u64,
}

/// The space quota members run with unless told otherwise (8 GiB, etcd's largest suggested).
const DEFAULT_QUOTA: u64 = 8 << 30;

/// `n` distinct free ports: each listener is held until all are picked, so no two are the
/// same (another process can still take one before etcd binds it: callers retry).
fn free_ports(n: usize) -> StoreResult<Vec<u16>> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(
            TcpListener::bind("127.0.0.1:0")
                .map_err(|e| StoreError::backend("find a free port", e))?,
        );
    }
    held.iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(|e| StoreError::backend("find a free port", e))
        })
        .collect()
}

/// Whether etcd failed because a port picked free was taken before it bound it.
fn lost_a_port(error: &StoreError) -> bool {
    error.to_string().contains("address already in use")
}

/// A fresh directory for a member's data (removed with it).
fn data_dir() -> StoreResult<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("plinth-etcd-")
        .tempdir()
        .map_err(|e| StoreError::backend("create etcd's data directory", e))
}

/// The etcdctl binary: `$PLINTH_ETCDCTL_BIN`, else `etcdctl` on PATH.
pub fn etcdctl_binary() -> PathBuf {
    std::env::var_os("PLINTH_ETCDCTL_BIN").map_or_else(|| PathBuf::from("etcdctl"), PathBuf::from)
}

/// The etcd binary: `$PLINTH_ETCD_BIN`, else `etcd` on PATH.
pub fn etcd_binary() -> PathBuf {
    std::env::var_os("PLINTH_ETCD_BIN").map_or_else(|| PathBuf::from("etcd"), PathBuf::from)
}

impl EtcdProcess {
    /// Starts etcd and waits until it answers.
    ///
    /// # Errors
    /// A backend error if the binary is missing or etcd does not become ready within 20 s.
    pub async fn start() -> StoreResult<Self> {
        Self::start_with_quota(DEFAULT_QUOTA).await
    }

    /// Starts etcd with a space quota of `quota` bytes (`--quota-backend-bytes`): past it,
    /// etcd raises its `NOSPACE` alarm and refuses writes until the alarm is disarmed.
    ///
    /// # Errors
    /// As [`EtcdProcess::start`].
    pub async fn start_with_quota(quota: u64) -> StoreResult<Self> {
        // A port picked free can be taken by another test before etcd binds it: then try
        // again on fresh ports, in a fresh directory.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let data = data_dir()?;
            let ports = free_ports(2)?;
            let (client_port, peer_port) = (ports[0], ports[1]);
            let mut process = Self {
                child: None,
                data,
                client_port,
                peer_port,
                name: "plinth-test".to_owned(),
                initial_cluster: format!("plinth-test=http://127.0.0.1:{peer_port}"),
                quota,
            };
            match process.launch().await {
                Ok(()) => return Ok(process),
                Err(e) if attempt < 5 && lost_a_port(&e) => {
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts etcd on a data directory `etcdctl snapshot restore` makes of `snapshot` (a file
    /// of etcd's snapshot API), and waits until it answers.
    ///
    /// # Errors
    /// A backend error if etcdctl refuses the snapshot or etcd does not start.
    pub async fn start_restored(snapshot: &Path) -> StoreResult<Self> {
        let data = data_dir()?;
        let ports = free_ports(2)?;
        let (client_port, peer_port) = (ports[0], ports[1]);
        let peer = format!("http://127.0.0.1:{peer_port}");
        let mut process = Self {
            child: None,
            data,
            client_port,
            peer_port,
            name: "plinth-test".to_owned(),
            initial_cluster: format!("plinth-test={peer}"),
            quota: DEFAULT_QUOTA,
        };
        let out = Command::new(etcdctl_binary())
            .env("ETCDCTL_API", "3")
            .arg("snapshot")
            .arg("restore")
            .arg(snapshot)
            .arg(format!(
                "--data-dir={}",
                process.data.path().join("data").display()
            ))
            .arg(format!("--name={}", process.name))
            .arg(format!("--initial-cluster={}", process.initial_cluster))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .output()
            .map_err(|e| {
                StoreError::backend(
                    "run etcdctl (install Debian's etcd-client, or set PLINTH_ETCDCTL_BIN)",
                    e,
                )
            })?;
        if !out.status.success() {
            return Err(StoreError::backend(
                "restore the snapshot",
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ));
        }
        process.launch().await?;
        Ok(process)
    }

    /// The client URL, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        self.data.path()
    }

    /// etcd's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A store on this etcd under `prefix`.
    ///
    /// # Errors
    /// As [`EtcdStore::connect`].
    pub async fn store(&self, prefix: &str) -> StoreResult<EtcdStore> {
        EtcdStore::connect(&[self.endpoint()], prefix).await
    }

    /// Kills etcd with SIGKILL — no chance to flush anything — and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same data directory and ports (after [`EtcdProcess::kill`]).
    ///
    /// # Errors
    /// As [`EtcdProcess::start`].
    pub async fn restart(&mut self) -> StoreResult<()> {
        self.kill();
        self.launch().await
    }

    async fn launch(&mut self) -> StoreResult<()> {
        self.spawn()?;
        self.wait_ready().await
    }

    /// Starts etcd again on the same data directory and ports without waiting for it to
    /// answer (a member of a cluster that lost its quorum answers only once enough members are
    /// back: start them all, then [`EtcdProcess::wait_ready`] each).
    ///
    /// # Errors
    /// A backend error if the binary cannot be started.
    pub fn respawn(&mut self) -> StoreResult<()> {
        self.kill();
        self.spawn()
    }

    fn spawn(&mut self) -> StoreResult<()> {
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.data.path().join("etcd.log"))
            .map_err(|e| StoreError::backend("create etcd's log", e))?;
        let stderr = log
            .try_clone()
            .map_err(|e| StoreError::backend("create etcd's log", e))?;
        let child = Command::new(etcd_binary())
            .arg(format!("--name={}", self.name))
            .arg(format!(
                "--data-dir={}",
                self.data.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={}", self.initial_cluster))
            // Room for 1.5 MiB objects plus their envelope, as kube-apiserver deployments configure.
            .arg("--max-request-bytes=10485760")
            .arg(format!("--quota-backend-bytes={}", self.quota))
            .arg("--log-level=error")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(|e| {
                StoreError::backend(
                    "start etcd (install Debian's etcd-server, or set PLINTH_ETCD_BIN)",
                    e,
                )
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits until this member answers reads (with quorum, for a member of a cluster).
    ///
    /// # Errors
    /// A backend error if etcd exits or does not answer within 20 s.
    pub async fn wait_ready(&mut self) -> StoreResult<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                let log =
                    std::fs::read_to_string(self.data.path().join("etcd.log")).unwrap_or_default();
                return Err(StoreError::backend(
                    "start etcd",
                    format!("etcd exited with {status}: {log}"),
                ));
            }
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), self.store("/")).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(StoreError::backend(
                    "start etcd",
                    "etcd did not become ready within 20 s",
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A throw-away etcd cluster of several members on loopback, each one an [`EtcdProcess`]
/// that can be killed and restarted on its own.
#[derive(Debug)]
pub struct EtcdCluster {
    /// The members, in the order of [`EtcdCluster::endpoints`].
    pub members: Vec<EtcdProcess>,
}

impl EtcdCluster {
    /// Starts `size` members as one new cluster and waits until each answers.
    ///
    /// # Errors
    /// A backend error if a member cannot start or the cluster does not form within 20 s.
    pub async fn start(size: usize) -> StoreResult<Self> {
        // As for one member: a port picked free can be taken before etcd binds it; then the
        // members started so far are killed (dropped) and the cluster starts again afresh.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::try_start(size).await {
                Err(e) if attempt < 5 && lost_a_port(&e) => continue,
                result => return result,
            }
        }
    }

    async fn try_start(size: usize) -> StoreResult<Self> {
        let picked = free_ports(2 * size)?;
        let ports: Vec<(u16, u16)> = picked.chunks(2).map(|p| (p[0], p[1])).collect();
        let initial_cluster = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("member-{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = Vec::with_capacity(size);
        for (i, (client_port, peer_port)) in ports.into_iter().enumerate() {
            let data = data_dir()?;
            members.push(EtcdProcess {
                child: None,
                data,
                client_port,
                peer_port,
                name: format!("member-{i}"),
                initial_cluster: initial_cluster.clone(),
                quota: DEFAULT_QUOTA,
            });
        }
        // Every member first: none answers before a quorum has formed.
        for member in &mut members {
            member.spawn()?;
        }
        for member in &mut members {
            member.wait_ready().await?;
        }
        Ok(Self { members })
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdProcess::endpoint).collect()
    }

    /// The client URLs joined with commas, as `--etcd-servers` takes them.
    pub fn endpoints_flag(&self) -> String {
        self.endpoints().join(",")
    }

    /// A store on every member under `prefix`.
    ///
    /// # Errors
    /// As [`EtcdStore::connect`].
    pub async fn store(&self, prefix: &str) -> StoreResult<EtcdStore> {
        EtcdStore::connect(&self.endpoints(), prefix).await
    }
}
