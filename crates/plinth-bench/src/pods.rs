//! `plinth-bench pods`: pods started by the node agent. Creates `pods` Pods (busybox
//! `sleep`, no probes) at once — or one after another, each once the one before is Ready
//! (`--one-at-a-time`) — and watches them: pods Ready per second, each pod's create →
//! Ready latency (p50/p99/max), the agent's memory before and after (`--agent-pid`, its
//! resident set) and the sandboxes' (proportional set size per pod), then the time until
//! every pod is deleted.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;

use crate::common::{Error, percentile, run_id};

fn kib(pid: u32, file: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// The proportional set size (KiB) of every process whose command line starts with the
/// agent's sandbox (`… sandbox …`).
fn sandboxes_pss() -> (u64, usize) {
    let mut total = 0;
    let mut count = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.get(1) == Some(&b"sandbox".as_slice()) {
            total += kib(pid, "smaps_rollup", "Pss:");
            count += 1;
        }
    }
    (total, count)
}

fn pod(name: &str) -> Result<Pod, Error> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench-pods": run_id()}},
        "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": false,
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}]},
    }))?)
}

/// Which pod became Ready when.
type Readiness = tokio::sync::mpsc::UnboundedReceiver<(String, Instant)>;

/// Creates the run's pod number `i`: its name, and when its create was sent.
async fn create(api: &Api<Pod>, i: usize) -> Result<(String, Instant), Error> {
    let name = format!("{}-p{i}", run_id());
    let at = Instant::now();
    api.create(&PostParams::default(), &pod(&name)?).await?;
    Ok((name, at))
}

/// Creates the pods 16 at a time and waits until all are Ready: each one's create → Ready.
async fn all_at_once(
    api: &Api<Pod>,
    count: usize,
    ready_rx: &mut Readiness,
) -> Result<Vec<Duration>, Error> {
    let mut created_at = HashMap::new();
    let creates = futures::stream::iter(0..count)
        .map(|i| create(api, i))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    for created in creates {
        let (name, at) = created?;
        created_at.insert(name, at);
    }
    let mut latencies = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(600);
    while latencies.len() < count && Instant::now() < deadline {
        let Ok(Some((name, at))) =
            tokio::time::timeout(Duration::from_secs(5), ready_rx.recv()).await
        else {
            continue;
        };
        if let Some(created) = created_at.remove(&name) {
            latencies.push(at.duration_since(created));
        }
    }
    Ok(latencies)
}

/// Creates each pod once the one before is Ready: a pod's start on an otherwise idle node,
/// where what its own start costs shows undiluted by the others' (`--one-at-a-time`).
async fn one_after_another(
    api: &Api<Pod>,
    count: usize,
    ready_rx: &mut Readiness,
) -> Result<Vec<Duration>, Error> {
    let mut latencies = Vec::new();
    for i in 0..count {
        let (name, created) = create(api, i).await?;
        let deadline = created + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, ready_rx.recv()).await {
                Ok(Some((ready, at))) if ready == name => {
                    latencies.push(at.duration_since(created));
                    break;
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return Ok(latencies),
            }
        }
    }
    Ok(latencies)
}

pub(crate) fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Runs the measurement and prints one table.
///
/// # Errors
/// Any API failure.
pub(crate) async fn run(
    client: Client,
    namespace: &str,
    count: usize,
    agent_pid: Option<u32>,
    server_pid: Option<u32>,
    one_at_a_time: bool,
) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(client, namespace);
    let label = format!("bench-pods={}", run_id());
    let rss_before = agent_pid.map(|p| kib(p, "status", "VmRSS:"));
    let server_before = server_pid.map(|p| kib(p, "status", "VmRSS:"));
    let (sandboxes_before, _) = sandboxes_pss();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel();
    let watch_api = api.clone();
    let watch_label = label.clone();
    let watching = tokio::spawn(async move {
        let config = watcher::Config::default().labels(&watch_label);
        let mut events = watcher(watch_api, config).boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event
                && ready(&pod)
                && ready_tx
                    .send((pod.metadata.name.unwrap_or_default(), Instant::now()))
                    .is_err()
            {
                return;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let mut latencies = if one_at_a_time {
        one_after_another(&api, count, &mut ready_rx).await?
    } else {
        all_at_once(&api, count, &mut ready_rx).await?
    };
    let all_ready = started.elapsed();
    watching.abort();
    let rss_after = agent_pid.map(|p| kib(p, "status", "VmRSS:"));
    let server_after = server_pid.map(|p| kib(p, "status", "VmRSS:"));
    let (sandboxes_after, processes) = sandboxes_pss();
    latencies.sort();
    println!(
        "pods                      {count} (Ready: {}){}",
        latencies.len(),
        if one_at_a_time { ", one at a time" } else { "" }
    );
    println!("all Ready after           {:.2} s", all_ready.as_secs_f64());
    println!(
        "pods Ready per second     {:.1}",
        latencies.len() as f64 / all_ready.as_secs_f64()
    );
    println!(
        "create → Ready            p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        percentile(&latencies, 0.5).as_secs_f64() * 1000.0,
        percentile(&latencies, 0.99).as_secs_f64() * 1000.0,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1000.0
    );
    let rss = |what: &str, before: Option<u64>, after: Option<u64>| {
        if let (Some(before), Some(after)) = (before, after) {
            println!(
                "{what:<26}{:.1} MiB → {:.1} MiB ({:.0} KiB per pod)",
                before as f64 / 1024.0,
                after as f64 / 1024.0,
                after.saturating_sub(before) as f64 / count as f64
            );
        }
    };
    if server_pid.is_some() {
        rss("agent RSS", rss_before, rss_after);
        rss("server RSS", server_before, server_after);
    } else {
        rss("agent (server) RSS", rss_before, rss_after);
    }
    println!(
        "sandboxes                 {processes} processes, {:.0} KiB PSS per pod",
        sandboxes_after.saturating_sub(sandboxes_before) as f64 / count as f64
    );
    let deleting = Instant::now();
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(&label),
    )
    .await?;
    while !api
        .list(&ListParams::default().labels(&label))
        .await?
        .items
        .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "all deleted after         {:.2} s",
        deleting.elapsed().as_secs_f64()
    );
    Ok(())
}
