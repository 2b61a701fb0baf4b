//! The mirror operator end to end on an in-process Plinth: copies appear, follow the source,
//! are repaired, leave namespaces no longer targeted, and go with the mirror.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::CustomResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use mirror_operator::{ConfigMirror, ConfigMirrorSpec};
use plinth_testenv::{TestEnv, eventually};
use serde_json::json;

async fn copy_data(client: &kube::Client, namespace: &str) -> Option<BTreeMap<String, String>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    api.get_opt("settings-mirror")
        .await
        .unwrap()
        .map(|cm| cm.data.unwrap_or_default())
}

fn data(value: &str) -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([("level".to_owned(), value.to_owned())]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_follow_the_source_the_targets_and_the_mirror() {
    // ANCHOR: start
    let env = TestEnv::start().await.unwrap();
    env.install_crd(&ConfigMirror::crd()).await.unwrap();
    let client = env.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in ["team-a", "team-b"] {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        namespaces
            .create(&PostParams::default(), &serde_json::from_value(ns).unwrap())
            .await
            .unwrap();
    }
    let mut manager = plinth_runtime::Manager::new();
    mirror_operator::register(&mut manager, &client).unwrap();
    let metrics = manager.metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(manager.run(async {
        let _ = stopped.await;
    }));
    // ANCHOR_END: start

    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let source = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings"}, "data": {"level": "one"}});
    configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(source).unwrap(),
        )
        .await
        .unwrap();
    let mirrors: Api<ConfigMirror> = Api::namespaced(client.clone(), "default");
    let spec = ConfigMirrorSpec {
        source: "settings".into(),
        targets: vec!["team-a".into(), "team-b".into()],
    };
    mirrors
        .create(
            &PostParams::default(),
            &ConfigMirror::new("settings-mirror", spec),
        )
        .await
        .unwrap();
    eventually("copies in both namespaces", || async {
        copy_data(&client, "team-a").await == data("one")
            && copy_data(&client, "team-b").await == data("one")
    })
    .await;
    eventually("the status to count them", || async {
        mirrors
            .get_status("settings-mirror")
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.copies == 2)
    })
    .await;

    // The source changes: so do the copies.
    let edit = Patch::Merge(json!({"data": {"level": "two"}}));
    configmaps
        .patch("settings", &PatchParams::default(), &edit)
        .await
        .unwrap();
    eventually("the copies to follow", || async {
        copy_data(&client, "team-a").await == data("two")
            && copy_data(&client, "team-b").await == data("two")
    })
    .await;

    // Someone edits a copy: it is put back.
    let team_b: Api<ConfigMap> = Api::namespaced(client.clone(), "team-b");
    let vandal = Patch::Merge(json!({"data": {"level": "vandalised"}}));
    team_b
        .patch("settings-mirror", &PatchParams::default(), &vandal)
        .await
        .unwrap();
    eventually("the copy repaired", || async {
        copy_data(&client, "team-b").await == data("two")
    })
    .await;

    // A target dropped: its copy goes.
    let retarget = Patch::Merge(json!({"spec": {"targets": ["team-a"]}}));
    mirrors
        .patch("settings-mirror", &PatchParams::default(), &retarget)
        .await
        .unwrap();
    eventually("the dropped copy gone", || async {
        copy_data(&client, "team-b").await.is_none()
    })
    .await;
    assert_eq!(copy_data(&client, "team-a").await, data("two"));

    // The mirror deleted: the finalizer removes the remaining copy, then the mirror goes.
    mirrors
        .delete("settings-mirror", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the mirror and its copies gone", || async {
        mirrors.get_opt("settings-mirror").await.unwrap().is_none()
            && copy_data(&client, "team-a").await.is_none()
    })
    .await;
    let text = metrics.render();
    assert!(
        text.contains(
            "controller_runtime_reconcile_total{controller=\"configmirror\",result=\"success\"}"
        ),
        "{text}"
    );
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("the manager stops")
        .unwrap()
        .unwrap();
    env.stop().await;
}
