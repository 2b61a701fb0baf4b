//! `backup` of an open store while it is written, and `restore` into a new directory: the
//! restored store holds exactly what the original held at the backup's revision, at the
//! same revisions; bad targets and sources are refused and change nothing.

#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use plinth_store::{RangeRequest, Store};
use plinth_store_embedded::EmbeddedStore;
use plinth_store_embedded::backup::{backup, restore};

fn range(prefix: &str, revision: Option<i64>) -> RangeRequest {
    match revision {
        Some(revision) => RangeRequest::prefix(prefix).at_revision(revision),
        None => RangeRequest::prefix(prefix),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_writes_restores_to_its_revision() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(EmbeddedStore::open(dir.path().join("store")).unwrap());
    for i in 0..200 {
        store
            .create(&format!("/things/{i:03}"), Bytes::from(format!("v{i}")))
            .await
            .unwrap();
    }
    store.delete("/things/007", None).await.unwrap();
    // Writes go on while the backup is taken.
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 200..600 {
                store
                    .create(&format!("/things/{i:03}"), Bytes::from(format!("v{i}")))
                    .await
                    .unwrap();
            }
        })
    };
    let file = dir.path().join("backup.db");
    let (from, to) = (dir.path().join("store"), file.clone());
    let revision = tokio::task::spawn_blocking(move || backup(&from, &to))
        .await
        .unwrap()
        .unwrap();
    writer.await.unwrap();
    let expected = store
        .range(range("/things/", Some(revision)))
        .await
        .unwrap();
    assert!(expected.kvs.len() >= 199, "{}", expected.kvs.len());

    let restored_dir = tempfile::tempdir().unwrap();
    let target = restored_dir.path().join("store");
    assert_eq!(restore(&file, &target).unwrap(), revision);
    let restored = EmbeddedStore::open(&target).unwrap();
    assert_eq!(restored.current_revision().await.unwrap(), revision);
    let got = restored.range(range("/things/", None)).await.unwrap();
    assert_eq!(got.kvs, expected.kvs, "same keys, values and revisions");
    assert!(restored.get("/things/007").await.unwrap().is_none());

    // A second restore over it, and a file that is no store, are refused.
    assert!(restore(&file, &target).is_err());
    let junk = restored_dir.path().join("junk");
    std::fs::write(&junk, b"junk").unwrap();
    let elsewhere = restored_dir.path().join("elsewhere");
    assert!(restore(&junk, &elsewhere).is_err());
    assert!(!elsewhere.exists(), "a refused restore creates nothing");
    // An existing backup file is not overwritten.
    let before = std::fs::read(&file).unwrap();
    assert!(backup(&dir.path().join("store"), &file).is_err());
    assert_eq!(std::fs::read(&file).unwrap(), before);
}

fn kv(key: &str, value: &str, create: i64, modified: i64) -> plinth_store::KeyValue {
    plinth_store::KeyValue {
        key: key.into(),
        value: Bytes::from(value.to_owned()),
        create_revision: create,
        mod_revision: modified,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_keeps_every_revision_and_starts_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let kvs = vec![
        kv("/things/b", "B", 7, 40),
        kv("/things/a", "A", 3, 12),
        kv("/other/c", "C", 50, 50),
    ];
    plinth_store_embedded::backup::import(&store_dir, &kvs, 90).unwrap();
    let store = EmbeddedStore::open(&store_dir).unwrap();
    assert_eq!(store.current_revision().await.unwrap(), 90);
    let things = store.range(range("/things/", None)).await.unwrap();
    assert_eq!(things.revision, 90);
    assert_eq!(
        things
            .kvs
            .iter()
            .map(|kv| (
                kv.key.as_str(),
                kv.create_revision,
                kv.mod_revision,
                kv.value.clone()
            ))
            .collect::<Vec<_>>(),
        [
            ("/things/a", 3, 12, Bytes::from("A")),
            ("/things/b", 7, 40, Bytes::from("B"))
        ]
    );
    // History before the import's revision was not copied: reads there are refused.
    assert!(matches!(
        store.range(range("/things/", Some(60))).await,
        Err(plinth_store::StoreError::Compacted { .. })
    ));
    // Writes go on after it.
    let next = store
        .update("/things/a", Bytes::from("A2"), 12)
        .await
        .unwrap();
    assert_eq!(next, 91);
    store.close().await;
    // It survives a restart as written (the revision mark included).
    let store = EmbeddedStore::open(&store_dir).unwrap();
    assert_eq!(store.current_revision().await.unwrap(), 91);
    assert_eq!(store.range(range("", None)).await.unwrap().kvs.len(), 3);
    store.close().await;

    // Refused, and nothing written: a directory with a store, keys of one transaction,
    // a revision past the import's.
    let err = plinth_store_embedded::backup::import(&store_dir, &kvs, 90).unwrap_err();
    assert!(err.to_string().contains("holds a store already"), "{err}");
    let fresh = dir.path().join("fresh");
    let shared = vec![kv("/a", "1", 5, 5), kv("/b", "2", 5, 5)];
    let err = plinth_store_embedded::backup::import(&fresh, &shared, 9).unwrap_err();
    assert!(
        err.to_string()
            .contains("two keys were written at revision 5"),
        "{err}"
    );
    let late = vec![kv("/a", "1", 5, 12)];
    let err = plinth_store_embedded::backup::import(&fresh, &late, 9).unwrap_err();
    assert!(err.to_string().contains("not at or before 9"), "{err}");
    assert!(!fresh.exists(), "nothing left");
}
