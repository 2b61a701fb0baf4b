//! What a request asks to do (kube's `authorizer.Attributes`, from its `RequestInfo`), and the
//! 403 kube answers when it may not.

use plinth_core::{ApiError, GroupResource};

use super::User;

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
        Self {
            resource_request: true,
            verb: verb.to_owned(),
            namespace: namespace.to_owned(),
            api_group: request.group.to_owned(),
            api_version: request.version.to_owned(),
            resource: request.resource.to_owned(),
            subresource: request.subresource.unwrap_or("").to_owned(),
            name: request.name.unwrap_or("").to_owned(),
            path: String::new(),
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
        };
        assert_eq!(Attributes::resource(&get).namespace, "team");
    }
}
