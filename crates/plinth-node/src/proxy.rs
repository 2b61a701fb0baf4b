//! The service proxy. Where pods share the machine's network, kube-proxy in userspace: every
//! Service's `ClusterIP:port` (and node port, on `127.0.0.1`) is a TCP listener here that
//! passes each connection on to one of the Service's ready endpoints (its EndpointSlices'),
//! in turn or — with `sessionAffinity: ClientIP` — the same one for the same client.
//! Listeners use `SO_REUSEPORT`, so the agents of one machine can all serve the same
//! addresses. Where pods have namespaces of their own, ClusterIPs are nftables rules (see
//! [`crate::service_rules`]) and only node ports and relays are listeners: a relay on the
//! node's gateway passes pods' connections on to endpoints only the machine reaches (the
//! `kubernetes` Service's, on loopback). Also the source of the Service environment
//! variables containers get, and of the cluster DNS zone.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use plinth_net::rules::ServicePort;
use serde_json::Value;

/// What one listener serves: a Service's port.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Target {
    namespace: String,
    service: String,
    port_name: String,
    affinity: Option<Duration>,
    /// Only endpoints on this node (`internalTrafficPolicy` or `externalTrafficPolicy`
    /// `Local`).
    local: bool,
}

use crate::mirror::Objects;

/// Services and endpoints as the watches last said.
#[derive(Default)]
pub(crate) struct Proxy {
    services: Mutex<Objects>,
    slices: Mutex<Objects>,
    listeners: Mutex<HashMap<SocketAddr, (Target, tokio::task::JoinHandle<()>)>>,
    turn: std::sync::atomic::AtomicUsize,
    sessions: Mutex<HashMap<(SocketAddr, IpAddr), (SocketAddr, Instant)>>,
    /// Counts the changes seen (the rules and the DNS zone follow it).
    version: tokio::sync::watch::Sender<u64>,
    /// The node's gateway, where pods have namespaces of their own.
    gateway: std::sync::OnceLock<std::net::Ipv4Addr>,
    /// Whether the node answers the cluster DNS address (pods then get it as their server).
    pub(crate) dns_served: std::sync::atomic::AtomicBool,
    /// This node's name (traffic policies `Local` keep to its endpoints).
    node: std::sync::OnceLock<String>,
}

/// Whether the Service's traffic policy `field` is `Local`.
fn local_policy(service: &Value, field: &str) -> bool {
    service
        .pointer(&format!("/spec/{field}"))
        .and_then(Value::as_str)
        == Some("Local")
}

/// The cluster DNS Service (kubeadm's name for it), answered by the agent's DNS server.
pub(crate) const DNS_SERVICE: (&str, &str) = ("kube-system", "kube-dns");

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy").finish_non_exhaustive()
    }
}

/// `my-svc` → `MY_SVC`.
fn env_name(name: &str) -> String {
    name.to_uppercase().replace('-', "_")
}

impl Proxy {
    /// The node this proxy runs on.
    pub(crate) fn set_node(&self, node: &str) {
        let _ = self.node.set(node.to_owned());
    }

    /// Pods have namespaces of their own, behind `gateway`.
    pub(crate) fn set_gateway(&self, gateway: std::net::Ipv4Addr) {
        let _ = self.gateway.set(gateway);
    }

    /// Follows the changes.
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// The Services and EndpointSlices as they are now.
    pub(crate) fn snapshot(&self) -> (Vec<Value>, Vec<Value>) {
        let services = self
            .services
            .lock()
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default();
        let slices = self
            .slices
            .lock()
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default();
        (services, slices)
    }

    /// The cluster DNS Service's ClusterIP, once the Service is known.
    pub(crate) fn dns_address(&self) -> Option<std::net::Ipv4Addr> {
        let services = self.services.lock().ok()?;
        let key = (DNS_SERVICE.0.to_owned(), DNS_SERVICE.1.to_owned());
        services
            .get(&key)?
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)?
            .parse()
            .ok()
    }

    /// Every Service port with a ClusterIP as the rules translate it: to its endpoints, an
    /// endpoint on loopback through the relay on `gateway`, the DNS Service's to the node's
    /// own DNS server there.
    pub(crate) fn service_ports(&self, gateway: std::net::Ipv4Addr) -> Vec<ServicePort> {
        let services = self.services.lock().map(|s| s.clone()).unwrap_or_default();
        let slices = self.slices_by_service();
        let mut ports = Vec::new();
        for ((namespace, name), service) in &services {
            let Some(ip) = service
                .pointer("/spec/clusterIP")
                .and_then(Value::as_str)
                .and_then(|ip| ip.parse::<std::net::Ipv4Addr>().ok())
            else {
                continue;
            };
            let dns = (namespace.as_str(), name.as_str()) == DNS_SERVICE;
            let affinity = affinity(service).map(|d| u32::try_from(d.as_secs()).unwrap_or(10800));
            for port in service
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(number) = port["port"].as_u64().and_then(|p| u16::try_from(p).ok()) else {
                    continue;
                };
                let port_name = port["name"].as_str().unwrap_or("").to_owned();
                let protocol = port["protocol"].as_str().unwrap_or("TCP").to_owned();
                let endpoints_of = |policy: &str| {
                    let target = Target {
                        namespace: namespace.clone(),
                        service: name.clone(),
                        port_name: port_name.clone(),
                        affinity: None,
                        local: local_policy(service, policy),
                    };
                    let mut endpoints: Vec<(std::net::Ipv4Addr, u16)> = Vec::new();
                    let own = slices
                        .get(&(namespace.clone(), name.clone()))
                        .map_or(&[][..], Vec::as_slice);
                    for endpoint in self.endpoints_in(own, &target) {
                        let IpAddr::V4(address) = endpoint.ip() else {
                            continue;
                        };
                        let pair = if address.is_loopback() {
                            (gateway, number)
                        } else {
                            (address, endpoint.port())
                        };
                        if !endpoints.contains(&pair) {
                            endpoints.push(pair);
                        }
                    }
                    endpoints
                };
                let endpoints = if dns {
                    if number == 53 {
                        vec![(gateway, 53)]
                    } else {
                        Vec::new()
                    }
                } else {
                    endpoints_of("internalTrafficPolicy")
                };
                ports.push(ServicePort {
                    name: format!("{namespace}/{name}:{port_name}"),
                    address: ip,
                    protocol: protocol.clone(),
                    port: number,
                    endpoints,
                    affinity,
                });
                // A NodePort at the node's own address on the pods' network, as kube-proxy
                // serves it on the node's addresses (the loopback one is the agent's own
                // listener): its endpoints as `externalTrafficPolicy` says.
                let node_port = port["nodePort"]
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok());
                if let Some(node_port) = node_port.filter(|p| *p > 0 && !dns) {
                    ports.push(ServicePort {
                        name: format!("{namespace}/{name}:{port_name} (node port)"),
                        address: gateway,
                        protocol,
                        port: node_port,
                        endpoints: endpoints_of("externalTrafficPolicy"),
                        affinity,
                    });
                }
            }
        }
        ports
    }

    /// The Service variables of a container in `namespace` (kube's `getServiceEnvVarMap`):
    /// all of the namespace's Services with a ClusterIP when `links`, and the `kubernetes`
    /// Service of `default` always.
    pub(crate) fn environment(&self, namespace: &str, links: bool) -> Vec<(String, String)> {
        let services = self.services.lock().map(|s| s.clone()).unwrap_or_default();
        let mut env = Vec::new();
        for ((ns, name), service) in &services {
            let wanted = (links && ns == namespace) || (ns == "default" && name == "kubernetes");
            let ip = service
                .pointer("/spec/clusterIP")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !wanted || ip.is_empty() || ip == "None" {
                continue;
            }
            let ports = service
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let Some(first) = ports.first() else { continue };
            let prefix = env_name(name);
            env.push((format!("{prefix}_SERVICE_HOST"), ip.to_owned()));
            env.push((format!("{prefix}_SERVICE_PORT"), first["port"].to_string()));
            for port in &ports {
                if let Some(port_name) = port["name"].as_str().filter(|n| !n.is_empty()) {
                    env.push((
                        format!("{prefix}_SERVICE_PORT_{}", env_name(port_name)),
                        port["port"].to_string(),
                    ));
                }
            }
            let protocol = first["protocol"].as_str().unwrap_or("TCP").to_lowercase();
            env.push((
                format!("{prefix}_PORT"),
                format!("{protocol}://{ip}:{}", first["port"]),
            ));
            for port in &ports {
                let protocol = port["protocol"].as_str().unwrap_or("TCP");
                let number = &port["port"];
                let base = format!("{prefix}_PORT_{number}_{protocol}");
                env.push((
                    base.clone(),
                    format!("{}://{ip}:{number}", protocol.to_lowercase()),
                ));
                env.push((format!("{base}_PROTO"), protocol.to_lowercase()));
                env.push((format!("{base}_PORT"), number.to_string()));
                env.push((format!("{base}_ADDR"), ip.to_owned()));
            }
        }
        env
    }

    /// The EndpointSlices as they are now, by namespace and Service: read once for a pass
    /// over every Service (not once for each of their ports).
    fn slices_by_service(&self) -> HashMap<(String, String), Vec<Value>> {
        let mut by_service: HashMap<(String, String), Vec<Value>> = HashMap::new();
        if let Ok(slices) = self.slices.lock() {
            for ((namespace, _), slice) in slices.iter() {
                if let Some(service) = slice
                    .pointer("/metadata/labels/kubernetes.io~1service-name")
                    .and_then(Value::as_str)
                {
                    by_service
                        .entry((namespace.clone(), service.to_owned()))
                        .or_default()
                        .push(slice.clone());
                }
            }
        }
        by_service
    }

    /// The ready endpoints (address and port) of a Service's port.
    fn endpoints(&self, target: &Target) -> Vec<SocketAddr> {
        let slices: Vec<Value> = self
            .slices
            .lock()
            .map(|slices| {
                slices
                    .iter()
                    .filter(|((ns, _), slice)| {
                        *ns == target.namespace
                            && slice
                                .pointer("/metadata/labels/kubernetes.io~1service-name")
                                .and_then(Value::as_str)
                                == Some(target.service.as_str())
                    })
                    .map(|(_, slice)| slice.clone())
                    .collect()
            })
            .unwrap_or_default();
        self.endpoints_in(&slices, target)
    }

    /// The ready endpoints of a Service's port in `slices`, that Service's EndpointSlices.
    fn endpoints_in(&self, slices: &[Value], target: &Target) -> Vec<SocketAddr> {
        let mut found = Vec::new();
        let mut terminating = Vec::new();
        for slice in slices {
            let Some(port) = slice["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"].as_str().unwrap_or("") == target.port_name)
                .and_then(|p| p["port"].as_u64())
                .and_then(|p| u16::try_from(p).ok())
            else {
                continue;
            };
            let node = self.node.get().map(String::as_str);
            for endpoint in slice["endpoints"].as_array().into_iter().flatten() {
                if target.local && endpoint["nodeName"].as_str() != node {
                    continue;
                }
                let ready = endpoint.pointer("/conditions/ready") != Some(&Value::Bool(false));
                // Serving while terminating: used only when no endpoint is ready (kube-proxy's
                // fallback for terminating endpoints).
                let serving = endpoint.pointer("/conditions/serving") == Some(&Value::Bool(true))
                    && endpoint.pointer("/conditions/terminating") == Some(&Value::Bool(true));
                if !ready && !serving {
                    continue;
                }
                for address in endpoint["addresses"].as_array().into_iter().flatten() {
                    if let Some(ip) = address.as_str().and_then(|a| a.parse::<IpAddr>().ok()) {
                        if ready {
                            found.push(SocketAddr::new(ip, port));
                        } else {
                            terminating.push(SocketAddr::new(ip, port));
                        }
                    }
                }
            }
        }
        if found.is_empty() {
            found = terminating;
        }
        found.sort();
        found
    }

    fn pick(&self, listen: SocketAddr, client: IpAddr, target: &Target) -> Option<SocketAddr> {
        let endpoints = self.endpoints(target);
        if endpoints.is_empty() {
            return None;
        }
        if let Some(timeout) = target.affinity
            && let Ok(mut sessions) = self.sessions.lock()
        {
            if let Some((chosen, at)) = sessions.get(&(listen, client)).copied()
                && at.elapsed() < timeout
                && endpoints.contains(&chosen)
            {
                sessions.insert((listen, client), (chosen, Instant::now()));
                return Some(chosen);
            }
            let chosen = endpoints[self.next() % endpoints.len()];
            sessions.insert((listen, client), (chosen, Instant::now()));
            return Some(chosen);
        }
        Some(endpoints[self.next() % endpoints.len()])
    }

    fn next(&self) -> usize {
        self.turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The listeners the Services call for now.
    fn wanted(&self) -> HashMap<SocketAddr, Target> {
        let services = self.services.lock().map(|s| s.clone()).unwrap_or_default();
        let slices = self.slices_by_service();
        let mut wanted = HashMap::new();
        for ((namespace, name), service) in services {
            let ip = service
                .pointer("/spec/clusterIP")
                .and_then(Value::as_str)
                .unwrap_or("");
            let Ok(ip) = ip.parse::<IpAddr>() else {
                continue;
            };
            // The DNS Service's address is the DNS server's own.
            if (namespace.as_str(), name.as_str()) == DNS_SERVICE {
                continue;
            }
            let affinity = affinity(&service);
            let gateway = self.gateway.get().copied();
            for port in service
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if port["protocol"].as_str().unwrap_or("TCP") != "TCP" {
                    continue;
                }
                let target = Target {
                    namespace: namespace.clone(),
                    service: name.clone(),
                    port_name: port["name"].as_str().unwrap_or("").to_owned(),
                    affinity,
                    local: local_policy(&service, "internalTrafficPolicy"),
                };
                if let Some(number) = port["port"].as_u64().and_then(|p| u16::try_from(p).ok()) {
                    match gateway {
                        None => {
                            wanted.insert(SocketAddr::new(ip, number), target.clone());
                        }
                        // Pods reach endpoints on the machine's loopback through a relay.
                        Some(gateway) => {
                            let own = slices
                                .get(&(namespace.clone(), name.clone()))
                                .map_or(&[][..], Vec::as_slice);
                            if self
                                .endpoints_in(own, &target)
                                .iter()
                                .any(|e| e.ip().is_loopback())
                            {
                                wanted.insert(
                                    SocketAddr::new(gateway.into(), number),
                                    target.clone(),
                                );
                            }
                        }
                    }
                }
                if let Some(node_port) = port["nodePort"]
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok())
                {
                    let external = Target {
                        local: local_policy(&service, "externalTrafficPolicy"),
                        ..target
                    };
                    wanted.insert(SocketAddr::from(([127, 0, 0, 1], node_port)), external);
                }
            }
        }
        wanted
    }

    /// Opens and closes listeners to match the Services.
    fn sync(self: &Arc<Self>) {
        let wanted = self.wanted();
        let Ok(mut listeners) = self.listeners.lock() else {
            return;
        };
        listeners.retain(|address, (target, task)| {
            let keep = wanted.get(address) == Some(target);
            if !keep {
                task.abort();
            }
            keep
        });
        for (address, target) in wanted {
            if listeners.contains_key(&address) {
                continue;
            }
            match listen(address) {
                Ok(listener) => {
                    let task = tokio::spawn(self.clone().serve(listener, address, target.clone()));
                    listeners.insert(address, (target, task));
                }
                Err(e) => tracing::warn!(%address, error = %e, "service proxy: cannot listen"),
            }
        }
    }

    async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        address: SocketAddr,
        target: Target,
    ) {
        loop {
            let Ok((mut inbound, client)) = listener.accept().await else {
                continue;
            };
            let Some(endpoint) = self.pick(address, client.ip(), &target) else {
                // No ready endpoint: the connection is refused, as kube-proxy's REJECT.
                drop(inbound);
                continue;
            };
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(endpoint).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    }

    fn stop(&self) {
        if let Ok(mut listeners) = self.listeners.lock() {
            for (_, (_, task)) in listeners.drain() {
                task.abort();
            }
        }
    }
}

fn listen(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(address)?;
    socket.listen(1024)
}

/// How long a client keeps its endpoint (`sessionAffinity: ClientIP`), if it does.
fn affinity(service: &Value) -> Option<Duration> {
    (service.pointer("/spec/sessionAffinity") == Some(&Value::from("ClientIP"))).then(|| {
        Duration::from_secs(
            service
                .pointer("/spec/sessionAffinityConfig/clientIP/timeoutSeconds")
                .and_then(Value::as_u64)
                .unwrap_or(10800),
        )
    })
}

/// Follows Services and EndpointSlices until `stopping`, keeping the listeners in step.
pub(crate) async fn run(
    proxy: Arc<Proxy>,
    client: kube::Client,
    stopping: tokio::sync::watch::Receiver<bool>,
) {
    crate::mirror::follow(
        vec![
            (
                crate::mirror::watch(Api::<Service>::all(client.clone())),
                &proxy.services,
            ),
            (
                crate::mirror::watch(Api::<EndpointSlice>::all(client)),
                &proxy.slices,
            ),
        ],
        || {
            proxy.version.send_modify(|v| *v += 1);
            proxy.sync();
        },
        stopping,
    )
    .await;
    proxy.stop();
}
