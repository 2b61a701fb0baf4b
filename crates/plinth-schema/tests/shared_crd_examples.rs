//! Every real-world CRD in `../shared/crds`: documented instances validate after defaulting,
//! and crafted invalid ones fail with exactly the causes kube-apiserver reports.

#![allow(clippy::unwrap_used)]

use plinth_schema::Schema;
use serde_json::Value;

fn storage_schema(file: &str) -> Schema {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/crds")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let crd: Value = serde_norway::from_str(&text).unwrap();
    let version = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["storage"] == true)
        .unwrap();
    Schema::compile(&version["schema"]["openAPIV3Schema"]).unwrap()
}

fn lines(schema: &Schema, object: &Value) -> Vec<String> {
    let mut object = object.clone();
    schema.prune(&mut object);
    schema.apply_defaults(&mut object);
    let mut found: Vec<String> = schema.validate(&object).iter().map(|c| c.line()).collect();
    found.sort();
    found
}

#[test]
fn shared_crd_examples_validate_and_invalid_ones_fail_as_on_a_cluster() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/shared_crd_examples.yaml");
    let examples: Vec<Value> =
        serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut covered = std::collections::BTreeSet::new();
    for example in &examples {
        let file = example["crd"].as_str().unwrap();
        covered.insert(file.to_owned());
        let schema = storage_schema(file);
        for valid in example["valid"].as_array().unwrap() {
            assert_eq!(
                lines(&schema, valid),
                Vec::<String>::new(),
                "{file}: a valid instance"
            );
        }
        for invalid in example["invalid"].as_array().unwrap() {
            let mut expected: Vec<String> = invalid["causes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap().to_owned())
                .collect();
            expected.sort();
            assert_eq!(
                lines(&schema, &invalid["object"]),
                expected,
                "{file}: an invalid instance"
            );
        }
    }
    let shared: std::collections::BTreeSet<String> = std::fs::read_dir(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/crds"),
    )
    .unwrap()
    .filter_map(Result::ok)
    .map(|e| e.file_name().to_string_lossy().into_owned())
    .filter(|n| n.ends_with(".yaml"))
    .collect();
    assert_eq!(covered, shared, "every shared CRD has examples");
}
