//! A value validated against the node tree with apiextensions' messages.

use plinth_core::Cause;
use plinth_core::status::render_value;
use serde_json::{Map, Value};

use crate::node::{Additional, ListType, Node, Type, join};

/// What validation found: schema errors, and the CEL rules' (kept apart, as kube evaluates
/// the rules only when the schema errors do not block them).
#[derive(Default)]
pub(crate) struct Found {
    pub(crate) schema: Vec<Cause>,
    pub(crate) rules: Vec<Cause>,
}

impl Found {
    pub(crate) fn push(&mut self, cause: Cause) {
        self.schema.push(cause);
    }
}

/// Schema errors after which kube does not evaluate CEL rules (apiextensions'
/// `hasBlockingErr`): the object does not have the shape the rules were written for.
pub(crate) fn blocking(cause: &Cause) -> bool {
    matches!(
        cause.reason.as_str(),
        "FieldValueNotSupported"
            | "FieldValueRequired"
            | "FieldValueTooLong"
            | "FieldValueTooMany"
            | "FieldValueTypeInvalid"
    )
}

pub(crate) fn invalid(path: &str, value: &Value, detail: String) -> Cause {
    Cause::invalid(path, value, &format!("{path} in body {detail}"))
}

/// A value of the wrong type: kube's `field.TypeInvalid` (worded as an invalid value).
pub(crate) fn type_invalid(path: &str, value: &Value, detail: String) -> Cause {
    let mut cause = invalid(path, value, detail);
    cause.reason = "FieldValueTypeInvalid".into();
    cause
}

pub(crate) fn validate_node(
    node: &Node,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    causes: &mut Found,
) {
    if value.is_null() {
        if !node.nullable && node.kind.is_some() {
            causes.push(type_invalid(
                path,
                value,
                format!(
                    "must be of type {}: \"null\"",
                    node.kind.map_or("", Type::name)
                ),
            ));
        }
        return;
    }
    if node.int_or_string {
        if !(value.is_string() || Type::Integer.matches(value)) {
            let mut cause = Cause::invalid(
                path,
                value,
                &format!(
                    "{path} in body must be of type integer-or-string: {}",
                    json_type(value)
                ),
            );
            cause.reason = "FieldValueTypeInvalid".into();
            causes.push(cause);
            return;
        }
    } else if let Some(kind) = node.kind
        && !kind.matches(value)
    {
        causes.push(type_invalid(
            path,
            value,
            format!("must be of type {}: \"{}\"", kind.name(), json_type(value)),
        ));
        return;
    }
    if !node.enumeration.is_empty() && !node.enumeration.contains(value) {
        let supported: Vec<String> = node.enumeration.iter().map(render_value).collect();
        causes.push(Cause::new(
            "FieldValueNotSupported",
            path,
            format!(
                "Unsupported value: {}: supported values: {}",
                render_value(value),
                supported.join(", ")
            ),
        ));
    }
    match value {
        Value::String(s) => validate_string(node, s, value, path, &mut causes.schema),
        Value::Number(_) => validate_number(node, value, path, &mut causes.schema),
        Value::Array(items) => validate_array(node, items, old, value, path, causes),
        Value::Object(map) => validate_object(node, map, old, value, path, causes),
        _ => {}
    }
    for sub in &node.all_of {
        validate_node(sub, value, None, path, causes);
    }
    if !node.any_of.is_empty() && !node.any_of.iter().any(|sub| passes(sub, value, path)) {
        causes.push(Cause::invalid(
            path,
            value,
            &format!("{path} in body must match at least one schema in anyOf"),
        ));
    }
    if !node.one_of.is_empty() {
        let matching = node
            .one_of
            .iter()
            .filter(|sub| passes(sub, value, path))
            .count();
        if matching != 1 {
            causes.push(Cause::invalid(
                path,
                value,
                &format!("{path} in body must validate one and only one schema (oneOf)"),
            ));
        }
    }
    if let Some(not) = &node.not
        && passes(not, value, path)
    {
        causes.push(Cause::invalid(
            path,
            value,
            &format!("{path} in body must not validate the schema (not)"),
        ));
    }
    for rule in &node.rules {
        rule.check(node, value, old, path, &mut causes.rules);
    }
}

pub(crate) fn passes(node: &Node, value: &Value, path: &str) -> bool {
    let mut causes = Found::default();
    validate_node(node, value, None, path, &mut causes);
    causes.schema.is_empty() && causes.rules.is_empty()
}

pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

pub(crate) fn validate_string(
    node: &Node,
    s: &str,
    value: &Value,
    path: &str,
    causes: &mut Vec<Cause>,
) {
    let length = s.chars().count();
    if let Some(min) = node.min_length
        && length < min
    {
        causes.push(invalid(
            path,
            value,
            format!("should be at least {min} chars long"),
        ));
    }
    if let Some(max) = node.max_length
        && length > max
    {
        causes.push(Cause::new(
            "FieldValueTooLong",
            path,
            format!("Too long: may not be more than {max} bytes"),
        ));
    }
    if let Some((source, pattern)) = &node.pattern
        && !pattern.is_match(s)
    {
        causes.push(invalid(path, value, format!("should match '{source}'")));
    }
    if let Some(format) = &node.format
        && !crate::format::valid(format, s)
    {
        causes.push(type_invalid(
            path,
            value,
            format!("must be of type {format}: {}", render_value(value)),
        ));
    }
}

pub(crate) fn validate_number(node: &Node, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(n) = value.as_f64() else { return };
    let show = |f: f64| {
        if f.fract() == 0.0 {
            format!("{}", f as i64)
        } else {
            f.to_string()
        }
    };
    if let Some(min) = node.minimum {
        if node.exclusive_minimum && n <= min {
            causes.push(invalid(
                path,
                value,
                format!("should be greater than {}", show(min)),
            ));
        } else if n < min {
            causes.push(invalid(
                path,
                value,
                format!("should be greater than or equal to {}", show(min)),
            ));
        }
    }
    if let Some(max) = node.maximum {
        if node.exclusive_maximum && n >= max {
            causes.push(invalid(
                path,
                value,
                format!("should be less than {}", show(max)),
            ));
        } else if n > max {
            causes.push(invalid(
                path,
                value,
                format!("should be less than or equal to {}", show(max)),
            ));
        }
    }
    if let Some(m) = node.multiple_of
        && m != 0.0
        && (n / m).fract().abs() > 1e-9
    {
        causes.push(invalid(
            path,
            value,
            format!("should be a multiple of {}", show(m)),
        ));
    }
    if let Some(format) = node.format.as_deref() {
        let fits = match format {
            "int32" => n.fract() == 0.0 && n >= f64::from(i32::MIN) && n <= f64::from(i32::MAX),
            "int64" => n.fract() == 0.0,
            _ => true,
        };
        if !fits {
            causes.push(type_invalid(
                path,
                value,
                format!("must be of type {format}: {}", render_value(value)),
            ));
        }
    }
}

pub(crate) fn validate_array(
    node: &Node,
    items: &[Value],
    old: Option<&Value>,
    value: &Value,
    path: &str,
    causes: &mut Found,
) {
    if let Some(min) = node.min_items
        && items.len() < min
    {
        causes.push(invalid(
            path,
            &Value::from(items.len()),
            format!("should have at least {min} items"),
        ));
    }
    if let Some(max) = node.max_items
        && items.len() > max
    {
        causes.push(Cause::new(
            "FieldValueTooMany",
            path,
            format!("Too many: {}: must have at most {max} items", items.len()),
        ));
    }
    if let Some(sub) = &node.items {
        // Items correlate with the old list's by key, for map lists only (as in kube).
        let old_items = old.and_then(Value::as_array);
        for (i, item) in items.iter().enumerate() {
            let before = match (&node.list_type, old_items) {
                (Some(ListType::Map(keys)), Some(old_items)) => old_items
                    .iter()
                    .find(|o| keys.iter().all(|k| o.get(k) == item.get(k))),
                _ => None,
            };
            validate_node(sub, item, before, &format!("{path}[{i}]"), causes);
        }
    }
    let duplicate = |i: usize, shown: &Value| {
        Cause::new(
            "FieldValueDuplicate",
            format!("{path}[{i}]"),
            format!("Duplicate value: {}", render_value(shown)),
        )
    };
    match &node.list_type {
        Some(ListType::Set) => {
            for (i, item) in items.iter().enumerate() {
                if items[..i].contains(item) {
                    causes.push(duplicate(i, item));
                }
            }
        }
        Some(ListType::Map(keys)) => {
            let key_of = |item: &Value| -> Value {
                Value::Object(
                    keys.iter()
                        .filter_map(|k| Some((k.clone(), item.get(k)?.clone())))
                        .collect(),
                )
            };
            for (i, item) in items.iter().enumerate() {
                let key = key_of(item);
                if items[..i].iter().any(|earlier| key_of(earlier) == key) {
                    causes.push(duplicate(i, &key));
                }
            }
        }
        _ => {
            if node.unique_items {
                for (i, item) in items.iter().enumerate() {
                    if items[..i].contains(item) {
                        causes.push(invalid(
                            path,
                            value,
                            "shouldn't contain duplicates".to_owned(),
                        ));
                        break;
                    }
                }
            }
        }
    }
}

pub(crate) fn validate_object(
    node: &Node,
    map: &Map<String, Value>,
    old: Option<&Value>,
    value: &Value,
    path: &str,
    causes: &mut Found,
) {
    if let Some(min) = node.min_properties
        && map.len() < min
    {
        causes.push(invalid(
            path,
            value,
            format!("should have at least {min} properties"),
        ));
    }
    if let Some(max) = node.max_properties
        && map.len() > max
    {
        causes.push(Cause::new(
            "FieldValueTooMany",
            path,
            format!("Too many: {}: must have at most {max} items", map.len()),
        ));
    }
    for required in &node.required {
        if !map.contains_key(required) {
            causes.push(Cause::required(join(path, required), ""));
        }
    }
    for (key, child) in map {
        let child_path = join(path, key);
        let before = old.and_then(|o| o.get(key));
        if let Some(sub) = node.properties.get(key) {
            validate_node(sub, child, before, &child_path, causes);
        } else {
            match node.additional.as_deref() {
                Some(Additional::Schema(sub)) => {
                    validate_node(sub, child, before, &child_path, causes)
                }
                Some(Additional::Allowed(false))
                    if !node.properties.is_empty() || !node.preserve_unknown =>
                {
                    causes.push(Cause::forbidden(
                        &child_path,
                        "additional properties are not allowed",
                    ));
                }
                _ => {}
            }
        }
    }
    if node.embedded_resource {
        validate_embedded_resource(map, path, &mut causes.schema);
    }
}

/// An embedded object (`x-kubernetes-embedded-resource`) is held to what every object is:
/// apiVersion and kind, and valid metadata (as apiextensions-apiserver's
/// `validateEmbeddedResource`).
pub(crate) fn validate_embedded_resource(
    map: &Map<String, Value>,
    path: &str,
    causes: &mut Vec<Cause>,
) {
    for field in ["apiVersion", "kind"] {
        let at = join(path, field);
        match map.get(field) {
            None => causes.push(Cause::required(at, "must not be empty")),
            Some(Value::String(s)) if s.is_empty() => {
                causes.push(Cause::invalid(
                    at,
                    &Value::String(String::new()),
                    "must not be empty",
                ));
            }
            Some(Value::String(s)) => {
                if field == "apiVersion" && s.matches('/').count() > 1 {
                    causes.push(Cause::invalid(
                        at,
                        &Value::String(s.clone()),
                        &format!("unexpected GroupVersion string: {s}"),
                    ));
                } else if field == "kind" {
                    let errors = plinth_core::validation::dns1035_label(&s.to_lowercase());
                    if !errors.is_empty() {
                        causes.push(Cause::invalid(
                            at,
                            &Value::String(s.clone()),
                            &format!(
                                "may have mixed case, but should otherwise match: {}",
                                errors.join(",")
                            ),
                        ));
                    }
                }
            }
            Some(other) => causes.push(Cause::invalid(at, other, "must be a string")),
        }
    }
    let Some(meta) = map.get("metadata") else {
        return;
    };
    let meta_path = join(path, "metadata");
    let Some(meta) = meta.as_object() else {
        causes.push(Cause::invalid(meta_path, meta, "must be an object"));
        return;
    };
    if let Some(name) = meta
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        for message in plinth_core::validation::path_segment_name(name) {
            causes.push(Cause::invalid(
                join(&meta_path, "name"),
                &Value::String(name.to_owned()),
                &message,
            ));
        }
    }
    if let Some(labels) = meta.get("labels").and_then(Value::as_object) {
        causes.extend(plinth_core::validation::labels(
            labels,
            &join(&meta_path, "labels"),
        ));
    }
    if let Some(annotations) = meta.get("annotations").and_then(Value::as_object) {
        causes.extend(plinth_core::validation::annotations(
            annotations,
            &join(&meta_path, "annotations"),
        ));
    }
}
