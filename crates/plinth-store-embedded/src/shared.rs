//! What the writer thread, the readers and the watchers share: the read connections, the
//! watch hub, the committed revision and the key index.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::AtomicI64;
use std::sync::{Mutex, PoisonError, RwLock};

use plinth_store::StoreResult;
use rusqlite::Connection;

use crate::hub::Hub;
use crate::index::Index;
use crate::layout::{connect, sql};

/// Idle read-only connections, reused across reads.
pub(crate) struct Readers {
    pub(crate) path: PathBuf,
    pub(crate) idle: Mutex<Vec<Connection>>,
}

impl Readers {
    /// Runs `read` on an idle connection (opening one if none is idle).
    pub(crate) fn with<T>(
        &self,
        read: impl FnOnce(&mut Connection) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut conn = match idle {
            Some(conn) => conn,
            None => connect(&self.path, true).map_err(sql("open a read connection"))?,
        };
        let result = read(&mut conn);
        if conn.is_autocommit() {
            self.idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(conn);
        }
        result
    }
}

/// What the writer thread, the readers and the watchers share.
pub(crate) struct Shared {
    pub(crate) readers: Readers,
    pub(crate) hub: Hub,
    /// The last committed revision. Lock order: a commit updates `index`, then this.
    pub(crate) revision: AtomicI64,
    /// Which revision of each key is visible when; written only by the writer thread.
    pub(crate) index: RwLock<Index>,
    /// The data directory's lock, held while the store is open.
    pub(crate) _lock: File,
}
