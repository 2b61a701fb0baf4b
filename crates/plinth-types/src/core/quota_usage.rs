//! What an object uses of a ResourceQuota: kube's quota evaluators (`pods`: the pod's count
//! while it lives and its compute requests and limits; `services`: load balancers and node
//! ports; `persistentvolumeclaims`: storage, per class too; any other resource: its object
//! count), the scopes that decide which quotas a pod counts against, and quantities as exact
//! milli-units.

use std::collections::BTreeMap;

use serde_json::Value;

/// Usage per quota resource name, in milli-units.
pub type Usage = BTreeMap<String, i128>;

/// The core resources a quota may also name without `count/`.
pub const LEGACY: [&str; 7] = [
    "configmaps",
    "secrets",
    "services",
    "pods",
    "persistentvolumeclaims",
    "replicationcontrollers",
    "resourcequotas",
];

/// A quantity (`500m`, `252Mi`, `"2"`, 3) in milli-units, if it is one.
pub fn milli(value: &Value) -> Option<i128> {
    #[allow(clippy::cast_possible_truncation)]
    plinth_core::quantity::of(value).map(|v| (v * 1000.0).round() as i128)
}

/// Milli-units of the quota resource `name` as a quantity kube reads back to the same value:
/// whole numbers plainly — bytes (memory, storage) with the largest binary suffix that
/// divides them, as they are written — else in `m`.
pub fn quantity(name: &str, milli: i128) -> String {
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    let whole = milli / 1000;
    let bytes = ["memory", "storage", "hugepages-"]
        .iter()
        .any(|b| name.contains(b));
    if bytes {
        for (suffix, factor) in [
            ("Ti", 1_i128 << 40),
            ("Gi", 1 << 30),
            ("Mi", 1 << 20),
            ("Ki", 1 << 10),
        ] {
            if whole != 0 && whole % factor == 0 {
                return format!("{}{suffix}", whole / factor);
            }
        }
    }
    whole.to_string()
}

/// The resource whose objects a quota resource name counts or measures: `(group, plural)`.
pub fn measured_resource(name: &str) -> Option<(String, String)> {
    let core = |plural: &str| Some((String::new(), plural.to_owned()));
    if let Some(rest) = name.strip_prefix("count/") {
        return Some(match rest.split_once('.') {
            Some((plural, group)) => (group.to_owned(), plural.to_owned()),
            None => (String::new(), rest.to_owned()),
        });
    }
    if LEGACY.contains(&name) {
        return core(name);
    }
    if name.starts_with("services.") {
        return core("services");
    }
    if name == "requests.storage" || name.contains(".storageclass.storage.k8s.io/") {
        return core("persistentvolumeclaims");
    }
    if ["cpu", "memory", "ephemeral-storage"].contains(&name)
        || name.starts_with("requests.")
        || name.starts_with("limits.")
    {
        return core("pods");
    }
    None
}

/// Whether usage of `name` is measured from the objects (not their count alone).
pub fn is_measured(group: &str, plural: &str) -> bool {
    group.is_empty() && ["pods", "services", "persistentvolumeclaims"].contains(&plural)
}

/// What `object` (of `group`/`plural`) uses; `now` (Unix seconds) decides whether a pod past
/// its deletion grace still counts.
pub fn usage(group: &str, plural: &str, object: &Value, now: i64) -> Usage {
    let mut out = Usage::new();
    let count = if group.is_empty() {
        format!("count/{plural}")
    } else {
        format!("count/{plural}.{group}")
    };
    out.insert(count, 1000);
    if !group.is_empty() {
        return out;
    }
    match plural {
        "pods" => pod_usage(object, now, &mut out),
        "services" => service_usage(object, &mut out),
        "persistentvolumeclaims" => claim_usage(object, &mut out),
        other if LEGACY.contains(&other) => {
            out.insert(other.to_owned(), 1000);
        }
        _ => {}
    }
    out
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// kube's `QuotaV1Pod`: a pod counts until it ends (Succeeded, Failed) or its deletion's
/// grace period is over.
fn pod_lives(pod: &Value, now: i64) -> bool {
    if matches!(text(pod, "/status/phase"), "Succeeded" | "Failed") {
        return false;
    }
    let deleting = pod
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(plinth_core::meta::parse_time);
    let grace = pod
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64);
    !matches!((deleting, grace), (Some(at), Some(grace)) if now > at + grace)
}

/// A pod's effective requests or limits (`field`): its containers' sum, at least each init
/// container's, plus the pod overhead.
fn pod_resources(pod: &Value, field: &str) -> BTreeMap<String, i128> {
    let of = |container: &Value| -> BTreeMap<String, i128> {
        container
            .pointer(&format!("/resources/{field}"))
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(name, q)| milli(q).map(|m| (name.clone(), m)))
            .collect()
    };
    let list = |key: &str| {
        pod.pointer(&format!("/spec/{key}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut total = BTreeMap::new();
    for container in list("containers") {
        for (name, m) in of(&container) {
            *total.entry(name).or_insert(0) += m;
        }
    }
    for init in list("initContainers") {
        for (name, m) in of(&init) {
            let entry = total.entry(name).or_insert(0);
            *entry = (*entry).max(m);
        }
    }
    for (name, q) in pod
        .pointer("/spec/overhead")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if let Some(m) = milli(q) {
            *total.entry(name.clone()).or_insert(0) += m;
        }
    }
    total
}

/// An extended resource name (`example.com/dongle`): a domain outside `kubernetes.io`, not a
/// `requests.` name.
fn extended(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

fn pod_usage(pod: &Value, now: i64, out: &mut Usage) {
    if !pod_lives(pod, now) {
        return;
    }
    out.insert("pods".into(), 1000);
    for (name, m) in pod_resources(pod, "requests") {
        match name.as_str() {
            "cpu" | "memory" | "ephemeral-storage" => {
                out.insert(name.clone(), m);
                out.insert(format!("requests.{name}"), m);
            }
            n if n.starts_with("hugepages-") || extended(n) => {
                out.insert(format!("requests.{name}"), m);
            }
            _ => {}
        }
    }
    for (name, m) in pod_resources(pod, "limits") {
        if matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage") {
            out.insert(format!("limits.{name}"), m);
        }
    }
}

fn service_usage(service: &Value, out: &mut Usage) {
    out.insert("services".into(), 1000);
    let ports = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let all = i128::try_from(ports.len()).unwrap_or(0) * 1000;
    match text(service, "/spec/type") {
        "NodePort" => {
            out.insert("services.nodeports".into(), all);
        }
        "LoadBalancer" => {
            out.insert("services.loadbalancers".into(), 1000);
            let allocated = service
                .pointer("/spec/allocateLoadBalancerNodePorts")
                .and_then(Value::as_bool)
                != Some(false);
            let node_ports = if allocated {
                all
            } else {
                let given = ports
                    .iter()
                    .filter(|p| p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0)
                    .count();
                i128::try_from(given).unwrap_or(0) * 1000
            };
            out.insert("services.nodeports".into(), node_ports);
        }
        _ => {}
    }
}

fn claim_usage(claim: &Value, out: &mut Usage) {
    out.insert("persistentvolumeclaims".into(), 1000);
    let class = text(claim, "/spec/storageClassName");
    if !class.is_empty() {
        out.insert(
            format!("{class}.storageclass.storage.k8s.io/persistentvolumeclaims"),
            1000,
        );
    }
    if let Some(storage) = claim
        .pointer("/spec/resources/requests/storage")
        .and_then(milli)
    {
        out.insert("requests.storage".into(), storage);
        if !class.is_empty() {
            out.insert(
                format!("{class}.storageclass.storage.k8s.io/requests.storage"),
                storage,
            );
        }
    }
}

/// A pod's QoS is BestEffort: no container asks for or limits CPU or memory.
fn best_effort(pod: &Value) -> bool {
    ["requests", "limits"].iter().all(|field| {
        let resources = pod_resources(pod, field);
        !resources.contains_key("cpu") && !resources.contains_key("memory")
    })
}

/// Whether a pod names other namespaces in its (anti-)affinity terms.
fn cross_namespace_affinity(pod: &Value) -> bool {
    ["podAffinity", "podAntiAffinity"].iter().any(|kind| {
        let Some(affinity) = pod.pointer(&format!("/spec/affinity/{kind}")) else {
            return false;
        };
        let required = affinity
            .get("requiredDuringSchedulingIgnoredDuringExecution")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let preferred = affinity
            .get("preferredDuringSchedulingIgnoredDuringExecution")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|w| w.get("podAffinityTerm").cloned());
        required.into_iter().chain(preferred).any(|term| {
            term.get("namespaceSelector").is_some_and(|s| !s.is_null())
                || term
                    .get("namespaces")
                    .and_then(Value::as_array)
                    .is_some_and(|n| !n.is_empty())
        })
    })
}

/// Whether `scope` (a quota's scope name) holds for `pod`, with a scope selector's operator
/// and values where given.
fn scope_holds(scope: &str, operator: &str, values: &[&str], pod: &Value) -> bool {
    let terminating = pod
        .pointer("/spec/activeDeadlineSeconds")
        .and_then(Value::as_i64)
        .is_some_and(|s| s >= 0);
    let holds = match scope {
        "Terminating" => terminating,
        "NotTerminating" => !terminating,
        "BestEffort" => best_effort(pod),
        "NotBestEffort" => !best_effort(pod),
        "CrossNamespacePodAffinity" => cross_namespace_affinity(pod),
        "PriorityClass" => {
            let class = text(pod, "/spec/priorityClassName");
            return match operator {
                "In" => values.contains(&class),
                "NotIn" => !values.contains(&class),
                "Exists" => !class.is_empty(),
                "DoesNotExist" => class.is_empty(),
                _ => false,
            };
        }
        _ => false,
    };
    if operator == "DoesNotExist" {
        !holds
    } else {
        holds
    }
}

/// Whether `quota` counts `object` of `group`/`plural`: an unscoped quota counts every
/// object; a scoped one (`spec.scopes`, `spec.scopeSelector`) only pods that meet every scope.
pub fn quota_counts(quota: &Value, group: &str, plural: &str, object: &Value) -> bool {
    let scopes: Vec<&str> = quota
        .pointer("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let selector = quota
        .pointer("/spec/scopeSelector/matchExpressions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if scopes.is_empty() && selector.is_empty() {
        return true;
    }
    if !group.is_empty() || plural != "pods" {
        return false;
    }
    scopes.iter().all(|s| scope_holds(s, "Exists", &[], object))
        && selector.iter().all(|e| {
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            scope_holds(
                e.get("scopeName").and_then(Value::as_str).unwrap_or(""),
                e.get("operator").and_then(Value::as_str).unwrap_or(""),
                &values,
                object,
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pods_use_their_requests_and_limits_while_they_live() {
        let pod = json!({"spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "250m", "memory": "100Mi", "example.com/dongle": "2"},
                               "limits": {"cpu": "1", "example.com/dongle": "2"}}},
                {"resources": {"requests": {"cpu": "250m", "memory": "152Mi"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}]}});
        let used = usage("", "pods", &pod, 0);
        assert_eq!(used["pods"], 1000);
        assert_eq!(used["count/pods"], 1000);
        assert_eq!(used["requests.cpu"], 2000, "an init container's larger ask");
        assert_eq!(quantity("memory", used["memory"]), "252Mi");
        assert_eq!(used["requests.example.com/dongle"], 2000);
        assert_eq!(used["limits.cpu"], 1000);
        assert!(!used.contains_key("limits.example.com/dongle"));
        let ended = json!({"status": {"phase": "Succeeded"}, "spec": pod["spec"]});
        let used = usage("", "pods", &ended, 0);
        assert_eq!(used.keys().collect::<Vec<_>>(), ["count/pods"]);
    }

    #[test]
    fn services_use_node_ports_and_load_balancers() {
        let ports = json!([{"port": 80}, {"port": 81, "nodePort": 30001}]);
        let lb = json!({"spec": {"type": "LoadBalancer", "ports": ports}});
        assert_eq!(usage("", "services", &lb, 0)["services.nodeports"], 2000);
        let lb = json!({"spec": {"type": "LoadBalancer", "ports": ports, "allocateLoadBalancerNodePorts": false}});
        let used = usage("", "services", &lb, 0);
        assert_eq!(
            (used["services.nodeports"], used["services.loadbalancers"]),
            (1000, 1000)
        );
        let plain = usage("", "services", &json!({"spec": {"ports": ports}}), 0);
        assert!(!plain.contains_key("services.nodeports"));
        assert_eq!(plain["services"], 1000);
    }

    #[test]
    fn scoped_quotas_count_only_the_pods_in_scope() {
        let quota = |scopes: Value| json!({"spec": {"scopes": scopes}});
        let running = json!({"spec": {"containers": [{}]}});
        let deadline = json!({"spec": {"activeDeadlineSeconds": 60, "containers": [{"resources": {"requests": {"cpu": "1"}}}]}});
        assert!(quota_counts(
            &quota(json!(["NotTerminating", "BestEffort"])),
            "",
            "pods",
            &running
        ));
        assert!(!quota_counts(
            &quota(json!(["Terminating"])),
            "",
            "pods",
            &running
        ));
        assert!(quota_counts(
            &quota(json!(["Terminating", "NotBestEffort"])),
            "",
            "pods",
            &deadline
        ));
        assert!(!quota_counts(
            &quota(json!(["Terminating"])),
            "",
            "services",
            &running
        ));
        let by_class = json!({"spec": {"scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}});
        assert!(!quota_counts(&by_class, "", "pods", &running));
        assert!(quota_counts(
            &by_class,
            "",
            "pods",
            &json!({"spec": {"priorityClassName": "high"}})
        ));
    }

    #[test]
    fn quantities_round_trip() {
        assert_eq!(milli(&json!("500m")), Some(500));
        assert_eq!(quantity("cpu", 500), "500m");
        assert_eq!(quantity("cpu", 2000), "2");
        assert_eq!(
            quantity("requests.ephemeral-storage", milli(&json!("30Gi")).unwrap()),
            "30Gi"
        );
        assert_eq!(quantity("count/configmaps", 1_024_000), "1024");
        assert_eq!(quantity("pods", 0), "0");
        assert_eq!(
            measured_resource("requests.storage"),
            Some((String::new(), "persistentvolumeclaims".into()))
        );
        assert_eq!(
            measured_resource("limits.cpu"),
            Some((String::new(), "pods".into()))
        );
        assert_eq!(
            measured_resource("count/widgets.example.com"),
            Some(("example.com".into(), "widgets".into()))
        );
    }
}
