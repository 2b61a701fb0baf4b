//! Progress in one process: when `request_progress` returns, a quiet watch's report is
//! already queued, at or past every acknowledged write — what lets the API server's watch
//! cache answer a consistent read without a request loop.

use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use plinth_store::{EventKind, Store};
use plinth_store_embedded::EmbeddedStore;

#[tokio::test]
async fn a_progress_report_is_queued_when_the_request_returns() {
    let temp = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(temp.path().join("store")).unwrap();
    assert!(store.progress_is_local());
    let from = store.current_revision().await.unwrap() + 1;
    let mut quiet = store.watch("/quiet/", from).await.unwrap();
    for i in 0..3 {
        let written = store
            .create(&format!("/busy/{i}"), Bytes::from_static(b"v"))
            .await
            .unwrap();
        // Every acknowledged write is at or below the current revision...
        let current = store.current_revision().await.unwrap();
        assert!(current >= written, "current {current}, written {written}");
        store.request_progress().await.unwrap();
        // ...and the report is in the watch's queue now, without any waiting.
        let event = quiet
            .next()
            .now_or_never()
            .expect("a progress report is queued when request_progress returns")
            .expect("the watch is open")
            .unwrap();
        assert_eq!(event.kind, EventKind::Progress);
        assert!(
            event.revision() >= written,
            "reported {}, written {written}",
            event.revision()
        );
    }
    store.close().await;
}

/// What a read has seen is never newer than the current revision read after it: a get that
/// finds a write at revision N, followed by `current_revision`, gives N or more — else a
/// consistent list that follows the get (served from the watch cache once it reaches the
/// current revision) misses that write. Found by `plinth-bench robustness` (a get saw rev N,
/// the same client's next list came at N-1): the index showed a commit before its revision
/// was current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_a_get_finds_is_at_or_below_the_current_revision() {
    let temp = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(EmbeddedStore::open(temp.path().join("store")).unwrap());
    let created = store
        .create("/hot/key", Bytes::from_static(b"0"))
        .await
        .unwrap();
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut expected = created;
            for i in 0..3000u32 {
                expected = store
                    .update("/hot/key", Bytes::from(i.to_string()), expected)
                    .await
                    .unwrap();
            }
        })
    };
    let mut reads = 0;
    while !writer.is_finished() {
        let Some(found) = store.get("/hot/key").await.unwrap() else {
            continue;
        };
        let current = store.current_revision().await.unwrap();
        assert!(
            current >= found.mod_revision,
            "a get found rev {}, then the current revision was {current}",
            found.mod_revision
        );
        reads += 1;
    }
    writer.await.unwrap();
    assert!(reads > 0);
    if let Ok(store) = std::sync::Arc::try_unwrap(store) {
        store.close().await;
    }
}
