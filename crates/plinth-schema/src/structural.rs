//! The rules that make a schema *structural* — which `apiextensions.k8s.io/v1` requires of every
//! CRD — and the consistency rules of the `x-kubernetes-*` extensions, with
//! apiextensions-apiserver's field paths and wording. Every violation is reported, not just the
//! first.

use serde_json::Value;

use crate::{SchemaError, SchemaErrorKind};

/// Where a node sits, for the wording of a missing `type`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Field,
    Item,
}

fn error(path: String, kind: SchemaErrorKind, reason: &str) -> SchemaError {
    SchemaError {
        path,
        reason: reason.to_owned(),
        kind,
    }
}

/// How Go prints a value in `Invalid value: ...` (strings quoted, lists as `[]string{...}`).
fn shown(value: &Value) -> String {
    match value {
        Value::Array(items) => format!(
            "[]string{{{}}}",
            items
                .iter()
                .map(|i| format!("{:?}", i.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => plinth_core::status::render_value(other),
    }
}

fn invalid(path: String, value: &Value, reason: &str) -> SchemaError {
    error(path, SchemaErrorKind::InvalidValue(shown(value)), reason)
}

/// Every structural and extension-consistency violation in `schema` (an `openAPIV3Schema`),
/// with paths starting at `openAPIV3Schema`.
pub fn structural_errors(schema: &Value) -> Vec<SchemaError> {
    let mut errors = Vec::new();
    check(schema, "openAPIV3Schema", Level::Root, &mut errors);
    errors
}

fn check(node: &Value, path: &str, level: Level, errors: &mut Vec<SchemaError>) {
    let Some(map) = node.as_object() else {
        return;
    };
    let at = |child: &str| format!("{path}.{child}");
    let kind = map.get("type").and_then(Value::as_str).unwrap_or("");
    let flag = |key: &str| map.get(key).and_then(Value::as_bool);
    let embedded = flag("x-kubernetes-embedded-resource") == Some(true);
    let int_or_string = flag("x-kubernetes-int-or-string") == Some(true);
    let preserve = flag("x-kubernetes-preserve-unknown-fields");
    let properties = map.get("properties").and_then(Value::as_object);

    if kind == "array" && !map.contains_key("items") {
        errors.push(error(
            at("items"),
            SchemaErrorKind::Required,
            "must be specified",
        ));
    }
    if preserve == Some(false) {
        errors.push(invalid(
            at("x-kubernetes-preserve-unknown-fields"),
            &Value::Bool(false),
            "must be true or undefined",
        ));
    }
    if embedded && kind != "object" {
        if kind.is_empty() {
            errors.push(error(
                at("type"),
                SchemaErrorKind::Required,
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        } else {
            errors.push(invalid(
                at("type"),
                &Value::String(kind.to_owned()),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        }
    } else if kind.is_empty() && !int_or_string && preserve != Some(true) {
        // A node that preserves unknown fields, or is int-or-string, may leave its type open.
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errors.push(error(at("type"), SchemaErrorKind::Required, detail));
    }
    // (An int-or-string node may still declare a type: kube's structural rules do not forbid it.)
    if int_or_string && preserve == Some(true) {
        errors.push(invalid(
            at("x-kubernetes-preserve-unknown-fields"),
            &Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errors.push(invalid(
            at("x-kubernetes-embedded-resource"),
            &Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if embedded && map.contains_key("additionalProperties") {
        errors.push(error(
            at("additionalProperties"),
            SchemaErrorKind::Forbidden,
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if embedded && preserve != Some(true) && properties.is_none_or(|p| p.is_empty()) {
        errors.push(error(
            at("properties"),
            SchemaErrorKind::Required,
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
    if level == Level::Root && !kind.is_empty() && kind != "object" {
        errors.push(invalid(
            at("type"),
            &Value::String(kind.to_owned()),
            "must be object at the root",
        ));
    }
    if map.contains_key("additionalProperties") && properties.is_some_and(|p| !p.is_empty()) {
        errors.push(error(
            at("additionalProperties"),
            SchemaErrorKind::Forbidden,
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    if let Some(props) = properties {
        if level == Level::Root {
            for field in ["kind", "apiVersion"] {
                if let Some(t) = props.get(field).and_then(|p| p.get("type"))
                    && t != "string"
                {
                    errors.push(invalid(
                        format!("{path}.properties[{field}].type"),
                        t,
                        "must be string",
                    ));
                }
            }
        }
        if (level == Level::Root || embedded)
            && let Some(metadata) = props.get("metadata")
        {
            check_metadata(metadata, &format!("{path}.properties[metadata]"), errors);
        }
    }
    check_lists(map, path, errors);
    for (name, child) in properties.into_iter().flatten() {
        check(
            child,
            &format!("{path}.properties[{name}]"),
            Level::Field,
            errors,
        );
    }
    if let Some(items) = map.get("items") {
        check(items, &at("items"), Level::Item, errors);
    }
    if let Some(additional) = map.get("additionalProperties")
        && additional.is_object()
    {
        check(
            additional,
            &at("additionalProperties"),
            Level::Field,
            errors,
        );
    }
}

/// A CRD may say of an object's metadata only that `name` and `generateName` are strings.
fn check_metadata(metadata: &Value, path: &str, errors: &mut Vec<SchemaError>) {
    let Some(map) = metadata.as_object() else {
        return;
    };
    let extra = map.iter().any(|(key, value)| match key.as_str() {
        "type" | "description" | "default" => false,
        "properties" => value.as_object().is_some_and(|p| {
            p.keys()
                .any(|k| !matches!(k.as_str(), "name" | "generateName"))
        }),
        _ => true,
    });
    if extra {
        errors.push(error(
            path.to_owned(),
            SchemaErrorKind::Forbidden,
            "must not specify anything other than name and generateName, but metadata is implicitly specified",
        ));
    }
}

fn check_lists(map: &serde_json::Map<String, Value>, path: &str, errors: &mut Vec<SchemaError>) {
    let at = |child: &str| format!("{path}.{child}");
    let list_type = map.get("x-kubernetes-list-type").and_then(Value::as_str);
    let keys: Vec<&str> = map
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|k| k.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !keys.is_empty() {
        match list_type {
            None => errors.push(error(
                at("x-kubernetes-list-type"),
                SchemaErrorKind::Required,
                "must be map if x-kubernetes-list-map-keys is non-empty",
            )),
            Some("map") => {}
            Some(other) => errors.push(invalid(
                at("x-kubernetes-list-type"),
                &Value::String(other.to_owned()),
                "must be map if x-kubernetes-list-map-keys is non-empty",
            )),
        }
    }
    if let Some(map_type) = map.get("x-kubernetes-map-type").and_then(Value::as_str)
        && !matches!(map_type, "granular" | "atomic")
    {
        errors.push(error(
            at("x-kubernetes-map-type"),
            SchemaErrorKind::NotSupported(vec!["atomic".into(), "granular".into()]),
            map_type,
        ));
    }
    let items = map.get("items");
    match list_type {
        Some("map") => {
            if keys.is_empty() {
                errors.push(error(
                    at("x-kubernetes-list-map-keys"),
                    SchemaErrorKind::Required,
                    "must not be empty if x-kubernetes-list-type is map",
                ));
            }
            let Some(items) = items else {
                errors.push(error(
                    at("items"),
                    SchemaErrorKind::Required,
                    "must have a schema if x-kubernetes-list-type is map",
                ));
                return;
            };
            let item_type = items.get("type").and_then(Value::as_str).unwrap_or("");
            if item_type != "object" {
                errors.push(invalid(
                    format!("{path}.items.type"),
                    &Value::String(item_type.to_owned()),
                    "must be object if parent array's x-kubernetes-list-type is map",
                ));
                return;
            }
            let mut seen = Vec::new();
            for key in &keys {
                match items.pointer(&format!("/properties/{key}")) {
                    Some(prop) => {
                        let t = prop.get("type").and_then(Value::as_str).unwrap_or("");
                        if matches!(t, "array" | "object") {
                            errors.push(invalid(
                                format!("{path}.items.properties[{key}].type"),
                                &Value::String(item_type.to_owned()),
                                "must be a scalar type if parent array's x-kubernetes-list-type is map",
                            ));
                        }
                    }
                    None => errors.push(invalid(
                        at("x-kubernetes-list-map-keys"),
                        map.get("x-kubernetes-list-map-keys")
                            .unwrap_or(&Value::Null),
                        "entries must all be names of item properties",
                    )),
                }
                if seen.contains(key) {
                    errors.push(invalid(
                        at("x-kubernetes-list-map-keys"),
                        map.get("x-kubernetes-list-map-keys")
                            .unwrap_or(&Value::Null),
                        "must not contain duplicate entries",
                    ));
                }
                seen.push(key);
            }
        }
        Some("set") => {
            if let Some(items) = items {
                let item_type = items.get("type").and_then(Value::as_str).unwrap_or("");
                let atomic_object =
                    items.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic");
                let atomic_list =
                    items.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("atomic");
                if (item_type == "object" && !atomic_object)
                    || (item_type == "array" && !atomic_list)
                {
                    errors.push(invalid(
                        format!("{path}.items.x-kubernetes-map-type"),
                        &Value::Null,
                        "must be atomic as item of a list with x-kubernetes-list-type=set",
                    ));
                }
            }
        }
        None | Some("atomic") => {}
        Some(other) => errors.push(error(
            at("x-kubernetes-list-type"),
            SchemaErrorKind::NotSupported(vec!["atomic".into(), "set".into(), "map".into()]),
            other,
        )),
    }
}
