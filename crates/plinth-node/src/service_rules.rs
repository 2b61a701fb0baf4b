//! kube-proxy's nftables mode, and a NetworkPolicy plugin's rules, for a node whose pods
//! have namespaces of their own: the agent's table rewritten (in one transaction) whenever
//! Services, endpoints, pods, namespaces or policies change, a few milliseconds after the
//! change so that a burst is written once.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::network::Private;
use crate::policy::Policies;
use crate::proxy::Proxy;

/// How long a change waits for the ones right behind it (the DNS zone waits as long).
pub(crate) const SETTLE: Duration = Duration::from_millis(20);

/// Keeps the rules in step with `proxy` until `stopping`; the table then goes with the rest
/// of the node's network.
pub(crate) async fn run(
    proxy: Arc<Proxy>,
    policies: Arc<Policies>,
    private: Arc<Private>,
    mut stopping: watch::Receiver<bool>,
) {
    let network = private.rules();
    let mut changes = proxy.subscribe();
    let mut policy_changes = policies.subscribe();
    let mut written = String::new();
    loop {
        let rules = plinth_net::rules::Rules {
            ports: proxy.service_ports(private.gateway),
            isolated: policies.isolated(private.subnet, private.gateway),
        };
        let script = plinth_net::rules::render(&network, &rules);
        if script != written {
            match plinth_net::rules::apply(&script).await {
                Ok(()) => written = script,
                Err(e) => tracing::warn!(error = %e, "service rules not written"),
            }
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            changed = policy_changes.changed() => if changed.is_err() { return },
            _ = stopping.wait_for(|s| *s) => return,
        }
        tokio::time::sleep(SETTLE).await;
    }
}
