//! Plinth's default storage backend: a durable, multi-version store in one process, on the
//! [redb](https://docs.rs/redb) embedded database, with group commit.
//!
//! It implements [`plinth_store::Store`] and depends on nothing else of Plinth.
//!
//! # Why redb
//! redb and SQLite (through rusqlite) were the candidates. redb wins here because it is pure Rust
//! (no C library to build, nothing to install), gives exactly what etcd's model needs and nothing
//! more — ordered byte-keyed tables, one writer with ACID commits that fsync before returning, and
//! MVCC snapshots for readers that never wait for that writer — and its single-writer design is
//! the natural shape for group commit. SQLite would bring a query engine we would not use and a
//! connection and locking model we would have to work around for the same result.
//!
//! # Design
//! - As in etcd's mvcc: on disk, every change keyed by its revision (appends only, so a commit
//!   dirties few pages); in memory, an index of each key's revisions answers which version is
//!   visible at a revision. The index is rebuilt from the disk at start.
//! - One writer thread batches all waiting writes into one transaction and one fsync (group
//!   commit): an acknowledged write is on disk, and throughput grows with concurrency.
//! - Watchers are fed by the writer without blocking; a watcher that falls behind catches up from
//!   disk at its own pace (etcd's synced/unsynced split).
//! - The data directory is locked (`LOCK`); a second process gets [`StoreError::Locked`]. A
//!   directory holding anything but a Plinth store is refused with [`StoreError::BadDataDir`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod hub;
mod index;
mod layout;
mod writer;

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use plinth_store::{
    KeyValue, RangeRequest, RangeResponse, Revision, Store, StoreError, StoreResult, WatchStream,
    validate_key,
};
use redb::{Database, ReadableDatabase};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;

use crate::hub::Hub;
use crate::index::Index;
use crate::layout::{
    DATA, FORMAT_VERSION, META_COMPACTED, META_FORMAT, meta_key, read_meta, read_version, records,
    storage,
};
use crate::writer::{Counters, Op, Outcome, Request};

/// The database file inside the data directory.
pub const DB_FILE: &str = "plinth.redb";
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
    /// redb's page cache.
    pub cache_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            max_batch: 1024,
            watch_buffer: 1024,
            max_value_bytes: 16 << 20,
            cache_bytes: 256 << 20,
        }
    }
}

/// What the writer thread, the readers and the watchers share.
pub(crate) struct Shared {
    pub(crate) db: Database,
    pub(crate) hub: Hub,
    /// The last committed revision. Lock order: a commit updates `index`, then this.
    pub(crate) revision: AtomicI64,
    /// Which revision of each key is visible when; written only by the writer thread.
    pub(crate) index: RwLock<Index>,
    _lock: File,
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

fn bad_dir(path: &Path, reason: impl std::fmt::Display) -> StoreError {
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
        std::fs::create_dir_all(&dir)
            .map_err(|e| bad_dir(&dir, format!("cannot create it: {e}")))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
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
        let db = open_database(&dir, &options)?;
        let (index, revision, compacted) = load(&db, &dir)?;
        let keys = index.len();
        let (writes, requests) = mpsc::channel(options.max_batch * 4);
        let shared = Arc::new_cyclic(|weak| Shared {
            db,
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
                .spawn(move || writer::run(shared, requests, counters, options.max_batch))
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
        // Readers in flight hold the database briefly; wait for them to finish.
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
        tracing::warn!(dir = %dir.display(), "store still in use 5 s after close; it is released when the last reader ends");
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
                limit: self.max_value_bytes,
            });
        }
        Ok(())
    }
}

/// Opens the database file, or creates it if the directory holds no store yet. A new file is
/// made under a temporary name and renamed once initialised, so a crash during creation never
/// leaves a half-made store behind.
fn open_database(dir: &Path, options: &Options) -> StoreResult<Database> {
    let path = dir.join(DB_FILE);
    let mut builder = Database::builder();
    builder.set_cache_size(options.cache_bytes);
    if path.exists() {
        return builder
            .open(&path)
            .map_err(|e| bad_dir(&path, format!("not a readable store file: {e}")));
    }
    let temp_name = format!("{DB_FILE}.new");
    let strangers: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| bad_dir(dir, format!("cannot list it: {e}")))?
        .filter_map(|entry| {
            entry
                .ok()
                .map(|e| e.file_name().to_string_lossy().into_owned())
        })
        .filter(|name| name != LOCK_FILE && *name != temp_name)
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
    let temp = dir.join(temp_name);
    let _ = std::fs::remove_file(&temp);
    {
        let db = builder
            .create(&temp)
            .map_err(|e| bad_dir(&temp, format!("cannot create the store file: {e}")))?;
        let txn = db
            .begin_write()
            .map_err(|e| StoreError::backend("initialise the store", e))?;
        {
            let mut data = txn
                .open_table(DATA)
                .map_err(|e| StoreError::backend("initialise the store", e))?;
            for (name, value) in [(META_FORMAT, FORMAT_VERSION), (META_COMPACTED, 0)] {
                data.insert(meta_key(name).as_slice(), value.to_be_bytes().as_slice())
                    .map_err(storage("initialise the store"))?;
            }
        }
        txn.commit()
            .map_err(|e| StoreError::backend("initialise the store", e))?;
    }
    std::fs::rename(&temp, &path)
        .map_err(|e| bad_dir(&path, format!("cannot move the new store into place: {e}")))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| bad_dir(dir, format!("cannot sync it: {e}")))?;
    builder
        .open(&path)
        .map_err(|e| bad_dir(&path, format!("cannot reopen the new store file: {e}")))
}

/// Checks that this is a Plinth store of our format and rebuilds the key index from it. Returns
/// the index, the current revision and the compaction revision.
fn load(db: &Database, dir: &Path) -> StoreResult<(Index, Revision, Revision)> {
    let path = dir.join(DB_FILE);
    let txn = db.begin_read().map_err(|e| bad_dir(&path, e))?;
    let data = txn
        .open_table(DATA)
        .map_err(|e| bad_dir(&path, format!("not a Plinth store (no data table: {e})")))?;
    match read_meta(&data, META_FORMAT).map_err(|e| bad_dir(&path, e))? {
        Some(FORMAT_VERSION) => {}
        Some(other) => {
            return Err(bad_dir(
                &path,
                format!("store format {other}; this build reads format {FORMAT_VERSION}"),
            ));
        }
        None => return Err(bad_dir(&path, "not a Plinth store (no format marker)")),
    }
    let compacted = read_meta(&data, META_COMPACTED)
        .map_err(|e| bad_dir(&path, e))?
        .unwrap_or(0) as Revision;
    let mut index = Index::default();
    let mut revision = 1;
    for record in records(&data, 0, Revision::MAX).map_err(|e| bad_dir(&path, e))? {
        let record = record.map_err(|e| bad_dir(&path, format!("damaged store: {e}")))?;
        index.record(&record.key, record.entry());
        revision = record.revision;
    }
    Ok((index, revision, compacted))
}

/// A consistent read of `request` at one revision.
fn read_range(shared: &Shared, request: &RangeRequest) -> StoreResult<RangeResponse> {
    // Every revision up to `current` is in any snapshot begun after this load.
    let current = shared.revision.load(Ordering::Acquire);
    let txn = shared
        .db
        .begin_read()
        .map_err(|e| StoreError::backend("begin a read", e))?;
    let data = txn
        .open_table(DATA)
        .map_err(|e| StoreError::backend("open the data table", e))?;
    let compacted = read_meta(&data, META_COMPACTED)?.unwrap_or(0) as Revision;
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
    let (found, more) = shared
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
        kvs[i] = Some(read_version(&data, key, *entry)?.ok_or_else(too_old)?);
    }
    let kvs = kvs.into_iter().flatten().collect();
    Ok(RangeResponse {
        kvs,
        revision: at,
        more,
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
            let txn = self
                .shared
                .db
                .begin_read()
                .map_err(|e| StoreError::backend("begin a read", e))?;
            let data = txn
                .open_table(DATA)
                .map_err(|e| StoreError::backend("open the data table", e))?;
            if let Some(kv) = read_version(&data, key, entry)? {
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

    async fn current_revision(&self) -> StoreResult<Revision> {
        Ok(self.shared.revision.load(Ordering::Acquire))
    }
}
