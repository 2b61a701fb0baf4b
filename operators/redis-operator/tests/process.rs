//! `redis-operator` as it is deployed: two `redis-operator run --leader-elect` processes
//! with the RBAC it prints (a ServiceAccount token, nothing more), one leading; the leader
//! reconciles a RedisCluster into its objects; SIGTERM hands over to the other.

#![allow(clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use plinth_testenv::{TestEnv, eventually};
use redis_operator::RedisCluster;

/// An operator process, killed by its PID if the test ends early.
struct Operator {
    child: Child,
    metrics: u16,
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `redis-operator run --leader-elect` as `name` (its identity's host part).
fn start(
    name: &str,
    kubeconfig: &std::path::Path,
    webhook: u16,
    certs: &std::path::Path,
) -> Operator {
    let (metrics, health) = (plinth_testenv::free_port(), plinth_testenv::free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_redis-operator"))
        .args([
            "run",
            "--leader-elect",
            "--leader-election-namespace=redis-system",
        ])
        .arg(format!("--webhook-bind-address=127.0.0.1:{webhook}"))
        .arg("--webhook-cert-dir")
        .arg(certs)
        .arg(format!("--metrics-bind-address=127.0.0.1:{metrics}"))
        .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
        .env("KUBECONFIG", kubeconfig)
        .env("POD_NAME", name)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    Operator { child, metrics }
}

async fn leading(operator: &Operator) -> bool {
    plinth_testenv::scrape(operator.metrics, "/metrics")
        .await
        .contains("leader_election_master_status{name=\"redis-operator\"} 1")
}

/// Creating a RedisCluster `bad` with `spec` is refused with a 422 whose message names
/// `field`, and nothing is stored.
async fn refused_with_422(clusters: &Api<RedisCluster>, spec: serde_json::Value, field: &str) {
    let bad: RedisCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "database.example.com/v1alpha1", "kind": "RedisCluster",
        "metadata": {"name": "bad"},
        "spec": spec,
    }))
    .unwrap();
    let refused = clusters
        .create(&PostParams::default(), &bad)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = refused else {
        panic!("{refused}")
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(status.message.contains(field), "{}", status.message);
    assert!(clusters.get_opt("bad").await.unwrap().is_none());
}

/// Applies every YAML document of `text`.
async fn apply_documents(client: &kube::Client, text: &str) {
    for document in text.split("---\n").filter(|d| !d.trim().is_empty()) {
        let object: serde_json::Value = serde_norway::from_str(document).unwrap();
        let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (
                String::new(),
                object["apiVersion"].as_str().unwrap().to_owned(),
            ),
        };
        let kind = object["kind"].as_str().unwrap();
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(&group, &version, kind));
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        api.patch(&name, &PatchParams::apply("test"), &Patch::Apply(&object))
            .await
            .unwrap();
    }
}

/// Applies what `redis-operator ARGS` prints.
async fn apply_printed(env: &TestEnv, args: &[&str]) {
    let printed = Command::new(env!("CARGO_BIN_EXE_redis-operator"))
        .args(args)
        .output()
        .unwrap();
    assert!(printed.status.success());
    apply_documents(&env.client(), &String::from_utf8(printed.stdout).unwrap()).await;
}

/// Applies the RBAC `redis-operator rbac` prints and writes a kubeconfig with the
/// ServiceAccount's token.
async fn service_account_kubeconfig(env: &TestEnv, dir: &std::path::Path) -> std::path::PathBuf {
    let client = env.client();
    let namespaces: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Namespace")),
    );
    namespaces
        .patch(
            "redis-system",
            &PatchParams::apply("test"),
            &Patch::Apply(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "redis-system"}})),
        )
        .await
        .unwrap();
    apply_printed(env, &["rbac", "--namespace", "redis-system"]).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client, "redis-system");
    let request: TokenRequest = serde_json::from_value(serde_json::json!({
        "spec": {"audiences": [], "expirationSeconds": 3600}
    }))
    .unwrap();
    let token = accounts
        .create_token_request("redis-operator", &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let mut config = kube::config::Kubeconfig::read_from(env.kubeconfig()).unwrap();
    for named in &mut config.auth_infos {
        named.auth_info = Some(kube::config::AuthInfo {
            token: Some(token.clone().into()),
            ..Default::default()
        });
    }
    let path = dir.join("operator.kubeconfig");
    std::fs::write(&path, serde_norway::to_string(&config).unwrap()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_with_the_shipped_rbac_one_leads_and_hands_over_on_sigterm() {
    let env = TestEnv::start().await.unwrap();
    env.install_crd(&redis_operator::types::crd())
        .await
        .unwrap();
    let dir = tempfile_dir();
    let kubeconfig = service_account_kubeconfig(&env, &dir).await;
    // The webhook configurations send RedisClusters to the second process (both serve them,
    // with one certificate: the first makes it, the second finds it).
    let (first_webhook, second_webhook) =
        (plinth_testenv::free_port(), plinth_testenv::free_port());
    apply_printed(
        &env,
        &[
            "webhook-config",
            "--url",
            &format!("https://127.0.0.1:{second_webhook}"),
        ],
    )
    .await;
    let certs = dir.join("certs");
    let first = start("operator-a", &kubeconfig, first_webhook, &certs);
    eventually("the first operator to lead", || leading(&first)).await;
    let second = start("operator-b", &kubeconfig, second_webhook, &certs);
    eventually("the second to serve metrics", || async {
        plinth_testenv::scrape(second.metrics, "/metrics")
            .await
            .contains("leader_election_master_status")
    })
    .await;
    assert!(!leading(&second).await, "exactly one leader");

    // The leader, with nothing but its RBAC, makes a cluster's objects (no node runs pods
    // here: the cluster stays Initializing).
    let client = env.client();
    let clusters: Api<RedisCluster> = Api::namespaced(client.clone(), "default");
    let cluster: RedisCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "database.example.com/v1alpha1", "kind": "RedisCluster",
        "metadata": {"name": "cache"}, "spec": {"replicas": 3}
    }))
    .unwrap();
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    eventually("the StatefulSet, Services, Secret and status", || async {
        let set = sets.get_opt("cache").await.unwrap();
        let primary = Api::<Service>::namespaced(client.clone(), "default")
            .get_opt("cache-primary")
            .await
            .unwrap();
        let secret = Api::<Secret>::namespaced(client.clone(), "default")
            .get_opt("cache-auth")
            .await
            .unwrap();
        let phase = clusters
            .get("cache")
            .await
            .unwrap()
            .status
            .and_then(|s| s.phase);
        set.is_some()
            && primary.is_some()
            && secret.is_some()
            && phase.as_deref() == Some("Initializing")
    })
    .await;
    // The defaulting webhook filled in the spec; the validating one refuses what the
    // operator could not run, and nothing is stored.
    let stored = clusters.get("cache").await.unwrap();
    assert_eq!(stored.spec.image.as_deref(), Some("redis:7.2"));
    assert_eq!(
        stored.spec.storage.as_ref().map(|s| s.size.as_str()),
        Some("1Gi")
    );
    refused_with_422(
        &clusters,
        serde_json::json!({"replicas": 1, "backup": {"schedule": "every day"}}),
        "spec.backup.schedule: Invalid value: \"every day\"",
    )
    .await;
    refused_with_422(
        &clusters,
        serde_json::json!({"replicas": 1,
            "restoreFrom": {"claimName": "cache-backup", "file": "../x.rdb"}}),
        "spec.restoreFrom.file: Invalid value: \"../x.rdb\"",
    )
    .await;
    let refused = clusters
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"storage": {"storageClassName": "fast"}}})),
        )
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("spec.storage.storageClassName: Invalid value: field is immutable"),
        "{refused}"
    );
    let finalizers = clusters.get("cache").await.unwrap().metadata.finalizers;
    assert_eq!(
        finalizers.unwrap_or_default(),
        [redis_operator::FINALIZER.to_owned()]
    );
    let reconciled = |text: &str| {
        text.contains(
            "controller_runtime_reconcile_total{controller=\"rediscluster\",result=\"requeue_after\"}",
        ) || text.contains(
            "controller_runtime_reconcile_total{controller=\"rediscluster\",result=\"success\"}",
        )
    };
    assert!(reconciled(
        &plinth_testenv::scrape(first.metrics, "/metrics").await
    ));
    assert!(
        !reconciled(&plinth_testenv::scrape(second.metrics, "/metrics").await),
        "the standby reconciles nothing"
    );

    // SIGTERM: the leader releases the Lease and the standby takes over.
    let mut first = first;
    Command::new("kill")
        .args(["-TERM", &first.child.id().to_string()])
        .status()
        .unwrap();
    let status = first.child.wait().unwrap();
    assert!(status.success(), "SIGTERM exits cleanly: {status}");
    eventually("the standby to lead", || leading(&second)).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "redis-system");
    let holder = leases
        .get("redis-operator")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(holder.starts_with("operator-b_"), "{holder}");
    clusters
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    eventually("the new leader scales the StatefulSet", || async {
        sets.get("cache")
            .await
            .unwrap()
            .spec
            .and_then(|s| s.replicas)
            == Some(2)
    })
    .await;
    drop(second);
    env.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("redis-operator-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
