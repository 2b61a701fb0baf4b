//! kube's Node authorizer: a node agent (`system:node:<name>`, group `system:nodes`) reads
//! only the Secrets, ConfigMaps, PersistentVolumeClaims (and their volumes) and ServiceAccount
//! tokens that the pods bound to it use, its own Node and Lease, and the pods bound to it
//! (list and watch with `spec.nodeName=<name>`); everything else a node may do is the
//! `system:node` role's static rules. The relationships come from a graph of pods, claims and
//! volume attachments kept up to date from their watches (kube's graph populator).

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

use serde_json::Value;

use plinth_registry::authz::{Attributes, Rule};
use plinth_registry::user::User;

/// The namespace of node Leases.
const NODE_LEASES: &str = "kube-node-lease";

/// What the Node authorizer decides: allowed, or no opinion (with why, when it has a reason;
/// RBAC decides next).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeDecision {
    /// Allowed.
    Allow,
    /// No opinion, with kube's reason (empty for none).
    NoOpinion(String),
}

/// The kinds of object a pod refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Secret,
    ConfigMap,
    Claim,
    ServiceAccount,
    Pod,
}

/// What one bound pod refers to.
#[derive(Debug, Default)]
struct PodEdges {
    node: String,
    refs: Vec<(Kind, String)>,
}

#[derive(Debug, Default)]
struct Graph {
    /// Bound pods by (namespace, name).
    pods: HashMap<(String, String), PodEdges>,
    /// For each referenced object, the nodes whose pods refer to it, with how many pods (a
    /// pod's own node is in `pods`).
    used: HashMap<(Kind, String, String), HashMap<String, usize>>,
    /// The volume each claim is bound to, by (namespace, claim).
    claim_volumes: HashMap<(String, String), String>,
    /// The node each VolumeAttachment names.
    attachments: HashMap<String, String>,
}

/// The Node authorizer and its graph.
#[derive(Debug)]
pub struct NodeAuthorizer {
    graph: RwLock<Graph>,
    /// The `system:node` role's rules (what a node may do beyond the graph's objects).
    rules: Vec<Rule>,
}

impl Default for NodeAuthorizer {
    fn default() -> Self {
        let rules = crate::bootstrap::cluster_roles()
            .into_iter()
            .find(|r| r["metadata"]["name"] == "system:node")
            .and_then(|r| r["rules"].as_array().cloned())
            .unwrap_or_default();
        Self {
            graph: RwLock::default(),
            rules: rules.iter().map(Rule::from_json).collect(),
        }
    }
}

/// The objects a pod refers to: volumes (Secret, ConfigMap, projected sources, claims),
/// environment, image pull secrets, its ServiceAccount.
fn references(pod: &Value) -> Vec<(Kind, String)> {
    let spec = &pod["spec"];
    let mut refs = Vec::new();
    let mut add = |kind: Kind, name: Option<&str>| {
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            refs.push((kind, name.to_owned()));
        }
    };
    add(Kind::ServiceAccount, spec["serviceAccountName"].as_str());
    for secret in spec["imagePullSecrets"].as_array().into_iter().flatten() {
        add(Kind::Secret, secret["name"].as_str());
    }
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        add(
            Kind::Secret,
            volume.pointer("/secret/secretName").and_then(Value::as_str),
        );
        add(
            Kind::ConfigMap,
            volume.pointer("/configMap/name").and_then(Value::as_str),
        );
        add(
            Kind::Claim,
            volume
                .pointer("/persistentVolumeClaim/claimName")
                .and_then(Value::as_str),
        );
        if volume.pointer("/ephemeral/volumeClaimTemplate").is_some() {
            let claim = format!(
                "{}-{}",
                plinth_core::meta::name(pod).unwrap_or(""),
                volume["name"].as_str().unwrap_or("")
            );
            add(Kind::Claim, Some(&claim));
        }
        for source in volume
            .pointer("/projected/sources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            add(
                Kind::Secret,
                source.pointer("/secret/name").and_then(Value::as_str),
            );
            add(
                Kind::ConfigMap,
                source.pointer("/configMap/name").and_then(Value::as_str),
            );
        }
        for (pointer, kind) in [
            ("/cephfs/secretRef/name", Kind::Secret),
            ("/flexVolume/secretRef/name", Kind::Secret),
            ("/iscsi/secretRef/name", Kind::Secret),
            ("/rbd/secretRef/name", Kind::Secret),
            ("/csi/nodePublishSecretRef/name", Kind::Secret),
            ("/azureFile/secretName", Kind::Secret),
        ] {
            add(kind, volume.pointer(pointer).and_then(Value::as_str));
        }
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for container in spec[list].as_array().into_iter().flatten() {
            for from in container["envFrom"].as_array().into_iter().flatten() {
                add(
                    Kind::Secret,
                    from.pointer("/secretRef/name").and_then(Value::as_str),
                );
                add(
                    Kind::ConfigMap,
                    from.pointer("/configMapRef/name").and_then(Value::as_str),
                );
            }
            for var in container["env"].as_array().into_iter().flatten() {
                let from = &var["valueFrom"];
                add(
                    Kind::Secret,
                    from.pointer("/secretKeyRef/name").and_then(Value::as_str),
                );
                add(
                    Kind::ConfigMap,
                    from.pointer("/configMapKeyRef/name")
                        .and_then(Value::as_str),
                );
            }
        }
    }
    // Held for as long as the pod is bound: no spare room.
    refs.shrink_to_fit();
    refs
}

fn key(object: &Value) -> (String, String) {
    (
        plinth_core::meta::namespace(object)
            .unwrap_or("")
            .to_owned(),
        plinth_core::meta::name(object).unwrap_or("").to_owned(),
    )
}

impl Graph {
    fn remove_pod(&mut self, key: &(String, String)) {
        let Some(old) = self.pods.remove(key) else {
            return;
        };
        for (kind, name) in old.refs {
            let at = (kind, key.0.clone(), name);
            if let Some(nodes) = self.used.get_mut(&at) {
                if let Some(count) = nodes.get_mut(&old.node) {
                    *count -= 1;
                    if *count == 0 {
                        nodes.remove(&old.node);
                    }
                }
                if nodes.is_empty() {
                    self.used.remove(&at);
                }
            }
        }
    }

    fn put_pod(&mut self, pod: &Value) {
        let key = key(pod);
        self.remove_pod(&key);
        let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
        if node.is_empty() {
            return;
        }
        let refs = references(pod);
        for (kind, name) in &refs {
            *self
                .used
                .entry((*kind, key.0.clone(), name.clone()))
                .or_default()
                .entry(node.to_owned())
                .or_default() += 1;
        }
        self.pods.insert(
            key,
            PodEdges {
                node: node.to_owned(),
                refs,
            },
        );
    }

    fn uses(&self, node: &str, kind: Kind, namespace: &str, name: &str) -> bool {
        if kind == Kind::Pod {
            return self
                .pods
                .get(&(namespace.to_owned(), name.to_owned()))
                .is_some_and(|pod| pod.node == node);
        }
        self.used
            .get(&(kind, namespace.to_owned(), name.to_owned()))
            .is_some_and(|nodes| nodes.contains_key(node))
    }

    /// Whether a claim bound to volume `pv` is used by a pod on `node`.
    fn uses_volume(&self, node: &str, pv: &str) -> bool {
        self.claim_volumes
            .iter()
            .filter(|(_, volume)| *volume == pv)
            .any(|((namespace, claim), _)| self.uses(node, Kind::Claim, namespace, claim))
    }
}

impl NodeAuthorizer {
    fn graph(&self) -> std::sync::RwLockWriteGuard<'_, Graph> {
        self.graph.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The resources whose objects make the graph: `(group, plural)`.
    pub const FOLLOWED: [(&'static str, &'static str); 3] = [
        ("", "pods"),
        ("", "persistentvolumeclaims"),
        ("storage.k8s.io", "volumeattachments"),
    ];

    /// Replaces what the graph holds of `plural` by `items`.
    pub fn replace(&self, plural: &str, items: impl IntoIterator<Item = Value>) {
        {
            let mut graph = self.graph();
            match plural {
                "pods" => {
                    let keys: Vec<_> = graph.pods.keys().cloned().collect();
                    for key in keys {
                        graph.remove_pod(&key);
                    }
                }
                "persistentvolumeclaims" => graph.claim_volumes.clear(),
                "volumeattachments" => graph.attachments.clear(),
                _ => {}
            }
        }
        for item in items {
            self.put(plural, &item);
        }
    }

    /// Adds or updates an object of `plural`.
    pub fn put(&self, plural: &str, object: &Value) {
        let mut graph = self.graph();
        match plural {
            "pods" => graph.put_pod(object),
            "persistentvolumeclaims" => {
                let volume = object["spec"]["volumeName"].as_str().unwrap_or("");
                if volume.is_empty() {
                    graph.claim_volumes.remove(&key(object));
                } else {
                    graph.claim_volumes.insert(key(object), volume.to_owned());
                }
            }
            "volumeattachments" => {
                let node = object["spec"]["nodeName"].as_str().unwrap_or("").to_owned();
                graph.attachments.insert(key(object).1, node);
            }
            _ => {}
        }
    }

    /// Removes an object of `plural`.
    pub fn remove(&self, plural: &str, object: &Value) {
        let mut graph = self.graph();
        match plural {
            "pods" => graph.remove_pod(&key(object)),
            "persistentvolumeclaims" => {
                graph.claim_volumes.remove(&key(object));
            }
            "volumeattachments" => {
                graph.attachments.remove(&key(object).1);
            }
            _ => {}
        }
    }

    /// kube's Node authorizer for `user`; `None` when the user is not a node (no opinion).
    pub fn authorize(&self, user: &User, a: &Attributes) -> Option<NodeDecision> {
        let node = user.node()?;
        let no = |why: &str| Some(NodeDecision::NoOpinion(why.to_owned()));
        if node.is_empty() {
            return no(&format!("unknown node for user {:?}", user.name));
        }
        let related = |kind: Kind| -> Option<NodeDecision> {
            if a.name.is_empty() {
                return no("No Object name found");
            }
            let graph = self.graph.read().unwrap_or_else(PoisonError::into_inner);
            let found = match kind {
                Kind::Claim if a.resource == "persistentvolumes" => {
                    graph.uses_volume(node, &a.name)
                }
                _ => graph.uses(node, kind, &a.namespace, &a.name),
            };
            if found {
                Some(NodeDecision::Allow)
            } else {
                no(&format!(
                    "no relationship found between node '{node}' and this object"
                ))
            }
        };
        let get_only = |kind: Kind| {
            if a.verb != "get" {
                return no("can only get individual resources of this type");
            }
            if !a.subresource.is_empty() {
                return no("cannot get subresource");
            }
            related(kind)
        };
        if a.resource_request {
            match (a.api_group.as_str(), a.resource.as_str()) {
                ("", "secrets" | "configmaps") => {
                    if !matches!(a.verb.as_str(), "get" | "list" | "watch") {
                        return no("can only read resources of this type");
                    }
                    if !a.subresource.is_empty() {
                        return no("cannot read subresource");
                    }
                    if a.namespace.is_empty() {
                        return no("can only read namespaced object of this type");
                    }
                    let kind = if a.resource == "secrets" {
                        Kind::Secret
                    } else {
                        Kind::ConfigMap
                    };
                    return related(kind);
                }
                ("", "persistentvolumeclaims") if a.subresource == "status" => {
                    if !matches!(a.verb.as_str(), "update" | "patch") {
                        return no("can only get/update/patch this type");
                    }
                    return related(Kind::Claim);
                }
                ("", "persistentvolumeclaims" | "persistentvolumes") => {
                    return get_only(Kind::Claim);
                }
                ("storage.k8s.io", "volumeattachments") => {
                    if a.verb != "get" {
                        return no("can only get individual resources of this type");
                    }
                    let graph = self.graph.read().unwrap_or_else(PoisonError::into_inner);
                    return if graph.attachments.get(&a.name).is_some_and(|n| n == node) {
                        Some(NodeDecision::Allow)
                    } else {
                        no(&format!(
                            "no relationship found between node '{node}' and this object"
                        ))
                    };
                }
                ("", "serviceaccounts") => {
                    if a.verb != "create" || a.name.is_empty() {
                        return no("can only create tokens for individual service accounts");
                    }
                    if a.subresource != "token" {
                        return no("can only create token subresource of serviceaccount");
                    }
                    return related(Kind::ServiceAccount);
                }
                ("coordination.k8s.io", "leases") => {
                    if !matches!(
                        a.verb.as_str(),
                        "get" | "create" | "update" | "patch" | "delete"
                    ) {
                        return no("can only get, create, update, patch, or delete a node lease");
                    }
                    if a.namespace != NODE_LEASES {
                        return no(&format!(
                            "can only access leases in the {NODE_LEASES:?} system namespace"
                        ));
                    }
                    if a.verb != "create" && a.name != node {
                        return no(
                            "can only access node lease with the same name as the requesting node",
                        );
                    }
                    return Some(NodeDecision::Allow);
                }
                ("storage.k8s.io", "csinodes") => {
                    if !matches!(
                        a.verb.as_str(),
                        "get" | "create" | "update" | "patch" | "delete"
                    ) {
                        return no("can only get, create, update, patch, or delete a CSINode");
                    }
                    if !a.subresource.is_empty() {
                        return no("cannot authorize CSINode subresources");
                    }
                    if a.verb != "create" && a.name != node {
                        return no(
                            "can only access CSINode with the same name as the requesting node",
                        );
                    }
                    return Some(NodeDecision::Allow);
                }
                ("", "nodes") => return Self::own_node(node, a),
                ("", "pods") => return self.pods(node, a, &related),
                _ => {}
            }
        }
        if self.rules.iter().any(|r| r.allows(a)) {
            Some(NodeDecision::Allow)
        } else {
            no("")
        }
    }

    fn own_node(node: &str, a: &Attributes) -> Option<NodeDecision> {
        let no = |why: String| Some(NodeDecision::NoOpinion(why));
        match (a.subresource.as_str(), a.verb.as_str()) {
            ("", "create" | "update" | "patch") | ("status", "update" | "patch") => {
                Some(NodeDecision::Allow)
            }
            ("", "get" | "list" | "watch") => match a.name.as_str() {
                name if name == node => Some(NodeDecision::Allow),
                "" => no(format!(
                    "node '{node}' cannot read all nodes, only its own Node object"
                )),
                other => no(format!(
                    "node '{node}' cannot read '{other}', only its own Node object"
                )),
            },
            _ => no(String::new()),
        }
    }

    fn pods(
        &self,
        node: &str,
        a: &Attributes,
        related: &dyn Fn(Kind) -> Option<NodeDecision>,
    ) -> Option<NodeDecision> {
        let no = |why: &str| Some(NodeDecision::NoOpinion(why.to_owned()));
        match (a.subresource.as_str(), a.verb.as_str()) {
            ("", "get") => related(Kind::Pod),
            ("", "list" | "watch") => {
                let bound = plinth_core::selector::FieldSelector::parse(&a.field_selector)
                    .ok()
                    .is_some_and(|s| {
                        s.terms
                            .iter()
                            .any(|t| t.field == "spec.nodeName" && !t.negated && t.value == node)
                    });
                if bound {
                    Some(NodeDecision::Allow)
                } else if !a.name.is_empty() {
                    related(Kind::Pod)
                } else {
                    no("can only list/watch pods with spec.nodeName field selector")
                }
            }
            ("", "create" | "delete") | ("status", "update" | "patch") | ("eviction", "create") => {
                Some(NodeDecision::Allow)
            }
            _ => no(""),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(name: &str) -> User {
        User::new(
            &format!("system:node:{name}"),
            &[plinth_registry::user::NODES],
        )
    }

    fn attributes(verb: &str, resource: &str, namespace: &str, name: &str) -> Attributes {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        Attributes {
            resource_request: true,
            verb: verb.into(),
            namespace: namespace.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            name: name.into(),
            ..Attributes::default()
        }
    }

    #[test]
    fn nodes_read_only_what_their_pods_use() {
        let authorizer = NodeAuthorizer::default();
        authorizer.put(
            "pods",
            &json!({"metadata": {"namespace": "app", "name": "web"}, "spec": {"nodeName": "n1",
                "serviceAccountName": "runner",
                "volumes": [{"name": "s", "secret": {"secretName": "tls"}},
                            {"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
                "containers": [{"name": "c", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "x"}}}]}]}}),
        );
        authorizer.put("persistentvolumeclaims", &json!({"metadata": {"namespace": "app", "name": "data"}, "spec": {"volumeName": "pv-1"}}));
        let allowed = Some(NodeDecision::Allow);
        let unrelated = |n: &str| {
            Some(NodeDecision::NoOpinion(format!(
                "no relationship found between node '{n}' and this object"
            )))
        };
        assert_eq!(
            authorizer.authorize(&node("n1"), &attributes("get", "secrets", "app", "tls")),
            allowed
        );
        assert_eq!(
            authorizer.authorize(&node("n2"), &attributes("get", "secrets", "app", "tls")),
            unrelated("n2")
        );
        assert_eq!(
            authorizer.authorize(&node("n1"), &attributes("get", "secrets", "app", "other")),
            unrelated("n1")
        );
        assert_eq!(
            authorizer.authorize(
                &node("n1"),
                &attributes("get", "configmaps", "app", "settings")
            ),
            allowed
        );
        assert_eq!(
            authorizer.authorize(
                &node("n1"),
                &attributes("get", "persistentvolumeclaims", "app", "data")
            ),
            allowed
        );
        assert_eq!(
            authorizer.authorize(
                &node("n1"),
                &attributes("get", "persistentvolumes", "", "pv-1")
            ),
            allowed
        );
        assert_eq!(
            authorizer.authorize(
                &node("n1"),
                &attributes("create", "serviceaccounts/token", "app", "runner")
            ),
            allowed
        );
        assert_eq!(
            authorizer.authorize(
                &node("n1"),
                &attributes("list", "persistentvolumeclaims", "app", "")
            ),
            Some(NodeDecision::NoOpinion(
                "can only get individual resources of this type".into()
            ))
        );
        assert_eq!(
            authorizer.authorize(&node("n1"), &attributes("update", "secrets", "app", "tls")),
            Some(NodeDecision::NoOpinion(
                "can only read resources of this type".into()
            ))
        );
        // The pod itself: its node reads it, another does not.
        assert_eq!(
            authorizer.authorize(&node("n1"), &attributes("get", "pods", "app", "web")),
            allowed
        );
        assert_eq!(
            authorizer.authorize(&node("n2"), &attributes("get", "pods", "app", "web")),
            unrelated("n2")
        );
        // The pod moves away: what it used is out of reach.
        authorizer.remove(
            "pods",
            &json!({"metadata": {"namespace": "app", "name": "web"}}),
        );
        assert_eq!(
            authorizer.authorize(&node("n1"), &attributes("get", "secrets", "app", "tls")),
            unrelated("n1")
        );
        assert_eq!(
            authorizer.authorize(&node("n1"), &attributes("get", "pods", "app", "web")),
            unrelated("n1")
        );
        // Own Node and Lease only; pods by field selector.
        assert_eq!(
            authorizer.authorize(&node("n1"), &attributes("get", "nodes", "", "n1")),
            allowed
        );
        assert_eq!(
            authorizer.authorize(&node("n1"), &attributes("get", "nodes", "", "n2")),
            Some(NodeDecision::NoOpinion(
                "node 'n1' cannot read 'n2', only its own Node object".into()
            ))
        );
        let mut lease = attributes("update", "leases", "kube-node-lease", "n2");
        lease.api_group = "coordination.k8s.io".into();
        assert_eq!(
            authorizer.authorize(&node("n1"), &lease),
            Some(NodeDecision::NoOpinion(
                "can only access node lease with the same name as the requesting node".into()
            ))
        );
        let mut watch = attributes("watch", "pods", "", "");
        assert_eq!(
            authorizer.authorize(&node("n1"), &watch),
            Some(NodeDecision::NoOpinion(
                "can only list/watch pods with spec.nodeName field selector".into()
            ))
        );
        watch.field_selector = "spec.nodeName=n1".into();
        assert_eq!(authorizer.authorize(&node("n1"), &watch), allowed);
        assert_eq!(authorizer.authorize(&User::new("alice", &[]), &watch), None);
    }
}
