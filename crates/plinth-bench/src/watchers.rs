//! `plinth-bench watchers`: many watchers on one server. Starts `plinth serve --no-node` on a
//! data directory of its own, opens `watchers` watches of ConfigMaps with bookmarks — 99 in
//! 100 on one namespace each (of `namespaces`), 1 in 100 cluster-wide with a label selector
//! (one shard of 100) — then writes `rate` ConfigMaps a second for `seconds`, spread over the
//! namespaces and shards, each stamped with its send time. Reports delivery latency (p50,
//! p99, max), events missed (each watcher knows what it should have seen), and the server's
//! memory per open watch. Needs a file limit above the watcher count (`ulimit -n 12000`);
//! bookmarks are on (kube-rs asks for them by default), the writes last under the watches'
//! 290 s timeout. Each watch has an HTTP/1.1 connection of its own (kube-rs's way), or, with
//! `--http2-streams N`, the watches share HTTP/2 connections of N streams each (client-go's
//! way), so that the memory per watcher is the watch's and not a TLS connection's.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};

use crate::common::{Error, Served, ensure_namespace, now_micros, percentile, rss_mib, serve};

const SHARDS: usize = 100;
const STAMP: &str = "bench.plinth.dev/sent";

fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// What watcher `w` follows: a namespace (index) or a shard cluster-wide.
fn scope(w: usize, namespaces: usize) -> Result<usize, usize> {
    if w % 100 == 99 {
        Err((w / 100) % SHARDS)
    } else {
        Ok(w % namespaces)
    }
}

/// Runs the measurement and prints one table.
///
/// # Errors
/// Too low a file limit, the server not starting, an API failure.
pub(crate) async fn run(
    binary: PathBuf,
    watchers: usize,
    namespaces: usize,
    rate: usize,
    seconds: u64,
    http2_streams: usize,
) -> Result<(), Error> {
    let needed = u64::try_from(watchers)
        .unwrap_or(u64::MAX)
        .saturating_add(1024);
    if open_files_limit().is_some_and(|limit| limit < needed) {
        return Err(format!(
            "{watchers} watchers need a file limit of {needed}: run `ulimit -n {needed}` first"
        )
        .into());
    }
    let namespaces = namespaces.max(1);
    let Served {
        dir: _dir,
        child: mut server,
        pid,
        kubeconfig,
    } = serve(&binary).await?;
    let config = crate::common::config(Some(kubeconfig)).await?;
    let client = kube::Client::try_from(config.clone())?;
    let names: Vec<String> = (0..namespaces).map(|i| format!("watch-{i}")).collect();
    for name in &names {
        ensure_namespace(&client, name).await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_before = rss_mib(pid);
    let rv = Api::<ConfigMap>::all(client.clone())
        .list(&kube::api::ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();

    // What each watcher should see: the writes of its namespace or shard.
    let writes = rate * usize::try_from(seconds).unwrap_or(0);
    let mut expected: BTreeMap<usize, usize> = BTreeMap::new();
    let opening = Instant::now();
    let mut tasks = Vec::with_capacity(watchers);
    let multiplexed = match http2_streams {
        0 => None,
        streams => Some(h2::Watches::open(&config, watchers.div_ceil(streams)).await?),
    };
    for w in 0..watchers {
        if let Some(multiplexed) = &multiplexed {
            let (path, wanted) = match scope(w, namespaces) {
                Ok(ns) => (
                    format!("/api/v1/namespaces/{}/configmaps?", names[ns]),
                    (0..writes).filter(|i| i % namespaces == ns).count(),
                ),
                Err(shard) => (
                    format!("/api/v1/configmaps?labelSelector=shard%3D{shard}&"),
                    (0..writes).filter(|i| i % SHARDS == shard).count(),
                ),
            };
            expected.insert(w, wanted);
            let path = format!(
                "{path}watch=true&allowWatchBookmarks=true&timeoutSeconds=290&resourceVersion={rv}"
            );
            let body = multiplexed
                .watch(w % multiplexed.connections(), &path)
                .await?;
            tasks.push(tokio::spawn(h2::latencies(body, wanted)));
            continue;
        }
        let (api, params, wanted) = match scope(w, namespaces) {
            Ok(ns) => (
                Api::<ConfigMap>::namespaced(client.clone(), &names[ns]),
                WatchParams::default().timeout(290),
                (0..writes).filter(|i| i % namespaces == ns).count(),
            ),
            Err(shard) => (
                Api::<ConfigMap>::all(client.clone()),
                WatchParams::default()
                    .timeout(290)
                    .labels(&format!("shard={shard}")),
                (0..writes).filter(|i| i % SHARDS == shard).count(),
            ),
        };
        expected.insert(w, wanted);
        let stream = api.watch(&params, &rv).await?;
        tasks.push(tokio::spawn(async move {
            let mut stream = stream.boxed();
            let mut latencies = Vec::with_capacity(wanted);
            while latencies.len() < wanted {
                match tokio::time::timeout(Duration::from_secs(30), stream.next()).await {
                    Ok(Some(Ok(WatchEvent::Added(map)))) => {
                        let sent: u64 = map
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(STAMP))
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0);
                        latencies.push(Duration::from_micros(now_micros().saturating_sub(sent)));
                    }
                    Ok(Some(Ok(_))) => {}
                    // Ended, failed, or nothing for 30 s: what arrived is what it got.
                    _ => break,
                }
            }
            latencies
        }));
    }
    let opened = opening.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_open = rss_mib(pid);

    let write_api = |ns: usize| Api::<ConfigMap>::namespaced(client.clone(), &names[ns]);
    let writing = Instant::now();
    let mut late_writes = 0usize;
    for i in 0..writes {
        let due = writing + Duration::from_secs_f64(i as f64 / rate as f64);
        if Instant::now() < due {
            tokio::time::sleep_until(due.into()).await;
        } else if Instant::now() > due + Duration::from_millis(50) {
            late_writes += 1;
        }
        let mut map = ConfigMap::default();
        map.metadata.name = Some(format!("w-{i}"));
        map.metadata.labels = Some([("shard".to_owned(), (i % SHARDS).to_string())].into());
        map.metadata.annotations = Some([(STAMP.to_owned(), now_micros().to_string())].into());
        write_api(i % namespaces)
            .create(&PostParams::default(), &map)
            .await?;
    }
    let mut all = Vec::new();
    let mut missed = 0usize;
    for (w, task) in tasks.into_iter().enumerate() {
        let got = task.await?;
        missed += expected
            .get(&w)
            .copied()
            .unwrap_or(0)
            .saturating_sub(got.len());
        all.extend(got);
    }
    all.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let carried = match http2_streams {
        0 => "an HTTP/1.1 connection each".to_owned(),
        n => format!("HTTP/2, {n} streams a connection"),
    };
    println!("| {watchers} watchers ({carried}), {rate} writes/s for {seconds} s | |");
    println!("|---|---|");
    println!(
        "| watches opened ({} per namespace over {namespaces}, {} cluster-wide by label) | {:.1} s |",
        watchers - watchers / 100,
        watchers / 100,
        opened.as_secs_f64()
    );
    println!(
        "| delivery latency p50 / p99 / max | {:.1} / {:.1} / {:.1} ms ({} events delivered) |",
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99)),
        ms(all.last().copied().unwrap_or_default()),
        all.len()
    );
    println!("| events missed | {missed} |");
    println!("| writes more than 50 ms behind schedule | {late_writes} of {writes} |");
    if let (Some(before), Some(open)) = (rss_before, rss_open) {
        println!(
            "| server RSS before → with the watches open | {:.0} → {:.0} MiB: {:.1} KiB per watcher |",
            before.0,
            open.0,
            (open.0 - before.0) * 1024.0 / watchers as f64
        );
    }
    server.kill().await?;
    Ok(())
}

/// Watches carried over shared HTTP/2 connections.
mod h2 {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Empty};
    use hyper::client::conn::http2::SendRequest;
    use kube::client::ConfigExt;
    use secrecy::ExposeSecret;

    use crate::common::{Error, now_micros};

    /// HTTP/2 connections to the server and how to authenticate on them.
    pub(super) struct Watches {
        senders: Vec<SendRequest<Empty<Bytes>>>,
        authorization: Option<http::HeaderValue>,
        authority: String,
    }

    impl Watches {
        /// Opens `count` HTTP/2 connections to the server `config` names, with its TLS
        /// identity and CA.
        pub(super) async fn open(config: &kube::Config, count: usize) -> Result<Self, Error> {
            let mut tls = config.rustls_client_config()?;
            tls.alpn_protocols = vec![b"h2".to_vec()];
            let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
            let host = config
                .cluster_url
                .host()
                .ok_or("the kubeconfig names no host")?;
            let port = config.cluster_url.port_u16().unwrap_or(443);
            let name = rustls::pki_types::ServerName::try_from(host.to_owned())?;
            let mut senders = Vec::with_capacity(count);
            for _ in 0..count {
                let tcp = tokio::net::TcpStream::connect((host, port)).await?;
                let stream = connector.connect(name.clone(), tcp).await?;
                if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                    return Err("the server did not agree to HTTP/2".into());
                }
                let (sender, connection) =
                    hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .initial_stream_window_size(1 << 20)
                        .handshake(hyper_util::rt::TokioIo::new(stream))
                        .await?;
                tokio::spawn(connection);
                senders.push(sender);
            }
            let authorization = config
                .auth_info
                .token
                .as_ref()
                .map(|t| http::HeaderValue::from_str(&format!("Bearer {}", t.expose_secret())))
                .transpose()?;
            Ok(Self {
                senders,
                authorization,
                authority: format!("{host}:{port}"),
            })
        }

        /// How many connections there are.
        pub(super) fn connections(&self) -> usize {
            self.senders.len()
        }

        /// Starts a watch (`path` with its query) on connection `connection`: its body.
        pub(super) async fn watch(
            &self,
            connection: usize,
            path: &str,
        ) -> Result<hyper::body::Incoming, Error> {
            let mut sender = self.senders[connection % self.senders.len()].clone();
            sender.ready().await?;
            let mut request = http::Request::get(format!("https://{}{path}", self.authority))
                .header(http::header::ACCEPT, "application/json");
            if let Some(authorization) = &self.authorization {
                request = request.header(http::header::AUTHORIZATION, authorization);
            }
            let response = sender.send_request(request.body(Empty::new())?).await?;
            if !response.status().is_success() {
                return Err(format!("watch {path}: {}", response.status()).into());
            }
            Ok(response.into_body())
        }
    }

    /// Reads a watch's events until `wanted` ADDED events came (or the stream ends, fails, or
    /// is quiet for 30 s): the delivery latency of each, from its stamp.
    pub(super) async fn latencies(mut body: hyper::body::Incoming, wanted: usize) -> Vec<Duration> {
        let mut latencies = Vec::with_capacity(wanted);
        let mut pending: Vec<u8> = Vec::new();
        while latencies.len() < wanted {
            let frame = match tokio::time::timeout(Duration::from_secs(30), body.frame()).await {
                Ok(Some(Ok(frame))) => frame,
                _ => break,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            pending.extend_from_slice(&data);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let Ok(event) = serde_json::from_slice::<serde_json::Value>(&line) else {
                    continue;
                };
                if event["type"] == "ADDED" {
                    let sent: u64 = event["object"]["metadata"]["annotations"][super::STAMP]
                        .as_str()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    latencies.push(Duration::from_micros(now_micros().saturating_sub(sent)));
                }
            }
        }
        latencies
    }
}
