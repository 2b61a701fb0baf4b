//! `hostPort`, as kube's portmap CNI plugin serves it: a container port with a host port is
//! reached at the node's address (`127.0.0.1`; a loopback `hostIP`, or the node's address on
//! the pods' network, when the port names one) and that port — here a listener of the agent's that passes each connection on to the
//! pod's address and container port, open while the pod runs. TCP: each connection passed on;
//! UDP: each client's datagrams sent on from a socket of its own (a session, forgotten after
//! [`UDP_IDLE`] without traffic), the pod's answers sent back to the client.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// The listeners of each pod (by uid).
#[derive(Debug, Default)]
pub(crate) struct HostPorts {
    open: Mutex<HashMap<String, Vec<tokio::task::JoinHandle<()>>>>,
    /// The host ports each admitted pod (by uid) claims: protocol, address.
    claims: Mutex<HashMap<String, Vec<(Protocol, SocketAddr)>>>,
    /// The node's address on the pods' network (its bridge's), where pods have their own.
    node_address: std::sync::OnceLock<Ipv4Addr>,
}

/// How long a UDP client's session lasts without a datagram either way (kube-proxy's
/// userspace UDP timeout).
const UDP_IDLE: Duration = Duration::from_secs(30);

/// A host port's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Tcp,
    Udp,
}

/// The host ports of a pod spec: where to listen (a `hostIP` the node has: a loopback one,
/// or `node_address`), and the container port behind it.
fn wanted(spec: &Value, node_address: Option<Ipv4Addr>) -> Vec<(Protocol, SocketAddr, u16)> {
    spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| {
            let protocol = match p["protocol"].as_str().unwrap_or("TCP") {
                "TCP" => Protocol::Tcp,
                "UDP" => Protocol::Udp,
                _ => return None,
            };
            let host_port = u16::try_from(p["hostPort"].as_u64()?).ok()?;
            let container_port = u16::try_from(p["containerPort"].as_u64()?).ok()?;
            let ip = match p["hostIP"].as_str() {
                None | Some("" | "0.0.0.0") => IpAddr::V4(Ipv4Addr::LOCALHOST),
                Some(ip) => ip.parse().ok().filter(|ip: &IpAddr| {
                    ip.is_loopback() || Some(*ip) == node_address.map(IpAddr::V4)
                })?,
            };
            (host_port > 0).then_some((protocol, SocketAddr::new(ip, host_port), container_port))
        })
        .collect()
}

impl HostPorts {
    /// Serves host ports that name `address` (the node's on the pods' network) there too.
    pub(crate) fn set_node_address(&self, address: Ipv4Addr) {
        let _ = self.node_address.set(address);
    }

    fn wanted(&self, spec: &Value) -> Vec<(Protocol, SocketAddr, u16)> {
        wanted(spec, self.node_address.get().copied())
    }

    /// Whether pod `uid`'s `spec` wants a host port another pod of this node holds (the
    /// kubelet's `NodePorts` admission): the same protocol and port, on the same address or
    /// with either on all of them.
    pub(crate) fn conflicts(&self, uid: &str, spec: &Value) -> bool {
        let Ok(claims) = self.claims.lock() else {
            return false;
        };
        self.wanted(spec).iter().any(|(protocol, address, _)| {
            claims
                .iter()
                .filter(|(owner, _)| owner.as_str() != uid)
                .flat_map(|(_, held)| held)
                .any(|(p, a)| {
                    p == protocol
                        && a.port() == address.port()
                        && (a.ip() == address.ip() || a.ip().is_unspecified())
                })
        })
    }

    /// Records pod `uid`'s host ports as its own (admitted) until [`HostPorts::close`].
    pub(crate) fn claim(&self, uid: &str, spec: &Value) {
        let held = self
            .wanted(spec)
            .into_iter()
            .map(|(p, a, _)| (p, a))
            .collect();
        if let Ok(mut claims) = self.claims.lock() {
            claims.insert(uid.to_owned(), held);
        }
    }

    /// Serves pod `uid`'s host ports (its `spec`) until [`HostPorts::close`]; why each port
    /// that could not be opened was not.
    pub(crate) fn open(&self, uid: &str, pod_ip: IpAddr, spec: &Value) -> Vec<String> {
        let mut problems = Vec::new();
        let mut tasks = Vec::new();
        for (protocol, address, container_port) in self.wanted(spec) {
            let target = SocketAddr::new(pod_ip, container_port);
            let task = match protocol {
                Protocol::Tcp => std::net::TcpListener::bind(address)
                    .and_then(|l| l.set_nonblocking(true).map(|()| l))
                    .and_then(tokio::net::TcpListener::from_std)
                    .map(|listener| tokio::spawn(relay_tcp(listener, target))),
                Protocol::Udp => std::net::UdpSocket::bind(address)
                    .and_then(|s| s.set_nonblocking(true).map(|()| s))
                    .and_then(tokio::net::UdpSocket::from_std)
                    .map(|socket| tokio::spawn(relay_udp(socket, target))),
            };
            match task {
                Ok(task) => tasks.push(task),
                Err(e) => problems.push(format!(
                    "host port {address}/{}: {e}",
                    if protocol == Protocol::Tcp {
                        "TCP"
                    } else {
                        "UDP"
                    }
                )),
            }
        }
        if let Ok(mut open) = self.open.lock() {
            open.insert(uid.to_owned(), tasks);
        }
        problems
    }

    /// Stops serving pod `uid`'s host ports.
    pub(crate) fn close(&self, uid: &str) {
        if let Ok(mut claims) = self.claims.lock() {
            claims.remove(uid);
        }
        let tasks = self.open.lock().ok().and_then(|mut o| o.remove(uid));
        for task in tasks.into_iter().flatten() {
            task.abort();
        }
    }
}

/// Passes each connection to `listener` on to `target`.
async fn relay_tcp(listener: tokio::net::TcpListener, target: SocketAddr) {
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

/// Passes the datagrams arriving at `socket` on to `target`, each client's from a socket of
/// its own, and the answers back. Aborted, its sessions end with it.
async fn relay_udp(socket: tokio::net::UdpSocket, target: SocketAddr) {
    let socket = Arc::new(socket);
    let mut sessions: HashMap<SocketAddr, Arc<tokio::net::UdpSocket>> = HashMap::new();
    let mut running = tokio::task::JoinSet::new();
    let (ended, mut ends) = tokio::sync::mpsc::unbounded_channel::<SocketAddr>();
    let mut buffer = vec![0u8; 65_536];
    loop {
        let (len, client) = tokio::select! {
            received = socket.recv_from(&mut buffer) => match received {
                Ok(received) => received,
                Err(_) => continue,
            },
            Some(client) = ends.recv() => {
                sessions.remove(&client);
                continue;
            }
        };
        while running.try_join_next().is_some() {}
        let upstream = match sessions.get(&client) {
            Some(upstream) => upstream.clone(),
            None => {
                let local = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
                let Ok(upstream) = tokio::net::UdpSocket::bind(local).await else {
                    continue;
                };
                if upstream.connect(target).await.is_err() {
                    continue;
                }
                let upstream = Arc::new(upstream);
                sessions.insert(client, upstream.clone());
                let (answer_to, from, ended) = (socket.clone(), upstream.clone(), ended.clone());
                running.spawn(async move {
                    let mut buffer = vec![0u8; 65_536];
                    while let Ok(Ok(len)) =
                        tokio::time::timeout(UDP_IDLE, from.recv(&mut buffer)).await
                    {
                        let _ = answer_to.send_to(&buffer[..len], client).await;
                    }
                    let _ = ended.send(client);
                });
                upstream
            }
        };
        let _ = upstream.send(&buffer[..len]).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ports_listen_on_loopback_and_the_nodes_own_address_only() {
        let spec = serde_json::json!({"containers": [{"ports": [
            {"containerPort": 80, "hostPort": 8080},
            {"containerPort": 81, "hostPort": 8081, "hostIP": "127.0.0.5"},
            {"containerPort": 82, "hostPort": 8082, "hostIP": "192.0.2.2"},
            {"containerPort": 53, "hostPort": 5353, "protocol": "UDP"},
            {"containerPort": 90},
            {"containerPort": 132, "hostPort": 9132, "protocol": "SCTP"},
        ]}]});
        assert_eq!(
            wanted(&spec, None),
            [
                (
                    Protocol::Tcp,
                    "127.0.0.1:8080".parse().unwrap_or_else(|_| unreachable!()),
                    80
                ),
                (
                    Protocol::Tcp,
                    "127.0.0.5:8081".parse().unwrap_or_else(|_| unreachable!()),
                    81
                ),
                (
                    Protocol::Udp,
                    "127.0.0.1:5353".parse().unwrap_or_else(|_| unreachable!()),
                    53
                ),
            ]
        );
        // The node's own address on the pods' network is served too.
        let on_node = wanted(&spec, Some(Ipv4Addr::new(192, 0, 2, 2)));
        assert!(on_node.contains(&(
            Protocol::Tcp,
            "192.0.2.2:8082".parse().unwrap_or_else(|_| unreachable!()),
            82
        )));
        assert_eq!(on_node.len(), 4);
    }
}
