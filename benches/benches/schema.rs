//! Validation benchmark: pruning, defaulting and validating a custom resource of the large
//! Prometheus CRD (../shared/crds), with the schema compiled once, as the API server does per
//! CRD version. Prints objects/s.

#![allow(missing_docs, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use plinth_schema::Schema;
use serde_json::{Value, json};

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("schema benchmark: run with `cargo bench -p plinth-benches --bench schema`");
        return;
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/crds/prometheus-operator__monitoring.coreos.com_prometheuses.yaml"
    );
    let crd: Value = serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let openapi = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema")
        .unwrap();
    let started = Instant::now();
    let schema = Schema::compile(openapi).unwrap();
    let compile = started.elapsed();

    // A realistic Prometheus: replicas, retention, resources, a few selectors, rules, containers.
    let object = json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
        "metadata": {"name": "k8s", "namespace": "monitoring", "labels": {"prometheus": "k8s"}},
        "spec": {
            "replicas": 2, "retention": "30d", "scrapeInterval": "30s", "evaluationInterval": "30s",
            "serviceAccountName": "prometheus-k8s", "version": "v2.54.1",
            "resources": {"requests": {"memory": "400Mi", "cpu": "100m"}, "limits": {"memory": "2Gi"}},
            "serviceMonitorSelector": {"matchLabels": {"team": "platform"}},
            "podMonitorSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["platform", "apps"]}]},
            "ruleSelector": {"matchLabels": {"role": "alert-rules"}},
            "alerting": {"alertmanagers": [{"namespace": "monitoring", "name": "alertmanager-main", "port": "web"}]},
            "securityContext": {"fsGroup": 2000, "runAsNonRoot": true, "runAsUser": 1000},
            "externalLabels": {"cluster": "prod-eu-1"},
            "containers": [{"name": "config-reloader", "resources": {"limits": {"cpu": "50m"}}}],
            "storage": {"volumeClaimTemplate": {"spec": {"storageClassName": "ssd", "resources": {"requests": {"storage": "100Gi"}}}}},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "monitoring", "effect": "NoSchedule"}],
        }
    });
    assert!(
        schema.validate(&object).is_empty(),
        "{:?}",
        schema.validate(&object)
    );
    let duration = Duration::from_secs(3);
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < duration {
        let mut copy = object.clone();
        let pruned = schema.prune(&mut copy);
        schema.apply_defaults(&mut copy);
        let causes = schema.validate(&copy);
        assert!(pruned.is_empty() && causes.is_empty());
        n += 1;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    println!(
        "| Prometheus CRD schema compile (once per CRD version) | {:.1} ms |",
        compile.as_secs_f64() * 1e3
    );
    println!("| prune + default + validate a Prometheus custom resource | {rate:.0} objects/s |");
}
