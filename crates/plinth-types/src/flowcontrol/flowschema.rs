//! flowcontrol.apiserver.k8s.io/v1 FlowSchema: which requests (subjects and rules) go to
//! which priority level, and how they are told apart for fair queuing.

use plinth_core::Cause;
use serde_json::{Value, json};

use plinth_registry::resources::{ResourceDef, age_cell, column, path_cell};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::strategy::Strategy;

/// The `flowschemas` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new(super::GROUP, "v1", "FlowSchema", "flowschemas")
        .cluster_scoped()
        .with_status()
        .columns(vec![
            column(
                "PriorityLevel",
                "string",
                "The priority level its requests go to",
                0,
                path_cell("spec.priorityLevelConfiguration.name"),
            ),
            column(
                "MatchingPrecedence",
                "string",
                "Lower numbers match first",
                0,
                path_cell("spec.matchingPrecedence"),
            ),
            column(
                "DistinguisherMethod",
                "string",
                "How flows are told apart",
                0,
                |object: &Value, _now: i64| {
                    json!(
                        object
                            .pointer("/spec/distinguisherMethod/type")
                            .and_then(Value::as_str)
                            .unwrap_or("<none>")
                    )
                },
            ),
            column(
                "Age",
                "string",
                "Time since creation",
                0,
                |object: &Value, now: i64| age_cell(object, "metadata.creationTimestamp", now),
            ),
            column(
                "MissingPL",
                "string",
                "references a broken or non-existent PriorityLevelConfiguration",
                0,
                |object: &Value, _now: i64| {
                    let dangling = object
                        .pointer("/status/conditions")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .find(|c| c["type"] == "Dangling")
                        .and_then(|c| c["status"].as_str());
                    json!(dangling.unwrap_or("?"))
                },
            ),
        ])
        .no_age_column()
        .schema(schema())
        .strategy(FlowSchemas)
}

fn subject() -> Schema {
    obj(vec![
        ("kind", Schema::String),
        ("user", obj(vec![("name", Schema::String)])),
        ("group", obj(vec![("name", Schema::String)])),
        (
            "serviceAccount",
            obj(vec![
                ("namespace", Schema::String),
                ("name", Schema::String),
            ]),
        ),
    ])
}

fn schema() -> Schema {
    let strings = || array(Schema::String);
    top(vec![
        (
            "spec",
            obj(vec![
                (
                    "priorityLevelConfiguration",
                    obj(vec![("name", Schema::String)]),
                ),
                ("matchingPrecedence", Schema::Int),
                ("distinguisherMethod", obj(vec![("type", Schema::String)])),
                (
                    "rules",
                    array(obj(vec![
                        ("subjects", array(subject())),
                        (
                            "resourceRules",
                            array(obj(vec![
                                ("verbs", strings()),
                                ("apiGroups", strings()),
                                ("resources", strings()),
                                ("clusterScope", Schema::Bool),
                                ("namespaces", strings()),
                            ])),
                        ),
                        (
                            "nonResourceRules",
                            array(obj(vec![
                                ("verbs", strings()),
                                ("nonResourceURLs", strings()),
                            ])),
                        ),
                    ])),
                ),
            ]),
        ),
        (
            "status",
            obj(vec![(
                "conditions",
                array(super::prioritylevel::condition()),
            )]),
        ),
    ])
}

#[derive(Debug)]
struct FlowSchemas;

impl Strategy for FlowSchemas {
    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let spec = object.get("spec").unwrap_or(&Value::Null);
        let level = spec
            .pointer("/priorityLevelConfiguration/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        if level.is_empty() {
            causes.push(Cause::required(
                "spec.priorityLevelConfiguration.name",
                "must reference a priority level",
            ));
        }
        if let Some(precedence) = spec.get("matchingPrecedence") {
            let n = precedence.as_i64().unwrap_or(0);
            if !(1..=10_000).contains(&n) {
                causes.push(Cause::invalid(
                    "spec.matchingPrecedence",
                    precedence,
                    "must be between 1 and 10000, inclusive",
                ));
            }
        }
        if let Some(method) = spec.pointer("/distinguisherMethod/type") {
            let text = method.as_str().unwrap_or("");
            if !["ByUser", "ByNamespace"].contains(&text) {
                causes.push(Cause::not_supported(
                    "spec.distinguisherMethod.type",
                    method,
                    &["ByNamespace", "ByUser"],
                ));
            }
        }
        let rules = spec
            .get("rules")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (i, rule) in rules.iter().enumerate() {
            let path = format!("spec.rules[{i}]");
            let subjects = rule
                .get("subjects")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            if subjects.is_empty() {
                causes.push(Cause::required(format!("{path}.subjects"), ""));
            }
            for (j, subject) in subjects.iter().enumerate() {
                let at = format!("{path}.subjects[{j}]");
                let kind = subject.get("kind").cloned().unwrap_or(Value::Null);
                let field = match kind.as_str() {
                    Some("User") => "user",
                    Some("Group") => "group",
                    Some("ServiceAccount") => "serviceAccount",
                    _ => {
                        causes.push(Cause::not_supported(
                            format!("{at}.kind"),
                            &kind,
                            &["Group", "ServiceAccount", "User"],
                        ));
                        continue;
                    }
                };
                if subject
                    .get(field)
                    .and_then(|s| s.get("name"))
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    causes.push(Cause::required(format!("{at}.{field}.name"), ""));
                }
            }
            let resource_rules = rule.get("resourceRules").and_then(Value::as_array);
            let path_rules = rule.get("nonResourceRules").and_then(Value::as_array);
            if resource_rules.is_none_or(Vec::is_empty) && path_rules.is_none_or(Vec::is_empty) {
                causes.push(Cause::required(
                    path.clone(),
                    "at least one of resourceRules and nonResourceRules has to be non-empty",
                ));
            }
            for (j, r) in resource_rules.into_iter().flatten().enumerate() {
                for field in ["verbs", "apiGroups", "resources"] {
                    if r.get(field)
                        .and_then(Value::as_array)
                        .is_none_or(Vec::is_empty)
                    {
                        causes.push(Cause::required(
                            format!("{path}.resourceRules[{j}].{field}"),
                            &format!("{field} must contain at least one value"),
                        ));
                    }
                }
            }
            for (j, r) in path_rules.into_iter().flatten().enumerate() {
                for field in ["verbs", "nonResourceURLs"] {
                    if r.get(field)
                        .and_then(Value::as_array)
                        .is_none_or(Vec::is_empty)
                    {
                        causes.push(Cause::required(
                            format!("{path}.nonResourceRules[{j}].{field}"),
                            &format!("{field} must contain at least one value"),
                        ));
                    }
                }
            }
        }
        causes
    }
}
