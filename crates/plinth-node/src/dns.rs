//! The node's cluster DNS server: the zone of the Services and endpoints the service proxy
//! follows, rebuilt a few milliseconds after they change, served at the node's gateway
//! (pods with namespaces of their own reach it through the DNS Service's rules) or, where
//! pods share the machine's network, at the DNS Service's ClusterIP itself.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use plinth_net::Cidr;
use plinth_net::dns::{Current, Server, zone::Zone};
use serde_json::Value;
use tokio::sync::watch;

use crate::network::DOMAIN;
use crate::proxy::Proxy;

fn rebuild(proxy: &Proxy, current: &Current, ranges: &[Cidr]) {
    let (services, slices) = proxy.snapshot();
    let services: Vec<&Value> = services.iter().collect();
    let slices: Vec<&Value> = slices.iter().collect();
    current.set(Zone::build(DOMAIN, &services, &slices, ranges));
}

/// Serves DNS at `at` (or, without one, at the DNS Service's address once it is known) until
/// `stopping`; `ranges` are those whose reverse names are the cluster's.
pub(crate) async fn run(
    proxy: Arc<Proxy>,
    at: Option<IpAddr>,
    ranges: Vec<Cidr>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut changes = proxy.subscribe();
    let address = match at {
        Some(address) => address,
        None => loop {
            if let Some(address) = proxy.dns_address() {
                break IpAddr::V4(address);
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                _ = stopping.wait_for(|s| *s) => return,
            }
        },
    };
    let at = SocketAddr::new(address, 53);
    let current = Current::default();
    rebuild(&proxy, &current, &ranges);
    // Never ask ourselves.
    let upstreams: Vec<SocketAddr> = plinth_net::dns::machine_resolvers()
        .into_iter()
        .filter(|u| u.ip() != address)
        .collect();
    let server = match Server::bind(at, current.clone(), upstreams) {
        Ok(server) => server,
        Err(e) => {
            tracing::warn!(address = %at, error = %e, "cluster DNS not served here");
            return;
        }
    };
    proxy.dns_served.store(true, Ordering::SeqCst);
    let serving = tokio::spawn(server.serve(stopping.clone()));
    loop {
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { break },
            _ = stopping.wait_for(|s| *s) => break,
        }
        tokio::time::sleep(crate::service_rules::SETTLE).await;
        rebuild(&proxy, &current, &ranges);
    }
    proxy.dns_served.store(false, Ordering::SeqCst);
    let _ = serving.await;
}
