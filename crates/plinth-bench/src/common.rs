//! What every benchmark shares: the client from a kubeconfig, this run's id, percentiles,
//! a namespace made if missing, a process's memory.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

/// A tag that keeps this run's object names apart from earlier runs' against the same server.
pub(crate) fn run_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| format!("{:x}", now_micros() % 0xff_ffff))
}

pub(crate) fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub(crate) async fn client(kubeconfig: Option<PathBuf>) -> Result<Client, Error> {
    Ok(Client::try_from(config(kubeconfig).await?)?)
}

pub(crate) async fn config(kubeconfig: Option<PathBuf>) -> Result<Config, Error> {
    Ok(match kubeconfig {
        Some(path) => {
            Config::from_custom_kubeconfig(
                Kubeconfig::read_from(path)?,
                &KubeConfigOptions::default(),
            )
            .await?
        }
        None => Config::infer().await?,
    })
}

/// Creates namespace `name` unless it exists.
pub(crate) async fn ensure_namespace(client: &Client, name: &str) -> Result<(), Error> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.into());
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Resident memory of `pid` in MiB: total, anonymous (heap: what the server itself holds) and
/// file-backed (mapped files such as a database's pages, which the kernel can drop).
pub(crate) fn rss_mib(pid: u32) -> Option<(f64, f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let kib: f64 = status
            .lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(kib / 1024.0)
    };
    Some((
        field("VmRSS:")?,
        field("RssAnon:").unwrap_or(0.0),
        field("RssFile:").unwrap_or(0.0) + field("RssShmem:").unwrap_or(0.0),
    ))
}

pub(crate) fn rss_text((total, anon, file): (f64, f64, f64)) -> String {
    format!("{total:.0} MiB ({anon:.0} MiB anonymous, {file:.0} MiB file-backed)")
}

/// A `plinth serve --no-node` a benchmark started on a data directory of its own (removed
/// when `dir` drops; the process is killed when `child` drops).
pub(crate) struct Served {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) child: tokio::process::Child,
    pub(crate) pid: u32,
    pub(crate) kubeconfig: PathBuf,
}

/// Starts `binary serve --no-node` (pods sharing the network, a port of its choosing) and
/// waits up to 60 s for its kubeconfig.
pub(crate) async fn serve(binary: &std::path::Path) -> Result<Served, Error> {
    let dir = tempfile::tempdir()?;
    let (child, pid, kubeconfig) = serve_in(binary, dir.path()).await?;
    Ok(Served {
        dir,
        child,
        pid,
        kubeconfig,
    })
}

/// As [`serve`], on the data directory `dir` (a server started again on what another left):
/// the process, its id and its kubeconfig (written afresh: the port is new).
pub(crate) async fn serve_in(
    binary: &std::path::Path,
    dir: &std::path::Path,
) -> Result<(tokio::process::Child, u32, PathBuf), Error> {
    let kubeconfig = dir.join("kubeconfig");
    if kubeconfig.exists() {
        std::fs::remove_file(&kubeconfig)?;
    }
    let child = tokio::process::Command::new(binary)
        .args(["serve", "--pod-network=shared", "--no-node", "--data-dir"])
        .arg(dir)
        .args(["--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("plinth exited at once")?;
    let started = std::time::Instant::now();
    while !kubeconfig.exists() {
        if started.elapsed() > Duration::from_secs(60) {
            return Err("plinth wrote no kubeconfig within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((child, pid, kubeconfig))
}
