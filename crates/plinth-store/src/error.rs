//! The one error type of every backend.

use std::path::PathBuf;

use crate::{KeyValue, Revision};

/// The result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// Everything a store operation can fail with, whatever the backend. The API server turns these
/// into HTTP `Status` errors in one place.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `create` found the key present.
    #[error("key {key:?} already exists")]
    AlreadyExists {
        /// The key.
        key: String,
    },
    /// The key does not exist.
    #[error("key {key:?} not found")]
    NotFound {
        /// The key.
        key: String,
    },
    /// A compare-and-swap found another mod revision than expected.
    #[error("key {key:?} was modified: expected revision {expected}, found {}", current.as_ref().map_or(0, |kv| kv.mod_revision))]
    Conflict {
        /// The key.
        key: String,
        /// The mod revision the caller expected.
        expected: Revision,
        /// The current value, so that a retry needs no extra read.
        current: Option<Box<KeyValue>>,
    },
    /// The requested revision is older than the oldest kept in history.
    #[error("revision {requested} has been compacted{}", compacted.map(|c| format!(" (oldest available: {c})")).unwrap_or_default())]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// The oldest revision still available, when the backend says.
        compacted: Option<Revision>,
    },
    /// The requested revision is newer than the store's current revision.
    #[error("revision {requested} is in the future (current revision is {current})")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The current revision, 0 when the backend does not say.
        current: Revision,
    },
    /// An empty key or one with a NUL byte.
    #[error("invalid key {key:?}: keys are non-empty and contain no NUL byte")]
    InvalidKey {
        /// The key.
        key: String,
    },
    /// The value is larger than the backend accepts.
    #[error("value for key {key:?} is {size} bytes, more than the backend accepts{}", limit.map(|l| format!(" ({l} bytes)")).unwrap_or_default())]
    ValueTooLarge {
        /// The key.
        key: String,
        /// The value's size.
        size: usize,
        /// The backend's limit, when it says.
        limit: Option<usize>,
    },
    /// The data directory is locked by another process.
    #[error("data directory {path} is in use by another process (lock file {lock} is held)")]
    Locked {
        /// The data directory.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
    },
    /// The data directory is not a store of this backend, or is damaged.
    #[error("data directory {path} cannot be used: {reason}")]
    BadDataDir {
        /// The data directory or file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The store has no room for the write: the disk is full, or etcd's space quota is
    /// exceeded (its `NOSPACE` alarm). Reads and watches go on; writes succeed again once
    /// space is freed (or the alarm disarmed).
    #[error("{detail}: the store is out of space, writes are refused until space is freed")]
    NoSpace {
        /// The backend's own words (`database or disk is full`, `etcdserver: mvcc: database
        /// space exceeded`).
        detail: String,
    },
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
    /// A backend step failed (I/O, the database engine, the network).
    #[error("storage backend failed to {step}: {source}")]
    Backend {
        /// What the backend was doing.
        step: &'static str,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl StoreError {
    /// Wraps a backend error, naming the step that failed.
    pub fn backend(
        step: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Self::Backend {
            step,
            source: source.into(),
        }
    }
}
