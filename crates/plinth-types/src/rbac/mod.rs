//! The `rbac.authorization.k8s.io` API group: rules (Role, ClusterRole) and who they are
//! granted to (RoleBinding, ClusterRoleBinding), validated as kube's `rbac/validation` does.
//! What they allow is [`plinth_auth::rbac`]'s business.

pub mod clusterrole;
pub mod clusterrolebinding;
pub mod role;
pub mod rolebinding;

use plinth_core::{ApiError, Cause, GroupResource};
use serde_json::Value;

use plinth_registry::Requester;
use plinth_registry::authz::Attributes;
use plinth_registry::authz::{Decision, Rule};
use plinth_registry::schema::{Schema, array, obj};

/// The group's name.
pub const GROUP: &str = "rbac.authorization.k8s.io";

/// `[]PolicyRule`.
fn rules_schema() -> Schema {
    array(obj(vec![
        ("verbs", array(Schema::String)),
        ("apiGroups", array(Schema::String)),
        ("resources", array(Schema::String)),
        ("resourceNames", array(Schema::String)),
        ("nonResourceURLs", array(Schema::String)),
    ]))
}

/// A binding's `subjects` and `roleRef`.
fn binding_schema() -> Vec<(&'static str, Schema)> {
    vec![
        (
            "subjects",
            array(obj(vec![
                ("kind", Schema::String),
                ("apiGroup", Schema::String),
                ("name", Schema::String),
                ("namespace", Schema::String),
            ])),
        ),
        (
            "roleRef",
            obj(vec![
                ("apiGroup", Schema::String),
                ("kind", Schema::String),
                ("name", Schema::String),
            ]),
        ),
    ]
}

fn list_len(value: Option<&Value>) -> usize {
    value.and_then(Value::as_array).map_or(0, Vec::len)
}

fn not_supported(field: String, value: &str, supported: &[&str]) -> Cause {
    Cause::not_supported(field, &Value::String(value.to_owned()), supported)
}

/// Each rule's verbs, and either resources (with groups) or paths — paths only for
/// cluster-wide roles.
fn validate_rules(object: &Value, namespaced: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    let rules = object
        .get("rules")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, rule) in rules.iter().enumerate() {
        let at = |field: &str| format!("rules[{i}].{field}");
        if list_len(rule.get("verbs")) == 0 {
            causes.push(Cause::required(
                at("verbs"),
                "verbs must contain at least one value",
            ));
        }
        let urls = rule.get("nonResourceURLs").unwrap_or(&Value::Null);
        if list_len(Some(urls)) > 0 {
            if namespaced {
                causes.push(Cause::invalid(
                    at("nonResourceURLs"),
                    urls,
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if list_len(rule.get("apiGroups")) > 0 || list_len(rule.get("resources")) > 0 {
                causes.push(Cause::invalid(
                    at("nonResourceURLs"),
                    urls,
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if list_len(rule.get("apiGroups")) == 0 {
            causes.push(Cause::required(
                at("apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if list_len(rule.get("resources")) == 0 {
            causes.push(Cause::required(
                at("resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
    causes
}

/// rbac/v1's defaults of a binding: `roleRef.apiGroup` is the group; a User's or Group's
/// subject `apiGroup` is the group too, a ServiceAccount's stays `""`.
fn default_binding(object: &mut Value) {
    let empty = |v: &Value| {
        v.get("apiGroup")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    };
    if let Some(role) = object.get_mut("roleRef").and_then(Value::as_object_mut)
        && empty(&Value::Object(role.clone()))
    {
        role.insert("apiGroup".into(), Value::String(GROUP.into()));
    }
    let Some(subjects) = object.get_mut("subjects").and_then(Value::as_array_mut) else {
        return;
    };
    for subject in subjects {
        let kind = subject.get("kind").and_then(Value::as_str).unwrap_or("");
        if matches!(kind, "User" | "Group")
            && empty(subject)
            && let Some(fields) = subject.as_object_mut()
        {
            fields.insert("apiGroup".into(), Value::String(GROUP.into()));
        }
    }
}

/// A binding's role reference (`kinds` it may name) and subjects; its role reference cannot
/// change.
fn validate_binding(
    object: &Value,
    old: Option<&Value>,
    kinds: &[&str],
    namespaced: bool,
) -> Vec<Cause> {
    let text = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_owned();
    let mut causes = Vec::new();
    let role = object.get("roleRef").cloned().unwrap_or(Value::Null);
    if text(&role, "apiGroup") != GROUP {
        causes.push(not_supported(
            "roleRef.apiGroup".into(),
            &text(&role, "apiGroup"),
            &[GROUP],
        ));
    }
    if !kinds.contains(&text(&role, "kind").as_str()) {
        causes.push(not_supported(
            "roleRef.kind".into(),
            &text(&role, "kind"),
            kinds,
        ));
    }
    if text(&role, "name").is_empty() {
        causes.push(Cause::required("roleRef.name", ""));
    }
    let subjects = object
        .get("subjects")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, subject) in subjects.iter().enumerate() {
        let at = |field: &str| format!("subjects[{i}].{field}");
        if text(subject, "name").is_empty() {
            causes.push(Cause::required(at("name"), ""));
        }
        let group = text(subject, "apiGroup");
        match text(subject, "kind").as_str() {
            "ServiceAccount" => {
                if !group.is_empty() {
                    causes.push(not_supported(at("apiGroup"), &group, &[""]));
                }
                if !namespaced && text(subject, "namespace").is_empty() {
                    causes.push(Cause::required(at("namespace"), ""));
                }
            }
            "User" | "Group" => {
                if group != GROUP {
                    causes.push(not_supported(at("apiGroup"), &group, &[GROUP]));
                }
            }
            other => causes.push(not_supported(
                at("kind"),
                other,
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
    if let Some(old) = old
        && old.get("roleRef") != object.get("roleRef")
    {
        causes.push(Cause::invalid(
            "roleRef",
            object.get("roleRef").unwrap_or(&Value::Null),
            "cannot change roleRef",
        ));
    }
    causes
}

/// The Role column of bindings: `Role/name` or `ClusterRole/name`.
fn role_cell(object: &Value, _now: i64) -> Value {
    let role = object.get("roleRef");
    let text = |f: &str| {
        role.and_then(|r| r.get(f))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    Value::String(format!("{}/{}", text("kind"), text("name")))
}

/// The strategy of Roles and ClusterRoles: rules validated, writes checked for escalation.
#[derive(Debug)]
struct Roles {
    /// `roles` or `clusterroles`.
    resource: &'static str,
}

impl plinth_registry::strategy::Strategy for Roles {
    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        validate_rules(object, self.resource == "roles")
    }

    fn admit(
        &self,
        object: &Value,
        old: Option<&Value>,
        requester: &Requester,
    ) -> Result<(), ApiError> {
        admit_role(object, old, requester, self.resource)
    }
}

/// The strategy of RoleBindings and ClusterRoleBindings.
#[derive(Debug)]
struct Bindings {
    /// `rolebindings` or `clusterrolebindings`.
    resource: &'static str,
}

impl plinth_registry::strategy::Strategy for Bindings {
    fn prepare_create(&self, object: &mut Value) {
        default_binding(object);
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        default_binding(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        if self.resource == "rolebindings" {
            validate_binding(object, old, &["Role", "ClusterRole"], true)
        } else {
            validate_binding(object, old, &["ClusterRole"], false)
        }
    }

    fn admit(
        &self,
        object: &Value,
        _old: Option<&Value>,
        requester: &Requester,
    ) -> Result<(), ApiError> {
        admit_binding(object, requester, self.resource)
    }
}

/// Whether the requester may `verb` (`escalate`, `bind`) the role `name` of `resource` in
/// `namespace` — the permission that lifts the escalation check.
fn may(requester: &Requester, verb: &str, resource: &str, namespace: &str, name: &str) -> bool {
    let attributes = Attributes::check(verb, GROUP, resource, namespace, name);
    matches!(
        requester.authorizer.authorize(&requester.user, &attributes),
        Decision::Allow(_)
    )
}

/// kube's `ConfirmNoEscalation`: the requester must hold, in `namespace` (cluster-wide for
/// `""`), everything `rules` grant; else 403 naming what they lack.
fn confirm_no_escalation(
    requester: &Requester,
    resource: &str,
    namespace: &str,
    name: &str,
    rules: &[Rule],
) -> Result<(), ApiError> {
    let Some(missing) = requester
        .authorizer
        .uncovered(&requester.user, namespace, rules)
    else {
        return Ok(());
    };
    let user = &requester.user;
    let list = |values: &[String]| {
        values
            .iter()
            .map(|v| format!("{v:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut parts = Vec::new();
    for (field, values) in [
        ("APIGroups", &missing.api_groups),
        ("Resources", &missing.resources),
        ("ResourceNames", &missing.resource_names),
        ("NonResourceURLs", &missing.non_resource_urls),
        ("Verbs", &missing.verbs),
    ] {
        if !values.is_empty() {
            parts.push(format!("{field}:[{}]", list(values)));
        }
    }
    let why = format!(
        "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{{{}}}",
        user.name,
        list(&user.groups),
        parts.join(", ")
    );
    Err(ApiError::forbidden(
        Some(&GroupResource::new(GROUP, resource)),
        name,
        &why,
    ))
}

/// The rules of a Role or ClusterRole object.
fn rules_of(object: &Value) -> Vec<Rule> {
    object
        .get("rules")
        .and_then(Value::as_array)
        .map(|rules| rules.iter().map(Rule::from_json).collect())
        .unwrap_or_default()
}

/// A role's write: unless its rules are unchanged or the requester may `escalate`, they must
/// hold every rule it grants (an aggregating ClusterRole can gather anything: its
/// `aggregationRule` needs full authority).
fn admit_role(
    object: &Value,
    old: Option<&Value>,
    requester: &Requester,
    resource: &str,
) -> Result<(), ApiError> {
    let namespace = plinth_core::meta::namespace(object).unwrap_or("");
    let name = plinth_core::meta::name(object).unwrap_or("");
    let unchanged = |field: &str| old.is_some_and(|old| old.get(field) == object.get(field));
    if (unchanged("rules") && unchanged("aggregationRule"))
        || may(requester, "escalate", resource, namespace, name)
    {
        return Ok(());
    }
    let mut rules = rules_of(object);
    if object.get("aggregationRule").is_some_and(|a| !a.is_null()) && !unchanged("aggregationRule")
    {
        rules.push(Rule {
            verbs: vec!["*".into()],
            api_groups: vec!["*".into()],
            resources: vec!["*".into()],
            ..Rule::default()
        });
    }
    confirm_no_escalation(requester, resource, namespace, name, &rules)
}

/// A binding's write: the requester may `bind` the role it refers to, or holds every rule of
/// that role.
fn admit_binding(object: &Value, requester: &Requester, resource: &str) -> Result<(), ApiError> {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let namespace = plinth_core::meta::namespace(object).unwrap_or("");
    let name = plinth_core::meta::name(object).unwrap_or("");
    let (kind, role) = (text("/roleRef/kind"), text("/roleRef/name"));
    let role_resource = if kind == "Role" {
        "roles"
    } else {
        "clusterroles"
    };
    let role_namespace = if kind == "Role" { namespace } else { "" };
    if may(requester, "bind", role_resource, namespace, role) {
        return Ok(());
    }
    let Some(rules) = requester
        .authorizer
        .referenced_rules(kind, role_namespace, role)
    else {
        return Err(ApiError::not_found(
            &GroupResource::new(GROUP, role_resource),
            role,
        ));
    };
    confirm_no_escalation(requester, resource, namespace, name, &rules)
}
