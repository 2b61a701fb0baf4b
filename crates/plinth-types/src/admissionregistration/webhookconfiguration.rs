//! MutatingWebhookConfiguration and ValidatingWebhookConfiguration: one strategy for both
//! (the mutating kind adds `reinvocationPolicy`).

use plinth_core::Cause;
use serde_json::{Value, json};

use plinth_registry::resources::{ResourceDef, column, count};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::strategy::Strategy;

/// The `mutatingwebhookconfigurations` resource.
pub fn mutating() -> ResourceDef {
    resource("MutatingWebhookConfiguration", true)
}

/// The `validatingwebhookconfigurations` resource.
pub fn validating() -> ResourceDef {
    resource("ValidatingWebhookConfiguration", false)
}

fn resource(kind: &str, mutating: bool) -> ResourceDef {
    let plural = format!("{}s", kind.to_ascii_lowercase());
    ResourceDef::new(super::GROUP, "v1", kind, &plural)
        .cluster_scoped()
        .columns(vec![column(
            "Webhooks",
            "integer",
            "Webhooks in this configuration",
            0,
            |object: &Value, _| count(object, &["webhooks"]),
        )])
        .schema(schema(mutating))
        .strategy(WebhookConfigurations { mutating })
}

fn rule_schema() -> Schema {
    obj(vec![
        ("operations", array(Schema::String)),
        ("apiGroups", array(Schema::String)),
        ("apiVersions", array(Schema::String)),
        ("resources", array(Schema::String)),
        ("scope", Schema::String),
    ])
}

fn schema(mutating: bool) -> Schema {
    let mut fields = vec![
        ("name", Schema::String),
        (
            "clientConfig",
            obj(vec![
                ("url", Schema::String),
                (
                    "service",
                    obj(vec![
                        ("namespace", Schema::String),
                        ("name", Schema::String),
                        ("path", Schema::String),
                        ("port", Schema::Int),
                    ]),
                ),
                ("caBundle", Schema::Bytes),
            ]),
        ),
        ("rules", array(rule_schema())),
        ("failurePolicy", Schema::String),
        ("matchPolicy", Schema::String),
        ("namespaceSelector", Schema::Any),
        ("objectSelector", Schema::Any),
        ("sideEffects", Schema::String),
        ("timeoutSeconds", Schema::Int),
        ("admissionReviewVersions", array(Schema::String)),
        (
            "matchConditions",
            array(obj(vec![
                ("name", Schema::String),
                ("expression", Schema::String),
            ])),
        ),
    ];
    if mutating {
        fields.push(("reinvocationPolicy", Schema::String));
    }
    top(vec![("webhooks", array(obj(fields)))])
}

#[derive(Debug)]
struct WebhookConfigurations {
    mutating: bool,
}

/// kube's v1 defaults for one webhook.
fn default_webhook(hook: &mut Value, mutating: bool) {
    let Some(map) = hook.as_object_mut() else {
        return;
    };
    let mut default = |key: &str, value: Value| {
        if map.get(key).is_none_or(Value::is_null) {
            map.insert(key.to_owned(), value);
        }
    };
    default("failurePolicy", json!("Fail"));
    default("matchPolicy", json!("Equivalent"));
    default("namespaceSelector", json!({}));
    default("objectSelector", json!({}));
    default("timeoutSeconds", json!(10));
    if mutating {
        default("reinvocationPolicy", json!("Never"));
    }
    if let Some(service) = map
        .get_mut("clientConfig")
        .and_then(|c| c.get_mut("service"))
        .and_then(Value::as_object_mut)
        && service.get("port").is_none_or(Value::is_null)
    {
        service.insert("port".into(), json!(443));
    }
    for rule in map
        .get_mut("rules")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(rule) = rule.as_object_mut()
            && rule.get("scope").is_none_or(Value::is_null)
        {
            rule.insert("scope".into(), json!("*"));
        }
    }
}

fn one_of(causes: &mut Vec<Cause>, hook: &Value, key: &str, at: &str, supported: &[&str]) {
    if let Some(value) = hook.get(key)
        && !value.as_str().is_some_and(|v| supported.contains(&v))
    {
        causes.push(Cause::not_supported(
            format!("{at}.{key}"),
            value,
            supported,
        ));
    }
}

fn strings<'a>(value: &'a Value, key: &str) -> Vec<&'a str> {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn validate_client(causes: &mut Vec<Cause>, hook: &Value, at: &str) {
    let client = hook.get("clientConfig").unwrap_or(&Value::Null);
    let url = client.get("url").and_then(Value::as_str);
    let service = client.get("service").filter(|s| s.is_object());
    let at = format!("{at}.clientConfig");
    match (url, service) {
        (Some(_), Some(_)) | (None, None) => causes.push(Cause::required(
            at,
            "exactly one of url or service is required",
        )),
        (Some(url), None) => {
            let field = format!("{at}.url");
            match url.split_once("://") {
                Some(("https", rest)) if !rest.is_empty() => {
                    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
                    if host.is_empty() {
                        causes.push(Cause::invalid(
                            field.clone(),
                            &json!(url),
                            "host must be specified",
                        ));
                    }
                    if host.contains('@') {
                        causes.push(Cause::invalid(
                            field.clone(),
                            &json!(url),
                            "user information is not permitted in the URL",
                        ));
                    }
                    if rest.contains('#') {
                        causes.push(Cause::invalid(
                            field.clone(),
                            &json!(url),
                            "fragments are not permitted in the URL",
                        ));
                    }
                    if rest.contains('?') {
                        causes.push(Cause::invalid(
                            field,
                            &json!(url),
                            "query parameters are not permitted in the URL",
                        ));
                    }
                }
                _ => causes.push(Cause::invalid(
                    field,
                    &json!(url),
                    "'https' is the only allowed URL scheme",
                )),
            }
        }
        (None, Some(service)) => {
            for key in ["name", "namespace"] {
                if service
                    .get(key)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    causes.push(Cause::required(
                        format!("{at}.service.{key}"),
                        &format!("service {key} is required"),
                    ));
                }
            }
            // kube's `ValidateWebhookService`: an empty path is the root.
            if let Some(path) = service.get("path").and_then(Value::as_str)
                && !path.is_empty()
                && !path.starts_with('/')
            {
                causes.push(Cause::invalid(
                    format!("{at}.service.path"),
                    &json!(path),
                    "must start with a '/'",
                ));
            }
            if let Some(port) = service.get("port").and_then(Value::as_i64)
                && !(1..=65535).contains(&port)
            {
                causes.push(Cause::invalid(
                    format!("{at}.service.port"),
                    &json!(port),
                    "port is not valid: must be between 1 and 65535, inclusive",
                ));
            }
        }
    }
}

fn validate_rules(causes: &mut Vec<Cause>, hook: &Value, at: &str) {
    let rules = hook
        .get("rules")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("{at}.rules[{i}]");
        let operations = strings(rule, "operations");
        if operations.is_empty() {
            causes.push(Cause::required(format!("{at}.operations"), ""));
        }
        for (j, op) in operations.iter().enumerate() {
            if !["*", "CREATE", "UPDATE", "DELETE", "CONNECT"].contains(op) {
                causes.push(Cause::not_supported(
                    format!("{at}.operations[{j}]"),
                    &json!(op),
                    &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"],
                ));
            }
        }
        for key in ["apiGroups", "apiVersions", "resources"] {
            if strings(rule, key).is_empty() {
                causes.push(Cause::required(format!("{at}.{key}"), ""));
            }
        }
        for (j, resource) in strings(rule, "resources").iter().enumerate() {
            if resource.is_empty() {
                causes.push(Cause::required(format!("{at}.resources[{j}]"), ""));
            } else if resource.matches('/').count() > 1 {
                causes.push(Cause::invalid(
                    format!("{at}.resources[{j}]"),
                    &json!(resource),
                    "may only contain one '/'",
                ));
            }
        }
        one_of(causes, rule, "scope", &at, &["*", "Cluster", "Namespaced"]);
    }
}

/// `matchConditions`: at most 64, named uniquely, each expression compiling.
fn validate_match_conditions(causes: &mut Vec<Cause>, hook: &Value, at: &str) {
    let conditions = hook
        .get("matchConditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if conditions.len() > 64 {
        causes.push(Cause::new(
            "FieldValueTooMany",
            format!("{at}.matchConditions"),
            format!("Too many: {}: must have at most 64 items", conditions.len()),
        ));
    }
    let mut names = std::collections::HashSet::new();
    for (j, condition) in conditions.iter().enumerate() {
        let at = format!("{at}.matchConditions[{j}]");
        let name = condition.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            causes.push(Cause::required(format!("{at}.name"), ""));
        } else if !names.insert(name) {
            causes.push(Cause::new(
                "FieldValueDuplicate",
                format!("{at}.name"),
                format!("Duplicate value: {name:?}"),
            ));
        }
        let expression = condition
            .get("expression")
            .and_then(Value::as_str)
            .unwrap_or("");
        if expression.is_empty() {
            causes.push(Cause::required(format!("{at}.expression"), ""));
        } else if let Err(e) =
            plinth_schema::Expression::compile(expression, &super::MATCH_VARIABLES)
        {
            causes.push(Cause::invalid(
                format!("{at}.expression"),
                &json!(expression),
                &e,
            ));
        }
    }
}

impl Strategy for WebhookConfigurations {
    fn prepare_create(&self, object: &mut Value) {
        for hook in object
            .get_mut("webhooks")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            default_webhook(hook, self.mutating);
        }
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        self.prepare_create(object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let hooks = object
            .get("webhooks")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut names = std::collections::HashSet::new();
        for (i, hook) in hooks.iter().enumerate() {
            let at = format!("webhooks[{i}]");
            let name = hook.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty() {
                causes.push(Cause::required(format!("{at}.name"), ""));
            } else {
                for message in plinth_core::validation::dns1123_subdomain(name) {
                    causes.push(Cause::invalid(format!("{at}.name"), &json!(name), &message));
                }
                if name.split('.').count() < 3 {
                    causes.push(Cause::invalid(
                        format!("{at}.name"),
                        &json!(name),
                        "should be a domain with at least three segments separated by dots",
                    ));
                }
                if !names.insert(name) {
                    causes.push(Cause::new(
                        "FieldValueDuplicate",
                        format!("{at}.name"),
                        format!("Duplicate value: {name:?}"),
                    ));
                }
            }
            validate_client(&mut causes, hook, &at);
            validate_rules(&mut causes, hook, &at);
            one_of(&mut causes, hook, "failurePolicy", &at, &["Fail", "Ignore"]);
            one_of(
                &mut causes,
                hook,
                "matchPolicy",
                &at,
                &["Equivalent", "Exact"],
            );
            if self.mutating {
                one_of(
                    &mut causes,
                    hook,
                    "reinvocationPolicy",
                    &at,
                    &["IfNeeded", "Never"],
                );
            }
            match hook.get("sideEffects") {
                None | Some(Value::Null) => causes.push(Cause::required(
                    format!("{at}.sideEffects"),
                    "must specify one of None, NoneOnDryRun",
                )),
                Some(_) => one_of(
                    &mut causes,
                    hook,
                    "sideEffects",
                    &at,
                    &["None", "NoneOnDryRun"],
                ),
            }
            if let Some(timeout) = hook.get("timeoutSeconds")
                && !(1..=30).contains(&timeout.as_i64().unwrap_or(0))
            {
                causes.push(Cause::invalid(
                    format!("{at}.timeoutSeconds"),
                    timeout,
                    "the timeout value must be between 1 and 30 seconds",
                ));
            }
            let versions = strings(hook, "admissionReviewVersions");
            if versions.is_empty() {
                causes.push(Cause::required(
                    format!("{at}.admissionReviewVersions"),
                    "must specify one of v1, v1beta1",
                ));
            } else if !versions.iter().any(|v| *v == "v1" || *v == "v1beta1") {
                causes.push(Cause::invalid(
                    format!("{at}.admissionReviewVersions"),
                    &json!(versions),
                    "must include at least one of v1, v1beta1",
                ));
            }
            validate_match_conditions(&mut causes, hook, &at);
            for (key, field) in [
                ("namespaceSelector", "namespaceSelector"),
                ("objectSelector", "objectSelector"),
            ] {
                if let Some(selector) = hook.get(key).filter(|s| !s.is_null())
                    && let Err(e) = plinth_core::selector::LabelSelector::from_object(selector)
                {
                    causes.push(Cause::invalid(format!("{at}.{field}"), selector, &e.0));
                }
            }
        }
        causes
    }
}

#[cfg(test)]
mod tests {
    use super::validate_client;
    use serde_json::json;

    #[test]
    fn a_service_path_is_empty_or_absolute() {
        let check = |path: &str| {
            let mut causes = Vec::new();
            let hook = json!({"clientConfig": {"service": {"namespace": "ns", "name": "svc", "path": path}}});
            validate_client(&mut causes, &hook, "webhooks[0]");
            causes.iter().map(|c| c.field.clone()).collect::<Vec<_>>()
        };
        assert!(check("").is_empty(), "the root, as kube takes it");
        assert!(check("/validate").is_empty());
        assert_eq!(check("validate"), ["webhooks[0].clientConfig.service.path"]);
    }
}
