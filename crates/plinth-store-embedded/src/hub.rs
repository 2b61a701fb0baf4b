//! Watchers: synced ones fed by the writer, lagging ones catching up from disk.
//!
//! As in etcd's mvcc, a watcher is either *synced* — the writer hands it each committed event
//! with a non-blocking send — or *catching up*: its own task reads the log from disk and sends at
//! the watcher's pace. A synced watcher whose buffer is full is switched to catching up from the
//! event it missed, so the writer never waits for anyone. A catching-up watcher that reaches the
//! last published revision becomes synced again.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, PoisonError, Weak};

use plinth_store::{EventKind, Revision, StoreError, StoreResult, WatchEvent};
use tokio::sync::mpsc;

use crate::layout::{META_COMPACTED, read_meta, read_version, records, sql};
use crate::shared::Shared;

type Sender = mpsc::Sender<StoreResult<WatchEvent>>;

struct Slot {
    prefix: String,
    tx: Sender,
    /// The first revision this watcher still needs.
    next: Revision,
    /// Fed by the writer (true) or by its catch-up task (false).
    synced: bool,
}

#[derive(Default)]
struct State {
    slots: HashMap<u64, Slot>,
    next_id: u64,
    /// The last revision whose events were handed to synced watchers.
    published: Revision,
}

/// The set of watchers. Lock order: the hub's lock is never held across a disk read or an await.
pub(crate) struct Hub {
    state: Mutex<State>,
    shared: Weak<Shared>,
    runtime: tokio::runtime::Handle,
    buffer: usize,
}

/// How many events one disk read of a catching-up watcher returns at most.
const CATCH_UP_CHUNK: usize = 512;

impl Hub {
    pub(crate) fn new(
        shared: Weak<Shared>,
        runtime: tokio::runtime::Handle,
        buffer: usize,
        published: Revision,
    ) -> Self {
        Self {
            state: Mutex::new(State {
                published,
                ..State::default()
            }),
            shared,
            runtime,
            buffer,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a watcher of `prefix` from revision `from` (0: after the current revision).
    pub(crate) fn watch(
        &self,
        prefix: String,
        from: Revision,
    ) -> mpsc::Receiver<StoreResult<WatchEvent>> {
        let (tx, rx) = mpsc::channel(self.buffer);
        let mut state = self.lock();
        let next = if from <= 0 { state.published + 1 } else { from };
        let id = state.next_id;
        state.next_id += 1;
        let synced = next > state.published;
        state.slots.insert(
            id,
            Slot {
                prefix: prefix.clone(),
                tx: tx.clone(),
                next,
                synced,
            },
        );
        drop(state);
        if !synced {
            self.spawn_catch_up(id, prefix, tx, next);
        }
        rx
    }

    /// Hands the events of a commit to the synced watchers; called by the writer after each commit.
    pub(crate) fn publish(&self, events: &[WatchEvent], revision: Revision) {
        let mut lagging = Vec::new();
        let mut state = self.lock();
        state.slots.retain(|id, slot| {
            if slot.tx.is_closed() {
                return false;
            }
            if !slot.synced {
                return true;
            }
            for event in events {
                if event.revision() < slot.next || !event.kv.key.starts_with(&slot.prefix) {
                    continue;
                }
                match slot.tx.try_send(Ok(event.clone())) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        slot.synced = false;
                        slot.next = event.revision();
                        lagging.push((*id, slot.prefix.clone(), slot.tx.clone(), slot.next));
                        return true;
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => return false,
                }
            }
            slot.next = revision + 1;
            true
        });
        state.published = revision;
        drop(state);
        for (id, prefix, tx, next) in lagging {
            self.spawn_catch_up(id, prefix, tx, next);
        }
    }

    /// Tells every synced watcher that it has everything up to the last published revision
    /// (a progress notification, sent through its own channel so it follows those events). A
    /// watcher catching up, or with a full buffer, is skipped: it is not up to date yet.
    pub(crate) fn request_progress(&self) {
        let mut state = self.lock();
        let published = state.published;
        state.slots.retain(|_, slot| {
            if !slot.synced {
                return true;
            }
            match slot.tx.try_send(Ok(WatchEvent::progress(published))) {
                Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => true,
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
    }

    /// The last revision whose events were handed to synced watchers.
    pub(crate) fn published(&self) -> Revision {
        self.lock().published
    }

    /// Ends every watch (their streams end); used when the store closes.
    pub(crate) fn close(&self) {
        self.lock().slots.clear();
    }

    fn spawn_catch_up(&self, id: u64, prefix: String, tx: Sender, next: Revision) {
        let shared = self.shared.clone();
        self.runtime.spawn(catch_up(shared, id, prefix, tx, next));
    }

    fn remove(&self, id: u64) {
        self.lock().slots.remove(&id);
    }

    /// Marks a caught-up watcher synced if nothing was published past `through`; false otherwise.
    fn try_sync(&self, id: u64, through: Revision) -> bool {
        let mut state = self.lock();
        if state.published > through {
            return false;
        }
        if let Some(slot) = state.slots.get_mut(&id) {
            slot.synced = true;
            slot.next = through + 1;
        }
        true
    }
}

/// Reads a watcher's missed events from disk and sends them at its pace, until it has caught up.
/// Holds only a weak reference while waiting on the watcher, so a stalled watcher never keeps a
/// closed store open.
async fn catch_up(shared: Weak<Shared>, id: u64, prefix: String, tx: Sender, mut next: Revision) {
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let chunk = {
            let (strong, prefix) = (strong.clone(), prefix.clone());
            tokio::task::spawn_blocking(move || {
                read_history(&strong, &prefix, next, CATCH_UP_CHUNK)
            })
            .await
        };
        drop(strong);
        let chunk =
            chunk.unwrap_or_else(|e| Err(StoreError::backend("read history", e.to_string())));
        let (events, through, at_end) = match chunk {
            Ok(chunk) => chunk,
            Err(error) => {
                let _ = tx.send(Err(error)).await;
                if let Some(strong) = shared.upgrade() {
                    strong.hub.remove(id);
                }
                return;
            }
        };
        for event in events {
            if tx.send(Ok(event)).await.is_err() {
                if let Some(strong) = shared.upgrade() {
                    strong.hub.remove(id);
                }
                return;
            }
        }
        next = through + 1;
        if at_end {
            let Some(strong) = shared.upgrade() else {
                return;
            };
            if strong.hub.try_sync(id, through) {
                return;
            }
        }
    }
}

/// Up to `max` events under `prefix` from revision `from`, read from one snapshot. Returns the
/// events, the last revision examined, and whether that is the last committed revision.
fn read_history(
    shared: &Shared,
    prefix: &str,
    from: Revision,
    max: usize,
) -> StoreResult<(Vec<WatchEvent>, Revision, bool)> {
    // Every revision up to `current` is in any snapshot begun after this load.
    let current = shared.revision.load(Ordering::Acquire);
    shared.readers.with(|conn| {
        let txn = conn.transaction().map_err(sql("begin a read"))?;
        let compacted = read_meta(&txn, META_COMPACTED)
            .map_err(sql("read meta"))?
            .unwrap_or(0);
        let too_old = || StoreError::Compacted {
            requested: from,
            compacted: Some(compacted),
        };
        if from < compacted {
            return Err(too_old());
        }
        let changes = if from <= current {
            records(&txn, from, current, prefix, max, true, false)?
        } else {
            Vec::new()
        };
        let through = match changes.last() {
            Some(last) if changes.len() >= max && last.revision < current => last.revision,
            _ => current,
        };
        // Previous versions come from the index, looked up in one go: the lock is not held
        // while the disk is read.
        let previous: Vec<_> = {
            let index = shared.index.read().unwrap_or_else(PoisonError::into_inner);
            changes
                .iter()
                .map(|r| index.visible(&r.key, r.revision - 1))
                .collect()
        };
        let mut events = Vec::with_capacity(changes.len());
        for (record, previous) in changes.into_iter().zip(previous) {
            let prev = match previous {
                None => None,
                Some(entry) => Some(read_version(&txn, &record.key, entry)?.ok_or_else(too_old)?),
            };
            let kind = if record.is_delete() {
                EventKind::Delete
            } else {
                EventKind::Put
            };
            events.push(WatchEvent {
                kind,
                kv: record.into_kv(),
                prev,
            });
        }
        Ok((events, through, through == current))
    })
}
impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Hub")
            .field("watchers", &state.slots.len())
            .field("published", &state.published)
            .finish()
    }
}
