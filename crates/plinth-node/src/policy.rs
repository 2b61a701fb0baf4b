//! NetworkPolicy for a node whose pods have namespaces of their own: the cluster's pods,
//! namespaces and policies followed, and each of this node's pods that some policy selects
//! resolved to what it may receive and send — selectors to pod addresses, named ports to
//! numbers — for [`plinth_net::policy`] to write as rules. Kube's semantics: a pod selected
//! by a policy of type `Ingress` (`Egress`) is isolated that way, and then allowed only what
//! the union of those policies' rules allows; traffic between a pod and its own node is not
//! held back on the way in. The node's DNS server stands in for the `kube-dns` pods of
//! `kube-system` (labels `k8s-app: kube-dns`, ports `dns` and `dns-tcp`), so the usual
//! "allow DNS" egress rules find it.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::Api;
use plinth_core::selector::LabelSelector;
use plinth_net::Cidr;
use plinth_net::policy::{Allow, Isolation, Peer, PortRange};
use serde_json::Value;

use crate::mirror::Objects;

/// The cluster's pods, namespaces and NetworkPolicies as the watches last said.
#[derive(Default)]
pub(crate) struct Policies {
    pods: Mutex<Objects>,
    namespaces: Mutex<Objects>,
    policies: Mutex<Objects>,
    version: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policies").finish_non_exhaustive()
    }
}

impl Policies {
    /// Follows the changes.
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// The isolation of the pods in `local` (this node's range), with the node's DNS server
    /// at `dns`.
    pub(crate) fn isolated(&self, local: Cidr, dns: Ipv4Addr) -> Vec<Isolation> {
        // Rules are rewritten on every Service and endpoint change: without a policy no pod
        // is isolated, and the cluster's pods need not be copied to find that out.
        let policies = crate::mirror::values(&self.policies);
        if policies.is_empty() {
            return Vec::new();
        }
        resolve(
            &crate::mirror::values(&self.pods),
            &crate::mirror::values(&self.namespaces),
            &policies,
            local,
            dns,
        )
    }
}

/// Follows pods, namespaces and NetworkPolicies until `stopping`.
pub(crate) async fn run(
    policies: Arc<Policies>,
    client: kube::Client,
    stopping: tokio::sync::watch::Receiver<bool>,
) {
    crate::mirror::follow(
        vec![
            (
                crate::mirror::watch(Api::<Pod>::all(client.clone())),
                &policies.pods,
            ),
            (
                crate::mirror::watch(Api::<Namespace>::all(client.clone())),
                &policies.namespaces,
            ),
            (
                crate::mirror::watch(Api::<NetworkPolicy>::all(client)),
                &policies.policies,
            ),
        ],
        || policies.version.send_modify(|v| *v += 1),
        stopping,
    )
    .await;
}

/// A pod as policies see it.
struct Member {
    namespace: String,
    labels: BTreeMap<String, String>,
    address: Ipv4Addr,
    /// Named container ports: name, protocol, number.
    ports: Vec<(String, String, u16)>,
}

impl Member {
    fn named(&self, name: &str, protocol: &str) -> Option<u16> {
        self.ports
            .iter()
            .find(|(n, p, _)| n == name && p.eq_ignore_ascii_case(protocol))
            .map(|(_, _, number)| *number)
    }
}

/// The pods with an address of their own (not `hostNetwork`, not finished).
fn members(pods: &[Value]) -> Vec<Member> {
    pods.iter()
        .filter(|pod| pod.pointer("/spec/hostNetwork") != Some(&Value::Bool(true)))
        .filter(|pod| {
            !matches!(
                pod.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            )
        })
        .filter_map(|pod| {
            let address = pod
                .pointer("/status/podIP")
                .and_then(Value::as_str)?
                .parse()
                .ok()?;
            let ports = pod
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
                .filter_map(|p| {
                    Some((
                        p["name"].as_str()?.to_owned(),
                        p["protocol"].as_str().unwrap_or("TCP").to_owned(),
                        u16::try_from(p["containerPort"].as_u64()?).ok()?,
                    ))
                })
                .collect();
            Some(Member {
                namespace: plinth_core::meta::namespace(pod)?.to_owned(),
                labels: plinth_core::meta::labels(pod),
                address,
                ports,
            })
        })
        .collect()
}

/// The node's DNS server, as the `kube-dns` pod it stands in for.
fn dns_member(address: Ipv4Addr) -> Member {
    Member {
        namespace: crate::proxy::DNS_SERVICE.0.into(),
        labels: BTreeMap::from([("k8s-app".to_owned(), "kube-dns".to_owned())]),
        address,
        ports: vec![
            ("dns".into(), "UDP".into(), 53),
            ("dns-tcp".into(), "TCP".into(), 53),
        ],
    }
}

fn selector(value: &Value) -> Option<LabelSelector> {
    LabelSelector::from_object(value).ok()
}

/// An IPv4 range as `ipBlock` gives it (host bits allowed, as `net.ParseCIDR` allows them).
fn block(text: &str) -> Option<Cidr> {
    let (address, bits) = text.split_once('/')?;
    Cidr::new(address.parse().ok()?, bits.parse().ok()?)
}

/// What one policy's peers (`from`/`to`) name; `None` for every address.
fn peers(
    list: Option<&Value>,
    policy_namespace: &str,
    members: &[Member],
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> Option<Vec<Peer>> {
    let list = list.and_then(Value::as_array).filter(|l| !l.is_empty())?;
    let mut out = Vec::new();
    for peer in list {
        if let Some(ip_block) = peer.get("ipBlock") {
            if let Some(cidr) = ip_block["cidr"].as_str().and_then(block) {
                let except = ip_block["except"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e.as_str().and_then(block))
                    .collect();
                out.push(Peer::Block { cidr, except });
            }
            continue;
        }
        let pods = match peer.get("podSelector") {
            Some(s) => selector(s),
            None => Some(LabelSelector::default()),
        };
        let spaces = peer.get("namespaceSelector").map(selector);
        let Some(pods) = pods else { continue };
        for member in members {
            let in_namespace = match &spaces {
                None => member.namespace == policy_namespace,
                Some(None) => false,
                Some(Some(spaces)) => namespaces
                    .get(&member.namespace)
                    .is_some_and(|labels| spaces.matches(labels)),
            };
            if in_namespace && pods.matches(&member.labels) {
                out.push(Peer::Address(member.address));
            }
        }
    }
    Some(out)
}

fn covers(peers: &[Peer], address: Ipv4Addr) -> bool {
    peers.iter().any(|peer| match peer {
        Peer::Address(a) => *a == address,
        Peer::Block { cidr, except } => {
            cidr.contains(address) && !except.iter().any(|e| e.contains(address))
        }
    })
}

/// One policy port: its protocol and either numbers or a name.
enum PolicyPort {
    Numbers(PortRange),
    Named(String, String),
}

fn policy_ports(list: Option<&Value>) -> Option<Vec<PolicyPort>> {
    let list = list.and_then(Value::as_array).filter(|l| !l.is_empty())?;
    Some(
        list.iter()
            .map(|port| {
                let protocol = port["protocol"].as_str().unwrap_or("TCP").to_owned();
                match &port["port"] {
                    Value::String(name) => PolicyPort::Named(name.clone(), protocol),
                    Value::Number(n) => {
                        let first = n.as_u64().and_then(|n| u16::try_from(n).ok()).unwrap_or(0);
                        let last = port["endPort"]
                            .as_u64()
                            .and_then(|n| u16::try_from(n).ok())
                            .unwrap_or(first);
                        PolicyPort::Numbers(PortRange {
                            protocol,
                            first,
                            last,
                        })
                    }
                    _ => PolicyPort::Numbers(PortRange {
                        protocol,
                        first: 1,
                        last: u16::MAX,
                    }),
                }
            })
            .collect(),
    )
}

/// The allows of one ingress rule of a policy selecting `pod` (named ports are the pod's).
fn ingress_allows(rule: &Value, pod: &Member, context: &Context) -> Vec<Allow> {
    let peers = peers(
        rule.get("from"),
        context.namespace,
        context.members,
        context.namespaces,
    );
    let ports = policy_ports(rule.get("ports")).map(|ports| {
        ports
            .into_iter()
            .filter_map(|port| match port {
                PolicyPort::Numbers(range) => Some(range),
                PolicyPort::Named(name, protocol) => {
                    pod.named(&name, &protocol).map(|number| PortRange {
                        protocol,
                        first: number,
                        last: number,
                    })
                }
            })
            .collect()
    });
    vec![Allow { peers, ports }]
}

/// The allows of one egress rule: numbered ports for its peers; a named port for each peer
/// pod that has a port of that name (the destination's names, as kube resolves them).
fn egress_allows(rule: &Value, context: &Context) -> Vec<Allow> {
    let peers = peers(
        rule.get("to"),
        context.namespace,
        context.members,
        context.namespaces,
    );
    let Some(ports) = policy_ports(rule.get("ports")) else {
        return vec![Allow { peers, ports: None }];
    };
    let mut numbers = Vec::new();
    let mut named = Vec::new();
    for port in ports {
        match port {
            PolicyPort::Numbers(range) => numbers.push(range),
            PolicyPort::Named(name, protocol) => named.push((name, protocol)),
        }
    }
    let mut allows = Vec::new();
    if !numbers.is_empty() {
        allows.push(Allow {
            peers: peers.clone(),
            ports: Some(numbers),
        });
    }
    if !named.is_empty() {
        for member in context.members {
            if peers
                .as_ref()
                .is_some_and(|peers| !covers(peers, member.address))
            {
                continue;
            }
            let resolved: Vec<PortRange> = named
                .iter()
                .filter_map(|(name, protocol)| {
                    member.named(name, protocol).map(|number| PortRange {
                        protocol: protocol.clone(),
                        first: number,
                        last: number,
                    })
                })
                .collect();
            if !resolved.is_empty() {
                allows.push(Allow {
                    peers: Some(vec![Peer::Address(member.address)]),
                    ports: Some(resolved),
                });
            }
        }
    }
    allows
}

/// What resolving one policy's rules needs.
struct Context<'a> {
    namespace: &'a str,
    members: &'a [Member],
    namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
}

/// The policy's types: as given, or `Ingress` plus `Egress` when it has egress rules.
fn types(policy: &Value) -> (bool, bool) {
    match policy
        .pointer("/spec/policyTypes")
        .and_then(Value::as_array)
    {
        Some(types) => (
            types.iter().any(|t| t == "Ingress"),
            types.iter().any(|t| t == "Egress"),
        ),
        None => (true, policy.pointer("/spec/egress").is_some()),
    }
}

/// The isolation of every pod in `local` some policy selects.
fn resolve(
    pods: &[Value],
    namespaces: &[Value],
    policies: &[Value],
    local: Cidr,
    dns: Ipv4Addr,
) -> Vec<Isolation> {
    let mut members = members(pods);
    let namespaces: BTreeMap<String, BTreeMap<String, String>> = namespaces
        .iter()
        .filter_map(|ns| {
            Some((
                plinth_core::meta::name(ns)?.to_owned(),
                plinth_core::meta::labels(ns),
            ))
        })
        .collect();
    let local_pods: Vec<usize> = (0..members.len())
        .filter(|&i| local.contains(members[i].address))
        .collect();
    members.push(dns_member(dns));
    let mut out = Vec::new();
    for i in local_pods {
        let pod = &members[i];
        let mut ingress: Option<Vec<Allow>> = None;
        let mut egress: Option<Vec<Allow>> = None;
        for policy in policies {
            let Some(namespace) = plinth_core::meta::namespace(policy) else {
                continue;
            };
            let selects = namespace == pod.namespace
                && policy
                    .pointer("/spec/podSelector")
                    .and_then(selector)
                    .is_some_and(|s| s.matches(&pod.labels));
            if !selects {
                continue;
            }
            let context = Context {
                namespace,
                members: &members,
                namespaces: &namespaces,
            };
            let (isolates_ingress, isolates_egress) = types(policy);
            if isolates_ingress {
                let allows = ingress.get_or_insert_with(Vec::new);
                for rule in policy
                    .pointer("/spec/ingress")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    allows.extend(ingress_allows(rule, pod, &context));
                }
            }
            if isolates_egress {
                let allows = egress.get_or_insert_with(Vec::new);
                for rule in policy
                    .pointer("/spec/egress")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    allows.extend(egress_allows(rule, &context));
                }
            }
        }
        if ingress.is_some() || egress.is_some() {
            out.push(Isolation {
                pod: pod.address,
                ingress,
                egress,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(namespace: &str, name: &str, ip: &str, labels: Value) -> Value {
        json!({
            "metadata": {"namespace": namespace, "name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"podIP": ip, "phase": "Running"}
        })
    }

    fn namespace(name: &str, labels: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}})
    }

    const DNS: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);

    fn local() -> Cidr {
        Cidr::v4([10, 244, 0, 0], 24)
    }

    #[test]
    fn default_deny_isolates_only_the_selected_pods_of_its_namespace() {
        let pods = [
            pod("a", "web", "10.244.0.2", json!({"app": "web"})),
            pod("b", "web", "10.244.0.3", json!({"app": "web"})),
            pod("a", "far", "10.244.1.2", json!({"app": "web"})),
        ];
        let policies = [json!({
            "metadata": {"namespace": "a", "name": "deny"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}
        })];
        let isolated = resolve(&pods, &[], &policies, local(), DNS);
        assert_eq!(
            isolated,
            vec![Isolation {
                pod: Ipv4Addr::new(10, 244, 0, 2),
                ingress: Some(Vec::new()),
                egress: None,
            }]
        );
    }

    #[test]
    fn selectors_resolve_to_addresses_and_named_ports_to_numbers() {
        let pods = [
            pod("a", "web", "10.244.0.2", json!({"app": "web"})),
            pod("a", "client", "10.244.0.3", json!({"role": "client"})),
            pod("b", "client", "10.244.1.3", json!({"role": "client"})),
            pod("c", "client", "10.244.1.4", json!({"role": "client"})),
        ];
        let namespaces = [
            namespace("b", json!({"team": "x"})),
            namespace("c", json!({"team": "y"})),
        ];
        let policies = [json!({
            "metadata": {"namespace": "a", "name": "allow"},
            "spec": {
                "podSelector": {"matchLabels": {"app": "web"}},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{
                    "from": [
                        {"podSelector": {"matchLabels": {"role": "client"}}},
                        {"namespaceSelector": {"matchLabels": {"team": "x"}}, "podSelector": {}}
                    ],
                    "ports": [{"port": "http"}, {"port": "missing"}]
                }],
                "egress": [{"ports": [{"port": "dns", "protocol": "UDP"}]}]
            }
        })];
        let isolated = resolve(&pods, &namespaces, &policies, local(), DNS);
        assert_eq!(isolated.len(), 1);
        let ingress = isolated[0].ingress.clone().unwrap_or_default();
        assert_eq!(
            ingress,
            vec![Allow {
                peers: Some(vec![
                    Peer::Address(Ipv4Addr::new(10, 244, 0, 3)),
                    Peer::Address(Ipv4Addr::new(10, 244, 1, 3)),
                ]),
                ports: Some(vec![PortRange {
                    protocol: "TCP".into(),
                    first: 8080,
                    last: 8080
                }]),
            }]
        );
        let egress = isolated[0].egress.clone().unwrap_or_default();
        assert_eq!(
            egress,
            vec![Allow {
                peers: Some(vec![Peer::Address(DNS)]),
                ports: Some(vec![PortRange {
                    protocol: "UDP".into(),
                    first: 53,
                    last: 53
                }]),
            }],
            "the node's DNS answers for the kube-dns pods' named port"
        );
    }

    #[test]
    fn ip_blocks_keep_their_exceptions_and_port_ranges_their_end() {
        let pods = [pod("a", "web", "10.244.0.2", json!({}))];
        let policies = [json!({
            "metadata": {"namespace": "a", "name": "out"},
            "spec": {
                "podSelector": {},
                "egress": [{
                    "to": [{"ipBlock": {"cidr": "10.0.0.1/8", "except": ["10.9.0.0/16"]}}],
                    "ports": [{"port": 8000, "endPort": 8100}]
                }]
            }
        })];
        let isolated = resolve(&pods, &[], &policies, local(), DNS);
        assert_eq!(isolated[0].ingress, Some(Vec::new()), "Ingress is implied");
        assert_eq!(
            isolated[0].egress,
            Some(vec![Allow {
                peers: Some(vec![Peer::Block {
                    cidr: Cidr::v4([10, 0, 0, 0], 8),
                    except: vec![Cidr::v4([10, 9, 0, 0], 16)],
                }]),
                ports: Some(vec![PortRange {
                    protocol: "TCP".into(),
                    first: 8000,
                    last: 8100
                }]),
            }])
        );
    }
}
