//! Every resource's cache, made on first use, and watch progress requested of the store for\n//! consistent reads.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use plinth_store::{Revision, Store, StoreError};
use tokio::sync::Notify;

use crate::{Cacher, run};

/// Every resource's cache, started on first use.
pub struct Caches {
    store: Arc<dyn Store>,
    bookmark_interval: Duration,
    /// How far before a cache's window a watch is still served by replaying storage.
    replay_limit: Option<u64>,
    caches: Mutex<HashMap<String, Arc<Cacher>>>,
    progress: Arc<ProgressRequests>,
    /// Lists served from the caches and from storage, by resource prefix.
    lists: Mutex<BTreeMap<(String, &'static str), u64>>,
}

/// Readers waiting for a cache to catch up with the store; while there are any, a task asks the
/// store for progress notifications (kube-apiserver's `progressRequester`).
#[derive(Default)]
pub(crate) struct ProgressRequests {
    waiting: AtomicUsize,
    wake: Notify,
    started: std::sync::OnceLock<()>,
}

/// Counts one waiting reader while alive.
pub(crate) struct Waiting<'a>(&'a ProgressRequests);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long a reader waits for the answer to its own progress request to an in-process store
/// before asking as for a remote one.
pub(crate) const LOCAL_PROGRESS_WAIT: Duration = Duration::from_millis(100);

/// How often progress is asked for while a reader waits.
pub(crate) const PROGRESS_INTERVAL: Duration = Duration::from_millis(10);

/// The least time between two progress requests (a new reader's comes this soon).
pub(crate) const PROGRESS_SPACING: Duration = Duration::from_millis(1);

pub(crate) async fn request_progress(store: Arc<dyn Store>, requests: Arc<ProgressRequests>) {
    loop {
        if requests.waiting.load(Ordering::Acquire) == 0 {
            requests.wake.notified().await;
            continue;
        }
        if let Err(e) = store.request_progress().await {
            tracing::warn!(error = %e, "watch cache: progress request failed");
        }
        // Again in 10 ms while anyone still waits — or 1 ms after this request, when a new
        // reader comes (it must not wait out a tick started for an earlier one).
        tokio::time::sleep(PROGRESS_SPACING).await;
        let _ = tokio::time::timeout(
            PROGRESS_INTERVAL - PROGRESS_SPACING,
            requests.wake.notified(),
        )
        .await;
    }
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches").finish_non_exhaustive()
    }
}

impl Caches {
    /// Storage history before `revision` is gone: so is the caches' (a watch from an older
    /// resourceVersion is then 410 whichever way it is served).
    pub fn compacted(&self, revision: Revision) {
        for cacher in self
            .caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            let mut state = cacher.state_mut();
            state.oldest = state.oldest.max(revision - 1);
            while state.history.front().is_some_and(|e| e.revision < revision) {
                state.history.pop_front();
            }
        }
    }

    /// Caches over `store`, bookmarking watchers every `bookmark_interval`.
    pub fn new(store: Arc<dyn Store>, bookmark_interval: Duration) -> Self {
        Self {
            store,
            bookmark_interval,
            replay_limit: None,
            caches: Mutex::default(),
            progress: Arc::default(),
            lists: Mutex::default(),
        }
    }

    /// Watches from at most `revisions` before a cache's window are served by replaying
    /// storage; older ones get 410 Expired, as kube-apiserver answers every watch older than
    /// its cache's window. Without a limit (the default) storage replays any backlog it still
    /// has — cheap for the embedded store, whose history is at hand, and slow for etcd,
    /// which re-reads an unsynced watcher's whole backlog until it has caught up.
    #[must_use]
    pub fn with_replay_limit(mut self, revisions: u64) -> Self {
        self.replay_limit = Some(revisions);
        self
    }

    /// Whether a watch from `from`, older than `cacher`'s window, may be served by replaying
    /// storage (see [`Caches::with_replay_limit`]).
    pub fn replays(&self, cacher: &Cacher, from: Revision) -> bool {
        self.replay_limit.is_none_or(|limit| {
            u64::try_from(cacher.oldest().saturating_sub(from)).unwrap_or(0) <= limit
        })
    }

    /// Waits until `cacher` reflects every write acknowledged before this call (the store's
    /// current revision), asking the store for progress notifications meanwhile. Returns the
    /// cache's revision, or `None` if it did not catch up in time, or has not listed yet (the
    /// caller reads storage instead, as kube-apiserver falls back to etcd).
    ///
    /// # Errors
    /// The store's error if its current revision cannot be read.
    pub async fn consistent(&self, cacher: &Cacher) -> Result<Option<Revision>, StoreError> {
        if !self.store.progress_is_reliable() {
            // The cache cannot know it has every change up to a revision: storage answers.
            return Ok(None);
        }
        if cacher.revision() == 0 {
            // Still loading (a server just started on a large store): storage answers at
            // once rather than after the freshness wait, as kube-apiserver delegates
            // consistent lists to etcd while its cache initializes.
            return Ok(None);
        }
        let wanted = self.store.current_revision().await?;
        self.reach(cacher, wanted).await
    }

    /// Waits until `cacher` reaches `wanted` (requesting progress); `None` if not within 3 s.
    ///
    /// # Errors
    /// None today; kept fallible for symmetry with [`Caches::consistent`].
    pub async fn reach(
        &self,
        cacher: &Cacher,
        wanted: Revision,
    ) -> Result<Option<Revision>, StoreError> {
        let reached = cacher.revision();
        if reached >= wanted && reached > 0 {
            return Ok(Some(reached));
        }
        if self.store.progress_is_local() && reached > 0 {
            // In-process: the notification is queued behind the changes the cache has still
            // to apply as this returns, so the cache reaches `wanted` as soon as it has
            // applied them — no request loop, no tick. Only a storage watch that was not up
            // to date when asked (catching up, its buffer full) reports nothing: after a
            // while the reader asks as remote stores do, again until it is.
            self.store.request_progress().await?;
            let mut revision = cacher.revision.subscribe();
            let reached =
                tokio::time::timeout(LOCAL_PROGRESS_WAIT, revision.wait_for(|r| *r >= wanted))
                    .await;
            if let Ok(Ok(r)) = reached {
                return Ok(Some(*r));
            }
        }
        let requests = &self.progress;
        requests.started.get_or_init(|| {
            drop(tokio::spawn(request_progress(
                self.store.clone(),
                requests.clone(),
            )));
        });
        requests.waiting.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(requests);
        requests.wake.notify_one();
        Ok(cacher.wait_for(wanted.max(1)).await.ok())
    }

    /// Counts a list of the resource under `prefix`, served from its cache or from storage.
    pub fn count_list(&self, prefix: &str, from_cache: bool) {
        let source = if from_cache { "cache" } else { "storage" };
        *self
            .lists
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((prefix.trim_end_matches('/').to_owned(), source))
            .or_default() += 1;
    }

    /// `apiserver_cache_list_total`, `apiserver_storage_list_total` and
    /// `apiserver_terminated_watchers_total` (labelled by resource prefix), and each cache's
    /// live objects and the bytes they hold
    /// (`plinth_watch_cache_objects`, `plinth_watch_cache_bytes`: [`Stored::footprint`] and the
    /// key of each), in the Prometheus text format.
    pub fn render_metrics(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let caches: Vec<_> = self
            .caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let sizes: Vec<_> = caches
            .iter()
            .map(|cacher| {
                let state = cacher.state();
                let bytes: usize = state
                    .objects
                    .iter()
                    .map(|(key, stored)| key.len() + stored.footprint())
                    .sum();
                (
                    cacher.prefix.trim_end_matches('/'),
                    state.objects.len(),
                    bytes,
                    state.terminated,
                )
            })
            .collect();
        for (name, help, pick) in [
            (
                "plinth_watch_cache_objects",
                "Live objects in the watch cache",
                0,
            ),
            (
                "plinth_watch_cache_bytes",
                "Bytes the watch cache's live objects hold (encodings, extracted fields)",
                1,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (prefix, objects, bytes, _) in &sizes {
                let value = if pick == 0 { *objects } else { *bytes };
                let _ = writeln!(out, "{name}{{resource_prefix=\"{prefix}\"}} {value}");
            }
        }
        let _ = writeln!(
            out,
            "# HELP apiserver_terminated_watchers_total Watchers closed for not reading fast enough (their buffer full), by resource prefix\n# TYPE apiserver_terminated_watchers_total counter"
        );
        for (prefix, _, _, terminated) in &sizes {
            let _ = writeln!(
                out,
                "apiserver_terminated_watchers_total{{resource_prefix=\"{prefix}\"}} {terminated}"
            );
        }
        let lists = self.lists.lock().unwrap_or_else(PoisonError::into_inner);
        for (source, name, help) in [
            (
                "cache",
                "apiserver_cache_list_total",
                "Number of LIST requests served from watch cache",
            ),
            (
                "storage",
                "apiserver_storage_list_total",
                "Number of LIST requests served from storage",
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for ((prefix, _), n) in lists.iter().filter(|((_, s), _)| *s == source) {
                let _ = writeln!(out, "{name}{{resource_prefix=\"{prefix}\"}} {n}");
            }
        }
        out
    }

    /// The cache of the resource stored under `prefix`, started if needed, extracting
    /// `fields` (the selectable fields, when it starts: each path with its value when an object
    /// lacks it) from every object; it is ready once it has listed (wait with
    /// [`Cacher::wait_for`]).
    pub fn get(&self, prefix: &str, fields: &[(String, String)]) -> Arc<Cacher> {
        let mut caches = self.caches.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cacher) = caches.get(prefix) {
            return cacher.clone();
        }
        let cacher = Arc::new(Cacher::new(prefix, fields));
        caches.insert(prefix.to_owned(), cacher.clone());
        tokio::spawn(run(
            self.store.clone(),
            cacher.clone(),
            self.bookmark_interval.max(Duration::from_millis(100)),
        ));
        cacher
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use bytes::Bytes;
    use plinth_store::{KeyValue, RangeRequest, RangeResponse, StoreResult, WatchStream};

    /// A store whose progress reports can be trusted (etcd 3.5) and whose first list never
    /// ends: a cache over it stays loading.
    struct Loading;

    fn refused<T>() -> StoreResult<T> {
        Err(StoreError::backend("the test store", "not used"))
    }

    #[async_trait]
    impl Store for Loading {
        async fn get(&self, _key: &str) -> StoreResult<Option<KeyValue>> {
            refused()
        }
        async fn range(&self, _request: RangeRequest) -> StoreResult<RangeResponse> {
            std::future::pending().await
        }
        async fn create(&self, _key: &str, _value: Bytes) -> StoreResult<Revision> {
            refused()
        }
        async fn update(
            &self,
            _key: &str,
            _value: Bytes,
            _expected: Revision,
        ) -> StoreResult<Revision> {
            refused()
        }
        async fn delete(
            &self,
            _key: &str,
            _expected: Option<Revision>,
        ) -> StoreResult<(Revision, KeyValue)> {
            refused()
        }
        async fn watch(&self, _prefix: &str, _from: Revision) -> StoreResult<WatchStream> {
            std::future::pending().await
        }
        async fn compact(&self, _revision: Revision) -> StoreResult<()> {
            refused()
        }
        async fn request_progress(&self) -> StoreResult<()> {
            Ok(())
        }
        async fn current_revision(&self) -> StoreResult<Revision> {
            Ok(7)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_consistent_read_goes_to_storage_while_the_cache_loads() {
        let caches = Caches::new(Arc::new(Loading), Duration::from_secs(60));
        let cacher = caches.get("/registry/configmaps/", &[]);
        // Storage answers (`None`) before any time passes — not after the freshness wait
        // the cache would make a reader wait for a revision it has not reached.
        let answer = tokio::time::timeout(Duration::from_millis(1), caches.consistent(&cacher))
            .await
            .expect("storage answers at once, without waiting for the cache");
        assert_eq!(answer.ok(), Some(None));
    }
}
