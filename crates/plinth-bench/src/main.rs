//! `plinth-bench`: a load generator that talks to any Kubernetes API server through a
//! kubeconfig, so that the same figures can be taken against Plinth and against a cluster.
//!
//! `plinth-bench load` measures, on a throw-away CRD (`benchobjects.bench.plinth.dev`) it
//! installs and removes: creates/s of a 1 KiB custom resource at 1, 16 and 64 concurrent
//! clients; gets/s; the latency of listing 10,000 objects; watch delivery latency p50/p99 with
//! 100 and 1,000 watchers; and the server's resident memory when given its pid.
//! `plinth-bench ha` starts N servers on a three-member etcd and measures creates and watch
//! latency across them and the controllers' failover.
//! `plinth-bench startup` measures how soon `plinth serve` answers `/readyz` after it is started.
//! `plinth-bench gc` measures reads while the garbage collector deletes 50,000 dependents.
//! `plinth-bench reads` measures the server time of lists (JSON, protobuf, selected,
//! paginated) of 10,000 1-KiB ConfigMaps and the memory they take.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, Config};
use serde_json::json;

mod admission;
mod deployments;
mod failover;
mod fairness;
mod gc;
mod ha;
mod operator_cache;
mod pods;
mod reads;
mod reconcile;

#[derive(Parser, Debug)]
#[command(
    name = "plinth-bench",
    version,
    about = "Load generator for Kubernetes API servers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Loads the server the kubeconfig points at.
    Load {
        /// Kubeconfig of the server under test (default: $KUBECONFIG, then ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Seconds per create/get measurement.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Objects in the list measurement.
        #[arg(long, default_value_t = 10_000)]
        list_objects: usize,
        /// Watcher counts for the watch-latency measurements.
        #[arg(long, value_delimiter = ',', default_value = "100,1000")]
        watchers: Vec<usize>,
        /// The server's process id, to report its resident memory.
        #[arg(long)]
        pid: Option<u32>,
        /// Namespace to work in.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// Writes to other objects first (history in the store), as `reads --history`.
        #[arg(long, default_value_t = 0)]
        history: usize,
    },
    /// Reconcile throughput, latency (create → status written) and cache memory per object, on
    /// plinth-runtime or kube-runtime (run once per runtime: memory is this process's).
    Reconcile {
        /// Kubeconfig of the server (default: $KUBECONFIG, then ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// `plinth`, `plinth-stripped` (its cache drops managedFields) or `kube`.
        #[arg(long, default_value = "plinth")]
        runtime: String,
        /// How many objects.
        #[arg(long, default_value_t = 1000)]
        objects: usize,
    },
    /// Reads during a garbage collection: GET latency while the collector deletes the
    /// dependents of deleted owners, and how long it takes.
    Gc {
        /// Kubeconfig of the server (default: $KUBECONFIG, then ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Owners (ConfigMaps).
        #[arg(long, default_value_t = 10_000)]
        owners: usize,
        /// Dependents per owner.
        #[arg(long, default_value_t = 5)]
        dependents: usize,
        /// Namespace to work in.
        #[arg(long, default_value = "default")]
        namespace: String,
    },
    /// Server time of reads: full lists of 1-KiB ConfigMaps (JSON and protobuf, read to the
    /// last byte, not decoded), a label-selected list, a paginated traversal, memory per object.
    Reads {
        /// Kubeconfig of the server (default: $KUBECONFIG, then ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// ConfigMaps to fill the namespace with.
        #[arg(long, default_value_t = 10_000)]
        objects: usize,
        /// Writes to other objects before the reads are timed (history in the store).
        #[arg(long, default_value_t = 0)]
        history: usize,
        /// The server's process id, to report its resident memory.
        #[arg(long)]
        pid: Option<u32>,
    },
    /// One user floods the server past its in-flight limit while another reads: the other's
    /// latency and refusals (fair queuing). Both users must be in the server's token file.
    Fairness {
        /// The administrator's kubeconfig (binds the users to `view`, fills a namespace).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// The flooding user, as `name:token`.
        #[arg(long, default_value = "flood:flood-token")]
        flood: String,
        /// The other user, as `name:token`.
        #[arg(long, default_value = "calm:calm-token")]
        other: String,
        /// Concurrent clients of the flood.
        #[arg(long, default_value_t = 100)]
        clients: usize,
        /// Seconds the other user is measured under the flood.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// What admission webhooks cost a create: latency and throughput with 0, 1 and 5
    /// validating webhooks (served by this process) in force.
    Admission {
        /// Kubeconfig of the server (default: $KUBECONFIG, then ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Sequential creates per webhook count.
        #[arg(long, default_value_t = 500)]
        requests: usize,
        /// Webhook counts, ascending.
        #[arg(long, value_delimiter = ',', default_value = "0,1,5")]
        webhooks: Vec<usize>,
    },
    /// Starts pods on the server's node agents: pods Ready per second, create → Ready
    /// latency, memory per pod.
    Pods {
        /// Kubeconfig of the server under test.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Namespace to create them in.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// How many.
        #[arg(long, default_value_t = 100)]
        pods: usize,
        /// The process running the node agent (`plinth serve`'s), for its memory.
        #[arg(long)]
        agent_pid: Option<u32>,
    },
    /// A Deployment on the server's node agents: the time until its replicas are available
    /// and until a rolling update finishes, the server's memory.
    Deployments {
        /// Kubeconfig of the server under test.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Namespace to create it in.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// Replicas.
        #[arg(long, default_value_t = 100)]
        replicas: usize,
        /// The server's process (`plinth serve`, which runs the controllers), for its memory.
        #[arg(long)]
        server_pid: Option<u32>,
        /// Only create the pods (a server with `--no-node`): the controllers' memory per pod.
        #[arg(long)]
        pending: bool,
    },
    /// A RedisCluster's failover on this machine's node agent, with the RedisCluster
    /// operator running: SIGKILLs the primary's process `kills` times and times until a
    /// write through the `-primary` Service is accepted again (p50/p99).
    RedisFailover {
        /// Kubeconfig of the server under test.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Namespace to create the cluster in.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// How many times the primary is killed.
        #[arg(long, default_value_t = 20)]
        kills: usize,
        /// Hang the primary (SIGSTOP, resumed after) instead of killing it.
        #[arg(long)]
        hang: bool,
    },
    /// The RedisCluster operator's cache memory per object: as shipped (managedFields
    /// stripped), keeping managedFields, and kube-runtime reflectors of the same kinds.
    OperatorCache {
        /// Kubeconfig of the server under test.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Namespace of the clusters (kept between runs).
        #[arg(long, default_value = "cache-bench")]
        namespace: String,
        /// How many RedisClusters (each with its StatefulSet, 3 Services, ConfigMap,
        /// CronJob and 3 pods).
        #[arg(long, default_value_t = 300)]
        clusters: usize,
        /// `lean`, `full` or `kube`.
        #[arg(long, default_value = "lean")]
        runtime: String,
    },
    /// A control plane of SERVERS Plinth servers on a three-member etcd, started here:
    /// creates/s over the servers, watch latency across them, and (several servers) the
    /// controllers' failover after SIGKILL of the Lease holder.
    Ha {
        /// The plinth binary.
        #[arg(long, default_value = "target/release/plinth")]
        binary: PathBuf,
        /// Plinth servers.
        #[arg(long, default_value_t = 3)]
        servers: usize,
        /// Seconds per create measurement.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Failovers timed (with two servers or more).
        #[arg(long, default_value_t = 5)]
        failovers: usize,
    },
    /// Starts `plinth serve` and measures the time until `/readyz` answers.
    Startup {
        /// The plinth binary.
        #[arg(long, default_value = "target/release/plinth")]
        binary: PathBuf,
        /// Runs.
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
}

type Error = Box<dyn std::error::Error + Send + Sync>;

const CRD_NAME: &str = "benchobjects.bench.plinth.dev";

fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("bench.plinth.dev", "v1", "BenchObject"),
        "benchobjects",
    )
}

fn object(name: &str, payload: &str) -> DynamicObject {
    DynamicObject::new(&format!("{}-{name}", run_id()), &resource())
        .data(json!({"spec": {"payload": payload}}))
}

/// A tag that keeps this run's object names apart from earlier runs' against the same server.
fn run_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| format!("{:x}", now_micros() % 0xff_ffff))
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn client(kubeconfig: Option<PathBuf>) -> Result<Client, Error> {
    Ok(Client::try_from(config(kubeconfig).await?)?)
}

async fn config(kubeconfig: Option<PathBuf>) -> Result<Config, Error> {
    Ok(match kubeconfig {
        Some(path) => {
            Config::from_custom_kubeconfig(
                Kubeconfig::read_from(path)?,
                &KubeConfigOptions::default(),
            )
            .await?
        }
        None => Config::infer().await?,
    })
}

async fn install_crd(client: &Client) -> Result<(), Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {"group": "bench.plinth.dev", "scope": "Namespaced",
                 "names": {"plural": "benchobjects", "kind": "BenchObject"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": {"type": "object", "properties": {"payload": {"type": "string"}}}}}}}]}
    }))?;
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    // Wait for the endpoint.
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    for _ in 0..100 {
        if api.list(&ListParams::default().limit(1)).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("the benchmark CRD was not served within 10 s".into())
}

async fn remove_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let _ = crds.delete(CRD_NAME, &DeleteParams::default()).await;
}

/// Creates 1 KiB objects from `clients` tasks for `duration`, task `c` through
/// `apis[c % apis.len()]` (one API per server); returns creates/s.
async fn creates(
    apis: &[Api<DynamicObject>],
    clients: usize,
    duration: Duration,
    tag: &str,
) -> Result<f64, Error> {
    let payload = "x".repeat(1024);
    let done = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (api, payload, done, count, tag) = (
            apis[c % apis.len()].clone(),
            payload.clone(),
            done.clone(),
            count.clone(),
            tag.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !done.load(Ordering::Relaxed) {
                api.create(
                    &PostParams::default(),
                    &object(&format!("c-{tag}-{c}-{i}"), &payload),
                )
                .await?;
                count.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            Ok::<_, kube::Error>(())
        }));
    }
    tokio::time::sleep(duration).await;
    done.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await??;
    }
    Ok(count.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

/// Gets one object from 16 tasks for `duration`; returns gets/s.
async fn gets(api: &Api<DynamicObject>, duration: Duration) -> Result<f64, Error> {
    api.create(&PostParams::default(), &object("get-target", "x"))
        .await?;
    let done = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (api, done, count) = (api.clone(), done.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                api.get(&format!("{}-get-target", run_id())).await?;
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, kube::Error>(())
        }));
    }
    tokio::time::sleep(duration).await;
    done.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await??;
    }
    Ok(count.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

/// Creates namespace `name` unless it exists.
async fn ensure_namespace(client: &Client, name: &str) -> Result<(), Error> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.into());
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Fills its own namespace with `n` objects, then times full lists; returns the median.
async fn list_latency(client: &Client, n: usize) -> Result<Duration, Error> {
    ensure_namespace(client, "plinth-bench-list").await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "plinth-bench-list", &resource());
    let payload = "l".repeat(1024);
    let mut tasks = Vec::new();
    for c in 0..32 {
        let (api, payload) = (api.clone(), payload.clone());
        tasks.push(tokio::spawn(async move {
            for i in (c..n).step_by(32) {
                let mut o = object(&format!("list-{i:05}"), &payload);
                o.metadata.labels =
                    Some([("bench".to_owned(), format!("list-{}", run_id()))].into());
                api.create(&PostParams::default(), &o).await?;
            }
            Ok::<_, kube::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let mut times = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let listed = api
            .list(&ListParams::default().labels(&format!("bench=list-{}", run_id())))
            .await?;
        times.push(started.elapsed());
        if listed.items.len() != n {
            return Err(format!("listed {} objects, expected {n}", listed.items.len()).into());
        }
    }
    times.sort();
    Ok(times[times.len() / 2])
}

/// Latency from just before a create to its arrival at each of `watchers` watchers: p50, p99.
async fn watch_latency(
    api: &Api<DynamicObject>,
    watchers: usize,
    writes: usize,
) -> Result<(Duration, Duration), Error> {
    watch_latency_across(api, std::slice::from_ref(api), watchers, writes).await
}

/// As [`watch_latency`], the writes through `writer` and watcher `w` on `watched[w % len]`
/// (another server's API, say).
async fn watch_latency_across(
    writer: &Api<DynamicObject>,
    watched: &[Api<DynamicObject>],
    watchers: usize,
    writes: usize,
) -> Result<(Duration, Duration), Error> {
    let api = writer;
    let rv = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut tasks = Vec::new();
    for w in 0..watchers {
        let stream = watched[w % watched.len()]
            .watch(
                &WatchParams::default()
                    .labels(&format!("bench=watch-{}", run_id()))
                    .timeout(290),
                &rv,
            )
            .await?;
        tasks.push(tokio::spawn(async move {
            let mut stream = stream.boxed();
            let mut latencies = Vec::with_capacity(writes);
            while latencies.len() < writes {
                match tokio::time::timeout(Duration::from_secs(60), stream.next()).await {
                    Ok(Some(Ok(WatchEvent::Added(o)))) => {
                        let sent: u64 = o.data["spec"]["payload"]
                            .as_str()
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0);
                        latencies.push(Duration::from_micros(now_micros().saturating_sub(sent)));
                    }
                    Ok(Some(Ok(_))) => {}
                    other => return Err(format!("watch ended early: {other:?}")),
                }
            }
            Ok(latencies)
        }));
    }
    let tag = format!("w{watchers}");
    for i in 0..writes {
        let mut o = object(&format!("watch-{tag}-{i}"), &now_micros().to_string());
        o.metadata.labels = Some([("bench".to_owned(), format!("watch-{}", run_id()))].into());
        api.create(&PostParams::default(), &o).await?;
        // 50 writes/s; a watcher that misses one fails the run.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await?.map_err(Error::from)?);
    }
    all.sort();
    Ok((percentile(&all, 0.5), percentile(&all, 0.99)))
}

/// How many benchmark objects the server holds (all namespaces).
async fn count_objects(client: &Client) -> Result<usize, Error> {
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    let (mut count, mut token) = (0, None::<String>);
    loop {
        let mut params = ListParams::default().limit(5000);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = all.list_metadata(&params).await?;
        count += page.items.len();
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return Ok(count);
        }
    }
}

/// Resident memory of `pid` in MiB: total, anonymous (heap: what the server itself holds) and
/// file-backed (mapped files such as a database's pages, which the kernel can drop).
fn rss_mib(pid: u32) -> Option<(f64, f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let kib: f64 = status
            .lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(kib / 1024.0)
    };
    Some((
        field("VmRSS:")?,
        field("RssAnon:").unwrap_or(0.0),
        field("RssFile:").unwrap_or(0.0) + field("RssShmem:").unwrap_or(0.0),
    ))
}

fn rss_text((total, anon, file): (f64, f64, f64)) -> String {
    format!("{total:.0} MiB ({anon:.0} MiB anonymous, {file:.0} MiB file-backed)")
}

async fn load(
    kubeconfig: Option<PathBuf>,
    seconds: u64,
    list_objects: usize,
    watchers: Vec<usize>,
    pid: Option<u32>,
    namespace: String,
    history: usize,
) -> Result<(), Error> {
    let client = client(kubeconfig).await?;
    if history > 0 {
        reads::write_history(&client, history).await?;
    }
    install_crd(&client).await?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource());
    let duration = Duration::from_secs(seconds);
    let mut rows = Vec::new();
    for clients in [1, 16, 64] {
        let rate = creates(
            std::slice::from_ref(&api),
            clients,
            duration,
            &clients.to_string(),
        )
        .await?;
        eprintln!("creates, {clients} clients: {rate:.0}/s");
        rows.push((
            format!("creates/s, 1 KiB custom resource, {clients} client(s)"),
            format!("{rate:.0}"),
        ));
    }
    let rate = gets(&api, duration).await?;
    eprintln!("gets: {rate:.0}/s");
    rows.push(("gets/s, 16 clients".to_owned(), format!("{rate:.0}")));
    let listed = list_latency(&client, list_objects).await?;
    eprintln!("list of {list_objects}: {listed:?}");
    rows.push((
        format!("list of {list_objects} objects (median of 5)"),
        format!("{:.0} ms", listed.as_secs_f64() * 1e3),
    ));
    let total = count_objects(&client).await?;
    if let Some(rss) = pid.and_then(rss_mib) {
        rows.push((
            format!("server RSS holding {total} objects of 1 KiB"),
            rss_text(rss),
        ));
    }
    for n in watchers {
        let (p50, p99) = watch_latency(&api, n, 100).await?;
        eprintln!("watch latency, {n} watchers: p50 {p50:?} p99 {p99:?}");
        rows.push((
            format!("watch delivery latency p50 / p99, {n} watchers, 50 writes/s, none missed"),
            format!(
                "{:.2} ms / {:.2} ms",
                p50.as_secs_f64() * 1e3,
                p99.as_secs_f64() * 1e3
            ),
        ));
    }
    if let Some(rss) = pid.and_then(rss_mib) {
        rows.push(("server RSS at the end".to_owned(), rss_text(rss)));
    }
    remove_crd(&client).await;
    println!("| measurement | result |");
    println!("|---|---|");
    for (what, value) in rows {
        println!("| {what} | {value} |");
    }
    Ok(())
}

async fn startup(binary: PathBuf, runs: usize) -> Result<(), Error> {
    let mut times = Vec::new();
    for _ in 0..runs {
        let dir = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let started = Instant::now();
        let mut child = tokio::process::Command::new(&binary)
            .args(["serve", "--data-dir"])
            .arg(dir.path())
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        // /readyz is served without credentials over TLS; a TCP connect plus the kubeconfig's
        // presence marks readiness as a client sees it.
        loop {
            if dir.path().join("kubeconfig").exists()
                && tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
            {
                break;
            }
            if started.elapsed() > Duration::from_secs(20) {
                return Err("plinth did not become ready within 20 s".into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        times.push(started.elapsed());
        child.kill().await?;
    }
    times.sort();
    println!(
        "| startup until ready (median of {runs}) | {:.0} ms |",
        percentile(&times, 0.5).as_secs_f64() * 1e3
    );
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Command::Load {
            kubeconfig,
            seconds,
            list_objects,
            watchers,
            pid,
            namespace,
            history,
        } => {
            load(
                kubeconfig,
                seconds,
                list_objects,
                watchers,
                pid,
                namespace,
                history,
            )
            .await
        }
        Command::Startup { binary, runs } => startup(binary, runs).await,
        Command::Ha {
            binary,
            servers,
            seconds,
            failovers,
        } => ha::run(binary, servers.max(1), seconds, failovers).await,
        Command::Gc {
            kubeconfig,
            owners,
            dependents,
            namespace,
        } => match client(kubeconfig).await {
            Ok(client) => gc::run(client, &namespace, owners, dependents).await,
            Err(e) => Err(e),
        },
        Command::Reads {
            kubeconfig,
            objects,
            history,
            pid,
        } => match client(kubeconfig).await {
            Ok(client) => reads::run(client, objects, history, pid).await,
            Err(e) => Err(e),
        },
        Command::Admission {
            kubeconfig,
            requests,
            webhooks,
        } => match client(kubeconfig).await {
            Ok(client) => admission::run(client, requests, &webhooks).await,
            Err(e) => Err(e),
        },
        Command::Fairness {
            kubeconfig,
            flood,
            other,
            clients,
            seconds,
        } => {
            let split = |s: &str| s.split_once(':').map(|(u, t)| (u.to_owned(), t.to_owned()));
            match (config(kubeconfig).await, split(&flood), split(&other)) {
                (Ok(config), Some(flood), Some(other)) => {
                    fairness::run(
                        config,
                        (&flood.0, &flood.1),
                        (&other.0, &other.1),
                        clients,
                        seconds,
                    )
                    .await
                }
                (Err(e), _, _) => Err(e),
                _ => Err("--flood and --other are name:token".into()),
            }
        }
        Command::Pods {
            kubeconfig,
            namespace,
            pods: count,
            agent_pid,
        } => match client(kubeconfig).await {
            Ok(client) => pods::run(client, &namespace, count, agent_pid).await,
            Err(e) => Err(e),
        },
        Command::Deployments {
            kubeconfig,
            namespace,
            replicas,
            server_pid,
            pending,
        } => match client(kubeconfig).await {
            Ok(client) => deployments::run(client, &namespace, replicas, server_pid, pending).await,
            Err(e) => Err(e),
        },
        Command::RedisFailover {
            kubeconfig,
            namespace,
            kills,
            hang,
        } => match client(kubeconfig).await {
            Ok(client) => failover::run(client, &namespace, kills, hang).await,
            Err(e) => Err(e),
        },
        Command::OperatorCache {
            kubeconfig,
            namespace,
            clusters,
            runtime,
        } => match client(kubeconfig).await {
            Ok(client) => operator_cache::run(client, &namespace, clusters, &runtime).await,
            Err(e) => Err(e),
        },
        Command::Reconcile {
            kubeconfig,
            runtime,
            objects,
        } => match client(kubeconfig).await {
            Ok(client) => reconcile::run(client, &runtime, objects).await,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plinth-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
