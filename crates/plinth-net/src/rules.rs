//! The rules a kube-proxy (nftables mode) writes, rendered as one nftables table of the
//! agent's and replaced in one transaction: Service addresses translated to a ready
//! endpoint (at random, or the one a client had while `sessionAffinity: ClientIP` lasts),
//! hairpin connections (a pod reaching itself through its Service) masqueraded, connections
//! to a Service address nothing translated (no endpoints) refused, ICMP redirects on the
//! bridge dropped, pods kept from reaching anything but pods and the node, and the pods
//! NetworkPolicies isolate held to what they allow (see [`crate::policy`]).

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use crate::cidr::Cidr;

/// The mark of connections to masquerade (kube-proxy's `0x4000`).
const MASQUERADE: u32 = 0x4000;

/// One Service port as the rules see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    /// `namespace/name:port-name`, for the rule's comment.
    pub name: String,
    /// The ClusterIP.
    pub address: Ipv4Addr,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: String,
    /// The Service's port.
    pub port: u16,
    /// Where connections go (ready endpoints, or serving ones while terminating when no
    /// endpoint is ready).
    pub endpoints: Vec<(Ipv4Addr, u16)>,
    /// How long a client keeps its endpoint (`sessionAffinity: ClientIP`).
    pub affinity: Option<u32>,
}

/// One agent's network, as its rules need it.
#[derive(Clone, Debug)]
pub struct Network {
    /// The table's name.
    pub table: String,
    /// The agent's bridge.
    pub bridge: String,
    /// Every pod's range (the cluster's).
    pub pods: Cidr,
    /// The Services' range.
    pub services: Cidr,
}

/// A rule set: what the agent's table holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    /// Service ports.
    pub ports: Vec<ServicePort>,
    /// The pods NetworkPolicies isolate.
    pub isolated: Vec<crate::policy::Isolation>,
}

fn protocol(name: &str) -> &'static str {
    match name.to_ascii_lowercase().as_str() {
        "udp" => "udp",
        "sctp" => "sctp",
        _ => "tcp",
    }
}

/// The nftables script that replaces the table with `rules`, in one transaction.
pub fn render(network: &Network, rules: &Rules) -> String {
    let table = &network.table;
    let mut out = String::new();
    // Made if missing, then deleted and made anew: one transaction, no moment without rules.
    let _ = writeln!(out, "table inet {table} {{}}\ndelete table inet {table}");
    let _ = writeln!(out, "table inet {table} {{");
    let mut chains = String::new();
    let mut services = String::new();
    for (i, port) in rules.ports.iter().enumerate() {
        let proto = protocol(&port.protocol);
        if port.endpoints.is_empty() {
            continue;
        }
        let comment = port.name.replace('"', "");
        let _ = writeln!(
            services,
            "\t\tip daddr {} {proto} dport {} jump svc_{i} comment \"{comment}\"",
            port.address, port.port
        );
        let mut chain = format!("\tchain svc_{i} {{\n");
        if let Some(timeout) = port.affinity {
            for (j, _) in port.endpoints.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "\tset aff_{i}_{j} {{ type ipv4_addr; flags dynamic,timeout; timeout {timeout}s; }}"
                );
                let _ = writeln!(chain, "\t\tip saddr @aff_{i}_{j} goto ep_{i}_{j}");
            }
        }
        let count = port.endpoints.len();
        if count == 1 {
            let _ = writeln!(chain, "\t\tgoto ep_{i}_0");
        } else {
            let targets: Vec<String> = (0..count)
                .map(|j| format!("{j} : goto ep_{i}_{j}"))
                .collect();
            let _ = writeln!(
                chain,
                "\t\tnumgen random mod {count} vmap {{ {} }}",
                targets.join(", ")
            );
        }
        chain.push_str("\t}\n");
        chains.push_str(&chain);
        for (j, (address, target)) in port.endpoints.iter().enumerate() {
            let _ = writeln!(chains, "\tchain ep_{i}_{j} {{");
            let _ = writeln!(
                chains,
                "\t\tip saddr {address} meta mark set meta mark or {MASQUERADE:#x}"
            );
            if port.affinity.is_some() {
                let _ = writeln!(chains, "\t\tupdate @aff_{i}_{j} {{ ip saddr }}");
            }
            let _ = writeln!(
                chains,
                "\t\tmeta l4proto {proto} dnat ip to {address}:{target}"
            );
            let _ = writeln!(chains, "\t}}");
        }
    }
    let bridge = &network.bridge;
    let pods = network.pods;
    let svc = network.services;
    let policy = crate::policy::render(bridge, &rules.isolated);
    chains.push_str(&policy.chains);
    let (policy_forward, policy_input) = (policy.forward, policy.input);
    let _ = write!(
        out,
        "\tchain services {{\n{services}\t}}\n{chains}\
\tchain prerouting {{\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tjump services\n\t}}\n\
\tchain output {{\n\t\ttype nat hook output priority -100; policy accept;\n\t\tjump services\n\t}}\n\
\tchain postrouting {{\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\
\t\tmeta mark & {MASQUERADE:#x} == {MASQUERADE:#x} masquerade\n\t}}\n\
\tchain forward {{\n\t\ttype filter hook forward priority filter; policy accept;\n\
\t\tct state established,related accept\n\
\t\tip daddr {svc} reject comment \"a Service without endpoints\"\n\
\t\tiifname \"{bridge}\" ip daddr != {pods} drop comment \"pods reach pods and the node only\"\n\
{policy_forward}\t}}\n\
\tchain input {{\n\t\ttype filter hook input priority filter; policy accept;\n\
\t\tct state established,related accept\n{policy_input}\t}}\n\
\tchain filter_output {{\n\t\ttype filter hook output priority filter; policy accept;\n\
\t\tip daddr {svc} reject comment \"a Service without endpoints\"\n\
\t\toifname \"{bridge}\" icmp type redirect drop\n\t}}\n\
}}\n"
    );
    out
}

/// Replaces the table with `script` (see [`render`]).
///
/// # Errors
/// What `nft` said.
pub async fn apply(script: &str) -> Result<(), String> {
    crate::host::run("nft", &["-f", "-"], Some(script))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network() -> Network {
        Network {
            table: "plinth_abc123".into(),
            bridge: "plbr-abc123".into(),
            pods: Cidr::parse("10.244.0.0/16").unwrap(),
            services: Cidr::parse("10.96.0.0/12").unwrap(),
        }
    }

    #[test]
    fn services_become_chains_with_random_choice_and_affinity() {
        let rules = Rules {
            ports: vec![
                ServicePort {
                    name: "default/web:http".into(),
                    address: Ipv4Addr::new(10, 96, 0, 20),
                    protocol: "TCP".into(),
                    port: 80,
                    endpoints: vec![
                        (Ipv4Addr::new(10, 244, 0, 2), 8080),
                        (Ipv4Addr::new(10, 244, 0, 3), 8080),
                    ],
                    affinity: Some(10800),
                },
                ServicePort {
                    name: "default/empty:".into(),
                    address: Ipv4Addr::new(10, 96, 0, 21),
                    protocol: "UDP".into(),
                    port: 53,
                    endpoints: Vec::new(),
                    affinity: None,
                },
            ],
            isolated: Vec::new(),
        };
        let script = render(&network(), &rules);
        assert!(
            script.starts_with("table inet plinth_abc123 {}\ndelete table inet plinth_abc123\n")
        );
        assert!(script.contains("ip daddr 10.96.0.20 tcp dport 80 jump svc_0"));
        assert!(script.contains("numgen random mod 2 vmap { 0 : goto ep_0_0, 1 : goto ep_0_1 }"));
        assert!(
            script
                .contains("set aff_0_1 { type ipv4_addr; flags dynamic,timeout; timeout 10800s; }")
        );
        assert!(script.contains("meta l4proto tcp dnat ip to 10.244.0.3:8080"));
        assert!(
            !script.contains("10.96.0.21"),
            "no endpoints: refused by the range's rule"
        );
        assert!(script.contains("ip daddr 10.96.0.0/12 reject"));
    }
}
