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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_agent_runs_a_deployments_pods_as_processes() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Pod;
    let env = TestEnv::start_with_node("testenv-node").await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(env.client(), "default");
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "main", "image": "busybox",
                                  "command": ["sh", "-c", "echo serving on $POD_IP; exec sleep 3600"],
                                  "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]}}}
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    plinth_testenv::eventually("both replicas are available", || async {
        deployments
            .get("web")
            .await
            .ok()
            .and_then(|d| d.status)
            .and_then(|s| s.available_replicas)
            == Some(2)
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    let listed = pods.list(&Default::default()).await.unwrap();
    assert_eq!(listed.items.len(), 2);
    for pod in &listed.items {
        let status = pod.status.clone().unwrap_or_default();
        let ip = status.pod_ip.unwrap_or_default();
        assert!(ip.starts_with("127."), "a loopback pod address: {ip}");
        assert_eq!(
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("testenv-node")
        );
        let name = pod.metadata.name.clone().unwrap_or_default();
        plinth_testenv::eventually("the pod's log reaches kube's log API", || {
            let (pods, name) = (pods.clone(), name.clone());
            async move {
                !pods
                    .logs(&name, &Default::default())
                    .await
                    .unwrap_or_default()
                    .is_empty()
            }
        })
        .await;
        let logged = pods.logs(&name, &Default::default()).await.unwrap();
        assert_eq!(logged.trim(), format!("serving on {ip}"));
    }
    env.stop().await;
}

/// The faulty client: refusals with the status asked for (and only as many times as asked),
/// held-back requests that go once their rule is removed, unreachable servers, watches that
/// end when dropped — and a record of what was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_refuse_hold_back_and_drop_watches() {
    use futures::StreamExt;
    use kube::api::WatchParams;
    use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
    let env = TestEnv::start().await.unwrap();
    let faults = Faults::new();
    let api: Api<ConfigMap> = Api::namespaced(faults.client(env.client()), "default");
    let cm = |name: &str| {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm
    };

    // A refusal with kube's Status, spent after one request.
    faults.inject(
        Rule::new(Fault::status(429, "TooManyRequests", "injected"))
            .writes()
            .resource("configmaps")
            .times(1),
    );
    let refused = api
        .create(&PostParams::default(), &cm("a"))
        .await
        .unwrap_err();
    match refused {
        kube::Error::Api(status) => {
            assert_eq!(
                (status.code, status.reason.as_str()),
                (429, "TooManyRequests")
            );
        }
        other => panic!("expected a Status, got {other:?}"),
    }
    api.create(&PostParams::default(), &cm("a")).await.unwrap();

    // A held-back request goes once its rule is removed.
    let held = faults.inject(Rule::new(Fault::Hang).verbs(&[Verb::Get]).name("a"));
    let get = tokio::spawn({
        let api = api.clone();
        async move { api.get("a").await }
    });
    plinth_testenv::eventually("the get to be held", || async {
        faults.requests().iter().any(|r| r.verb == Verb::Get)
    })
    .await;
    assert!(!get.is_finished(), "held back while the rule stands");
    faults.remove(held);
    assert_eq!(
        get.await.unwrap().unwrap().metadata.name.as_deref(),
        Some("a")
    );

    // An unreachable server: a transport error, nothing stored.
    let unreachable = faults.inject(Rule::new(Fault::Unreachable).verbs(&[Verb::Create]));
    assert!(matches!(
        api.create(&PostParams::default(), &cm("b")).await,
        Err(kube::Error::Service(_))
    ));
    faults.remove(unreachable);
    let direct: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    assert!(direct.get_opt("b").await.unwrap().is_none());

    // A dropped watch ends as a closed one does.
    let mut events = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    assert!(events.next().await.is_some(), "the watch delivers");
    faults.drop_watches(Some("configmaps"));
    let ended = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while events.next().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the dropped watch ended");

    let verbs: Vec<Verb> = faults.requests().iter().map(|r| r.verb).collect();
    assert_eq!(
        verbs,
        [
            Verb::Create,
            Verb::Create,
            Verb::Get,
            Verb::Create,
            Verb::Watch
        ]
    );
    env.stop().await;
}
