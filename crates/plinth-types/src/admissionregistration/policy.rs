//! ValidatingAdmissionPolicy (CEL validations over the written object, its parameters and
//! the request) and ValidatingAdmissionPolicyBinding (which policy applies where, with which
//! parameters and actions), defaulted and validated as kube does.

use plinth_core::Cause;
use serde_json::{Value, json};

use plinth_registry::resources::{ResourceDef, column, path_cell};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::strategy::Strategy;

/// What a policy's expressions may name (kube's, but `authorizer`, which is not built).
pub const POLICY_VARIABLES: [&str; 6] = [
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
    "variables",
];

/// The `validatingadmissionpolicies` resource.
pub fn policies() -> ResourceDef {
    let mut def = ResourceDef::new(
        super::GROUP,
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
    )
    .cluster_scoped()
    .with_status()
    .columns(vec![
        column(
            "Validations",
            "integer",
            "Validations in the policy",
            0,
            |object: &Value, _| {
                plinth_registry::resources::count(
                    object.get("spec").unwrap_or(&Value::Null),
                    &["validations"],
                )
            },
        ),
        column(
            "ParamKind",
            "string",
            "The kind of its parameters",
            0,
            |object: &Value, _| match object.pointer("/spec/paramKind") {
                Some(kind) => json!(format!(
                    "{}/{}",
                    kind.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
                    kind.get("kind").and_then(Value::as_str).unwrap_or("")
                )),
                None => json!("<unset>"),
            },
        ),
    ])
    .schema(top(vec![
        (
            "spec",
            obj(vec![
                (
                    "paramKind",
                    obj(vec![
                        ("apiVersion", Schema::String),
                        ("kind", Schema::String),
                    ]),
                ),
                ("matchConstraints", match_resources()),
                (
                    "validations",
                    array(obj(vec![
                        ("expression", Schema::String),
                        ("message", Schema::String),
                        ("reason", Schema::String),
                        ("messageExpression", Schema::String),
                    ])),
                ),
                ("failurePolicy", Schema::String),
                (
                    "auditAnnotations",
                    array(obj(vec![
                        ("key", Schema::String),
                        ("valueExpression", Schema::String),
                    ])),
                ),
                ("matchConditions", array(named("expression"))),
                ("variables", array(named("expression"))),
            ]),
        ),
        (
            "status",
            obj(vec![
                ("observedGeneration", Schema::Int),
                ("typeChecking", Schema::Any),
                ("conditions", array(Schema::Any)),
            ]),
        ),
    ]))
    .strategy(Policies);
    def.generation = true;
    def
}

/// The `validatingadmissionpolicybindings` resource.
pub fn bindings() -> ResourceDef {
    ResourceDef::new(
        super::GROUP,
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    )
    .cluster_scoped()
    .columns(vec![
        column(
            "PolicyName",
            "string",
            "The policy it binds",
            0,
            path_cell("spec.policyName"),
        ),
        column(
            "ParamRef",
            "string",
            "Where its parameters are",
            0,
            |object: &Value, _| match object.pointer("/spec/paramRef") {
                Some(r) => {
                    let name = r.get("name").and_then(Value::as_str).unwrap_or("*");
                    match r.get("namespace").and_then(Value::as_str) {
                        Some(ns) => json!(format!("{ns}/{name}")),
                        None => json!(name),
                    }
                }
                None => json!("<unset>"),
            },
        ),
    ])
    .schema(top(vec![(
        "spec",
        obj(vec![
            ("policyName", Schema::String),
            (
                "paramRef",
                obj(vec![
                    ("name", Schema::String),
                    ("namespace", Schema::String),
                    ("selector", Schema::Any),
                    ("parameterNotFoundAction", Schema::String),
                ]),
            ),
            ("matchResources", match_resources()),
            ("validationActions", array(Schema::String)),
        ]),
    )]))
    .strategy(Bindings)
}

fn named(field: &'static str) -> Schema {
    obj(vec![("name", Schema::String), (field, Schema::String)])
}

fn match_resources() -> Schema {
    let rule = || {
        array(obj(vec![
            ("operations", array(Schema::String)),
            ("apiGroups", array(Schema::String)),
            ("apiVersions", array(Schema::String)),
            ("resources", array(Schema::String)),
            ("resourceNames", array(Schema::String)),
            ("scope", Schema::String),
        ]))
    };
    obj(vec![
        ("namespaceSelector", Schema::Any),
        ("objectSelector", Schema::Any),
        ("resourceRules", rule()),
        ("excludeResourceRules", rule()),
        ("matchPolicy", Schema::String),
    ])
}

fn default_match_resources(resources: Option<&mut Value>) {
    let Some(map) = resources.and_then(Value::as_object_mut) else {
        return;
    };
    for key in ["namespaceSelector", "objectSelector"] {
        map.entry(key).or_insert_with(|| json!({}));
    }
    map.entry("matchPolicy")
        .or_insert_with(|| json!("Equivalent"));
    for key in ["resourceRules", "excludeResourceRules"] {
        for rule in map
            .get_mut(key)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(rule) = rule.as_object_mut() {
                rule.entry("scope").or_insert_with(|| json!("*"));
            }
        }
    }
}

fn compiles(causes: &mut Vec<Cause>, field: String, expression: &str, variables: &[&str]) {
    if expression.is_empty() {
        causes.push(Cause::required(field, ""));
    } else if let Err(e) = plinth_schema::Expression::compile(expression, variables) {
        causes.push(Cause::invalid(field, &json!(expression), &e));
    }
}

fn items<'a>(value: &'a Value, pointer: &str) -> &'a [Value] {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

#[derive(Debug)]
struct Policies;

impl Strategy for Policies {
    fn prepare_create(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            spec.entry("failurePolicy").or_insert_with(|| json!("Fail"));
            default_match_resources(spec.get_mut("matchConstraints"));
        }
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        self.prepare_create(object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let spec = object.get("spec").unwrap_or(&Value::Null);
        let validations = items(object, "/spec/validations");
        if validations.is_empty() && items(object, "/spec/auditAnnotations").is_empty() {
            causes.push(Cause::required(
                "spec.validations",
                "validations or auditAnnotations must contain at least one item",
            ));
        }
        if items(object, "/spec/matchConstraints/resourceRules").is_empty() {
            causes.push(Cause::required("spec.matchConstraints.resourceRules", ""));
        }
        if let Some(kind) = spec.get("paramKind").filter(|k| !k.is_null()) {
            for field in ["apiVersion", "kind"] {
                if kind
                    .get(field)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    causes.push(Cause::required(format!("spec.paramKind.{field}"), ""));
                }
            }
        }
        if let Some(policy) = spec.get("failurePolicy")
            && !policy
                .as_str()
                .is_some_and(|p| p == "Fail" || p == "Ignore")
        {
            causes.push(Cause::not_supported(
                "spec.failurePolicy",
                policy,
                &["Fail", "Ignore"],
            ));
        }
        for (i, v) in validations.iter().enumerate() {
            let at = format!("spec.validations[{i}]");
            let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
            compiles(
                &mut causes,
                format!("{at}.expression"),
                text("expression"),
                &POLICY_VARIABLES,
            );
            if !text("messageExpression").is_empty() {
                compiles(
                    &mut causes,
                    format!("{at}.messageExpression"),
                    text("messageExpression"),
                    &POLICY_VARIABLES,
                );
            }
            if let Some(reason) = v.get("reason")
                && !reason.as_str().is_some_and(|r| {
                    [
                        "Unauthorized",
                        "Forbidden",
                        "Invalid",
                        "RequestEntityTooLarge",
                    ]
                    .contains(&r)
                })
            {
                causes.push(Cause::not_supported(
                    format!("{at}.reason"),
                    reason,
                    &[
                        "Forbidden",
                        "Invalid",
                        "RequestEntityTooLarge",
                        "Unauthorized",
                    ],
                ));
            }
        }
        let mut names = std::collections::HashSet::new();
        for (list, vars) in [
            ("matchConditions", &POLICY_VARIABLES[..]),
            ("variables", &POLICY_VARIABLES[..]),
        ] {
            for (i, item) in items(object, &format!("/spec/{list}")).iter().enumerate() {
                let at = format!("spec.{list}[{i}]");
                let name = item.get("name").and_then(Value::as_str).unwrap_or("");
                let identifier = !name.is_empty()
                    && name
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if name.is_empty() {
                    causes.push(Cause::required(format!("{at}.name"), ""));
                } else if list == "variables" && !identifier {
                    causes.push(Cause::invalid(
                        format!("{at}.name"),
                        &json!(name),
                        "name is not a valid CEL identifier",
                    ));
                } else if !names.insert((list, name)) {
                    causes.push(Cause::new(
                        "FieldValueDuplicate",
                        format!("{at}.name"),
                        format!("Duplicate value: {name:?}"),
                    ));
                }
                let expression = item.get("expression").and_then(Value::as_str).unwrap_or("");
                compiles(&mut causes, format!("{at}.expression"), expression, vars);
            }
        }
        causes
    }
}

#[derive(Debug)]
struct Bindings;

impl Strategy for Bindings {
    fn prepare_create(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            default_match_resources(spec.get_mut("matchResources"));
        }
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        self.prepare_create(object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let spec = object.get("spec").unwrap_or(&Value::Null);
        if spec
            .get("policyName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(Cause::required("spec.policyName", ""));
        }
        let actions = items(object, "/spec/validationActions");
        if actions.is_empty() {
            causes.push(Cause::required("spec.validationActions", ""));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, action) in actions.iter().enumerate() {
            let text = action.as_str().unwrap_or("");
            if !["Deny", "Warn", "Audit"].contains(&text) {
                causes.push(Cause::not_supported(
                    format!("spec.validationActions[{i}]"),
                    action,
                    &["Audit", "Deny", "Warn"],
                ));
            } else if !seen.insert(text) {
                causes.push(Cause::new(
                    "FieldValueDuplicate",
                    format!("spec.validationActions[{i}]"),
                    format!("Duplicate value: {text:?}"),
                ));
            }
        }
        if seen.contains("Deny") && seen.contains("Warn") {
            causes.push(Cause::invalid(
                "spec.validationActions",
                &json!(actions),
                "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            ));
        }
        if let Some(reference) = spec.get("paramRef").filter(|r| !r.is_null()) {
            let name = reference
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty());
            let selector = reference.get("selector").filter(|s| !s.is_null());
            match (name, selector) {
                (Some(_), Some(_)) => causes.push(Cause::forbidden(
                    "spec.paramRef.name",
                    "name and selector are mutually exclusive",
                )),
                (None, None) => causes.push(Cause::required(
                    "spec.paramRef",
                    "one of name or selector must be specified",
                )),
                _ => {}
            }
            match reference.get("parameterNotFoundAction") {
                None | Some(Value::Null) => {
                    causes.push(Cause::required("spec.paramRef.parameterNotFoundAction", ""))
                }
                Some(action) if !action.as_str().is_some_and(|a| a == "Allow" || a == "Deny") => {
                    causes.push(Cause::not_supported(
                        "spec.paramRef.parameterNotFoundAction",
                        action,
                        &["Allow", "Deny"],
                    ));
                }
                _ => {}
            }
        }
        causes
    }
}
