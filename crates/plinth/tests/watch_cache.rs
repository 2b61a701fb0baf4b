//! The watch cache under load, through the `kube` crate: many watchers each receive every
//! change once, in order, and a watcher that stops reading slows down neither the writers nor
//! the other watchers (it is disconnected, as kube-apiserver does, and may resume).

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Backend, Plinth};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};

const WATCHERS: usize = 100;
const WRITES: usize = 1_200;

async fn api() -> (Plinth, Api<ConfigMap>, String) {
    let plinth = Plinth::start(Backend::Embedded);
    let api: Api<ConfigMap> = Api::namespaced(plinth.kube_client().await, "default");
    // A resourceVersion from the watch cache itself (`resourceVersion=0`), so that the watches
    // below resume inside its window.
    let start = api
        .list(&ListParams::default().match_any())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    (plinth, api, start)
}

/// Reads `count` ADDED events in order.
async fn read_all(
    stream: impl futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Send + 'static,
    count: usize,
) -> usize {
    let mut stream = stream.boxed();
    let (mut last, mut seen) = (0u64, 0usize);
    while seen < count {
        match tokio::time::timeout(Duration::from_secs(60), stream.next()).await {
            Ok(Some(Ok(WatchEvent::Added(cm)))) => {
                let rv: u64 = cm.metadata.resource_version.unwrap().parse().unwrap();
                assert!(rv > last, "events in order, none twice");
                last = rv;
                seen += 1;
            }
            Ok(Some(Ok(WatchEvent::Bookmark(_)))) => {}
            other => panic!("watcher got {other:?} after {seen} events"),
        }
    }
    seen
}

async fn write(api: &Api<ConfigMap>, writes: usize, value_bytes: usize) -> Duration {
    let started = Instant::now();
    let mut writers = Vec::new();
    for w in 0..8 {
        let api = api.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..writes / 8 {
                let mut cm = ConfigMap::default();
                cm.metadata.name = Some(format!("load-{w}-{i}"));
                cm.data = Some([("v".to_owned(), "x".repeat(value_bytes))].into());
                api.create(&PostParams::default(), &cm).await.unwrap();
            }
        }));
    }
    for writer in writers {
        tokio::time::timeout(Duration::from_secs(120), writer)
            .await
            .expect("writers are never held up by watchers")
            .unwrap();
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_watchers_each_see_every_change() {
    let (_plinth, api, start) = api().await;
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let stream = api
            .watch(&WatchParams::default().timeout(290), &start)
            .await
            .unwrap();
        watchers.push(tokio::spawn(read_all(stream, WRITES)));
    }
    let took = write(&api, WRITES, 16).await;
    for watcher in watchers {
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(120), watcher)
                .await
                .expect("every watcher keeps up")
                .unwrap(),
            WRITES
        );
    }
    eprintln!("{WRITES} writes with {WATCHERS} watchers took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watcher_is_cut_off_not_waited_for() {
    let (_plinth, api, start) = api().await;
    // 1,200 objects of 20 KiB: far more than socket buffers hold for a client that never reads.
    let stalled = api
        .watch(&WatchParams::default().timeout(290), &start)
        .await
        .unwrap();
    let reading = api
        .watch(&WatchParams::default().timeout(290), &start)
        .await
        .unwrap();
    let reader = tokio::spawn(read_all(reading, WRITES));
    write(&api, WRITES, 20 * 1024).await;
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(120), reader)
            .await
            .expect("the reading watcher keeps up")
            .unwrap(),
        WRITES
    );
    let received = tokio::time::timeout(Duration::from_secs(60), stalled.boxed().count())
        .await
        .expect("the stalled stream was ended by the server");
    assert!(
        received < WRITES,
        "the stalled watcher was disconnected, not waited for ({received} events)"
    );
    // Counted as kube-apiserver counts them.
    let metrics = api
        .clone()
        .into_client()
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .unwrap();
    let terminated: u64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_terminated_watchers_total{") && l.contains("configmaps")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(terminated >= 1, "{metrics}");
}
