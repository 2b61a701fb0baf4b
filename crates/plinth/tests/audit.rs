//! The audit log: a scripted kubectl session against a server with a policy; every request
//! appears once per stage with its user, verb, resource and code; levels follow the policy;
//! Secret data is never logged under a catch-all rule; the file rotates by size.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::{Backend, Plinth};
use serde_json::Value;

const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version", "/api", "/api/*", "/apis", "/apis/*", "/openapi/*"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
- level: Metadata
"#;

fn events(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_scripted_session_is_audited_stage_by_stage() {
    let dir = tempfile::tempdir().unwrap();
    let (policy, log, tokens) = (
        dir.path().join("policy.yaml"),
        dir.path().join("audit.log"),
        dir.path().join("tokens.csv"),
    );
    std::fs::write(&policy, POLICY).unwrap();
    std::fs::write(&tokens, "eve-token,eve,uid-eve\n").unwrap();
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &[
            "--audit-policy-file",
            policy.to_str().unwrap(),
            "--audit-log-path",
            log.to_str().unwrap(),
            "--audit-log-maxsize",
            "1",
            "--token-auth-file",
            tokens.to_str().unwrap(),
        ],
    );
    let secret = "top-secret-marker-value";
    plinth.kubectl(&["create", "configmap", "c1", "--from-literal=k=v"]);
    plinth.kubectl(&["get", "configmap", "c1"]);
    plinth.kubectl(&[
        "create",
        "secret",
        "generic",
        "s1",
        &format!("--from-literal=password={secret}"),
    ]);
    plinth.kubectl(&["get", "secret", "s1", "-o", "yaml"]);
    plinth.kubectl_fails(&["--token", "eve-token", "get", "secrets"]);
    let watched = plinth.kubectl(&["get", "configmaps", "--watch", "--request-timeout=1s"]);
    assert!(watched.contains("c1"), "{watched}");
    plinth.kubectl(&["delete", "configmap", "c1"]);

    // The watch's last stage is written when its stream ends: wait for it.
    plinth.eventually("every request is complete in the log", || {
        let all = events(&log);
        let mut stages: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for e in &all {
            stages
                .entry(e["auditID"].as_str().unwrap().to_owned())
                .or_default()
                .push(e["stage"].as_str().unwrap().to_owned());
        }
        !stages.is_empty()
            && stages
                .values()
                .all(|s| s.last().map(String::as_str) == Some("ResponseComplete"))
    });
    let all = events(&log);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(secret), "the Secret's data is in the log");
    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, secret);
    assert!(!text.contains(&encoded), "the Secret's data is in the log");

    let mut by_id: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for e in &all {
        by_id
            .entry(e["auditID"].as_str().unwrap())
            .or_default()
            .push(e);
    }
    let find = |verb: &str, resource: &str, user: &str| -> Vec<&Value> {
        by_id
            .values()
            .find(|events| {
                let e = events[0];
                e["verb"] == verb
                    && e["objectRef"]["resource"] == resource
                    && e["user"]["username"] == user
            })
            .unwrap_or_else(|| panic!("no {verb} {resource} by {user} in {text}"))
            .clone()
    };
    let stages = |events: &[&Value]| -> Vec<String> {
        events
            .iter()
            .map(|e| e["stage"].as_str().unwrap().to_owned())
            .collect()
    };
    // Each request once per stage, with its answer's code at the end.
    let create = find("create", "configmaps", "plinth-admin");
    assert_eq!(stages(&create), ["RequestReceived", "ResponseComplete"]);
    assert_eq!(create[1]["responseStatus"]["code"], 201);
    assert_eq!(create[1]["level"], "RequestResponse");
    assert_eq!(create[1]["requestObject"]["data"]["k"], "v");
    assert_eq!(create[1]["responseObject"]["metadata"]["name"], "c1");
    assert_eq!(create[1]["objectRef"]["namespace"], "default");
    // As kube's: the name of what a create makes is in the later stages' reference.
    assert_eq!(create[1]["objectRef"]["name"], "c1");
    assert!(create[0]["objectRef"].get("name").is_none());
    assert!(
        create[0]["sourceIPs"][0]
            .as_str()
            .unwrap()
            .starts_with("127.")
    );
    assert!(
        create[0]["userAgent"]
            .as_str()
            .unwrap()
            .starts_with("kubectl")
    );
    let get = find("get", "configmaps", "plinth-admin");
    assert_eq!(get.last().unwrap()["objectRef"]["name"], "c1");
    let secret_create = find("create", "secrets", "plinth-admin");
    assert_eq!(secret_create[1]["level"], "Metadata");
    assert!(secret_create[1].get("requestObject").is_none());
    let denied = find("list", "secrets", "eve");
    assert_eq!(denied.last().unwrap()["responseStatus"]["code"], 403);
    let watch = find("watch", "configmaps", "plinth-admin");
    assert_eq!(
        stages(&watch),
        ["RequestReceived", "ResponseStarted", "ResponseComplete"]
    );
    let delete = find("delete", "configmaps", "plinth-admin");
    assert_eq!(delete.last().unwrap()["responseStatus"]["code"], 200);
    // Discovery is not logged (a None rule).
    assert!(all.iter().all(|e| e["requestURI"] != "/api"));

    // Past the size limit the log rotates.
    let big = dir.path().join("big.txt");
    std::fs::write(&big, "x".repeat(300_000)).unwrap();
    let big = format!("--from-file=k={}", big.display());
    plinth.kubectl(&["create", "configmap", "big", &big]);
    for _ in 0..4 {
        plinth.kubectl(&["get", "configmap", "big", "-o", "name"]);
    }
    let rotated: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("audit-"))
        .collect();
    assert!(!rotated.is_empty(), "no rotated log");
    assert!(std::fs::metadata(&log).unwrap().len() <= 1024 * 1024);
}
