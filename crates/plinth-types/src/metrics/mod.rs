//! metrics.k8s.io/v1beta1 (what metrics-server serves, here from Plinth itself): PodMetrics
//! and NodeMetrics, read when asked from every Ready node agent's usage summary — `kubectl
//! top pods` and `kubectl top nodes`.

use futures::future::BoxFuture;
use plinth_core::ApiError;
use serde_json::{Value, json};

use plinth_registry::ListOptions;
use plinth_registry::resources::{Reading, ResourceDef};

/// The group's resources.
pub fn resources() -> Vec<ResourceDef> {
    let mut pods = ResourceDef::new("metrics.k8s.io", "v1beta1", "PodMetrics", "pods");
    pods.computed = Some(pod_metrics);
    let mut nodes =
        ResourceDef::new("metrics.k8s.io", "v1beta1", "NodeMetrics", "nodes").cluster_scoped();
    nodes.computed = Some(node_metrics);
    vec![pods, nodes]
}

/// Every node's summary (nodes that do not answer are left out, as metrics-server leaves
/// them out).
async fn summaries(reading: &Reading<'_>) -> Vec<Value> {
    let Some(def) = reading.objects.resource("", "v1", "nodes") else {
        return Vec::new();
    };
    let nodes = reading
        .objects
        .list(&def, None, &ListOptions::any_state())
        .await
        .ok()
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default();
    let mut found = Vec::new();
    for node in nodes {
        let Some(name) = plinth_core::meta::name(&node) else {
            continue;
        };
        let Ok(response) = reading
            .nodes
            .get(reading.objects, name, "/stats/summary")
            .await
        else {
            continue;
        };
        if !response.status().is_success() {
            continue;
        }
        let Ok(bytes) = axum::body::to_bytes(response.into_body(), 16 * 1024 * 1024).await else {
            continue;
        };
        if let Ok(summary) = serde_json::from_slice::<Value>(&bytes) {
            found.push(summary);
        }
    }
    found
}

/// A summary entry's usage (the kubelet's Summary API: `cpu.usageNanoCores`,
/// `memory.workingSetBytes`) as metrics-server words it.
fn usage(entry: &Value) -> Value {
    let cpu = entry["cpu"]["usageNanoCores"].as_u64().unwrap_or(0);
    let memory = entry["memory"]["workingSetBytes"].as_u64().unwrap_or(0);
    json!({"cpu": format!("{cpu}n"), "memory": format!("{}Ki", memory / 1024)})
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"kind": format!("{kind}List"), "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {}, "items": items})
}

fn not_found(resource: &str, name: &str) -> ApiError {
    ApiError::not_found(
        &plinth_core::GroupResource::new("metrics.k8s.io", resource),
        name,
    )
}

fn pod_metrics(reading: Reading<'_>) -> BoxFuture<'_, Result<Value, ApiError>> {
    Box::pin(async move {
        let pods_def = reading.objects.resource("", "v1", "pods");
        let mut items = Vec::new();
        for summary in summaries(&reading).await {
            let window = &summary["window"];
            for pod in summary["pods"].as_array().into_iter().flatten() {
                let namespace = pod["podRef"]["namespace"].as_str().unwrap_or("");
                let name = pod["podRef"]["name"].as_str().unwrap_or("");
                let timestamp = &pod["cpu"]["time"];
                if reading.namespace.is_some_and(|ns| ns != namespace)
                    || reading.name.is_some_and(|n| n != name)
                {
                    continue;
                }
                let stored = match &pods_def {
                    Some(def) => reading.objects.get(def, Some(namespace), name).await.ok(),
                    None => None,
                };
                let Some(stored) = stored else { continue };
                if !reading.labels.matches(&plinth_core::meta::labels(&stored)) {
                    continue;
                }
                let mut containers: Vec<Value> = pod["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| json!({"name": c["name"], "usage": usage(c)}))
                    .collect();
                containers.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
                items.push(json!({
                    "kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
                    "metadata": {"name": name, "namespace": namespace,
                        "creationTimestamp": timestamp,
                        "labels": stored.pointer("/metadata/labels")},
                    "timestamp": timestamp, "window": window,
                    "containers": containers,
                }));
            }
        }
        items.sort_by(|a, b| {
            let key = |v: &Value| {
                (
                    v["metadata"]["namespace"].as_str().map(str::to_owned),
                    v["metadata"]["name"].as_str().map(str::to_owned),
                )
            };
            key(a).cmp(&key(b))
        });
        match reading.name {
            Some(name) => items
                .into_iter()
                .next()
                .ok_or_else(|| not_found("pods", name)),
            None => Ok(list("PodMetrics", items)),
        }
    })
}

fn node_metrics(reading: Reading<'_>) -> BoxFuture<'_, Result<Value, ApiError>> {
    Box::pin(async move {
        let mut items = Vec::new();
        for summary in summaries(&reading).await {
            let node = &summary["node"];
            let name = node["nodeName"].as_str().unwrap_or("");
            if reading.name.is_some_and(|n| n != name) || node["cpu"].is_null() {
                continue;
            }
            let timestamp = &node["cpu"]["time"];
            items.push(json!({
                "kind": "NodeMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
                "metadata": {"name": name, "creationTimestamp": timestamp},
                "timestamp": timestamp, "window": summary["window"],
                "usage": usage(node),
            }));
        }
        match reading.name {
            Some(name) => items
                .into_iter()
                .next()
                .ok_or_else(|| not_found("nodes", name)),
            None => Ok(list("NodeMetrics", items)),
        }
    })
}
