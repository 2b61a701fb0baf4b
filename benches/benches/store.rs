//! Storage benchmark: every backend in the same run, on the same disk.
//!
//! Prints, per backend: durable writes/s with 1, 16 and 256 concurrent writers; the time to
//! range over 10,000 keys; watch delivery latency p50/p99 with 100 watchers. Also measures the
//! disk's own fsync rate, the ceiling for a single writer.
//!
//! Environment: `PLINTH_BENCH_SECS` (seconds per write measurement, default 5),
//! `PLINTH_BENCH_BACKENDS` (default `embedded,etcd`), `PLINTH_BENCH_DIR` (default: the system
//! temporary directory).

#![allow(missing_docs, clippy::unwrap_used)]

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use plinth_store::{RangeRequest, Store};
use plinth_store_embedded::EmbeddedStore;
use plinth_store_etcd::testing::EtcdProcess;

fn bench_dir() -> PathBuf {
    std::env::var_os("PLINTH_BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from)
}

fn seconds() -> Duration {
    Duration::from_secs_f64(
        std::env::var("PLINTH_BENCH_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(5.0),
    )
}

/// The disk's durable-write ceiling: 4 KiB writes, each followed by fdatasync, for `duration`.
/// `preallocated`: overwrite a file already written in full (what pg_test_fsync and fio measure;
/// no block allocation); otherwise append to a new file (each sync also commits the file's new
/// size and blocks, as a growing database file does).
fn fsync_rate(duration: Duration, preallocated: bool) -> f64 {
    let dir = tempfile::tempdir_in(bench_dir()).unwrap();
    let path = dir.path().join("fsync");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = vec![7u8; 4096];
    if preallocated {
        for _ in 0..(64 << 20) / block.len() {
            file.write_all(&block).unwrap();
        }
        file.sync_all().unwrap();
        file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < duration {
        file.write_all(&block).unwrap();
        file.sync_data().unwrap();
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Creates of 1 KiB values from `writers` concurrent tasks for `duration`; returns writes/s.
async fn write_rate(store: Arc<dyn Store>, writers: usize, duration: Duration, tag: &str) -> f64 {
    let value = Bytes::from(vec![b'x'; 1024]);
    let done = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (store, value, done, count) =
            (store.clone(), value.clone(), done.clone(), count.clone());
        let tag = tag.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !done.load(Ordering::Relaxed) {
                store
                    .create(&format!("/bench/{tag}/{w}/{i}"), value.clone())
                    .await
                    .unwrap();
                count.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    tokio::time::sleep(duration).await;
    done.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// Median time of a full range over 10,000 keys of 1 KiB.
async fn range_time(store: Arc<dyn Store>) -> Duration {
    let value = Bytes::from(vec![b'r'; 1024]);
    let mut tasks = Vec::new();
    for w in 0..50 {
        let (store, value) = (store.clone(), value.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..200 {
                store
                    .create(&format!("/range/{w:02}/{i:03}"), value.clone())
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut times = Vec::new();
    for _ in 0..11 {
        let start = Instant::now();
        let listed = store.range(RangeRequest::prefix("/range/")).await.unwrap();
        times.push(start.elapsed());
        assert_eq!(listed.kvs.len(), 10_000);
    }
    times.sort();
    times[times.len() / 2]
}

/// Latency from the start of a write to its arrival at each of 100 watchers: (p50, p99).
async fn watch_latency(store: Arc<dyn Store>) -> (Duration, Duration) {
    const WATCHERS: usize = 100;
    const WRITES: usize = 300;
    let epoch = Instant::now();
    let from = store.current_revision().await.unwrap() + 1;
    let mut receivers = Vec::new();
    for _ in 0..WATCHERS {
        let mut watch = store.watch("/latency/", from).await.unwrap();
        receivers.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(WRITES);
            while latencies.len() < WRITES {
                let event = watch.next().await.unwrap().unwrap();
                let sent = u64::from_le_bytes(event.kv.value[..8].try_into().unwrap());
                latencies.push(epoch.elapsed() - Duration::from_nanos(sent));
            }
            latencies
        }));
    }
    for i in 0..WRITES {
        let mut value = (epoch.elapsed().as_nanos() as u64).to_le_bytes().to_vec();
        value.resize(512, b'l');
        store
            .create(&format!("/latency/{i}"), Bytes::from(value))
            .await
            .unwrap();
    }
    let mut all = Vec::new();
    for r in receivers {
        all.extend(r.await.unwrap());
    }
    all.sort();
    (all[all.len() / 2], all[all.len() * 99 / 100])
}

struct Figures {
    name: &'static str,
    writes: Vec<(usize, f64)>,
    range: Duration,
    latency: (Duration, Duration),
}

async fn measure(name: &'static str, store: Arc<dyn Store>, duration: Duration) -> Figures {
    let mut writes = Vec::new();
    for writers in [1, 16, 256] {
        let rate = write_rate(store.clone(), writers, duration, &format!("{writers}")).await;
        eprintln!("  {name}: {writers:>3} writers: {rate:>9.0} writes/s");
        writes.push((writers, rate));
    }
    let range = range_time(store.clone()).await;
    eprintln!("  {name}: range of 10,000 keys: {range:.1?}");
    let latency = watch_latency(store).await;
    eprintln!(
        "  {name}: watch latency p50 {:.2?} p99 {:.2?}",
        latency.0, latency.1
    );
    Figures {
        name,
        writes,
        range,
        latency,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a `cargo test --benches` run passes nothing and only checks
    // that this builds and starts.
    if !std::env::args().any(|a| a == "--bench") {
        println!("store benchmark: run with `cargo bench -p plinth-benches --bench store`");
        return;
    }
    let duration = seconds();
    let backends =
        std::env::var("PLINTH_BENCH_BACKENDS").unwrap_or_else(|_| "embedded,etcd".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        eprintln!("measuring the disk's fsync rate in {} ...", bench_dir().display());
        let fsync = fsync_rate(duration, true);
        let fsync_append = fsync_rate(duration, false);
        eprintln!("  disk: {fsync:.0} fdatasyncs/s overwriting, {fsync_append:.0}/s appending (4 KiB each)");
        let mut results = Vec::new();
        for backend in backends.split(',') {
            match backend.trim() {
                "embedded" => {
                    let dir = tempfile::tempdir_in(bench_dir()).unwrap();
                    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
                    results.push(measure("embedded", store, duration).await);
                }
                "etcd" => {
                    let etcd = EtcdProcess::start().await.expect("start etcd (apt-get install etcd-server)");
                    let store = Arc::new(etcd.store("/registry/").await.unwrap());
                    results.push(measure("etcd", store, duration).await);
                }
                other => panic!("unknown backend {other:?}"),
            }
        }
        println!();
        println!("| backend | 1 writer | 16 writers | 256 writers | range 10,000 keys | watch p50 / p99 (100 watchers) |");
        println!("|---|---|---|---|---|---|");
        for f in &results {
            let w: Vec<_> = f.writes.iter().map(|(_, r)| format!("{r:.0}/s")).collect();
            println!(
                "| {} | {} | {} | {} | {:.1} ms | {:.2} ms / {:.2} ms |",
                f.name,
                w[0],
                w[1],
                w[2],
                f.range.as_secs_f64() * 1e3,
                f.latency.0.as_secs_f64() * 1e3,
                f.latency.1.as_secs_f64() * 1e3
            );
        }
        println!("\ndisk: {fsync:.0} fdatasyncs/s overwriting a preallocated file, {fsync_append:.0}/s appending");
        if let (Some(e), Some(d)) = (results.iter().find(|f| f.name == "embedded"), results.iter().find(|f| f.name == "etcd")) {
            println!("embedded / etcd at 256 writers: {:.2}x", e.writes[2].1 / d.writes[2].1);
            println!(
                "embedded single writer / disk fdatasync rate: {:.2} (overwriting), {:.2} (appending)",
                e.writes[0].1 / fsync,
                e.writes[0].1 / fsync_append
            );
        }
    });
}
