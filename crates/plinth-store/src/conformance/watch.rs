//! The conformance cases of watches: replay without gaps, compaction, previous values, slow\n//! watchers, progress.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::{EventKind, RangeRequest, Revision, Store, StoreError, WatchEvent, WatchStream};

use super::{b, collect_events, next_event};

/// A watch started from a past revision while writes go on replays every change under its prefix
/// exactly once, in order, and nothing else.
pub async fn watch_replays_without_gap_while_writing(store: Arc<dyn Store>) {
    const WRITERS: usize = 4;
    const EACH: usize = 150;
    let start = store.current_revision().await.unwrap() + 1;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0..EACH {
                let key = format!("/watched/{w}/{}", i % 10);
                let outcome = match store.get(&key).await.unwrap() {
                    None => (
                        store.create(&key, b(format!("{i}"))).await.unwrap(),
                        EventKind::Put,
                    ),
                    Some(kv) if i % 3 == 0 => (
                        store.delete(&key, Some(kv.mod_revision)).await.unwrap().0,
                        EventKind::Delete,
                    ),
                    Some(kv) => (
                        store
                            .update(&key, b(format!("{i}")), kv.mod_revision)
                            .await
                            .unwrap(),
                        EventKind::Put,
                    ),
                };
                acked.push((outcome.0, key, outcome.1));
                store
                    .create(&format!("/unwatched/{w}/{i}"), b("x"))
                    .await
                    .unwrap();
            }
            acked
        }));
    }
    // Start watching while the writers are busy.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut watch = store.watch("/watched/", start).await.unwrap();
    let mut acked = Vec::new();
    for task in tasks {
        acked.extend(task.await.unwrap());
    }
    acked.sort_by_key(|(revision, _, _)| *revision);
    let events = collect_events(&mut watch, acked.len(), "watch while writing").await;
    let seen: Vec<_> = events
        .iter()
        .map(|e| (e.revision(), e.kv.key.clone(), e.kind))
        .collect();
    for pair in seen.windows(2) {
        assert!(
            pair[0].0 < pair[1].0,
            "events out of order or duplicated: {pair:?}"
        );
    }
    assert_eq!(
        seen, acked,
        "the watch delivers exactly the acknowledged writes"
    );
    // Nothing more arrives: the unwatched prefix stays out.
    store.create("/watched/last", b("x")).await.unwrap();
    let last = next_event(&mut watch, "final event").await;
    assert_eq!(last.kv.key, "/watched/last");
}

/// Reads and watches below the compacted revision fail with `Compacted`; compaction rejects
/// revisions that are not new or not yet reached.
pub async fn watch_from_compacted_revision_is_too_old(store: Arc<dyn Store>) {
    let before = store.current_revision().await.unwrap();
    for i in 0..10 {
        store.create(&format!("/old/{i}"), b("x")).await.unwrap();
    }
    let kv = store.get("/old/9").await.unwrap().unwrap();
    let at = store
        .update("/old/9", b("y"), kv.mod_revision)
        .await
        .unwrap();
    store.compact(at).await.unwrap();

    let mut watch = store.watch("/old/", before + 1).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(30), watch.next()).await {
        Ok(Some(Err(StoreError::Compacted { requested, .. }))) => assert_eq!(requested, before + 1),
        other => {
            panic!("a watch from a compacted revision must fail with Compacted, got {other:?}")
        }
    }
    match store
        .range(RangeRequest::prefix("/old/").at_revision(before + 1))
        .await
    {
        Err(StoreError::Compacted { requested, .. }) => assert_eq!(requested, before + 1),
        other => panic!("a read at a compacted revision must fail with Compacted, got {other:?}"),
    }
    // The compacted revision itself is still readable and watchable.
    let at_compaction = store
        .range(RangeRequest::prefix("/old/").at_revision(at))
        .await
        .unwrap();
    assert_eq!(at_compaction.kvs.len(), 10);
    let mut from_compaction = store.watch("/old/", at).await.unwrap();
    let event = next_event(&mut from_compaction, "watch from the compacted revision").await;
    assert_eq!((event.revision(), event.kv.value.clone()), (at, b("y")));

    assert!(
        matches!(store.compact(at).await, Err(StoreError::Compacted { .. })),
        "compacting twice"
    );
    let future = store.current_revision().await.unwrap() + 10;
    assert!(matches!(
        store.compact(future).await,
        Err(StoreError::FutureRevision { .. })
    ));
}

/// Delete events carry the deleted value; put events carry the previous one.
pub async fn delete_events_carry_previous_value(store: Arc<dyn Store>) {
    let from = store.current_revision().await.unwrap() + 1;
    let mut watch = store.watch("/prev/", from).await.unwrap();
    let r1 = store.create("/prev/a", b("x")).await.unwrap();
    let r2 = store.update("/prev/a", b("y"), r1).await.unwrap();
    let (r3, _) = store.delete("/prev/a", None).await.unwrap();
    let events = collect_events(&mut watch, 3, "prev values").await;

    assert_eq!(
        (events[0].kind, events[0].revision(), events[0].prev.clone()),
        (EventKind::Put, r1, None)
    );
    assert_eq!(events[0].kv.value, b("x"));
    assert_eq!(events[0].kv.create_revision, r1);
    assert_eq!((events[1].kind, events[1].revision()), (EventKind::Put, r2));
    assert_eq!(events[1].kv.create_revision, r1);
    assert_eq!(
        events[1]
            .prev
            .as_ref()
            .map(|p| (p.value.clone(), p.mod_revision)),
        Some((b("x"), r1))
    );
    assert_eq!(
        (
            events[2].kind,
            events[2].revision(),
            events[2].kv.key.as_str()
        ),
        (EventKind::Delete, r3, "/prev/a")
    );
    assert!(events[2].kv.value.is_empty());
    let prev = events[2]
        .prev
        .as_ref()
        .expect("a delete event carries the deleted value");
    assert_eq!(
        (prev.value.clone(), prev.create_revision, prev.mod_revision),
        (b("y"), r1, r2)
    );
}

/// A watcher that stops reading blocks neither writers nor other watchers, and still gets every
/// event, in order, once it reads again.
pub async fn slow_watcher_blocks_nobody(store: Arc<dyn Store>) {
    const WRITES: usize = 3000;
    let from = store.current_revision().await.unwrap() + 1;
    let mut stalled = store.watch("/slow/", from).await.unwrap();
    let mut reader = store.watch("/slow/", from).await.unwrap();
    let value = Bytes::from(vec![b'v'; 1024]);

    let mut writers = Vec::new();
    for w in 0..8 {
        let (store, value) = (store.clone(), value.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..WRITES / 8 {
                store
                    .create(&format!("/slow/{w}/{i:05}"), value.clone())
                    .await
                    .unwrap();
            }
        }));
    }
    let reading = tokio::spawn(async move {
        let events = collect_events(&mut reader, WRITES, "reading watcher").await;
        events.windows(2).all(|p| p[0].revision() < p[1].revision())
    });
    for w in writers {
        tokio::time::timeout(Duration::from_secs(60), w)
            .await
            .expect("writers must not wait for a stalled watcher")
            .unwrap();
    }
    assert!(
        tokio::time::timeout(Duration::from_secs(60), reading)
            .await
            .expect("a reading watcher must not wait for a stalled one")
            .unwrap(),
        "events in order"
    );
    let events = collect_events(&mut stalled, WRITES, "stalled watcher, reading again").await;
    assert!(
        events.windows(2).all(|p| p[0].revision() < p[1].revision()),
        "events in order, no duplicate"
    );
    assert!(events[0].revision() >= from);
    let keys: BTreeSet<_> = events.iter().map(|e| e.kv.key.clone()).collect();
    assert_eq!(keys.len(), WRITES, "every write delivered once");
    assert!(
        events
            .iter()
            .all(|e| e.kind == EventKind::Put && e.kv.value == value)
    );
}

/// Waits for a progress notification at `revision` or later, asking for one every 50 ms; every
/// change received meanwhile is returned, and a progress report must never precede a change it
/// covers.
pub(super) async fn progress_at_least(
    store: &Arc<dyn Store>,
    stream: &mut WatchStream,
    revision: Revision,
    what: &str,
) -> Vec<WatchEvent> {
    let mut changes: Vec<WatchEvent> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        store.request_progress().await.unwrap();
        let ask_again = tokio::time::Instant::now() + Duration::from_millis(50);
        while let Ok(item) = tokio::time::timeout_at(ask_again, stream.next()).await {
            let event = match item {
                Some(Ok(event)) => event,
                Some(Err(e)) => panic!("{what}: watch failed: {e}"),
                None => panic!("{what}: watch ended early"),
            };
            if event.kind != EventKind::Progress {
                changes.push(event);
                continue;
            }
            let reported = event.revision();
            assert!(
                changes.iter().all(|c| c.revision() <= reported),
                "{what}: a progress report at {reported} came after a later change"
            );
            if reported >= revision {
                return changes;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: no progress report at {revision} or later within 30 s"
        );
    }
}

/// Progress notifications: a watch whose prefix sees no writes still learns, on request, that
/// it is up to date; one with changes gets the report after them.
pub async fn progress_reports_quiet_and_busy_watches(store: Arc<dyn Store>) {
    // No watch open: asking is harmless.
    store.request_progress().await.unwrap();
    let from = store.current_revision().await.unwrap() + 1;
    let mut quiet = store.watch("/progress/quiet/", from).await.unwrap();
    let mut busy = store.watch("/progress/busy/", from).await.unwrap();
    let dropped = store.watch("/progress/dropped/", from).await.unwrap();
    drop(dropped);
    let mut last = 0;
    for i in 0..5 {
        last = store
            .create(&format!("/progress/busy/{i}"), b("v"))
            .await
            .unwrap();
    }
    let seen = progress_at_least(&store, &mut quiet, last, "quiet watch").await;
    assert!(seen.is_empty(), "the quiet watch saw changes: {seen:?}");
    // Every change a report covers comes before it.
    let seen = progress_at_least(&store, &mut busy, last, "busy watch").await;
    let keys: Vec<&str> = seen.iter().map(|e| e.kv.key.as_str()).collect();
    assert_eq!(
        keys,
        (0..5)
            .map(|i| format!("/progress/busy/{i}"))
            .collect::<Vec<_>>()
    );
    // Later writes elsewhere move the quiet watch's reported progress on.
    let later = store.create("/progress/other", b("v")).await.unwrap();
    let seen = progress_at_least(&store, &mut quiet, later, "quiet watch, later").await;
    assert!(seen.is_empty(), "the quiet watch saw changes: {seen:?}");
}
