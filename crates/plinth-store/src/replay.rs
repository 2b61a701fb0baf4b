//! History read by replaying a watch: how a backend without a faster way answers
//! [`Store::versions`](crate::Store::versions) and [`Store::journal`](crate::Store::journal).

use std::time::Duration;

use futures::StreamExt;

use crate::{EventKind, Revision, Store, StoreError, StoreResult, Version};

/// How long a replay may take before it gives up.
const REPLAY_LIMIT: Duration = Duration::from_secs(60);
/// How long the watch may be quiet before progress is asked for.
const QUIET: Duration = Duration::from_millis(20);
/// A store whose progress reports may run ahead of its events (etcd before 3.4.31): how long
/// the watch must have been quiet, after a report that it reached the end, before the replay
/// believes it (etcd hands a catching-up watcher its next events every 100 ms).
const SETTLE: Duration = Duration::from_millis(500);

/// The versions of `key` alone from `from` (0: the oldest kept), by [`replay`] of its prefix
/// (which also holds the keys it begins), without notes.
///
/// # Errors
/// As [`replay`]; an invalid key.
pub async fn key_versions<S: Store + ?Sized>(
    store: &S,
    key: &str,
    from: Revision,
) -> StoreResult<Vec<Version>> {
    crate::validate_key(key)?;
    let mut versions = replay(store, key, from, usize::MAX).await?;
    versions.retain(|v| v.kv.key == key);
    Ok(versions)
}

/// The changes under `prefix` from `from` (0: the oldest kept) up to the revision current when
/// called, at most `limit`, without notes.
///
/// # Errors
/// [`StoreError::Compacted`] if `from` is below the oldest revision kept; a backend error if
/// the watch fails or does not catch up within a minute.
pub async fn replay<S: Store + ?Sized>(
    store: &S,
    prefix: &str,
    from: Revision,
    limit: usize,
) -> StoreResult<Vec<Version>> {
    let through = store.current_revision().await?;
    let start = from.max(1);
    if start > through || limit == 0 {
        return Ok(Vec::new());
    }
    let mut stream = store.watch(prefix, start).await?;
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + REPLAY_LIMIT;
    let mut last_event = tokio::time::Instant::now();
    loop {
        let next = tokio::select! {
            next = stream.next() => next,
            () = tokio::time::sleep(QUIET) => {
                if tokio::time::Instant::now() > deadline {
                    return Err(StoreError::backend("replay history", "the watch did not catch up within 60 s"));
                }
                store.request_progress().await?;
                continue;
            }
        };
        let event = match next {
            Some(Ok(event)) => event,
            // From the oldest kept: start again where history begins.
            Some(Err(StoreError::Compacted {
                compacted: Some(oldest),
                ..
            })) if from == 0 && out.is_empty() && oldest > start => {
                return Box::pin(replay(store, prefix, oldest, limit)).await;
            }
            Some(Err(e)) => return Err(e),
            None => return Err(StoreError::backend("replay history", "the watch ended")),
        };
        let revision = event.revision();
        if event.kind == EventKind::Progress {
            let settled = store.progress_is_reliable() || last_event.elapsed() >= SETTLE;
            if revision >= through && settled {
                return Ok(out);
            }
            continue;
        }
        last_event = tokio::time::Instant::now();
        if revision <= through {
            out.push(Version {
                kind: event.kind,
                kv: event.kv,
                note: None,
            });
            if out.len() >= limit {
                return Ok(out);
            }
        }
        if revision >= through {
            return Ok(out);
        }
    }
}
