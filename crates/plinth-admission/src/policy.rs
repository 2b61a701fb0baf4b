//! ValidatingAdmissionPolicies in force: each binding's policy, compiled once, evaluated on
//! the writes both match — parameters looked up per the binding's `paramRef`, the policy's
//! `matchConditions` and `variables`, then its `validations` — and the binding's actions
//! applied: `Deny` refuses, `Warn` warns, `Audit` logs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use plinth_core::selector::LabelSelector;
use plinth_core::{ApiError, Cause, StatusReason};
use plinth_schema::{Evaluated, Expression};
use serde_json::{Map, Value};

use super::Request;
use super::matching::Matcher;
use plinth_registry::ListOptions;
use plinth_registry::resources::Objects;
use plinth_types::admissionregistration::policy::POLICY_VARIABLES;

struct Validation {
    expression: Arc<Expression>,
    message: Option<String>,
    message_expression: Option<Arc<Expression>>,
    reason: StatusReason,
}

/// A compiled ValidatingAdmissionPolicy.
pub struct Policy {
    name: String,
    param_kind: Option<(String, String)>,
    matcher: Matcher,
    ignore_failures: bool,
    validations: Vec<Validation>,
    match_conditions: Vec<(String, Arc<Expression>)>,
    variables: Vec<(String, Arc<Expression>)>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

struct ParamRef {
    name: Option<String>,
    namespace: Option<String>,
    selector: Option<LabelSelector>,
    deny_if_missing: bool,
}

/// A ValidatingAdmissionPolicyBinding.
pub struct Binding {
    name: String,
    policy: String,
    param_ref: Option<ParamRef>,
    matcher: Matcher,
    deny: bool,
    warn: bool,
    audit: bool,
}

impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binding")
            .field("name", &self.name)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn compiled(list: Option<&Value>) -> Option<Vec<(String, Arc<Expression>)>> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|item| {
            Expression::compile(text(item, "/expression"), &POLICY_VARIABLES)
                .ok()
                .map(|e| (text(item, "/name").to_owned(), Arc::new(e)))
        })
        .collect()
}

impl Policy {
    /// The policy of a stored object (`None` if an expression no longer compiles).
    pub fn parse(object: &Value) -> Option<Self> {
        let spec = object.get("spec")?;
        let mut validations = Vec::new();
        for v in spec
            .get("validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let message_expression = match text(v, "/messageExpression") {
                "" => None,
                source => Some(Arc::new(
                    Expression::compile(source, &POLICY_VARIABLES).ok()?,
                )),
            };
            validations.push(Validation {
                expression: Arc::new(
                    Expression::compile(text(v, "/expression"), &POLICY_VARIABLES).ok()?,
                ),
                message: Some(text(v, "/message").to_owned()).filter(|m| !m.is_empty()),
                message_expression,
                reason: StatusReason::from_name(text(v, "/reason"))
                    .unwrap_or(StatusReason::Invalid),
            });
        }
        Some(Self {
            name: plinth_core::meta::name(object)?.to_owned(),
            param_kind: spec.get("paramKind").filter(|k| k.is_object()).map(|k| {
                (
                    text(k, "/apiVersion").to_owned(),
                    text(k, "/kind").to_owned(),
                )
            }),
            matcher: Matcher::of_resources(spec.get("matchConstraints")),
            ignore_failures: text(spec, "/failurePolicy") == "Ignore",
            validations,
            match_conditions: compiled(spec.get("matchConditions"))?,
            variables: compiled(spec.get("variables"))?,
        })
    }
}

impl Binding {
    /// The binding of a stored object.
    pub fn parse(object: &Value) -> Option<Self> {
        let spec = object.get("spec")?;
        let actions: Vec<&str> = spec
            .get("validationActions")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        Some(Self {
            name: plinth_core::meta::name(object)?.to_owned(),
            policy: text(spec, "/policyName").to_owned(),
            param_ref: spec
                .get("paramRef")
                .filter(|r| r.is_object())
                .map(|r| ParamRef {
                    name: Some(text(r, "/name").to_owned()).filter(|n| !n.is_empty()),
                    namespace: Some(text(r, "/namespace").to_owned()).filter(|n| !n.is_empty()),
                    selector: r
                        .get("selector")
                        .filter(|s| s.is_object())
                        .and_then(|s| LabelSelector::from_object(s).ok()),
                    deny_if_missing: text(r, "/parameterNotFoundAction") == "Deny",
                }),
            matcher: Matcher::of_resources(spec.get("matchResources")),
            deny: actions.contains(&"Deny"),
            warn: actions.contains(&"Warn"),
            audit: actions.contains(&"Audit"),
        })
    }
}

/// The policies and bindings in force.
#[derive(Debug, Default)]
pub struct Policies {
    /// By name.
    pub policies: HashMap<String, Arc<Policy>>,
    /// In name order.
    pub bindings: Vec<Arc<Binding>>,
}

/// The outcome of one validation that did not pass.
enum Failure {
    /// The expression was false: the message and the reason.
    Violation(String, StatusReason),
    /// It could not be evaluated.
    Error(String),
}

impl Policies {
    /// Evaluates every binding that matches the write; returns the warnings.
    ///
    /// # Errors
    /// The first `Deny` binding's refusal.
    pub async fn validate(
        &self,
        objects: &dyn Objects,
        request: &Request<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
        namespace_labels: &Option<BTreeMap<String, String>>,
    ) -> Result<Vec<String>, ApiError> {
        let mut warnings = Vec::new();
        for binding in &self.bindings {
            let Some(policy) = self.policies.get(&binding.policy) else {
                continue;
            };
            let Some(version) =
                policy
                    .matcher
                    .matches(objects, request, object, old, namespace_labels)
            else {
                continue;
            };
            if !binding.matcher.is_empty()
                && binding
                    .matcher
                    .matches(objects, request, object, old, namespace_labels)
                    .is_none()
            {
                continue;
            }
            let failures = match params(objects, request, policy, binding).await {
                Ok(Some(all)) => {
                    let mut failures = Vec::new();
                    for params in all {
                        failures.extend(
                            evaluate(objects, request, &version, policy, &params, object, old)
                                .await,
                        );
                    }
                    failures
                }
                Ok(None) => Vec::new(),
                Err(failure) => vec![failure],
            };
            for failure in failures {
                let message = match failure {
                    Failure::Violation(message, reason) => (message, reason),
                    Failure::Error(_) if policy.ignore_failures => continue,
                    Failure::Error(why) => (why, StatusReason::Invalid),
                };
                let (message, reason) = message;
                if binding.deny {
                    // As kube's dispatcher: admission's Forbidden error (`<resource> "<name>"
                    // is forbidden: …`, the details naming the object) with the policy's reason
                    // and its code, the denial as the one cause.
                    let denial = format!(
                        "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {message}",
                        policy.name, binding.name
                    );
                    let mut error = ApiError::forbidden(
                        Some(&request.def.group_resource()),
                        request.name,
                        &denial,
                    );
                    error.reason = reason;
                    error.details.causes.push(Cause::new("", "", denial));
                    return Err(error);
                }
                if binding.warn {
                    warnings.push(format!(
                        "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {message}",
                        policy.name, binding.name
                    ));
                }
                if binding.audit {
                    let mut actions = vec!["Audit"];
                    if binding.warn {
                        actions.insert(0, "Warn");
                    }
                    super::annotations::annotate(
                        "validation.policy.admission.k8s.io/validation_failure".into(),
                        serde_json::json!([{"message": message, "policy": policy.name,
                            "binding": binding.name, "validationActions": actions}])
                        .to_string(),
                    );
                }
            }
        }
        Ok(warnings)
    }
}

/// The parameter objects the binding names (`[null]` for a policy without parameters; `None`
/// when none are found and the binding allows that).
async fn params(
    objects: &dyn Objects,
    request: &Request<'_>,
    policy: &Policy,
    binding: &Binding,
) -> Result<Option<Vec<Value>>, Failure> {
    let Some((api_version, kind)) = &policy.param_kind else {
        return Ok(Some(vec![Value::Null]));
    };
    let Some(reference) = &binding.param_ref else {
        return Err(Failure::Error(format!(
            "failed to configure binding: paramRef is required for policy {} with paramKind {api_version}, Kind={kind}",
            policy.name
        )));
    };
    let def = objects
        .resources()
        .into_iter()
        .find(|d| d.group_version.api_version() == *api_version && d.kind == *kind)
        .ok_or_else(|| {
            Failure::Error(format!(
                "failed to configure binding: paramKind {api_version}, Kind={kind} is not served"
            ))
        })?;
    let namespace = if def.namespaced {
        reference
            .namespace
            .clone()
            .or_else(|| request.namespace.map(str::to_owned))
    } else {
        None
    };
    let found = match (&reference.name, &reference.selector) {
        (Some(name), _) => match objects.get(&def, namespace.as_deref(), name).await {
            Ok(object) => vec![object],
            Err(e) if e.reason == StatusReason::NotFound => Vec::new(),
            Err(e) => return Err(Failure::Error(e.message)),
        },
        (None, selector) => {
            let options = ListOptions {
                labels: selector.clone().unwrap_or_default(),
                ..ListOptions::default()
            };
            let list = objects
                .list(&def, namespace.as_deref(), &options)
                .await
                .map_err(|e| Failure::Error(e.message))?;
            list["items"].as_array().cloned().unwrap_or_default()
        }
    };
    if found.is_empty() {
        return if reference.deny_if_missing {
            Err(Failure::Violation(
                "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
                StatusReason::Invalid,
            ))
        } else {
            Ok(None)
        };
    }
    Ok(Some(found))
}

/// The policy's validations on one set of parameters: what did not pass.
async fn evaluate(
    objects: &dyn Objects,
    request: &Request<'_>,
    version: &str,
    policy: &Policy,
    params: &Value,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Vec<Failure> {
    let null = Value::Null;
    let review = super::call::review_request(request, version, "", None, None);
    let namespace_object = super::namespace_of(objects, request)
        .await
        .map_or(Value::Null, std::borrow::Cow::into_owned);
    let mut variables = Map::new();
    let evaluate_with = |expression: &Expression, variables: &Map<String, Value>| {
        let variables = Value::Object(variables.clone());
        // Objects typed by their resource's schema (a custom resource's: durations,
        // timestamps); the rest as JSON.
        let schema = request.def.cel_schema.as_deref();
        expression.evaluate_typed(&[
            ("object", object.unwrap_or(&null), schema),
            ("oldObject", old.unwrap_or(&null), schema),
            ("request", &review, None),
            ("params", params, None),
            ("namespaceObject", &namespace_object, None),
            ("variables", &variables, None),
        ])
    };
    for (name, expression) in &policy.match_conditions {
        match evaluate_with(expression, &variables) {
            Ok(Evaluated::Bool(true)) => {}
            Ok(Evaluated::Bool(false)) => return Vec::new(),
            Ok(other) => {
                return vec![Failure::Error(format!(
                    "matchCondition '{name}' did not evaluate to a bool: {other:?}"
                ))];
            }
            Err(e) => return vec![Failure::Error(format!("matchCondition '{name}': {e}"))],
        }
    }
    for (name, expression) in &policy.variables {
        if let Ok(value) = evaluate_with(expression, &variables) {
            let value = match value {
                Evaluated::Bool(b) => Value::Bool(b),
                Evaluated::String(s) => Value::String(s),
                Evaluated::Other(v) => v,
            };
            variables.insert(name.clone(), value);
        }
    }
    let mut failures = Vec::new();
    for validation in &policy.validations {
        let source = validation.expression.source();
        match evaluate_with(&validation.expression, &variables) {
            Ok(Evaluated::Bool(true)) => {}
            Ok(Evaluated::Bool(false)) => {
                let from_expression = validation.message_expression.as_ref().and_then(|m| {
                    match evaluate_with(m, &variables) {
                        Ok(Evaluated::String(s)) if !s.trim().is_empty() => Some(s),
                        _ => None,
                    }
                });
                let message = from_expression
                    .or_else(|| validation.message.clone())
                    .unwrap_or_else(|| format!("failed expression: {source}"));
                failures.push(Failure::Violation(message, validation.reason));
            }
            Ok(other) => failures.push(Failure::Error(format!(
                "expression '{source}' resulted in error: expected a bool, got {other:?}"
            ))),
            Err(e) => failures.push(Failure::Error(format!(
                "expression '{source}' resulted in error: {e}"
            ))),
        }
    }
    failures
}

/// The first field of `path` the type of `def` does not declare (`None`: all declared, or
/// the schema cannot tell — maps, preserved unknown fields, metadata's own fields).
fn undeclared(def: &plinth_registry::resources::ResourceDef, path: &[String]) -> Option<String> {
    if path.first().is_some_and(|f| f == "metadata") {
        return None;
    }
    if let Some(openapi) = &def.openapi {
        let mut node: &Value = openapi;
        for field in path {
            if node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
                return None;
            }
            if let Some(child) = node.get("properties").and_then(|p| p.get(field)) {
                node = child;
                continue;
            }
            match node.get("additionalProperties") {
                Some(Value::Bool(true)) => return None,
                Some(child) if child.is_object() => {
                    node = child;
                    continue;
                }
                _ => {}
            }
            let is_object = node.get("properties").is_some()
                || node.get("type").and_then(Value::as_str) == Some("object");
            return is_object.then(|| field.clone());
        }
        return None;
    }
    let mut node: &plinth_registry::schema::Schema = &def.schema;
    for field in path {
        match node {
            plinth_registry::schema::Schema::Object(fields) => {
                match fields.iter().find(|(name, _)| name == field) {
                    Some((_, child)) => node = child,
                    None => return Some(field.clone()),
                }
            }
            plinth_registry::schema::Schema::Map(inner) => node = inner,
            _ => return None,
        }
    }
    None
}

/// kube's `status.typeChecking` of a policy: each validation's references to `object` and
/// `oldObject` checked against the types its `matchConstraints` name exactly (a wildcard
/// names none), a warning for each field a type does not declare.
pub fn type_check(objects: &dyn Objects, policy: &Value) -> Value {
    let mut defs = Vec::new();
    for rule in policy
        .pointer("/spec/matchConstraints/resourceRules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let list = |key: &str| super::matching::strings(rule, key);
        for group in list("apiGroups").iter().filter(|g| *g != "*") {
            for version in list("apiVersions").iter().filter(|v| *v != "*") {
                for resource in list("resources")
                    .iter()
                    .filter(|r| !r.contains('*') && !r.contains('/'))
                {
                    if let Some(def) = objects.resource(group, version, resource)
                        && !defs.iter().any(
                            |d: &std::sync::Arc<plinth_registry::resources::ResourceDef>| {
                                d.key_prefix() == def.key_prefix()
                                    && d.group_version == def.group_version
                            },
                        )
                    {
                        defs.push(def);
                    }
                }
            }
        }
    }
    let mut warnings = Vec::new();
    for (i, validation) in policy
        .pointer("/spec/validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let source = validation
            .get("expression")
            .and_then(Value::as_str)
            .unwrap_or("");
        let Ok(expression) = Expression::compile(source, &POLICY_VARIABLES) else {
            continue;
        };
        let selections = expression.selections(&["object", "oldObject"]);
        let mut found = Vec::new();
        for def in &defs {
            for (_, path) in &selections {
                if let Some(field) = undeclared(def, path) {
                    let gv = def.group_version.api_version();
                    let line = format!(
                        "{gv}, Kind={}: ERROR: <input>:1:1: undefined field '{field}'",
                        def.kind
                    );
                    if !found.contains(&line) {
                        found.push(line);
                    }
                }
            }
        }
        if !found.is_empty() {
            warnings.push(serde_json::json!({
                "fieldRef": format!("spec.validations[{i}].expression"),
                "warning": found.join("\n"),
            }));
        }
    }
    if warnings.is_empty() {
        serde_json::json!({})
    } else {
        serde_json::json!({"expressionWarnings": warnings})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undeclared_fields_are_found_in_built_in_and_custom_schemas() {
        let configmaps = plinth_types::core::configmap::resource();
        let path = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            undeclared(&configmaps, &path(&["data", "anything"])),
            None,
            "a map"
        );
        assert_eq!(
            undeclared(&configmaps, &path(&["metadata", "whatever"])),
            None
        );
        assert_eq!(
            undeclared(&configmaps, &path(&["dataa"])).as_deref(),
            Some("dataa")
        );
        let mut widgets =
            plinth_registry::resources::ResourceDef::new("example.com", "v1", "Widget", "widgets");
        widgets.openapi = Some(std::sync::Arc::new(
            serde_json::json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}),
        ));
        assert_eq!(undeclared(&widgets, &path(&["spec", "size"])), None);
        assert_eq!(undeclared(&widgets, &path(&["spec", "labels", "x"])), None);
        assert_eq!(
            undeclared(&widgets, &path(&["spec", "free", "x", "y"])),
            None
        );
        assert_eq!(
            undeclared(&widgets, &path(&["spec", "sise"])).as_deref(),
            Some("sise")
        );
        assert_eq!(
            undeclared(&widgets, &path(&["status"])).as_deref(),
            Some("status")
        );
    }
}
