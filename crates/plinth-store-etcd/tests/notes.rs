//! Notes in etcd: a write's note sits beside its object under `\x01notes`, changed in the
//! write's own transaction; a deletion's note is leased, so that no key outlives its object
//! (its value at the deletion's revision stays readable as history).

#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use plinth_store::Store;
use plinth_store::note::noted;
use plinth_store_etcd::testing::{EtcdProcess, etcdctl_binary};

fn etcdctl(etcd: &EtcdProcess, args: &[&str]) -> String {
    let out = std::process::Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &etcd.endpoint()])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_change_with_their_objects_and_deletions_lease_theirs() {
    let etcd = EtcdProcess::start().await.unwrap();
    let store = etcd.store("/registry/").await.unwrap();
    let created = noted(
        Bytes::from_static(b"by alice"),
        store.create("/a", Bytes::from_static(b"1")),
    )
    .await
    .unwrap();
    // The note key changed at the object's revision: one transaction.
    let notes = etcdctl(&etcd, &["get", "--prefix", "\u{1}notes", "-w", "json"]);
    let parsed: serde_json::Value = serde_json::from_str(&notes).unwrap();
    let kv = &parsed["kvs"][0];
    assert_eq!(kv["mod_revision"], created, "{notes}");
    assert!(
        kv.get("lease").is_none(),
        "a live object's note is not leased: {notes}"
    );
    // Nothing under the store's prefix but the object.
    let objects = etcdctl(&etcd, &["get", "--prefix", "/registry/", "--keys-only"]);
    assert_eq!(objects.split_whitespace().count(), 1, "{objects}");

    let (deleted, _) = noted(Bytes::from_static(b"by bob"), store.delete("/a", None))
        .await
        .unwrap();
    let notes = etcdctl(&etcd, &["get", "--prefix", "\u{1}notes", "-w", "json"]);
    let parsed: serde_json::Value = serde_json::from_str(&notes).unwrap();
    let kv = &parsed["kvs"][0];
    assert_eq!(kv["mod_revision"], deleted);
    assert!(
        kv["lease"].as_i64().is_some_and(|l| l != 0),
        "a deletion's note goes with a lease: {notes}"
    );
    let versions = store.versions("/a", 0).await.unwrap();
    let read: Vec<_> = versions.iter().map(|v| v.note.clone()).collect();
    assert_eq!(
        read,
        [
            Some(Bytes::from_static(b"by alice")),
            Some(Bytes::from_static(b"by bob"))
        ]
    );
}
