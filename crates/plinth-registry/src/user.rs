//! Who writes: an authenticated identity (kube's `user.Info`) and the groups every server
//! knows. Authentication (`plinth-auth`) makes them; the registry and admission only read them.

use std::collections::BTreeMap;

/// Members of this group may do anything (kube's `system:masters`, bound to `cluster-admin`
/// and short-circuited before RBAC).
pub const MASTERS: &str = "system:masters";
/// Every authenticated user is in this group.
pub const AUTHENTICATED: &str = "system:authenticated";
/// Anonymous requests are in this group.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user of a request without credentials, when anonymous requests are allowed.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group of node agents' identities (`system:node:<name>`).
pub const NODES: &str = "system:nodes";

/// An authenticated identity (kube's `user.Info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    /// The user name (`alice`, `system:serviceaccount:ns:name`).
    pub name: String,
    /// A unique id, when the authenticator knows one.
    pub uid: String,
    /// Groups, `system:authenticated` included.
    pub groups: Vec<String>,
    /// Extra attributes (scopes, a token's bound object…).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// A user of these groups; `system:authenticated` is added.
    pub fn new(name: &str, groups: &[&str]) -> Self {
        let mut groups: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.to_owned());
        }
        Self {
            name: name.to_owned(),
            groups,
            ..Self::default()
        }
    }

    /// kube's anonymous user: `system:anonymous` in `system:unauthenticated` only.
    pub fn anonymous() -> Self {
        Self {
            name: ANONYMOUS.to_owned(),
            groups: vec![UNAUTHENTICATED.to_owned()],
            ..Self::default()
        }
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// The node the user acts as (kube's node identity: group `system:nodes`, name
    /// `system:node:<name>`): `Some("")` for a member of the group whose name does not say
    /// which node, `None` for a user who is not a node.
    pub fn node(&self) -> Option<&str> {
        if !self.in_group(NODES) {
            return None;
        }
        Some(self.name.strip_prefix("system:node:").unwrap_or(""))
    }
}
