//! Encryption at rest (`--encryption-provider-config`) on both backends: Secret values are not
//! in storage in the clear, reads return them, other resources stay plain, and key rotation
//! re-encrypts what a replace (`kubectl replace`, `plinth rewrite`) rewrites.

#![allow(clippy::unwrap_used)]

mod common;

use plinth_store_etcd::testing::EtcdProcess;

use common::{Backend, Plinth};

const K1: &str = "c2VjcmV0IGlzIHNlY3VyZSwgSSB0aGluayBzbyAgISE=";
const K2: &str = "dGhpcyBpcyBhbm90aGVyIGtleSBvZiAzMiBieXRlcyE=";
const MARKER: &str = "hunter2-plaintext-marker";

fn config(keys: &[(&str, &str)], identity: bool) -> String {
    let keys: Vec<String> = keys
        .iter()
        .map(|(name, secret)| format!("        - name: {name}\n          secret: {secret}\n"))
        .collect();
    let identity = if identity { "    - identity: {}\n" } else { "" };
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n    - aesgcm:\n        keys:\n{}{identity}",
        keys.concat()
    )
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn secrets_are_encrypted_and_keys_rotate(backend: Backend) {
    let config_dir = tempfile::tempdir().unwrap();
    let path = config_dir.path().join("encryption.yaml");
    std::fs::write(&path, config(&[("k1", K1)], true)).unwrap();
    let mut plinth = Plinth::start_with(
        backend,
        &["--encryption-provider-config", path.to_str().unwrap()],
    );
    let literal = format!("--from-literal=password={MARKER}");
    plinth.kubectl(&["create", "secret", "generic", "s1", &literal]);
    plinth.kubectl(&["create", "configmap", "c1", &literal]);
    let read = |plinth: &Plinth| {
        plinth.kubectl(&["get", "secret", "s1", "-o", "jsonpath={.data.password}"])
    };
    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, MARKER);
    assert_eq!(read(&plinth), encoded);

    let raw = plinth.read_while_down("/secrets/default/s1").unwrap();
    assert!(
        raw.starts_with(b"k8s:enc:aesgcm:v1:k1:"),
        "{:?}",
        &raw[..20.min(raw.len())]
    );
    assert!(!contains(&raw, &encoded) && !contains(&raw, MARKER));
    let plain = plinth.read_while_down("/configmaps/default/c1").unwrap();
    assert!(
        contains(&plain, MARKER),
        "ConfigMaps are not listed: stored plain"
    );
    assert_eq!(read(&plinth), encoded, "read after a restart");
    if plinth.etcd_endpoint().is_none() {
        // Nowhere in the embedded store's files, its log included.
        for entry in std::fs::read_dir(plinth.dir.path().join("store")).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            assert!(!contains(&bytes, &encoded));
        }
    }

    // Rotation: k2 writes, k1 still reads; a replace of every Secret rewrites them with k2.
    std::fs::write(&path, config(&[("k2", K2), ("k1", K1)], true)).unwrap();
    plinth.kill_and_restart();
    assert_eq!(read(&plinth), encoded);
    let all = plinth.kubectl(&["get", "secrets", "-A", "-o", "json"]);
    plinth.kubectl_with(&["replace", "-f", "-"], &all);
    let raw = plinth.read_while_down("/secrets/default/s1").unwrap();
    assert!(
        raw.starts_with(b"k8s:enc:aesgcm:v1:k2:"),
        "rewritten with the new key"
    );
    // k1 gone: still readable, so nothing needs it any more.
    std::fs::write(&path, config(&[("k2", K2)], false)).unwrap();
    plinth.kill_and_restart();
    assert_eq!(read(&plinth), encoded);
    // A new Secret with the configuration's only key.
    plinth.kubectl(&["create", "secret", "generic", "s2", &literal]);
    let raw = plinth.read_while_down("/secrets/default/s2").unwrap();
    assert!(raw.starts_with(b"k8s:enc:aesgcm:v1:k2:"));
    // Another provider: secretbox writes, aesgcm still reads; a replace moves everything over.
    let boxed = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n    - secretbox:\n        keys:\n        - name: b1\n          secret: {K1}\n    - aesgcm:\n        keys:\n        - name: k2\n          secret: {K2}\n"
    );
    std::fs::write(&path, boxed).unwrap();
    plinth.kill_and_restart();
    assert_eq!(read(&plinth), encoded);
    // This time `plinth rewrite` does it (paged, through the API).
    let rewrite = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_plinth"))
            .arg("rewrite")
            .args(args)
            .env("KUBECONFIG", &plinth.kubeconfig)
            .output()
            .unwrap()
    };
    let out = rewrite(&["secrets"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    let count: usize = printed
        .trim()
        .strip_prefix("secrets: ")
        .and_then(|rest| rest.strip_suffix(" rewritten"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output {printed:?}"));
    let listed = plinth.json(&["get", "secrets", "-A"])["items"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(count, listed, "every Secret rewritten");
    let out = rewrite(&["nosuchthings"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("the server doesn't have a resource type \"nosuchthings\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for key in ["/secrets/default/s1", "/secrets/default/s2"] {
        let raw = plinth.read_while_down(key).unwrap();
        assert!(raw.starts_with(b"k8s:enc:secretbox:v1:b1:"), "{key}");
        assert!(!contains(&raw, &encoded));
    }
    assert_eq!(read(&plinth), encoded);
    // History is stored as written — sealed — and read back opened: the versions sealed with
    // a key still configured read as the Secret was; the one sealed with k1, dropped from the
    // configuration, is shown without its object.
    let history: serde_json::Value = serde_json::from_str(&plinth.kubectl(&[
        "get",
        "--raw",
        "/apis/history.plinth.dev/v1alpha1/revisions/api/v1/namespaces/default/secrets/s1",
    ]))
    .unwrap();
    let versions = history["revisions"].as_array().unwrap();
    assert!(versions.len() >= 3, "{history}");
    assert!(
        versions[0]["object"].is_null(),
        "sealed with k1: {}",
        versions[0]
    );
    for version in &versions[1..] {
        assert_eq!(version["object"]["data"]["password"], encoded.as_str());
    }
}

#[test]
fn encryption_at_rest_on_embedded_storage() {
    secrets_are_encrypted_and_keys_rotate(Backend::Embedded);
}

#[test]
fn encryption_at_rest_on_etcd() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let etcd = runtime.block_on(EtcdProcess::start()).expect("start etcd");
    drop(runtime);
    secrets_are_encrypted_and_keys_rotate(Backend::Etcd(etcd));
}

#[test]
fn a_bad_configuration_stops_the_server_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers: [{kms: {apiVersion: v2, name: vault}}]\n").unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_plinth"))
        .args([
            "serve",
            "--pod-network=shared",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .arg("--encryption-provider-config")
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Were it to start after all, the guard stops it by its PID when the test ends.
    let mut server = common::Stopped(Some(child));
    let mut status = None;
    plinth_testenv::eventually_blocking("the server refuses to start", || {
        status = server.0.as_mut().unwrap().try_wait().unwrap();
        status.is_some()
    });
    assert!(!status.unwrap().success());
    let out = server.0.take().unwrap().wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("provider \"kms\" is not supported"),
        "{stderr}"
    );
}
