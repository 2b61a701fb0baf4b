//! The agent's shared state — its configuration, its client, the tables its parts read and
//! write — and why it could not start. Every type here lives in a file that does not name the
//! agent, so that the parts that take an `Agent` depend on this file and nothing points back.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::events::Recorder;
use crate::images::ImageMap;
use crate::pods::Registry;
use crate::proxy::Proxy;
use crate::stats::Stats;

/// Tokens asked for, by pod and path, with when they are to be renewed (at 80 % of their
/// life, as the kubelet renews them).
pub(crate) type Tokens = std::sync::Mutex<HashMap<(String, String), (Vec<u8>, std::time::Instant)>>;

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
    /// The cluster's pod and Service ranges: needed where pods get namespaces of their own
    /// (a `podCIDR` outside loopback).
    pub ranges: Option<crate::network::Ranges>,
    /// The client NetworkPolicy's rules follow every pod, namespace and policy with: an
    /// identity allowed to list them all, which a node's is not (kube's Node authorizer);
    /// `None`: the agent's own client.
    pub policy_client: Option<PolicyClient>,
}

/// A client of its own for the agent's NetworkPolicy rules (see [`Config::policy_client`]).
#[derive(Clone)]
pub struct PolicyClient(pub kube::Client);

impl std::fmt::Debug for PolicyClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PolicyClient")
    }
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
            ranges: None,
            policy_client: None,
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
    /// The pods' network cannot be made.
    #[error("pod network: {0}")]
    Network(String),
}

/// What the parts of a running agent share.
pub(crate) struct Agent {
    pub(crate) config: Config,
    pub(crate) client: kube::Client,
    pub(crate) pods: Registry,
    /// The service proxy (and the Services containers learn of).
    pub(crate) proxy: Arc<Proxy>,
    /// Resource usage.
    pub(crate) stats: Stats,
    /// Events on the pods.
    pub(crate) events: Recorder,
    /// ServiceAccount tokens of the pods' volumes.
    pub(crate) tokens: Tokens,
    /// The node's `spec.podCIDR` base (`127.64.3.0` → its first three octets).
    pub(crate) ips: std::sync::Mutex<crate::addresses::Addresses>,
    /// How pods are networked, once the `podCIDR` is known.
    pub(crate) network: std::sync::OnceLock<crate::network::Mode>,
    /// The pods' host ports.
    pub(crate) host_ports: crate::host_ports::HostPorts,
}
