//! A table of schema cases: each keyword with a valid and an invalid instance and the expected
//! causes (field, reason, message).

use serde_json::{Value, json};

use crate::Schema;

fn schema(spec: Value) -> Schema {
    Schema::compile(&json!({"type": "object", "properties": {"spec": spec}})).unwrap()
}

/// A cause as (field, reason, message).
type Found = Vec<(String, String, String)>;

/// A case: the spec schema, a valid spec, an invalid spec, the causes it gives.
type Case = (Value, Value, Value, Found);

fn causes(s: &Schema, spec: Value) -> Found {
    s.validate(&json!({"spec": spec}))
        .into_iter()
        .map(|c| (c.field, c.reason, c.message))
        .collect()
}

fn one(field: &str, reason: &str, message: &str) -> Found {
    vec![(field.to_owned(), reason.to_owned(), message.to_owned())]
}

#[test]
fn keyword_table() {
    let cases: Vec<Case> = vec![
        (
            json!({"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 0}}}),
            json!({"replicas": 3}),
            json!({"replicas": -1}),
            one(
                "spec.replicas",
                "FieldValueInvalid",
                "Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
            ),
        ),
        (
            json!({"type": "object", "properties": {"replicas": {"type": "integer"}}}),
            json!({"replicas": 3}),
            json!({"replicas": "three"}),
            one(
                "spec.replicas",
                "FieldValueInvalid",
                "Invalid value: \"three\": spec.replicas in body must be of type integer: \"string\"",
            ),
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "number", "maximum": 10, "exclusiveMaximum": true}}}),
            json!({"n": 9.5}),
            json!({"n": 10}),
            one(
                "spec.n",
                "FieldValueInvalid",
                "Invalid value: 10: spec.n in body should be less than 10",
            ),
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 5}}}),
            json!({"n": 15}),
            json!({"n": 7}),
            one(
                "spec.n",
                "FieldValueInvalid",
                "Invalid value: 7: spec.n in body should be a multiple of 5",
            ),
        ),
        (
            json!({"type": "object", "properties": {"color": {"type": "string", "enum": ["red", "blue"]}}}),
            json!({"color": "red"}),
            json!({"color": "pink"}),
            one(
                "spec.color",
                "FieldValueNotSupported",
                "Unsupported value: \"pink\": supported values: \"red\", \"blue\"",
            ),
        ),
        (
            json!({"type": "object", "properties": {"name": {"type": "string", "pattern": "^[a-z]+$"}}}),
            json!({"name": "abc"}),
            json!({"name": "A1"}),
            one(
                "spec.name",
                "FieldValueInvalid",
                "Invalid value: \"A1\": spec.name in body should match '^[a-z]+$'",
            ),
        ),
        (
            json!({"type": "object", "properties": {"name": {"type": "string", "minLength": 2}}}),
            json!({"name": "ab"}),
            json!({"name": "a"}),
            one(
                "spec.name",
                "FieldValueInvalid",
                "Invalid value: \"a\": spec.name in body should be at least 2 chars long",
            ),
        ),
        (
            json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}}}),
            json!({"name": "abc"}),
            json!({"name": "abcd"}),
            one(
                "spec.name",
                "FieldValueTooLong",
                "Too long: may not be more than 3 bytes",
            ),
        ),
        (
            json!({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}}}),
            json!({"tags": ["a", "b"]}),
            json!({"tags": ["a", "b", "c"]}),
            one(
                "spec.tags",
                "FieldValueTooMany",
                "Too many: 3: must have at most 2 items",
            ),
        ),
        (
            json!({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}}}),
            json!({"tags": ["a", "b"]}),
            json!({"tags": ["a", "a"]}),
            one(
                "spec.tags[1]",
                "FieldValueDuplicate",
                "Duplicate value: \"a\"",
            ),
        ),
        (
            json!({"type": "object", "properties": {"ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                   "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}}}}),
            json!({"ports": [{"name": "a", "port": 1}, {"name": "b", "port": 1}]}),
            json!({"ports": [{"name": "a", "port": 1}, {"name": "a", "port": 2}]}),
            one(
                "spec.ports[1]",
                "FieldValueDuplicate",
                "Duplicate value: {\"name\":\"a\"}",
            ),
        ),
        (
            json!({"type": "object", "required": ["size"], "properties": {"size": {"type": "integer"}}}),
            json!({"size": 1}),
            json!({}),
            one("spec.size", "FieldValueRequired", "Required value"),
        ),
        (
            json!({"type": "object", "properties": {"port": {"x-kubernetes-int-or-string": true}}}),
            json!({"port": "http"}),
            json!({"port": true}),
            one(
                "spec.port",
                "FieldValueInvalid",
                "Invalid value: true: spec.port in body must be of type integer-or-string: boolean",
            ),
        ),
        (
            json!({"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}}}),
            json!({"at": "2024-01-02T03:04:05Z"}),
            json!({"at": "yesterday"}),
            one(
                "spec.at",
                "FieldValueInvalid",
                "Invalid value: \"yesterday\": spec.at in body must be of type date-time: \"yesterday\"",
            ),
        ),
        (
            json!({"type": "object", "properties": {"ip": {"type": "string", "format": "ipv4"}}}),
            json!({"ip": "10.0.0.1"}),
            json!({"ip": "10.0.0.256"}),
            one(
                "spec.ip",
                "FieldValueInvalid",
                "Invalid value: \"10.0.0.256\": spec.ip in body must be of type ipv4: \"10.0.0.256\"",
            ),
        ),
        (
            json!({"type": "object", "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}}}}),
            json!({"labels": {"a": "b"}}),
            json!({"labels": {"a": 1}}),
            one(
                "spec.labels.a",
                "FieldValueInvalid",
                "Invalid value: 1: spec.labels.a in body must be of type string: \"integer\"",
            ),
        ),
        (
            json!({"type": "object", "properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}}),
            json!({"v": 1}),
            json!({"v": true}),
            one(
                "spec.v",
                "FieldValueInvalid",
                "Invalid value: true: spec.v in body must match at least one schema in anyOf",
            ),
        ),
        (
            json!({"type": "object", "properties": {"count": {"type": "integer", "format": "int32"}}}),
            json!({"count": 5}),
            json!({"count": 3_000_000_000_u64}),
            one(
                "spec.count",
                "FieldValueInvalid",
                "Invalid value: 3000000000: spec.count in body must be of type int32: 3000000000",
            ),
        ),
    ];
    for (i, (spec, good, bad, expected)) in cases.into_iter().enumerate() {
        let s = schema(spec);
        let found = causes(&s, good.clone());
        assert!(
            found.is_empty(),
            "case {i}: {good} must be valid: {found:?}"
        );
        assert_eq!(causes(&s, bad.clone()), expected, "case {i}: {bad}");
    }
}

#[test]
fn defaults_are_applied_in_objects_lists_and_maps() {
    let s = Schema::compile(&json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "replicas": {"type": "integer", "default": 1},
        "nested": {"type": "object", "default": {}, "properties": {"mode": {"type": "string", "default": "fast"}}},
        "items": {"type": "array", "items": {"type": "object", "properties": {"weight": {"type": "integer", "default": 10}}}},
        "byName": {"type": "object", "additionalProperties": {"type": "object", "properties": {"on": {"type": "boolean", "default": true}}}},
    }}}}))
    .unwrap();
    let mut object = json!({"spec": {"items": [{}, {"weight": 3}], "byName": {"a": {}}}});
    s.apply_defaults(&mut object);
    assert_eq!(
        object["spec"],
        json!({"replicas": 1, "nested": {"mode": "fast"}, "items": [{"weight": 10}, {"weight": 3}], "byName": {"a": {"on": true}}})
    );
}

#[test]
fn unknown_fields_are_pruned_unless_preserved() {
    let s = Schema::compile(&json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"a": {"type": "string"},
                 "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                 "embedded": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object"}}}}},
    }}))
    .unwrap();
    let mut object = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n"}, "extra": 1,
        "spec": {"a": "x", "b": 2, "free": {"anything": [1]}, "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "junk": 1}}});
    let mut pruned = s.prune(&mut object);
    pruned.sort();
    assert_eq!(pruned, ["extra", "spec.b", "spec.embedded.junk"]);
    assert_eq!(object["spec"]["free"], json!({"anything": [1]}));
    assert_eq!(object["metadata"], json!({"name": "n"}));
    assert_eq!(object["spec"]["embedded"]["kind"], "Pod");
}

#[test]
fn bad_schemas_do_not_compile() {
    assert!(Schema::compile(&json!({"type": "objekt"})).is_err());
    assert!(
        Schema::compile(
            &json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}})
        )
        .is_err()
    );
    assert!(Schema::compile(&json!("nope")).is_err());
}

#[test]
fn every_shared_crd_schema_compiles() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/crds");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        panic!("{} is missing", dir.display())
    };
    let mut compiled = 0;
    for entry in entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "yaml"))
    {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        for document in text.split("\n---") {
            let Ok(crd) = serde_norway::from_str::<Value>(document) else {
                continue;
            };
            for version in crd
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(schema) = version.pointer("/schema/openAPIV3Schema") {
                    Schema::compile(schema)
                        .unwrap_or_else(|e| panic!("{}: {e}", entry.path().display()));
                    compiled += 1;
                }
            }
        }
    }
    assert!(compiled >= 11, "compiled {compiled} schemas");
}
