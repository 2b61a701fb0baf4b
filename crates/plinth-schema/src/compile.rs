//! A structural schema's JSON compiled into the node tree, CEL rules included.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{SchemaError, SchemaErrorKind};
use crate::node::{Additional, ListType, Node, Type, count, flag, number};

/// Compiles one schema node; `cardinality` is how many times it may occur in an object, when
/// every list and map around it declares its maximum (`None` when one does not).
pub(crate) fn compile_node(
    v: &Value,
    path: &str,
    cardinality: Option<f64>,
) -> Result<Node, SchemaError> {
    let fail = |reason: String| SchemaError {
        path: path.to_owned(),
        reason,
        kind: SchemaErrorKind::Invalid,
    };
    let Some(map) = v.as_object() else {
        return Err(fail("must be an object".into()));
    };
    let kind = match map.get("type").and_then(Value::as_str) {
        None | Some("") => None,
        Some(t) => {
            Some(Type::parse(t).ok_or_else(|| fail(format!("type: Unsupported value: {t:?}")))?)
        }
    };
    let pattern = match map.get("pattern").and_then(Value::as_str) {
        None => None,
        Some(p) => Some((
            p.to_owned(),
            regex::Regex::new(p)
                .map_err(|e| fail(format!("pattern: Invalid value: {p:?}: {e}")))?,
        )),
    };
    let sub = |key: &str| -> Result<Vec<Node>, SchemaError> {
        map.get(key)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .enumerate()
                    .map(|(i, s)| compile_node(s, &format!("{path}.{key}[{i}]"), cardinality))
                    .collect()
            })
            .unwrap_or_else(|| Ok(Vec::new()))
    };
    let mut properties = BTreeMap::new();
    if let Some(Value::Object(props)) = map.get("properties") {
        for (name, schema) in props {
            properties.insert(
                name.clone(),
                compile_node(schema, &format!("{path}.properties[{name}]"), cardinality)?,
            );
        }
    }
    let additional = match map.get("additionalProperties") {
        None => None,
        Some(Value::Bool(b)) => Some(Box::new(Additional::Allowed(*b))),
        Some(schema) => Some(Box::new(Additional::Schema(Box::new(compile_node(
            schema,
            &format!("{path}.additionalProperties"),
            cardinality
                .zip(count(v, "maxProperties"))
                .map(|(c, n)| c * n as f64),
        )?)))),
    };
    let list_type = match map.get("x-kubernetes-list-type").and_then(Value::as_str) {
        None => None,
        Some("atomic") => Some(ListType::Atomic),
        Some("set") => Some(ListType::Set),
        Some("map") => Some(ListType::Map(
            map.get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| {
                    k.iter()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        )),
        Some(other) => {
            return Err(fail(format!(
                "x-kubernetes-list-type: Unsupported value: {other:?}"
            )));
        }
    };
    let mut node = Node {
        kind,
        nullable: flag(v, "nullable"),
        format: map.get("format").and_then(Value::as_str).map(str::to_owned),
        enumeration: map
            .get("enum")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        pattern,
        minimum: number(v, "minimum"),
        maximum: number(v, "maximum"),
        exclusive_minimum: flag(v, "exclusiveMinimum"),
        exclusive_maximum: flag(v, "exclusiveMaximum"),
        multiple_of: number(v, "multipleOf"),
        min_length: count(v, "minLength"),
        max_length: count(v, "maxLength"),
        min_items: count(v, "minItems"),
        max_items: count(v, "maxItems"),
        unique_items: flag(v, "uniqueItems"),
        min_properties: count(v, "minProperties"),
        max_properties: count(v, "maxProperties"),
        required: map
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        properties,
        additional,
        items: match map.get("items") {
            Some(items) => Some(Box::new(compile_node(
                items,
                &format!("{path}.items"),
                cardinality
                    .zip(count(v, "maxItems"))
                    .map(|(c, n)| c * n as f64),
            )?)),
            None => None,
        },
        all_of: sub("allOf")?,
        any_of: sub("anyOf")?,
        one_of: sub("oneOf")?,
        not: match map.get("not") {
            Some(n) => Some(Box::new(compile_node(
                n,
                &format!("{path}.not"),
                cardinality,
            )?)),
            None => None,
        },
        int_or_string: flag(v, "x-kubernetes-int-or-string"),
        preserve_unknown: flag(v, "x-kubernetes-preserve-unknown-fields"),
        embedded_resource: flag(v, "x-kubernetes-embedded-resource"),
        list_type,
        map_atomic: map.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic"),
        default: map.get("default").cloned(),
        rules: Vec::new(),
    };
    let runs = cardinality.unwrap_or_else(|| unbounded_cardinality(v));
    node.rules = crate::cel::compile_rules(map.get("x-kubernetes-validations"), &node, path, runs)?;
    Ok(node)
}

/// How many times data of this schema can occur in one request when some list or map around it
/// is unbounded: as many as fit, at its smallest JSON size plus a comma (kube's estimate).
pub(crate) fn unbounded_cardinality(v: &Value) -> f64 {
    (3_145_728.0 / (min_json_size(v) + 1.0)).floor()
}

/// The smallest JSON a value of this schema can be (required properties included).
pub(crate) fn min_json_size(v: &Value) -> f64 {
    match v.get("type").and_then(Value::as_str) {
        Some("boolean") => 4.0,
        Some("number" | "integer") => 1.0,
        Some("string") => 2.0 + count(v, "minLength").unwrap_or(0) as f64,
        Some("object") => {
            let required = v.get("required").and_then(Value::as_array);
            2.0 + required
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter_map(|name| {
                    let prop = v.pointer(&format!("/properties/{name}"))?;
                    Some(name.len() as f64 + min_json_size(prop) + 4.0)
                })
                .sum::<f64>()
        }
        _ => 2.0,
    }
}
