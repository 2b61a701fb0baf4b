//! kube-apiserver's bootstrap controller (and kubeadm's DNS add-on's Service, `kube-system/
//! kube-dns`): the `default/kubernetes` Service (ClusterIP
//! [`kubernetes_ip`](plinth_types::core::service::kubernetes_ip), port 443) and its Endpoints
//! and EndpointSlices pointing at every live API server of the cluster, written before the
//! server takes requests and put back every ten seconds if changed or deleted.
//!
//! On shared storage (etcd: the only way to have several servers), each server keeps an
//! identity Lease, `kube-system/apiserver-<hash>` labelled
//! `apiserver.kubernetes.io/identity=kube-apiserver` as kube-apiserver's, renewed every ten
//! seconds and naming its port; a server whose Lease was renewed in the last 30 seconds is
//! live (kube's lease endpoint reconciler keeps 15-second leases in etcd). Every server
//! computes the same endpoints from the Leases, so they agree instead of taking turns. A
//! stopping server deletes its Lease and takes itself out; Leases unrenewed past their
//! duration (an hour) are deleted, as kube's identity-lease collector does. All servers
//! listen on loopback here, told apart by port: one Endpoints subset and one EndpointSlice
//! (`kubernetes`, then `kubernetes-<port>`) per server.

use serde_json::{Value, json};

use plinth_registry::service_range::{dns_ip, kubernetes_ip};
use plinth_registry::{Client, DeleteOptions, ListOptions, Part, WriteOptions};

const MANAGER: &str = "kube-apiserver";
const NAME: &str = "kubernetes";
const LEASE_NAMESPACE: &str = "kube-system";
const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity";
const PORT_ANNOTATION: &str = "plinth.dev/apiserver-port";
/// Seconds since its last renewal within which a server counts as live.
const LIVE_FOR: i64 = 30;
/// The identity Lease's duration, as kube-apiserver's.
const LEASE_SECONDS: i64 = 3600;

use plinth_core::host_name;

/// This server as the Leases know it.
struct Me {
    /// `apiserver-<hash of host and data directory>`: the same after a restart.
    lease: String,
    /// The Lease's holder: the name and a fresh id per start.
    holder: String,
    port: u16,
    /// Whether the cluster DNS Service is kept too.
    dns: bool,
}

impl Me {
    fn new(data_dir: &std::path::Path, port: u16, dns: bool) -> Self {
        let dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
        // FNV-1a: a short name that stays the same across releases.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in format!("{}_{}", host_name(), dir.display()).bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        let lease = format!("apiserver-{hash:016x}");
        Self {
            holder: format!("{lease}_{}", uuid::Uuid::new_v4()),
            lease,
            port,
            dns,
        }
    }
}

/// Creates or renews this server's identity Lease.
async fn renew(registry: &Client, me: &Me) {
    let Some(def) = registry
        .resources
        .get("coordination.k8s.io", "v1", "leases")
    else {
        return;
    };
    let options = WriteOptions::internal(MANAGER);
    let now = plinth_registry::now_micro_time();
    match registry.get(&def, Some(LEASE_NAMESPACE), &me.lease).await {
        Err(e) if e.reason == plinth_core::StatusReason::NotFound => {
            let lease = json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": me.lease, "namespace": LEASE_NAMESPACE,
                    "labels": {IDENTITY_LABEL: "kube-apiserver", "kubernetes.io/hostname": host_name()},
                    "annotations": {PORT_ANNOTATION: me.port.to_string()}},
                "spec": {"holderIdentity": me.holder, "leaseDurationSeconds": LEASE_SECONDS,
                    "acquireTime": now, "renewTime": now},
            });
            if let Err(e) = registry
                .create(&def, Some(LEASE_NAMESPACE), lease, &options)
                .await
                && e.reason != plinth_core::StatusReason::AlreadyExists
            {
                tracing::warn!(error = %e.message, "apiserver identity lease: not created");
            }
        }
        Ok(_) => {
            let written = registry
                .modify(
                    &def,
                    Some(LEASE_NAMESPACE),
                    &me.lease,
                    Part::Main,
                    &options,
                    |lease| {
                        lease["spec"]["holderIdentity"] = json!(me.holder);
                        lease["spec"]["renewTime"] = json!(now);
                        lease["spec"]["leaseDurationSeconds"] = json!(LEASE_SECONDS);
                        lease["metadata"]["annotations"][PORT_ANNOTATION] =
                            json!(me.port.to_string());
                        Ok(true)
                    },
                )
                .await;
            if let Err(e) = written {
                tracing::warn!(error = %e.message, "apiserver identity lease: not renewed");
            }
        }
        Err(e) => tracing::warn!(error = %e.message, "apiserver identity lease: not read"),
    }
}

/// The ports of the live servers, sorted (with `me`'s unless it is stopping); deletes the
/// Leases unrenewed past their duration.
async fn live_ports(registry: &Client, me: Option<&Me>) -> Vec<u16> {
    let mut ports: Vec<u16> = me.map(|me| me.port).into_iter().collect();
    let Some(def) = registry
        .resources
        .get("coordination.k8s.io", "v1", "leases")
    else {
        return ports;
    };
    let listed = match registry
        .list(&def, Some(LEASE_NAMESPACE), &ListOptions::default())
        .await
    {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(error = %e.message, "apiserver identity leases: not listed");
            return ports;
        }
    };
    let now = plinth_registry::now();
    for lease in listed["items"].as_array().into_iter().flatten() {
        if lease.pointer("/metadata/labels/apiserver.kubernetes.io~1identity")
            != Some(&json!("kube-apiserver"))
        {
            continue;
        }
        let name = lease["metadata"]["name"].as_str().unwrap_or_default();
        if me.is_some_and(|me| me.lease == name) {
            continue;
        }
        let Some(renewed) = lease
            .pointer("/spec/renewTime")
            .and_then(Value::as_str)
            .and_then(plinth_core::meta::parse_time)
        else {
            continue;
        };
        let duration = lease
            .pointer("/spec/leaseDurationSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(LEASE_SECONDS);
        if now - renewed > duration {
            let _ = registry
                .delete(&def, Some(LEASE_NAMESPACE), name, &DeleteOptions::default())
                .await;
            continue;
        }
        if now - renewed <= LIVE_FOR
            && let Some(port) = lease
                .pointer("/metadata/annotations/plinth.dev~1apiserver-port")
                .and_then(Value::as_str)
                .and_then(|p| p.parse().ok())
        {
            ports.push(port);
        }
    }
    ports.sort_unstable();
    ports.dedup();
    ports
}

fn service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": NAME, "namespace": "default",
            "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"type": "ClusterIP", "clusterIP": kubernetes_ip(), "sessionAffinity": "None",
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 0}]},
    })
}

/// The cluster DNS Service (`kube-system/kube-dns` at the range's tenth address, as kubeadm
/// makes it for CoreDNS); every node agent answers its address itself, so it has no selector
/// and no endpoints.
fn dns_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system",
            "labels": {"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true",
                "kubernetes.io/name": "KubeDNS"}},
        "spec": {"type": "ClusterIP", "clusterIP": dns_ip(), "sessionAffinity": "None",
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}]},
    })
}

fn endpoints(ports: &[u16]) -> Value {
    let subsets: Vec<Value> = ports
        .iter()
        .map(|port| {
            json!({"addresses": [{"ip": "127.0.0.1"}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}]})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": NAME, "namespace": "default",
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": subsets,
    })
}

/// The EndpointSlice of the `i`-th live server (by port).
fn slice_name(i: usize, port: u16) -> String {
    if i == 0 {
        NAME.to_owned()
    } else {
        format!("{NAME}-{port}")
    }
}

fn slice(name: &str, port: u16) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "default",
            "labels": {"kubernetes.io/service-name": NAME}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    })
}

/// Makes the stored object at (`group`, `plural`) `<wanted's namespace>/<name>` say what
/// `wanted` says in `fields`.
async fn ensure(registry: &Client, group: &str, plural: &str, wanted: Value, fields: &[&str]) {
    let namespace = wanted["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_owned();
    let namespace = namespace.as_str();
    let Some(def) = registry.resources.get(group, "v1", plural) else {
        return;
    };
    let options = WriteOptions::internal(MANAGER);
    let name = wanted["metadata"]["name"]
        .as_str()
        .unwrap_or(NAME)
        .to_owned();
    match registry.get(&def, Some(namespace), &name).await {
        Err(e) if e.reason == plinth_core::StatusReason::NotFound => {
            if let Err(e) = registry
                .create(&def, Some(namespace), wanted, &options)
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
                    Some(namespace),
                    &name,
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

/// Makes the Service and its endpoints what they should be for the live servers on `ports`
/// (the first created the Service, with its port as the target).
async fn ensure_all(registry: &Client, ports: &[u16], dns: bool) {
    let Some(first) = ports.first() else {
        return;
    };
    let mut wanted = service();
    wanted["spec"]["ports"][0]["targetPort"] = json!(first);
    ensure(registry, "", "services", wanted, &[]).await;
    if dns {
        ensure(registry, "", "services", dns_service(), &[]).await;
    }
    ensure(registry, "", "endpoints", endpoints(ports), &["subsets"]).await;
    let names: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| slice_name(i, *port))
        .collect();
    for (name, port) in names.iter().zip(ports) {
        ensure(
            registry,
            "discovery.k8s.io",
            "endpointslices",
            slice(name, *port),
            &["endpoints", "ports"],
        )
        .await;
    }
    // The slices of servers gone.
    let Some(def) = registry
        .resources
        .get("discovery.k8s.io", "v1", "endpointslices")
    else {
        return;
    };
    if let Ok(listed) = registry
        .list(&def, Some("default"), &ListOptions::default())
        .await
    {
        for item in listed["items"].as_array().into_iter().flatten() {
            let name = item["metadata"]["name"].as_str().unwrap_or_default();
            if item.pointer("/metadata/labels/kubernetes.io~1service-name") == Some(&json!(NAME))
                && name.starts_with(&format!("{NAME}-"))
                && !names.iter().any(|n| n == name)
            {
                let _ = registry
                    .delete(&def, Some("default"), name, &DeleteOptions::default())
                    .await;
            }
        }
    }
}

/// Renews this server's Lease and brings the endpoints in line with the live servers; on
/// storage no other server writes, this server is the only one (and writes no Lease: the
/// storage's revision stays where it is while nothing changes).
async fn reconcile(registry: &Client, me: &Me) {
    if !registry.store.shared() {
        ensure_all(registry, &[me.port], me.dns).await;
        return;
    }
    renew(registry, me).await;
    let ports = live_ports(registry, Some(me)).await;
    ensure_all(registry, &ports, me.dns).await;
}

/// Writes the Service and its endpoints now (before the server takes requests, so that no
/// client sees them appear), then keeps them until `stopping`, when this server deletes its
/// Lease and takes itself out of the endpoints; the returned task ends then. This server keeps
/// its data in `data_dir` and listens on `port`.
pub(crate) async fn start(
    registry: Client,
    data_dir: &std::path::Path,
    port: u16,
    dns: bool,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let me = Me::new(data_dir, port, dns);
    reconcile(&registry, &me).await;
    tokio::spawn(async move {
        let period = std::time::Duration::from_secs(10);
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stopping.wait_for(|s| *s) => break,
            }
            reconcile(&registry, &me).await;
        }
        // Out of the endpoints before the process ends (bounded: storage may be gone).
        if !registry.store.shared() {
            return;
        }
        let leave = async {
            if let Some(def) = registry
                .resources
                .get("coordination.k8s.io", "v1", "leases")
            {
                let _ = registry
                    .delete(
                        &def,
                        Some(LEASE_NAMESPACE),
                        &me.lease,
                        &DeleteOptions::default(),
                    )
                    .await;
            }
            let ports = live_ports(&registry, None).await;
            ensure_all(&registry, &ports, me.dns).await;
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), leave).await;
    })
}
