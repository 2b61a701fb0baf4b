//! RBAC (`rbac.authorization.k8s.io/v1`): the rules of Roles and ClusterRoles, granted to
//! users, groups and ServiceAccounts by RoleBindings and ClusterRoleBindings, kept in memory
//! from the objects' watches (kube's informer-fed RBAC authorizer) and matched as kube's
//! `RuleAllows` matches them. Members of `system:masters` skip RBAC.

use std::collections::{BTreeMap, HashMap};
use std::sync::{PoisonError, RwLock};

use serde_json::Value;

use plinth_registry::authz::{Attributes, Authorizer, Decision, Rule, covers};
use plinth_registry::user::{MASTERS, User};

use crate::node::{NodeAuthorizer, NodeDecision};

/// A `RoleRef` or a binding's subject.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Subject {
    kind: String,
    name: String,
    namespace: String,
}

impl Subject {
    fn matches(&self, user: &User, binding_namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => self.name == user.name,
            "Group" => user.in_group(&self.name),
            "ServiceAccount" => {
                let namespace = if self.namespace.is_empty() {
                    binding_namespace
                } else {
                    &self.namespace
                };
                user.name == format!("system:serviceaccount:{namespace}:{}", self.name)
            }
            _ => false,
        }
    }
}

#[derive(Clone, Debug)]
struct Binding {
    namespace: String,
    role_kind: String,
    role_name: String,
    subjects: Vec<Subject>,
}

impl Binding {
    fn from_json(object: &Value) -> Self {
        let text = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_owned();
        let role = object.get("roleRef").cloned().unwrap_or(Value::Null);
        Self {
            namespace: plinth_core::meta::namespace(object)
                .unwrap_or("")
                .to_owned(),
            role_kind: text(&role, "kind"),
            role_name: text(&role, "name"),
            subjects: object
                .get("subjects")
                .and_then(Value::as_array)
                .map(|subjects| {
                    subjects
                        .iter()
                        .map(|s| Subject {
                            kind: text(s, "kind"),
                            name: text(s, "name"),
                            namespace: text(s, "namespace"),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// A ClusterRole as the authorizer and the aggregation controller need it.
#[derive(Clone, Debug, Default)]
pub struct ClusterRole {
    /// Its rules.
    pub rules: Vec<Rule>,
    /// Its labels (aggregation selects by them).
    pub labels: BTreeMap<String, String>,
    /// Its `aggregationRule.clusterRoleSelectors`, when it aggregates.
    pub selectors: Option<Vec<Value>>,
}

#[derive(Debug, Default)]
struct Index {
    roles: HashMap<(String, String), Vec<Rule>>,
    cluster_roles: HashMap<String, ClusterRole>,
    role_bindings: HashMap<(String, String), Binding>,
    cluster_role_bindings: HashMap<String, Binding>,
}

/// The RBAC state and authorizer, with the Node authorizer before it.
#[derive(Debug, Default)]
pub struct Rbac {
    index: RwLock<Index>,
    /// The Node authorizer (kube's `--authorization-mode=Node,RBAC`).
    pub nodes: NodeAuthorizer,
}

/// The four RBAC resources.
pub const RESOURCES: [&str; 4] = [
    "roles",
    "clusterroles",
    "rolebindings",
    "clusterrolebindings",
];

fn key(object: &Value) -> (String, String) {
    (
        plinth_core::meta::namespace(object)
            .unwrap_or("")
            .to_owned(),
        plinth_core::meta::name(object).unwrap_or("").to_owned(),
    )
}

fn rules(object: &Value) -> Vec<Rule> {
    object
        .get("rules")
        .and_then(Value::as_array)
        .map(|rules| rules.iter().map(Rule::from_json).collect())
        .unwrap_or_default()
}

impl Rbac {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records an object of RBAC resource `resource` (added or changed).
    pub fn put(&self, resource: &str, object: &Value) {
        let (namespace, name) = key(object);
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        match resource {
            "roles" => {
                index.roles.insert((namespace, name), rules(object));
            }
            "clusterroles" => {
                let role = ClusterRole {
                    rules: rules(object),
                    labels: plinth_core::meta::labels(object),
                    selectors: object
                        .pointer("/aggregationRule/clusterRoleSelectors")
                        .and_then(Value::as_array)
                        .cloned(),
                };
                index.cluster_roles.insert(name, role);
            }
            "rolebindings" => {
                index
                    .role_bindings
                    .insert((namespace, name), Binding::from_json(object));
            }
            "clusterrolebindings" => {
                index
                    .cluster_role_bindings
                    .insert(name, Binding::from_json(object));
            }
            _ => {}
        }
    }

    /// Replaces everything known of `resource` with `objects` (after a relist), at once.
    pub fn replace(&self, resource: &str, objects: impl IntoIterator<Item = Value>) {
        let fresh = Self::default();
        for object in objects {
            fresh.put(resource, &object);
        }
        let fresh = fresh
            .index
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        match resource {
            "roles" => index.roles = fresh.roles,
            "clusterroles" => index.cluster_roles = fresh.cluster_roles,
            "rolebindings" => index.role_bindings = fresh.role_bindings,
            "clusterrolebindings" => index.cluster_role_bindings = fresh.cluster_role_bindings,
            _ => {}
        }
    }

    /// Forgets a deleted object.
    pub fn remove(&self, resource: &str, object: &Value) {
        let key = key(object);
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        match resource {
            "roles" => drop(index.roles.remove(&key)),
            "clusterroles" => drop(index.cluster_roles.remove(&key.1)),
            "rolebindings" => drop(index.role_bindings.remove(&key)),
            "clusterrolebindings" => drop(index.cluster_role_bindings.remove(&key.1)),
            _ => {}
        }
    }

    /// Every ClusterRole, by name (for aggregation).
    pub fn cluster_roles(&self) -> HashMap<String, ClusterRole> {
        self.read().cluster_roles.clone()
    }

    fn role_rules(index: &Index, binding: &Binding) -> Vec<Rule> {
        match binding.role_kind.as_str() {
            "ClusterRole" => index
                .cluster_roles
                .get(&binding.role_name)
                .map(|r| r.rules.clone())
                .unwrap_or_default(),
            "Role" => index
                .roles
                .get(&(binding.namespace.clone(), binding.role_name.clone()))
                .cloned()
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Calls `visit` with each binding that applies to `user` in `namespace` (cluster-wide
    /// ones first) and the rules it grants, until `visit` returns true.
    fn visit(&self, user: &User, namespace: &str, mut visit: impl FnMut(&str, &[Rule]) -> bool) {
        let index = self.read();
        for (name, binding) in &index.cluster_role_bindings {
            if binding.subjects.iter().any(|s| s.matches(user, "")) {
                let why = format!(
                    "RBAC: allowed by ClusterRoleBinding {name:?} of ClusterRole {:?} to {:?}",
                    binding.role_name, user.name
                );
                if visit(&why, &Self::role_rules(&index, binding)) {
                    return;
                }
            }
        }
        if namespace.is_empty() {
            return;
        }
        for ((ns, name), binding) in &index.role_bindings {
            if ns == namespace && binding.subjects.iter().any(|s| s.matches(user, ns)) {
                let why = format!(
                    "RBAC: allowed by RoleBinding \"{name}/{ns}\" of {} {:?} to {:?}",
                    binding.role_kind, binding.role_name, user.name
                );
                if visit(&why, &Self::role_rules(&index, binding)) {
                    return;
                }
            }
        }
    }
}

impl Authorizer for Rbac {
    /// Whether `user` may do what `attributes` describe: kube's `Node,RBAC` authorization
    /// modes — the Node authorizer for node agents, then RBAC; a denial carries the Node
    /// authorizer's reason.
    fn authorize(&self, user: &User, attributes: &Attributes) -> Decision {
        if user.in_group(MASTERS) {
            return Decision::Allow(String::new());
        }
        let reason = match self.nodes.authorize(user, attributes) {
            Some(NodeDecision::Allow) => return Decision::Allow(String::new()),
            Some(NodeDecision::NoOpinion(why)) => why,
            None => String::new(),
        };
        let mut decision = Decision::Deny(reason);
        self.visit(user, &attributes.namespace, |why, rules| {
            if rules.iter().any(|r| r.allows(attributes)) {
                decision = Decision::Allow(why.to_owned());
                return true;
            }
            false
        });
        decision
    }

    /// Every rule that applies to `user` in `namespace` (cluster-wide ones included), as
    /// SelfSubjectRulesReview lists them.
    fn rules_for(&self, user: &User, namespace: &str) -> Vec<Rule> {
        if user.in_group(MASTERS) {
            return vec![
                Rule {
                    verbs: vec!["*".into()],
                    api_groups: vec!["*".into()],
                    resources: vec!["*".into()],
                    ..Rule::default()
                },
                Rule {
                    verbs: vec!["*".into()],
                    non_resource_urls: vec!["*".into()],
                    ..Rule::default()
                },
            ];
        }
        let mut all = Vec::new();
        self.visit(user, namespace, |_, rules| {
            all.extend_from_slice(rules);
            false
        });
        all
    }

    /// The rules of the role a binding refers to (`kind` `Role` in `namespace`, or
    /// `ClusterRole`); `None` if it does not exist (yet).
    fn referenced_rules(&self, kind: &str, namespace: &str, name: &str) -> Option<Vec<Rule>> {
        let index = self.read();
        match kind {
            "ClusterRole" => index.cluster_roles.get(name).map(|r| r.rules.clone()),
            "Role" => index
                .roles
                .get(&(namespace.to_owned(), name.to_owned()))
                .cloned(),
            _ => None,
        }
    }

    /// Whether `user` holds, in `namespace` (`""`: cluster-wide only), every permission
    /// `rules` grant — kube's escalation check ("a user can only grant what they have").
    /// The first rule not covered, if any.
    fn uncovered(&self, user: &User, namespace: &str, rules: &[Rule]) -> Option<Rule> {
        if user.in_group(MASTERS) {
            return None;
        }
        let held = self.rules_for(user, namespace);
        rules.iter().find(|rule| !covers(&held, rule)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attributes(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            resource_request: true,
            verb: verb.into(),
            namespace: "team".into(),
            api_group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            ..Attributes::default()
        }
    }

    #[test]
    fn rules_match_as_kube_matches_them() {
        let rule = Rule::from_json(&json!({"verbs": ["update"], "apiGroups": ["example.com"],
            "resources": ["widgets"]}));
        assert!(rule.allows(&attributes("update", "example.com", "widgets", "", "w")));
        assert!(!rule.allows(&attributes(
            "update",
            "example.com",
            "widgets",
            "status",
            "w"
        )));
        assert!(!rule.allows(&attributes("get", "example.com", "widgets", "", "w")));
        assert!(!rule.allows(&attributes("update", "", "widgets", "", "w")));
        let status = Rule::from_json(&json!({"verbs": ["*"], "apiGroups": ["*"],
            "resources": ["*/status"]}));
        assert!(status.allows(&attributes("patch", "x", "widgets", "status", "w")));
        assert!(!status.allows(&attributes("patch", "x", "widgets", "", "w")));
        let named = Rule::from_json(&json!({"verbs": ["get"], "apiGroups": [""],
            "resources": ["configmaps"], "resourceNames": ["one"]}));
        assert!(named.allows(&attributes("get", "", "configmaps", "", "one")));
        assert!(!named.allows(&attributes("get", "", "configmaps", "", "two")));
        assert!(!named.allows(&attributes("list", "", "configmaps", "", "")));
        let paths =
            Rule::from_json(&json!({"verbs": ["get"], "nonResourceURLs": ["/apis/*", "/api"]}));
        assert!(paths.allows(&Attributes::path("GET", "/apis/example.com")));
        assert!(paths.allows(&Attributes::path("GET", "/api")));
        assert!(!paths.allows(&Attributes::path("GET", "/api/v1")));
        assert!(!paths.allows(&attributes("get", "", "configmaps", "", "")));
    }

    #[test]
    fn bindings_grant_their_roles_rules_to_their_subjects() {
        let rbac = Rbac::default();
        rbac.put("roles", &json!({"metadata": {"name": "editor", "namespace": "team"},
            "rules": [{"verbs": ["get", "update"], "apiGroups": [""], "resources": ["configmaps"]}]}));
        rbac.put(
            "rolebindings",
            &json!({"metadata": {"name": "b", "namespace": "team"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "editor"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"},
                {"kind": "ServiceAccount", "name": "robot"}]}),
        );
        let get = attributes("get", "", "configmaps", "", "c");
        for user in [
            User::new("alice", &[]),
            User::new("bob", &["devs"]),
            User::new("system:serviceaccount:team:robot", &[]),
        ] {
            assert!(
                matches!(rbac.authorize(&user, &get), Decision::Allow(_)),
                "{user:?}"
            );
        }
        assert_eq!(
            rbac.authorize(&User::new("carol", &[]), &get),
            Decision::Deny(String::new())
        );
        let mut elsewhere = get.clone();
        elsewhere.namespace = "other".into();
        assert_eq!(
            rbac.authorize(&User::new("alice", &[]), &elsewhere),
            Decision::Deny(String::new())
        );
        assert!(matches!(
            rbac.authorize(&User::new("root", &[MASTERS]), &elsewhere),
            Decision::Allow(_)
        ));
    }

    #[test]
    fn covering_needs_every_combination() {
        let held = vec![Rule::from_json(
            &json!({"verbs": ["get", "list"], "apiGroups": [""],
            "resources": ["configmaps", "secrets"]}),
        )];
        let less = Rule::from_json(&json!({"verbs": ["get"], "apiGroups": [""],
            "resources": ["configmaps"], "resourceNames": ["a"]}));
        assert!(covers(&held, &less));
        let more = Rule::from_json(&json!({"verbs": ["get", "delete"], "apiGroups": [""],
            "resources": ["configmaps"]}));
        assert!(!covers(&held, &more));
        let wildcard =
            Rule::from_json(&json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}));
        assert!(!covers(&held, &wildcard));
        assert!(covers(std::slice::from_ref(&wildcard), &wildcard));
    }
}
