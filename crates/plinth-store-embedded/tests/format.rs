//! The store records the format of its layout. A store written by the previous release
//! (format 1, `tests/data/format-1.db`, written by that release's code) is upgraded in place
//! (through format 2, to format 3: records with their writes' notes) and reads as it did; a store of a newer format than this build's is refused with a clear
//! message and left untouched, as is a file of no format.

#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use plinth_store::{RangeRequest, Store};
use plinth_store_embedded::{DB_FILE, EmbeddedStore};

fn fixture_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/format-1.db"),
        store.join(DB_FILE),
    )
    .unwrap();
    dir
}

fn meta(file: &std::path::Path, name: &str) -> Option<i64> {
    let conn = rusqlite::Connection::open(file).unwrap();
    conn.query_row(
        "SELECT value FROM plinth_meta WHERE name = ?1",
        [name],
        |row| row.get(0),
    )
    .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_the_previous_format_is_upgraded_in_place() {
    let dir = fixture_copy();
    let path = dir.path().join("store");
    assert_eq!(meta(&path.join(DB_FILE), "format"), Some(1));
    let store = EmbeddedStore::open(&path).unwrap();
    // What the previous release wrote, at its revisions: a updated once, b, gone deleted.
    assert_eq!(store.current_revision().await.unwrap(), 6);
    let all = store
        .range(RangeRequest::prefix("/configmaps/"))
        .await
        .unwrap();
    assert_eq!(
        all.kvs
            .iter()
            .map(|kv| (kv.key.as_str(), kv.create_revision, kv.mod_revision))
            .collect::<Vec<_>>(),
        [
            ("/configmaps/default/a", 2, 3),
            ("/configmaps/default/b", 4, 4)
        ]
    );
    assert!(
        String::from_utf8_lossy(&all.kvs[0].value).contains(r#""k":"2""#),
        "a's value"
    );
    // History survives the upgrade: a's first version, and the delete's revision.
    let old = store
        .range(RangeRequest::prefix("/configmaps/default/a").at_revision(2))
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&old.kvs[0].value).contains(r#""k":"1""#));
    let next = store
        .create("/configmaps/default/c", Bytes::from_static(b"{}"))
        .await
        .unwrap();
    assert_eq!(next, 7);
    store.close().await;
    assert_eq!(meta(&path.join(DB_FILE), "format"), Some(3), "upgraded");
    // Records of the old release have no note; new writes keep theirs.
    let store = EmbeddedStore::open(&path).unwrap();
    let versions = store.versions("/configmaps/default/a", 0).await.unwrap();
    assert_eq!(versions.len(), 2);
    assert!(versions.iter().all(|v| v.note.is_none()));
    plinth_store::note::noted(
        Bytes::from_static(b"by the new release"),
        store.update("/configmaps/default/c", Bytes::from_static(b"{}"), 7),
    )
    .await
    .unwrap();
    let versions = store.versions("/configmaps/default/c", 0).await.unwrap();
    assert_eq!(
        versions.last().and_then(|v| v.note.as_deref()),
        Some(&b"by the new release"[..])
    );
    store.close().await;
    // And it opens again as a store of this format.
    let store = EmbeddedStore::open(&path).unwrap();
    assert_eq!(store.current_revision().await.unwrap(), 8);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_a_newer_format_is_refused_and_untouched() {
    let dir = fixture_copy();
    let path = dir.path().join("store");
    let file = path.join(DB_FILE);
    {
        let conn = rusqlite::Connection::open(&file).unwrap();
        conn.execute("UPDATE plinth_meta SET value = 9 WHERE name = 'format'", [])
            .unwrap();
    }
    let before = std::fs::read(&file).unwrap();
    let err = EmbeddedStore::open(&path).unwrap_err().to_string();
    assert!(
        err.contains("store format 9 is newer than this build's (format 3)"),
        "{err}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), before, "left as it was");
    // A backup or restore of it is refused the same way.
    let err = plinth_store_embedded::backup::restore(&file, &dir.path().join("other"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is newer than this build's"), "{err}");

    let conn = rusqlite::Connection::open(&file).unwrap();
    conn.execute("DELETE FROM plinth_meta WHERE name = 'format'", [])
        .unwrap();
    drop(conn);
    let err = EmbeddedStore::open(&path).unwrap_err().to_string();
    assert!(err.contains("no format marker"), "{err}");
}
