//! Informers survive a server restart whose compaction makes their resourceVersion too old:
//! the watch is answered 410 Gone, the informer relists (finding what changed meanwhile) and
//! resumes watching.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use plinth_runtime::{Informer, ObjectKey};
use plinth_testenv::TestEnv;
use serde_json::json;

fn key(name: &str) -> ObjectKey {
    ObjectKey {
        namespace: Some("default".into()),
        name: name.into(),
    }
}

async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn config_map(name: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_informer_relists_after_410_and_resumes() {
    let mut env = TestEnv::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let informer = Informer::spawn(api.clone(), Vec::new());
    let cache = informer.cache();
    api.create(&PostParams::default(), &config_map("before"))
        .await
        .unwrap();
    until("the first object", || cache.get(&key("before")).is_some()).await;

    // Written while the server was down, with the history compacted away: no watch can deliver
    // it; only a relist finds it.
    env.restart_with_compaction(&[(
        "/configmaps/default/written-while-down",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "written-while-down", "namespace": "default",
                            "uid": "00000000-0000-0000-0000-00000000cafe",
                            "creationTimestamp": "2026-01-01T00:00:00Z"},
               "data": {"k": "v"}}),
    )])
    .await
    .unwrap();
    until("the relist to find the object written while down", || {
        cache.get(&key("written-while-down")).is_some()
    })
    .await;
    assert!(
        cache.get(&key("before")).is_some(),
        "the relist keeps what still exists"
    );

    // The watch resumed after the relist.
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let mut created = None;
    for _ in 0..100 {
        match api
            .create(&PostParams::default(), &config_map("after"))
            .await
        {
            Ok(cm) => {
                created = Some(cm);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert!(created.is_some(), "the restarted server answers");
    until("a change after the relist", || {
        cache.get(&key("after")).is_some()
    })
    .await;
    env.stop().await;
}
