//! `plinth-bench reads`: what reads cost the server. Fills a namespace of its own with
//! `objects` ConfigMaps of 1 KiB, then times, reading every byte of the answer but decoding
//! none of it (as `curl -o /dev/null` does): full lists (JSON, and protobuf when the server
//! speaks it), a label-selected list, a paginated traversal (limit 500: time per page), and
//! the server's resident memory per object when given its pid; with `--history N`, after N
//! other writes (to compare a store with history against a fresh one).

use std::time::{Duration, Instant};

use futures::AsyncReadExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, PostParams};

use crate::common::{Error, percentile, rss_mib};

pub(crate) const NAMESPACE: &str = "plinth-bench-reads";

/// One GET read to its last byte: how long it took, the bytes, and the content type.
pub(crate) async fn read(
    client: &Client,
    path: &str,
    accept: &str,
) -> Result<(Duration, Vec<u8>), Error> {
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(Vec::new())?;
    let started = Instant::now();
    let mut stream = client.request_stream(request).await?;
    let mut body = Vec::new();
    stream.read_to_end(&mut body).await?;
    Ok((started.elapsed(), body))
}

/// The median time of `runs` reads of `path` to their first byte (each read to its end).
async fn first_byte(
    client: &Client,
    path: &str,
    accept: &str,
    runs: usize,
) -> Result<Duration, Error> {
    let mut times = Vec::new();
    for _ in 0..runs {
        let request = http::Request::get(path)
            .header(http::header::ACCEPT, accept)
            .body(Vec::new())?;
        let started = Instant::now();
        let mut stream = client.request_stream(request).await?;
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).await?;
        times.push(started.elapsed());
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).await?;
    }
    times.sort();
    Ok(percentile(&times, 0.5))
}

/// The median of `runs` reads of `path`, and the size of the answer.
pub(crate) async fn median(
    client: &Client,
    path: &str,
    accept: &str,
    runs: usize,
) -> Result<(Duration, usize), Error> {
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..runs {
        let (took, body) = read(client, path, accept).await?;
        times.push(took);
        size = body.len();
    }
    times.sort();
    Ok((percentile(&times, 0.5), size))
}

pub(crate) async fn fill(client: &Client, objects: usize) -> Result<(), Error> {
    crate::common::ensure_namespace(client, NAMESPACE).await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let payload = "r".repeat(1024);
    let mut tasks = Vec::new();
    for c in 0..32 {
        let (api, payload) = (api.clone(), payload.clone());
        tasks.push(tokio::spawn(async move {
            for i in (c..objects).step_by(32) {
                let mut cm = ConfigMap::default();
                cm.metadata.name = Some(format!("read-{i:06}"));
                cm.metadata.labels = Some([("parity".to_owned(), (i % 2).to_string())].into());
                cm.data = Some([("payload".to_owned(), payload.clone())].into());
                match api.create(&PostParams::default(), &cm).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 409 => {}
                    Err(e) => return Err(e),
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

/// `writes` writes before the measurement, elsewhere: 1,000 ConfigMaps of 1 KiB in a
/// namespace of their own, created and then updated in turn by 32 clients, so that the store
/// carries that much history when the reads are timed.
pub(crate) async fn write_history(client: &Client, writes: usize) -> Result<(), Error> {
    const SCRATCH: &str = "plinth-bench-history";
    crate::common::ensure_namespace(client, SCRATCH).await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), SCRATCH);
    let mut tasks = Vec::new();
    for c in 0..32 {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            for i in (c..writes).step_by(32) {
                let mut cm = ConfigMap::default();
                cm.metadata.name = Some(format!("history-{:04}", i % 1000));
                cm.data = Some([("payload".to_owned(), format!("{i:01024}"))].into());
                if i < 1000 {
                    api.create(&PostParams::default(), &cm).await?;
                } else {
                    let name = cm.metadata.name.clone().unwrap_or_default();
                    api.replace(&name, &PostParams::default(), &cm).await?;
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

/// Runs the measurement and prints one table.
///
/// # Errors
/// Any API failure.
pub(crate) async fn run(
    client: Client,
    objects: usize,
    history: usize,
    pid: Option<u32>,
) -> Result<(), Error> {
    let before = pid.and_then(rss_mib);
    fill(&client, objects).await?;
    if history > 0 {
        let started = Instant::now();
        write_history(&client, history).await?;
        eprintln!("{history} writes of history in {:?}", started.elapsed());
    }
    let path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
    let mut rows = Vec::new();
    let json = "application/json";
    // As client-go asks: protobuf first, JSON accepted.
    let protobuf = "application/vnd.kubernetes.protobuf, application/json";
    let (took, size) = median(&client, &path, json, 7).await?;
    rows.push((
        format!("list of {objects} ConfigMaps, JSON (median of 7)"),
        format!("{:.1} ms ({:.1} MiB)", ms(took), mib(size)),
    ));
    let first = first_byte(&client, &path, json, 7).await?;
    rows.push((
        format!("list of {objects} ConfigMaps, JSON: first byte (median of 7)"),
        format!("{:.2} ms", ms(first)),
    ));
    let json_only = cache_bytes(&client).await?;
    // Before protobuf encodings are cached and Tables are built (their transient memory the
    // allocator may keep a while).
    let listed = pid.and_then(rss_mib);
    let (took, body) = read(&client, &path, protobuf).await?;
    if body.starts_with(b"k8s\0") {
        let (took, size) = median(&client, &path, protobuf, 7).await?;
        rows.push((
            format!("list of {objects} ConfigMaps, protobuf (median of 7)"),
            format!("{:.1} ms ({:.1} MiB)", ms(took), mib(size)),
        ));
    } else {
        rows.push((
            format!("list of {objects} ConfigMaps, protobuf asked for"),
            format!("answered in JSON: {:.1} ms", ms(took)),
        ));
    }
    // As `kubectl get` asks.
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let (took, size) = median(&client, &path, table, 7).await?;
    rows.push((
        format!("list of {objects} ConfigMaps as a Table, as kubectl get asks (median of 7)"),
        format!("{:.1} ms ({:.1} MiB)", ms(took), mib(size)),
    ));
    let (took, size) = median(
        &client,
        &format!("{path}?labelSelector=parity%3D1"),
        json,
        7,
    )
    .await?;
    rows.push((
        format!(
            "list of {} of them by label selector, JSON (median of 7)",
            objects / 2
        ),
        format!("{:.1} ms ({:.1} MiB)", ms(took), mib(size)),
    ));
    let mut pages = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page_path = match &token {
            Some(t) => format!("{path}?limit=500&continue={t}"),
            None => format!("{path}?limit=500"),
        };
        let (took, body) = read(&client, &page_path, json).await?;
        pages.push(took);
        let page: serde_json::Value = serde_json::from_slice(&body)?;
        token = page["metadata"]["continue"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        if token.is_none() {
            break;
        }
    }
    let count = pages.len();
    let total: Duration = pages.iter().sum();
    pages.sort();
    rows.push((
        format!("paginated traversal, limit 500 ({count} pages): per page mean / p99"),
        format!(
            "{:.2} ms / {:.2} ms",
            ms(total) / count as f64,
            ms(percentile(&pages, 0.99))
        ),
    ));
    let (median, p99) = quiet_reads(&client).await?;
    rows.push((
        "consistent list of a quiet resource just after a write elsewhere: median / p99 (200)"
            .to_owned(),
        format!("{:.2} ms / {:.2} ms", ms(median), ms(p99)),
    ));
    let item = size_of_items(&client, &path).await?;
    for (when, accounted) in [
        ("JSON clients only", json_only),
        ("after protobuf lists", cache_bytes(&client).await?),
    ] {
        if let Some((objects, bytes)) = accounted {
            let per = bytes as f64 / objects.max(1) as f64;
            rows.push((
                format!("watch cache bytes per ConfigMap, {when} ({objects} cached)"),
                format!("{per:.0} B = {:.2}× its JSON ({item:.0} B)", per / item),
            ));
        }
    }
    if let (Some(before), Some(listed)) = (before, listed) {
        rows.push((
            format!(
                "server anonymous RSS growth per 1-KiB ConfigMap ({objects} written, JSON lists)"
            ),
            format!("{:.2} KiB", (listed.1 - before.1) * 1024.0 / objects as f64),
        ));
    }
    if let Some(end) = pid.and_then(rss_mib) {
        rows.push((
            "server RSS at the end".to_owned(),
            crate::common::rss_text(end),
        ));
    }
    println!("| measurement | result |");
    println!("|---|---|");
    for (what, value) in rows {
        println!("| {what} | {value} |");
    }
    Ok(())
}

/// The ConfigMaps cache's live objects and the bytes it accounts for them, from the server's
/// metrics; `None` if it does not report them.
async fn cache_bytes(client: &Client) -> Result<Option<(usize, usize)>, Error> {
    let (_, body) = read(client, "/metrics", "text/plain").await?;
    let text = String::from_utf8_lossy(&body);
    let value = |metric: &str| {
        text.lines()
            .filter(|l| l.starts_with(metric) && l.contains("configmaps\""))
            .find_map(|l| l.rsplit(' ').next()?.parse::<usize>().ok())
    };
    Ok(value("plinth_watch_cache_objects{").zip(value("plinth_watch_cache_bytes{")))
}

/// The mean size of a ConfigMap's JSON as a list item.
async fn size_of_items(client: &Client, path: &str) -> Result<f64, Error> {
    let (_, body) = read(client, path, "application/json").await?;
    let list: serde_json::Value = serde_json::from_slice(&body)?;
    let items = list["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let bytes: usize = items
        .iter()
        .map(|i| serde_json::to_vec(i).map_or(0, |b| b.len()))
        .sum();
    Ok(bytes as f64 / items.len().max(1) as f64)
}

/// 200 times: a write elsewhere (a ConfigMap of another namespace updated), then a timed
/// consistent list of a resource nobody writes (the Secrets of the benchmark's namespace),
/// which must first learn that its cache has seen that write's revision. The median and p99
/// time of the lists.
async fn quiet_reads(client: &Client) -> Result<(Duration, Duration), Error> {
    const SCRATCH: &str = "plinth-bench-quiet";
    crate::common::ensure_namespace(client, SCRATCH).await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), SCRATCH);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("busy".to_owned());
    match api.create(&PostParams::default(), &cm).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let path = format!("/api/v1/namespaces/{NAMESPACE}/secrets");
    let mut times = Vec::new();
    for i in 0..200 {
        cm.data = Some([("n".to_owned(), i.to_string())].into());
        api.replace("busy", &PostParams::default(), &cm).await?;
        let (took, _) = read(client, &path, "application/json").await?;
        times.push(took);
    }
    times.sort();
    Ok((percentile(&times, 0.5), percentile(&times, 0.99)))
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
