//! The one writer thread: group commit.
//!
//! Every write is a request on a channel. The thread takes all requests waiting (up to a batch
//! limit), applies them one after another inside one redb write transaction — each sees the ones
//! before it — commits once with an fsync, and only then answers them and tells the watchers.
//! While one commit waits for the disk the next batch gathers, so the commit rate stays at the
//! disk's fsync rate while the write rate grows with the number of concurrent writers.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use plinth_store::{EventKind, KeyValue, Revision, StoreError, StoreResult, WatchEvent};
use redb::{Durability, ReadableTable, Table, WriteTransaction};
use tokio::sync::{mpsc, oneshot};

use crate::Shared;
use crate::layout::{
    LOG, META, META_COMPACTED, META_REVISION, REVS, encode_put, encode_tombstone, latest, storage,
    version_key,
};

/// A write the thread applies.
#[derive(Debug)]
pub(crate) enum Op {
    Create {
        key: String,
        value: Bytes,
    },
    Update {
        key: String,
        value: Bytes,
        expected: Revision,
    },
    Delete {
        key: String,
        expected: Option<Revision>,
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

/// The writer's view of the counters; changed only after a commit succeeds.
pub(crate) struct Counters {
    pub(crate) revision: Revision,
    pub(crate) compacted: Revision,
}

/// Runs until every sender is gone.
pub(crate) fn run(
    shared: Arc<Shared>,
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
                commit_writes(&shared, &mut counters, std::mem::take(&mut group));
                let result = compact(&shared, &mut counters, revision).map(|()| Outcome::Compacted);
                let _ = request.reply.send(result);
            } else {
                group.push(request);
            }
        }
        commit_writes(&shared, &mut counters, group);
    }
}

/// The result of applying one write inside the transaction: a storage failure aborts the whole
/// transaction; a refused write (conflict, not found...) leaves it untouched and fails alone.
type Applied = Result<StoreResult<(Outcome, WatchEvent)>, StoreError>;

fn commit_writes(shared: &Shared, counters: &mut Counters, group: Vec<Request>) {
    if group.is_empty() {
        return;
    }
    let mut revision = counters.revision;
    let attempt =
        (|| -> StoreResult<(WriteTransaction, Vec<StoreResult<(Outcome, WatchEvent)>>)> {
            let mut txn = shared
                .db
                .begin_write()
                .map_err(|e| StoreError::backend("begin a write transaction", e))?;
            txn.set_durability(Durability::Immediate)
                .map_err(|e| StoreError::backend("set durability", e))?;
            let mut results = Vec::with_capacity(group.len());
            {
                let mut revs = txn
                    .open_table(REVS)
                    .map_err(|e| StoreError::backend("open table revs", e))?;
                let mut log = txn
                    .open_table(LOG)
                    .map_err(|e| StoreError::backend("open table log", e))?;
                for request in &group {
                    let applied = apply(&mut revs, &mut log, &request.op, revision + 1)?;
                    if applied.is_ok() {
                        revision += 1;
                    }
                    results.push(applied);
                }
                let mut meta = txn
                    .open_table(META)
                    .map_err(|e| StoreError::backend("open table meta", e))?;
                meta.insert(META_REVISION, revision as u64)
                    .map_err(storage("record the revision"))?;
            }
            Ok((txn, results))
        })();
    let committed = attempt.and_then(|(txn, results)| {
        txn.commit().map_err(|e| StoreError::backend("commit", e))?;
        Ok(results)
    });
    match committed {
        Ok(results) => {
            counters.revision = revision;
            shared.revision.store(revision, Ordering::Release);
            let mut events = Vec::new();
            let mut replies = Vec::with_capacity(results.len());
            for (request, result) in group.into_iter().zip(results) {
                match result {
                    Ok((outcome, event)) => {
                        events.push(event);
                        replies.push((request.reply, Ok(outcome)));
                    }
                    Err(refused) => replies.push((request.reply, Err(refused))),
                }
            }
            shared.hub.publish(&events, revision);
            for (reply, result) in replies {
                let _ = reply.send(result);
            }
        }
        Err(failure) => {
            tracing::error!(error = %failure, "write transaction failed; {} writes rejected", group.len());
            let message = failure.to_string();
            for request in group {
                let _ = request
                    .reply
                    .send(Err(StoreError::backend("commit", message.clone())));
            }
        }
    }
}

fn apply(
    revs: &mut Table<&'static [u8], &'static [u8]>,
    log: &mut Table<u64, &'static [u8]>,
    op: &Op,
    revision: Revision,
) -> Applied {
    let (key, expected) = match op {
        Op::Create { key, .. } => (key, None),
        Op::Update { key, expected, .. } => (key, Some(*expected)),
        Op::Delete { key, expected } => (key, *expected),
        Op::Compact { .. } => {
            return Ok(Err(StoreError::backend(
                "apply a write",
                "compaction in a write group",
            )));
        }
    };
    let current = latest(revs, key, Revision::MAX)?.and_then(|v| v.into_kv(key));
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
    let stored_key = version_key(key.as_bytes(), revision);
    let (record, outcome, event) = match op {
        Op::Create { value, .. } | Op::Update { value, .. } => {
            let create_revision = current.as_ref().map_or(revision, |kv| kv.create_revision);
            let kv = KeyValue {
                key: key.clone(),
                value: value.clone(),
                create_revision,
                mod_revision: revision,
            };
            let event = WatchEvent {
                kind: EventKind::Put,
                kv,
                prev: current,
            };
            (
                encode_put(create_revision, value),
                Outcome::Written(revision),
                event,
            )
        }
        _ => {
            let prev =
                current.ok_or_else(|| StoreError::backend("apply a delete", "no current value"))?;
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
            (encode_tombstone(), Outcome::Deleted(revision, prev), event)
        }
    };
    revs.insert(stored_key.as_slice(), record.as_slice())
        .map_err(storage("write a version"))?;
    log.insert(revision as u64, key.as_bytes())
        .map_err(storage("append to the log"))?;
    Ok(Ok((outcome, event)))
}

/// Drops the history before `revision` (see the layout docs for what is kept).
fn compact(shared: &Shared, counters: &mut Counters, revision: Revision) -> StoreResult<()> {
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
    let mut txn = shared
        .db
        .begin_write()
        .map_err(|e| StoreError::backend("begin a compaction", e))?;
    txn.set_durability(Durability::Immediate)
        .map_err(|e| StoreError::backend("set durability", e))?;
    let mut removed = 0usize;
    {
        let mut revs = txn
            .open_table(REVS)
            .map_err(|e| StoreError::backend("open table revs", e))?;
        let mut log = txn
            .open_table(LOG)
            .map_err(|e| StoreError::backend("open table log", e))?;
        let from = counters.compacted.max(0) as u64;
        let changes = log
            .range(from..revision as u64)
            .map_err(storage("scan the log"))?
            .map(|entry| {
                let (rev, key) = entry.map_err(storage("scan the log"))?;
                Ok((rev.value() as Revision, key.value().to_vec()))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        for (rev, key) in changes {
            let this = version_key(&key, rev);
            let before_compaction = version_key(&key, revision - 1);
            let superseded = rev < revision - 1
                && revs
                    .range(version_key(&key, rev + 1).as_slice()..=before_compaction.as_slice())
                    .map_err(storage("scan versions"))?
                    .next()
                    .is_some();
            let tombstone = || -> StoreResult<bool> {
                Ok(revs
                    .get(this.as_slice())
                    .map_err(storage("read a version"))?
                    .is_some_and(|v| v.value().first() == Some(&0)))
            };
            if superseded || tombstone()? {
                revs.remove(this.as_slice())
                    .map_err(storage("remove a version"))?;
                removed += 1;
            }
            log.remove(rev as u64).map_err(storage("trim the log"))?;
        }
        let mut meta = txn
            .open_table(META)
            .map_err(|e| StoreError::backend("open table meta", e))?;
        meta.insert(META_COMPACTED, revision as u64)
            .map_err(storage("record the compaction"))?;
    }
    txn.commit()
        .map_err(|e| StoreError::backend("commit a compaction", e))?;
    counters.compacted = revision;
    shared.compacted.store(revision, Ordering::Release);
    tracing::debug!(revision, removed, "compacted");
    Ok(())
}
