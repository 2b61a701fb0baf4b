//! `plinth-bench simulated`: thousands of pods on simulated nodes. Starts `plinth serve
//! --no-node` on a data directory of its own and `plinth node --simulate N` beside it, creates one Deployment of
//! `replicas` pods and follows them with a watch — when each was created, bound to a node,
//! Running and Ready — while probing the API every 100 ms (a get and a patch of one
//! ConfigMap, a list of the namespace's pods) against kube's scalability SLOs (mutating and
//! single-object calls ≤ 1 s at p99, lists ≤ 30 s); then the server's memory per pod.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use crate::common::{
    Error, Served, client, ensure_namespace, percentile, rss_mib, serve, serve_in,
};

const NAMESPACE: &str = "bench-simulated";

#[derive(Default, Clone, Copy)]
struct Seen {
    created: Option<Instant>,
    bound: Option<Instant>,
    ready: Option<Instant>,
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Follows the pods of `app` until `replicas` are Ready (or bound, without `ready`); when
/// each was first seen created, bound and Ready.
async fn follow(
    api: Api<Pod>,
    app: &'static str,
    replicas: usize,
    ready_wanted: bool,
) -> Result<HashMap<String, Seen>, Error> {
    let mut seen: HashMap<String, Seen> = HashMap::new();
    let config = watcher::Config::default().labels(&format!("app={app}"));
    let mut events = watcher(api, config).boxed();
    let (mut ready, mut bound) = (0, 0);
    while (if ready_wanted { ready } else { bound }) < replicas {
        let pod = match events.next().await {
            Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => pod,
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.into()),
            None => return Err("the pod watch ended".into()),
        };
        let now = Instant::now();
        let entry = seen
            .entry(pod.metadata.name.clone().unwrap_or_default())
            .or_default();
        entry.created.get_or_insert(now);
        if pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some()
            && entry.bound.is_none()
        {
            entry.bound = Some(now);
            bound += 1;
        }
        if is_ready(&pod) && entry.ready.is_none() {
            entry.ready = Some(now);
            ready += 1;
        }
    }
    Ok(seen)
}

/// Probes the API until `done`: (gets, patches, lists) durations.
async fn probe(
    client: kube::Client,
    done: Arc<AtomicBool>,
) -> (Vec<Duration>, Vec<Duration>, Vec<Duration>) {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let (mut gets, mut patches, mut lists) = (Vec::new(), Vec::new(), Vec::new());
    let mut n = 0u64;
    while !done.load(Ordering::Relaxed) {
        let t = Instant::now();
        if maps.get("probe").await.is_ok() {
            gets.push(t.elapsed());
        }
        n += 1;
        let t = Instant::now();
        let patch = json!({"data": {"n": n.to_string()}});
        if maps
            .patch("probe", &PatchParams::default(), &Patch::Merge(patch))
            .await
            .is_ok()
        {
            patches.push(t.elapsed());
        }
        let t = Instant::now();
        if pods.list(&ListParams::default()).await.is_ok() {
            lists.push(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (gets, patches, lists)
}

fn deployment(app: &str, replicas: usize) -> Result<Deployment, Error> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1.27",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
            },
        },
    }))?)
}

/// Marks every node (un)schedulable.
async fn cordon(nodes: &Api<Node>, count: usize, unschedulable: bool) -> Result<(), Error> {
    let patch = json!({"spec": {"unschedulable": unschedulable}});
    let patches = (0..count).map(|i| {
        let patch = patch.clone();
        async move {
            nodes
                .patch(
                    &format!("sim-{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await
        }
    });
    for done in futures::future::join_all(patches).await {
        done?;
    }
    Ok(())
}

/// The scheduler's own pace: `queued` pods created while every node is cordoned, then the
/// nodes opened at once; pods bound per second from the first binding to the last.
async fn scheduling(
    client: &kube::Client,
    nodes: usize,
    queued: usize,
) -> Result<(f64, Duration), Error> {
    let node_api: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    cordon(&node_api, nodes, true).await?;
    deployments
        .create(&PostParams::default(), &deployment("queued", queued)?)
        .await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let created = deployments
            .get("queued")
            .await?
            .status
            .and_then(|s| s.replicas)
            .unwrap_or(0);
        if usize::try_from(created).unwrap_or(0) == queued {
            break;
        }
        if Instant::now() > deadline {
            return Err("the queued pods were not created within 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let following = tokio::spawn(follow(pods, "queued", queued, false));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let opened = Instant::now();
    cordon(&node_api, nodes, false).await?;
    let seen = tokio::time::timeout(Duration::from_secs(600), following)
        .await
        .map_err(|_| "the queued pods were not all bound within 10 minutes")???;
    let times: Vec<Instant> = seen.values().filter_map(|s| s.bound).collect();
    let (first, last) = (times.iter().min(), times.iter().max());
    let rate = match (first, last) {
        (Some(a), Some(b)) if b > a => times.len() as f64 / b.duration_since(*a).as_secs_f64(),
        _ => 0.0,
    };
    Ok((
        rate,
        last.map_or(Duration::ZERO, |l| l.duration_since(opened)),
    ))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The resident memory of `pid` that stays (not what passing requests hold): the least of 10
/// samples a second apart.
async fn least_rss(pid: u32) -> Option<(f64, f64, f64)> {
    let mut least: Option<(f64, f64, f64)> = None;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some(now) = rss_mib(pid) {
            least = Some(least.map_or(now, |l| if now.0 < l.0 { now } else { l }));
        }
    }
    least
}

/// Runs the measurement and prints one table.
///
/// # Errors
/// The server not starting, an API failure, or pods not Ready within 15 minutes.
pub(crate) async fn run(
    binary: PathBuf,
    nodes: usize,
    replicas: usize,
    queued: usize,
) -> Result<(), Error> {
    let Served {
        dir,
        mut child,
        pid,
        kubeconfig,
    } = serve(&binary).await?;
    // The nodes in a process of their own, so that the server's memory is its own.
    let started = Instant::now();
    let mut simulator = tokio::process::Command::new(&binary)
        .args(["node", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--simulate", &nodes.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let simulator_pid = simulator.id().ok_or("the simulator exited at once")?;
    let client = client(Some(kubeconfig)).await?;
    let node_api: Api<Node> = Api::all(client.clone());
    loop {
        let ready = match node_api.list(&ListParams::default()).await {
            Ok(list) => list
                .items
                .iter()
                .filter(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                })
                .count(),
            Err(_) => 0,
        };
        if ready == nodes {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err(format!("{ready} of {nodes} nodes Ready after 120 s").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let registered = started.elapsed();
    ensure_namespace(&client, NAMESPACE).await?;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let mut map = ConfigMap::default();
    map.metadata.name = Some("probe".into());
    maps.create(&PostParams::default(), &map).await?;
    // Settle, then weigh the server without the pods.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_before = rss_mib(pid);

    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let following = tokio::spawn(follow(pods.clone(), "scale", replicas, true));
    let done = Arc::new(AtomicBool::new(false));
    let probing = tokio::spawn(probe(client.clone(), done.clone()));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let t0 = Instant::now();
    deployments
        .create(&PostParams::default(), &deployment("scale", replicas)?)
        .await?;
    let seen = tokio::time::timeout(Duration::from_secs(900), following)
        .await
        .map_err(|_| "the pods were not all Ready within 15 minutes")???;
    let all_ready = t0.elapsed();
    done.store(true, Ordering::Relaxed);
    let (mut gets, mut patches, mut lists) = probing.await?;
    // What the server keeps, not what passing requests hold, once the pods are Ready.
    let rss_after = least_rss(pid).await;
    // The pods' own size, as the server stores them (JSON).
    let listed = pods.list(&ListParams::default()).await?;
    let pod_bytes: usize = listed
        .items
        .iter()
        .map(|p| serde_json::to_vec(p).map_or(0, |v| v.len()))
        .sum::<usize>()
        / listed.items.len().max(1);

    let last = |f: fn(&Seen) -> Option<Instant>| seen.values().filter_map(f).max();
    let first = |f: fn(&Seen) -> Option<Instant>| seen.values().filter_map(f).min();
    let since = |i: Option<Instant>| i.map_or(0.0, |i| i.duration_since(t0).as_secs_f64());
    let (first_bound, last_bound) = (first(|s| s.bound), last(|s| s.bound));
    let bound = seen.values().filter(|s| s.bound.is_some()).count();
    let rate = match (first_bound, last_bound) {
        (Some(a), Some(b)) if b > a => bound as f64 / b.duration_since(a).as_secs_f64(),
        _ => 0.0,
    };
    for v in [&mut gets, &mut patches, &mut lists] {
        v.sort();
    }
    println!("| simulated nodes, one Deployment | {nodes} nodes, {replicas} replicas |");
    println!("|---|---|");
    println!(
        "| nodes registered and Ready after start | {:.2} s |",
        registered.as_secs_f64()
    );
    println!(
        "| created → all pods created | {:.2} s |",
        since(last(|s| s.created))
    );
    println!("| created → all pods bound | {:.2} s |", since(last_bound));
    println!(
        "| created → all pods Running and Ready | {:.2} s |",
        all_ready.as_secs_f64()
    );
    println!("| pods bound per second while created (first to last binding) | {rate:.0} pods/s |");
    for (what, v, slo) in [
        ("get (single object)", &gets, 1000.0),
        ("patch (mutating)", &patches, 1000.0),
        ("list of the namespace's pods", &lists, 30000.0),
    ] {
        println!(
            "| API {what} during it: p50 / p99 / max (SLO {slo:.0} ms) | {:.1} / {:.1} / {:.1} ms ({} calls) |",
            ms(percentile(v, 0.5)),
            ms(percentile(v, 0.99)),
            ms(v.last().copied().unwrap_or_default()),
            v.len()
        );
    }
    if let (Some(before), Some(after)) = (rss_before, rss_after) {
        let per_pod = (after.0 - before.0) * 1024.0 / replicas as f64;
        let anon_per_pod = (after.1 - before.1) * 1024.0 / replicas as f64;
        println!(
            "| server RSS before → with the pods | {:.0} → {:.0} MiB: {per_pod:.1} KiB per pod (a pod's JSON: {:.1} KiB); anonymous {:.0} → {:.0} MiB: {anon_per_pod:.1} KiB per pod, file-backed {:.0} → {:.0} MiB |",
            before.0,
            after.0,
            pod_bytes as f64 / 1024.0,
            before.1,
            after.1,
            before.2,
            after.2
        );
    }
    let (rate, all_bound) = scheduling(&client, nodes, queued).await?;
    println!(
        "| scheduling {queued} queued pods (nodes uncordoned at once; first to last binding) | {rate:.0} pods/s; all bound {:.2} s after |",
        all_bound.as_secs_f64()
    );
    if let Some(rss) = rss_mib(simulator_pid) {
        println!(
            "| the simulator's RSS (`plinth node --simulate`) | {:.0} MiB |",
            rss.0
        );
    }
    simulator.kill().await?;
    child.kill().await?;
    let _ = child.wait().await;
    // Killed and started again on its data: what the server holds when everything arrives at
    // once (every informer's and follower's first list) rather than pod by pod.
    let pods_total = replicas + queued;
    let t1 = Instant::now();
    let (mut again, again_pid, kubeconfig) = serve_in(&binary, dir.path()).await?;
    let pods: Api<Pod> = Api::namespaced(crate::common::client(Some(kubeconfig)).await?, NAMESPACE);
    loop {
        if let Ok(list) = pods.list(&ListParams::default()).await
            && list.items.len() >= pods_total
        {
            break;
        }
        if t1.elapsed() > Duration::from_secs(300) {
            return Err(format!(
                "the restarted server did not list {pods_total} pods within 300 s"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let listing = t1.elapsed();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let rss_again = least_rss(again_pid).await;
    if let (Some(before), Some(after)) = (rss_before, rss_again) {
        println!(
            "| killed, started again on its data: all {pods_total} pods listed after / RSS 30 s on | {:.2} s / {:.0} MiB: {:.1} KiB per pod; anonymous {:.0} MiB: {:.1} KiB per pod, file-backed {:.0} MiB |",
            listing.as_secs_f64(),
            after.0,
            (after.0 - before.0) * 1024.0 / pods_total as f64,
            after.1,
            (after.1 - before.1) * 1024.0 / pods_total as f64,
            after.2
        );
    }
    again.kill().await?;
    Ok(())
}
