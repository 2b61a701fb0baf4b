//! Plinth's default storage backend: a durable, multi-version store in one process, on SQLite
//! (through rusqlite, built from the bundled source — nothing to install), with group commit.
//!
//! It implements [`plinth_store::Store`] and depends on nothing else of Plinth.
//!
//! # Why SQLite
//! redb (pure Rust) and SQLite were the candidates, and both were built and measured here with the
//! same layout (see `benches/`). What decides is the cost of one durable commit, which bounds a
//! single writer: SQLite in WAL mode appends a commit's pages to its log sequentially and reuses
//! the log in place after each checkpoint, so a commit costs about one fsync of already-allocated
//! blocks — close to the disk's own rate (measured ~9,500 commits/s against ~9,700 raw
//! fdatasyncs/s). redb's copy-on-write B-tree writes about eight scattered pages per commit into a
//! file that grows sparsely, and reached only ~4,500 commits/s on the same disk. SQLite also gives
//! readers snapshots that never wait for the writer, and is the most tested storage engine there
//! is. The price — a C library compiled once by `cc` — is paid at build time only.
//!
//! # Design
//! - As in etcd's mvcc: on disk, every change keyed by its revision (commits only append rows);
//!   in memory, an index of each key's revisions that answers which version is visible at a
//!   revision. The index is rebuilt from the disk at start.
//! - One writer thread batches all waiting writes into one transaction and one fsync (group
//!   commit): an acknowledged write is on disk, and throughput grows with concurrency.
//! - Watchers are fed by the writer without blocking; a watcher that falls behind catches up from
//!   disk at its own pace (etcd's synced/unsynced split).
//! - The data directory is locked (`LOCK`); a second process gets [`StoreError::Locked`]. A
//!   directory holding anything but a Plinth store is refused with [`StoreError::BadDataDir`].
//! - [`backup::backup`] copies a live store at one revision (one read transaction, beside
//!   the server that holds the lock); [`backup::restore`] puts the copy into an empty directory.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod backup;
mod hub;
mod index;
mod layout;
mod shared;
mod writer;

use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use plinth_store::note::current_note;
use plinth_store::{
    EventKind, KeyValue, RangeRequest, RangeResponse, Revision, Store, StoreError, StoreResult,
    Version, WatchStream, validate_key,
};
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;

use crate::hub::Hub;
use crate::index::Index;
use crate::layout::{
    FORMAT_VERSION, META_COMPACTED, META_FORMAT, OLDEST_FORMAT, connect, read_meta, read_version,
    scan_entries, sql,
};
use crate::shared::{Readers, Shared};
use crate::writer::{Counters, Op, Outcome, Request};

/// The database file inside the data directory (SQLite adds `-wal` and `-shm` beside it).
pub const DB_FILE: &str = "plinth.db";
/// The lock file inside the data directory.
pub const LOCK_FILE: &str = "LOCK";

/// Tuning for an [`EmbeddedStore`].
#[derive(Clone, Debug)]
pub struct Options {
    /// Most writes committed in one transaction.
    pub max_batch: usize,
    /// Events buffered per watcher before it is switched to catching up from disk.
    pub watch_buffer: usize,
    /// Largest value accepted.
    pub max_value_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            max_batch: 1024,
            watch_buffer: 1024,
            max_value_bytes: 16 << 20,
        }
    }
}

/// The embedded store. Open it inside a tokio runtime; see the [crate docs](crate).
pub struct EmbeddedStore {
    shared: Arc<Shared>,
    writes: mpsc::Sender<Request>,
    writer: Option<std::thread::JoinHandle<()>>,
    dir: PathBuf,
    max_value_bytes: usize,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("dir", &self.dir)
            .field("hub", &self.shared.hub)
            .finish()
    }
}

pub(crate) fn bad_dir(path: &Path, reason: impl std::fmt::Display) -> StoreError {
    StoreError::BadDataDir {
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in `dir`, with default [`Options`].
    ///
    /// # Errors
    /// [`StoreError::Locked`] if another process has it open; [`StoreError::BadDataDir`] if the
    /// directory holds something else or a damaged store; a backend error if called outside a
    /// tokio runtime.
    pub fn open(dir: impl AsRef<Path>) -> StoreResult<Self> {
        Self::open_with(dir, Options::default())
    }

    /// Opens (creating if needed) the store in `dir`.
    ///
    /// # Errors
    /// As [`EmbeddedStore::open`].
    pub fn open_with(dir: impl AsRef<Path>, options: Options) -> StoreResult<Self> {
        let dir = dir.as_ref().to_owned();
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            StoreError::backend(
                "open the store",
                "EmbeddedStore::open must be called inside a tokio runtime",
            )
        })?;
        // The store holds Secrets: a directory it creates is the owner's alone (0700), and so
        // is every file in it (0600; SQLite gives its WAL and shared-memory files the mode of
        // the database file).
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| bad_dir(&dir, format!("cannot create it: {e}")))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| {
                bad_dir(
                    &dir,
                    format!("cannot open lock file {}: {e}", lock_path.display()),
                )
            })?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    path: dir,
                    lock: lock_path,
                });
            }
            Err(TryLockError::Error(e)) => {
                return Err(bad_dir(
                    &dir,
                    format!("cannot lock {}: {e}", lock_path.display()),
                ));
            }
        }
        let path = create_if_new(&dir)?;
        let mut conn =
            connect(&path, false).map_err(|e| bad_dir(&path, format!("cannot open it: {e}")))?;
        let (index, revision, compacted) = load(&mut conn, &path)?;
        let keys = index.len();
        let (writes, requests) = mpsc::channel(options.max_batch * 4);
        let shared = Arc::new_cyclic(|weak| Shared {
            readers: Readers {
                path: path.clone(),
                idle: Mutex::new(Vec::new()),
            },
            hub: Hub::new(weak.clone(), runtime, options.watch_buffer, revision),
            revision: AtomicI64::new(revision),
            index: RwLock::new(index),
            _lock: lock,
        });
        let writer = {
            let shared = shared.clone();
            let counters = Counters {
                revision,
                compacted,
            };
            std::thread::Builder::new()
                .name("plinth-store-writer".into())
                .spawn(move || writer::run(shared, conn, requests, counters, options.max_batch))
                .map_err(|e| StoreError::backend("start the writer thread", e))?
        };
        tracing::info!(dir = %dir.display(), revision, keys, "embedded store open");
        Ok(Self {
            shared,
            writes,
            writer: Some(writer),
            dir,
            max_value_bytes: options.max_value_bytes,
        })
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops the writer after the writes already sent, ends every watch and releases the data
    /// directory, so that it can be opened again at once.
    pub async fn close(self) {
        let Self {
            shared,
            writes,
            writer,
            dir,
            ..
        } = self;
        drop(writes);
        if let Some(writer) = writer {
            let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        }
        shared.hub.close();
        // Readers in flight hold the store briefly; wait for them to finish.
        let mut shared = shared;
        for _ in 0..5000 {
            match Arc::try_unwrap(shared) {
                Ok(last) => {
                    drop(last);
                    return;
                }
                Err(still_shared) => shared = still_shared,
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tracing::warn!(
            dir = %dir.display(),
            "store still in use 5 s after close; it is released when the last reader ends"
        );
    }

    async fn write(&self, op: Op) -> StoreResult<Outcome> {
        let (reply, answer) = oneshot::channel();
        self.writes
            .send(Request { op, reply })
            .await
            .map_err(|_| StoreError::Closed)?;
        answer.await.map_err(|_| StoreError::Closed)?
    }

    fn check_value(&self, key: &str, value: &Bytes) -> StoreResult<()> {
        validate_key(key)?;
        if value.len() > self.max_value_bytes {
            return Err(StoreError::ValueTooLarge {
                key: key.to_owned(),
                size: value.len(),
                limit: Some(self.max_value_bytes),
            });
        }
        Ok(())
    }
}

/// Creates the store file if the directory holds no store yet, and returns its path. A new file
/// is made under a temporary name and renamed once initialised, so a crash during creation never
/// leaves a half-made store behind. A directory holding anything else is refused.
fn create_if_new(dir: &Path) -> StoreResult<PathBuf> {
    let path = dir.join(DB_FILE);
    if path.exists() {
        return Ok(path);
    }
    let temp = dir.join(format!("{DB_FILE}.new"));
    let ours = |name: &str| name == LOCK_FILE || name.starts_with(&format!("{DB_FILE}.new"));
    let strangers: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| bad_dir(dir, format!("cannot list it: {e}")))?
        .filter_map(|entry| {
            entry
                .ok()
                .map(|e| e.file_name().to_string_lossy().into_owned())
        })
        .filter(|name| !ours(name))
        .collect();
    if !strangers.is_empty() {
        return Err(bad_dir(
            dir,
            format!(
                "it holds files that are not a Plinth store ({}); refusing to create a store over them",
                strangers.join(", ")
            ),
        ));
    }
    for leftover in ["", "-wal", "-shm", "-journal"] {
        let _ = std::fs::remove_file(dir.join(format!("{DB_FILE}.new{leftover}")));
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(|e| bad_dir(&temp, format!("cannot create the store file: {e}")))?;
    layout::create(&temp)
        .map_err(|e| bad_dir(&temp, format!("cannot create the store file: {e}")))?;
    std::fs::rename(&temp, &path)
        .map_err(|e| bad_dir(&path, format!("cannot move the new store into place: {e}")))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| bad_dir(dir, format!("cannot sync it: {e}")))?;
    Ok(path)
}

/// The error for a file at `path` SQLite or our schema does not recognise.
fn not_ours(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |e: rusqlite::Error| {
        if e.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) {
            bad_dir(path, format!("not a store file: {e}"))
        } else {
            bad_dir(path, format!("not a Plinth store ({e})"))
        }
    }
}

/// Checks that the file `conn` reads (at `path`) is a Plinth store this build reads: of its
/// format, or of an older one it upgrades; returns the format.
pub(crate) fn check_format(conn: &Connection, path: &Path) -> StoreResult<i64> {
    match read_meta(conn, META_FORMAT).map_err(not_ours(path))? {
        Some(format) if (OLDEST_FORMAT..=FORMAT_VERSION).contains(&format) => Ok(format),
        Some(other) if other > FORMAT_VERSION => Err(bad_dir(
            path,
            format!(
                "store format {other} is newer than this build's (format {FORMAT_VERSION}): run the Plinth release that wrote it, or a later one"
            ),
        )),
        Some(other) => Err(bad_dir(
            path,
            format!(
                "store format {other}; this build reads formats {OLDEST_FORMAT} to {FORMAT_VERSION}"
            ),
        )),
        None => Err(bad_dir(path, "not a Plinth store (no format marker)")),
    }
}

/// Checks that this is a Plinth store of our format and rebuilds the key index from it. Returns
/// the index, the current revision and the compaction revision.
fn load(conn: &mut Connection, path: &Path) -> StoreResult<(Index, Revision, Revision)> {
    let not_ours = not_ours(path);
    // WAL mode is a property of the file; set it before anything else touches the file.
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(&not_ours)?;
    let format = check_format(conn, path)?;
    if format < FORMAT_VERSION {
        layout::upgrade(conn, format)
            .map_err(|e| bad_dir(path, format!("cannot upgrade store format {format}: {e}")))?;
        tracing::info!(path = %path.display(), from = format, to = FORMAT_VERSION, "upgraded the store's format in place");
    }
    let compacted = read_meta(conn, META_COMPACTED)
        .map_err(not_ours)?
        .unwrap_or(0);
    let mut index = Index::default();
    let mut revision = 1;
    scan_entries(conn, |key, entry| {
        index.record(key, entry);
        revision = entry.revision;
    })
    .map_err(|e| bad_dir(path, format!("damaged store: {e}")))?;
    let floor = read_meta(conn, layout::META_FLOOR)
        .map_err(|e| bad_dir(path, format!("damaged store: {e}")))?
        .unwrap_or(0);
    Ok((index, revision.max(floor), compacted))
}

/// The oldest revision kept, and a check that `from` (0: the oldest) is not older.
fn history_start(conn: &Connection, from: Revision) -> StoreResult<Revision> {
    let compacted = read_meta(conn, META_COMPACTED)
        .map_err(sql("read meta"))?
        .unwrap_or(0);
    if from != 0 && from < compacted {
        return Err(StoreError::Compacted {
            requested: from,
            compacted: Some(compacted),
        });
    }
    Ok(from)
}

/// [`Store::versions`]: the key's changes from the index, their values and notes from disk.
/// With `from = 0` that includes the version older than the compaction still kept (the state
/// at the compaction revision).
fn read_versions(shared: &Shared, key: &str, from: Revision) -> StoreResult<Vec<Version>> {
    let changes = shared
        .index
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .changes(key);
    shared.readers.with(|conn| {
        let txn = conn.transaction().map_err(sql("begin a read"))?;
        let from = history_start(&txn, from)?;
        let mut versions = Vec::new();
        for entry in changes.into_iter().filter(|e| e.revision >= from) {
            // Compacted since the index was read: older than anything asked for.
            let Some((value, note)) = layout::read_record(&txn, entry.revision)? else {
                continue;
            };
            let kind = if entry.is_tombstone() {
                EventKind::Delete
            } else {
                EventKind::Put
            };
            versions.push(Version {
                kind,
                kv: KeyValue {
                    key: key.to_owned(),
                    value,
                    create_revision: entry.create_revision,
                    mod_revision: entry.revision,
                },
                note,
            });
        }
        Ok(versions)
    })
}

/// [`Store::journal`]: the records under `prefix`, in revision order.
fn read_journal(
    shared: &Shared,
    prefix: &str,
    from: Revision,
    limit: usize,
) -> StoreResult<Vec<Version>> {
    let current = shared.revision.load(Ordering::Acquire);
    shared.readers.with(|conn| {
        let txn = conn.transaction().map_err(sql("begin a read"))?;
        let from = history_start(&txn, from)?;
        let records = layout::records(&txn, from, current, prefix, limit, true, true)?;
        Ok(records
            .into_iter()
            .map(|mut record| {
                let kind = if record.is_delete() {
                    EventKind::Delete
                } else {
                    EventKind::Put
                };
                let note = record.note.take();
                Version {
                    kind,
                    kv: record.into_kv(),
                    note,
                }
            })
            .collect())
    })
}

/// A consistent read of `request` at one revision.
fn read_range(shared: &Shared, request: &RangeRequest) -> StoreResult<RangeResponse> {
    // Every revision up to `current` is in any snapshot begun after this load.
    let current = shared.revision.load(Ordering::Acquire);
    shared.readers.with(|conn| {
        let txn = conn.transaction().map_err(sql("begin a read"))?;
        let compacted = read_meta(&txn, META_COMPACTED)
            .map_err(sql("read meta"))?
            .unwrap_or(0);
        let at = request.revision.filter(|r| *r > 0).unwrap_or(current);
        let too_old = || StoreError::Compacted {
            requested: at,
            compacted: Some(compacted),
        };
        if at < compacted {
            return Err(too_old());
        }
        if at > current {
            return Err(StoreError::FutureRevision {
                requested: at,
                current,
            });
        }
        let start = request
            .start
            .as_deref()
            .filter(|s| *s > request.prefix.as_str())
            .unwrap_or(&request.prefix);
        let limit = request.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let (found, remaining) = shared
            .index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .range(start, &request.prefix, at, limit);
        // Fetch in revision order — neighbours on disk — then put back in key order.
        let mut order: Vec<usize> = (0..found.len()).collect();
        order.sort_unstable_by_key(|i| found[*i].1.revision);
        let mut kvs: Vec<Option<KeyValue>> = vec![None; found.len()];
        for i in order {
            let (key, entry) = &found[i];
            kvs[i] = Some(read_version(&txn, key, *entry)?.ok_or_else(too_old)?);
        }
        let kvs = kvs.into_iter().flatten().collect();
        Ok(RangeResponse {
            kvs,
            revision: at,
            more: remaining > 0,
            remaining,
        })
    })
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn get(&self, key: &str) -> StoreResult<Option<KeyValue>> {
        validate_key(key)?;
        // A compaction may drop the version found between the two steps if a newer one replaced
        // it meanwhile; then the newer one is found on the next try.
        for _ in 0..3 {
            let Some(entry) = self
                .shared
                .index
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .current(key)
            else {
                return Ok(None);
            };
            if let Some(kv) = self
                .shared
                .readers
                .with(|conn| read_version(conn, key, entry))?
            {
                return Ok(Some(kv));
            }
        }
        Err(StoreError::backend(
            "read a key",
            format!("{key:?} kept changing during the read"),
        ))
    }

    async fn range(&self, request: RangeRequest) -> StoreResult<RangeResponse> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || read_range(&shared, &request))
            .await
            .map_err(|e| StoreError::backend("read a range", e.to_string()))?
    }

    async fn create(&self, key: &str, value: Bytes) -> StoreResult<Revision> {
        self.check_value(key, &value)?;
        match self
            .write(Op::Create {
                key: key.to_owned(),
                value,
                note: current_note(),
            })
            .await?
        {
            Outcome::Written(revision) => Ok(revision),
            other => Err(StoreError::backend(
                "create",
                format!("unexpected outcome {other:?}"),
            )),
        }
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> StoreResult<Revision> {
        self.check_value(key, &value)?;
        match self
            .write(Op::Update {
                key: key.to_owned(),
                value,
                expected,
                note: current_note(),
            })
            .await?
        {
            Outcome::Written(revision) => Ok(revision),
            other => Err(StoreError::backend(
                "update",
                format!("unexpected outcome {other:?}"),
            )),
        }
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> StoreResult<(Revision, KeyValue)> {
        validate_key(key)?;
        match self
            .write(Op::Delete {
                key: key.to_owned(),
                expected,
                note: current_note(),
            })
            .await?
        {
            Outcome::Deleted(revision, prev) => Ok((revision, prev)),
            other => Err(StoreError::backend(
                "delete",
                format!("unexpected outcome {other:?}"),
            )),
        }
    }

    async fn watch(&self, prefix: &str, from: Revision) -> StoreResult<WatchStream> {
        Ok(Box::pin(ReceiverStream::new(
            self.shared.hub.watch(prefix.to_owned(), from),
        )))
    }

    async fn compact(&self, revision: Revision) -> StoreResult<()> {
        self.write(Op::Compact { revision }).await.map(drop)
    }

    async fn request_progress(&self) -> StoreResult<()> {
        self.shared.hub.request_progress();
        Ok(())
    }

    fn progress_is_local(&self) -> bool {
        true
    }

    async fn versions(&self, key: &str, from: Revision) -> StoreResult<Vec<Version>> {
        validate_key(key)?;
        let shared = self.shared.clone();
        let key = key.to_owned();
        tokio::task::spawn_blocking(move || read_versions(&shared, &key, from))
            .await
            .map_err(|e| StoreError::backend("read a key's history", e.to_string()))?
    }

    async fn journal(
        &self,
        prefix: &str,
        from: Revision,
        limit: usize,
    ) -> StoreResult<Vec<Version>> {
        let shared = self.shared.clone();
        let prefix = prefix.to_owned();
        tokio::task::spawn_blocking(move || read_journal(&shared, &prefix, from, limit))
            .await
            .map_err(|e| StoreError::backend("read the journal", e.to_string()))?
    }

    fn keeps_notes(&self) -> bool {
        true
    }

    /// The last revision handed to watchers: every acknowledged write is at or below it (a
    /// commit is published before it is acknowledged), and a progress notification asked for
    /// after reading it reports at least it.
    async fn current_revision(&self) -> StoreResult<Revision> {
        Ok(self.shared.hub.published())
    }
}
