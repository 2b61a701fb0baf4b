//! The Rust `kube` crate against `plinth serve`: typed and dynamic APIs, errors, and the
//! kube-runtime watcher with streaming lists (watch-list), as operators use them.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Backend, Plinth};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher;
use serde_json::json;

async fn client(plinth: &Plinth) -> Client {
    plinth.kube_client().await
}

fn config_map(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    cm.data = Some(BTreeMap::from([("k".to_owned(), "v".to_owned())]));
    cm
}

async fn typed_and_dynamic_apis(plinth: &Plinth) {
    let client = client(plinth).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"kube-system".to_owned()), "{names:?}");

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = cms
        .create(
            &PostParams::default(),
            &config_map("kube-a", &[("app", "x")]),
        )
        .await
        .unwrap();
    cms.create(
        &PostParams::default(),
        &config_map("kube-b", &[("app", "y")]),
    )
    .await
    .unwrap();
    let selected = cms
        .list(&ListParams::default().labels("app=x"))
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 1);
    assert_eq!(selected.items[0].metadata.name.as_deref(), Some("kube-a"));

    let patched = cms
        .patch(
            "kube-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"extra": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched
            .data
            .as_ref()
            .unwrap()
            .get("extra")
            .map(String::as_str),
        Some("1")
    );

    // A replace with the stale object conflicts.
    let stale = cms
        .replace("kube-a", &PostParams::default(), &created)
        .await
        .unwrap_err();
    match stale {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409);
            assert_eq!(status.reason, "Conflict");
        }
        other => panic!("expected a 409, got {other:?}"),
    }
    match cms.get("nope").await.unwrap_err() {
        kube::Error::Api(status) => {
            assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"))
        }
        other => panic!("expected a 404, got {other:?}"),
    }
    cms.delete("kube-b", &DeleteParams::default())
        .await
        .unwrap();

    // A CRD, then its custom resources through the dynamic API.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.org"},
        "spec": {"group": "example.org", "scope": "Cluster",
                 "names": {"plural": "gadgets", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let gvk = GroupVersionKind::gvk("example.org", "v1", "Gadget");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "gadgets");
    let gadgets: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut gadget = DynamicObject::new("g1", &resource).data(json!({"spec": {"size": 3}}));
    gadget.metadata.labels = Some(BTreeMap::from([("tier".to_owned(), "gold".to_owned())]));
    let mut created = None;
    for _ in 0..50 {
        match gadgets.create(&PostParams::default(), &gadget).await {
            Ok(g) => {
                created = Some(g);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let created = created.expect("the CRD's endpoint is served within 5 s");
    assert_eq!(created.data["spec"]["size"], 3);
    assert_eq!(created.metadata.generation, Some(1));
    let listed = gadgets
        .list(&ListParams::default().labels("tier=gold"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
}

async fn watcher_with_streaming_lists(plinth: &Plinth) {
    let client = client(plinth).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &config_map("seen-first", &[("watch", "me")]),
    )
    .await
    .unwrap();
    // kube-rs starts a streaming list at resourceVersion 0 ("any state": the watch cache's,
    // which may not have the create yet — as kube-apiserver's). A consistent list brings the
    // cache up to the create only where the store's progress reports are trusted (not
    // Debian's etcd 3.4.23, where it is read from etcd): wait until a list at
    // resourceVersion 0 — the same cache — shows it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let any = cms
            .list(&ListParams::default().labels("watch=me").match_any())
            .await
            .unwrap();
        if any
            .items
            .iter()
            .any(|cm| cm.metadata.name.as_deref() == Some("seen-first"))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the watch cache never showed the create"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let config = watcher::Config::default()
        .labels("watch=me")
        .streaming_lists();
    let mut events = watcher(cms.clone(), config).boxed();
    let mut initial = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), events.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            watcher::Event::Init => {}
            watcher::Event::InitApply(cm) => initial.push(cm.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected event before the initial list ended: {other:?}"),
        }
    }
    assert_eq!(initial, ["seen-first"]);
    cms.create(
        &PostParams::default(),
        &config_map("seen-later", &[("watch", "me")]),
    )
    .await
    .unwrap();
    match tokio::time::timeout(Duration::from_secs(10), events.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        watcher::Event::Apply(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("seen-later")),
        other => panic!("expected the new object, got {other:?}"),
    }
    cms.delete("seen-later", &DeleteParams::default())
        .await
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(10), events.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        watcher::Event::Delete(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("seen-later")),
        other => panic!("expected the deletion, got {other:?}"),
    }
}

/// `Patch::Apply` as controllers use it: create by applying, conflicts, force, and the status
/// subresource applied by another manager.
async fn server_side_apply(plinth: &Plinth) {
    let client = client(plinth).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let config = |value: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"},
               "data": {"owner": value}})
    };
    let created = cms
        .patch(
            "applied",
            &PatchParams::apply("controller-a"),
            &Patch::Apply(config("a")),
        )
        .await
        .unwrap();
    assert_eq!(created.data.unwrap()["owner"], "a");
    let entries = created.metadata.managed_fields.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].manager.as_deref(), Some("controller-a"));
    assert_eq!(entries[0].operation.as_deref(), Some("Apply"));
    let conflict = cms
        .patch(
            "applied",
            &PatchParams::apply("controller-b"),
            &Patch::Apply(config("b")),
        )
        .await
        .unwrap_err();
    match conflict {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409);
            assert_eq!(status.reason, "Conflict");
            assert_eq!(
                status.message,
                r#"Apply failed with 1 conflict: conflict with "controller-a": .data.owner"#
            );
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let forced = cms
        .patch(
            "applied",
            &PatchParams::apply("controller-b").force(),
            &Patch::Apply(config("b")),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["owner"], "b");
    let managers: Vec<String> = forced
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|e| e.manager)
        .collect();
    assert_eq!(managers, vec!["controller-b".to_owned()]);
    // A controller applies a custom resource's status through /status; the spec's owner is
    // untouched, and the status entry names the subresource.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "dials.example.org"},
        "spec": {"group": "example.org", "scope": "Namespaced",
                 "names": {"plural": "dials", "kind": "Dial"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": {"type": "object", "properties": {"level": {"type": "integer"}}},
                                   "status": {"type": "object", "properties": {"seen": {"type": "integer"}}}}}}}]}
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let gvk = GroupVersionKind::gvk("example.org", "v1", "Dial");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "dials");
    let dials: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let dial = json!({"apiVersion": "example.org/v1", "kind": "Dial", "metadata": {"name": "d1"},
                      "spec": {"level": 3}, "status": {"seen": 99}});
    let mut applied = None;
    for _ in 0..50 {
        match dials
            .patch("d1", &PatchParams::apply("user"), &Patch::Apply(&dial))
            .await
        {
            Ok(d) => {
                applied = Some(d);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let applied = applied.expect("the CRD's endpoint is served within 5 s");
    assert!(
        applied.data.get("status").is_none(),
        "the main resource ignores status: {applied:?}"
    );
    let status = json!({"apiVersion": "example.org/v1", "kind": "Dial", "metadata": {"name": "d1"},
                        "status": {"seen": 3}});
    let observed = dials
        .patch_status(
            "d1",
            &PatchParams::apply("dial-controller"),
            &Patch::Apply(&status),
        )
        .await
        .unwrap();
    assert_eq!(observed.data["status"]["seen"], 3);
    assert_eq!(observed.data["spec"]["level"], 3);
    let entries = observed.metadata.managed_fields.unwrap();
    let status_entry = entries
        .iter()
        .find(|e| e.manager.as_deref() == Some("dial-controller"))
        .unwrap();
    assert_eq!(status_entry.subresource.as_deref(), Some("status"));
    assert!(entries.iter().any(|e| e.manager.as_deref() == Some("user")));

    // Without a field manager, an apply is refused.
    let unnamed = cms
        .patch(
            "applied",
            &PatchParams::default(),
            &Patch::Apply(config("c")),
        )
        .await
        .unwrap_err();
    match unnamed {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 422);
            assert!(
                status
                    .message
                    .contains("fieldManager: Required value: is required for apply patch"),
                "{}",
                status.message
            );
        }
        other => panic!("expected 422, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_crate_on_embedded_storage() {
    let plinth = Plinth::start(Backend::Embedded);
    typed_and_dynamic_apis(&plinth).await;
    watcher_with_streaming_lists(&plinth).await;
    server_side_apply(&plinth).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_crate_on_etcd() {
    let plinth = Plinth::start_etcd().await;
    typed_and_dynamic_apis(&plinth).await;
    watcher_with_streaming_lists(&plinth).await;
    server_side_apply(&plinth).await;
}
