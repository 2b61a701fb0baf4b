//! Property tests over what a CRD write and a custom-resource write reach in `plinth-schema`:
//! schema compilation and the structural rules over arbitrary schemas, CEL rules of arbitrary
//! text, and pruning, defaulting and validation of arbitrary objects against real CRDs.
//! Nothing panics; a schema either compiles or is refused with an error.

#![allow(clippy::unwrap_used)]

use plinth_schema::{Schema, structural_errors};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Schema keywords, with the values they take (and wrong ones).
fn schema_node() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(json!({"type": "string"})),
        Just(json!({"type": "integer", "minimum": 0, "maximum": 5})),
        Just(json!({"type": "number", "multipleOf": 0.5})),
        Just(json!({"type": "boolean"})),
        Just(json!({"type": "string", "enum": ["a", "b"], "maxLength": 3})),
        Just(json!({"type": "string", "pattern": "^[a-z]+$", "format": "date-time"})),
        Just(json!({"x-kubernetes-int-or-string": true})),
        Just(json!({"x-kubernetes-preserve-unknown-fields": true})),
        Just(json!({"type": "bogus"})),
        Just(json!({"type": "string", "pattern": "(unclosed"})),
        Just(json!({})),
        Just(json!({"type": "object", "x-kubernetes-validations": [{"rule": "size(self) < 3"}]})),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::btree_map("[a-z]{1,4}", inner.clone(), 0..4).prop_map(|props| {
                json!({"type": "object", "properties": props.into_iter().collect::<Map<_, _>>(),
                       "required": ["a"]})
            }),
            inner
                .clone()
                .prop_map(|items| json!({"type": "array", "items": items,
                "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["a"]})),
            inner
                .clone()
                .prop_map(|v| json!({"type": "object", "additionalProperties": v})),
            inner
                .clone()
                .prop_map(|v| json!({"allOf": [v], "anyOf": [{"type": "string"}]})),
            inner.prop_map(
                |v| json!({"type": "object", "x-kubernetes-embedded-resource": true,
                "properties": {"spec": v}, "default": {}})
            ),
        ]
    })
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-zA-Z0-9:._/-]{0,10}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,4}|spec|metadata|apiVersion|kind", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// CEL-ish text: tokens of the language in any order, and noise.
fn rule() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("self"),
        Just("oldSelf"),
        Just("."),
        Just("a"),
        Just("size("),
        Just(")"),
        Just("("),
        Just("["),
        Just("]"),
        Just("=="),
        Just("&&"),
        Just("||"),
        Just("!"),
        Just("1"),
        Just("'x'"),
        Just("has("),
        Just(".all(x,"),
        Just(".exists(x,"),
        Just("x"),
        Just("?"),
        Just(":"),
        Just("+"),
        Just("<"),
        Just("in"),
        Just("duration('1s')"),
        Just("isIP("),
        Just("{"),
        Just("}"),
        Just(","),
        Just("format.dns1123Label().validate("),
        Just("__a__"),
    ];
    prop_oneof![
        prop::collection::vec(token, 0..16).prop_map(|t| t.concat()),
        ".{0,40}",
    ]
}

fn corpus_schema(file: &str) -> Schema {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/crds")
        .join(file);
    let crd: Value = serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let version = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["storage"] == true)
        .unwrap()
        .clone();
    Schema::compile(&version["schema"]["openAPIV3Schema"]).unwrap()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn schemas_compile_or_are_refused(spec in schema_node()) {
        let schema = json!({"type": "object", "properties": {"spec": spec}});
        structural_errors(&schema);
        if let Ok(compiled) = Schema::compile(&schema) {
            let mut object = json!({"spec": {"a": 1}});
            compiled.prune(&mut object);
            compiled.apply_defaults(&mut object);
            compiled.validate(&object);
        }
    }

    #[test]
    fn cel_rules_compile_or_are_refused(rule in rule(), value in json_value()) {
        let schema = json!({"type": "object", "properties": {"spec": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"a": {"type": "string", "maxLength": 10}},
            "x-kubernetes-validations": [{"rule": rule, "messageExpression": rule}]}}});
        if let Ok(compiled) = Schema::compile(&schema) {
            compiled.validate_update(&json!({"spec": value}), Some(&json!({"spec": {"a": "b"}})));
        }
    }

    #[test]
    fn objects_prune_default_and_validate_against_real_crds(spec in json_value(), status in json_value()) {
        thread_local! {
            static SCHEMAS: Vec<Schema> = [
                "gateway-api__gateway.networking.k8s.io_httproutes.yaml",
                "keda__keda.sh_scaledobjects.yaml",
                "cert-manager__cert-manager.io_issuers.yaml",
            ].iter().map(|f| corpus_schema(f)).collect();
        }
        SCHEMAS.with(|schemas| {
            for schema in schemas {
                let mut object = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
                                        "spec": spec.clone(), "status": status.clone()});
                schema.prune(&mut object);
                schema.apply_defaults(&mut object);
                schema.validate_update(&object, Some(&object));
            }
        });
    }
}
