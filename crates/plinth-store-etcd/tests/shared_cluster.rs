//! Several Plinth servers over one etcd: stores with the same prefix share keys, revisions and
//! watches; stores with another prefix (another Plinth, or any other tenant) never see them.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use plinth_store::{RangeRequest, Store, StoreError};
use plinth_store_etcd::DEFAULT_PREFIX;
use plinth_store_etcd::testing::EtcdProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_prefix_shares_other_prefix_is_isolated() {
    let etcd = EtcdProcess::start().await.expect("start etcd");
    let server_a = etcd.store(DEFAULT_PREFIX).await.unwrap();
    let server_b = etcd.store(DEFAULT_PREFIX).await.unwrap();
    let other = etcd.store("/other-cluster/").await.unwrap();
    assert_eq!(server_a.prefix(), "/registry/");

    let from = server_b.current_revision().await.unwrap() + 1;
    let mut watch_b = server_b.watch("/configmaps/", from).await.unwrap();
    let mut watch_other = other.watch("/configmaps/", from).await.unwrap();

    let r1 = server_a
        .create("/configmaps/default/a", Bytes::from_static(b"from a"))
        .await
        .unwrap();
    let seen = server_b
        .get("/configmaps/default/a")
        .await
        .unwrap()
        .expect("b reads a's write");
    assert_eq!(
        (seen.value.as_ref(), seen.mod_revision),
        (&b"from a"[..], r1)
    );
    let event = tokio::time::timeout(Duration::from_secs(10), watch_b.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (event.kv.key.as_str(), event.revision()),
        ("/configmaps/default/a", r1)
    );

    // B's stale write conflicts with A's: the compare-and-swap spans servers.
    let r2 = server_b
        .update("/configmaps/default/a", Bytes::from_static(b"from b"), r1)
        .await
        .unwrap();
    assert!(matches!(
        server_a
            .update("/configmaps/default/a", Bytes::from_static(b"stale"), r1)
            .await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(r2 > r1);

    // The other prefix sees nothing of it, and its own key of the same name is separate.
    assert!(other.get("/configmaps/default/a").await.unwrap().is_none());
    assert!(
        other
            .range(RangeRequest::prefix("/"))
            .await
            .unwrap()
            .kvs
            .is_empty()
    );
    let r3 = other
        .create("/configmaps/default/a", Bytes::from_static(b"other"))
        .await
        .unwrap();
    assert!(r3 > r2, "one etcd, one revision sequence");
    let first_other = tokio::time::timeout(Duration::from_secs(10), watch_other.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (first_other.revision(), first_other.kv.value.as_ref()),
        (r3, &b"other"[..])
    );
    assert_eq!(
        server_a
            .get("/configmaps/default/a")
            .await
            .unwrap()
            .unwrap()
            .value
            .as_ref(),
        b"from b"
    );
    let listed = server_a.range(RangeRequest::prefix("/")).await.unwrap();
    assert_eq!(
        listed
            .kvs
            .iter()
            .map(|kv| kv.key.as_str())
            .collect::<Vec<_>>(),
        ["/configmaps/default/a"]
    );
}

#[tokio::test]
async fn unreachable_etcd_is_a_clear_error() {
    // Port 9 (discard) on loopback: nothing listens there.
    let err = plinth_store_etcd::EtcdStore::connect(&["http://127.0.0.1:9"], DEFAULT_PREFIX)
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("connect to etcd") && message.contains("127.0.0.1:9"),
        "{message}"
    );
}
