//! Property tests over what request input reaches in `plinth-core`: selectors, JSONPath,
//! strategic merge patch, managedFields and server-side apply, decoding managedFields, names;
//! and the compact tree the controllers cache objects in reads as the JSON it was made of.
//! Nothing panics; every failure is an error value.

#![allow(clippy::unwrap_used)]

use plinth_core::Frozen;
use plinth_core::jsonpath::JsonPath;
use plinth_core::managed::{Element, ListType, Manager, MapType, Operation, Shape};
use plinth_core::selector::{FieldSelector, LabelSelector, LabelSet, SortedLabels};
use plinth_core::smp::{self, ListMerge};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Keys as patches and objects have them, directives included.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,5}",
        Just("$patch".to_owned()),
        Just("$retainKeys".to_owned()),
        "\\$setElementOrder/[a-z]{0,3}",
        "\\$deleteFromPrimitiveList/[a-z]{0,3}",
        Just("metadata".to_owned()),
        Just("finalizers".to_owned()),
        Just("name".to_owned()),
        Just("spec".to_owned()),
        Just("containers".to_owned()),
    ]
}

/// Any JSON, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<f64>().prop_map(|f| json!(f)),
        prop_oneof![
            "[a-z$/._ -]{0,8}",
            Just("replace".to_owned()),
            Just("delete".to_owned()),
            Just("merge".to_owned())
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

const LISTS: [(&str, ListMerge); 4] = [
    ("metadata.finalizers", ListMerge::Set),
    ("spec.containers", ListMerge::Keyed("name")),
    ("spec.containers[].ports", ListMerge::Keyed("name")),
    ("finalizers", ListMerge::Set),
];

struct Mixed;

impl Shape for Mixed {
    fn list_type(&self, path: &[Element]) -> ListType {
        match path.len() % 3 {
            0 => ListType::Atomic,
            1 => ListType::Set,
            _ => ListType::Map(vec!["name".into()]),
        }
    }

    fn map_type(&self, path: &[Element]) -> MapType {
        if path.len().is_multiple_of(2) {
            MapType::Struct
        } else {
            MapType::Granular
        }
    }
}

fn manager(name: &str) -> Manager {
    Manager {
        name: name.into(),
        operation: Operation::Apply,
        api_version: "v1".into(),
        subresource: String::new(),
        time: "2024-01-01T00:00:00Z".into(),
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn label_selectors_parse_or_refuse(input in ".{0,40}", labels in prop::collection::btree_map("[a-z.]{0,4}", "[a-z]{0,4}", 0..4)) {
        if let Ok(selector) = LabelSelector::parse(&input) {
            // The compact set a watch cache keeps selects as the map does.
            let compact = SortedLabels::new(labels.clone());
            prop_assert_eq!(selector.matches(&labels), selector.matches(&compact));
            for (key, value) in &labels {
                prop_assert_eq!(compact.label(key), Some(value.as_str()));
            }
        }
    }

    #[test]
    fn compact_labels_select_as_a_map(
        labels in prop::collection::btree_map("[a-c]{1,2}", "[a-c]{0,2}", 0..5),
        terms in prop::collection::vec(("[a-c]{1,2}", 0..6usize, "[a-c]{1,2}"), 1..4),
    ) {
        let text: Vec<String> = terms
            .iter()
            .map(|(key, op, value)| match op {
                0 => format!("{key}={value}"),
                1 => format!("{key}!={value}"),
                2 => format!("{key} in ({value},x)"),
                3 => format!("{key} notin ({value})"),
                4 => format!("!{key}"),
                _ => key.clone(),
            })
            .collect();
        let selector = LabelSelector::parse(&text.join(",")).expect("a well-formed selector");
        let compact = SortedLabels::new(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        prop_assert_eq!(selector.matches(&labels), selector.matches(&compact), "{}", text.join(","));
        prop_assert_eq!(compact.iter().count(), labels.len());
    }

    #[test]
    fn field_selectors_parse_or_refuse(input in "[a-z.=!,\\\\ ]{0,30}|.{0,30}") {
        if let Ok(selector) = FieldSelector::parse(&input) {
            selector.matches(|f| Some(f.to_owned()));
        }
    }

    #[test]
    fn jsonpath_parses_or_refuses_and_selects_anything(input in "[{}.\\[\\]a-z*0-9@?=,'\" :$-]{0,24}|.{0,24}", value in json_value()) {
        if let Ok(path) = JsonPath::parse(&input) {
            path.select(&value);
            path.fields();
        }
    }

    #[test]
    fn a_frozen_tree_reads_and_writes_as_its_value(value in json_value(), steps in prop::collection::vec(prop_oneof![key(), "[0-4]".prop_map(String::from)], 0..4)) {
        let frozen = Frozen::from(&value);
        prop_assert!(frozen == value);
        prop_assert_eq!(frozen.to_value(), value.clone());
        prop_assert_eq!(Frozen::from(value.clone()).to_value(), value.clone());
        prop_assert_eq!(serde_json::to_string(&frozen).ok(), serde_json::to_string(&value).ok());
        let pointer: String = steps.iter().map(|s| format!("/{}", s.replace('~', "~0").replace('/', "~1"))).collect();
        prop_assert_eq!(frozen.at(&pointer).map(Frozen::to_value), value.pointer(&pointer).cloned());
        if let (Some(map), Some(first)) = (frozen.as_object(), steps.first()) {
            prop_assert_eq!(map.get(first).map(Frozen::to_value), value.get(first.as_str()).cloned());
            prop_assert_eq!(frozen[first.as_str()].to_value(), value[first.as_str()].clone());
        }
    }

    #[test]
    fn strategic_merge_patches_apply_or_fail_cleanly(target in json_value(), patch in json_value()) {
        let mut target = target;
        let _ = smp::apply(&mut target, &patch, &LISTS);
    }

    #[test]
    fn server_side_apply_and_managed_fields_never_panic(live in json_value(), config in json_value(), force in any::<bool>()) {
        let mut entries = Vec::new();
        plinth_core::managed::record_update(&mut entries, None, &live, &Mixed, &Manager { operation: Operation::Update, ..manager("creator") });
        if let Ok(applied) = plinth_core::managed::apply(&mut entries, Some(&live), &config, &Mixed, &manager("applier"), force) {
            let mut object = applied;
            plinth_core::managed::write_entries(&mut object, entries);
            if object.is_object() {
                prop_assert!(plinth_core::managed::read_entries(&object).is_ok());
            }
        }
    }

    #[test]
    fn managed_fields_decode_or_refuse(fields in json_value()) {
        if let Ok(set) = plinth_core::managed::decode(&fields) {
            plinth_core::managed::encode(&set);
        }
        let _ = plinth_core::managed::read_entries(&json!({"metadata": {"managedFields": fields}}));
    }

    #[test]
    fn name_rules_answer_for_any_string(name in ".{0,300}") {
        plinth_core::validation::dns1123_label(&name);
        plinth_core::validation::dns1123_subdomain(&name);
        plinth_core::validation::dns1035_label(&name);
        plinth_core::validation::qualified_name(&name);
        plinth_core::validation::label_value(&name);
        plinth_core::validation::path_segment_name(&name);
    }
}
