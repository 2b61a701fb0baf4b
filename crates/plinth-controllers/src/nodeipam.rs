//! The node IPAM controller (kube-controller-manager's `nodeipam` with
//! `--allocate-node-cidrs`): every Node gets a `/24` of the pod range, from which its agent
//! gives pods their loopback addresses.

use std::collections::BTreeSet;

use futures::StreamExt;
use plinth_apiserver::registry::{ListOptions, Part, Registry, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

/// The pods' range: `127.64.0.0/10`, in `/24`s (`127.64.0.0/24` … `127.127.255.0/24`).
const FIRST_SECOND_OCTET: u32 = 64;
const SUBNETS: u32 = 64 * 256;

fn subnet(index: u32) -> String {
    format!(
        "127.{}.{}.0/24",
        FIRST_SECOND_OCTET + index / 256,
        index % 256
    )
}

/// Starts the controller; it ends when `stopping` becomes true.
pub fn spawn_node_ipam(registry: Registry, stopping: watch::Receiver<bool>) {
    tokio::spawn(run(registry, stopping));
}

async fn run(registry: Registry, stopping: watch::Receiver<bool>) {
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
            let Some(cidr) = (0..SUBNETS).map(subnet).find(|s| !used.contains(s)) else {
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
