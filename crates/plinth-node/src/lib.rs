//! The node agent: registers its Node, heartbeats its Lease, and runs the Pods bound to it
//! as local processes — images mapped to executables, volumes as directories, each container
//! in its own mount and PID namespace where the machine allows, probes, restarts with
//! kube's back-off, graceful termination, per-container logs, exec and attach served to the
//! API server, and a service proxy for ClusterIPs.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod events;
mod exec;
pub mod images;
mod logs;
mod node;
mod pods;
mod probes;
mod proxy;
pub mod sandbox;
mod server;
mod spdy;
mod stats;
mod volumes;

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::Arc;

pub use images::ImageMap;

/// How an agent runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The Node's name.
    pub name: String,
    /// Where pods' directories, volumes and logs live.
    pub data_dir: PathBuf,
    /// Which executables images stand for.
    pub images: ImageMap,
    /// The executable that has the `sandbox` command (`plinth`); `None`: containers run as
    /// plain child processes, without namespaces.
    pub sandbox: Option<PathBuf>,
    /// The address the agent's server (logs) listens on; port 0 picks one.
    pub listen: std::net::SocketAddr,
    /// How often the Node's status and Lease are renewed.
    pub heartbeat: std::time::Duration,
}

impl Config {
    /// An agent named `name` keeping its files in `data_dir`, with the built-in image map,
    /// no sandbox, a server on a loopback port of its choosing and a 10 s heartbeat.
    pub fn new(name: impl Into<String>, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            data_dir: data_dir.into(),
            images: ImageMap::default(),
            sandbox: None,
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            heartbeat: std::time::Duration::from_secs(10),
        }
    }
}

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The data directory cannot be used.
    #[error("data directory {0}: {1}")]
    DataDir(PathBuf, std::io::Error),
    /// The agent's server could not start.
    #[error("agent server: {0}")]
    Server(String),
    /// The API server refused the Node.
    #[error("registering node {0}: {1}")]
    Register(String, kube::Error),
}

/// What the parts of a running agent share.
pub(crate) struct Agent {
    pub(crate) config: Config,
    pub(crate) client: kube::Client,
    pub(crate) pods: pods::Registry,
    /// The service proxy (and the Services containers learn of).
    pub(crate) proxy: Arc<proxy::Proxy>,
    /// Resource usage.
    pub(crate) stats: stats::Stats,
    /// Events on the pods.
    pub(crate) events: events::Recorder,
    /// ServiceAccount tokens of the pods' volumes.
    pub(crate) tokens: volumes::Tokens,
    /// The node's `spec.podCIDR` base (`127.64.3.0` → its first three octets).
    pub(crate) ips: std::sync::Mutex<node::Addresses>,
}

/// Runs an agent until `stopping` becomes true: it then stops every container it started
/// (as its node is going away) and returns.
///
/// # Errors
/// See [`AgentError`].
pub async fn run(
    config: Config,
    client: kube::Client,
    root_certs: Vec<Vec<u8>>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) -> Result<(), AgentError> {
    // The agent's files (pods' volumes, secrets among them, and logs) are its own.
    for dir in [config.data_dir.clone(), config.data_dir.join("pods")] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .and_then(|()| {
                std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            })
            .map_err(|e| AgentError::DataDir(dir.clone(), e))?;
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| AgentError::Server(format!("listen on {}: {e}", config.listen)))?;
    let port = listener
        .local_addr()
        .map_err(|e| AgentError::Server(e.to_string()))?
        .port();
    let agent = Arc::new(Agent {
        config,
        client,
        pods: pods::Registry::default(),
        proxy: Arc::new(proxy::Proxy::default()),
        stats: stats::Stats::default(),
        events: events::Recorder::default(),
        tokens: volumes::Tokens::default(),
        ips: std::sync::Mutex::new(node::Addresses::default()),
    });
    let tls = server::tls(&agent.config.name, &root_certs).map_err(AgentError::Server)?;
    tokio::spawn(server::serve(
        agent.clone(),
        listener,
        tls,
        stopping.clone(),
    ));
    node::register(&agent, port).await?;
    tokio::spawn(node::heartbeat(agent.clone(), port, stopping.clone()));
    let proxy_done = tokio::spawn(proxy::run(agent.clone(), stopping.clone()));
    tokio::spawn(stats::run(agent.clone(), stopping.clone()));
    let pods_done = tokio::spawn(pods::run(agent.clone(), stopping.clone()));
    let _ = stopping.wait_for(|s| *s).await;
    let _ = pods_done.await;
    let _ = proxy_done.await;
    Ok(())
}
