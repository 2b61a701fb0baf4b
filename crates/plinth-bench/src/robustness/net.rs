//! A network of namespaces for partitions, made with `ip` and removed with the run: every etcd
//! member and every server in a network namespace of its own. Two bridges this run owns join
//! them: on the *etcd* bridge the members and the servers (no address on this machine, so it
//! routes nowhere), on the *client* bridge the servers and this machine (which reaches the
//! servers through it). Cutting a member's link isolates it from everyone; cutting a server's
//! etcd link leaves it answering its clients but cut off from etcd.
//!
//! Names carry this process's PID (`plrb<pid>…`), so runs side by side do not meet and what a
//! dead run left is known by its PID and removed by the next.

use std::net::Ipv4Addr;
use std::process::Command;

use plinth_net::cidr::{Cidr, machine_networks};

use crate::common::Error;

/// One namespace: its name and its addresses on the two bridges.
#[derive(Clone, Debug)]
pub(crate) struct Host {
    /// The namespace's name (`ip netns exec` takes it).
    pub(crate) netns: String,
    /// The address on the etcd bridge.
    pub(crate) etcd_ip: Ipv4Addr,
    /// The address on the client bridge (servers only).
    pub(crate) client_ip: Option<Ipv4Addr>,
    /// The device on the etcd bridge (this machine's end).
    etcd_link: String,
}

/// The namespaces and bridges of one run; removed when dropped.
pub(crate) struct Network {
    pub(crate) members: Vec<Host>,
    pub(crate) servers: Vec<Host>,
    made: Vec<String>,
}

fn ip(args: &[&str]) -> Result<(), Error> {
    let output = Command::new("ip").args(args).output()?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into())
    }
}

/// Whether `name` is a `plrb<pid>…` name of a run whose process is gone.
fn dead_runs_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("plrb") else {
        return false;
    };
    let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
    !pid.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes what runs whose process is gone left behind (their names carry their PID): links
/// first (deleting a veth's end here deletes its peer at once, where a deleted namespace's
/// veths go later, when the kernel gets round to it), then namespaces.
fn remove_leftovers() {
    if let Ok(output) = Command::new("ip").args(["-o", "link", "show"]).output() {
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            // "1840: plrb16536m0e@if2: <…>"
            let name = line.split(':').nth(1).unwrap_or("").trim();
            let name = name.split('@').next().unwrap_or("");
            if dead_runs_name(name) {
                let _ = ip(&["link", "delete", name]);
            }
        }
    }
    if let Ok(output) = Command::new("ip").args(["netns", "list"]).output() {
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if dead_runs_name(name) {
                let _ = ip(&["netns", "delete", name]);
            }
        }
    }
}

/// A `/24` for the run that none of this machine's routes touch.
fn free_range() -> Result<Cidr, Error> {
    let taken = machine_networks();
    let start = u64::from(std::process::id() % 200);
    (0..200)
        .map(|n| (start + n) % 200)
        .filter_map(|n| Cidr::new(Ipv4Addr::new(10, 250, n as u8, 0), 24))
        .find(|range| !taken.iter().any(|t| t.overlaps(*range)))
        .ok_or_else(|| "no free /24 in 10.250.0.0/16 for the partition network".into())
}

impl Network {
    /// Makes `members` member namespaces and `servers` server namespaces.
    pub(crate) fn make(members: usize, servers: usize) -> Result<Network, Error> {
        remove_leftovers();
        let range = free_range()?;
        let octets = range.network().octets();
        let at = |n: u8| Ipv4Addr::new(octets[0], octets[1], octets[2], n);
        let tag = format!("plrb{}", std::process::id());
        let mut network = Network {
            members: Vec::new(),
            servers: Vec::new(),
            made: Vec::new(),
        };
        let (client_bridge, etcd_bridge) = (format!("{tag}c"), format!("{tag}e"));
        for bridge in [&client_bridge, &etcd_bridge] {
            ip(&["link", "add", bridge, "type", "bridge"])?;
            network.made.push(bridge.clone());
            ip(&["link", "set", bridge, "up"])?;
        }
        // This machine's end of the client bridge: 10.250.N.1/25 (servers at .10 and up).
        ip(&[
            "addr",
            "add",
            &format!("{}/25", at(1)),
            "dev",
            &client_bridge,
        ])?;
        let mut host = |name: String, etcd_ip: Ipv4Addr, client_ip: Option<Ipv4Addr>| {
            ip(&["netns", "add", &name])?;
            network.made.push(format!("netns:{name}"));
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
            let suffix = name.rsplit('-').next().unwrap_or("x");
            let mut links = vec![(format!("{tag}{suffix}e"), &etcd_bridge, etcd_ip, "eth0")];
            if let Some(client_ip) = client_ip {
                links.push((format!("{tag}{suffix}c"), &client_bridge, client_ip, "eth1"));
            }
            for (outside, bridge, address, inside) in &links {
                ip(&[
                    "link", "add", outside, "type", "veth", "peer", "name", inside, "netns", &name,
                ])?;
                network.made.push(outside.clone());
                ip(&["link", "set", outside, "master", bridge, "up"])?;
                ip(&[
                    "-n",
                    &name,
                    "addr",
                    "add",
                    &format!("{address}/25"),
                    "dev",
                    inside,
                ])?;
                ip(&["-n", &name, "link", "set", inside, "up"])?;
            }
            Ok::<Host, Error>(Host {
                netns: name,
                etcd_ip,
                client_ip,
                etcd_link: links[0].0.clone(),
            })
        };
        let mut members_made = Vec::new();
        for i in 0..members {
            members_made.push(host(format!("{tag}-m{i}"), at(130 + i as u8), None)?);
        }
        let mut servers_made = Vec::new();
        for j in 0..servers {
            servers_made.push(host(
                format!("{tag}-s{j}"),
                at(140 + j as u8),
                Some(at(10 + j as u8)),
            )?);
        }
        network.members = members_made;
        network.servers = servers_made;
        Ok(network)
    }

    /// Cuts (`false`) or restores (`true`) a host's link to the etcd bridge.
    pub(crate) fn link(host: &Host, up: bool) -> Result<(), Error> {
        ip(&[
            "link",
            "set",
            &host.etcd_link,
            if up { "up" } else { "down" },
        ])
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // In the reverse of making: each host's veths (deleted here, so they are gone when this
        // returns; a deleted namespace's veths go only when the kernel gets round to it), its
        // namespace, and last the bridges.
        for made in self.made.iter().rev() {
            match made.strip_prefix("netns:") {
                Some(name) => {
                    let _ = ip(&["netns", "delete", name]);
                }
                None => {
                    let _ = ip(&["link", "delete", made]);
                }
            }
        }
    }
}
