//! The `authorization.k8s.io` API group: questions to the authorizer, answered and never
//! stored — may I (SelfSubjectAccessReview, `kubectl auth can-i`), what may I
//! (SelfSubjectRulesReview, `kubectl auth can-i --list`), may they (SubjectAccessReview,
//! LocalSubjectAccessReview in a namespace).

use plinth_core::{ApiError, Cause};
use serde_json::{Value, json};

use plinth_registry::authz::{Attributes, Decision};
use plinth_registry::resources::{Asker, ResourceDef};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::user::User;

/// The group's name.
pub const GROUP: &str = "authorization.k8s.io";

fn attributes_schema() -> Vec<(&'static str, Schema)> {
    vec![
        (
            "resourceAttributes",
            obj(vec![
                ("namespace", Schema::String),
                ("verb", Schema::String),
                ("group", Schema::String),
                ("version", Schema::String),
                ("resource", Schema::String),
                ("subresource", Schema::String),
                ("name", Schema::String),
                ("fieldSelector", Schema::Any),
                ("labelSelector", Schema::Any),
            ]),
        ),
        (
            "nonResourceAttributes",
            obj(vec![("path", Schema::String), ("verb", Schema::String)]),
        ),
    ]
}

fn status_schema() -> Schema {
    obj(vec![
        ("allowed", Schema::Bool),
        ("denied", Schema::Bool),
        ("reason", Schema::String),
        ("evaluationError", Schema::String),
    ])
}

fn review(
    kind: &str,
    plural: &str,
    spec: Vec<(&'static str, Schema)>,
    status: Schema,
    answer: plinth_registry::resources::Answer,
) -> ResourceDef {
    ResourceDef::new(GROUP, "v1", kind, plural)
        .cluster_scoped()
        .schema(top(vec![("spec", obj(spec)), ("status", status)]))
        .answered_by(answer)
}

/// Every resource of the group.
pub fn resources() -> Vec<ResourceDef> {
    let mut subject = attributes_schema();
    subject.extend([
        ("user", Schema::String),
        ("groups", array(Schema::String)),
        ("uid", Schema::String),
        ("extra", Schema::Map(Box::new(array(Schema::String)))),
    ]);
    let mut local = review(
        "LocalSubjectAccessReview",
        "localsubjectaccessreviews",
        subject.clone(),
        status_schema(),
        subject_access_review,
    );
    local.namespaced = true;
    vec![
        review(
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
            attributes_schema(),
            status_schema(),
            self_subject_access_review,
        ),
        review(
            "SelfSubjectRulesReview",
            "selfsubjectrulesreviews",
            vec![("namespace", Schema::String)],
            Schema::Any,
            self_subject_rules_review,
        ),
        review(
            "SubjectAccessReview",
            "subjectaccessreviews",
            subject,
            status_schema(),
            subject_access_review,
        ),
        local,
    ]
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The attributes a review's spec asks about.
fn asked(kind: &str, spec: &Value) -> Result<Attributes, ApiError> {
    if let Some(resource) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
        return Ok(Attributes {
            resource_request: true,
            verb: text(resource, "/verb").to_owned(),
            namespace: text(resource, "/namespace").to_owned(),
            api_group: text(resource, "/group").to_owned(),
            api_version: text(resource, "/version").to_owned(),
            resource: text(resource, "/resource").to_owned(),
            subresource: text(resource, "/subresource").to_owned(),
            name: text(resource, "/name").to_owned(),
            path: String::new(),
            field_selector: text(resource, "/fieldSelector/rawSelector").to_owned(),
        });
    }
    if let Some(path) = spec.get("nonResourceAttributes").filter(|v| v.is_object()) {
        let mut attributes = Attributes::path(text(path, "/verb"), text(path, "/path"));
        attributes.verb = text(path, "/verb").to_owned();
        return Ok(attributes);
    }
    Err(ApiError::invalid(
        GROUP,
        kind,
        "",
        vec![Cause::invalid(
            "spec.resourceAttributes",
            &Value::Null,
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )],
    ))
}

fn answered(mut object: Value, decision: &Decision) -> Value {
    object["status"] = match decision {
        Decision::Allow(reason) => json!({"allowed": true, "reason": reason}),
        Decision::Deny(reason) if reason.is_empty() => json!({"allowed": false}),
        Decision::Deny(reason) => json!({"allowed": false, "reason": reason}),
    };
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("creationTimestamp".into(), Value::Null);
    }
    object
}

fn self_subject_access_review_now(asker: &Asker<'_>, object: Value) -> Result<Value, ApiError> {
    let attributes = asked("SelfSubjectAccessReview", &object["spec"])?;
    let decision = asker.authorizer.authorize(asker.user, &attributes);
    Ok(answered(object, &decision))
}

fn subject_access_review_now(asker: &Asker<'_>, object: Value) -> Result<Value, ApiError> {
    let kind = text(&object, "/kind").to_owned();
    let spec = &object["spec"];
    let mut attributes = asked(&kind, spec)?;
    if let Some(namespace) = asker.namespace {
        if !attributes.namespace.is_empty() && attributes.namespace != namespace {
            return Err(ApiError::bad_request(format!(
                "spec.resourceAttributes.namespace must match namespace: {namespace}"
            )));
        }
        attributes.namespace = namespace.to_owned();
    }
    let user = text(spec, "/user");
    let groups: Vec<&str> = spec
        .get("groups")
        .and_then(Value::as_array)
        .map(|g| g.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if user.is_empty() && groups.is_empty() {
        return Err(ApiError::invalid(
            GROUP,
            &kind,
            "",
            vec![Cause::invalid(
                "spec.user",
                &json!(""),
                "at least one of user or group must be specified",
            )],
        ));
    }
    let subject = User {
        name: user.to_owned(),
        uid: text(spec, "/uid").to_owned(),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        extra: std::collections::BTreeMap::new(),
    };
    let decision = asker.authorizer.authorize(&subject, &attributes);
    Ok(answered(object, &decision))
}

fn self_subject_rules_review_now(asker: &Asker<'_>, mut object: Value) -> Result<Value, ApiError> {
    let namespace = text(&object, "/spec/namespace").to_owned();
    let rules = asker.authorizer.rules_for(asker.user, &namespace);
    let (mut resource_rules, mut non_resource_rules) = (Vec::new(), Vec::new());
    for rule in rules {
        if rule.non_resource_urls.is_empty() {
            resource_rules.push(rule.to_json());
        } else {
            non_resource_rules
                .push(json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}));
        }
    }
    object["status"] = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    });
    Ok(object)
}

/// The reviews as the registry calls them (answered at once: RBAC decides in memory).
fn self_subject_access_review<'a>(
    asker: &'a Asker<'a>,
    object: Value,
) -> futures::future::BoxFuture<'a, Result<Value, ApiError>> {
    Box::pin(std::future::ready(self_subject_access_review_now(
        asker, object,
    )))
}

fn subject_access_review<'a>(
    asker: &'a Asker<'a>,
    object: Value,
) -> futures::future::BoxFuture<'a, Result<Value, ApiError>> {
    Box::pin(std::future::ready(subject_access_review_now(asker, object)))
}

fn self_subject_rules_review<'a>(
    asker: &'a Asker<'a>,
    object: Value,
) -> futures::future::BoxFuture<'a, Result<Value, ApiError>> {
    Box::pin(std::future::ready(self_subject_rules_review_now(
        asker, object,
    )))
}
