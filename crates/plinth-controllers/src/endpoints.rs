//! The endpoints and EndpointSlice controllers (kube-controller-manager's `endpoint` and
//! `endpointslice`): for every Service with a selector, the pods it selects that have an
//! address become its Endpoints (`addresses` when ready, `notReadyAddresses` otherwise) and
//! its EndpointSlices (each endpoint with `ready`, `serving` and `terminating`; a slice per
//! set of ports resolved from the pods' named container ports). Both are owned by the
//! Service (so the garbage collector removes them with it; kube's endpoints controller deletes Endpoints
//! itself). A Service without a selector has its user's own Endpoints mirrored into an
//! EndpointSlice (kube's `endpointslicemirroring`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use plinth_core::Frozen;
use plinth_core::StatusReason;
use plinth_registry::{Client, Part, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::informer::{Change, Informer, SharedInformers};

const MANAGER: &str = "endpointslice-controller.k8s.io";

/// The manager of mirrored slices (kube's `endpointslicemirroring` controller).
const MIRRORING: &str = "endpointslicemirroring-controller.k8s.io";

/// The label on Endpoints the endpoints controller writes, which mirroring leaves alone.
const SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";

/// Starts the controllers on the shared pod and Service informers; they end when `stopping`
/// becomes true.
pub fn spawn_endpoints(
    registry: Client,
    informers: &SharedInformers,
    stopping: watch::Receiver<bool>,
) {
    let (dirty_tx, dirty_rx) = tokio::sync::mpsc::unbounded_channel();
    // Every change marks its namespace for a pass.
    let dirty = |tx: tokio::sync::mpsc::UnboundedSender<String>| {
        move |c: Change<'_>| {
            if let Some(ns) = c.new.or(c.old).and_then(plinth_core::meta::namespace) {
                let _ = tx.send(ns.to_owned());
            }
        }
    };
    let pods = informers.start(("", "pods"), dirty(dirty_tx.clone()));
    let services = informers.start(("", "services"), dirty(dirty_tx.clone()));
    let endpoints = informers.start(("", "endpoints"), dirty(dirty_tx));
    // Read to find slices no longer wanted; the controller's own writes need no pass.
    let slices = informers.start(("discovery.k8s.io", "endpointslices"), |_| {});
    let informers = Watched {
        pods,
        services,
        endpoints,
        slices,
    };
    tokio::spawn(reconcile_loop(registry, informers, dirty_rx, stopping));
}

/// What the controllers read.
struct Watched {
    pods: Informer,
    services: Informer,
    endpoints: Informer,
    slices: Informer,
}

async fn reconcile_loop(
    registry: Client,
    watched: Watched,
    mut dirty: tokio::sync::mpsc::UnboundedReceiver<String>,
    mut stopping: watch::Receiver<bool>,
) {
    let Watched {
        pods,
        services,
        endpoints,
        slices,
    } = &watched;
    pods.synced().await;
    services.synced().await;
    endpoints.synced().await;
    slices.synced().await;
    let mut resync = tokio::time::interval(Duration::from_secs(10));
    loop {
        let mut namespaces = BTreeSet::new();
        tokio::select! {
            ns = dirty.recv() => match ns {
                Some(ns) => { namespaces.insert(ns); }
                None => return,
            },
            _ = resync.tick() => { namespaces.insert(String::new()); }
            _ = stopping.wait_for(|s| *s) => return,
        }
        // Changes that come together are handled together.
        tokio::time::sleep(Duration::from_millis(50)).await;
        while let Ok(ns) = dirty.try_recv() {
            namespaces.insert(ns);
        }
        if namespaces.remove("") {
            namespaces.extend(
                services
                    .all_values()
                    .iter()
                    .filter_map(|s| plinth_core::meta::namespace(s).map(str::to_owned)),
            );
        }
        for ns in namespaces {
            reconcile_namespace(&registry, &watched, &ns).await;
        }
    }
}

fn pod_ready(pod: &Frozen) -> bool {
    pod.at("/status/conditions")
        .and_then(Frozen::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The container port `target` (a number or a port name) means in `pod`.
fn resolve(target: &Frozen, pod: &Frozen) -> Option<i64> {
    match target {
        Frozen::Number(n) => n.as_i64(),
        _ if target.is_string() => {
            let name = target.as_str().unwrap_or("");
            name.parse().ok().or_else(|| {
                pod.at("/spec/containers")
                    .and_then(Frozen::as_array)
                    .into_iter()
                    .flatten()
                    .flat_map(|c| c["ports"].as_array().unwrap_or_default())
                    .find(|p| p["name"] == name)
                    .and_then(|p| p["containerPort"].as_i64())
            })
        }
        _ => None,
    }
}

async fn reconcile_namespace(registry: &Client, watched: &Watched, namespace: &str) {
    let pods = watched.pods.in_namespace(namespace);
    for service in watched.services.in_namespace(namespace) {
        if service
            .at("/spec/type")
            .is_some_and(|t| *t == "ExternalName")
        {
            continue;
        }
        let Some(selector) = service
            .at("/spec/selector")
            .and_then(Frozen::as_object)
            .filter(|s| !s.is_empty())
        else {
            // No selector: Endpoints of the user's own are mirrored into a slice.
            let name = plinth_core::meta::name(&service).unwrap_or("");
            let custom = watched
                .endpoints
                .get(&format!("{namespace}/{name}"))
                .filter(|e| {
                    plinth_core::meta::labels(e)
                        .get(SKIP_MIRROR)
                        .map(String::as_str)
                        != Some("true")
                });
            mirror(registry, &service, custom.as_deref()).await;
            continue;
        };
        let selected: Vec<&Frozen> = pods
            .iter()
            .map(|p| &**p)
            .filter(|p| {
                let l = plinth_core::meta::labels(p);
                selector
                    .iter()
                    .all(|(k, v)| l.get(k).map(String::as_str) == v.as_str())
            })
            .filter(|p| {
                p.at("/status/podIP")
                    .and_then(Frozen::as_str)
                    .is_some_and(|ip| !ip.is_empty())
            })
            .filter(|p| {
                !matches!(
                    p.at("/status/phase").and_then(Frozen::as_str),
                    Some("Succeeded" | "Failed")
                )
            })
            .collect();
        write_endpoints(registry, &service, &selected).await;
        write_slices(registry, &watched.slices, &service, &selected).await;
    }
}

fn owner(service: &Frozen) -> Value {
    json!([{"apiVersion": "v1", "kind": "Service",
        "name": plinth_core::meta::name(service),
        "uid": plinth_core::meta::meta_str(service, "uid"),
        "controller": true, "blockOwnerDeletion": true}])
}

fn target_ref(pod: &Frozen) -> Value {
    json!({"kind": "Pod", "namespace": plinth_core::meta::namespace(pod),
        "name": plinth_core::meta::name(pod), "uid": plinth_core::meta::meta_str(pod, "uid")})
}

/// The Service's ports `pod` serves: name, the container port its target resolves to,
/// protocol (kube's FindPort: a port whose target the pod does not name is left out).
fn pod_ports<'a>(service: &'a Frozen, pod: &Frozen) -> Vec<(&'a str, i64, &'a str)> {
    service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let port = resolve(&p["targetPort"], pod)?;
            Some((
                p["name"].as_str().unwrap_or(""),
                port,
                p["protocol"].as_str().unwrap_or("TCP"),
            ))
        })
        .collect()
}

/// A subset in the making: its ports, ready and not-ready addresses.
type Subset = (Vec<Value>, Vec<Value>, Vec<Value>);

async fn write_endpoints(registry: &Client, service: &Frozen, pods: &[&Frozen]) {
    let publish_all = service
        .at("/spec/publishNotReadyAddresses")
        .is_some_and(|p| *p == true);
    // One subset per distinct set of resolved ports.
    let mut subsets: BTreeMap<String, Subset> = BTreeMap::new();
    for pod in pods {
        let ports: Vec<Value> = pod_ports(service, pod)
            .into_iter()
            .map(|(name, port, protocol)| {
                let mut entry = json!({"port": port, "protocol": protocol});
                if !name.is_empty() {
                    entry["name"] = json!(name);
                }
                entry
            })
            .collect();
        let key = serde_json::to_string(&ports).unwrap_or_default();
        let mut address = json!({"ip": pod.at("/status/podIP"),
            "nodeName": pod.at("/spec/nodeName"), "targetRef": target_ref(pod)});
        if let Some(hostname) = hostname(service, pod) {
            address["hostname"] = json!(hostname);
        }
        let terminating = pod
            .at("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null());
        let entry = subsets
            .entry(key)
            .or_insert_with(|| (ports, Vec::new(), Vec::new()));
        if (pod_ready(pod) && !terminating) || publish_all {
            entry.1.push(address);
        } else if !terminating {
            entry.2.push(address);
        }
    }
    let subsets: Vec<Value> = subsets
        .into_values()
        .filter(|(_, ready, not_ready)| !ready.is_empty() || !not_ready.is_empty())
        .map(|(ports, ready, not_ready)| {
            let mut subset = json!({"ports": ports});
            if !ready.is_empty() {
                subset["addresses"] = json!(ready);
            }
            if !not_ready.is_empty() {
                subset["notReadyAddresses"] = json!(not_ready);
            }
            subset
        })
        .collect();
    let name = plinth_core::meta::name(service).unwrap_or("");
    let namespace = plinth_core::meta::namespace(service).unwrap_or("default");
    let mut labels = plinth_core::meta::labels(service);
    labels.insert(SKIP_MIRROR.into(), "true".into());
    let mut wanted = json!({"apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": name, "namespace": namespace, "labels": labels,
            "ownerReferences": owner(service)}});
    // `subsets` is omitempty: no endpoints, no field (as kube serves it).
    if !subsets.is_empty() {
        wanted["subsets"] = json!(subsets);
    }
    upsert(
        registry,
        "",
        "endpoints",
        namespace,
        name,
        wanted,
        &["subsets"],
    )
    .await;
}

/// The endpoint's hostname: the pod's `spec.hostname` when its `subdomain` is this Service
/// (kube's endpoint controllers; cluster DNS then names the pod under the Service).
fn hostname<'a>(service: &Frozen, pod: &'a Frozen) -> Option<&'a str> {
    let hostname = pod.at("/spec/hostname").and_then(Frozen::as_str)?;
    let subdomain = pod.at("/spec/subdomain").and_then(Frozen::as_str)?;
    (!hostname.is_empty()
        && Some(subdomain) == plinth_core::meta::name(service)
        && plinth_core::meta::namespace(pod) == plinth_core::meta::namespace(service))
    .then_some(hostname)
}

/// The Service's EndpointSlices, kube's way: one slice per set of resolved ports (pods whose
/// named target ports resolve to other numbers are in other slices), a slice without
/// endpoints or ports when no pod is selected; slices of this controller no longer wanted go.
async fn write_slices(registry: &Client, slices: &Informer, service: &Frozen, pods: &[&Frozen]) {
    let mut groups: BTreeMap<String, (Vec<Value>, Vec<Value>)> = BTreeMap::new();
    for pod in pods {
        let ports: Vec<Value> = pod_ports(service, pod)
            .into_iter()
            .map(|(name, port, protocol)| json!({"name": name, "port": port, "protocol": protocol}))
            .collect();
        let key = serde_json::to_string(&ports).unwrap_or_default();
        groups
            .entry(key)
            .or_insert_with(|| (ports, Vec::new()))
            .1
            .push(slice_endpoint(service, pod));
    }
    let base = slice_name(service);
    let mut wanted = Vec::new();
    if groups.is_empty() {
        wanted.push((base.clone(), Vec::new(), Vec::new()));
    }
    for (i, (key, (ports, endpoints))) in groups.into_iter().enumerate() {
        // The first port set keeps the Service's usual slice name; others are named by theirs.
        let name = if i == 0 {
            base.clone()
        } else {
            format!("{base}-{}", crate::workload::safe_hash(&key))
        };
        wanted.push((name, ports, endpoints));
    }
    let service_name = plinth_core::meta::name(service).unwrap_or("");
    let namespace = plinth_core::meta::namespace(service).unwrap_or("default");
    let mut labels = plinth_core::meta::labels(service);
    labels.insert("kubernetes.io/service-name".into(), service_name.to_owned());
    labels.insert(
        "endpointslice.kubernetes.io/managed-by".into(),
        MANAGER.into(),
    );
    for (name, ports, endpoints) in &wanted {
        let slice = json!({"name": name, "namespace": namespace, "labels": labels,
            "ownerReferences": owner(service)});
        upsert_slice(registry, slice, json!(endpoints), json!(ports)).await;
    }
    let uid = plinth_core::meta::meta_str(service, "uid");
    for stale in slices.in_namespace(namespace) {
        let labels = plinth_core::meta::labels(&stale);
        let name = plinth_core::meta::name(&stale).unwrap_or("");
        let ours = labels
            .get("endpointslice.kubernetes.io/managed-by")
            .map(String::as_str)
            == Some(MANAGER)
            && labels.get("kubernetes.io/service-name").map(String::as_str) == Some(service_name)
            && stale
                .at("/metadata/ownerReferences/0/uid")
                .and_then(Frozen::as_str)
                == uid;
        if ours && !wanted.iter().any(|(n, _, _)| n == name) {
            delete_slice(registry, namespace, name).await;
        }
    }
}

/// Creates the EndpointSlice of `metadata` with `endpoints` and `ports`, or makes the stored
/// one agree.
async fn upsert_slice(registry: &Client, metadata: Value, endpoints: Value, ports: Value) {
    let namespace = metadata["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_owned();
    let name = metadata["name"].as_str().unwrap_or("").to_owned();
    let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": metadata, "addressType": "IPv4", "endpoints": endpoints, "ports": ports});
    upsert(
        registry,
        "discovery.k8s.io",
        "endpointslices",
        &namespace,
        &name,
        slice,
        &["endpoints", "ports"],
    )
    .await;
}

async fn delete_slice(registry: &Client, namespace: &str, name: &str) {
    if let Some(def) = registry
        .resources
        .get("discovery.k8s.io", "v1", "endpointslices")
    {
        let _ = registry
            .delete(
                &def,
                Some(namespace),
                name,
                &plinth_registry::DeleteOptions::default(),
            )
            .await;
    }
}

/// A pod as an EndpointSlice endpoint.
fn slice_endpoint(service: &Frozen, pod: &Frozen) -> Value {
    let terminating = pod
        .at("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    let ready = pod_ready(pod);
    let mut endpoint = json!({
        "addresses": [pod.at("/status/podIP")],
        "conditions": {"ready": ready && !terminating, "serving": ready, "terminating": terminating},
        "nodeName": pod.at("/spec/nodeName"),
        "targetRef": target_ref(pod),
    });
    if let Some(hostname) = hostname(service, pod) {
        endpoint["hostname"] = json!(hostname);
    }
    endpoint
}

/// The name of a Service's first slice (the one of its first set of ports, or its only one).
fn slice_name(service: &Frozen) -> String {
    let service_name = plinth_core::meta::name(service).unwrap_or("");
    let uid = plinth_core::meta::meta_str(service, "uid").unwrap_or("");
    format!(
        "{service_name}-{}",
        &uid.chars()
            .filter(char::is_ascii_alphanumeric)
            .take(5)
            .collect::<String>()
    )
}

/// kube's EndpointSlice mirroring: a selector-less Service's own Endpoints (`custom`) as an
/// EndpointSlice (its addresses ready, its not-ready addresses not), gone with them.
async fn mirror(registry: &Client, service: &Frozen, custom: Option<&Frozen>) {
    let namespace = plinth_core::meta::namespace(service).unwrap_or("default");
    let name = slice_name(service);
    let Some(custom) = custom else {
        if let Some(def) = registry
            .resources
            .get("discovery.k8s.io", "v1", "endpointslices")
            && let Ok(existing) = registry.get(&def, Some(namespace), &name).await
            && plinth_core::meta::labels(&existing)
                .get("endpointslice.kubernetes.io/managed-by")
                .map(String::as_str)
                == Some(MIRRORING)
        {
            delete_slice(registry, namespace, &name).await;
        }
        return;
    };
    let subsets = custom["subsets"].as_array().unwrap_or_default();
    let mut endpoints = Vec::new();
    let mut ports = Vec::new();
    for subset in subsets {
        for port in subset["ports"].as_array().into_iter().flatten() {
            let entry = json!({"name": port["name"].as_str().unwrap_or(""), "port": port["port"],
                "protocol": port["protocol"].as_str().unwrap_or("TCP")});
            if !ports.contains(&entry) {
                ports.push(entry);
            }
        }
        for (key, ready) in [("addresses", true), ("notReadyAddresses", false)] {
            for address in subset[key].as_array().into_iter().flatten() {
                let mut endpoint = json!({"addresses": [address["ip"]],
                    "conditions": {"ready": ready}});
                for field in ["nodeName", "targetRef", "hostname"] {
                    if !address[field].is_null() {
                        endpoint[field] = address[field].to_value();
                    }
                }
                endpoints.push(endpoint);
            }
        }
    }
    let service_name = plinth_core::meta::name(service).unwrap_or("");
    let mut labels = plinth_core::meta::labels(custom);
    labels.insert("kubernetes.io/service-name".into(), service_name.to_owned());
    labels.insert(
        "endpointslice.kubernetes.io/managed-by".into(),
        MIRRORING.into(),
    );
    let owner = json!([{"apiVersion": "v1", "kind": "Endpoints",
        "name": plinth_core::meta::name(custom),
        "uid": plinth_core::meta::meta_str(custom, "uid"),
        "controller": true, "blockOwnerDeletion": true}]);
    let metadata = json!({"name": name, "namespace": namespace, "labels": labels,
        "ownerReferences": owner});
    upsert_slice(registry, metadata, json!(endpoints), json!(ports)).await;
}

/// Creates `wanted`, or makes the stored object agree with it in `fields`.
async fn upsert(
    registry: &Client,
    group: &str,
    plural: &str,
    namespace: &str,
    name: &str,
    wanted: Value,
    fields: &[&str],
) {
    let Some(def) = registry.resources.get(group, "v1", plural) else {
        return;
    };
    let options = WriteOptions::internal("kube-controller-manager");
    let written = registry
        .modify(
            &def,
            Some(namespace),
            name,
            Part::Main,
            &options,
            |current| {
                let same = fields.iter().all(|f| current.get(*f) == wanted.get(*f));
                if same {
                    return Ok(false);
                }
                for f in fields {
                    match (wanted.get(*f), current.as_object_mut()) {
                        (Some(value), _) => current[*f] = value.clone(),
                        (None, Some(map)) => {
                            map.remove(*f);
                        }
                        (None, None) => {}
                    }
                }
                Ok(true)
            },
        )
        .await;
    match written {
        Err(e) if e.reason == StatusReason::NotFound => {
            if let Err(e) = registry
                .create(&def, Some(namespace), wanted, &options)
                .await
                && e.reason != StatusReason::AlreadyExists
                && e.reason != StatusReason::NotFound
            {
                tracing::warn!(%name, resource = plural, error = %e.message, "endpoints not created");
            }
        }
        Err(e) => {
            tracing::warn!(%name, resource = plural, error = %e.message, "endpoints not written")
        }
        Ok(_) => {}
    }
}
