//! Discovery: `/version`, `/api`, `/apis`, the per-group documents, and the aggregated
//! discovery documents (`apidiscovery.k8s.io/v2`) that kubectl 1.32 asks for first.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use plinth_registry::resources::{ResourceDef, Resources};

/// The Kubernetes version Plinth speaks.
pub const KUBE_MAJOR: &str = "1";
/// The Kubernetes minor version Plinth speaks.
pub const KUBE_MINOR: &str = "32";

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "gitVersion": format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0-plinth.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "n/a (Rust)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, if std::env::consts::ARCH == "x86_64" { "amd64" } else { std::env::consts::ARCH }),
    })
}

/// Resources grouped as group → version → resources.
fn grouped(resources: &Resources) -> BTreeMap<String, BTreeMap<String, Vec<Arc<ResourceDef>>>> {
    let mut groups: BTreeMap<String, BTreeMap<String, Vec<Arc<ResourceDef>>>> = BTreeMap::new();
    for def in resources.all() {
        groups
            .entry(def.group_version.group.clone())
            .or_default()
            .entry(def.group_version.version.clone())
            .or_default()
            .push(def);
    }
    groups
}

/// `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// A Kubernetes-like version (`v2`, `v1beta3`, `v1alpha1`): its stability (GA 2, beta 1,
/// alpha 0), major and minor numbers.
fn kube_version(version: &str) -> Option<(u8, u64, u64)> {
    let rest = version.strip_prefix('v')?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (major, rest) = rest.split_at(digits);
    if major.is_empty() || major.starts_with('0') {
        return None;
    }
    let major = major.parse().ok()?;
    if rest.is_empty() {
        return Some((2, major, 0));
    }
    let (stability, minor) = if let Some(minor) = rest.strip_prefix("beta") {
        (1, minor)
    } else {
        (0, rest.strip_prefix("alpha")?)
    };
    if minor.is_empty() || minor.starts_with('0') || !minor.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stability, major, minor.parse().ok()?))
}

/// kube's version priority (`CompareKubeAwareVersionStrings`), highest first: GA before beta
/// before alpha, higher major then higher minor first; other versions after them, in
/// lexicographic order (`v10, v2, v1, v11beta2, v10beta3, v3beta1, v12alpha1, v11alpha2, foo1`).
pub fn by_priority(a: &str, b: &str) -> std::cmp::Ordering {
    match (kube_version(a), kube_version(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// The versions of a group, by priority.
fn ordered<T>(versions: &BTreeMap<String, T>) -> Vec<(&String, &T)> {
    let mut ordered: Vec<(&String, &T)> = versions.iter().collect();
    ordered.sort_by(|(a, _), (b, _)| by_priority(a, b));
    ordered
}

fn group_entry(group: &str, versions: &BTreeMap<String, Vec<Arc<ResourceDef>>>) -> Value {
    let listed: Vec<Value> = ordered(versions)
        .into_iter()
        .map(|(v, _)| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": listed,
        "preferredVersion": listed.first().cloned().unwrap_or(json!({})),
    })
}

/// `/apis`.
pub fn groups(resources: &Resources) -> Value {
    let groups: Vec<Value> = grouped(resources)
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, versions)| group_entry(g, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, if served.
pub fn group(resources: &Resources, group: &str) -> Option<Value> {
    let grouped = grouped(resources);
    let versions = grouped.get(group).filter(|_| !group.is_empty())?;
    let mut entry = group_entry(group, versions);
    entry["kind"] = json!("APIGroup");
    entry["apiVersion"] = json!("v1");
    Some(entry)
}

/// `/api/v1` or `/apis/<group>/<version>`, if served.
pub fn resource_list(resources: &Resources, group: &str, version: &str) -> Option<Value> {
    let grouped = grouped(resources);
    let defs = grouped.get(group)?.get(version)?;
    let mut listed = Vec::new();
    for def in defs {
        let mut entry = json!({
            "name": def.plural,
            "singularName": def.singular,
            "namespaced": def.namespaced,
            "kind": def.kind,
            "verbs": def.verbs(),
        });
        if !def.short_names.is_empty() {
            entry["shortNames"] = json!(def.short_names);
        }
        if !def.categories.is_empty() {
            entry["categories"] = json!(def.categories);
        }
        listed.push(entry);
        if def.status_subresource {
            listed.push(json!({
                "name": format!("{}/status", def.plural),
                "singularName": "",
                "namespaced": def.namespaced,
                "kind": def.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if def.scale.is_some() {
            listed.push(json!({
                "name": format!("{}/scale", def.plural),
                "singularName": "",
                "namespaced": def.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        for sub in &def.discovered_subresources {
            let mut entry = json!({
                "name": format!("{}/{}", def.plural, sub.name),
                "singularName": "",
                "namespaced": def.namespaced,
                "kind": def.kind,
                "verbs": sub.verbs,
            });
            if let Some((group, version, kind)) = sub.kind {
                entry["kind"] = json!(kind);
                if (group, version)
                    != (
                        def.group_version.group.as_str(),
                        def.group_version.version.as_str(),
                    )
                {
                    entry["group"] = json!(group);
                    entry["version"] = json!(version);
                }
            }
            listed.push(entry);
        }
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": listed}),
    )
}

/// The aggregated discovery document for the core group (`legacy`) or all named groups.
pub fn aggregated(resources: &Resources, legacy: bool, api_version: &str) -> Value {
    let items: Vec<Value> = grouped(resources)
        .iter()
        .filter(|(g, _)| g.is_empty() == legacy)
        .map(|(group, versions)| {
            let versions: Vec<Value> = ordered(versions)
                .into_iter()
                .map(|(version, defs)| {
                    let resources: Vec<Value> =
                        defs.iter().map(|def| aggregated_resource(def)).collect();
                    json!({"version": version, "resources": resources, "freshness": "Current"})
                })
                .collect();
            let mut metadata = json!({"creationTimestamp": null});
            if !group.is_empty() {
                metadata["name"] = json!(group);
            }
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": api_version, "metadata": {}, "items": items})
}

fn aggregated_resource(def: &ResourceDef) -> Value {
    let kind = json!({"group": def.group_version.group, "version": def.group_version.version, "kind": def.kind});
    let mut entry = json!({
        "resource": def.plural,
        "responseKind": kind,
        "scope": if def.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": def.singular,
        "verbs": def.verbs(),
    });
    if !def.short_names.is_empty() {
        entry["shortNames"] = json!(def.short_names);
    }
    if !def.categories.is_empty() {
        entry["categories"] = json!(def.categories);
    }
    let mut subresources = Vec::new();
    if def.status_subresource {
        subresources.push(json!({"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]}));
    }
    if def.scale.is_some() {
        subresources.push(json!({
            "subresource": "scale",
            "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": ["get", "patch", "update"],
        }));
    }
    for sub in &def.discovered_subresources {
        let response = match sub.kind {
            Some((group, version, kind)) => {
                json!({"group": group, "version": version, "kind": kind})
            }
            None => kind.clone(),
        };
        subresources
            .push(json!({"subresource": sub.name, "responseKind": response, "verbs": sub.verbs}));
    }
    if !subresources.is_empty() {
        entry["subresources"] = Value::Array(subresources);
    }
    entry
}

/// `/apis` with the groups extension servers serve (APIServices) added.
pub fn with_remotes(
    mut list: Value,
    remotes: &[std::sync::Arc<crate::aggregator::Remote>],
) -> Value {
    let Some(groups) = list.get_mut("groups").and_then(Value::as_array_mut) else {
        return list;
    };
    for remote in remotes {
        let gv = format!("{}/{}", remote.group, remote.version);
        let entry = json!({"groupVersion": gv, "version": remote.version});
        match groups
            .iter_mut()
            .find(|g| g["name"] == remote.group.as_str())
        {
            Some(group) => {
                if let Some(versions) = group.get_mut("versions").and_then(Value::as_array_mut)
                    && !versions.contains(&entry)
                {
                    versions.push(entry);
                }
            }
            None => groups.push(json!({"name": remote.group, "versions": [entry.clone()],
                "preferredVersion": entry})),
        }
    }
    list
}

/// `/apis/<group>` of a group only extension servers serve.
pub fn remote_group(
    remotes: &[std::sync::Arc<crate::aggregator::Remote>],
    group: &str,
) -> Option<Value> {
    let versions: Vec<Value> = remotes
        .iter()
        .filter(|r| r.group == group)
        .map(
            |r| json!({"groupVersion": format!("{}/{}", r.group, r.version), "version": r.version}),
        )
        .collect();
    let preferred = versions.first()?.clone();
    Some(
        json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions,
        "preferredVersion": preferred}),
    )
}

/// The aggregated `/apis` with the versions extension servers serve, from their last
/// discovery check (a version that has not passed one yet is left out).
pub fn with_remotes_aggregated(
    mut list: Value,
    remotes: &[std::sync::Arc<crate::aggregator::Remote>],
) -> Value {
    let Some(items) = list.get_mut("items").and_then(Value::as_array_mut) else {
        return list;
    };
    for remote in remotes {
        let Some(version) = crate::aggregator::aggregated_versions(remote) else {
            continue;
        };
        match items
            .iter_mut()
            .find(|g| g.pointer("/metadata/name") == Some(&json!(remote.group)))
        {
            Some(group) => {
                if let Some(versions) = group.get_mut("versions").and_then(Value::as_array_mut) {
                    versions.push(version);
                }
            }
            None => items.push(
                json!({"metadata": {"name": remote.group, "creationTimestamp": null},
                "versions": [version]}),
            ),
        }
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_by_kubes_priority() {
        let mut versions = vec![
            "foo10",
            "v1",
            "v11alpha2",
            "v10beta3",
            "v2",
            "v3beta1",
            "foo1",
            "v12alpha1",
            "v10",
            "v11beta2",
            "v1beta1",
            "v1alpha3",
        ];
        versions.sort_by(|a, b| by_priority(a, b));
        assert_eq!(
            versions,
            [
                "v10",
                "v2",
                "v1",
                "v11beta2",
                "v10beta3",
                "v3beta1",
                "v1beta1",
                "v12alpha1",
                "v11alpha2",
                "v1alpha3",
                "foo1",
                "foo10"
            ]
        );
    }
}
