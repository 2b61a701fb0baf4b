//! `plinth-bench redis-failover`: how long a RedisCluster takes to accept writes again after
//! its primary's process dies. Against a server whose node agent runs on this machine (the
//! `redis-server` processes are found and SIGKILLed by PID) with the RedisCluster operator
//! running: creates a three-server cluster, then `kills` times, from a settled cluster,
//! SIGKILLs the primary's process (or, with `--hang`, SIGSTOPs it) and times until a `SET`
//! through the `<name>-primary` Service is accepted again; prints p50/p99 and which way each
//! failover went (the killed server seen back as a new process, or the threshold passed).
//! A killed server's pod is then deleted (the StatefulSet makes it anew), so each kill is a
//! first crash: the kubelet's back-off, which doubles with every crash of one container,
//! is not what is measured. A hung one is resumed and rejoins.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::common::{Error, percentile, run_id};

fn clusters(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("database.example.com", "v1alpha1", "RedisCluster"),
        "redisclusters",
    );
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// A Redis command as RESP.
fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend(format!("${}\r\n{arg}\r\n", arg.len()).into_bytes());
    }
    out
}

/// Whether `SET` through `ip:6379` (after `AUTH`) is accepted now.
async fn write_accepted(ip: &str, password: &str, key: &str) -> bool {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect((ip, 6379)).await.ok()?;
        let mut request = resp(&["AUTH", password]);
        request.extend(resp(&["SET", key, "1"]));
        stream.write_all(&request).await.ok()?;
        let mut lines = BufReader::new(stream).lines();
        let auth = lines.next_line().await.ok()??;
        let set = lines.next_line().await.ok()??;
        Some(auth == "+OK" && set == "+OK")
    };
    tokio::time::timeout(Duration::from_secs(1), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// The PID of the `redis-server` titled `redis-server <ip>:6379`.
fn server_pid(ip: &str) -> Option<u32> {
    let title = format!("{ip}:6379");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let line = std::fs::read(entry.path().join("cmdline")).ok()?;
            let line = String::from_utf8_lossy(&line).replace('\0', " ");
            let mut words = line.split_whitespace();
            let server = words.next().is_some_and(|w| w.ends_with("redis-server"));
            (server && words.any(|w| w == title)).then_some(pid)
        })
}

/// The cluster's status once it runs all `replicas` (polled; `None` after `limit`).
async fn settled(
    api: &Api<DynamicObject>,
    name: &str,
    replicas: i64,
    limit: Duration,
) -> Result<Option<serde_json::Value>, Error> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let status = api.get(name).await?.data["status"].clone();
        if status["phase"] == "Running"
            && status["readyReplicas"].as_i64() == Some(replicas)
            && status["currentMaster"].is_string()
        {
            return Ok(Some(status));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(None)
}

/// Runs the measurement and prints one table.
///
/// # Errors
/// Any API failure; a cluster that does not settle in five minutes; a primary whose process
/// is not on this machine.
pub(crate) async fn run(
    client: Client,
    namespace: &str,
    kills: usize,
    hang: bool,
) -> Result<(), Error> {
    let api = clusters(&client, namespace);
    let name = format!("f{}", run_id());
    let cluster: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "database.example.com/v1alpha1", "kind": "RedisCluster",
        "metadata": {"name": name},
        "spec": {"replicas": 3, "enableAutoFailover": true},
    }))?;
    api.create(&PostParams::default(), &cluster).await?;
    let outcome = measure(&client, &api, namespace, &name, kills, hang).await;
    api.delete(&name, &DeleteParams::default()).await?;
    let (mut times, restarted) = outcome?;
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("| primary | times | p50 | p99 | min | max | by a restarted process |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {restarted} |",
        if hang {
            "hung (SIGSTOP)"
        } else {
            "killed (SIGKILL)"
        },
        times.len(),
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.99)),
        ms(times.first().copied().unwrap_or_default()),
        ms(times.last().copied().unwrap_or_default()),
    );
    Ok(())
}

/// The kills: each failover's time, and how many went by the restarted process.
async fn measure(
    client: &Client,
    api: &Api<DynamicObject>,
    namespace: &str,
    name: &str,
    kills: usize,
    hang: bool,
) -> Result<(Vec<Duration>, usize), Error> {
    let limit = Duration::from_secs(300);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    settled(api, name, 3, limit)
        .await?
        .ok_or("the cluster did not run three servers in five minutes")?;
    let password = secrets
        .get(&format!("{name}-auth"))
        .await?
        .data
        .and_then(|d| d.get("password").cloned())
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .ok_or("no generated password")?;
    let service_ip = services
        .get(&format!("{name}-primary"))
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .ok_or("the -primary Service has no ClusterIP")?;
    let mut times = Vec::new();
    let mut restarted = 0;
    for round in 0..kills {
        let status = settled(api, name, 3, limit)
            .await?
            .ok_or("the cluster did not settle again in five minutes")?;
        let primary = status["currentMaster"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let ip = pods
            .get(&primary)
            .await?
            .status
            .and_then(|s| s.pod_ip)
            .ok_or("the primary has no IP")?;
        let pid = server_pid(&ip).ok_or("the primary's redis-server is not on this machine")?;
        let key = format!("bench:{round}");
        let killed = Instant::now();
        let signal = if hang { "-STOP" } else { "-KILL" };
        std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()?;
        loop {
            if write_accepted(&service_ip, &password, &key).await {
                break;
            }
            if killed.elapsed() > limit {
                return Err("writes were not accepted again in five minutes".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = killed.elapsed();
        times.push(took);
        if hang {
            std::process::Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status()?;
        } else {
            pods.delete(&primary, &DeleteParams::default()).await?;
        }
        // Which way it went: the newest FailedOver event says whether the killed process
        // was seen back (a new run ID) before the threshold passed.
        let after = api.get(name).await?.data["status"].clone();
        let notes = failovers(client, namespace, name).await?;
        if notes.last().is_some_and(|m| m.contains("restarted")) {
            restarted += 1;
        }
        eprintln!(
            "kill {}: {primary} → {} in {:.0} ms",
            round + 1,
            after["currentMaster"],
            took.as_secs_f64() * 1e3
        );
    }
    Ok((times, restarted))
}

/// The notes of the cluster's `FailedOver` events, oldest first.
async fn failovers(client: &Client, namespace: &str, name: &str) -> Result<Vec<String>, Error> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), namespace);
    let mut found: Vec<_> = events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some("FailedOver")
        })
        .map(|e| {
            let when = e
                .series
                .as_ref()
                .map(|s| s.last_observed_time.0)
                .or_else(|| e.event_time.as_ref().map(|t| t.0));
            (when, e.note.unwrap_or_default())
        })
        .collect();
    found.sort();
    Ok(found.into_iter().map(|(_, note)| note).collect())
}
