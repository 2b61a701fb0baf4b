//! NetworkPolicy as nftables rules: each isolated pod gets a chain per direction that returns
//! for the traffic some policy allows and drops the rest; connections already allowed
//! (and their replies) pass before any chain is consulted. Selectors are resolved to
//! addresses before this module sees them (see the agent), so a rule here is only
//! "these addresses, these ports".

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use crate::cidr::Cidr;

/// Where traffic may come from (ingress) or go to (egress).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    /// One address (a selected pod's).
    Address(Ipv4Addr),
    /// An `ipBlock`: a range less its exceptions.
    Block {
        /// The range.
        cidr: Cidr,
        /// The ranges within it that are not allowed.
        except: Vec<Cidr>,
    },
}

/// Ports `first..=last` of one protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// `tcp`, `udp` or `sctp`.
    pub protocol: String,
    /// The first port.
    pub first: u16,
    /// The last port (`first` for one port).
    pub last: u16,
}

/// One allowing rule: traffic from/to any of `peers` on any of `ports`; `None` is "any".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allow {
    /// The peers (`None`: every address).
    pub peers: Option<Vec<Peer>>,
    /// The ports (`None`: every port and protocol).
    pub ports: Option<Vec<PortRange>>,
}

/// A pod the policies isolate, in either direction (`None`: not isolated that way).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Isolation {
    /// The pod's address.
    pub pod: Ipv4Addr,
    /// What may reach it, if it is isolated for ingress.
    pub ingress: Option<Vec<Allow>>,
    /// What it may reach, if it is isolated for egress.
    pub egress: Option<Vec<Allow>>,
}

/// The rules of the isolated pods: what goes into the forward and input base chains, and
/// the chains they jump to.
#[derive(Debug, Default)]
pub(crate) struct Rendered {
    /// Rules for the `forward` hook (pod to pod, and to anywhere else).
    pub(crate) forward: String,
    /// Rules for the `input` hook (pods to the node itself: its DNS, its relays).
    pub(crate) input: String,
    /// The per-pod chains.
    pub(crate) chains: String,
}

fn protocol(name: &str) -> &'static str {
    match name.to_ascii_lowercase().as_str() {
        "udp" => "udp",
        "sctp" => "sctp",
        _ => "tcp",
    }
}

/// `ports` as one match per protocol, overlapping ranges merged (nftables refuses sets whose
/// intervals overlap).
fn port_matches(ports: &[PortRange]) -> Vec<String> {
    let mut by_protocol: BTreeMap<&str, Vec<(u16, u16)>> = BTreeMap::new();
    for port in ports {
        let (first, last) = (port.first.min(port.last), port.first.max(port.last));
        by_protocol
            .entry(protocol(&port.protocol))
            .or_default()
            .push((first, last));
    }
    by_protocol
        .into_iter()
        .map(|(proto, mut ranges)| {
            ranges.sort_unstable();
            let mut merged: Vec<(u16, u16)> = Vec::new();
            for (first, last) in ranges {
                match merged.last_mut() {
                    Some(previous) if u32::from(first) <= u32::from(previous.1) + 1 => {
                        previous.1 = previous.1.max(last);
                    }
                    _ => merged.push((first, last)),
                }
            }
            let items: Vec<String> = merged
                .iter()
                .map(|&(a, b)| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}-{b}")
                    }
                })
                .collect();
            format!("meta l4proto {proto} th dport {{ {} }}", items.join(", "))
        })
        .collect()
}

/// `peers` as matches on `field` (`saddr` or `daddr`): the single addresses in one set,
/// each block with its exceptions on its own.
fn peer_matches(field: &str, peers: &[Peer]) -> Vec<String> {
    let mut addresses: Vec<Ipv4Addr> = Vec::new();
    let mut out = Vec::new();
    for peer in peers {
        match peer {
            Peer::Address(address) => addresses.push(*address),
            Peer::Block { cidr, except } => {
                let mut rule = format!("ip {field} {cidr}");
                let inside: Vec<String> = except
                    .iter()
                    .filter(|e| cidr.overlaps(**e))
                    .map(ToString::to_string)
                    .collect();
                if !inside.is_empty() {
                    let _ = write!(rule, " ip {field} != {{ {} }}", inside.join(", "));
                }
                out.push(rule);
            }
        }
    }
    addresses.sort_unstable();
    addresses.dedup();
    if !addresses.is_empty() {
        let list: Vec<String> = addresses.iter().map(ToString::to_string).collect();
        out.insert(0, format!("ip {field} {{ {} }}", list.join(", ")));
    }
    out
}

/// The body of one direction's chain: a `return` per allowed combination, then `drop`.
fn chain_body(field: &str, allows: &[Allow]) -> String {
    let mut body = String::new();
    for allow in allows {
        let peers = match &allow.peers {
            None => vec![String::new()],
            Some(peers) => peer_matches(field, peers),
        };
        let ports = match &allow.ports {
            None => vec![String::new()],
            Some(ports) => port_matches(ports),
        };
        for peer in &peers {
            for port in &ports {
                let parts: Vec<&str> = [peer.as_str(), port.as_str()]
                    .into_iter()
                    .filter(|p| !p.is_empty())
                    .collect();
                let _ = writeln!(body, "\t\t{}return", with_space(&parts.join(" ")));
            }
        }
    }
    body.push_str("\t\tdrop\n");
    body
}

fn with_space(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!("{text} ")
    }
}

fn vmap(field: &str, jumps: &[(Ipv4Addr, String)]) -> String {
    let items: Vec<String> = jumps
        .iter()
        .map(|(address, chain)| format!("{address} : jump {chain}"))
        .collect();
    format!("ip {field} vmap {{ {} }}", items.join(", "))
}

/// The rules for `isolated`, pods of the agent's `bridge`.
pub(crate) fn render(bridge: &str, isolated: &[Isolation]) -> Rendered {
    let mut rendered = Rendered::default();
    let mut ingress = Vec::new();
    let mut egress = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (k, pod) in isolated.iter().enumerate() {
        if !seen.insert(pod.pod) {
            continue;
        }
        // A chain per isolated direction: sources checked on the way in, destinations out.
        for (allows, name, field, jumps) in [
            (&pod.ingress, "in", "saddr", &mut ingress),
            (&pod.egress, "out", "daddr", &mut egress),
        ] {
            if let Some(allows) = allows {
                let chain = format!("{name}_{k}");
                let _ = write!(
                    rendered.chains,
                    "\tchain {chain} {{\n{}\t}}\n",
                    chain_body(field, allows)
                );
                jumps.push((pod.pod, chain));
            }
        }
    }
    if !egress.is_empty() {
        let _ = writeln!(
            rendered.forward,
            "\t\tiifname \"{bridge}\" {}",
            vmap("saddr", &egress)
        );
        let _ = writeln!(
            rendered.input,
            "\t\tiifname \"{bridge}\" {}",
            vmap("saddr", &egress)
        );
    }
    if !ingress.is_empty() {
        let _ = writeln!(
            rendered.forward,
            "\t\toifname \"{bridge}\" {}",
            vmap("daddr", &ingress)
        );
    }
    rendered
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(first: u16, last: u16) -> PortRange {
        PortRange {
            protocol: "TCP".into(),
            first,
            last,
        }
    }

    #[test]
    fn allows_become_returns_before_a_drop() {
        let pod = Ipv4Addr::new(10, 244, 0, 5);
        let rendered = render(
            "plbr-x",
            &[Isolation {
                pod,
                ingress: Some(vec![Allow {
                    peers: Some(vec![
                        Peer::Address(Ipv4Addr::new(10, 244, 0, 7)),
                        Peer::Block {
                            cidr: Cidr::v4([10, 0, 0, 0], 8),
                            except: vec![Cidr::v4([10, 1, 0, 0], 16)],
                        },
                        Peer::Address(Ipv4Addr::new(10, 244, 0, 6)),
                    ]),
                    ports: Some(vec![
                        tcp(80, 80),
                        tcp(8000, 8100),
                        tcp(8050, 9000),
                        PortRange {
                            protocol: "UDP".into(),
                            first: 53,
                            last: 53,
                        },
                    ]),
                }]),
                egress: Some(Vec::new()),
            }],
        );
        let chains = &rendered.chains;
        assert!(chains.contains(
            "ip saddr { 10.244.0.6, 10.244.0.7 } meta l4proto tcp th dport { 80, 8000-9000 } return"
        ));
        assert!(chains.contains(
            "ip saddr 10.0.0.0/8 ip saddr != { 10.1.0.0/16 } meta l4proto udp th dport { 53 } return"
        ));
        assert!(chains.contains("chain out_0 {\n\t\tdrop\n\t}"), "{chains}");
        assert!(
            rendered
                .forward
                .contains("oifname \"plbr-x\" ip daddr vmap { 10.244.0.5 : jump in_0 }")
        );
        assert!(
            rendered
                .input
                .contains("iifname \"plbr-x\" ip saddr vmap { 10.244.0.5 : jump out_0 }")
        );
    }

    #[test]
    fn an_allow_of_anything_is_a_bare_return() {
        let rendered = render(
            "b",
            &[Isolation {
                pod: Ipv4Addr::new(10, 244, 0, 5),
                ingress: Some(vec![Allow::default()]),
                egress: None,
            }],
        );
        assert!(
            rendered
                .chains
                .contains("chain in_0 {\n\t\treturn\n\t\tdrop\n")
        );
        assert!(rendered.input.is_empty());
    }
}
