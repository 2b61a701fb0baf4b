//! Every real-world CRD — the 11 in `../shared/crds` and the corpus in `tests/crds` (see its
//! SOURCES.md): instances validate after defaulting, and crafted invalid ones fail with exactly
//! the causes kube-apiserver reports.

#![allow(clippy::unwrap_used)]

use plinth_schema::Schema;
use serde_json::Value;

fn storage_schema(dir: &std::path::Path, file: &str) -> Schema {
    let path = dir.join(file);
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

/// Checks every example in `examples` against the CRDs in `dir`, and that every CRD there has
/// examples; returns what is wrong.
fn check(dir: &std::path::Path, examples: &str) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(examples);
    let examples: Vec<Value> =
        serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut covered = std::collections::BTreeSet::new();
    let mut wrong = Vec::new();
    for example in &examples {
        let file = example["crd"].as_str().unwrap();
        covered.insert(file.to_owned());
        let schema = storage_schema(dir, file);
        for valid in example["valid"].as_array().unwrap() {
            let found = lines(&schema, valid);
            if !found.is_empty() {
                wrong.push(format!("{file}: a valid instance is refused: {found:#?}"));
            }
        }
        let invalid = example["invalid"].as_array().unwrap();
        if invalid.is_empty() {
            wrong.push(format!("{file}: no invalid instance"));
        }
        for invalid in invalid {
            let mut expected: Vec<String> = invalid["causes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap().to_owned())
                .collect();
            expected.sort();
            let found = lines(&schema, &invalid["object"]);
            if found != expected {
                wrong.push(format!(
                    "{file}: an invalid instance\n  found:    {found:#?}\n  expected: {expected:#?}"
                ));
            }
        }
    }
    let present: std::collections::BTreeSet<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    for missing in present.difference(&covered) {
        wrong.push(format!("{missing}: no examples"));
    }
    wrong
}

#[test]
fn shared_crd_examples_validate_and_invalid_ones_fail_as_on_a_cluster() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/crds");
    let wrong = check(&dir, "tests/shared_crd_examples.yaml");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn corpus_examples_validate_and_invalid_ones_fail_as_on_a_cluster() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/crds");
    let wrong = check(&dir, "tests/corpus_examples.yaml");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
