//! Keeps the authorizer in step with the RBAC objects (kube's RBAC authorizer reads them from
//! informers: list, then watch from the list's revision, relisting after a break), creates the
//! default roles and bindings at start, and aggregates ClusterRoles: one with an
//! `aggregationRule` gets the rules of every ClusterRole its selectors match (kube-controller-
//! manager's `clusterrole-aggregation` controller).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use plinth_core::StatusReason;
use plinth_core::selector::LabelSelector;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::rbac::{RESOURCES, Rbac};
use plinth_registry::authz::Rule;
use plinth_registry::resources::ResourceDef;
use plinth_registry::{Client, ListOptions, Part, WatchOptions, WriteOptions};

const GROUP: &str = "rbac.authorization.k8s.io";
const AGGREGATOR: &str = "clusterrole-aggregation-controller";

fn def(registry: &Client, plural: &str) -> Option<Arc<ResourceDef>> {
    registry.resources.get(GROUP, "v1", plural)
}

/// Creates the default roles and bindings that are missing (and brings back the rules of
/// those marked for auto-update), loads every RBAC object into `rbac`, and aggregates; run
/// once before the server accepts requests.
///
/// # Errors
/// The API error if the defaults cannot be written or the objects read.
pub async fn start(registry: &Client, rbac: &Rbac) -> Result<(), plinth_core::ApiError> {
    let defaults = [
        ("clusterroles", super::bootstrap::cluster_roles()),
        (
            "clusterrolebindings",
            super::bootstrap::cluster_role_bindings(),
        ),
        ("roles", super::bootstrap::roles()),
        ("rolebindings", super::bootstrap::role_bindings()),
    ];
    for (plural, objects) in defaults {
        let Some(def) = def(registry, plural) else {
            continue;
        };
        for object in objects {
            reconcile_default(registry, &def, object).await?;
        }
    }
    for plural in RESOURCES {
        let Some(def) = def(registry, plural) else {
            continue;
        };
        let list = registry.list(&def, None, &ListOptions::default()).await?;
        for item in list["items"].as_array().into_iter().flatten() {
            rbac.put(plural, item);
        }
    }
    // The Node authorizer's graph, so that agents find their pods' objects from the start.
    for (group, plural) in crate::node::NodeAuthorizer::FOLLOWED {
        let Some(def) = registry.resources.get(group, "v1", plural) else {
            continue;
        };
        let (_, items) = registry
            .list_encoded(&def, None, &ListOptions::default())
            .await?
            .into_parts();
        rbac.nodes.replace(plural, items);
    }
    aggregate(registry, rbac).await;
    Ok(())
}

/// Creates a default object, or reconciles one that asks for auto-update as kube's
/// `reconcile` does: the default's rules (subjects, for a binding), labels and annotations
/// that are missing are added; what is there already, users' additions included, stays.
/// Roles that aggregate get their rules from the aggregation, not from here.
async fn reconcile_default(
    registry: &Client,
    def: &ResourceDef,
    object: Value,
) -> Result<(), plinth_core::ApiError> {
    let options = WriteOptions::internal("kube-apiserver");
    let namespace = plinth_core::meta::namespace(&object).map(str::to_owned);
    match registry
        .create(def, namespace.as_deref(), object.clone(), &options)
        .await
    {
        Ok(_) => return Ok(()),
        Err(e) if e.reason == StatusReason::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let name = plinth_core::meta::name(&object).unwrap_or("").to_owned();
    let list_field = if def.plural.ends_with("bindings") {
        "subjects"
    } else {
        "rules"
    };
    let aggregates = object.get("aggregationRule").is_some();
    registry
        .modify(
            def,
            namespace.as_deref(),
            &name,
            Part::Main,
            &options,
            |current| {
                let auto = current
                    .pointer("/metadata/annotations/rbac.authorization.kubernetes.io~1autoupdate")
                    .and_then(Value::as_str)
                    == Some("true");
                if !auto {
                    return Ok(false);
                }
                let mut changed = false;
                for field in ["labels", "annotations"] {
                    for (key, value) in object["metadata"][field].as_object().into_iter().flatten()
                    {
                        let meta = &mut current["metadata"];
                        if meta[field].get(key).is_none() {
                            meta[field][key] = value.clone();
                            changed = true;
                        }
                    }
                }
                if !aggregates {
                    let wanted = object[list_field].as_array().cloned().unwrap_or_default();
                    if !current[list_field].is_array() {
                        current[list_field] = json!([]);
                    }
                    if let Some(have) = current[list_field].as_array_mut() {
                        for entry in wanted {
                            if !have.contains(&entry) {
                                have.push(entry);
                                changed = true;
                            }
                        }
                    }
                }
                Ok(changed)
            },
        )
        .await
        .map(drop)
}

/// Gives every aggregating ClusterRole the rules of the ClusterRoles its selectors match (in
/// name order, each rule once).
async fn aggregate(registry: &Client, rbac: &Rbac) {
    let Some(def) = def(registry, "clusterroles") else {
        return;
    };
    let roles = rbac.cluster_roles();
    let mut names: Vec<&String> = roles.keys().collect();
    names.sort();
    for (name, role) in &roles {
        let Some(selectors) = &role.selectors else {
            continue;
        };
        let selectors: Vec<LabelSelector> = selectors
            .iter()
            .filter_map(|s| LabelSelector::from_object(s).ok())
            .collect();
        let mut rules: Vec<Rule> = Vec::new();
        for other in &names {
            if *other == name {
                continue;
            }
            let candidate = &roles[*other];
            if selectors.iter().any(|s| s.matches(&candidate.labels)) {
                for rule in &candidate.rules {
                    if !rules.contains(rule) {
                        rules.push(rule.clone());
                    }
                }
            }
        }
        if rules == role.rules {
            continue;
        }
        let rules = Value::Array(rules.iter().map(Rule::to_json).collect());
        let written = registry
            .modify(
                &def,
                None,
                name,
                Part::Main,
                &WriteOptions::internal(AGGREGATOR),
                |current| {
                    if current.get("rules") == Some(&rules) {
                        return Ok(false);
                    }
                    current["rules"] = rules.clone();
                    Ok(true)
                },
            )
            .await;
        match written {
            Ok(Some(written)) => rbac.put("clusterroles", &written.object),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(role = %name, error = %e.message, "aggregating a ClusterRole failed")
            }
        }
    }
}

/// Starts one loop per RBAC resource and per resource of the Node authorizer's graph; they
/// end when `stopping` becomes true.
pub fn spawn(registry: Client, rbac: Arc<Rbac>, stopping: watch::Receiver<bool>) {
    for plural in RESOURCES {
        tokio::spawn(follow(
            registry.clone(),
            rbac.clone(),
            (GROUP, plural),
            Follower::Rbac,
            stopping.clone(),
        ));
    }
    for resource in crate::node::NodeAuthorizer::FOLLOWED {
        tokio::spawn(follow(
            registry.clone(),
            rbac.clone(),
            resource,
            Follower::Nodes,
            stopping.clone(),
        ));
    }
}

/// Which part of the authorizer a followed resource feeds.
#[derive(Clone, Copy)]
enum Follower {
    /// RBAC's objects (and ClusterRole aggregation after each change of ClusterRoles).
    Rbac,
    /// The Node authorizer's graph.
    Nodes,
}

/// Lists `plural` of `group` and watches it from the list's revision, applying every change
/// to the authorizer; after a break, lists again (replacing what it knew of the resource).
async fn follow(
    registry: Client,
    rbac: Arc<Rbac>,
    (group, plural): (&'static str, &'static str),
    follower: Follower,
    mut stopping: watch::Receiver<bool>,
) {
    let Some(def) = registry.resources.get(group, "v1", plural) else {
        return;
    };
    let replace = |items: plinth_registry::Items| match follower {
        Follower::Rbac => rbac.replace(plural, items),
        Follower::Nodes => rbac.nodes.replace(plural, items),
    };
    let apply = |kind: &str, object: &Value| match (follower, kind) {
        (Follower::Rbac, "DELETED") => rbac.remove(plural, object),
        (Follower::Rbac, _) => rbac.put(plural, object),
        (Follower::Nodes, "DELETED") => rbac.nodes.remove(plural, object),
        (Follower::Nodes, _) => rbac.nodes.put(plural, object),
    };
    while !*stopping.borrow() {
        let listed = registry
            .list_encoded(&def, None, &ListOptions::default())
            .await;
        let list = match listed {
            Ok(list) => list,
            Err(e) => {
                tracing::warn!(%plural, error = %e.message, "authorizer: list failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // Each item decoded in turn; the authorizer keeps what it needs of it, not the list.
        let (revision, items) = list.into_parts();
        replace(items);
        if plural == "clusterroles" {
            aggregate(&registry, &rbac).await;
        }
        let options = WatchOptions {
            list: ListOptions {
                resource_version: revision,
                ..ListOptions::default()
            },
            ..WatchOptions::default()
        };
        let mut events = match registry.watch(def.clone(), None, options).await {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(%plural, error = %e.message, "authorizer: watch failed; relisting");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                _ = stopping.wait_for(|s| *s) => return,
            };
            let Some(event) = event else { break };
            match event.kind {
                kind @ ("ADDED" | "MODIFIED" | "DELETED") => apply(kind, &event.object()),
                "ERROR" => break,
                _ => continue,
            }
            if plural == "clusterroles" {
                aggregate(&registry, &rbac).await;
            }
        }
    }
}
