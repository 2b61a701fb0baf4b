//! The real-world CRD corpus (`crates/plinth-schema/tests/crds`, 68 CRDs from widely used
//! projects) through kubectl against `plinth serve`: every CRD installs, becomes Established and
//! is explained; its valid instance is created; its invalid one is refused with the causes
//! kube-apiserver gives.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Backend, Plinth};
use serde_json::Value;

#[test]
fn real_world_crd_corpus_installs_explains_and_validates_through_kubectl() {
    let p = Plinth::start(Backend::Embedded);
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plinth-schema/tests");
    let examples: Vec<Value> = serde_norway::from_str(
        &std::fs::read_to_string(base.join("corpus_examples.yaml")).unwrap(),
    )
    .unwrap();
    assert!(
        examples.len() >= 60,
        "the corpus has {} CRDs",
        examples.len()
    );
    let files: Vec<_> = examples
        .iter()
        .map(|example| base.join("crds").join(example["crd"].as_str().unwrap()))
        .collect();
    p.install_crds(&files, "60s");
    let installed = p.json(&["get", "crd"]);
    let items = installed["items"].as_array().unwrap();
    assert_eq!(items.len(), examples.len());
    for example in &examples {
        let crd = example["crd"].as_str().unwrap();
        let valid = &example["valid"][0];
        let api_version = valid["apiVersion"].as_str().unwrap();
        let (group, version) = api_version.split_once('/').unwrap();
        let kind = valid["kind"].as_str().unwrap();
        let plural = items
            .iter()
            .find(|c| c["spec"]["group"] == group && c["spec"]["names"]["kind"] == kind)
            .and_then(|c| c["spec"]["names"]["plural"].as_str())
            .unwrap_or_else(|| panic!("{crd}: not installed"));
        let explained = p.kubectl(&["explain", plural, "--api-version", api_version]);
        assert!(
            explained.contains(&format!("KIND:       {kind}"))
                && explained.contains(&format!("VERSION:    {version}")),
            "{crd}: {explained}"
        );
        let created = p.kubectl_stdin(&["create", "-f", "-"], &valid.to_string());
        assert!(
            created.status.success(),
            "{crd}: the valid instance: {}",
            String::from_utf8_lossy(&created.stderr)
        );
        for invalid in example["invalid"].as_array().unwrap() {
            let mut object = invalid["object"].clone();
            object["metadata"]["name"] = Value::String("refused".into());
            let refused = p.kubectl_stdin(&["create", "-f", "-"], &object.to_string());
            assert!(
                !refused.status.success(),
                "{crd}: the invalid instance was created"
            );
            let stderr = String::from_utf8_lossy(&refused.stderr);
            assert!(stderr.contains("is invalid"), "{crd}: {stderr}");
            for cause in invalid["causes"].as_array().unwrap() {
                let cause = cause.as_str().unwrap();
                assert!(stderr.contains(cause), "{crd}: {cause:?} not in {stderr}");
            }
        }
    }
}
