//! `plinth-bench million`: one server holding a million objects. Starts `plinth serve
//! --no-node` (embedded store, or `--etcd` on an etcd started here) on a data directory of its
//! own, fills it with `objects` 1-KiB ConfigMaps over `namespaces` namespaces from `clients`
//! clients, then measures: the server's memory and the store's size; a watch from the
//! revision before the fill (every create replayed from storage) and from one 10,000 updates
//! back (from the watch cache); `limit=500` pages, cluster-wide with `continue` and the first
//! page of many namespaces; a backup while it serves; a restart on the same data (start →
//! `/readyz`, the first page and a full namespace list answered, memory once ready); the
//! first compaction of the whole history (its time, from `/metrics`) and the 410 a watch from
//! before it then gets. Reads are timed to their last byte, not decoded.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use plinth_store_etcd::testing::EtcdProcess;
use serde_json::{Value, json};

use crate::common::{Error, client, ensure_namespace, percentile, rss_mib, rss_text};

/// The updates whose replay a watch from the recent past reads from the watch cache.
const RECENT: usize = 10_000;

/// A server process started here.
struct Server {
    child: tokio::process::Child,
    pid: u32,
}

/// Starts `binary serve --no-node` on `dir` (with etcd at `etcd`, else the embedded store),
/// history compacted every `compaction` (`0s`: never); waits for its kubeconfig and `/readyz`
/// and returns the time that took.
async fn start(
    binary: &Path,
    dir: &Path,
    etcd: Option<&str>,
    compaction: &str,
) -> Result<(Server, Client, Duration), Error> {
    let kubeconfig = dir.join("kubeconfig");
    // Written anew by each start: its presence means this start has listened.
    let _ = std::fs::remove_file(&kubeconfig);
    let started = Instant::now();
    let mut command = tokio::process::Command::new(binary);
    command
        .args(["serve", "--pod-network=shared", "--no-node", "--data-dir"])
        .arg(dir)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--compaction-interval",
            compaction,
        ]);
    if let Some(etcd) = etcd {
        command.args(["--etcd-servers", etcd]);
    }
    let child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("plinth exited at once")?;
    let deadline = Duration::from_secs(600);
    while !kubeconfig.exists() {
        if started.elapsed() > deadline {
            return Err("plinth wrote no kubeconfig within 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let client = client(Some(kubeconfig)).await?;
    loop {
        let ready = client
            .request_text(http::Request::get("/readyz").body(Vec::new())?)
            .await;
        if ready.is_ok_and(|body| body.trim() == "ok") {
            break;
        }
        if started.elapsed() > deadline {
            return Err("plinth was not ready within 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok((Server { child, pid }, client, started.elapsed()))
}

/// Stops a server with SIGTERM (by its PID) and waits for it, killing it after 60 s.
async fn stop(mut server: Server) -> Result<(), Error> {
    std::process::Command::new("kill")
        .args(["-TERM", &server.pid.to_string()])
        .status()?;
    if tokio::time::timeout(Duration::from_secs(60), server.child.wait())
        .await
        .is_err()
    {
        server.child.kill().await?;
    }
    Ok(())
}

/// One GET of JSON read to its last byte: how long it took, and the body.
async fn read(client: &Client, path: &str) -> Result<(Duration, Vec<u8>), Error> {
    crate::reads::read(client, path, "application/json").await
}

/// The current revision, from a one-item list.
async fn revision(client: &Client) -> Result<String, Error> {
    let (_, body) = read(client, "/api/v1/configmaps?limit=1").await?;
    let list: Value = serde_json::from_slice(&body)?;
    Ok(list["metadata"]["resourceVersion"]
        .as_str()
        .ok_or("a list without a resourceVersion")?
        .to_owned())
}

/// Creates `objects` ConfigMaps of 1 KiB, `clients` at a time, spread over the namespaces.
async fn fill(
    client: &Client,
    names: &[String],
    objects: usize,
    clients: usize,
) -> Result<(), Error> {
    let payload = "m".repeat(1024);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, names, payload) = (client.clone(), names.to_vec(), payload.clone());
        tasks.push(tokio::spawn(async move {
            for i in (c..objects).step_by(clients) {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), &names[i % names.len()]);
                let mut map = ConfigMap::default();
                map.metadata.name = Some(format!("m-{i:07}"));
                map.data = Some([("payload".to_owned(), payload.clone())].into());
                match api.create(&PostParams::default(), &map).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 409 => {}
                    Err(e) => return Err(e),
                }
                if i > 0 && i % 100_000 == 0 {
                    eprintln!("million: {i} created");
                }
            }
            Ok::<_, kube::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// Updates the first `count` ConfigMaps once each, 16 clients at a time.
async fn update(client: &Client, names: &[String], count: usize) -> Result<(), Error> {
    let mut tasks = Vec::new();
    for c in 0..16 {
        let (client, names) = (client.clone(), names.to_vec());
        tasks.push(tokio::spawn(async move {
            for i in (c..count).step_by(16) {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), &names[i % names.len()]);
                api.patch(
                    &format!("m-{i:07}"),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"updated": "yes"}})),
                )
                .await?;
            }
            Ok::<_, kube::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// A cluster-wide watch of ConfigMaps from `from`, read until `events` events (or an error
/// event) arrived: time to the first line, time to the last, the lines, and the first line.
async fn replay(
    client: &Client,
    from: &str,
    events: usize,
) -> Result<(Duration, Duration, usize, String), Error> {
    let path = format!("/api/v1/configmaps?watch=1&resourceVersion={from}&timeoutSeconds=1800");
    let request = http::Request::get(path.as_str()).body(Vec::new())?;
    let started = Instant::now();
    let stream = client.request_stream(request).await?;
    let mut lines = stream.lines();
    let mut first = None;
    let mut first_line = String::new();
    let mut count = 0;
    while count < events {
        let Some(line) = lines.next().await.transpose()? else {
            break;
        };
        if first.is_none() {
            first = Some(started.elapsed());
            line.chars()
                .take(300)
                .collect::<String>()
                .clone_into(&mut first_line);
            if line.starts_with(r#"{"type":"ERROR""#) {
                count += 1;
                break;
            }
        }
        count += 1;
    }
    Ok((
        first.unwrap_or_default(),
        started.elapsed(),
        count,
        first_line,
    ))
}

/// The `limit=500` pages: `pages` cluster-wide pages following `continue`, then the first
/// page of each of `pages` namespaces. Times per page, sorted, of each.
async fn pages(
    client: &Client,
    names: &[String],
    pages: usize,
) -> Result<(Vec<Duration>, Vec<Duration>), Error> {
    let mut times = Vec::new();
    let mut next = String::new();
    for _ in 0..pages {
        let path = if next.is_empty() {
            "/api/v1/configmaps?limit=500".to_owned()
        } else {
            format!("/api/v1/configmaps?limit=500&continue={next}")
        };
        let (took, body) = read(client, &path).await?;
        times.push(took);
        let page: Value = serde_json::from_slice(&body)?;
        next = page["metadata"]["continue"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if next.is_empty() {
            break;
        }
    }
    let mut first_pages = Vec::new();
    for name in names
        .iter()
        .step_by((names.len() / pages).max(1))
        .take(pages)
    {
        let (took, _) = read(
            client,
            &format!("/api/v1/namespaces/{name}/configmaps?limit=500"),
        )
        .await?;
        first_pages.push(took);
    }
    times.sort();
    first_pages.sort();
    Ok((times, first_pages))
}

/// A metric's value from `/metrics`.
async fn metric(client: &Client, name: &str) -> Result<Option<f64>, Error> {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await?;
    Ok(text.lines().find_map(|line| {
        line.strip_prefix(name)
            .filter(|rest| rest.starts_with(' '))
            .and_then(|rest| rest.trim().parse().ok())
    }))
}

/// The bytes under `dir`.
fn size_of(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => size_of(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// Runs the measurement and prints one table.
///
/// # Errors
/// The server or etcd not starting, an API failure.
pub(crate) async fn run(
    binary: PathBuf,
    objects: usize,
    namespaces: usize,
    clients: usize,
    with_etcd: bool,
    keep: Option<PathBuf>,
) -> Result<(), Error> {
    let namespaces = namespaces.max(1);
    let clients = clients.max(1);
    let etcd = if with_etcd {
        Some(EtcdProcess::start().await?)
    } else {
        None
    };
    let endpoint = etcd.as_ref().map(EtcdProcess::endpoint);
    let temporary = tempfile::tempdir()?;
    let dir = keep.as_deref().unwrap_or(temporary.path());
    std::fs::create_dir_all(dir)?;
    let mut rows: Vec<(String, String)> = Vec::new();
    let backend = if with_etcd { "etcd" } else { "embedded" };

    // The first server never compacts: the whole fill stays replayable.
    let (server, client, _) = start(&binary, dir, endpoint.as_deref(), "0s").await?;
    let names: Vec<String> = (0..namespaces).map(|i| format!("million-{i:04}")).collect();
    for name in &names {
        ensure_namespace(&client, name).await?;
    }
    let before_fill = revision(&client).await?;
    let rss_empty = rss_mib(server.pid);
    let filling = Instant::now();
    fill(&client, &names, objects, clients).await?;
    let filled = filling.elapsed();
    rows.push((
        format!(
            "{objects} 1-KiB ConfigMaps over {namespaces} namespaces created, {clients} clients"
        ),
        format!(
            "{} ({:.0} creates/s)",
            secs(filled),
            objects as f64 / filled.as_secs_f64()
        ),
    ));
    tokio::time::sleep(Duration::from_secs(5)).await;
    if let (Some(empty), Some(full)) = (rss_empty, rss_mib(server.pid)) {
        rows.push((
            "server RSS empty → full".into(),
            format!("{:.0} MiB → {}", empty.0, rss_text(full)),
        ));
    }
    let store_dir = match &etcd {
        Some(etcd) => etcd.data_dir().to_owned(),
        None => dir.to_owned(),
    };
    rows.push((
        format!("store on disk ({backend})"),
        format!("{:.0} MiB", size_of(&store_dir) as f64 / 1048576.0),
    ));
    if let Some(rss) = etcd.as_ref().and_then(EtcdProcess::pid).and_then(rss_mib) {
        rows.push(("etcd's RSS".into(), rss_text(rss)));
    }

    let (first, all, count, line) = replay(&client, &before_fill, objects).await?;
    rows.push(if line.contains("\"code\":410") {
        // Older than the watch cache's window by more than the server replays from storage
        // (on etcd, as kube-apiserver answers any watch older than its cache).
        (
            "watch from the revision before the fill".into(),
            format!("410 Gone in {}", ms(first)),
        )
    } else {
        (
            "watch from the revision before the fill (every create, from storage): first event / all"
                .into(),
            format!("{} / {} ({count} events)", ms(first), secs(all)),
        )
    });
    let before_updates = revision(&client).await?;
    update(&client, &names, RECENT.min(objects)).await?;
    let (first, all, count, _) = replay(&client, &before_updates, RECENT.min(objects)).await?;
    rows.push((
        format!("watch from {RECENT} updates back (from the watch cache): first event / all"),
        format!("{} / {} ({count} events)", ms(first), ms(all)),
    ));

    let (cluster, namespaced) = pages(&client, &names, 200).await?;
    for (what, times) in [
        ("cluster-wide, following `continue`", cluster),
        ("a namespace's first", namespaced),
    ] {
        rows.push((
            format!(
                "`limit=500` page p50 / p99 / max ({} pages, {what})",
                times.len()
            ),
            format!(
                "{} / {} / {}",
                ms(percentile(&times, 0.5)),
                ms(percentile(&times, 0.99)),
                ms(times.last().copied().unwrap_or_default())
            ),
        ));
    }

    let backup = dir.join("million.backup");
    let mut command = std::process::Command::new(&binary);
    command.arg("backup").arg("--to").arg(&backup);
    match &endpoint {
        Some(endpoint) => command.args(["--etcd-servers", endpoint]),
        None => command.arg("--data-dir").arg(dir),
    };
    let backing_up = Instant::now();
    let output = tokio::task::spawn_blocking(move || command.output()).await??;
    let took = backing_up.elapsed();
    if !output.status.success() {
        return Err(format!("backup: {}", String::from_utf8_lossy(&output.stderr)).into());
    }
    rows.push((
        "backup while serving".into(),
        format!(
            "{} ({:.0} MiB)",
            secs(took),
            std::fs::metadata(&backup).map_or(0, |m| m.len()) as f64 / 1048576.0
        ),
    ));
    let _ = std::fs::remove_file(&backup);
    stop(server).await?;

    // The second server compacts every 15 s: up to what it saw one interval earlier.
    let (server, client, ready) = start(&binary, dir, endpoint.as_deref(), "15s").await?;
    let restarted = Instant::now()
        .checked_sub(ready)
        .unwrap_or_else(Instant::now);
    let answering = Instant::now();
    let (first_page, _) = read(&client, "/api/v1/configmaps?limit=500").await?;
    let (namespace_list, _) = read(
        &client,
        &format!("/api/v1/namespaces/{}/configmaps", names[0]),
    )
    .await?;
    let answered = answering.elapsed();
    rows.push(("restart: start → `/readyz` ok".into(), secs(ready)));
    rows.push((
        "then the first `limit=500` page / a namespace's full list".into(),
        format!(
            "{} / {} ({} after ready)",
            ms(first_page),
            ms(namespace_list),
            ms(answered)
        ),
    ));
    // The watch cache loads the objects meanwhile (storage answered until it has).
    let loading = Instant::now();
    loop {
        let text = client
            .request_text(http::Request::get("/metrics").body(Vec::new())?)
            .await?;
        let cached = text
            .lines()
            .filter(|l| l.starts_with("plinth_watch_cache_objects{") && l.contains("/configmaps\""))
            .find_map(|l| l.rsplit(' ').next()?.parse::<usize>().ok())
            .unwrap_or(0);
        if cached >= objects {
            break;
        }
        if loading.elapsed() > Duration::from_secs(300) {
            return Err("the watch cache did not load within 5 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    rows.push((
        "restart: start → the watch cache holds every object".into(),
        secs(restarted.elapsed()),
    ));
    if let Some(rss) = rss_mib(server.pid) {
        rows.push(("server RSS then".into(), rss_text(rss)));
    }
    let waiting = Instant::now();
    let compacted = loop {
        let count = metric(&client, "plinth_storage_compactions_total").await?;
        if count.is_some_and(|count| count >= 1.0) {
            break true;
        }
        if waiting.elapsed() > Duration::from_secs(120) {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if compacted {
        let seconds = metric(&client, "plinth_storage_last_compaction_seconds")
            .await?
            .unwrap_or(0.0);
        let revision = metric(&client, "plinth_storage_compacted_revision")
            .await?
            .unwrap_or(0.0);
        rows.push((
            "first compaction after the restart (the whole history)".into(),
            format!(
                "{} (up to revision {revision:.0})",
                ms(Duration::from_secs_f64(seconds))
            ),
        ));
        let (first, _, _, line) = replay(&client, &before_fill, 1).await?;
        let gone = line.contains("\"code\":410");
        rows.push((
            "then a watch from before the fill".into(),
            format!(
                "{} in {}",
                if gone { "410 Gone" } else { "not refused" },
                ms(first)
            ),
        ));
    } else {
        rows.push((
            "first compaction after the restart".into(),
            "none within 120 s".into(),
        ));
    }
    stop(server).await?;

    println!("| {objects} objects, {backend} store | |");
    println!("|---|---|");
    for (what, figure) in rows {
        println!("| {what} | {figure} |");
    }
    drop(etcd);
    Ok(())
}
