//! Backups of a store, online: [`backup`] copies the store file in one read transaction (a
//! snapshot at one revision, while the server that holds the directory goes on writing —
//! WAL readers never wait for the writer), and [`restore`] puts such a copy into an empty
//! data directory. Revisions are rows of the file, so resourceVersions survive both.
//! [`import`] builds a store from another store's keys at one revision (etcd's, when moving
//! off etcd), keeping every key's revisions.

use std::fs::OpenOptions;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use plinth_store::{KeyValue, Revision, StoreResult};
use rusqlite::{Connection, OpenFlags};

use crate::{DB_FILE, bad_dir as bad, check_format};

/// Opens `file` read-only and checks it is a store of this build's format; returns the
/// connection and its newest revision.
fn open_store_file(file: &Path) -> StoreResult<(Connection, Revision)> {
    if !file.is_file() {
        return Err(bad(file, "no store file there"));
    }
    let conn = Connection::open_with_flags(
        file,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| bad(file, format!("cannot open it: {e}")))?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(|e| bad(file, e))?;
    check_format(&conn, file)?;
    let revision = crate::layout::current_revision(&conn)
        .map_err(|e| bad(file, format!("cannot read its revision: {e}")))?;
    Ok((conn, revision))
}

/// Writes a consistent copy of the store in data directory `dir` to the new file `to`, while
/// a server may hold the directory and write; returns the revision the copy holds.
///
/// # Errors
/// [`StoreError::BadDataDir`] when `dir` holds no store of this format or `to` exists or
/// cannot be written.
pub fn backup(dir: &Path, to: &Path) -> StoreResult<Revision> {
    let (conn, _) = open_store_file(&dir.join(DB_FILE))?;
    // Created here, the owner's alone (it holds Secrets); SQLite fills the empty file.
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(|e| bad(to, format!("cannot create the backup: {e}")))?;
    let target = to
        .to_str()
        .ok_or_else(|| bad(to, "the path is not UTF-8"))?;
    if let Err(e) = conn.execute("VACUUM INTO ?1", [target]) {
        let _ = std::fs::remove_file(to);
        return Err(bad(to, format!("cannot write the backup: {e}")));
    }
    drop(conn);
    let (_, revision) = open_store_file(to)?;
    Ok(revision)
}

/// Puts backup `from` into data directory `dir` as its store; `dir` may not hold one already.
/// Returns the revision it holds.
///
/// # Errors
/// [`StoreError::BadDataDir`] when `from` is not a store of this format, `dir` holds a store,
/// or the copy fails.
pub fn restore(from: &Path, dir: &Path) -> StoreResult<Revision> {
    let (conn, revision) = open_store_file(from)?;
    drop(conn);
    let path = empty_store_dir(dir, "restore")?;
    let temp = dir.join(format!("{DB_FILE}.restoring"));
    let _ = std::fs::remove_file(&temp);
    let copied = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .and_then(|mut out| {
            let mut input = std::fs::File::open(from)?;
            std::io::copy(&mut input, &mut out)?;
            out.sync_all()
        });
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&temp);
        return Err(bad(&temp, format!("cannot copy the backup: {e}")));
    }
    std::fs::rename(&temp, &path).map_err(|e| {
        bad(
            &path,
            format!("cannot move the restored store into place: {e}"),
        )
    })?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| bad(dir, format!("cannot sync it: {e}")))?;
    Ok(revision)
}

/// Creates data directory `dir` (the owner's alone) if missing and returns its store file's
/// path, refusing a directory that holds a store already (`verb`: what the caller does).
fn empty_store_dir(dir: &Path, verb: &str) -> StoreResult<std::path::PathBuf> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| bad(dir, format!("cannot create it: {e}")))?;
    let path = dir.join(DB_FILE);
    if path.exists() {
        return Err(bad(
            dir,
            format!("it holds a store already; {verb} into an empty data directory"),
        ));
    }
    Ok(path)
}

/// Creates the store of data directory `dir`, which may not hold one, from `kvs`: every live
/// key of another store as it stood at `revision`, each with its create and mod revisions.
/// The new store is at `revision` and compacted there — the history before it was not copied,
/// so a watch from an older resourceVersion is answered 410 — and every object keeps its
/// resourceVersion. Nothing is left behind on failure.
///
/// # Errors
/// [`StoreError::BadDataDir`] when `dir` holds a store, two keys share a mod revision (one
/// transaction wrote both, which this layout cannot record), a revision is past `revision`,
/// or writing fails.
pub fn import(dir: &Path, kvs: &[KeyValue], revision: Revision) -> StoreResult<()> {
    let mut seen = std::collections::HashSet::with_capacity(kvs.len());
    for kv in kvs {
        if kv.mod_revision > revision || kv.mod_revision < 1 {
            return Err(bad(
                dir,
                format!(
                    "{} was written at revision {}, not at or before {revision}",
                    kv.key, kv.mod_revision
                ),
            ));
        }
        if !seen.insert(kv.mod_revision) {
            return Err(bad(
                dir,
                format!(
                    "two keys were written at revision {} (one transaction): their resourceVersions cannot be kept",
                    kv.mod_revision
                ),
            ));
        }
    }
    let path = empty_store_dir(dir, "import")?;
    let temp = dir.join(format!("{DB_FILE}.importing"));
    let _ = std::fs::remove_file(&temp);
    let written = write_import(&temp, kvs, revision);
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        let _ = std::fs::remove_file(temp.with_extension("importing-wal"));
        let _ = std::fs::remove_file(temp.with_extension("importing-shm"));
        return Err(bad(&temp, format!("cannot write the store: {e}")));
    }
    std::fs::rename(&temp, &path)
        .map_err(|e| bad(&path, format!("cannot move the store into place: {e}")))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| bad(dir, format!("cannot sync it: {e}")))
}

fn write_import(temp: &Path, kvs: &[KeyValue], revision: Revision) -> rusqlite::Result<()> {
    crate::layout::create(temp)?;
    let mut conn = crate::layout::connect(temp, false)?;
    let txn = conn.transaction()?;
    let mut ordered: Vec<&KeyValue> = kvs.iter().collect();
    ordered.sort_unstable_by_key(|kv| kv.mod_revision);
    for kv in ordered {
        crate::layout::insert(
            &txn,
            kv.mod_revision,
            &kv.key,
            kv.create_revision,
            &kv.value,
            None,
        )?;
    }
    // At `revision` even if no key changed there.
    crate::layout::write_meta(&txn, crate::layout::META_FLOOR, revision)?;
    crate::layout::write_meta(&txn, crate::layout::META_COMPACTED, revision)?;
    txn.commit()?;
    // One file: leaving WAL mode folds the log in, so the rename moves everything (the store
    // goes back to WAL mode when opened).
    conn.pragma_update(None, "journal_mode", "DELETE")?;
    conn.close().map_err(|(_, e)| e)?;
    std::fs::File::open(temp)
        .and_then(|f| f.sync_all())
        .map_err(|e| {
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
                Some(e.to_string()),
            )
        })
}
