//! Cluster DNS: the zone of Services and endpoints (see [`zone`]) served over UDP and TCP at
//! one address, as CoreDNS serves it for kube-dns; names outside the zone are asked of the
//! machine's own resolvers (`/etc/resolv.conf`) and their answers passed back, `SERVFAIL`
//! when none answers.

pub mod wire;
pub mod zone;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use wire::{Answer, rcode};
use zone::{Outcome, Zone};

/// The zone as it is now, swapped whole when Services or endpoints change.
#[derive(Clone, Debug, Default)]
pub struct Current(Arc<RwLock<Arc<Zone>>>);

impl Current {
    /// Replaces the zone.
    pub fn set(&self, zone: Zone) {
        if let Ok(mut current) = self.0.write() {
            *current = Arc::new(zone);
        }
    }

    fn get(&self) -> Arc<Zone> {
        self.0.read().map(|z| z.clone()).unwrap_or_default()
    }
}

/// What one message gets.
enum Reply {
    /// These bytes.
    Now(Vec<u8>),
    /// Whatever the machine's resolvers say.
    Forward,
    /// Nothing (it could not even be read as a query's header).
    Nothing,
}

/// The UDP payload every client takes (RFC 1035).
const CLASSIC_UDP: usize = 512;

fn reply(zone: &Zone, message: &[u8], udp: bool) -> Reply {
    let query = match wire::parse_query(message) {
        Ok(query) => query,
        Err(_) => {
            return wire::error_response(message, rcode::FORMERR)
                .map_or(Reply::Nothing, Reply::Now);
        }
    };
    if query.opcode != 0 {
        return wire::error_response(message, rcode::NOTIMP).map_or(Reply::Nothing, Reply::Now);
    }
    let limit = if udp {
        query.udp_size.map_or(CLASSIC_UDP, usize::from)
    } else {
        usize::from(u16::MAX)
    };
    if query.question.class != 1 {
        let refused = Answer {
            rcode: rcode::REFUSED,
            ..Answer::default()
        };
        return Reply::Now(wire::write_response(&query, &refused, limit));
    }
    match zone.answer(&query.question) {
        Outcome::Answer(answer) => Reply::Now(wire::write_response(&query, &answer, limit)),
        Outcome::Forward => Reply::Forward,
    }
}

/// The nameservers of the machine's `/etc/resolv.conf` (port 53).
pub fn machine_resolvers() -> Vec<SocketAddr> {
    std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("nameserver"))
        .filter_map(|a| a.trim().parse::<std::net::IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// Asks `upstreams` in turn over UDP; their first answer, or `SERVFAIL`.
async fn forward(message: &[u8], upstreams: &[SocketAddr]) -> Option<Vec<u8>> {
    for upstream in upstreams {
        let local: SocketAddr = if upstream.is_ipv4() {
            SocketAddr::from(([0, 0, 0, 0], 0))
        } else {
            SocketAddr::from(([0u16; 8], 0))
        };
        let Ok(socket) = tokio::net::UdpSocket::bind(local).await else {
            continue;
        };
        if socket.send_to(message, upstream).await.is_err() {
            continue;
        }
        let mut buffer = vec![0u8; 65535];
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_secs(2), socket.recv_from(&mut buffer)).await
        {
            buffer.truncate(n);
            return Some(buffer);
        }
    }
    wire::error_response(message, rcode::SERVFAIL)
}

fn reuse_socket(address: SocketAddr, kind: socket2::Type) -> std::io::Result<socket2::Socket> {
    let domain = if address.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let socket = socket2::Socket::new(domain, kind, None)?;
    socket.set_reuse_address(true)?;
    // Several agents of one machine may serve the same address.
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    Ok(socket)
}

/// A DNS server bound (UDP and TCP) at an address, ready to serve.
pub struct Server {
    udp: tokio::net::UdpSocket,
    tcp: tokio::net::TcpListener,
    zone: Current,
    upstreams: Arc<Vec<SocketAddr>>,
}

impl Server {
    /// Binds `address` over UDP and TCP, answering from `zone` and forwarding the rest to
    /// `upstreams`.
    ///
    /// # Errors
    /// When either socket cannot be bound.
    pub fn bind(
        address: SocketAddr,
        zone: Current,
        upstreams: Vec<SocketAddr>,
    ) -> std::io::Result<Self> {
        let udp = reuse_socket(address, socket2::Type::DGRAM)?;
        let udp = tokio::net::UdpSocket::from_std(udp.into())?;
        let tcp = reuse_socket(address, socket2::Type::STREAM)?;
        tcp.listen(1024)?;
        let tcp = tokio::net::TcpListener::from_std(tcp.into())?;
        Ok(Self {
            udp,
            tcp,
            zone,
            upstreams: Arc::new(upstreams),
        })
    }

    /// Serves until `stopping` becomes true.
    pub async fn serve(self, mut stopping: watch::Receiver<bool>) {
        let udp = Arc::new(self.udp);
        let zone = self.zone.clone();
        let upstreams = self.upstreams.clone();
        let datagrams = {
            let udp = udp.clone();
            async move {
                let mut buffer = vec![0u8; 65535];
                loop {
                    let Ok((n, from)) = udp.recv_from(&mut buffer).await else {
                        continue;
                    };
                    let message = &buffer[..n];
                    match reply(&zone.get(), message, true) {
                        Reply::Now(bytes) => {
                            let _ = udp.send_to(&bytes, from).await;
                        }
                        Reply::Forward => {
                            let (udp, message, upstreams) =
                                (udp.clone(), message.to_vec(), upstreams.clone());
                            tokio::spawn(async move {
                                if let Some(bytes) = forward(&message, &upstreams).await {
                                    let _ = udp.send_to(&bytes, from).await;
                                }
                            });
                        }
                        Reply::Nothing => {}
                    }
                }
            }
        };
        let zone = self.zone.clone();
        let upstreams = self.upstreams.clone();
        let tcp = self.tcp;
        let streams = async move {
            loop {
                let Ok((stream, _)) = tcp.accept().await else {
                    continue;
                };
                tokio::spawn(serve_stream(stream, zone.clone(), upstreams.clone()));
            }
        };
        tokio::select! {
            () = datagrams => {},
            () = streams => {},
            _ = stopping.wait_for(|s| *s) => {},
        }
    }
}

/// Answers the length-prefixed queries of one TCP connection until it closes (or idles 10 s).
async fn serve_stream(
    mut stream: tokio::net::TcpStream,
    zone: Current,
    upstreams: Arc<Vec<SocketAddr>>,
) {
    loop {
        let mut length = [0u8; 2];
        let read =
            tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut length)).await;
        if !matches!(read, Ok(Ok(_))) {
            return;
        }
        let mut message = vec![0u8; usize::from(u16::from_be_bytes(length))];
        if stream.read_exact(&mut message).await.is_err() {
            return;
        }
        let bytes = match reply(&zone.get(), &message, false) {
            Reply::Now(bytes) => bytes,
            Reply::Forward => match forward(&message, &upstreams).await {
                Some(bytes) => bytes,
                None => return,
            },
            Reply::Nothing => return,
        };
        let Ok(length) = u16::try_from(bytes.len()) else {
            return;
        };
        let mut out = length.to_be_bytes().to_vec();
        out.extend_from_slice(&bytes);
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wire::{Data, kind};

    #[tokio::test]
    async fn answers_over_udp_and_tcp() {
        let current = Current::default();
        let service = json!({"metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.20", "ports": [{"port": 80}]}});
        current.set(Zone::build("cluster.local", &[&service], &[], &[]));
        let server =
            Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), current, Vec::new()).unwrap();
        let udp_at = server.udp.local_addr().unwrap();
        let tcp_at = server.tcp.local_addr().unwrap();
        let (_stop, stopping) = watch::channel(false);
        tokio::spawn(server.serve(stopping));
        let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        client
            .send_to(
                &wire::write_query(9, "web.default.svc.cluster.local", kind::A),
                udp_at,
            )
            .await
            .unwrap();
        let mut buffer = vec![0u8; 512];
        let n = client.recv(&mut buffer).await.unwrap();
        let (code, _, answers) = wire::read_answers(&buffer[..n]).unwrap();
        assert_eq!(code, rcode::NOERROR);
        assert_eq!(answers[0].1, Data::A("10.96.0.20".parse().unwrap()));
        // Outside the zone with no resolver to ask: SERVFAIL.
        client
            .send_to(&wire::write_query(10, "example.org", kind::A), udp_at)
            .await
            .unwrap();
        let n = client.recv(&mut buffer).await.unwrap();
        assert_eq!(wire::read_answers(&buffer[..n]).unwrap().0, rcode::SERVFAIL);
        let mut stream = tokio::net::TcpStream::connect(tcp_at).await.unwrap();
        let query = wire::write_query(11, "nope.default.svc.cluster.local", kind::A);
        let mut framed = (query.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&query);
        stream.write_all(&framed).await.unwrap();
        let mut length = [0u8; 2];
        stream.read_exact(&mut length).await.unwrap();
        let mut answer = vec![0u8; usize::from(u16::from_be_bytes(length))];
        stream.read_exact(&mut answer).await.unwrap();
        assert_eq!(wire::read_answers(&answer).unwrap().0, rcode::NXDOMAIN);
    }
}
