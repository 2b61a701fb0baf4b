//! The conformance suite: the behaviour every backend must show, written once.
//!
//! A backend's test file runs all of it with one macro call, given an async function that makes
//! a fresh, empty store and a guard that keeps its resources alive (a temporary directory, an etcd
//! process):
//!
//! ```ignore
//! async fn fresh() -> (std::sync::Arc<dyn plinth_store::Store>, Box<dyn std::any::Any + Send>) { ... }
//! plinth_store::conformance_tests!(fresh);
//! ```
//!
//! Each case panics with a message saying what broke. None of them assumes absolute revision
//! numbers, only their order, so they hold for a store that other clients also write to.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::{
    KeyValue, RangeRequest, Revision, Store, StoreError, Update, WatchEvent, WatchStream,
    guaranteed_update,
};

mod history;
mod watch;

pub use history::history_keeps_versions_and_notes;

pub use watch::{
    delete_events_carry_previous_value, progress_reports_quiet_and_busy_watches,
    slow_watcher_blocks_nobody, watch_from_compacted_revision_is_too_old,
    watch_replays_without_gap_while_writing,
};

/// Runs every conformance case as its own `#[tokio::test]`, each on a fresh store from `$fresh`.
#[macro_export]
macro_rules! conformance_tests {
    ($fresh:path) => {
        $crate::conformance_tests!(@cases $fresh;
            crud_semantics,
            range_order_prefix_limit_and_revision,
            concurrent_writers_lose_no_update,
            watch_replays_without_gap_while_writing,
            watch_from_compacted_revision_is_too_old,
            paginated_range_is_consistent_during_writes,
            delete_events_carry_previous_value,
            large_values_round_trip,
            slow_watcher_blocks_nobody,
            compaction_keeps_current_state,
            oversized_value_is_refused,
            progress_reports_quiet_and_busy_watches,
            guaranteed_delete_sees_the_latest_value,
            history_keeps_versions_and_notes,
        );
    };
    (@cases $fresh:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let (store, _guard) = $fresh().await;
                $crate::conformance::run(stringify!($case), $crate::conformance::$case(store)).await;
            }
        )*
    };
}

/// Runs one case with an overall time limit, so a hang fails instead of stalling CI.
pub async fn run(name: &str, case: impl std::future::Future<Output = ()>) {
    if tokio::time::timeout(Duration::from_secs(120), case)
        .await
        .is_err()
    {
        panic!("conformance case {name} did not finish within 120 s");
    }
}

pub(crate) fn b(s: impl Into<Vec<u8>>) -> Bytes {
    Bytes::from(s.into())
}

pub(crate) async fn next_event(stream: &mut WatchStream, what: &str) -> WatchEvent {
    match tokio::time::timeout(Duration::from_secs(30), stream.next()).await {
        Ok(Some(Ok(event))) => event,
        Ok(Some(Err(e))) => panic!("{what}: watch failed: {e}"),
        Ok(None) => panic!("{what}: watch ended early"),
        Err(_) => panic!("{what}: no watch event within 30 s"),
    }
}

pub(crate) async fn collect_events(
    stream: &mut WatchStream,
    n: usize,
    what: &str,
) -> Vec<WatchEvent> {
    let mut events = Vec::with_capacity(n);
    while events.len() < n {
        events.push(next_event(stream, what).await);
    }
    events
}

/// Create, get, update, delete and their failures.
pub async fn crud_semantics(store: Arc<dyn Store>) {
    let r0 = store.current_revision().await.unwrap();
    let r1 = store.create("/crud/a", b("1")).await.unwrap();
    assert!(r1 > r0, "create must advance the revision ({r0} -> {r1})");
    assert_eq!(store.current_revision().await.unwrap(), r1);

    let kv = store
        .get("/crud/a")
        .await
        .unwrap()
        .expect("created key is readable");
    assert_eq!(
        kv,
        KeyValue {
            key: "/crud/a".into(),
            value: b("1"),
            create_revision: r1,
            mod_revision: r1
        }
    );
    assert!(store.get("/crud/missing").await.unwrap().is_none());

    match store.create("/crud/a", b("again")).await {
        Err(StoreError::AlreadyExists { key }) => assert_eq!(key, "/crud/a"),
        other => panic!("second create must fail with AlreadyExists, got {other:?}"),
    }

    let r2 = store.update("/crud/a", b("2"), r1).await.unwrap();
    assert!(r2 > r1);
    let kv = store.get("/crud/a").await.unwrap().unwrap();
    assert_eq!(
        (kv.value.clone(), kv.create_revision, kv.mod_revision),
        (b("2"), r1, r2)
    );

    match store.update("/crud/a", b("stale"), r1).await {
        Err(StoreError::Conflict {
            key,
            expected,
            current,
        }) => {
            assert_eq!((key.as_str(), expected), ("/crud/a", r1));
            let current = current.expect("a conflict carries the current value");
            assert_eq!((current.value, current.mod_revision), (b("2"), r2));
        }
        other => panic!("stale update must conflict, got {other:?}"),
    }
    assert_eq!(
        store.get("/crud/a").await.unwrap().unwrap().value,
        b("2"),
        "a failed write changes nothing"
    );

    assert!(matches!(
        store.update("/crud/missing", b("x"), r1).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.delete("/crud/missing", None).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.delete("/crud/a", Some(r1)).await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(
        store.get("/crud/a").await.unwrap().is_some(),
        "a conflicting delete deletes nothing"
    );

    let (r3, prev) = store.delete("/crud/a", Some(r2)).await.unwrap();
    assert!(r3 > r2);
    assert_eq!((prev.value, prev.mod_revision), (b("2"), r2));
    assert!(store.get("/crud/a").await.unwrap().is_none());

    let r4 = store.create("/crud/a", b("reborn")).await.unwrap();
    let kv = store.get("/crud/a").await.unwrap().unwrap();
    assert_eq!(
        (kv.create_revision, kv.mod_revision),
        (r4, r4),
        "re-creation starts a new life"
    );
    let (r5, _) = store.delete("/crud/a", None).await.unwrap();
    assert!(r5 > r4, "an unconditional delete works");

    for bad in ["", "a\0b"] {
        assert!(
            matches!(
                store.create(bad, b("x")).await,
                Err(StoreError::InvalidKey { .. })
            ),
            "key {bad:?}"
        );
        assert!(
            matches!(store.get(bad).await, Err(StoreError::InvalidKey { .. })),
            "key {bad:?}"
        );
    }
    assert_eq!(
        store.current_revision().await.unwrap(),
        r5,
        "failed writes do not advance the revision"
    );
}

/// Ranges are in key order, stay inside their prefix, honour limits and read old revisions.
pub async fn range_order_prefix_limit_and_revision(store: Arc<dyn Store>) {
    for key in ["/r/c", "/r/a", "/r/b/x", "/r/b", "/rr/z", "/r"] {
        store.create(key, b(key)).await.unwrap();
    }
    let all = store.range(RangeRequest::prefix("/r/")).await.unwrap();
    let keys: Vec<_> = all.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/r/a", "/r/b", "/r/b/x", "/r/c"]);
    assert!(!all.more);
    assert_eq!(all.remaining, 0);
    assert!(all.kvs.iter().all(|kv| kv.value == kv.key.as_bytes()));
    let rev = all.revision;
    assert_eq!(rev, store.current_revision().await.unwrap());

    let page1 = store
        .range(RangeRequest::prefix("/r/").limit(2))
        .await
        .unwrap();
    assert_eq!(
        page1
            .kvs
            .iter()
            .map(|kv| kv.key.as_str())
            .collect::<Vec<_>>(),
        ["/r/a", "/r/b"]
    );
    assert!(page1.more);
    assert_eq!(page1.remaining, 2, "two keys follow the first page");
    let page2 = store
        .range(
            RangeRequest::prefix("/r/")
                .limit(2)
                .at_revision(page1.revision)
                .continue_after("/r/b"),
        )
        .await
        .unwrap();
    assert_eq!(
        page2
            .kvs
            .iter()
            .map(|kv| kv.key.as_str())
            .collect::<Vec<_>>(),
        ["/r/b/x", "/r/c"]
    );
    assert!(!page2.more, "nothing follows the last page");
    assert_eq!(page2.remaining, 0);
    assert_eq!(page2.revision, page1.revision);

    let a = store.get("/r/a").await.unwrap().unwrap();
    store
        .update("/r/a", b("new"), a.mod_revision)
        .await
        .unwrap();
    store.delete("/r/c", None).await.unwrap();
    let now = store.range(RangeRequest::prefix("/r/")).await.unwrap();
    assert_eq!(now.kvs.len(), 3);
    assert_eq!(now.kvs[0].value, b("new"));
    let then = store
        .range(RangeRequest::prefix("/r/").at_revision(rev))
        .await
        .unwrap();
    assert_eq!(
        then.kvs, all.kvs,
        "a read at an old revision sees the old state"
    );
    assert_eq!(then.revision, rev);

    let future = now.revision + 100;
    match store
        .range(RangeRequest::prefix("/r/").at_revision(future))
        .await
    {
        Err(StoreError::FutureRevision { requested, .. }) => assert_eq!(requested, future),
        other => panic!("a read in the future must fail, got {other:?}"),
    }
    let empty = store
        .range(RangeRequest::prefix("/nothing-here/"))
        .await
        .unwrap();
    assert!(empty.kvs.is_empty() && !empty.more);
}

/// 32 writers incrementing one counter through the guaranteed-update loop lose nothing.
pub async fn concurrent_writers_lose_no_update(store: Arc<dyn Store>) {
    const WRITERS: u64 = 32;
    const EACH: u64 = 15;
    store.create("/counter", b("0")).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut revisions = Vec::new();
            for _ in 0..EACH {
                let kv = guaranteed_update::<_, _, StoreError>(&*store, "/counter", |kv| {
                    let n: u64 = std::str::from_utf8(&kv.value).unwrap().parse().unwrap();
                    Box::pin(std::future::ready(Ok(Update::Write(
                        b((n + 1).to_string()),
                    ))))
                })
                .await
                .unwrap();
                revisions.push(kv.mod_revision);
            }
            revisions
        }));
    }
    let mut all = BTreeSet::new();
    for task in tasks {
        for rev in task.await.unwrap() {
            assert!(all.insert(rev), "two successful writes got revision {rev}");
        }
    }
    let kv = store.get("/counter").await.unwrap().unwrap();
    assert_eq!(
        kv.value,
        b((WRITERS * EACH).to_string()),
        "no increment is lost"
    );
    assert_eq!(kv.mod_revision, *all.last().unwrap());

    let unchanged = guaranteed_update::<_, _, StoreError>(&*store, "/counter", |_| {
        Box::pin(std::future::ready(Ok(Update::Unchanged)))
    })
    .await
    .unwrap();
    assert_eq!(unchanged, kv, "an unchanged update writes nothing");
    assert!(matches!(
        guaranteed_update::<_, _, StoreError>(&*store, "/no-counter", |_| {
            Box::pin(std::future::ready(Ok(Update::Unchanged)))
        })
        .await,
        Err(StoreError::NotFound { .. })
    ));
}

/// A delete decided in the guaranteed-update loop happens only at the revision it decided on:
/// writers racing it make it decide again on their value, and it deletes exactly once.
pub async fn guaranteed_delete_sees_the_latest_value(store: Arc<dyn Store>) {
    store.create("/countdown", b("0")).await.unwrap();
    let writers: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..10 {
                    let written =
                        guaranteed_update::<_, _, StoreError>(&*store, "/countdown", |kv| {
                            let n: u64 = std::str::from_utf8(&kv.value).unwrap().parse().unwrap();
                            Box::pin(std::future::ready(Ok(Update::Write(
                                b((n + 1).to_string()),
                            ))))
                        })
                        .await;
                    if matches!(written, Err(StoreError::NotFound { .. })) {
                        return;
                    }
                    written.unwrap();
                }
            })
        })
        .collect();
    // Deletes once the counter reaches 40; before that it leaves the key alone.
    let deleted = loop {
        let mut seen = 0;
        let outcome = guaranteed_update::<_, _, StoreError>(&*store, "/countdown", |kv| {
            seen = std::str::from_utf8(&kv.value).unwrap().parse().unwrap();
            Box::pin(std::future::ready(Ok(if seen >= 40 {
                Update::Delete
            } else {
                Update::Unchanged
            })))
        })
        .await
        .unwrap();
        if seen >= 40 {
            break outcome;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    for writer in writers {
        writer.await.unwrap();
    }
    let value: u64 = std::str::from_utf8(&deleted.value)
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        value >= 40,
        "the delete decided on the value it deleted ({value})"
    );
    assert!(store.get("/countdown").await.unwrap().is_none());
    assert!(matches!(
        guaranteed_update::<_, _, StoreError>(&*store, "/countdown", |_| {
            Box::pin(std::future::ready(Ok(Update::Delete)))
        })
        .await,
        Err(StoreError::NotFound { .. })
    ));
}

/// Pages read at one revision add up to exactly the state at that revision, whatever is written
/// meanwhile.
pub async fn paginated_range_is_consistent_during_writes(store: Arc<dyn Store>) {
    for i in 0..300 {
        store
            .create(&format!("/page/{i:04}"), b("v0"))
            .await
            .unwrap();
    }
    let snapshot = store.current_revision().await.unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4u32 {
        let (store, stop) = (store.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut i = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 2000 {
                let key = format!("/page/{:04}", (i * 7 + w * 13) % 300);
                match i % 3 {
                    0 => drop(store.delete(&key, None).await),
                    1 => drop(
                        store
                            .create(&format!("/page/{w}-new-{i:05}"), b("v1"))
                            .await,
                    ),
                    _ => {
                        if let Some(kv) = store.get(&key).await.unwrap() {
                            drop(store.update(&key, b("v1"), kv.mod_revision).await);
                        }
                    }
                }
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(20)).await;

    let paginate = |revision: Option<Revision>| {
        let store = store.clone();
        async move {
            let mut request = RangeRequest::prefix("/page/").limit(37);
            request.revision = revision;
            let mut out = BTreeMap::new();
            let mut pages = 0;
            loop {
                let page = store.range(request.clone()).await.unwrap();
                pages += 1;
                assert!(page.kvs.len() <= 37);
                for kv in &page.kvs {
                    assert!(
                        out.insert(kv.key.clone(), kv.clone()).is_none(),
                        "key {} on two pages",
                        kv.key
                    );
                }
                request.revision = Some(page.revision);
                match page.kvs.last() {
                    Some(last) if page.more => request = request.continue_after(&last.key),
                    _ => return (out, page.revision, pages),
                }
            }
        }
    };
    let (at_snapshot, rev, pages) = paginate(Some(snapshot)).await;
    assert_eq!(rev, snapshot);
    assert!(
        pages >= 9,
        "300 keys in pages of 37 take 9 pages, took {pages}"
    );
    assert_eq!(
        at_snapshot.len(),
        300,
        "every key present at the snapshot, none added later"
    );
    assert!(
        at_snapshot
            .values()
            .all(|kv| kv.value == b("v0") && kv.mod_revision <= snapshot)
    );

    let (paged, rev, _) = paginate(None).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let whole = store
        .range(RangeRequest::prefix("/page/").at_revision(rev))
        .await
        .unwrap();
    let whole: BTreeMap<_, _> = whole
        .kvs
        .into_iter()
        .map(|kv| (kv.key.clone(), kv))
        .collect();
    assert_eq!(
        paged, whole,
        "pages read during writes equal one read at their revision"
    );
}

/// 1.5 MiB values survive writes, reads, ranges and watches byte for byte.
pub async fn large_values_round_trip(store: Arc<dyn Store>) {
    let big = |seed: u8| {
        Bytes::from(
            (0..1_572_864u32)
                .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
                .collect::<Vec<_>>(),
        )
    };
    let from = store.current_revision().await.unwrap() + 1;
    let r1 = store.create("/big/a", big(1)).await.unwrap();
    store.update("/big/a", big(2), r1).await.unwrap();
    assert_eq!(store.get("/big/a").await.unwrap().unwrap().value, big(2));
    let listed = store.range(RangeRequest::prefix("/big/")).await.unwrap();
    assert_eq!(listed.kvs.len(), 1);
    assert_eq!(listed.kvs[0].value, big(2));
    let (_, prev) = store.delete("/big/a", None).await.unwrap();
    assert_eq!(prev.value, big(2));

    let mut watch = store.watch("/big/", from).await.unwrap();
    let events = collect_events(&mut watch, 3, "large values").await;
    assert_eq!(events[0].kv.value, big(1));
    assert_eq!(events[1].kv.value, big(2));
    assert_eq!(events[1].prev.as_ref().unwrap().value, big(1));
    assert_eq!(events[2].prev.as_ref().unwrap().value, big(2));
}

/// Compaction drops history, never the current state; writes continue after it.
pub async fn compaction_keeps_current_state(store: Arc<dyn Store>) {
    for round in 0..5 {
        for i in 0..20 {
            let key = format!("/keep/{i}");
            match store.get(&key).await.unwrap() {
                None => drop(store.create(&key, b(format!("{round}"))).await.unwrap()),
                Some(_) if i % 7 == 3 => drop(store.delete(&key, None).await.unwrap()),
                Some(kv) => drop(
                    store
                        .update(&key, b(format!("{round}")), kv.mod_revision)
                        .await
                        .unwrap(),
                ),
            }
        }
    }
    let before = store.range(RangeRequest::prefix("/keep/")).await.unwrap();
    store.compact(before.revision).await.unwrap();
    let after = store.range(RangeRequest::prefix("/keep/")).await.unwrap();
    assert_eq!(after.kvs, before.kvs, "compaction keeps the current state");
    for kv in &before.kvs {
        assert_eq!(store.get(&kv.key).await.unwrap().as_ref(), Some(kv));
    }
    let r = store.create("/keep/after", b("x")).await.unwrap();
    assert!(r > before.revision);
    assert_eq!(store.current_revision().await.unwrap(), r);
}

/// A value larger than the backend accepts is refused with `ValueTooLarge` and changes nothing.
pub async fn oversized_value_is_refused(store: Arc<dyn Store>) {
    let huge = Bytes::from(vec![b'h'; 32 << 20]);
    let before = store.current_revision().await.unwrap();
    match store.create("/huge", huge.clone()).await {
        Err(StoreError::ValueTooLarge { key, size, .. }) => {
            assert_eq!((key.as_str(), size), ("/huge", huge.len()))
        }
        other => panic!("a 32 MiB value must be refused, got {other:?}"),
    }
    assert!(store.get("/huge").await.unwrap().is_none());
    let r = store.create("/huge", b("small")).await.unwrap();
    assert!(matches!(
        store.update("/huge", huge, r).await,
        Err(StoreError::ValueTooLarge { .. })
    ));
    assert_eq!(store.get("/huge").await.unwrap().unwrap().value, b("small"));
    assert_eq!(store.current_revision().await.unwrap(), r);
    assert_eq!(r, before + 1, "the refused write took no revision");
}
