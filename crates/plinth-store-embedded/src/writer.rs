//! The one writer thread: group commit.
//!
//! Every write is a request on a channel. The thread takes all requests waiting (up to a batch
//! limit), applies them one after another inside one SQLite transaction — each sees the ones
//! before it — commits once with an fsync, and only then updates the index, answers the writers
//! and tells the watchers. While one commit waits for the disk the next batch gathers, so the
//! commit rate stays at the disk's fsync rate while the write rate grows with concurrency.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use bytes::Bytes;
use plinth_store::{EventKind, KeyValue, Revision, StoreError, StoreResult, WatchEvent};
use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::{mpsc, oneshot};

use crate::index::{Entry, Index};
use crate::layout::{META_COMPACTED, delete_record, insert, read_version, sql, write_meta};
use crate::shared::Shared;

/// A write the thread applies.
#[derive(Debug)]
pub(crate) enum Op {
    Create {
        key: String,
        value: Bytes,
        note: Option<Bytes>,
    },
    Update {
        key: String,
        value: Bytes,
        expected: Revision,
        note: Option<Bytes>,
    },
    Delete {
        key: String,
        expected: Option<Revision>,
        note: Option<Bytes>,
    },
    Compact {
        revision: Revision,
    },
}

/// What a successful write produced.
#[derive(Debug)]
pub(crate) enum Outcome {
    Written(Revision),
    Deleted(Revision, KeyValue),
    Compacted,
}

pub(crate) struct Request {
    pub(crate) op: Op,
    pub(crate) reply: oneshot::Sender<StoreResult<Outcome>>,
}

/// The writer's counters; changed only after a commit succeeds.
pub(crate) struct Counters {
    pub(crate) revision: Revision,
    pub(crate) compacted: Revision,
}

/// Runs until every sender is gone, writing through `conn`.
pub(crate) fn run(
    shared: Arc<Shared>,
    mut conn: Connection,
    mut requests: mpsc::Receiver<Request>,
    mut counters: Counters,
    max_batch: usize,
) {
    let mut batch = Vec::with_capacity(max_batch);
    while let Some(first) = requests.blocking_recv() {
        batch.push(first);
        while batch.len() < max_batch {
            match requests.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        // Compactions get a transaction of their own; the writes around them keep their order.
        let mut group = Vec::new();
        for request in batch.drain(..) {
            if let Op::Compact { revision } = request.op {
                commit_writes(
                    &shared,
                    &mut conn,
                    &mut counters,
                    std::mem::take(&mut group),
                );
                let result = compact(&shared, &mut conn, &mut counters, revision)
                    .map(|()| Outcome::Compacted);
                let _ = request.reply.send(result);
            } else {
                group.push(request);
            }
        }
        commit_writes(&shared, &mut conn, &mut counters, group);
    }
}

/// One applied write: its outcome, its event, and the index entry to record after the commit.
type Applied = (Outcome, WatchEvent, Entry);

/// The writes of one transaction so far, on top of the index: key → its newest entry.
type Overlay = HashMap<String, Entry>;

fn commit_writes(
    shared: &Shared,
    conn: &mut Connection,
    counters: &mut Counters,
    group: Vec<Request>,
) {
    if group.is_empty() {
        return;
    }
    let mut revision = counters.revision;
    // A storage failure aborts the whole transaction; a refused write (conflict, not found...)
    // fails alone and leaves the transaction untouched.
    let attempt = (|| -> StoreResult<Vec<StoreResult<Applied>>> {
        let txn = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql("begin a write transaction"))?;
        let mut results = Vec::with_capacity(group.len());
        {
            let index = shared.index.read().unwrap_or_else(PoisonError::into_inner);
            let mut overlay = Overlay::new();
            for request in &group {
                let applied = apply(&txn, &index, &mut overlay, &request.op, revision + 1)?;
                if applied.is_ok() {
                    revision += 1;
                }
                results.push(applied);
            }
        }
        txn.commit().map_err(sql("commit"))?;
        Ok(results)
    })();
    let results = match attempt {
        Ok(results) => results,
        Err(failure) => {
            tracing::error!(error = %failure, "write transaction failed; {} writes rejected", group.len());
            let full = out_of_space(&failure);
            let message = match &failure {
                StoreError::Backend { source, .. } => source.to_string(),
                other => other.to_string(),
            };
            for request in group {
                let error = if full {
                    StoreError::NoSpace {
                        detail: message.clone(),
                    }
                } else {
                    StoreError::backend("commit", message.clone())
                };
                let _ = request.reply.send(Err(error));
            }
            return;
        }
    };
    let events: Vec<WatchEvent> = results
        .iter()
        .flatten()
        .map(|(_, event, _)| event.clone())
        .collect();
    {
        let mut index = shared.index.write().unwrap_or_else(PoisonError::into_inner);
        for (_, event, entry) in results.iter().flatten() {
            index.record(&event.kv.key, *entry);
        }
        // Published before the index lock is let go: a read that finds one of these writes in
        // the index (a get) must not be followed by a current revision older than it (a
        // consistent list, served from the watch cache once it reaches the current revision,
        // would miss the write). Found by `plinth-bench robustness`: a get saw rev N, the same
        // client's next list came at rev N-1.
        counters.revision = revision;
        shared.revision.store(revision, Ordering::Release);
        shared.hub.publish(&events, revision);
    }
    for (request, result) in group.into_iter().zip(results) {
        let _ = request.reply.send(result.map(|(outcome, _, _)| outcome));
    }
}

fn apply(
    conn: &Connection,
    index: &Index,
    overlay: &mut Overlay,
    op: &Op,
    revision: Revision,
) -> StoreResult<StoreResult<Applied>> {
    let (key, expected, note) = match op {
        Op::Create { key, note, .. } => (key, None, note),
        Op::Update {
            key,
            expected,
            note,
            ..
        } => (key, Some(*expected), note),
        Op::Delete {
            key,
            expected,
            note,
        } => (key, *expected, note),
        Op::Compact { .. } => {
            return Ok(Err(StoreError::backend(
                "apply a write",
                "compaction in a write group",
            )));
        }
    };
    let entry = match overlay.get(key.as_str()) {
        Some(entry) => Some(*entry).filter(|e| !e.is_tombstone()),
        None => index.current(key),
    };
    let current = match entry {
        None => None,
        Some(entry) => Some(read_version(conn, key, entry)?.ok_or_else(|| {
            StoreError::backend(
                "read the current value",
                format!("no record for {key:?} at {}", entry.revision),
            )
        })?),
    };
    let refusal = match (op, &current) {
        (Op::Create { .. }, Some(_)) => Some(StoreError::AlreadyExists { key: key.clone() }),
        (Op::Create { .. }, None) => None,
        (_, None) => Some(StoreError::NotFound { key: key.clone() }),
        (_, Some(kv)) => {
            expected
                .filter(|e| *e != kv.mod_revision)
                .map(|expected| StoreError::Conflict {
                    key: key.clone(),
                    expected,
                    current: Some(Box::new(kv.clone())),
                })
        }
    };
    if let Some(refusal) = refusal {
        return Ok(Err(refusal));
    }
    let (outcome, event, entry) = match (op, current) {
        (Op::Create { value, .. } | Op::Update { value, .. }, prev) => {
            let create_revision = prev.as_ref().map_or(revision, |kv| kv.create_revision);
            let kv = KeyValue {
                key: key.clone(),
                value: value.clone(),
                create_revision,
                mod_revision: revision,
            };
            let event = WatchEvent {
                kind: EventKind::Put,
                kv,
                prev,
            };
            (
                Outcome::Written(revision),
                event,
                Entry {
                    revision,
                    create_revision,
                },
            )
        }
        (_, prev) => {
            let prev =
                prev.ok_or_else(|| StoreError::backend("apply a delete", "no current value"))?;
            let kv = KeyValue {
                key: key.clone(),
                value: Bytes::new(),
                create_revision: 0,
                mod_revision: revision,
            };
            let event = WatchEvent {
                kind: EventKind::Delete,
                kv,
                prev: Some(prev.clone()),
            };
            (
                Outcome::Deleted(revision, prev),
                event,
                Entry {
                    revision,
                    create_revision: 0,
                },
            )
        }
    };
    insert(
        conn,
        revision,
        key,
        entry.create_revision,
        &event.kv.value,
        note.as_deref(),
    )
    .map_err(sql("write a record"))?;
    overlay.insert(key.clone(), entry);
    Ok(Ok((outcome, event, entry)))
}

/// Drops the records no read at or after `revision` needs (see [`Index::compact`]).
fn compact(
    shared: &Shared,
    conn: &mut Connection,
    counters: &mut Counters,
    revision: Revision,
) -> StoreResult<()> {
    if revision <= counters.compacted {
        return Err(StoreError::Compacted {
            requested: revision,
            compacted: Some(counters.compacted),
        });
    }
    if revision > counters.revision {
        return Err(StoreError::FutureRevision {
            requested: revision,
            current: counters.revision,
        });
    }
    // Only this thread changes the index, so the plan still holds when it is carried out below.
    let dropped = shared
        .index
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .compactable(revision);
    let txn = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql("begin a compaction"))?;
    for rev in &dropped {
        delete_record(&txn, *rev).map_err(sql("remove a record"))?;
    }
    write_meta(&txn, META_COMPACTED, revision).map_err(sql("record the compaction"))?;
    txn.commit().map_err(sql("commit a compaction"))?;
    shared
        .index
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .compact(revision);
    counters.compacted = revision;
    tracing::debug!(revision, removed = dropped.len(), "compacted");
    Ok(())
}

/// Whether a failed write transaction failed for want of space (SQLite's `SQLITE_FULL`, or
/// the file system's `ENOSPC` underneath).
fn out_of_space(failure: &StoreError) -> bool {
    let StoreError::Backend { source, .. } = failure else {
        return false;
    };
    if let Some(e) = source.downcast_ref::<rusqlite::Error>() {
        return e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull);
    }
    source
        .downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::StorageFull)
}
