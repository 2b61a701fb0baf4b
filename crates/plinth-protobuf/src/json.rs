//! JSON in the order Go writes it: a built-in object's fields in its struct's order (the order
//! upstream's `generated.proto` lists them, which the tables keep), `kind` and `apiVersion`
//! first; maps and anything the tables do not know with their keys sorted, as Go's
//! `encoding/json` writes maps — which is also how kube writes custom resources.

use serde_json::{Map, Value};

use crate::encode::{Field, Shape, one};

/// `metav1.ListMeta`, in its struct's order.
const LIST_META: &[Field] = &[
    one("selfLink", 1, Shape::Str),
    one("resourceVersion", 2, Shape::Str),
    one("continue", 3, Shape::Str),
    one("remainingItemCount", 4, Shape::I64),
];

/// `object` as JSON, its fields in kube's order: a built-in kind's in its Go struct's order,
/// a built-in list's (`kind`, `apiVersion`, `metadata`, `items`) with each item so; anything
/// else (custom resources) with sorted keys.
pub fn to_json(object: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    write_object(object, &mut out);
    out
}

fn write_object(object: &Value, out: &mut Vec<u8>) {
    let Some(map) = object.as_object() else {
        generic(object, out);
        return;
    };
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    if let Some(fields) = crate::message_of(api_version, kind) {
        message(map, fields, &["kind", "apiVersion"], out);
        return;
    }
    let item = kind
        .strip_suffix("List")
        .and_then(|k| crate::message_of(api_version, k));
    match (item, map.get("items")) {
        (Some(fields), Some(Value::Array(items))) => {
            out.push(b'{');
            let mut first = true;
            for key in ["kind", "apiVersion", "metadata"] {
                match map.get(key) {
                    Some(Value::Object(meta)) if key == "metadata" => {
                        entry(key, &mut first, out);
                        message(meta, LIST_META, &[], out);
                    }
                    Some(v) => {
                        entry(key, &mut first, out);
                        generic(v, out);
                    }
                    None => {}
                }
            }
            entry("items", &mut first, out);
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                match item.as_object() {
                    Some(m) => message(m, fields, &["kind", "apiVersion"], out),
                    None => generic(item, out),
                }
            }
            out.push(b']');
            for (k, v) in map {
                if !matches!(k.as_str(), "kind" | "apiVersion" | "metadata" | "items") {
                    entry(k, &mut first, out);
                    generic(v, out);
                }
            }
            out.push(b'}');
        }
        _ => generic(object, out),
    }
}

/// Anything as `serde_json` writes it: maps with their keys sorted.
fn generic(value: &Value, out: &mut Vec<u8>) {
    // Writing JSON into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// A key and its colon, after a comma unless it is the first.
fn entry(key: &str, first: &mut bool, out: &mut Vec<u8>) {
    if !*first {
        out.push(b',');
    }
    *first = false;
    generic(&Value::String(key.to_owned()), out);
    out.push(b':');
}

/// An object of message `fields`: the `lead` keys, then the declared fields in order
/// (inlined structs' where they are embedded), then the rest sorted.
fn message(map: &Map<String, Value>, fields: &[Field], lead: &[&str], out: &mut Vec<u8>) {
    out.push(b'{');
    let mut first = true;
    let mut written = 0;
    for key in lead {
        if let Some(v) = map.get(*key) {
            entry(key, &mut first, out);
            generic(v, out);
            written += 1;
        }
    }
    written += declared(map, fields, lead, &mut first, out);
    if written < map.len() {
        for (k, v) in map {
            if !lead.contains(&k.as_str()) && !declares(fields, k) {
                entry(k, &mut first, out);
                generic(v, out);
            }
        }
    }
    out.push(b'}');
}

/// Writes the declared fields present in `map`; how many.
fn declared(
    map: &Map<String, Value>,
    fields: &[Field],
    lead: &[&str],
    first: &mut bool,
    out: &mut Vec<u8>,
) -> usize {
    let mut written = 0;
    for field in fields {
        if let Shape::Inline(inner) = field.shape {
            written += declared(map, inner, lead, first, out);
            continue;
        }
        if lead.contains(&field.json) {
            continue;
        }
        let Some(v) = map.get(field.json) else {
            continue;
        };
        entry(field.json, first, out);
        match (field.repeated, v) {
            (true, Value::Array(items)) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    shaped(item, &field.shape, out);
                }
                out.push(b']');
            }
            (_, v) => shaped(v, &field.shape, out),
        }
        written += 1;
    }
    written
}

/// Whether the message (with its inlined ones) declares `json`.
fn declares(fields: &[Field], json: &str) -> bool {
    fields.iter().any(|f| match f.shape {
        Shape::Inline(inner) => declares(inner, json),
        _ => f.json == json,
    })
}

fn shaped(value: &Value, shape: &Shape, out: &mut Vec<u8>) {
    match (shape, value) {
        (
            Shape::Message(fields)
            | Shape::OrBool(fields)
            | Shape::OrArray(fields)
            | Shape::OrStringArray(fields),
            Value::Object(map),
        ) => {
            message(map, fields, &[], out);
        }
        (Shape::Map(inner), Value::Object(map)) => {
            out.push(b'{');
            let mut first = true;
            for (k, v) in map {
                entry(k, &mut first, out);
                shaped(v, inner, out);
            }
            out.push(b'}');
        }
        (Shape::OrArray(fields), Value::Array(items)) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                match item.as_object() {
                    Some(map) => message(map, fields, &[], out),
                    None => generic(item, out),
                }
            }
            out.push(b']');
        }
        _ => generic(value, out),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::to_json;

    #[test]
    fn built_in_objects_are_written_in_go_struct_order_custom_ones_sorted() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"uid": "u", "name": "p", "namespace": "n", "labels": {"b": "2", "a": "1"},
                         "ownerReferences": [{"uid": "x", "name": "rs", "kind": "ReplicaSet", "apiVersion": "apps/v1"}]},
            "status": {"phase": "Running"},
            "spec": {"restartPolicy": "Always", "containers": [{"image": "i", "name": "c",
                     "livenessProbe": {"periodSeconds": 3, "exec": {"command": ["true"]}}}],
                     "volumes": [{"emptyDir": {}, "name": "v"}], "zzz": 1}
        });
        assert_eq!(
            String::from_utf8(to_json(&pod)).unwrap(),
            concat!(
                r#"{"kind":"Pod","apiVersion":"v1","#,
                r#""metadata":{"name":"p","namespace":"n","uid":"u","labels":{"a":"1","b":"2"},"#,
                r#""ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"x"}]},"#,
                r#""spec":{"volumes":[{"name":"v","emptyDir":{}}],"containers":[{"name":"c","image":"i","#,
                r#""livenessProbe":{"exec":{"command":["true"]},"periodSeconds":3}}],"restartPolicy":"Always","zzz":1},"#,
                r#""status":{"phase":"Running"}}"#
            )
        );
        let custom = json!({"kind": "Widget", "apiVersion": "example.com/v1", "spec": {"b": 1, "a": 2}, "metadata": {"uid": "u", "name": "w"}});
        assert_eq!(
            String::from_utf8(to_json(&custom)).unwrap(),
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","uid":"u"},"spec":{"a":2,"b":1}}"#
        );
        let list = json!({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"},
                          "items": [{"data": {"k": "v"}, "metadata": {"name": "c"}, "immutable": true}]});
        assert_eq!(
            String::from_utf8(to_json(&list)).unwrap(),
            r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"c"},"immutable":true,"data":{"k":"v"}}]}"#
        );
        let status = json!({"kind": "Status", "apiVersion": "v1", "code": 404, "reason": "NotFound", "status": "Failure", "metadata": {}, "message": "m", "details": {"kind": "pods", "name": "p"}});
        assert_eq!(
            String::from_utf8(to_json(&status)).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"m","reason":"NotFound","details":{"name":"p","kind":"pods"},"code":404}"#
        );
    }
}
