//! The kubelet's read-only paths that clients and the upstream e2e suite read through the API
//! server's `nodes/<name>/proxy`: `/pods` (the node's pods), `/configz` (the agent's
//! configuration, as a KubeletConfiguration), `/metrics` (Prometheus text), `/logs/` (the
//! agent's log files).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use crate::agent::Agent;

/// `/pods`: the pods bound to this node, as a PodList.
pub(crate) async fn pods(agent: &Agent) -> Result<Value, String> {
    let api: Api<Pod> = Api::all(agent.client.clone());
    let params = ListParams::default().fields(&format!("spec.nodeName={}", agent.config.name));
    let list = api.list(&params).await.map_err(|e| e.to_string())?;
    let items: Vec<Value> = list
        .items
        .iter()
        .filter_map(|p| serde_json::to_value(p).ok())
        .map(|mut p| {
            if let Some(o) = p.as_object_mut() {
                o.insert("kind".into(), json!("Pod"));
                o.insert("apiVersion".into(), json!("v1"));
            }
            p
        })
        .collect();
    Ok(json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}))
}

/// `/configz`: what the agent runs with, in KubeletConfiguration's words.
pub(crate) fn configz(agent: &Agent, port: u16) -> Value {
    json!({"kubeletconfig": {
        "kind": "KubeletConfiguration",
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "enableServer": true,
        "address": agent.config.listen.ip().to_string(),
        "port": port,
        "maxPods": crate::node::MAX_PODS,
        "nodeStatusUpdateFrequency": format!("{}s", agent.config.heartbeat.as_secs()),
        "rootDir": agent.config.data_dir.display().to_string(),
        "cgroupDriver": "cgroupfs",
        "clusterDomain": "cluster.local",
        "authentication": {"anonymous": {"enabled": false}},
        "authorization": {"mode": "AlwaysAllow"},
    }})
}

/// `/metrics`: the pods and containers the agent runs, as Prometheus text.
pub(crate) fn metrics(agent: &Agent) -> String {
    let processes = agent.pods.processes();
    let pods: std::collections::BTreeSet<(&str, &str)> = processes
        .iter()
        .map(|((namespace, pod, _), _, _)| (namespace.as_str(), pod.as_str()))
        .collect();
    format!(
        "# HELP kubelet_running_pods Number of pods that have a running pod sandbox\n# TYPE kubelet_running_pods gauge\nkubelet_running_pods {}\n# HELP kubelet_running_containers Number of containers currently running\n# TYPE kubelet_running_containers gauge\nkubelet_running_containers{{container_state=\"running\"}} {}\n",
        pods.len(),
        processes.len()
    )
}

/// `/logs/`: the files of the agent's log directory, as the kubelet lists `/var/log`.
pub(crate) fn logs(agent: &Agent) -> String {
    let dir = agent.config.data_dir.join("logs");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let links: String = names
        .iter()
        .map(|n| format!("<a href=\"{n}\">{n}</a>\n"))
        .collect();
    format!("<pre>\n{links}</pre>\n")
}
