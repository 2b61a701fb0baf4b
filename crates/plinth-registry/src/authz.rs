//! What the registry and the type hooks ask of authorization and token issuing, as traits the
//! server's authorizer (RBAC) and token issuer implement: what a request asks to do (kube's
//! `authorizer.Attributes`, from its `RequestInfo`), the 403 kube answers when it may not, a
//! policy rule and whether a set of rules covers another (the escalation check).

use plinth_core::{ApiError, GroupResource};

use serde_json::Value;

use crate::user::User;

/// A request's authorization attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// Whether it addresses a resource (else a path: discovery, `/metrics`…).
    pub resource_request: bool,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`; for a
    /// path, the lower-case HTTP method.
    pub verb: String,
    /// The namespace (for a namespace itself, its name, as kube's `RequestInfo` has it).
    pub namespace: String,
    /// The API group (`""` for core).
    pub api_group: String,
    /// The API version.
    pub api_version: String,
    /// The resource (`configmaps`).
    pub resource: String,
    /// The subresource (`status`, `scale`…).
    pub subresource: String,
    /// The object's name, when the request names one.
    pub name: String,
    /// The request path (non-resource requests).
    pub path: String,
    /// A list's or watch's `fieldSelector` (kube passes it to authorizers that use it: the
    /// Node authorizer lets a node list the pods with `spec.nodeName=<itself>`).
    pub field_selector: String,
}

/// The parts of a resource request the HTTP layer has parsed.
#[derive(Debug)]
pub struct ResourceRequest<'a> {
    /// The HTTP method.
    pub method: &'a str,
    /// `?watch=true` (or a watch path).
    pub watch: bool,
    /// API group.
    pub group: &'a str,
    /// API version.
    pub version: &'a str,
    /// The namespace in the path.
    pub namespace: Option<&'a str>,
    /// Resource.
    pub resource: &'a str,
    /// Name.
    pub name: Option<&'a str>,
    /// Subresource.
    pub subresource: Option<&'a str>,
    /// `fieldSelector`, as given.
    pub field_selector: &'a str,
}

impl Attributes {
    /// The attributes of a resource request, verbs as kube derives them from the method.
    pub fn resource(request: &ResourceRequest<'_>) -> Self {
        let named = request.name.is_some();
        let verb = match (request.method, named) {
            ("GET" | "HEAD", true) => "get",
            ("GET" | "HEAD", false) if request.watch => "watch",
            ("GET" | "HEAD", false) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            (other, _) => return Self::path(other, ""),
        };
        let namespace = match (request.resource, request.namespace, request.name) {
            ("namespaces", None, Some(name)) if request.group.is_empty() => name,
            (_, namespace, _) => namespace.unwrap_or(""),
        };
        // kube's RequestInfoFactory: a list or watch of one name (`fieldSelector=
        // metadata.name=x`) is authorized as a request for that name, so a role limited to
        // `resourceNames` may list and watch it.
        let selected_name = if matches!(verb, "list" | "watch") {
            plinth_core::selector::FieldSelector::parse(request.field_selector)
                .ok()
                .and_then(|s| {
                    s.terms
                        .into_iter()
                        .find(|t| t.field == "metadata.name" && !t.negated)
                })
                .map(|t| t.value)
                .filter(|n| !n.is_empty() && n != "." && n != ".." && !n.contains(['/', '%']))
        } else {
            None
        };
        Self {
            resource_request: true,
            verb: verb.to_owned(),
            namespace: namespace.to_owned(),
            api_group: request.group.to_owned(),
            api_version: request.version.to_owned(),
            resource: request.resource.to_owned(),
            subresource: request.subresource.unwrap_or("").to_owned(),
            name: request
                .name
                .map(str::to_owned)
                .or(selected_name)
                .unwrap_or_default(),
            path: String::new(),
            field_selector: request.field_selector.to_owned(),
        }
    }

    /// The attributes of a check that is not a request (may this user `escalate` a role,
    /// `impersonate` a user, `approve` for a signer): `verb` on `resource` (`resource/sub`
    /// for a subresource) `name` of `group` in `namespace` (`""`: cluster-wide).
    pub fn check(verb: &str, group: &str, resource: &str, namespace: &str, name: &str) -> Self {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        Self {
            resource_request: true,
            verb: verb.to_owned(),
            namespace: namespace.to_owned(),
            api_group: group.to_owned(),
            api_version: "v1".to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            name: name.to_owned(),
            path: String::new(),
            field_selector: String::new(),
        }
    }

    /// The attributes of a request for a path that is not a resource.
    pub fn path(method: &str, path: &str) -> Self {
        Self {
            resource_request: false,
            verb: method.to_ascii_lowercase(),
            path: path.to_owned(),
            ..Self::default()
        }
    }

    /// `widgets/status`, or `widgets`.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }

    /// kube's 403 for `user` (the authorization filter's `forbiddenMessage`, then
    /// `NewForbidden`); `reason`, when the authorizer gave one, follows it.
    pub fn forbidden(&self, user: &User, reason: &str) -> ApiError {
        let name = &user.name;
        let mut why = if !self.resource_request {
            format!("User {name:?} cannot {} path {:?}", self.verb, self.path)
        } else if self.namespace.is_empty() {
            format!(
                "User {name:?} cannot {} resource {:?} in API group {:?} at the cluster scope",
                self.verb,
                self.combined_resource(),
                self.api_group
            )
        } else {
            format!(
                "User {name:?} cannot {} resource {:?} in API group {:?} in the namespace {:?}",
                self.verb,
                self.combined_resource(),
                self.api_group,
                self.namespace
            )
        };
        if !reason.is_empty() {
            why.push_str(": ");
            why.push_str(reason);
        }
        if self.resource_request {
            let resource = GroupResource::new(&self.api_group, &self.resource);
            ApiError::forbidden(Some(&resource), &self.name, &why)
        } else {
            ApiError::forbidden(None, "", &why)
        }
    }
}

/// One `PolicyRule`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    /// Verbs (`*` for all).
    pub verbs: Vec<String>,
    /// API groups (`""` core, `*` all).
    pub api_groups: Vec<String>,
    /// Resources (`widgets`, `widgets/status`, `*/scale`, `*`).
    pub resources: Vec<String>,
    /// Object names (empty: any).
    pub resource_names: Vec<String>,
    /// Paths (`/healthz`, `/apis/*`).
    pub non_resource_urls: Vec<String>,
}

fn strings(value: &Value, field: &str) -> Vec<String> {
    value
        .get(field)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

impl Rule {
    /// A rule from its JSON.
    pub fn from_json(rule: &Value) -> Self {
        Self {
            verbs: strings(rule, "verbs"),
            api_groups: strings(rule, "apiGroups"),
            resources: strings(rule, "resources"),
            resource_names: strings(rule, "resourceNames"),
            non_resource_urls: strings(rule, "nonResourceURLs"),
        }
    }

    /// The rule as JSON (empty lists left out, as kube serializes them).
    pub fn to_json(&self) -> Value {
        let mut rule = serde_json::Map::new();
        for (field, values) in [
            ("verbs", &self.verbs),
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ] {
            if !values.is_empty() || field == "verbs" {
                rule.insert(field.to_owned(), values.clone().into());
            }
        }
        Value::Object(rule)
    }

    fn verb_matches(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == "*" || v == verb)
    }

    /// Whether this rule allows the request.
    pub fn allows(&self, attributes: &Attributes) -> bool {
        if !self.verb_matches(&attributes.verb) {
            return false;
        }
        if !attributes.resource_request {
            return self.non_resource_urls.iter().any(|url| {
                url == "*"
                    || *url == attributes.path
                    || url
                        .strip_suffix('*')
                        .is_some_and(|prefix| attributes.path.starts_with(prefix))
            });
        }
        let group = self
            .api_groups
            .iter()
            .any(|g| g == "*" || *g == attributes.api_group);
        let combined = attributes.combined_resource();
        let sub = &attributes.subresource;
        let resource = self.resources.iter().any(|r| {
            r == "*"
                || *r == combined
                || (!sub.is_empty() && r.strip_prefix("*/").is_some_and(|s| s == sub))
        });
        let name = self.resource_names.is_empty()
            || (!attributes.name.is_empty() && self.resource_names.contains(&attributes.name));
        group && resource && name
    }
}

/// What the authorizer decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed, with the reason (the binding that allowed it).
    Allow(String),
    /// Not allowed by any rule (no authorizer allows), with the reason an authorizer gave
    /// (empty for none).
    Deny(String),
}

/// Whether `held` grant everything `rule` does: each of its (verb, group, resource, name) or
/// (verb, path) combinations is allowed by some held rule, wildcards in `rule` needing
/// wildcards in `held`.
pub fn covers(held: &[Rule], rule: &Rule) -> bool {
    let or_any = |values: &[String]| -> Vec<String> {
        if values.is_empty() {
            vec![String::new()]
        } else {
            values.to_vec()
        }
    };
    let contains = |list: &[String], value: &str| list.iter().any(|v| v == "*" || v == value);
    for verb in &rule.verbs {
        for url in &rule.non_resource_urls {
            let ok = held.iter().any(|h| {
                contains(&h.verbs, verb)
                    && h.non_resource_urls.iter().any(|u| {
                        u == "*"
                            || u == url
                            || u.strip_suffix('*').is_some_and(|p| url.starts_with(p))
                    })
            });
            if !ok {
                return false;
            }
        }
        for group in &rule.api_groups {
            for resource in &rule.resources {
                for name in or_any(&rule.resource_names) {
                    let ok = held.iter().any(|h| {
                        contains(&h.verbs, verb)
                            && contains(&h.api_groups, group)
                            && (h.resources.iter().any(|r| {
                                r == "*"
                                    || r == resource
                                    || resource
                                        .split_once('/')
                                        .is_some_and(|(_, sub)| r.strip_prefix("*/") == Some(sub))
                            }))
                            && (h.resource_names.is_empty()
                                || (!name.is_empty() && h.resource_names.contains(&name)))
                    });
                    if !ok {
                        return false;
                    }
                }
            }
        }
    }
    true
}

/// The authorizer, as the registry and the type hooks see it (RBAC implements it).
pub trait Authorizer: Send + Sync + std::fmt::Debug {
    /// Whether `user` may do what `attributes` describe.
    fn authorize(&self, user: &User, attributes: &Attributes) -> Decision;
    /// Every rule that applies to `user` in `namespace` (cluster-wide ones included), as
    /// SelfSubjectRulesReview lists them.
    fn rules_for(&self, user: &User, namespace: &str) -> Vec<Rule>;
    /// The rules of the role a binding refers to (`kind` `Role` in `namespace`, or
    /// `ClusterRole`); `None` if it does not exist (yet).
    fn referenced_rules(&self, kind: &str, namespace: &str, name: &str) -> Option<Vec<Rule>>;
    /// Whether `user` holds, in `namespace` (`""`: cluster-wide only), every permission
    /// `rules` grant — kube's escalation check ("a user can only grant what they have").
    /// The first rule not covered, if any.
    fn uncovered(&self, user: &User, namespace: &str, rules: &[Rule]) -> Option<Rule>;
}

/// The ServiceAccount token issuer, as TokenRequest sees it.
pub trait TokenIssuer: Send + Sync {
    /// A token for ServiceAccount `namespace/name` (uid `uid`), for `audiences` (the API server
    /// when empty), valid `expiration` seconds, bound to `bound` (kind, name, uid) if given;
    /// `node` (name, uid): the node of the pod it is bound to, which the token names too (kube's
    /// `ServiceAccountTokenPodNodeInfo`). Returns the token and its expiry (Unix seconds).
    ///
    /// # Errors
    /// An internal error if signing fails.
    fn issue(
        &self,
        service_account: (&str, &str, &str),
        audiences: &[String],
        expiration: i64,
        bound: Option<(&str, &str, &str)>,
        node: Option<(&str, &str)>,
    ) -> Result<(String, i64), ApiError>;
}

/// The issuer of ServiceAccount tokens (and the API server's own audience), as kube's default
/// `--service-account-issuer`.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Tokens live an hour unless asked otherwise (a TokenRequest's default `expirationSeconds`).
pub const DEFAULT_EXPIRATION: i64 = 3600;

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(method: &'a str, name: Option<&'a str>) -> ResourceRequest<'a> {
        ResourceRequest {
            method,
            watch: false,
            group: "example.com",
            version: "v1",
            namespace: Some("team"),
            resource: "widgets",
            name,
            subresource: None,
            field_selector: "",
        }
    }

    #[test]
    fn verbs_follow_the_method_and_the_name() {
        let verb = |method, name| Attributes::resource(&request(method, name)).verb;
        assert_eq!(verb("GET", Some("w")), "get");
        assert_eq!(verb("GET", None), "list");
        assert_eq!(verb("POST", None), "create");
        assert_eq!(verb("PUT", Some("w")), "update");
        assert_eq!(verb("PATCH", Some("w")), "patch");
        assert_eq!(verb("DELETE", Some("w")), "delete");
        assert_eq!(verb("DELETE", None), "deletecollection");
        let mut watch = request("GET", None);
        watch.watch = true;
        assert_eq!(Attributes::resource(&watch).verb, "watch");
        // A list or watch of one name is a request for that name (roles with resourceNames).
        watch.field_selector = "metadata.name=w1";
        assert_eq!(Attributes::resource(&watch).name, "w1");
        let mut list = request("GET", None);
        list.field_selector = "metadata.name!=w1";
        assert_eq!(Attributes::resource(&list).name, "");
        list.field_selector = "spec.size=3,metadata.name==w2";
        assert_eq!(Attributes::resource(&list).name, "w2");
        let mut delete = request("DELETE", None);
        delete.field_selector = "metadata.name=w1";
        assert_eq!(
            Attributes::resource(&delete).name,
            "",
            "not for deletecollection"
        );
    }

    #[test]
    fn forbidden_is_worded_as_kube_words_it() {
        let user = User::new("alice", &[]);
        let mut status = request("PUT", Some("w1"));
        status.subresource = Some("status");
        let e = Attributes::resource(&status).forbidden(&user, "");
        assert_eq!(e.code(), 403);
        assert_eq!(
            e.message,
            "widgets.example.com \"w1\" is forbidden: User \"alice\" cannot update resource \"widgets/status\" in API group \"example.com\" in the namespace \"team\""
        );
        let namespaces = ResourceRequest {
            method: "GET",
            watch: false,
            group: "",
            version: "v1",
            namespace: None,
            resource: "namespaces",
            name: None,
            subresource: None,
            field_selector: "",
        };
        assert_eq!(
            Attributes::resource(&namespaces)
                .forbidden(&user, "")
                .message,
            "namespaces is forbidden: User \"alice\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"
        );
        assert_eq!(
            Attributes::path("GET", "/metrics")
                .forbidden(&user, "")
                .message,
            "forbidden: User \"alice\" cannot get path \"/metrics\""
        );
    }

    #[test]
    fn a_namespace_is_its_own_namespace() {
        let get = ResourceRequest {
            method: "GET",
            watch: false,
            group: "",
            version: "v1",
            namespace: None,
            resource: "namespaces",
            name: Some("team"),
            subresource: None,
            field_selector: "",
        };
        assert_eq!(Attributes::resource(&get).namespace, "team");
    }
}
