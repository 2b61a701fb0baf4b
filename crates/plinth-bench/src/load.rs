//! `plinth-bench load` (creates, gets, lists and watches of a throw-away custom resource) and
//! `plinth-bench startup`; the CRD helpers `ha` shares.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

use crate::common::*;

pub(crate) const CRD_NAME: &str = "benchobjects.bench.plinth.dev";

pub(crate) fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("bench.plinth.dev", "v1", "BenchObject"),
        "benchobjects",
    )
}

pub(crate) fn object(name: &str, payload: &str) -> DynamicObject {
    DynamicObject::new(&format!("{}-{name}", run_id()), &resource())
        .data(json!({"spec": {"payload": payload}}))
}

pub(crate) async fn install_crd(client: &Client) -> Result<(), Error> {
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

pub(crate) async fn remove_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let _ = crds.delete(CRD_NAME, &DeleteParams::default()).await;
}

/// Creates 1 KiB objects from `clients` tasks for `duration`, task `c` through
/// `apis[c % apis.len()]` (one API per server); returns creates/s.
pub(crate) async fn creates(
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
pub(crate) async fn gets(api: &Api<DynamicObject>, duration: Duration) -> Result<f64, Error> {
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

/// Fills its own namespace with `n` objects, then times full lists; returns the median.
pub(crate) async fn list_latency(client: &Client, n: usize) -> Result<Duration, Error> {
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
pub(crate) async fn watch_latency(
    api: &Api<DynamicObject>,
    watchers: usize,
    writes: usize,
) -> Result<(Duration, Duration), Error> {
    watch_latency_across(api, std::slice::from_ref(api), watchers, writes).await
}

/// As [`watch_latency`], the writes through `writer` and watcher `w` on `watched[w % len]`
/// (another server's API, say).
pub(crate) async fn watch_latency_across(
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
pub(crate) async fn count_objects(client: &Client) -> Result<usize, Error> {
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

pub(crate) async fn load(
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
        crate::reads::write_history(&client, history).await?;
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

pub(crate) async fn startup(binary: PathBuf, runs: usize) -> Result<(), Error> {
    let mut times = Vec::new();
    for _ in 0..runs {
        let dir = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let started = Instant::now();
        let mut child = tokio::process::Command::new(&binary)
            .args(["serve", "--pod-network=shared", "--data-dir"])
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
