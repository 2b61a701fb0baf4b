//! `hostPort`, as kube's portmap CNI plugin serves it: a container port with a host port is
//! reached at the node's address (`127.0.0.1`; a loopback `hostIP` when the port names one)
//! and that port — here a listener of the agent's that passes each connection on to the
//! pod's address and container port, open while the pod runs. TCP only.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Mutex;

use serde_json::Value;

/// The listeners of each pod (by uid).
#[derive(Debug, Default)]
pub(crate) struct HostPorts {
    open: Mutex<HashMap<String, Vec<tokio::task::JoinHandle<()>>>>,
}

/// The host ports of a pod spec: where to listen, and the container port behind it.
fn wanted(spec: &Value) -> Vec<(SocketAddr, u16)> {
    spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
        .filter(|p| p["protocol"].as_str().unwrap_or("TCP") == "TCP")
        .filter_map(|p| {
            let host_port = u16::try_from(p["hostPort"].as_u64()?).ok()?;
            let container_port = u16::try_from(p["containerPort"].as_u64()?).ok()?;
            let ip = match p["hostIP"].as_str() {
                None | Some("" | "0.0.0.0") => IpAddr::V4(Ipv4Addr::LOCALHOST),
                Some(ip) => ip.parse().ok().filter(IpAddr::is_loopback)?,
            };
            (host_port > 0).then_some((SocketAddr::new(ip, host_port), container_port))
        })
        .collect()
}

impl HostPorts {
    /// Serves pod `uid`'s host ports (its `spec`) until [`HostPorts::close`]; why each port
    /// that could not be opened was not.
    pub(crate) fn open(&self, uid: &str, pod_ip: IpAddr, spec: &Value) -> Vec<String> {
        let mut problems = Vec::new();
        let mut tasks = Vec::new();
        for (address, container_port) in wanted(spec) {
            let listener = std::net::TcpListener::bind(address)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .and_then(tokio::net::TcpListener::from_std);
            let listener = match listener {
                Ok(listener) => listener,
                Err(e) => {
                    problems.push(format!("host port {address}: {e}"));
                    continue;
                }
            };
            let target = SocketAddr::new(pod_ip, container_port);
            tasks.push(tokio::spawn(async move {
                loop {
                    let Ok((mut inbound, _)) = listener.accept().await else {
                        continue;
                    };
                    tokio::spawn(async move {
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                }
            }));
        }
        if let Ok(mut open) = self.open.lock() {
            open.insert(uid.to_owned(), tasks);
        }
        problems
    }

    /// Stops serving pod `uid`'s host ports.
    pub(crate) fn close(&self, uid: &str) {
        let tasks = self.open.lock().ok().and_then(|mut o| o.remove(uid));
        for task in tasks.into_iter().flatten() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ports_listen_on_loopback_only() {
        let spec = serde_json::json!({"containers": [{"ports": [
            {"containerPort": 80, "hostPort": 8080},
            {"containerPort": 81, "hostPort": 8081, "hostIP": "127.0.0.5"},
            {"containerPort": 82, "hostPort": 8082, "hostIP": "192.0.2.2"},
            {"containerPort": 53, "hostPort": 5353, "protocol": "UDP"},
            {"containerPort": 90},
        ]}]});
        assert_eq!(
            wanted(&spec),
            [
                (
                    "127.0.0.1:8080".parse().unwrap_or_else(|_| unreachable!()),
                    80
                ),
                (
                    "127.0.0.5:8081".parse().unwrap_or_else(|_| unreachable!()),
                    81
                ),
            ]
        );
    }
}
