//! The failover client sends each request to the first server that answers: past a server
//! that refuses connections, reads and writes alike reach the live one, and later requests
//! start there; with every server down, the error is the transport's.

#![allow(clippy::unwrap_used)]

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use plinth_testenv::TestEnv;

async fn config(env: &TestEnv) -> kube::Config {
    let kubeconfig = Kubeconfig::read_from(env.kubeconfig()).unwrap();
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap()
}

/// A config like `live`'s for a loopback port nothing listens on.
fn dead(live: &kube::Config) -> kube::Config {
    let mut dead = live.clone();
    let port = plinth_testenv::free_port();
    dead.cluster_url = format!("https://127.0.0.1:{port}").parse().unwrap();
    dead
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_past_a_dead_server_to_a_live_one() {
    let env = TestEnv::start().await.unwrap();
    let live = config(&env).await;
    let client = plinth_runtime::failover::client(vec![dead(&live), live.clone()]).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    // A write that never reached the dead server is sent on: it happens once.
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "through-failover"}, "data": {"k": "v"}
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &cm).await.unwrap();
    assert_eq!(created.data.unwrap()["k"], "v");
    let listed = api.list(&Default::default()).await.unwrap();
    assert_eq!(
        listed
            .items
            .iter()
            .filter(|cm| cm.metadata.name.as_deref() == Some("through-failover"))
            .count(),
        1
    );
    // An API error is an answer, not a reason to try elsewhere: it comes back as it is.
    let again = api.create(&PostParams::default(), &cm).await.unwrap_err();
    assert!(
        matches!(&again, kube::Error::Api(status) if status.code == 409),
        "{again:?}"
    );

    // With no server answering, the client says why.
    let nowhere = plinth_runtime::failover::client(vec![dead(&live), dead(&live)]).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(nowhere, "default");
    let error = api.list(&Default::default()).await.unwrap_err();
    assert!(!matches!(error, kube::Error::Api(_)), "{error:?}");
    assert!(matches!(
        plinth_runtime::failover::client(Vec::new()),
        Err(plinth_runtime::failover::FailoverError::NoServers)
    ));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_names_every_server_of_its_control_plane() {
    let env = TestEnv::start().await.unwrap();
    let mut kubeconfig = Kubeconfig::read_from(env.kubeconfig()).unwrap();
    // A second context on another server of the same cluster (same CA and user), a third on
    // a foreign cluster (another CA): the failover configs take the first two only.
    let home = kubeconfig.contexts[0].clone();
    let home_cluster = kubeconfig.clusters[0].clone();
    let port = plinth_testenv::free_port();
    let mut second_cluster = home_cluster.clone();
    second_cluster.name = "second".into();
    if let Some(cluster) = second_cluster.cluster.as_mut() {
        cluster.server = Some(format!("https://127.0.0.1:{port}"));
    }
    let mut foreign_cluster = second_cluster.clone();
    foreign_cluster.name = "foreign".into();
    if let Some(cluster) = foreign_cluster.cluster.as_mut() {
        cluster.certificate_authority_data = Some("Zm9yZWlnbg==".into());
        cluster.server = Some("https://127.0.0.2:1".into());
    }
    let mut second = home.clone();
    second.name = "second".into();
    second.context.as_mut().unwrap().cluster = "second".into();
    let mut foreign = home.clone();
    foreign.name = "foreign".into();
    foreign.context.as_mut().unwrap().cluster = "foreign".into();
    kubeconfig
        .clusters
        .extend([second_cluster, foreign_cluster]);
    kubeconfig.contexts.extend([second, foreign]);
    kubeconfig.current_context = Some("second".into());

    let configs = plinth_runtime::failover::configs_from_kubeconfig(&kubeconfig)
        .await
        .unwrap();
    let urls = configs
        .iter()
        .map(|c| c.cluster_url.to_string())
        .collect::<Vec<_>>();
    let home_url = home_cluster.cluster.unwrap().server.unwrap();
    assert_eq!(
        urls.iter()
            .map(|u| u.trim_end_matches('/'))
            .collect::<Vec<_>>(),
        [
            format!("https://127.0.0.1:{port}").as_str(),
            home_url.trim_end_matches('/')
        ],
        "the current context first, then its control plane's other servers"
    );
    // The current server does not answer: the client reaches the other.
    let client = plinth_runtime::failover::client(configs).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.list(&Default::default()).await.unwrap();
    env.stop().await;
}
