//! The roles and bindings every cluster starts with (kube's `bootstrappolicy`), created at
//! start when missing, and their rules brought back when they carry
//! `rbac.authorization.kubernetes.io/autoupdate: "true"` (kube's reconciliation): the
//! super-user role, the user-facing `admin`/`edit`/`view` (aggregated from the
//! `system:aggregate-to-*` roles and any ClusterRole labelled like them), and what every
//! authenticated user may do (discovery, health, asking what they may do).

use serde_json::{Value, json};

const AGGREGATE: &str = "rbac.authorization.k8s.io/aggregate-to-";

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn paths(verbs: &[&str], urls: &[&str]) -> Value {
    json!({"nonResourceURLs": urls, "verbs": verbs})
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

fn aggregated(name: &str, labels: Value) -> Value {
    let mut role = cluster_role(name, labels, Vec::new());
    role["aggregationRule"] = json!({"clusterRoleSelectors": [
        {"matchLabels": {format!("{AGGREGATE}{name}"): "true"}}
    ]});
    role
}

const READ: &[&str] = &["get", "list", "watch"];
/// The group of node agents' identities (`system:node:<name>`).
pub const NODES: &str = "system:nodes";
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];

/// The default ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    let to = |role: &str| json!({format!("{AGGREGATE}{role}"): "true"});
    vec![
        cluster_role(
            "cluster-admin",
            json!({}),
            vec![rule(&["*"], &["*"], &["*"]), paths(&["*"], &["*"])],
        ),
        aggregated("admin", json!({})),
        aggregated("edit", to("admin")),
        aggregated("view", to("edit")),
        cluster_role(
            "system:aggregate-to-admin",
            to("admin"),
            vec![
                rule(
                    &[
                        "create",
                        "delete",
                        "deletecollection",
                        "get",
                        "list",
                        "patch",
                        "update",
                        "watch",
                    ],
                    &["rbac.authorization.k8s.io"],
                    &["rolebindings", "roles"],
                ),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:aggregate-to-edit",
            to("edit"),
            vec![
                rule(WRITE, &[""], &["configmaps", "secrets", "serviceaccounts"]),
                rule(&["impersonate"], &[""], &["serviceaccounts"]),
                rule(&["create"], &[""], &["serviceaccounts/token"]),
                rule(READ, &[""], &["secrets"]),
                rule(WRITE, &["coordination.k8s.io"], &["leases"]),
            ],
        ),
        cluster_role(
            "system:aggregate-to-view",
            to("view"),
            vec![
                rule(
                    READ,
                    &[""],
                    &[
                        "configmaps",
                        "events",
                        "serviceaccounts",
                        "namespaces",
                        "namespaces/status",
                    ],
                ),
                rule(READ, &["events.k8s.io"], &["events"]),
                rule(READ, &["coordination.k8s.io"], &["leases"]),
            ],
        ),
        cluster_role(
            "system:discovery",
            json!({}),
            vec![paths(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        cluster_role(
            "system:public-info-viewer",
            json!({}),
            vec![paths(
                &["get"],
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )],
        ),
        // What a node agent needs (kube gives nodes this through its Node authorizer; here the
        // role is bound to the `system:nodes` group).
        cluster_role(
            "system:node",
            json!({}),
            vec![
                rule(
                    &["get", "list", "watch", "create", "update", "patch"],
                    &[""],
                    &["nodes"],
                ),
                rule(
                    &["patch", "update"],
                    &[""],
                    &["nodes/status", "pods/status"],
                ),
                rule(&["get", "list", "watch", "delete"], &[""], &["pods"]),
                rule(
                    &["create", "patch", "update"],
                    &["", "events.k8s.io"],
                    &["events"],
                ),
                rule(
                    READ,
                    &[""],
                    &["configmaps", "secrets", "services", "endpoints"],
                ),
                rule(
                    &["get"],
                    &[""],
                    &["persistentvolumeclaims", "persistentvolumes"],
                ),
                rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
                rule(&["create"], &[""], &["serviceaccounts/token"]),
                rule(
                    &["get", "create", "update", "patch", "delete"],
                    &["coordination.k8s.io"],
                    &["leases"],
                ),
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:basic-user",
            json!({}),
            vec![
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                rule(
                    &["create"],
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                ),
            ],
        ),
    ]
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

/// The default ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding("cluster-admin", "cluster-admin", &[super::MASTERS]),
        binding(
            "system:discovery",
            "system:discovery",
            &[super::AUTHENTICATED],
        ),
        binding(
            "system:basic-user",
            "system:basic-user",
            &[super::AUTHENTICATED],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &[super::AUTHENTICATED, super::UNAUTHENTICATED],
        ),
        binding("system:node", "system:node", &[NODES]),
    ]
}
