//! `plinth-bench deployments`: the workload controllers on the node agent. Creates one
//! Deployment of `replicas` busybox `sleep` pods (no probes) and times it until every replica
//! is available, then changes its template and times the rolling update (25 %/25 %) until
//! `kubectl rollout status` would say done; the server's resident memory (`--server-pid`:
//! the controllers run in it, with the agent) before, with the pods, after the rollout.
//! With `--pending` (a server without node agents) it only times the pods' creation and
//! weighs what the controllers and the API server keep per pod.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

use crate::common::{Error, run_id};

fn rss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn deployment(name: &str, replicas: usize) -> Result<Deployment, Error> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"bench": name}},
            "template": {
                "metadata": {"labels": {"bench": name}},
                "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": false,
                    "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}]},
            },
        },
    }))?)
}

/// Whether the Deployment's current template is rolled out to all `replicas`, available.
fn rolled_out(d: &Deployment, replicas: i32) -> bool {
    let generation = d.metadata.generation.unwrap_or(0);
    d.status.as_ref().is_some_and(|s| {
        s.observed_generation.unwrap_or(0) >= generation
            && s.updated_replicas.unwrap_or(0) == replicas
            && s.replicas.unwrap_or(0) == replicas
            && s.available_replicas.unwrap_or(0) == replicas
    })
}

async fn wait_rolled_out(api: &Api<Deployment>, name: &str, replicas: i32) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(900);
    while Instant::now() < deadline {
        if rolled_out(&api.get(name).await?, replicas) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("the rollout did not finish in 15 minutes".into())
}

/// Runs the measurement and prints one table.
///
/// # Errors
/// Any API failure, or a rollout that does not finish.
pub(crate) async fn run(
    client: Client,
    namespace: &str,
    replicas: usize,
    server_pid: Option<u32>,
    pending: bool,
) -> Result<(), Error> {
    let api: Api<Deployment> = Api::namespaced(client, namespace);
    let name = format!("{}-d", run_id());
    let count = i32::try_from(replicas).map_err(|e| e.to_string())?;
    let rss_before = server_pid.and_then(rss_kib);
    let started = Instant::now();
    api.create(&PostParams::default(), &deployment(&name, replicas)?)
        .await?;
    if pending {
        // Without node agents: the controllers' own cost, until every pod is created.
        let deadline = Instant::now() + Duration::from_secs(900);
        while Instant::now() < deadline {
            let d = api.get(&name).await?;
            if d.status.as_ref().and_then(|s| s.replicas) == Some(count) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let created = started.elapsed();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let rss_after = server_pid.and_then(rss_kib);
        println!("replicas (pending, no node)        {replicas}");
        println!(
            "created → all pods created          {:.2} s",
            created.as_secs_f64()
        );
        if let (Some(before), Some(after)) = (rss_before, rss_after) {
            println!(
                "server RSS                         {:.1} → {:.1} MiB ({:.1} KiB per pod; {:.1} MiB per 1,000 pods)",
                before as f64 / 1024.0,
                after as f64 / 1024.0,
                after.saturating_sub(before) as f64 / replicas as f64,
                after.saturating_sub(before) as f64 / replicas as f64 * 1000.0 / 1024.0,
            );
        }
        api.delete(&name, &DeleteParams::default()).await?;
        return Ok(());
    }
    wait_rolled_out(&api, &name, count).await?;
    let available = started.elapsed();
    let rss_running = server_pid.and_then(rss_kib);
    let rolling = Instant::now();
    let patch = serde_json::json!({"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": "busybox:1.36", "command": ["sleep", "3601"]}]}}}});
    api.patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    wait_rolled_out(&api, &name, count).await?;
    let rolled = rolling.elapsed();
    let rss_after = server_pid.and_then(rss_kib);
    println!("replicas                          {replicas}");
    println!(
        "created → all available           {:.2} s",
        available.as_secs_f64()
    );
    println!(
        "rolling update (25 %/25 %) done   {:.2} s",
        rolled.as_secs_f64()
    );
    if let (Some(before), Some(running), Some(after)) = (rss_before, rss_running, rss_after) {
        println!(
            "server RSS                        {:.1} → {:.1} → {:.1} MiB ({:.0} KiB per pod with the pods, {:.0} after the rollout)",
            before as f64 / 1024.0,
            running as f64 / 1024.0,
            after as f64 / 1024.0,
            running.saturating_sub(before) as f64 / replicas as f64,
            after.saturating_sub(before) as f64 / replicas as f64,
        );
    }
    api.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}
