//! `ObjectClient` writes where the object says (namespaced and cluster-scoped, main resource,
//! `/status` and `/scale`); the manager's controller builder shares informers, refuses
//! duplicate names, and serves the operator's own metrics and health checks.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, Patch};
use kube::{CustomResource, CustomResourceExt};
use plinth_runtime::{Action, Manager, ObjectClient, ReconcileError};
use plinth_testenv::TestEnv;
use serde::{Deserialize, Serialize};
use serde_json::json;

mod common;
use common::{eventually, get};

/// A scalable test type.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, schemars::JsonSchema)]
#[kube(group = "test.plinth.dev", version = "v1", kind = "Pool", namespaced)]
#[kube(status = "PoolStatus")]
#[kube(scale(
    spec_replicas_path = ".spec.replicas",
    status_replicas_path = ".status.replicas"
))]
struct PoolSpec {
    replicas: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, schemars::JsonSchema)]
struct PoolStatus {
    replicas: i32,
}

fn meta(namespace: Option<&str>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(Into::into),
        ..ObjectMeta::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_take_the_namespace_from_the_object() {
    let env = TestEnv::start().await.unwrap();
    env.install_crd(&Pool::crd()).await.unwrap();
    let writer = ObjectClient::new(env.client());

    // A cluster-scoped object, then a namespaced one in it.
    let ns = writer
        .create(&Namespace {
            metadata: meta(None, "team-a"),
            ..Namespace::default()
        })
        .await
        .unwrap();
    assert_eq!(ns.metadata.name.as_deref(), Some("team-a"));
    let cm = ConfigMap {
        metadata: meta(Some("team-a"), "settings"),
        data: Some(BTreeMap::from([("k".into(), "v".into())])),
        ..ConfigMap::default()
    };
    let created = writer.create(&cm).await.unwrap();
    let team_a: Api<ConfigMap> = Api::namespaced(env.client(), "team-a");
    assert!(team_a.get_opt("settings").await.unwrap().is_some());
    let default: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    assert!(default.get_opt("settings").await.unwrap().is_none());

    // Replace with a stale resourceVersion conflicts; with the current one it lands.
    let mut stale = created.clone();
    let patched = writer
        .patch(&created, &Patch::Merge(json!({"data": {"k": "patched"}})))
        .await
        .unwrap();
    stale.data = Some(BTreeMap::from([("k".into(), "stale".into())]));
    match writer.replace(&stale).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409),
        other => panic!("a stale replace must conflict: {other:?}"),
    }
    let mut fresh = patched.clone();
    fresh.data = Some(BTreeMap::from([("k".into(), "replaced".into())]));
    writer.replace(&fresh).await.unwrap();

    // Server-side apply fills apiVersion and kind for a typed object.
    let applied = writer
        .apply(
            &ConfigMap {
                metadata: meta(Some("team-a"), "applied"),
                data: Some(BTreeMap::from([("a".into(), "1".into())])),
                ..ConfigMap::default()
            },
            "client-test",
        )
        .await
        .unwrap();
    let managers: Vec<_> = applied
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, ["client-test"]);

    // Status and scale of a custom resource.
    let pool = writer
        .create(&Pool {
            metadata: meta(Some("team-a"), "workers"),
            spec: PoolSpec { replicas: 1 },
            status: None,
        })
        .await
        .unwrap();
    let with_status = writer
        .patch_status(&pool, &Patch::Merge(json!({"status": {"replicas": 1}})))
        .await
        .unwrap();
    assert_eq!(with_status.status.map(|s| s.replicas), Some(1));
    let scale = writer.scale(&pool, 3).await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    let pools: Api<Pool> = Api::namespaced(env.client(), "team-a");
    assert_eq!(pools.get("workers").await.unwrap().spec.replicas, 3);
    let mut status_only = pool.clone();
    status_only.status = Some(PoolStatus { replicas: 3 });
    writer
        .apply_status(&status_only, "client-test")
        .await
        .unwrap();
    assert_eq!(
        pools
            .get("workers")
            .await
            .unwrap()
            .status
            .map(|s| s.replicas),
        Some(3)
    );

    // Delete is preconditioned on the UID: a namesake created since is left alone.
    writer.delete(&created).await.unwrap();
    eventually("the ConfigMap's deletion", || async {
        team_a.get_opt("settings").await.unwrap().is_none()
    })
    .await;
    writer.create(&cm).await.unwrap();
    match writer.delete(&created).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409, "{s:?}"),
        other => panic!("the namesake must not be deleted: {other:?}"),
    }
    assert!(team_a.get_opt("settings").await.unwrap().is_some());
    env.stop().await;
}

async fn reconcile(
    _: Arc<ConfigMap>,
    seen: Arc<plinth_runtime::metrics::Counter>,
) -> Result<Action, ReconcileError> {
    seen.inc();
    Ok(Action::Done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builder_registers_controllers_metrics_and_checks() {
    let env = TestEnv::start().await.unwrap();
    let client = env.client();
    let mut manager = Manager::new();
    let seen = Arc::new(
        manager
            .metrics()
            .counter("example_reconciles_total", "ConfigMaps reconciled"),
    );
    manager
        .controller(Api::<ConfigMap>::namespaced(client.clone(), "default"))
        .named("copier")
        .run(reconcile, seen.clone())
        .unwrap();
    let duplicate = manager
        .controller(Api::<ConfigMap>::namespaced(client.clone(), "default"))
        .named("copier")
        .run(reconcile, seen.clone());
    assert_eq!(
        duplicate.unwrap_err().to_string(),
        "controller with name copier already exists; controller names must be unique"
    );
    let healthy = Arc::new(AtomicBool::new(true));
    let flag = healthy.clone();
    manager.add_health_check("worker", move || {
        if flag.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err("stuck".into())
        }
    });
    manager.add_ready_check("always", || Ok(()));
    let health = manager
        .bind_health_probes(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let metrics = manager.metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(manager.run(async {
        let _ = stopped.await;
    }));
    let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "one", "namespace": "default"}}))
    .unwrap();
    ObjectClient::new(client.clone()).create(&cm).await.unwrap();
    eventually("a reconcile, and readiness", || async {
        seen.get() >= 1 && get(health, "/readyz").await.starts_with("HTTP/1.1 200 OK")
    })
    .await;
    assert!(get(health, "/healthz").await.starts_with("HTTP/1.1 200 OK"));
    healthy.store(false, Ordering::SeqCst);
    let failing = get(health, "/healthz").await;
    assert!(failing.starts_with("HTTP/1.1 500"), "{failing}");
    assert!(
        failing.contains("[+]ping ok\n[-]worker failed: reason withheld\nhealthz check failed"),
        "{failing}"
    );
    let text = metrics.render();
    assert!(
        text.contains("# TYPE example_reconciles_total counter\nexample_reconciles_total "),
        "{text}"
    );
    assert!(
        text.contains(
            "controller_runtime_reconcile_total{controller=\"copier\",result=\"success\"}"
        ),
        "{text}"
    );
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    env.stop().await;
}
