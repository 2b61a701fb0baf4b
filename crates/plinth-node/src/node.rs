//! The agent's Node: registered at start (labels, capacity, addresses, the agent's port),
//! its status and its Lease in `kube-node-lease` renewed every heartbeat, and the
//! `spec.podCIDR` the node IPAM controller gives it handed to the pod addresses.

use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::agent::{Agent, AgentError};
use crate::clock::{now, now_micros};

/// The version the Node reports (`kubectl get nodes` shows it).
pub(crate) const VERSION: &str = "v1.32.0";
const MANAGER: &str = "plinth-node";
const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The most pods a node takes (kubelet's `--max-pods` default).
pub(crate) const MAX_PODS: u32 = 110;

pub(crate) fn memory_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn os_image() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_owned())
        })
        .unwrap_or_else(|| "Linux".into())
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The ephemeral storage the node offers pods.
pub(crate) const EPHEMERAL_STORAGE: &str = "10Gi";

/// The Node's status as the agent reports it now.
fn status(agent: &Agent, port: u16) -> Value {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let resources = json!({
        "cpu": cpus.to_string(),
        "memory": format!("{}Ki", memory_kib()),
        "pods": MAX_PODS.to_string(),
        "ephemeral-storage": EPHEMERAL_STORAGE,
    });
    let now = plinth_core::meta::format_time(now());
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let mut conditions = vec![
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        ),
    ];
    // How pods are networked, once decided (kube's route controller and CNIs write this
    // condition first).
    if let Some(mode) = agent.network.get() {
        let (reason, message) = mode.condition();
        conditions.insert(
            0,
            condition("NetworkUnavailable", "False", reason, &message),
        );
    }
    // Its address on the pods' network first, where pods have networks of their own (pods
    // reach NodePorts and host ports there); the loopback one, where the agent serves.
    let mut addresses = Vec::new();
    if let Some(crate::network::Mode::Private(private)) = agent.network.get() {
        addresses.push(json!({"type": "InternalIP", "address": private.gateway.to_string()}));
    }
    addresses.push(json!({"type": "InternalIP", "address": "127.0.0.1"}));
    addresses.push(json!({"type": "Hostname", "address": agent.config.name}));
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": conditions,
        "addresses": addresses,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "nodeInfo": {
            "machineID": read_trimmed("/etc/machine-id"),
            "systemUUID": read_trimmed("/etc/machine-id"),
            "bootID": read_trimmed("/proc/sys/kernel/random/boot_id"),
            "kernelVersion": read_trimmed("/proc/sys/kernel/osrelease"),
            "osImage": os_image(),
            "containerRuntimeVersion": format!("plinth://{}", env!("CARGO_PKG_VERSION")),
            "kubeletVersion": VERSION,
            "kubeProxyVersion": VERSION,
            "operatingSystem": std::env::consts::OS,
            "architecture": arch(),
        },
    })
}

/// Creates the Node if it is missing, reports its status and waits for its `podCIDR`, which
/// it returns.
pub(crate) async fn register(agent: &Arc<Agent>, port: u16) -> Result<String, AgentError> {
    let nodes: Api<Node> = Api::all(agent.client.clone());
    let name = agent.config.name.clone();
    let fail = |e| AgentError::Register(name.clone(), e);
    if nodes.get_opt(&name).await.map_err(fail)?.is_none() {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": std::env::consts::OS,
                "kubernetes.io/arch": arch(),
                "beta.kubernetes.io/os": std::env::consts::OS,
                "beta.kubernetes.io/arch": arch(),
            }},
            "spec": {},
        }))
        .map_err(|e| fail(kube::Error::SerdeError(e)))?;
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(fail(e)),
        }
    }
    report(agent, port).await.map_err(fail)?;
    // Pod addresses come from the node's range.
    loop {
        let node = nodes.get(&name).await.map_err(fail)?;
        let cidr = node.spec.and_then(|s| s.pod_cidr).unwrap_or_default();
        if let Some(base) = base_of(&cidr) {
            if let Ok(mut ips) = agent.ips.lock() {
                ips.set_base(base);
            }
            return Ok(cidr);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The first three octets of a `/24` (`127.64.3.0/24`).
fn base_of(cidr: &str) -> Option<[u8; 3]> {
    let (ip, bits) = cidr.split_once('/')?;
    if bits != "24" {
        return None;
    }
    let ip: Ipv4Addr = ip.parse().ok()?;
    let o = ip.octets();
    Some([o[0], o[1], o[2]])
}

/// Writes the Node's status as the agent sees it now.
pub(crate) async fn report(agent: &Agent, port: u16) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(agent.client.clone());
    let mut status = status(agent, port);
    // A condition that keeps its status keeps its transition time.
    let stored = nodes
        .get_opt(&agent.config.name)
        .await?
        .and_then(|n| serde_json::to_value(n.status).ok())
        .unwrap_or(Value::Null);
    for condition in status["conditions"].as_array_mut().into_iter().flatten() {
        let before = stored["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == condition["type"]);
        if let Some(before) = before
            && before["status"] == condition["status"]
            && before["lastTransitionTime"].is_string()
        {
            condition["lastTransitionTime"] = before["lastTransitionTime"].clone();
        }
    }
    nodes
        .patch_status(
            &agent.config.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await?;
    Ok(())
}

async fn renew_lease(agent: &Agent) -> Result<(), kube::Error> {
    let leases: Api<Lease> = Api::namespaced(agent.client.clone(), LEASE_NAMESPACE);
    let name = &agent.config.name;
    let renew = plinth_core::meta::format_micro_time(now_micros());
    let nodes: Api<Node> = Api::all(agent.client.clone());
    let uid = nodes.get(name).await?.metadata.uid.unwrap_or_default();
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}
        ]},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew},
    });
    leases
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(lease),
        )
        .await?;
    Ok(())
}

/// Renews the Node's status and Lease until `stopping`.
pub(crate) async fn heartbeat(
    agent: Arc<Agent>,
    port: u16,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(agent.config.heartbeat);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        if let Err(e) = renew_lease(&agent).await {
            tracing::warn!(error = %e, "node lease not renewed");
        }
        if let Err(e) = report(&agent, port).await {
            tracing::warn!(error = %e, "node status not reported");
        }
    }
}
