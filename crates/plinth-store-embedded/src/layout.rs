//! How the data sits in SQLite.
//!
//! As etcd's mvcc keeps it in bbolt: the change made at every revision, keyed by that revision.
//! Commits only append rows, whatever keys they touch; which revision of a key is visible when is
//! the business of the in-memory [`Index`](crate::index::Index), rebuilt from these rows at start.
//!
//! ```sql
//! plinth_records(revision INTEGER PRIMARY KEY, key TEXT, create_revision INTEGER, value BLOB)
//! plinth_notes(revision INTEGER PRIMARY KEY, note BLOB)  -- a write's note, if any (format 3)
//! plinth_meta(name TEXT PRIMARY KEY, value INTEGER)   -- format, compacted, floor
//! ```
//!
//! Notes sit in a table of their own, so that the records a read touches stay as small as
//! they were (a note column made every get a tenth slower).
//!
//! `create_revision` is 0 for a delete. The last row is the current revision, so commits write
//! no counter — unless `floor` is higher: a store imported from another at revision R is at R
//! though no key changed at R (format 2; format 1 had no floor and is upgraded in place by
//! recording the new format, since a store without a floor reads the same either way; a
//! format-1 binary refuses format 2, whose floor it would ignore). Compaction deletes the rows no read at or after the compaction revision needs
//! (see [`Index::compact`](crate::index::Index::compact)).
//!
//! The database runs in WAL mode with `synchronous = FULL`: a commit appends its pages to the
//! write-ahead log and fsyncs it before returning, and readers read snapshots without waiting.

use std::path::Path;

use bytes::Bytes;
use plinth_store::{KeyValue, Revision, StoreError, StoreResult};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::index::Entry;

pub(crate) const META_FORMAT: &str = "format";
pub(crate) const META_COMPACTED: &str = "compacted";
/// The revision the store is at least at, whatever its last record.
pub(crate) const META_FLOOR: &str = "floor";
/// The on-disk format this code reads and writes.
pub(crate) const FORMAT_VERSION: i64 = 3;
/// The oldest format this code upgrades in place.
pub(crate) const OLDEST_FORMAT: i64 = 1;

const SCHEMA: &str = "
    CREATE TABLE plinth_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
    CREATE TABLE plinth_records (
        revision INTEGER PRIMARY KEY,
        key TEXT NOT NULL,
        create_revision INTEGER NOT NULL,
        value BLOB NOT NULL
    );
    CREATE TABLE plinth_notes (revision INTEGER PRIMARY KEY, note BLOB NOT NULL);
";

/// Wraps a SQLite error, naming the step that failed.
pub(crate) fn sql(step: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |e| StoreError::backend(step, e)
}

/// Opens a connection with the settings every connection uses.
pub(crate) fn connect(path: &Path, read_only: bool) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    // Reads through a shared memory map instead of a small per-connection page cache.
    conn.pragma_update(None, "mmap_size", 1_i64 << 30)?;
    if read_only {
        conn.pragma_update(None, "query_only", true)?;
    }
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

/// Creates a new store file at `path` with the schema.
pub(crate) fn create(path: &Path) -> rusqlite::Result<()> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(path, flags)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    let txn = conn.transaction()?;
    txn.execute_batch(SCHEMA)?;
    txn.execute(
        "INSERT INTO plinth_meta VALUES (?1, ?2), (?3, 0)",
        params![META_FORMAT, FORMAT_VERSION, META_COMPACTED],
    )?;
    txn.commit()?;
    conn.close().map_err(|(_, e)| e)
}

/// Meta entry `name`, if set.
pub(crate) fn read_meta(conn: &Connection, name: &str) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT value FROM plinth_meta WHERE name = ?1")?
        .query_row([name], |row| row.get(0))
        .optional()
}

pub(crate) fn write_meta(conn: &Connection, name: &str, value: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT OR REPLACE INTO plinth_meta VALUES (?1, ?2)")?
        .execute(params![name, value])?;
    Ok(())
}

/// The store's current revision: its last record's, or its floor if higher (1 when empty).
pub(crate) fn current_revision(conn: &Connection) -> rusqlite::Result<Revision> {
    let last: Revision = conn.query_row(
        "SELECT COALESCE(MAX(revision), 1) FROM plinth_records",
        [],
        |row| row.get(0),
    )?;
    Ok(last.max(read_meta(conn, META_FLOOR)?.unwrap_or(0)))
}

/// Brings a store of format `from` (at least [`OLDEST_FORMAT`]) to [`FORMAT_VERSION`] in one
/// transaction: all or nothing.
pub(crate) fn upgrade(conn: &mut Connection, from: i64) -> rusqlite::Result<()> {
    let txn = conn.transaction()?;
    // 1 → 2: the floor is new and optional (absent means 0): only the format changes.
    if from < 2 {
        write_meta(&txn, META_FORMAT, 2)?;
    }
    // 2 → 3: writes' notes, in a table of their own (none for the records written before).
    if from < 3 {
        txn.execute_batch(
            "CREATE TABLE plinth_notes (revision INTEGER PRIMARY KEY, note BLOB NOT NULL)",
        )?;
        write_meta(&txn, META_FORMAT, 3)?;
    }
    txn.commit()
}

/// The change made at one revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) revision: Revision,
    pub(crate) key: String,
    /// 0 for a delete.
    pub(crate) create_revision: Revision,
    pub(crate) value: Bytes,
    /// The write's note.
    pub(crate) note: Option<Bytes>,
}

impl Record {
    pub(crate) fn is_delete(&self) -> bool {
        self.create_revision == 0
    }

    /// The key-value after this change (a delete gives an empty value and create revision 0).
    pub(crate) fn into_kv(self) -> KeyValue {
        KeyValue {
            key: self.key,
            value: self.value,
            create_revision: self.create_revision,
            mod_revision: self.revision,
        }
    }
}

/// Appends the record of a change.
pub(crate) fn insert(
    conn: &Connection,
    revision: Revision,
    key: &str,
    create_revision: Revision,
    value: &[u8],
    note: Option<&[u8]>,
) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT INTO plinth_records VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![revision, key, create_revision, value])?;
    if let Some(note) = note {
        conn.prepare_cached("INSERT INTO plinth_notes VALUES (?1, ?2)")?
            .execute(params![revision, note])?;
    }
    Ok(())
}

pub(crate) fn delete_record(conn: &Connection, revision: Revision) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM plinth_records WHERE revision = ?1")?
        .execute([revision])?;
    conn.prepare_cached("DELETE FROM plinth_notes WHERE revision = ?1")?
        .execute([revision])?;
    Ok(())
}

/// The value of the version `entry` names, as a key-value for `key`; `None` if compacted away.
pub(crate) fn read_version(
    conn: &Connection,
    key: &str,
    entry: Entry,
) -> StoreResult<Option<KeyValue>> {
    let value: Option<Vec<u8>> = conn
        .prepare_cached("SELECT value FROM plinth_records WHERE revision = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([entry.revision], |row| row.get(0))
                .optional()
        })
        .map_err(sql("read a value"))?;
    Ok(value.map(|value| KeyValue {
        key: key.to_owned(),
        value: Bytes::from(value),
        create_revision: entry.create_revision,
        mod_revision: entry.revision,
    }))
}

/// The value and note of the record at `revision`; `None` if compacted away.
pub(crate) fn read_record(
    conn: &Connection,
    revision: Revision,
) -> StoreResult<Option<(Bytes, Option<Bytes>)>> {
    let row: Option<(Vec<u8>, Option<Vec<u8>>)> = conn
        .prepare_cached(
            "SELECT r.value, n.note FROM plinth_records r LEFT JOIN plinth_notes n USING (revision) WHERE r.revision = ?1",
        )
        .and_then(|mut stmt| {
            stmt.query_row([revision], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .map_err(sql("read a record"))?;
    Ok(row.map(|(value, note)| (Bytes::from(value), note.map(Bytes::from))))
}

/// The records from revision `from` to `to` (inclusive) whose key starts with `prefix`, in order,
/// at most `max`; values only if `with_values`, notes only if `with_notes`.
pub(crate) fn records(
    conn: &Connection,
    from: Revision,
    to: Revision,
    prefix: &str,
    max: usize,
    with_values: bool,
    with_notes: bool,
) -> StoreResult<Vec<Record>> {
    let query = match (with_values, with_notes) {
        (true, true) => {
            "SELECT r.revision, r.key, r.create_revision, r.value, n.note FROM plinth_records r LEFT JOIN plinth_notes n USING (revision) WHERE r.revision BETWEEN ?1 AND ?2 ORDER BY r.revision"
        }
        (true, false) => {
            "SELECT revision, key, create_revision, value, NULL FROM plinth_records WHERE revision BETWEEN ?1 AND ?2 ORDER BY revision"
        }
        (false, _) => {
            "SELECT revision, key, create_revision, x'', NULL FROM plinth_records WHERE revision BETWEEN ?1 AND ?2 ORDER BY revision"
        }
    };
    let mut stmt = conn.prepare_cached(query).map_err(sql("scan records"))?;
    let mut rows = stmt.query(params![from, to]).map_err(sql("scan records"))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(sql("scan records"))? {
        let key: String = row.get(1).map_err(sql("scan records"))?;
        if !key.starts_with(prefix) {
            continue;
        }
        let value: Vec<u8> = row.get(3).map_err(sql("scan records"))?;
        let note: Option<Vec<u8>> = row.get(4).map_err(sql("scan records"))?;
        out.push(Record {
            revision: row.get(0).map_err(sql("scan records"))?,
            key,
            create_revision: row.get(2).map_err(sql("scan records"))?,
            value: Bytes::from(value),
            note: note.map(Bytes::from),
        });
        if out.len() >= max {
            break;
        }
    }
    Ok(out)
}

/// Calls `each` for every record's revision, key and create revision, in revision order (no
/// values: this is how the index is rebuilt at start).
pub(crate) fn scan_entries(
    conn: &Connection,
    mut each: impl FnMut(&str, Entry),
) -> rusqlite::Result<()> {
    let mut stmt = conn
        .prepare("SELECT revision, key, create_revision FROM plinth_records ORDER BY revision")?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let key: String = row.get(1)?;
        each(
            &key,
            Entry {
                revision: row.get(0)?,
                create_revision: row.get(2)?,
            },
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        create(&path).unwrap();
        let conn = connect(&path, false).unwrap();
        assert_eq!(read_meta(&conn, META_FORMAT).unwrap(), Some(FORMAT_VERSION));
        insert(&conn, 2, "/a", 2, b"x", Some(b"by alice")).unwrap();
        insert(&conn, 3, "/b", 3, b"y", None).unwrap();
        insert(&conn, 4, "/a", 0, b"", Some(b"by bob")).unwrap();
        let all = records(&conn, 0, 10, "/a", usize::MAX, true, true).unwrap();
        assert_eq!(
            all.iter()
                .map(|r| (r.revision, r.is_delete()))
                .collect::<Vec<_>>(),
            [(2, false), (4, true)]
        );
        assert_eq!(all[0].value, &b"x"[..]);
        assert_eq!(all[1].note.as_deref(), Some(&b"by bob"[..]));
        assert_eq!(
            read_record(&conn, 2).unwrap(),
            Some((
                Bytes::from_static(b"x"),
                Some(Bytes::from_static(b"by alice"))
            ))
        );
        assert_eq!(read_record(&conn, 3).unwrap().map(|r| r.1), Some(None));
        assert!(
            records(&conn, 3, 3, "", 1, false, false).unwrap()[0]
                .value
                .is_empty()
        );
        let kv = read_version(
            &conn,
            "/b",
            Entry {
                revision: 3,
                create_revision: 3,
            },
        )
        .unwrap()
        .unwrap();
        assert_eq!((kv.key.as_str(), kv.value.as_ref()), ("/b", &b"y"[..]));
        delete_record(&conn, 3).unwrap();
        assert!(
            read_version(
                &conn,
                "/b",
                Entry {
                    revision: 3,
                    create_revision: 3
                }
            )
            .unwrap()
            .is_none()
        );
        let mut seen = Vec::new();
        scan_entries(&conn, |k, e| seen.push((k.to_owned(), e.revision))).unwrap();
        assert_eq!(seen, [("/a".to_owned(), 2), ("/a".to_owned(), 4)]);
    }
}
