//! The cluster's zone, as CoreDNS's `kubernetes` plugin answers it, built from Services and
//! EndpointSlices: `svc.ns.svc.cluster.local` (the ClusterIP, or a headless Service's ready
//! endpoints), `host.svc.ns.svc.cluster.local` (an endpoint's hostname, or its address with
//! dashes), `_port._proto.svc.ns.svc.cluster.local` (SRV), `a-b-c-d.ns.pod.cluster.local`,
//! `ExternalName` as a CNAME, and PTR records for Service and endpoint addresses.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;

use serde_json::Value;

use super::wire::{Answer, Data, Question, Record, kind, rcode};
use crate::cidr::Cidr;

/// How long answers may be cached (CoreDNS's `ttl` default).
const TTL: u32 = 5;

/// What a question gets.
#[derive(Debug)]
pub enum Outcome {
    /// An answer from the zone.
    Answer(Answer),
    /// Not the cluster's: asked of the machine's resolvers.
    Forward,
}

/// The zone at one moment.
#[derive(Debug, Default)]
pub struct Zone {
    domain: String,
    records: HashMap<String, Vec<Record>>,
    /// Every name that exists, records or not (`svc.cluster.local`, a namespace's).
    names: BTreeSet<String>,
    /// Ranges whose reverse names are the cluster's.
    ranges: Vec<Cidr>,
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `1.2.3.4` → `4.3.2.1.in-addr.arpa`.
pub fn reverse_name(address: Ipv4Addr) -> String {
    let o = address.octets();
    format!("{}.{}.{}.{}.in-addr.arpa", o[3], o[2], o[1], o[0])
}

fn reverse_address(name: &str) -> Option<Ipv4Addr> {
    let digits = name.strip_suffix(".in-addr.arpa")?;
    let parts: Vec<u8> = digits
        .split('.')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [d, c, b, a] => Some(Ipv4Addr::new(*a, *b, *c, *d)),
        _ => None,
    }
}

impl Zone {
    /// The zone of `domain` (`cluster.local`) from `services` and `slices`; `ranges` are the
    /// Service and pod ranges, whose reverse names it answers for.
    pub fn build(domain: &str, services: &[&Value], slices: &[&Value], ranges: &[Cidr]) -> Self {
        let mut zone = Zone {
            domain: domain.to_owned(),
            ranges: ranges.to_vec(),
            ..Zone::default()
        };
        for name in ["svc", "pod"] {
            zone.names.insert(format!("{name}.{domain}"));
        }
        zone.names.insert(domain.to_owned());
        let mut by_service: HashMap<(String, String), Vec<&Value>> = HashMap::new();
        for slice in slices {
            let service = text(slice, "/metadata/labels/kubernetes.io~1service-name");
            if !service.is_empty() {
                by_service
                    .entry((
                        text(slice, "/metadata/namespace").to_owned(),
                        service.to_owned(),
                    ))
                    .or_default()
                    .push(slice);
            }
        }
        for service in services {
            let namespace = text(service, "/metadata/namespace").to_owned();
            let name = text(service, "/metadata/name").to_owned();
            let fqdn = format!("{name}.{namespace}.svc.{domain}");
            zone.names.insert(format!("{namespace}.svc.{domain}"));
            zone.names.insert(fqdn.clone());
            let spec = &service["spec"];
            if spec["type"] == "ExternalName" {
                let target = text(spec, "/externalName").trim_end_matches('.').to_owned();
                if !target.is_empty() {
                    zone.add(&fqdn, Data::Cname(target));
                }
                continue;
            }
            let cluster_ip = text(spec, "/clusterIP");
            let headless = cluster_ip == "None";
            if let Ok(address) = cluster_ip.parse::<Ipv4Addr>() {
                zone.add(&fqdn, Data::A(address));
                zone.add(&reverse_name(address), Data::Ptr(fqdn.clone()));
            }
            let publish_all = spec["publishNotReadyAddresses"] == true;
            let slices = by_service
                .get(&(namespace.clone(), name.clone()))
                .cloned()
                .unwrap_or_default();
            // SRV for each named port: the Service's name, or each endpoint of a headless one.
            for port in spec["ports"].as_array().into_iter().flatten() {
                let port_name = port["name"].as_str().unwrap_or("");
                if port_name.is_empty() {
                    continue;
                }
                let proto = port["protocol"]
                    .as_str()
                    .unwrap_or("TCP")
                    .to_ascii_lowercase();
                let srv = format!("_{port_name}._{proto}.{fqdn}");
                zone.names.insert(format!("_{proto}.{fqdn}"));
                if !headless {
                    let number = port["port"].as_u64().and_then(|p| u16::try_from(p).ok());
                    if let Some(number) = number {
                        zone.add(
                            &srv,
                            Data::Srv {
                                priority: 0,
                                weight: 100,
                                port: number,
                                target: fqdn.clone(),
                            },
                        );
                    }
                }
            }
            if !headless {
                continue;
            }
            for slice in &slices {
                let ports: Vec<&Value> = slice["ports"].as_array().into_iter().flatten().collect();
                for endpoint in slice["endpoints"].as_array().into_iter().flatten() {
                    let ready = endpoint.pointer("/conditions/ready") != Some(&Value::Bool(false));
                    if !ready && !publish_all {
                        continue;
                    }
                    for address in endpoint["addresses"].as_array().into_iter().flatten() {
                        let Some(address) =
                            address.as_str().and_then(|a| a.parse::<Ipv4Addr>().ok())
                        else {
                            continue;
                        };
                        let host = endpoint["hostname"]
                            .as_str()
                            .filter(|h| !h.is_empty())
                            .map_or_else(|| address.to_string().replace('.', "-"), str::to_owned);
                        let host_fqdn = format!("{host}.{fqdn}");
                        zone.add(&fqdn, Data::A(address));
                        zone.add(&host_fqdn, Data::A(address));
                        if endpoint["hostname"].as_str().is_some_and(|h| !h.is_empty()) {
                            zone.add(&reverse_name(address), Data::Ptr(host_fqdn.clone()));
                        }
                        for port in &ports {
                            let port_name = port["name"].as_str().unwrap_or("");
                            let number = port["port"].as_u64().and_then(|p| u16::try_from(p).ok());
                            if port_name.is_empty() {
                                continue;
                            }
                            let Some(number) = number else { continue };
                            let proto = port["protocol"]
                                .as_str()
                                .unwrap_or("TCP")
                                .to_ascii_lowercase();
                            zone.add(
                                &format!("_{port_name}._{proto}.{fqdn}"),
                                Data::Srv {
                                    priority: 0,
                                    weight: 100,
                                    port: number,
                                    target: host_fqdn.clone(),
                                },
                            );
                        }
                    }
                }
            }
        }
        for records in zone.records.values_mut() {
            records.dedup();
        }
        zone
    }

    fn add(&mut self, name: &str, data: Data) {
        self.names.insert(name.to_owned());
        let records = self.records.entry(name.to_owned()).or_default();
        let record = Record {
            name: name.to_owned(),
            ttl: TTL,
            data,
        };
        if !records.contains(&record) {
            records.push(record);
        }
    }

    fn soa(&self) -> Record {
        Record {
            name: self.domain.clone(),
            ttl: TTL,
            data: Data::Soa {
                mname: format!("ns.dns.{}", self.domain),
                rname: format!("hostmaster.{}", self.domain),
                serial: 1,
                minimum: TTL,
            },
        }
    }

    /// Whether `name` is the zone's (or a reverse name of its ranges).
    fn owns(&self, name: &str) -> bool {
        if name == self.domain || name.ends_with(&format!(".{}", self.domain)) {
            return true;
        }
        reverse_address(name).is_some_and(|a| self.ranges.iter().any(|r| r.contains(a)))
    }

    /// The answer to `question`.
    pub fn answer(&self, question: &Question) -> Outcome {
        let name = question.name.trim_end_matches('.');
        if !self.owns(name) {
            return Outcome::Forward;
        }
        let mut answer = Answer {
            authoritative: true,
            ..Answer::default()
        };
        if let Some(address) = self.pod_address(name) {
            if matches!(question.kind, kind::A | kind::ANY) {
                answer.answers.push(Record {
                    name: name.to_owned(),
                    ttl: TTL,
                    data: Data::A(address),
                });
            } else {
                answer.authority.push(self.soa());
            }
            return Outcome::Answer(answer);
        }
        if question.kind == kind::SOA && name == self.domain {
            answer.answers.push(self.soa());
            return Outcome::Answer(answer);
        }
        let records = self.records.get(name);
        match records {
            Some(records) => {
                let cname = records.iter().find(|r| matches!(r.data, Data::Cname(_)));
                let wanted: Vec<Record> = match cname {
                    Some(alias) => vec![alias.clone()],
                    None => records
                        .iter()
                        .filter(|r| question.kind == kind::ANY || r.data.kind() == question.kind)
                        .cloned()
                        .collect(),
                };
                if question.kind == kind::SRV {
                    for record in &wanted {
                        if let Data::Srv { target, .. } = &record.data {
                            for extra in self.records.get(target).into_iter().flatten() {
                                if matches!(extra.data, Data::A(_)) {
                                    answer.additional.push(extra.clone());
                                }
                            }
                        }
                    }
                }
                if wanted.is_empty() {
                    answer.authority.push(self.soa());
                }
                answer.answers = wanted;
            }
            None if self.names.contains(name) => answer.authority.push(self.soa()),
            None => {
                answer.rcode = rcode::NXDOMAIN;
                answer.authority.push(self.soa());
            }
        }
        Outcome::Answer(answer)
    }

    /// `10-244-0-5.ns.pod.cluster.local` → `10.244.0.5` (CoreDNS's `pods insecure`).
    fn pod_address(&self, name: &str) -> Option<Ipv4Addr> {
        let rest = name.strip_suffix(&format!(".pod.{}", self.domain))?;
        let (host, namespace) = rest.split_once('.')?;
        if namespace.contains('.') {
            return None;
        }
        host.replace('-', ".").parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn zone() -> Zone {
        let services = [
            json!({"metadata": {"name": "web", "namespace": "default"},
                "spec": {"clusterIP": "10.96.0.20", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}),
            json!({"metadata": {"name": "db", "namespace": "data"},
                "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}}),
            json!({"metadata": {"name": "out", "namespace": "default"},
                "spec": {"type": "ExternalName", "externalName": "example.org"}}),
        ];
        let slices = [
            json!({"metadata": {"namespace": "data", "labels": {"kubernetes.io/service-name": "db"}},
            "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["10.244.0.7"], "hostname": "db-0", "conditions": {"ready": true}},
                {"addresses": ["10.244.0.8"], "conditions": {"ready": true}},
                {"addresses": ["10.244.0.9"], "hostname": "db-2", "conditions": {"ready": false}}]}),
        ];
        let services: Vec<&Value> = services.iter().collect();
        let slices: Vec<&Value> = slices.iter().collect();
        Zone::build(
            "cluster.local",
            &services,
            &slices,
            &[
                Cidr::parse("10.96.0.0/12").unwrap(),
                Cidr::parse("10.244.0.0/16").unwrap(),
            ],
        )
    }

    fn ask(zone: &Zone, name: &str, kind: u16) -> Answer {
        match zone.answer(&Question {
            name: name.into(),
            kind,
            class: 1,
        }) {
            Outcome::Answer(a) => a,
            Outcome::Forward => panic!("{name} forwarded"),
        }
    }

    #[test]
    fn services_headless_endpoints_and_srv() {
        let zone = zone();
        let a = ask(&zone, "web.default.svc.cluster.local", kind::A);
        assert_eq!(a.answers[0].data, Data::A(Ipv4Addr::new(10, 96, 0, 20)));
        let db = ask(&zone, "db.data.svc.cluster.local", kind::A);
        assert_eq!(db.answers.len(), 2, "only ready endpoints: {db:?}");
        let host = ask(&zone, "db-0.db.data.svc.cluster.local", kind::A);
        assert_eq!(host.answers[0].data, Data::A(Ipv4Addr::new(10, 244, 0, 7)));
        let dashed = ask(&zone, "10-244-0-8.db.data.svc.cluster.local", kind::A);
        assert_eq!(dashed.answers.len(), 1);
        let srv = ask(&zone, "_pg._tcp.db.data.svc.cluster.local", kind::SRV);
        assert_eq!(srv.answers.len(), 2);
        assert_eq!(srv.additional.len(), 2);
        let web_srv = ask(&zone, "_http._tcp.web.default.svc.cluster.local", kind::SRV);
        assert!(
            matches!(&web_srv.answers[0].data, Data::Srv { port: 80, target, .. } if target == "web.default.svc.cluster.local")
        );
    }

    #[test]
    fn negative_answers_alias_reverse_and_pods() {
        let zone = zone();
        let missing = ask(&zone, "nope.default.svc.cluster.local", kind::A);
        assert_eq!(missing.rcode, rcode::NXDOMAIN);
        assert!(matches!(missing.authority[0].data, Data::Soa { .. }));
        let nodata = ask(&zone, "web.default.svc.cluster.local", kind::AAAA);
        assert_eq!((nodata.rcode, nodata.answers.len()), (rcode::NOERROR, 0));
        let namespace = ask(&zone, "default.svc.cluster.local", kind::A);
        assert_eq!(namespace.rcode, rcode::NOERROR);
        let alias = ask(&zone, "out.default.svc.cluster.local", kind::A);
        assert_eq!(alias.answers[0].data, Data::Cname("example.org".into()));
        let ptr = ask(&zone, "20.0.96.10.in-addr.arpa", kind::PTR);
        assert_eq!(
            ptr.answers[0].data,
            Data::Ptr("web.default.svc.cluster.local".into())
        );
        let endpoint = ask(&zone, "7.0.244.10.in-addr.arpa", kind::PTR);
        assert_eq!(
            endpoint.answers[0].data,
            Data::Ptr("db-0.db.data.svc.cluster.local".into())
        );
        let pod = ask(&zone, "10-244-1-3.default.pod.cluster.local", kind::A);
        assert_eq!(pod.answers[0].data, Data::A(Ipv4Addr::new(10, 244, 1, 3)));
        assert!(matches!(
            zone.answer(&Question {
                name: "example.org".into(),
                kind: kind::A,
                class: 1
            }),
            Outcome::Forward
        ));
        assert!(matches!(
            zone.answer(&Question {
                name: "4.3.2.1.in-addr.arpa".into(),
                kind: kind::PTR,
                class: 1
            }),
            Outcome::Forward
        ));
    }
}
