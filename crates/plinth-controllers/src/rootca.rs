//! The root CA publisher (kube-controller-manager's `root-ca-cert-publisher`): every
//! namespace has a ConfigMap `kube-root-ca.crt` holding the cluster CA (`ca.crt`), which pods
//! use to trust the API server; it is created with the namespace, recreated if deleted and
//! put back if changed.

use futures::StreamExt;
use plinth_core::At as _;
use plinth_core::StatusReason;
use plinth_core::selector::FieldSelector;
use plinth_registry::{Client, ListOptions, Part, WatchOptions, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

/// The ConfigMap's name.
pub const NAME: &str = "kube-root-ca.crt";
const MANAGER: &str = "kube-controller-manager";

/// Starts the publisher for the CA in `ca_pem`; it ends when `stopping` becomes true.
pub fn spawn_root_ca_publisher(registry: Client, ca_pem: String, stopping: watch::Receiver<bool>) {
    tokio::spawn(namespaces(
        registry.clone(),
        ca_pem.clone(),
        stopping.clone(),
    ));
    tokio::spawn(config_maps(registry, ca_pem, stopping));
}

async fn namespaces(registry: Client, ca: String, stopping: watch::Receiver<bool>) {
    loop {
        let Some((_, mut events)) = registry
            .watch_until_stopped(("", "namespaces"), &stopping, "root CA publisher")
            .await
        else {
            return;
        };
        while let Some(event) = events.next().await {
            if !matches!(event.kind, "ADDED" | "MODIFIED") {
                continue;
            }
            let object = event.object();
            let active = object
                .at("/metadata/deletionTimestamp")
                .is_none_or(Value::is_null);
            if let Some(name) = plinth_core::meta::name(&object).filter(|_| active) {
                ensure(&registry, name, &ca).await;
            }
        }
        if *stopping.borrow() {
            return;
        }
    }
}

/// Watches the `kube-root-ca.crt` ConfigMaps (a field selector the watch cache answers
/// without decoding the others) and repairs what changes.
async fn config_maps(registry: Client, ca: String, mut stopping: watch::Receiver<bool>) {
    let Ok(fields) = FieldSelector::parse(&format!("metadata.name={NAME}")) else {
        return;
    };
    while !*stopping.borrow() {
        let Some(def) = registry.resources.get("", "v1", "configmaps") else {
            return;
        };
        let options = WatchOptions {
            list: ListOptions {
                fields: fields.clone(),
                ..ListOptions::default()
            },
            ..WatchOptions::default()
        };
        let mut events = match registry.watch(def, None, options).await {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(error = %e.message, "root CA publisher: watch failed; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                _ = stopping.wait_for(|s| *s) => return,
            };
            let Some(event) = event else { break };
            let object = event.object();
            let changed = match event.kind {
                "DELETED" => true,
                "ADDED" | "MODIFIED" => {
                    object.at("/data/ca.crt").and_then(Value::as_str) != Some(&ca)
                }
                _ => false,
            };
            if let Some(namespace) = plinth_core::meta::namespace(&object).filter(|_| changed) {
                ensure(&registry, namespace, &ca).await;
            }
        }
    }
}

/// Creates or repairs the ConfigMap in `namespace` (not in one that is going away).
async fn ensure(registry: &Client, namespace: &str, ca: &str) {
    let (Some(def), Some(namespaces)) = (
        registry.resources.get("", "v1", "configmaps"),
        registry.resources.get("", "v1", "namespaces"),
    ) else {
        return;
    };
    match registry.get(&namespaces, None, namespace).await {
        Ok(ns)
            if ns
                .at("/metadata/deletionTimestamp")
                .is_none_or(Value::is_null) => {}
        _ => return,
    }
    let options = WriteOptions::internal(MANAGER);
    let repaired = registry
        .modify(
            &def,
            Some(namespace),
            NAME,
            Part::Main,
            &options,
            |current| {
                if current.at("/data/ca.crt").and_then(Value::as_str) == Some(ca) {
                    return Ok(false);
                }
                current["data"] = json!({"ca.crt": ca});
                Ok(true)
            },
        )
        .await;
    match repaired {
        Ok(_) => return,
        Err(e) if e.reason == StatusReason::NotFound => {}
        Err(e) => {
            tracing::warn!(namespace, error = %e.message, "root CA publisher: repair failed");
            return;
        }
    }
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": namespace,
            "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
        "data": {"ca.crt": ca}});
    match registry
        .create(&def, Some(namespace), object, &options)
        .await
    {
        Ok(_) => {}
        Err(e)
            if matches!(
                e.reason,
                StatusReason::AlreadyExists | StatusReason::Forbidden | StatusReason::NotFound
            ) => {}
        Err(e) => tracing::warn!(namespace, error = %e.message, "root CA publisher: create failed"),
    }
}
