//! The node agent: registers its Node, heartbeats its Lease, and runs the Pods bound to it
//! as local processes — images mapped to executables, volumes as directories, each container
//! in its own mount and PID namespace where the machine allows, probes, restarts with
//! kube's back-off, graceful termination, per-container logs, exec and attach served to the
//! API server; each pod in a network namespace of its own where the machine allows (else
//! sharing its network), a service proxy (nftables rules or userspace) and cluster DNS.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod addresses;
mod agent;
mod authn;
mod clock;
mod dns;
mod events;
mod exec;
mod host_ports;
pub mod images;
mod kubelet;
mod logs;
mod mirror;
mod netns;
mod network;
mod node;
mod pods;
mod policy;
mod probes;
mod proxy;
pub mod sandbox;
pub mod security;
mod server;
mod service_rules;
mod spdy;
mod spdy_exec;
mod stats;
mod volumes;

use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;

pub use agent::{AgentError, Config, PolicyClient};
pub use images::ImageMap;
pub use network::Ranges;

use agent::Agent;

/// The kubelet's port: the agent's when it is free (clients that dial a kubelet find it).
const KUBELET_PORT: u16 = 10250;

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
    // Without a port of its own, the agent takes the kubelet's (10250) when it is free.
    let kubelet = std::net::SocketAddr::new(config.listen.ip(), KUBELET_PORT);
    let listener = match config.listen.port() {
        0 => match tokio::net::TcpListener::bind(kubelet).await {
            Ok(listener) => Ok(listener),
            Err(_) => tokio::net::TcpListener::bind(config.listen).await,
        },
        _ => tokio::net::TcpListener::bind(config.listen).await,
    }
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
        tokens: agent::Tokens::default(),
        ips: std::sync::Mutex::new(addresses::Addresses::default()),
        network: std::sync::OnceLock::new(),
        host_ports: host_ports::HostPorts::default(),
    });
    let tls = server::tls(&agent.config.name, &root_certs).map_err(AgentError::Server)?;
    tokio::spawn(server::serve(
        agent.clone(),
        listener,
        tls.clone(),
        stopping.clone(),
    ));
    agent.proxy.set_node(&agent.config.name);
    let pod_cidr = node::register(&agent, port).await?;
    // Devices, namespaces and rules are named after the node and its data directory, so a
    // restart finds what a killed agent left.
    let names = plinth_net::host::Names::of(&format!(
        "{}:{}",
        agent.config.name,
        agent.config.data_dir.display()
    ));
    let mode = network::start(names, &pod_cidr, agent.config.ranges.as_ref())
        .await
        .map_err(AgentError::Network)?;
    let private = mode.private().cloned();
    let _ = agent.network.set(mode);
    // A kubelet answers at its node's addresses: the first InternalIP of a node whose pods
    // have networks of their own is its gateway, which kube-apiserver dials for logs and exec.
    if let Some(private) = &private {
        match tokio::net::TcpListener::bind((private.gateway, port)).await {
            Ok(listener) => {
                tokio::spawn(server::serve(
                    agent.clone(),
                    listener,
                    tls,
                    stopping.clone(),
                ));
            }
            Err(e) => {
                tracing::warn!(address = %private.gateway, port, error = %e, "the agent's server is not reachable at the node's gateway");
            }
        }
    }
    // The node says how its pods are networked before it runs any.
    if let Err(e) = node::report(&agent, port).await {
        tracing::warn!(error = %e, "node status not reported");
    }
    tokio::spawn(node::heartbeat(agent.clone(), port, stopping.clone()));
    let mut reverse_ranges = Vec::new();
    let dns_at = match &private {
        Some(private) => {
            agent.proxy.set_gateway(private.gateway);
            agent.host_ports.set_node_address(private.gateway);
            reverse_ranges = vec![private.ranges.pods, private.ranges.services];
            Some(std::net::IpAddr::V4(private.gateway))
        }
        None => None,
    };
    let rules_done = private.clone().map(|private| {
        let policies = Arc::new(policy::Policies::default());
        let client = match &agent.config.policy_client {
            Some(policy) => policy.0.clone(),
            None => agent.client.clone(),
        };
        let following = tokio::spawn(policy::run(policies.clone(), client, stopping.clone()));
        let writing = tokio::spawn(service_rules::run(
            agent.proxy.clone(),
            policies,
            private,
            stopping.clone(),
        ));
        (following, writing)
    });
    let dns_done = tokio::spawn(dns::run(
        agent.proxy.clone(),
        dns_at,
        reverse_ranges,
        stopping.clone(),
    ));
    let proxy_done = tokio::spawn(proxy::run(
        agent.proxy.clone(),
        agent.client.clone(),
        stopping.clone(),
    ));
    let sampler = agent.clone();
    tokio::spawn(stats::run(
        Arc::new(move || sampler.stats.sample(sampler.pods.processes())),
        stopping.clone(),
    ));
    let pods_done = tokio::spawn(pods::run(agent.clone(), stopping.clone()));
    let _ = stopping.wait_for(|s| *s).await;
    let _ = pods_done.await;
    let _ = proxy_done.await;
    let _ = dns_done.await;
    if let Some((following, writing)) = rules_done {
        let _ = following.await;
        let _ = writing.await;
    }
    // Every pod has stopped: the node's devices, namespaces and rules go.
    if let Some(private) = private {
        private.stop().await;
    }
    Ok(())
}
