//! The node IPAM controller (kube-controller-manager's `nodeipam` with
//! `--allocate-node-cidrs`): every Node gets a `/24` of the pod range, from which its agent
//! gives pods their loopback addresses.

use std::collections::BTreeSet;

use futures::StreamExt;
use plinth_registry::{Client, ListOptions, Part, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

/// The pods' range (kube-controller-manager's `--cluster-cidr`): `127.64.0.0/10` by
/// default, handed out in `/24`s (`127.64.0.0/24` … `127.127.255.0/24`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterCidr {
    /// The second octet of the range's first address.
    first: u8,
    /// How many `/16`s it spans.
    count: u16,
}

impl Default for ClusterCidr {
    fn default() -> Self {
        Self {
            first: 64,
            count: 64,
        }
    }
}

impl ClusterCidr {
    /// A range `127.N.0.0/P` with `P` from 8 to 16.
    ///
    /// # Errors
    /// Another range.
    pub fn parse(cidr: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "--cluster-cidr {cidr:?}: a range in 127.0.0.0/8 from /8 to /16 is needed (e.g. 127.64.0.0/10)"
            )
        };
        let (ip, bits) = cidr.split_once('/').ok_or_else(bad)?;
        let ip: std::net::Ipv4Addr = ip.parse().map_err(|_| bad())?;
        let bits: u32 = bits.parse().map_err(|_| bad())?;
        let o = ip.octets();
        if o[0] != 127 || !(8..=16).contains(&bits) || o[2] != 0 || o[3] != 0 {
            return Err(bad());
        }
        let count = 1u16 << (16 - bits);
        if u16::from(o[1]) % count != 0 {
            return Err(bad());
        }
        Ok(Self { first: o[1], count })
    }

    fn subnets(self) -> u32 {
        u32::from(self.count) * 256
    }

    fn subnet(self, index: u32) -> String {
        format!(
            "127.{}.{}.0/24",
            u32::from(self.first) + index / 256,
            index % 256
        )
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
                .pointer("/spec/podCIDR")
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
                .filter_map(|n| n.pointer("/spec/podCIDR").and_then(Value::as_str))
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
                            .pointer("/spec/podCIDR")
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
