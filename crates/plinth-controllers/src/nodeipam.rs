//! The node IPAM controller (kube-controller-manager's `nodeipam` with
//! `--allocate-node-cidrs`): every Node gets a `/24` of the pod range, from which its agent
//! gives pods their addresses.

use plinth_core::At as _;
use std::collections::BTreeSet;

use futures::StreamExt;
use plinth_net::Cidr;
use plinth_registry::{Client, ListOptions, Part, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

/// The pods' range (kube-controller-manager's `--cluster-cidr`), handed out in `/24`s
/// (kube's `--node-cidr-mask-size`): `127.64.0.0/10` when pods share the machine's network,
/// else one chosen to miss the machine's networks (`10.244.0.0/16`, say).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterCidr(Cidr);

impl Default for ClusterCidr {
    fn default() -> Self {
        Self(Cidr::v4([127, 64, 0, 0], 10))
    }
}

impl ClusterCidr {
    /// An IPv4 range from `/8` to `/24`.
    ///
    /// # Errors
    /// Another range.
    pub fn parse(cidr: &str) -> Result<Self, String> {
        Cidr::parse(cidr)
            .filter(|c| (8..=24).contains(&c.bits()))
            .map(Self)
            .ok_or_else(|| {
                format!("--cluster-cidr {cidr:?}: an IPv4 range from /8 to /24 is needed (e.g. 10.244.0.0/16)")
            })
    }

    /// The range.
    pub fn range(self) -> Cidr {
        self.0
    }

    fn subnets(self) -> u64 {
        self.0.subnets(24)
    }

    fn subnet(self, index: u64) -> String {
        self.0
            .subnet(24, index)
            .map(|c| c.to_string())
            .unwrap_or_default()
    }
}

/// Starts the controller; it ends when `stopping` becomes true.
pub fn spawn_node_ipam(registry: Client, range: ClusterCidr, stopping: watch::Receiver<bool>) {
    tokio::spawn(run(registry, range, stopping));
}

async fn run(registry: Client, range: ClusterCidr, stopping: watch::Receiver<bool>) {
    loop {
        let Some((def, mut events)) = registry
            .watch_until_stopped(("", "nodes"), &stopping, "node IPAM controller")
            .await
        else {
            return;
        };
        while let Some(event) = events.next().await {
            if event.kind != "ADDED" {
                continue;
            }
            let node = event.object();
            let assigned = node
                .at("/spec/podCIDR")
                .and_then(Value::as_str)
                .is_some_and(|c| !c.is_empty());
            if assigned {
                continue;
            }
            let Ok(list) = registry.list(&def, None, &ListOptions::default()).await else {
                continue;
            };
            let used: BTreeSet<String> = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.at("/spec/podCIDR").and_then(Value::as_str))
                .map(str::to_owned)
                .collect();
            let Some(cidr) = (0..range.subnets())
                .map(|i| range.subnet(i))
                .find(|s| !used.contains(s))
            else {
                tracing::warn!("node IPAM: the pod range is used up");
                continue;
            };
            let name = plinth_core::meta::name(&node).unwrap_or("").to_owned();
            let written = registry
                .modify(
                    &def,
                    None,
                    &name,
                    Part::Main,
                    &WriteOptions::internal("kube-controller-manager"),
                    |current| {
                        if current
                            .at("/spec/podCIDR")
                            .and_then(Value::as_str)
                            .is_some_and(|c| !c.is_empty())
                        {
                            return Ok(false);
                        }
                        current["spec"]["podCIDR"] = json!(cidr);
                        current["spec"]["podCIDRs"] = json!([cidr]);
                        Ok(true)
                    },
                )
                .await;
            if let Err(e) = written {
                tracing::warn!(node = %name, error = %e.message, "node IPAM: podCIDR not written");
            }
        }
        if *stopping.borrow() {
            return;
        }
    }
}
