//! Tests of every built-in type through the registry's steps.

/// Property tests of the registry's steps over arbitrary objects and patches, for every
/// built-in type: decoding against the type, server-set metadata and defaults, validation,
/// patches of all three kinds. Nothing panics; every refusal is a 4xx.
mod properties {
    use plinth_core::ApiError;
    use plinth_registry::patch;
    use plinth_registry::{
        FieldValidation, Patch, Registry, WriteOptions, decode_continue, parse_rv,
    };
    use proptest::prelude::*;
    use serde_json::Value;
    use serde_json::{Map, json};

    fn config() -> ProptestConfig {
        ProptestConfig {
            cases: 128,
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z]{1,6}",
            Just("metadata".to_owned()),
            Just("name".to_owned()),
            Just("labels".to_owned()),
            Just("finalizers".to_owned()),
            Just("ownerReferences".to_owned()),
            Just("data".to_owned()),
            Just("spec".to_owned()),
            Just("status".to_owned()),
            Just("type".to_owned()),
            Just("$patch".to_owned()),
            Just("op".to_owned()),
            Just("path".to_owned()),
            Just("value".to_owned()),
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            "[a-zA-Z0-9/._~-]{0,10}".prop_map(Value::String),
            Just(json!("add")),
            Just(json!("/metadata/name")),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(key(), inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    fn client_error(e: &ApiError) -> bool {
        (400..500).contains(&e.code())
    }

    /// An object at the top, with metadata most of the time.
    fn object() -> impl Strategy<Value = Value> {
        (
            prop::collection::btree_map(key(), json_value(), 0..6),
            prop::option::of(prop::collection::btree_map(key(), json_value(), 0..6)),
        )
            .prop_map(|(fields, metadata)| {
                let mut map: Map<String, Value> = fields.into_iter().collect();
                if let Some(metadata) = metadata {
                    let mut meta: Map<String, Value> = metadata.into_iter().collect();
                    meta.insert("name".into(), json!("x"));
                    map.insert("metadata".into(), Value::Object(meta));
                }
                Value::Object(map)
            })
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn every_type_decodes_prepares_and_validates_any_object(object in object(), old in object()) {
            for def in crate::builtin() {
                let mut body = object.clone();
                let options = WriteOptions {
                    field_validation: FieldValidation::Strict,
                    ..WriteOptions::default()
                };
                let steps = Registry::check_body(&def, &mut body, &options)
                    .and_then(|_| Registry::prepare_create(&def, &mut body, Some("default")))
                    .and_then(|()| Registry::validate(&def, &body, None, ""))
                    .and_then(|()| Registry::validate(&def, &body, Some(&old), ""));
                if let Err(e) = steps {
                    prop_assert!(client_error(&e), "{}: {} {}", def.kind, e.code(), e.message);
                }
            }
        }

        #[test]
        fn patches_of_every_kind_apply_or_get_a_4xx(target in json_value(), patch in json_value()) {
            let def = crate::core::serviceaccount::resource();
            let lists = patch::patch_lists(&def);
            let mut patches = vec![Patch::Merge(patch.clone()), Patch::Strategic(patch.clone())];
            if let Ok(ops) = serde_json::from_value::<json_patch::Patch>(patch.clone()) {
                patches.push(Patch::Json(ops));
            }
            for p in &patches {
                let mut patched = target.clone();
                if let Err(e) = patch::apply_patch(&mut patched, p, &lists) {
                    prop_assert!(client_error(&e), "{}: {}", p.media_type(), e.message);
                }
            }
        }

        #[test]
        fn continue_tokens_and_resource_versions_decode_or_get_a_400(text in ".{0,60}") {
            if let Err(e) = decode_continue(&text) {
                prop_assert_eq!(e.code(), 400);
            }
            if let Err(e) = parse_rv(&text) {
                prop_assert_eq!(e.code(), 400);
            }
        }
    }
}

/// The built-in schemas decode as Go's decoder does: its type errors, unknown fields found
/// and pruned.
mod decoding {
    use crate::coordination::lease::schema as lease;
    use crate::core::configmap::schema as config_map;
    use crate::core::secret::schema as secret;
    use plinth_registry::schema::{check, prune};
    use serde_json::json;

    #[test]
    fn type_errors_read_like_gos_decoder() {
        let found = check(&json!({"data": {"a": 1}}), &config_map(), "ConfigMap");
        assert_eq!(
            found.type_error.as_deref(),
            Some(
                "json: cannot unmarshal number into Go struct field ConfigMap.data[a] of type string"
            )
        );
        let found = check(
            &json!({"spec": {"leaseDurationSeconds": "x"}}),
            &lease(),
            "Lease",
        );
        assert!(
            found
                .type_error
                .unwrap()
                .contains("Lease.spec.leaseDurationSeconds of type int64")
        );
        assert!(
            check(&json!({"data": {"a": "!!"}}), &secret(), "Secret")
                .type_error
                .is_some()
        );
    }

    #[test]
    fn unknown_fields_are_found_and_pruned() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "bogus": 1}, "data": {"k": "v"}, "extra": true});
        let found = check(&cm, &config_map(), "ConfigMap");
        assert_eq!(found.unknown, ["extra", "metadata.bogus"]);
        assert!(found.type_error.is_none());
        prune(&mut cm, &config_map());
        assert_eq!(
            cm,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}})
        );
    }
}
