//! The test server starts in milliseconds and serves what operators need: built-in types,
//! CRDs, and the garbage collector.

#![allow(clippy::unwrap_used)]

use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use plinth_testenv::TestEnv;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_fast_installs_crds_and_collects_garbage() {
    let started = Instant::now();
    let env = TestEnv::start().await.unwrap();
    let startup = started.elapsed();
    eprintln!("test server ready in {startup:?}");
    assert!(env.kubeconfig().exists());

    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gizmos.example.org"},
        "spec": {"group": "example.org", "scope": "Namespaced",
                 "names": {"plural": "gizmos", "kind": "Gizmo"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                   "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer", "default": 1}}}}}}}]}
    }))
    .unwrap();
    env.install_crd(&crd).await.unwrap();
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.org", "v1", "Gizmo"),
        "gizmos",
    );
    let gizmos: Api<DynamicObject> = Api::namespaced_with(env.client(), "default", &resource);
    let gizmo = gizmos
        .create(
            &PostParams::default(),
            &DynamicObject::new("g", &resource).data(serde_json::json!({"spec": {}})),
        )
        .await
        .unwrap();
    assert_eq!(gizmo.data["spec"]["size"], 1, "defaults applied");

    // A ConfigMap owned by the gizmo goes with it.
    let cms: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let mut owned = ConfigMap::default();
    owned.metadata.name = Some("owned".into());
    owned.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "example.org/v1".into(),
            kind: "Gizmo".into(),
            name: "g".into(),
            uid: gizmo.metadata.uid.clone().unwrap(),
            ..Default::default()
        },
    ]);
    cms.create(&PostParams::default(), &owned).await.unwrap();
    gizmos.delete("g", &DeleteParams::default()).await.unwrap();
    plinth_testenv::eventually("the owned ConfigMap to be collected", || async {
        cms.get_opt("owned").await.unwrap().is_none()
    })
    .await;
    env.stop().await;
}
