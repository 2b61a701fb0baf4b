//! `plinth-bench operator-cache`: the memory the RedisCluster operator's caches take per
//! object, with the transform it ships (managedFields dropped), without it, and for the same
//! kinds cached by kube-runtime's reflectors. `clusters` RedisClusters are given the objects
//! the operator would apply (through its own `resources` functions, server-side applied as
//! its field manager) and the server's StatefulSet controller creates their pods (Pending on
//! a server without a node). The operator's caches then sync without reconciling: its
//! manager campaigns for a Lease the benchmark holds, so only the informers run.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, Resource};
use redis_operator::RedisCluster;
use serde_json::json;

use crate::common::Error;

/// The label every cluster's pods carry (the operator's pod informer selects it).
const POD_LABELS: &str = "app.kubernetes.io/name=redis";

async fn create_ok<K>(api: &Api<K>, object: &K) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn apply<K>(api: &Api<K>, name: &str, object: &serde_json::Value) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply(redis_operator::MANAGER).force(),
        &Patch::Apply(object),
    )
    .await?;
    Ok(())
}

/// Creates the clusters and their objects (kept: a second run reuses them) and waits for
/// their pods.
async fn set_up(client: &Client, namespace: &str, clusters: usize) -> Result<(), Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    create_ok(&crds, &redis_operator::types::crd()).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create_ok(
        &namespaces,
        &serde_json::from_value(json!({"metadata": {"name": namespace}}))?,
    )
    .await?;
    let api: Api<RedisCluster> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.list(&ListParams::default().limit(1)).await.is_err() {
        if Instant::now() > deadline {
            return Err("the RedisCluster CRD was not served in 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let crons: Api<CronJob> = Api::namespaced(client.clone(), namespace);
    for i in 0..clusters {
        let name = format!("c{i}");
        let cluster: RedisCluster = serde_json::from_value(json!({
            "apiVersion": "database.example.com/v1alpha1", "kind": "RedisCluster",
            "metadata": {"name": name},
            "spec": {"replicas": 3, "enableAutoFailover": true,
                "backup": {"schedule": "0 3 * * *", "retain": 3}},
        }))?;
        create_ok(&api, &cluster).await?;
        let cluster = api.get(&name).await?;
        let owner = cluster
            .controller_owner_ref(&())
            .ok_or("a cluster without a uid")?;
        apply(
            &configs,
            &format!("{name}-config"),
            &redis_operator::resources::config_map(&cluster, &owner),
        )
        .await?;
        for (service, object) in redis_operator::resources::services(&cluster, &owner) {
            apply(&services, &service, &object).await?;
        }
        apply(
            &sets,
            &name,
            &redis_operator::resources::stateful_set(&cluster, &owner, 3),
        )
        .await?;
        apply(
            &crons,
            &format!("{name}-backup"),
            &redis_operator::resources::backup_cron_job(&cluster, &owner, "0 3 * * *"),
        )
        .await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let count = pods
            .list_metadata(&ListParams::default().labels(POD_LABELS))
            .await?
            .items
            .len();
        if count >= clusters * 3 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("only {count} of {} pods in 600 s", clusters * 3).into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How many `K` there are in every namespace (with `labels`, if any).
async fn count<K>(client: &Client, labels: Option<&str>) -> Result<usize, Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut list = ListParams::default();
    if let Some(labels) = labels {
        list = list.labels(labels);
    }
    Ok(Api::<K>::all(client.clone())
        .list_metadata(&list)
        .await?
        .items
        .len())
}

/// How many objects the operator's informers hold (every namespace, as they watch).
async fn cached_objects(client: &Client) -> Result<usize, Error> {
    Ok(count::<RedisCluster>(client, None).await?
        + count::<StatefulSet>(client, None).await?
        + count::<Service>(client, None).await?
        + count::<ConfigMap>(client, None).await?
        + count::<CronJob>(client, None).await?
        + count::<Job>(client, None).await?
        + count::<Pod>(client, Some(POD_LABELS)).await?)
}

/// Whether the manager's `/readyz` on `port` says its caches have synced.
async fn ready(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    let request = "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text).await;
    text.starts_with("HTTP/1.1 200")
}

/// The operator's own informers (its `register`), synced while another identity holds its
/// Lease; returns what keeps them alive.
async fn operator_caches(client: &Client, keep: bool) -> Result<Stop, Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    );
    let lease = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some("operator-cache-bench".into()),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
            holder_identity: Some("plinth-bench".into()),
            lease_duration_seconds: Some(3600),
            renew_time: Some(now),
            ..Default::default()
        }),
    };
    leases
        .patch(
            "operator-cache-bench",
            &PatchParams::apply("plinth-bench").force(),
            &Patch::Apply(&lease),
        )
        .await?;
    let elector = plinth_runtime::LeaderElector::new(
        client.clone(),
        "default",
        "operator-cache-bench",
        "bench-operator",
    );
    let mut manager = plinth_runtime::Manager::new().leader_election(elector);
    let address = manager
        .bind_metrics(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .await?;
    let mut context = redis_operator::Context::new(client.clone(), "bench", manager.metrics());
    context.cache_managed_fields = keep;
    redis_operator::register(&mut manager, context)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(manager.run(async {
        let _ = stopped.await;
    }));
    let deadline = Instant::now() + Duration::from_secs(300);
    while !ready(address.port()).await {
        if Instant::now() > deadline {
            return Err("the operator's caches did not sync in 300 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(Stop(Some(stop)))
}

/// Stops the manager when dropped.
struct Stop(Option<tokio::sync::oneshot::Sender<()>>);

impl Drop for Stop {
    fn drop(&mut self) {
        if let Some(stop) = self.0.take() {
            let _ = stop.send(());
        }
    }
}

/// A kube-runtime reflector store of `api` (all objects, as fetched), synced.
async fn reflected<K>(
    api: Api<K>,
    config: watcher::Config,
) -> Result<(reflector::Store<K>, tokio::task::JoinHandle<()>), Error>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    use futures::StreamExt;
    let (store, writer) = reflector::store();
    let task = tokio::spawn(
        watcher(api, config)
            .default_backoff()
            .reflect(writer)
            .for_each(|_| async {}),
    );
    store.wait_until_ready().await?;
    Ok((store, task))
}

/// The same kinds in kube-runtime reflector stores (what an operator on kube-runtime caches
/// to read its owned objects), without transforms.
async fn kube_caches(client: &Client) -> Result<Vec<tokio::task::JoinHandle<()>>, Error> {
    let all = watcher::Config::default;
    let mut tasks = Vec::new();
    let (_, t) = reflected(Api::<RedisCluster>::all(client.clone()), all()).await?;
    tasks.push(t);
    let (_, t) = reflected(Api::<StatefulSet>::all(client.clone()), all()).await?;
    tasks.push(t);
    let (_, t) = reflected(Api::<Service>::all(client.clone()), all()).await?;
    tasks.push(t);
    let (_, t) = reflected(Api::<ConfigMap>::all(client.clone()), all()).await?;
    tasks.push(t);
    let (_, t) = reflected(Api::<CronJob>::all(client.clone()), all()).await?;
    tasks.push(t);
    let (_, t) = reflected(Api::<Job>::all(client.clone()), all()).await?;
    tasks.push(t);
    let (_, t) = reflected(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().labels(POD_LABELS),
    )
    .await?;
    tasks.push(t);
    Ok(tasks)
}

/// Runs the measurement for `runtime` (`lean`: the operator as shipped; `full`: its caches
/// keeping managedFields; `kube`: kube-runtime reflectors) and prints one table row.
///
/// # Errors
/// Any API failure, or caches that do not sync.
pub(crate) async fn run(
    client: Client,
    namespace: &str,
    clusters: usize,
    runtime: &str,
) -> Result<(), Error> {
    if !["lean", "full", "kube"].contains(&runtime) {
        return Err(format!("unknown runtime {runtime:?}: lean, full or kube").into());
    }
    set_up(&client, namespace, clusters).await?;
    let objects = cached_objects(&client).await?;
    // Settle the client's own allocations before the baseline.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let baseline = crate::reconcile::rss_kib();
    let started = Instant::now();
    let (held, tasks) = if runtime == "kube" {
        (None, kube_caches(&client).await?)
    } else {
        (
            Some(operator_caches(&client, runtime == "full").await?),
            Vec::new(),
        )
    };
    let synced = started.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let grown = crate::reconcile::rss_kib().saturating_sub(baseline);
    let label = match runtime {
        "lean" => "redis-operator (managedFields stripped, as shipped)",
        "full" => "redis-operator, caches keeping managedFields",
        _ => "kube-runtime reflectors, same kinds",
    };
    println!(
        "| {label} | {clusters} | {objects} | {:.2} s | {:.1} MiB | {:.2} KiB |",
        synced.as_secs_f64(),
        grown as f64 / 1024.0,
        grown as f64 / objects.max(1) as f64
    );
    drop(held);
    for task in tasks {
        task.abort();
    }
    Ok(())
}
