//! The name-resolution files of a pod as the kubelet writes them: `/etc/resolv.conf` by the
//! pod's `dnsPolicy` and `dnsConfig`, `/etc/hosts` with the pod's own names and its
//! `hostAliases`.

use serde_json::Value;

/// The kubelet's limits (`validation.MaxDNSNameservers`, `MaxDNSSearchPaths`).
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 32;

/// A `resolv.conf`'s parts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolv {
    /// `nameserver` lines.
    pub servers: Vec<String>,
    /// The `search` list.
    pub searches: Vec<String>,
    /// `options`.
    pub options: Vec<String>,
}

impl Resolv {
    /// Reads a `resolv.conf`.
    pub fn parse(text: &str) -> Self {
        let mut resolv = Resolv::default();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => resolv.servers.extend(words.next().map(str::to_owned)),
                Some("search" | "domain") => {
                    resolv.searches = words.map(str::to_owned).collect();
                }
                Some("options") => resolv.options.extend(words.map(str::to_owned)),
                _ => {}
            }
        }
        resolv
    }

    /// The file (as containerd writes it: search, nameservers, options).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.searches.is_empty() {
            out.push_str(&format!("search {}\n", self.searches.join(" ")));
        }
        for server in &self.servers {
            out.push_str(&format!("nameserver {server}\n"));
        }
        if !self.options.is_empty() {
            out.push_str(&format!("options {}\n", self.options.join(" ")));
        }
        out
    }
}

fn unique(items: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    items
        .into_iter()
        .filter(|i| seen.insert(i.clone()))
        .collect()
}

/// Merges `options` (`ndots:5`) with a pod's `dnsConfig.options` (`{name, value}`), later
/// ones replacing earlier of the same name.
fn merge_options(existing: &[String], pod: &[Value]) -> Vec<String> {
    let mut merged: Vec<(String, String)> = Vec::new();
    let mut put = |name: &str, value: &str| match merged.iter_mut().find(|(n, _)| n == name) {
        Some(entry) => entry.1 = value.to_owned(),
        None => merged.push((name.to_owned(), value.to_owned())),
    };
    for option in existing {
        let (name, value) = option.split_once(':').unwrap_or((option, ""));
        put(name, value);
    }
    for option in pod {
        put(
            option["name"].as_str().unwrap_or(""),
            option["value"].as_str().unwrap_or(""),
        );
    }
    merged
        .into_iter()
        .filter(|(n, _)| !n.is_empty())
        .map(|(n, v)| if v.is_empty() { n } else { format!("{n}:{v}") })
        .collect()
}

/// A pod's `resolv.conf` (the kubelet's `GetPodDNS`): `ClusterFirst` (not on the host's
/// network) and `ClusterFirstWithHostNet` get the cluster's DNS server with kube's search
/// path and `ndots:5`; `Default` (and `ClusterFirst` on the host's network, or without a
/// cluster DNS server) the machine's; `None` only its `dnsConfig`, which the others have
/// appended.
pub fn resolv_conf(pod: &Value, cluster_dns: Option<&str>, domain: &str, host: &Resolv) -> Resolv {
    let spec = &pod["spec"];
    let host_network = spec["hostNetwork"] == true;
    let namespace = pod
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let policy = spec["dnsPolicy"].as_str().unwrap_or("ClusterFirst");
    let cluster = match policy {
        "None" => None,
        "ClusterFirstWithHostNet" => Some(true),
        "Default" => Some(false),
        _ => Some(!host_network),
    };
    let mut resolv = match (cluster, cluster_dns) {
        (None, _) => Resolv::default(),
        (Some(true), Some(server)) => {
            let mut searches = vec![
                format!("{namespace}.svc.{domain}"),
                format!("svc.{domain}"),
                domain.to_owned(),
            ];
            searches.extend(host.searches.iter().cloned());
            Resolv {
                servers: vec![server.to_owned()],
                searches: unique(searches),
                options: vec!["ndots:5".to_owned()],
            }
        }
        _ => host.clone(),
    };
    if let Some(config) = spec.get("dnsConfig").filter(|c| c.is_object()) {
        let strings = |key: &str| -> Vec<String> {
            config[key]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        let mut servers = resolv.servers.clone();
        servers.extend(strings("nameservers"));
        resolv.servers = unique(servers);
        let mut searches = resolv.searches.clone();
        searches.extend(strings("searches"));
        resolv.searches = unique(searches);
        let options: Vec<Value> = config["options"].as_array().cloned().unwrap_or_default();
        resolv.options = merge_options(&resolv.options, &options);
    }
    resolv.servers.truncate(MAX_NAMESERVERS);
    resolv.searches.truncate(MAX_SEARCHES);
    resolv
}

/// The pod's host name and domain (the kubelet's `GeneratePodHostNameAndDomain`):
/// `spec.hostname` or the pod's name (63 characters at most), and with a `subdomain`,
/// `subdomain.namespace.svc.domain`.
pub fn host_name_and_domain(pod: &Value, domain: &str) -> (String, Option<String>) {
    let spec = &pod["spec"];
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut host = spec["hostname"]
        .as_str()
        .filter(|h| !h.is_empty())
        .unwrap_or(name)
        .to_owned();
    if host.len() > 63 {
        host.truncate(63);
        while host.ends_with(['-', '.']) {
            host.pop();
        }
    }
    let namespace = pod
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let sub = spec["subdomain"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(|s| format!("{s}.{namespace}.svc.{domain}"));
    (host, sub)
}

/// A pod's `/etc/hosts` (the kubelet's `managedHostsFileContent`); on the host's network,
/// the machine's own file under kube's header, with the aliases added.
pub fn hosts_file(pod: &Value, pod_ips: &[String], domain: &str, machine_hosts: &str) -> String {
    let aliases = aliases(pod);
    if pod["spec"]["hostNetwork"] == true {
        return format!(
            "# Kubernetes-managed hosts file (host network).\n{machine_hosts}{aliases}"
        );
    }
    let (host, sub) = host_name_and_domain(pod, domain);
    let mut out = String::from(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    for ip in pod_ips {
        match &sub {
            Some(domain) => out.push_str(&format!("{ip}\t{host}.{domain}\t{host}\n")),
            None => out.push_str(&format!("{ip}\t{host}\n")),
        }
    }
    out.push_str(&aliases);
    out
}

fn aliases(pod: &Value) -> String {
    let Some(list) = pod["spec"]["hostAliases"]
        .as_array()
        .filter(|l| !l.is_empty())
    else {
        return String::new();
    };
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for alias in list {
        let names: Vec<&str> = alias["hostnames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        out.push_str(&format!(
            "{}\t{}\n",
            alias["ip"].as_str().unwrap_or(""),
            names.join("\t")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn host() -> Resolv {
        Resolv::parse("nameserver 192.0.2.53\nsearch example.test\noptions edns0\n")
    }

    #[test]
    fn cluster_first_gets_kubes_search_path() {
        let pod = json!({"metadata": {"name": "a", "namespace": "shop"}, "spec": {}});
        let resolv = resolv_conf(&pod, Some("10.96.0.10"), "cluster.local", &host());
        assert_eq!(
            resolv.render(),
            "search shop.svc.cluster.local svc.cluster.local cluster.local example.test\nnameserver 10.96.0.10\noptions ndots:5\n"
        );
        let on_host =
            json!({"metadata": {"name": "a", "namespace": "shop"}, "spec": {"hostNetwork": true}});
        assert_eq!(
            resolv_conf(&on_host, Some("10.96.0.10"), "cluster.local", &host()),
            host()
        );
        let with_host_net = json!({"metadata": {"namespace": "shop"},
            "spec": {"hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet"}});
        assert_eq!(
            resolv_conf(&with_host_net, Some("10.96.0.10"), "cluster.local", &host()).servers,
            ["10.96.0.10"]
        );
    }

    #[test]
    fn none_takes_only_dns_config_and_options_merge() {
        let pod = json!({"metadata": {"namespace": "x"}, "spec": {"dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["1.2.3.4"], "searches": ["a.b"],
                "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}}});
        let resolv = resolv_conf(&pod, Some("10.96.0.10"), "cluster.local", &host());
        assert_eq!(
            resolv.render(),
            "search a.b\nnameserver 1.2.3.4\noptions ndots:2 edns0\n"
        );
        let merged = json!({"metadata": {"namespace": "x"}, "spec": {
            "dnsConfig": {"options": [{"name": "ndots", "value": "1"}]}}});
        assert_eq!(
            resolv_conf(&merged, Some("10.96.0.10"), "cluster.local", &host()).options,
            ["ndots:1"]
        );
    }

    #[test]
    fn hosts_name_the_pod_and_its_aliases() {
        let pod = json!({"metadata": {"name": "web-0", "namespace": "db"},
            "spec": {"hostname": "web-0", "subdomain": "web",
                "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["foo.remote", "bar.remote"]}]}});
        let hosts = hosts_file(&pod, &["10.244.0.5".into()], "cluster.local", "");
        assert!(hosts.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(hosts.contains("10.244.0.5\tweb-0.web.db.svc.cluster.local\tweb-0\n"));
        assert!(
            hosts
                .ends_with("\n# Entries added by HostAliases.\n10.1.2.3\tfoo.remote\tbar.remote\n")
        );
    }
}
