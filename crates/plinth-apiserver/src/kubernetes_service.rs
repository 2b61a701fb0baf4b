//! kube-apiserver's bootstrap controller: the `default/kubernetes` Service (ClusterIP
//! [`kubernetes_ip`](crate::types::core::service::kubernetes_ip), port 443) and its Endpoints
//! and EndpointSlice pointing at this API server, written before the server takes requests
//! and put back every ten seconds if changed or deleted.

use serde_json::{Value, json};

use crate::registry::{Part, Registry, WriteOptions};
use crate::types::core::service::kubernetes_ip;

const MANAGER: &str = "kube-apiserver";
const NAME: &str = "kubernetes";

fn service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": NAME, "namespace": "default",
            "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"type": "ClusterIP", "clusterIP": kubernetes_ip(), "sessionAffinity": "None",
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 0}]},
    })
}

fn endpoints(port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": NAME, "namespace": "default",
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}],
    })
}

fn slice(port: u16) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": NAME, "namespace": "default",
            "labels": {"kubernetes.io/service-name": NAME}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    })
}

/// Makes the stored object at (`group`, `plural`) `default/kubernetes` say what `wanted`
/// says in `fields`.
async fn ensure(registry: &Registry, group: &str, plural: &str, wanted: Value, fields: &[&str]) {
    let Some(def) = registry.resources.get(group, "v1", plural) else {
        return;
    };
    let options = WriteOptions::internal(MANAGER);
    match registry.get(&def, Some("default"), NAME).await {
        Err(e) if e.reason == plinth_core::StatusReason::NotFound => {
            if let Err(e) = registry
                .create(&def, Some("default"), wanted, &options)
                .await
                && e.reason != plinth_core::StatusReason::AlreadyExists
            {
                tracing::warn!(resource = plural, error = %e.message, "kubernetes service: not created");
            }
        }
        Ok(current) => {
            let same = fields.iter().all(|f| current.get(*f) == wanted.get(*f));
            if same {
                return;
            }
            let written = registry
                .modify(
                    &def,
                    Some("default"),
                    NAME,
                    Part::Main,
                    &options,
                    |current| {
                        for f in fields {
                            current[*f] = wanted[*f].clone();
                        }
                        Ok(true)
                    },
                )
                .await;
            if let Err(e) = written {
                tracing::warn!(resource = plural, error = %e.message, "kubernetes service: not repaired");
            }
        }
        Err(e) => {
            tracing::warn!(resource = plural, error = %e.message, "kubernetes service: not read")
        }
    }
}

/// Keeps the Service and its endpoints until `stopping`; this server listens on `port`.
/// Makes the Service and its endpoints what they should be for a server on `port`.
async fn ensure_all(registry: &Registry, port: u16) {
    let mut wanted = service();
    wanted["spec"]["ports"][0]["targetPort"] = json!(port);
    ensure(registry, "", "services", wanted, &[]).await;
    ensure(registry, "", "endpoints", endpoints(port), &["subsets"]).await;
    ensure(
        registry,
        "discovery.k8s.io",
        "endpointslices",
        slice(port),
        &["endpoints", "ports"],
    )
    .await;
}

/// Writes the Service and its endpoints now (before the server takes requests, so that no
/// client sees them appear), then keeps them until `stopping`; this server listens on `port`.
pub(crate) async fn start(
    registry: Registry,
    port: u16,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    ensure_all(&registry, port).await;
    tokio::spawn(async move {
        let period = std::time::Duration::from_secs(10);
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stopping.wait_for(|s| *s) => return,
            }
            ensure_all(&registry, port).await;
        }
    });
}
