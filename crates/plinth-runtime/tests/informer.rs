//! Informers survive a server restart whose compaction makes their resourceVersion too old:
//! the watch is answered 410 Gone, the informer relists (finding what changed meanwhile) and
//! resumes watching.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

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

mod common;

/// [`common::eventually`] for a condition that needs no awaiting.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    common::eventually(what, || std::future::ready(check())).await;
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

/// An informer can watch a selection (label selector) and cache a slimmer object (a transform
/// stripping managedFields): objects entering and leaving the selection come and go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_and_transforms_shape_the_cache() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Patch, PatchParams, PostParams};
    use plinth_runtime::{InformerOptions, ObjectKey};
    let env = plinth_testenv::TestEnv::start().await.unwrap();
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(env.client(), "default");
    let labelled = |name: &str, app: Option<&str>| {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.labels = app.map(|a| [("app".to_owned(), a.to_owned())].into());
        cm
    };
    api.create(&PostParams::default(), &labelled("a", Some("web")))
        .await
        .unwrap();
    api.create(&PostParams::default(), &labelled("b", None))
        .await
        .unwrap();
    let informer = plinth_runtime::Informer::spawn_with(
        api.clone(),
        InformerOptions::default()
            .labels("app=web")
            .strip_managed_fields(),
    );
    let cache = informer.cache();
    cache.wait_synced().await;
    let key = |name: &str| ObjectKey {
        namespace: Some("default".into()),
        name: name.into(),
    };
    let a = cache.get(&key("a")).expect("the selected object is cached");
    assert!(
        a.metadata.managed_fields.is_none(),
        "managedFields stripped"
    );
    assert!(cache.get(&key("b")).is_none(), "the other is not");
    // b enters the selection, a leaves it.
    api.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"labels": {"app": "web"}}})),
    )
    .await
    .unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"labels": {"app": null}}})),
    )
    .await
    .unwrap();
    until("the selection to follow the labels", || {
        cache.get(&key("b")).is_some() && cache.get(&key("a")).is_none()
    })
    .await;
    env.stop().await;
}

/// A metadata-only informer (`Api<PartialObjectMeta<K>>`: the server answers
/// `PartialObjectMetadata`) caches names, labels and owners without the objects' bodies, through
/// the initial list and the watch; the manager keeps it apart from the full informer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_informers_cache_metadata() {
    use kube::core::PartialObjectMeta;
    let env = TestEnv::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let mut big = config_map("big");
    big.data = Some([("payload".to_owned(), "x".repeat(64 * 1024))].into());
    api.create(&PostParams::default(), &big).await.unwrap();
    let mut manager = plinth_runtime::Manager::new();
    let meta_api = || Api::<PartialObjectMeta<ConfigMap>>::namespaced(env.client(), "default");
    let metadata = manager.informer(meta_api).cache();
    let full = manager.informer(|| api.clone()).cache();
    until("both caches to list the object", || {
        metadata.get(&key("big")).is_some() && full.get(&key("big")).is_some()
    })
    .await;
    let cached = metadata.get(&key("big")).unwrap();
    assert_eq!(cached.metadata.name.as_deref(), Some("big"));
    let as_json = serde_json::to_string(&*cached).unwrap();
    assert!(
        as_json.len() < 4096 && !as_json.contains("xxxx"),
        "{as_json}"
    );
    assert!(full.get(&key("big")).unwrap().data.is_some());

    // Watch events arrive as metadata too.
    api.patch(
        "big",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"labels": {"tier": "gold"}}})),
    )
    .await
    .unwrap();
    let mut later = config_map("later");
    later.metadata.labels = Some([("tier".to_owned(), "silver".to_owned())].into());
    api.create(&PostParams::default(), &later).await.unwrap();
    until("the label and the new object", || {
        let label = |name: &str| {
            metadata
                .get(&key(name))
                .and_then(|o| o.metadata.labels.clone())
                .and_then(|l| l.get("tier").cloned())
        };
        label("big").as_deref() == Some("gold") && label("later").as_deref() == Some("silver")
    })
    .await;
    env.stop().await;
}
