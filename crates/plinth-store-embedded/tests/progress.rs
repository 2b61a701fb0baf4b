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
