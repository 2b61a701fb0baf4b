//! The roles and bindings every cluster starts with — kube 1.32's `bootstrappolicy` in full
//! (read from `bootstrap-policy.json`, which `scripts/bootstrap-policy.py` writes from
//! upstream's own record of the policy): `cluster-admin`, the user-facing `admin`/`edit`/
//! `view` aggregated from the `system:aggregate-to-*` roles (and any ClusterRole labelled
//! like them), `system:controller:*`, `system:kube-scheduler`, `system:node`,
//! `system:auth-delegator`, … and the Roles and RoleBindings of `kube-system` and
//! `kube-public` — plus Plinth's own: what its node agents need while no Node authorizer
//! gives it to them. The controller creates what is missing at start and reconciles what is
//! marked `rbac.authorization.kubernetes.io/autoupdate: "true"` as kube does: missing rules,
//! subjects, labels and annotations added, what users added kept.

use serde_json::{Value, json};

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn cluster_role(name: &str, labels: Value, rules: Vec<Value>) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels,
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "rules": rules,
    })
}

pub use plinth_registry::user::NODES;
/// The role Plinth's node agents hold (through [`NODES`]).
pub const NODE_AGENT_ROLE: &str = "plinth:node-agent";

/// kube's policy, as upstream records it (read once).
static POLICY: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
    serde_json::from_str(include_str!("bootstrap-policy.json")).unwrap_or_else(|_| json!({}))
});

fn items(key: &str) -> Vec<Value> {
    POLICY[key].as_array().cloned().unwrap_or_default()
}

/// The default ClusterRoles: kube's, and Plinth's node-agent role.
pub fn cluster_roles() -> Vec<Value> {
    let mut roles = items("clusterRoles");
    roles.push(node_agent_role());
    roles.push(network_agent_role());
    roles
}

/// The default Roles (of `kube-system` and `kube-public`).
pub fn roles() -> Vec<Value> {
    items("roles")
}

/// The default RoleBindings.
pub fn role_bindings() -> Vec<Value> {
    items("roleBindings")
}

/// What a node agent needs beyond kube's Node authorizer (which grants the `system:node`
/// role's rules and the objects of its own pods): the agent is also its node's service proxy,
/// so it reads what `system:node-proxier` reads, and it records events.k8s.io Events.
fn node_agent_role() -> Value {
    cluster_role(
        NODE_AGENT_ROLE,
        json!({}),
        vec![
            rule(&["list", "watch"], &[""], &["services", "endpoints"]),
            rule(
                &["list", "watch"],
                &["discovery.k8s.io"],
                &["endpointslices"],
            ),
            rule(
                &["create", "patch", "update"],
                &["events.k8s.io"],
                &["events"],
            ),
        ],
    )
}

/// The group of the identities agents follow NetworkPolicy with (a node's own may not list
/// every pod, as kube's Node authorizer holds; a CNI daemon has an account of its own).
pub const NETWORK_AGENTS: &str = "plinth:network-agents";
/// The role [`NETWORK_AGENTS`] hold.
pub const NETWORK_AGENT_ROLE: &str = "plinth:network-agent";

/// What a NetworkPolicy follower reads: every pod, namespace and policy.
fn network_agent_role() -> Value {
    cluster_role(
        NETWORK_AGENT_ROLE,
        json!({}),
        vec![
            rule(&["list", "watch"], &[""], &["pods", "namespaces"]),
            rule(
                &["list", "watch"],
                &["networking.k8s.io"],
                &["networkpolicies"],
            ),
        ],
    )
}

fn binding(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    })
}

/// The default ClusterRoleBindings: kube's, and the node agents' bindings.
pub fn cluster_role_bindings() -> Vec<Value> {
    let mut bindings = items("clusterRoleBindings");
    bindings.push(binding(NODE_AGENT_ROLE, NODE_AGENT_ROLE, &[NODES]));
    bindings.push(binding(
        NETWORK_AGENT_ROLE,
        NETWORK_AGENT_ROLE,
        &[NETWORK_AGENTS],
    ));
    bindings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubes_policy_is_read_whole() {
        let cluster = cluster_roles();
        assert!(cluster.len() >= 65, "{} ClusterRoles", cluster.len());
        let named = |list: &[Value], name: &str| list.iter().any(|r| r["metadata"]["name"] == name);
        for name in [
            "cluster-admin",
            "admin",
            "edit",
            "view",
            "system:auth-delegator",
            NODE_AGENT_ROLE,
        ] {
            assert!(named(&cluster, name), "{name}");
        }
        assert!(cluster_role_bindings().len() >= 46);
        assert!(
            roles()
                .iter()
                .all(|r| r["metadata"]["namespace"].is_string())
        );
        assert!(!role_bindings().is_empty());
    }
}
