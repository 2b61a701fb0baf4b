//! The data directory: restarts recover everything; a foreign, corrupt or locked directory is a
//! clear error naming the path, and is never touched.

use bytes::Bytes;
use futures::StreamExt;
use plinth_store::{RangeRequest, Store, StoreError};
use plinth_store_embedded::{DB_FILE, EmbeddedStore};

#[tokio::test]
async fn restart_recovers_revision_values_and_history() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("store");
    let store = EmbeddedStore::open(&dir).unwrap();
    let r1 = store.create("/a", Bytes::from_static(b"1")).await.unwrap();
    let r2 = store
        .update("/a", Bytes::from_static(b"2"), r1)
        .await
        .unwrap();
    let r3 = store.create("/b", Bytes::from_static(b"3")).await.unwrap();
    let (r4, _) = store.delete("/b", None).await.unwrap();
    store.compact(r2).await.unwrap();
    store.close().await;

    let store = EmbeddedStore::open(&dir).unwrap();
    assert_eq!(store.current_revision().await.unwrap(), r4);
    let a = store.get("/a").await.unwrap().unwrap();
    assert_eq!(
        (a.value, a.create_revision, a.mod_revision),
        (Bytes::from_static(b"2"), r1, r2)
    );
    assert!(store.get("/b").await.unwrap().is_none());
    let at_r3 = store
        .range(RangeRequest::prefix("/").at_revision(r3))
        .await
        .unwrap();
    assert_eq!(at_r3.kvs.len(), 2, "history at {r3} survives the restart");
    assert!(
        matches!(
            store.range(RangeRequest::prefix("/").at_revision(r1)).await,
            Err(StoreError::Compacted { .. })
        ),
        "the compaction survives the restart"
    );
    let mut watch = store.watch("/", r2).await.unwrap();
    let revisions: Vec<_> = watch
        .by_ref()
        .take(3)
        .map(|e| e.unwrap().revision())
        .collect()
        .await;
    assert_eq!(revisions, [r2, r3, r4]);
    let r5 = store.create("/c", Bytes::from_static(b"5")).await.unwrap();
    assert_eq!(r5, r4 + 1);
    store.close().await;
}

#[tokio::test]
async fn second_open_is_refused_while_the_first_holds_the_lock() {
    let temp = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(temp.path()).unwrap();
    let err = EmbeddedStore::open(temp.path()).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&temp.path().display().to_string()),
        "the error names the directory: {err}"
    );
    store.close().await;
    EmbeddedStore::open(temp.path())
        .expect("free again after close")
        .close()
        .await;
}

#[tokio::test]
async fn foreign_directory_is_refused_and_left_alone() {
    let temp = tempfile::tempdir().unwrap();
    std::fs::write(temp.path().join("notes.txt"), "mine").unwrap();
    let err = EmbeddedStore::open(temp.path()).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, StoreError::BadDataDir { .. }), "{err:?}");
    assert!(
        message.contains(&temp.path().display().to_string()) && message.contains("notes.txt"),
        "{message}"
    );
    assert_eq!(
        std::fs::read_to_string(temp.path().join("notes.txt")).unwrap(),
        "mine"
    );
    assert!(
        !temp.path().join(DB_FILE).exists(),
        "no store was created over foreign files"
    );
}

#[tokio::test]
async fn corrupt_store_file_is_an_error_not_a_fresh_start() {
    let temp = tempfile::tempdir().unwrap();
    let garbage = vec![0x5a_u8; 64 * 1024];
    std::fs::write(temp.path().join(DB_FILE), &garbage).unwrap();
    let err = EmbeddedStore::open(temp.path()).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, StoreError::BadDataDir { .. }), "{err:?}");
    assert!(
        message.contains(&temp.path().join(DB_FILE).display().to_string()),
        "{message}"
    );
    assert_eq!(
        std::fs::read(temp.path().join(DB_FILE)).unwrap(),
        garbage,
        "the file is untouched"
    );
}

#[tokio::test]
async fn a_database_of_another_program_is_refused() {
    let temp = tempfile::tempdir().unwrap();
    let path = temp.path().join(DB_FILE);
    {
        // A valid SQLite database written by "someone else": no Plinth tables.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE other (x INTEGER); INSERT INTO other VALUES (1);")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = EmbeddedStore::open(temp.path()).unwrap_err();
    assert!(err.to_string().contains("not a Plinth store"), "{err}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    let conn = rusqlite::Connection::open(&path).unwrap();
    let x: i64 = conn
        .query_row("SELECT x FROM other", [], |r| r.get(0))
        .unwrap();
    assert_eq!(x, 1, "the other program's data is intact");
    assert_eq!(before.len(), std::fs::read(&path).unwrap().len());
}

#[tokio::test]
async fn the_directory_and_every_file_in_it_are_the_owners_alone() {
    use std::os::unix::fs::PermissionsExt;
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("data").join("store");
    let store = EmbeddedStore::open(&dir).unwrap();
    store
        .create("/secret", Bytes::from_static(b"s3cr3t"))
        .await
        .unwrap();
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path), 0o600, "{}", path.display());
        files += 1;
    }
    assert!(files >= 3, "the lock, the database and its WAL are there");
    store.close().await;
}
