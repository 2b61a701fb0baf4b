//! The simulated Nodes: registered with their capacity, labels, taints and a `/24` of
//! `127.128.0.0/9` as `podCIDR`; their Leases renewed every heartbeat and their status
//! reported again when the node lifecycle controller judged them (or a minute passed).

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::config::{Config, LABEL, stopped};

const MANAGER: &str = "plinth-simnodes";
const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The most nodes: one `/24` each in `127.128.0.0/9`.
pub(crate) const MAX_NODES: usize = 128 * 256;
/// How often a node's status is reported when nothing asks sooner.
const REPORT_EVERY: Duration = Duration::from_secs(60);

/// Node `index`'s `/24`: its first three octets.
pub(crate) fn subnet(index: usize) -> [u8; 3] {
    let high = u8::try_from(128 + index / 256).unwrap_or(255);
    let low = u8::try_from(index % 256).unwrap_or(0);
    [127, high, low]
}

/// Node `index`'s own address (its subnet's `.1`).
pub(crate) fn address(index: usize) -> Ipv4Addr {
    let [a, b, c] = subnet(index);
    Ipv4Addr::new(a, b, c, 1)
}

fn now_text() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
    plinth_core::meta::format_time(seconds)
}

fn now_micro_text() -> String {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(0));
    plinth_core::meta::format_micro_time(micros)
}

/// `key=value:Effect` or `key:Effect` as a taint.
pub(crate) fn taint(text: &str) -> Result<Value, String> {
    let (key_value, effect) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("taint {text:?}: expected KEY[=VALUE]:EFFECT"))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!(
            "taint {text:?}: the effect must be NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    let (key, value) = key_value.split_once('=').unwrap_or((key_value, ""));
    if key.is_empty() {
        return Err(format!("taint {text:?}: the key is empty"));
    }
    let mut taint = json!({"key": key, "effect": effect});
    if !value.is_empty() {
        taint["value"] = json!(value);
    }
    Ok(taint)
}

fn status(config: &Config, index: usize, previous: Option<&Value>) -> Value {
    let now = now_text();
    let resources: serde_json::Map<String, Value> = config
        .capacity
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        // A condition that keeps its status keeps its transition time.
        let since = previous
            .and_then(|p| p["conditions"].as_array())
            .into_iter()
            .flatten()
            .find(|c| c["type"] == kind && c["status"] == status)
            .and_then(|c| c["lastTransitionTime"].as_str())
            .map_or_else(|| now.clone(), str::to_owned);
        json!({"type": kind, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": since})
    };
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status (simulated)"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": address(index).to_string()},
            {"type": "Hostname", "address": config.node_name(index)},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": format!("simulated-{index}"),
            "systemUUID": format!("simulated-{index}"),
            "bootID": format!("simulated-{index}"),
            "kernelVersion": "simulated",
            "osImage": "simulated",
            "containerRuntimeVersion": concat!("simulated://", env!("CARGO_PKG_VERSION")),
            "kubeletVersion": "v1.32.0",
            "kubeProxyVersion": "v1.32.0",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    })
}

async fn register(config: &Config, client: &kube::Client, index: usize) -> Result<(), String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let name = config.node_name(index);
    let fail = |e: kube::Error| format!("registering simulated node {name}: {e}");
    let existing = nodes.get_opt(&name).await.map_err(fail)?;
    if existing.is_none() {
        let taints = config
            .taints
            .iter()
            .map(|t| taint(t))
            .collect::<Result<Vec<_>, _>>()?;
        let [a, b, c] = subnet(index);
        let cidr = format!("{a}.{b}.{c}.0/24");
        let mut spec = json!({"podCIDR": cidr, "podCIDRs": [cidr]});
        if !taints.is_empty() {
            spec["taints"] = json!(taints);
        }
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "type": "simulated",
                LABEL: "true",
            }, "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
            "spec": spec,
        }))
        .map_err(|e| format!("simulated node {name}: {e}"))?;
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(fail(e)),
        }
    }
    report(config, client, index, None).await.map_err(fail)?;
    renew_lease(config, client, index).await.map_err(fail)
}

/// Registers every node (a few at a time).
pub(crate) async fn register_all(
    config: &Arc<Config>,
    client: &kube::Client,
) -> Result<(), String> {
    if config.count > MAX_NODES {
        return Err(format!(
            "at most {MAX_NODES} simulated nodes (one /24 each of 127.128.0.0/9)"
        ));
    }
    for_each_node(config, client, |config, client, index| async move {
        register(&config, &client, index).await
    })
    .await
    .into_iter()
    .collect()
}

/// Runs `f` for every node, [`Config::concurrency`] at a time; what each returned.
async fn for_each_node<F, Fut, T>(config: &Arc<Config>, client: &kube::Client, f: F) -> Vec<T>
where
    F: Fn(Arc<Config>, kube::Client, usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    let permits = Arc::new(tokio::sync::Semaphore::new(config.concurrency.max(1)));
    for index in 0..config.count {
        let work = f(config.clone(), client.clone(), index);
        let permits = permits.clone();
        set.spawn(async move {
            let _permit = permits.acquire().await;
            work.await
        });
    }
    let mut results = Vec::new();
    while let Some(done) = set.join_next().await {
        if let Ok(result) = done {
            results.push(result);
        }
    }
    results
}

async fn report(
    config: &Config,
    client: &kube::Client,
    index: usize,
    previous: Option<&Value>,
) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch_status(
            &config.node_name(index),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status(config, index, previous)})),
        )
        .await?;
    Ok(())
}

async fn renew_lease(
    config: &Config,
    client: &kube::Client,
    index: usize,
) -> Result<(), kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let name = config.node_name(index);
    let nodes: Api<Node> = Api::all(client.clone());
    let uid = nodes.get(&name).await?.metadata.uid.unwrap_or_default();
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}
        ]},
        "spec": {"holderIdentity": name,
            "leaseDurationSeconds": config.heartbeat.as_secs().max(1) * 4,
            "renewTime": now_micro_text()},
    });
    leases
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(lease),
        )
        .await?;
    Ok(())
}

/// Whether node `node`'s stored status needs reporting again: not `Ready=True` (the node
/// lifecycle controller judged it while the simulator was away) or last reported long ago.
fn stale(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    let Some(ready) = ready else { return true };
    if ready.status != "True" {
        return true;
    }
    let heard = ready.last_heartbeat_time.as_ref().map(|t| t.0.as_second());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
    heard.is_none_or(|t| now - t >= i64::try_from(REPORT_EVERY.as_secs()).unwrap_or(60))
}

/// Renews every node's Lease each heartbeat until `stopping`, reporting a node's status
/// again when it is stale and registering again a node someone deleted.
pub(crate) async fn heartbeat(
    config: Arc<Config>,
    client: kube::Client,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(config.heartbeat);
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = stopped(&mut stopping) => return,
        }
        for_each_node(&config, &client, |config, client, index| async move {
            let nodes: Api<Node> = Api::all(client.clone());
            let name = config.node_name(index);
            let result = match nodes.get_opt(&name).await {
                Ok(None) => register(&config, &client, index).await,
                Ok(Some(node)) => {
                    let mut result = renew_lease(&config, &client, index)
                        .await
                        .map_err(|e| e.to_string());
                    if stale(&node) {
                        let previous = serde_json::to_value(&node.status).ok();
                        result = result.and(
                            report(&config, &client, index, previous.as_ref())
                                .await
                                .map_err(|e| e.to_string()),
                        );
                    }
                    result
                }
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = result {
                tracing::warn!(node = %name, error = %e, "simulated node: heartbeat failed");
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets_are_loopback_and_disjoint() {
        assert_eq!(subnet(0), [127, 128, 0]);
        assert_eq!(subnet(257), [127, 129, 1]);
        assert_eq!(subnet(MAX_NODES - 1), [127, 255, 255]);
        assert!(address(5).is_loopback());
    }

    #[test]
    fn taints_parse_as_the_kubelet_flag() {
        assert_eq!(
            taint("dedicated=sim:NoSchedule").unwrap(),
            json!({"key": "dedicated", "value": "sim", "effect": "NoSchedule"})
        );
        assert_eq!(
            taint("gpu:NoExecute").unwrap(),
            json!({"key": "gpu", "effect": "NoExecute"})
        );
        assert!(taint("gpu").is_err());
        assert!(taint("gpu:Sometimes").is_err());
        assert!(taint("=x:NoSchedule").is_err());
    }
}
