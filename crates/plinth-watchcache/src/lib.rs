//! The watch cache (kube-apiserver's `cacher`): lists and watches served from memory. Depends on
//! `plinth-store` and `plinth-protobuf`, never on HTTP or the registry.
//!
//! One storage watch per resource feeds an in-memory copy of its objects and a
//! window of recent events. Lists and watches are served from it, so
//! thousands of watchers cost one storage watch, and a watcher that stops reading is
//! disconnected — never waited for — as kube-apiserver does; its client resumes from the last
//! resourceVersion it saw.
//!
//! # Guarantees
//! - A consistent read (no resourceVersion) waits until the cache has seen the store's current
//!   revision, so it reflects every write acknowledged before it started. A resource nobody
//!   writes to learns that it is current from the store's progress notifications
//!   ([`Caches::consistent`]): the embedded store queues one as the reader asks (in process,
//!   no round trip); for etcd a task asks while readers wait, for all of them. A cache that
//!   does not catch up within 3 s sends the reader to storage.
//! - A watch from revision R gets every change after R exactly once, in order, if R is within
//!   the window; older R is answered with 410 Expired.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use plinth_core::ApiError;
use plinth_store::{EventKind, RangeRequest, Revision, Store, StoreError};
use tokio::sync::{mpsc, watch};

mod caches;
mod objects;
mod stored;

pub use caches::Caches;
use objects::Objects;
pub use stored::{CacheEvent, Labels, Stored, TypeMeta, selector_value};
use stored::{TypeMetas, encode};

/// How many recent events each resource keeps for resuming watches.
const HISTORY: usize = 10_000;
/// Events buffered per watcher; one that falls this far behind is disconnected.
const WATCHER_BUFFER: usize = 256;
/// How long a read waits for the cache to reach a revision.
const FRESHNESS_WAIT: Duration = Duration::from_secs(3);

struct State {
    objects: Objects,
    /// Every change after `oldest` is in `history`.
    history: VecDeque<Arc<CacheEvent>>,
    oldest: Revision,
    revision: Revision,
    watchers: Vec<mpsc::Sender<Live>>,
    /// Watchers disconnected for falling behind (`apiserver_terminated_watchers_total`).
    terminated: u64,
}

impl State {
    fn objects_under(&self, prefix: &str) -> Vec<Stored> {
        self.objects
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Hands `item` to every watcher without waiting; a watcher whose buffer is full is
    /// disconnected (it resumes from the last revision it saw), a closed one is dropped.
    fn broadcast(&mut self, prefix: &str, item: &Live) {
        let mut terminated = 0;
        self.watchers.retain(|w| match w.try_send(item.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(%prefix, "watch cache: closing an unresponsive watcher");
                terminated += 1;
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
        self.terminated += terminated;
    }
}

/// The cache of one resource (one storage key prefix).
pub struct Cacher {
    prefix: String,
    types: TypeMetas,
    /// The selectable fields extracted from every object (those of the resource that first
    /// asked for this cache).
    fields: Arc<[String]>,
    /// Each field's value when an object does not have it (`false` for a boolean, as kube's
    /// field sets format Go's zero values), in the order of `fields`.
    absent: Arc<[String]>,
    state: RwLock<State>,
    revision: watch::Sender<Revision>,
}

impl std::fmt::Debug for Cacher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cacher")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// A page of a list from the cache.
#[derive(Debug)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// The revision the page shows.
    pub revision: Revision,
    /// The key of the last item, when objects follow it.
    pub next: Option<String>,
    /// How many objects follow the page (selected or not): kube's `remainingItemCount`.
    pub remaining: usize,
    /// How many objects precede the next page (selected or not), when known: the `before`
    /// of the page after this one.
    pub position: Option<usize>,
}

/// What a watcher's channel carries.
#[derive(Debug, Clone)]
pub enum Live {
    /// A change.
    Event(Arc<CacheEvent>),
    /// Everything up to this revision has been sent on this channel (a watch bookmark).
    Bookmark(Revision),
}

/// What a watch starts with.
pub struct Subscription {
    /// Objects to send as ADDED first (a snapshot), if asked for.
    pub initial: Vec<Stored>,
    /// Past events to replay (a resumed watch).
    pub replay: Vec<Arc<CacheEvent>>,
    /// The revision the snapshot or replay ends at.
    pub revision: Revision,
    /// Live events after it, and bookmarks.
    pub live: mpsc::Receiver<Live>,
}

impl Cacher {
    /// An empty cache of the objects under `prefix`, extracting `fields` (each path with its
    /// value when an object lacks it); [`run`] fills it.
    fn new(prefix: &str, fields: &[(String, String)]) -> Self {
        Self {
            prefix: prefix.to_owned(),
            types: TypeMetas::default(),
            fields: fields.iter().map(|(path, _)| path.clone()).collect(),
            absent: fields.iter().map(|(_, absent)| absent.clone()).collect(),
            state: RwLock::new(State {
                objects: Objects::default(),
                history: VecDeque::new(),
                oldest: 0,
                revision: 0,
                watchers: Vec::new(),
                terminated: 0,
            }),
            revision: watch::Sender::new(0),
        }
    }

    fn state(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn state_mut(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this cache extracts `field` from its objects (field selectors on it need no
    /// decoding).
    pub fn extracts(&self, field: &str) -> bool {
        self.fields.iter().any(|f| f == field)
    }

    /// Waits until the cache has seen revision `wanted`.
    ///
    /// # Errors
    /// 504 (`Too large resource version`) if it does not within 3 s.
    pub async fn wait_for(&self, wanted: Revision) -> Result<Revision, ApiError> {
        let mut revision = self.revision.subscribe();
        let reached =
            tokio::time::timeout(FRESHNESS_WAIT, revision.wait_for(|r| *r >= wanted)).await;
        match reached {
            Ok(Ok(r)) => Ok(*r),
            _ => {
                let current = *self.revision.borrow();
                let mut e = ApiError::new(
                    plinth_core::StatusReason::Timeout,
                    format!("Too large resource version: {wanted}, current: {current}"),
                );
                e.details.retry_after_seconds = Some(1);
                Err(e)
            }
        }
    }

    /// The object stored under `key`, as a lister reads it (no storage round trip): `None`
    /// until the cache has listed, then `Some(None)` for an absent key.
    pub fn object(&self, key: &str) -> Option<Option<Stored>> {
        let state = self.state();
        (state.revision > 0).then(|| state.objects.get(key).cloned())
    }

    /// How many objects there are under `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        let state = self.state();
        state
            .objects
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .count()
    }

    /// The objects under `prefix` and the revision they are at.
    pub fn snapshot(&self, prefix: &str) -> (Vec<Stored>, Revision) {
        let state = self.state();
        (state.objects_under(prefix), state.revision)
    }

    /// One page of the objects under `prefix` as they were at revision `at` (the cache's
    /// current revision when `None`), after the key `after` (exclusive) — `before` objects
    /// up to it, when the previous page said so: up to `limit` items that `item` turns into
    /// bytes (it filters too). How many follow the page is counted from the objects under
    /// the prefix (known for a whole resource or a namespace) less `before` and the page's,
    /// without walking the rest. The state at a past revision is the
    /// current one with every key changed since put back as it was then — the earliest later
    /// event's previous object, or absent — so a paginated list reads one consistent revision
    /// without a snapshot. `None` when `at` is outside what the cache can reconstruct (older
    /// than its history, or newer than the cache).
    #[allow(
        clippy::too_many_arguments,
        reason = "a page is the list request's prefix, revision, start, count and filter"
    )]
    pub fn page<T>(
        &self,
        prefix: &str,
        at: Option<Revision>,
        after: Option<&str>,
        before: Option<usize>,
        limit: usize,
        item: impl Fn(&Stored) -> Option<T>,
    ) -> Option<Page<T>> {
        let state = self.state();
        let at = at.unwrap_or(state.revision);
        if at < state.oldest || at > state.revision {
            return None;
        }
        let start = after.unwrap_or(prefix);
        let in_range = |key: &str| key.starts_with(prefix) && after.is_none_or(|a| key > a);
        // The keys changed after `at`, as they were at `at`.
        let first_later = state.history.partition_point(|e| e.revision <= at);
        let mut then: BTreeMap<&str, Option<&Stored>> = BTreeMap::new();
        for event in state.history.range(first_later..) {
            if event.key.starts_with(prefix) {
                then.entry(event.key.as_str())
                    .or_insert(event.prev_stored.as_ref());
            }
        }
        // How many objects were under the prefix at `at`: now, less those made since, plus
        // those gone since.
        let total = state.objects.count(prefix, &self.prefix).map(|now| {
            then.iter().fold(now, |total, (key, was)| {
                let is = state.objects.contains_key(*key);
                (total + usize::from(was.is_some())).saturating_sub(usize::from(is))
            })
        });
        then.retain(|key, _| in_range(key));
        let before = if after.is_none() { Some(0) } else { before };
        let mut current = state
            .objects
            .range::<str, _>((std::ops::Bound::Included(start), std::ops::Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter(|(k, _)| in_range(k))
            .map(|(k, v)| (k.as_str(), Some(v)))
            .peekable();
        let mut changed = then.into_iter().peekable();
        // The two sorted sequences merged; a key in both is as it was at `at`.
        let mut merged = std::iter::from_fn(move || match (current.peek(), changed.peek()) {
            (Some((c, _)), Some((k, _))) if c == k => {
                current.next();
                changed.next()
            }
            (Some((c, _)), Some((k, _))) if k < c => changed.next(),
            (Some(_), _) => current.next(),
            (None, _) => changed.next(),
        })
        .filter_map(|(key, value)| value.map(|v| (key, v)));
        let mut items = Vec::new();
        let mut last = None;
        // Keys read, and read through the last item.
        let (mut read, mut through_last) = (0, 0);
        for (key, stored) in merged.by_ref() {
            if limit > 0 && items.len() >= limit {
                // A key after the page exists: the list continues after the last item.
                let position = before.map(|before| before.saturating_add(through_last));
                let remaining = match (total, position) {
                    (Some(total), Some(position)) => total.saturating_sub(position).max(1),
                    _ => 1 + merged.count(),
                };
                return Some(Page {
                    items,
                    revision: at,
                    next: last,
                    remaining,
                    position,
                });
            }
            read += 1;
            if let Some(found) = item(stored) {
                items.push(found);
                last = Some(key.to_owned());
                through_last = read;
            }
        }
        Some(Page {
            items,
            revision: at,
            next: None,
            remaining: 0,
            position: None,
        })
    }

    /// Starts a watch: from a snapshot (`from = None`), or resuming after revision `from`.
    ///
    /// # Errors
    /// 410 Expired if `from` is older than the kept history.
    pub fn subscribe(
        &self,
        prefix: &str,
        from: Option<Revision>,
    ) -> Result<Subscription, ApiError> {
        let (tx, live) = mpsc::channel(WATCHER_BUFFER);
        let mut state = self.state_mut();
        let revision = state.revision;
        let (initial, replay) = match from {
            None => (state.objects_under(prefix), Vec::new()),
            Some(from) if from < state.oldest => return Err(too_old(from, state.oldest)),
            Some(from) => {
                let replay = state
                    .history
                    .iter()
                    .filter(|e| e.revision > from && e.key.starts_with(prefix))
                    .cloned()
                    .collect();
                (Vec::new(), replay)
            }
        };
        state.watchers.push(tx);
        Ok(Subscription {
            initial,
            replay,
            revision,
            live,
        })
    }

    /// Sends every watcher a bookmark at the cache's revision (through its own channel, so it
    /// follows every event sent before it).
    fn bookmark(&self) {
        let mut state = self.state_mut();
        let revision = state.revision;
        state.broadcast(&self.prefix, &Live::Bookmark(revision));
    }

    fn reset(&self, objects: BTreeMap<String, Stored>, revision: Revision) {
        let objects = Objects::new(objects);
        let mut state = self.state_mut();
        state.objects = objects;
        state.history.clear();
        state.oldest = revision;
        state.revision = revision;
        // Watchers cannot be told what changed while the cache was rebuilt: they are ended, and
        // resume (or relist) from the last revision they saw.
        state.watchers.clear();
        drop(state);
        self.revision.send_replace(revision);
    }

    /// A progress notification: the store has sent every change under this prefix up to
    /// `revision`, so the cache is at `revision` though nothing changed here.
    fn progress(&self, revision: Revision) {
        let mut state = self.state_mut();
        if revision <= state.revision {
            return;
        }
        state.revision = revision;
        drop(state);
        self.revision.send_replace(revision);
    }

    /// The oldest revision a watch can resume from in the cache: every change after it is
    /// kept.
    pub fn oldest(&self) -> Revision {
        self.state().oldest
    }

    /// kube's 410 for a watch from `from`, older than this cache's window.
    pub fn too_old(&self, from: Revision) -> ApiError {
        too_old(from, self.oldest())
    }

    /// The revision the cache has reached.
    pub fn revision(&self) -> Revision {
        *self.revision.borrow()
    }

    fn apply(&self, event: plinth_store::WatchEvent) {
        let revision = event.revision();
        if event.kind == EventKind::Progress {
            self.progress(revision);
            return;
        }
        // The previous object as it was: at its own revision (pages of a list at a past
        // revision show it so).
        let prev = event.prev.as_ref().and_then(|kv| {
            encode(
                &kv.value,
                kv.mod_revision,
                &self.types,
                &self.fields,
                &self.absent,
            )
        });
        // A deleted object goes out at the deletion's revision, as kube sends it.
        let current = match event.kind {
            EventKind::Put => encode(
                &event.kv.value,
                revision,
                &self.types,
                &self.fields,
                &self.absent,
            ),
            EventKind::Delete | EventKind::Progress => event.prev.as_ref().and_then(|kv| {
                encode(&kv.value, revision, &self.types, &self.fields, &self.absent)
            }),
        };
        let Some(stored) = current else {
            tracing::warn!(key = %event.kv.key, "watch cache: undecodable object skipped");
            return;
        };
        let key = event.kv.key.clone();
        let shared = Arc::new(CacheEvent {
            kind: event.kind,
            key: key.clone(),
            stored: stored.clone(),
            prev_stored: prev,
            revision,
        });
        let mut state = self.state_mut();
        match event.kind {
            EventKind::Put => {
                state.objects.insert(key, stored);
            }
            EventKind::Delete | EventKind::Progress => {
                state.objects.remove(&key);
            }
        }
        state.history.push_back(shared.clone());
        if state.history.len() > HISTORY
            && let Some(dropped) = state.history.pop_front()
        {
            state.oldest = dropped.revision;
        }
        state.revision = revision;
        state.broadcast(&self.prefix, &Live::Event(shared));
        drop(state);
        self.revision.send_replace(revision);
    }
}

/// Keys a cache reads from the store at a time when it (re)lists.
const LOAD_PAGE: usize = 50_000;

/// Every object under the cacher's prefix at one revision, encoded: read page by page, each
/// page encoded on a blocking thread while the next is read (so reading and encoding share
/// the cores, and no more than two pages of raw values are held at once).
async fn load(
    store: &dyn Store,
    cacher: &Arc<Cacher>,
) -> Result<(BTreeMap<String, Stored>, Revision), StoreError> {
    let mut page = store
        .range(RangeRequest::prefix(cacher.prefix.clone()).limit(LOAD_PAGE))
        .await?;
    let revision = page.revision;
    // In key order, page after page: the map is built at the end in one pass (inserted one
    // by one, each of a million long keys would be compared some twenty times).
    let mut objects = Vec::new();
    loop {
        let next = page
            .more
            .then(|| page.kvs.last().map(|kv| kv.key.clone()))
            .flatten();
        // Decoding and encoding every object is CPU work: off the async workers, the page in
        // as many parts as there are cores (the parts in key order).
        let encodings: Vec<_> = split(std::mem::take(&mut page.kvs), encoders())
            .into_iter()
            .map(|kvs| {
                let encoder = cacher.clone();
                tokio::task::spawn_blocking(move || encode_all(kvs, &encoder))
            })
            .collect();
        let following = match &next {
            Some(last) => Some(
                store
                    .range(
                        RangeRequest::prefix(cacher.prefix.clone())
                            .continue_after(last)
                            .limit(LOAD_PAGE)
                            .at_revision(revision),
                    )
                    .await,
            ),
            None => None,
        };
        for encoding in encodings {
            let encoded = encoding
                .await
                .map_err(|e| StoreError::backend("encode the watch cache's objects", e))?;
            objects.extend(encoded);
        }
        match following {
            Some(following) => page = following?,
            None => return Ok((objects.into_iter().collect(), revision)),
        }
    }
}

/// How many threads encode a page of a (re)list: the machine's cores, at most 8.
fn encoders() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

/// `kvs` in `parts` runs of (nearly) equal length, in order; none empty.
fn split<T>(mut kvs: Vec<T>, parts: usize) -> Vec<Vec<T>> {
    let size = kvs.len().div_ceil(parts.max(1)).max(1);
    let mut runs = Vec::with_capacity(parts);
    while kvs.len() > size {
        let rest = kvs.split_off(size);
        runs.push(std::mem::replace(&mut kvs, rest));
    }
    if !kvs.is_empty() {
        runs.push(kvs);
    }
    runs
}

/// Each key-value encoded as the cache keeps it (an undecodable value skipped, with a warning).
fn encode_all(kvs: Vec<plinth_store::KeyValue>, cacher: &Cacher) -> Vec<(String, Stored)> {
    kvs.into_iter()
        .filter_map(|kv| {
            let stored = encode(
                &kv.value,
                kv.mod_revision,
                &cacher.types,
                &cacher.fields,
                &cacher.absent,
            );
            if stored.is_none() {
                tracing::warn!(key = %kv.key, "watch cache: undecodable object skipped");
            }
            Some((kv.key, stored?))
        })
        .collect()
}

/// Keeps one resource's cache in step with the store, relisting after any break.
pub(crate) async fn run(store: Arc<dyn Store>, cacher: Arc<Cacher>, bookmark_interval: Duration) {
    use futures::StreamExt;
    loop {
        let (objects, revision) = match load(&*store, &cacher).await {
            Ok(loaded) => loaded,
            Err(e) => {
                tracing::warn!(prefix = %cacher.prefix, error = %e, "watch cache: list failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        cacher.reset(objects, revision);
        let mut events = match store.watch(&cacher.prefix, revision + 1).await {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(prefix = %cacher.prefix, error = %e, "watch cache: watch failed; relisting");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut ticks = tokio::time::interval_at(
            tokio::time::Instant::now() + bookmark_interval,
            bookmark_interval,
        );
        loop {
            let item = tokio::select! {
                item = events.next() => item,
                _ = ticks.tick() => {
                    cacher.bookmark();
                    continue;
                }
            };
            match item {
                Some(Ok(event)) => cacher.apply(event),
                // History is gone: only a fresh list can bring the cache up to date.
                Some(Err(e @ StoreError::Compacted { .. })) => {
                    tracing::warn!(prefix = %cacher.prefix, error = %e, "watch cache: storage watch ended; relisting");
                    break;
                }
                // The connection broke (an etcd member went away, say): watch again from the
                // last revision applied, so the cache — and every watcher on it — goes on
                // without a gap and without a relist.
                Some(Err(_)) | None => match resume(&*store, &cacher).await {
                    Some(resumed) => events = resumed,
                    None => break,
                },
            }
        }
        if Arc::strong_count(&cacher) == 1 {
            return;
        }
    }
}

/// A new storage watch from just after the cache's revision, tried for up to a minute with
/// back-off; `None` when history is gone or storage does not answer (then the cache relists).
async fn resume(store: &dyn Store, cacher: &Cacher) -> Option<plinth_store::WatchStream> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut pause = Duration::from_millis(50);
    loop {
        match store.watch(&cacher.prefix, cacher.revision() + 1).await {
            Ok(events) => return Some(events),
            Err(e @ StoreError::Compacted { .. }) => {
                tracing::warn!(prefix = %cacher.prefix, error = %e, "watch cache: cannot resume; relisting");
                return None;
            }
            Err(e) if tokio::time::Instant::now() + pause > deadline => {
                tracing::warn!(prefix = %cacher.prefix, error = %e, "watch cache: cannot resume; relisting");
                return None;
            }
            Err(e) => {
                tracing::debug!(prefix = %cacher.prefix, error = %e, "watch cache: resuming the storage watch");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// kube's 410 for a watch from `from` when history is kept after `oldest` only.
fn too_old(from: Revision, oldest: Revision) -> ApiError {
    ApiError::expired(format!("too old resource version: {from} ({oldest})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use plinth_store::{KeyValue, WatchEvent};

    const ROOT: &str = "/registry/configmaps/";

    #[test]
    fn a_page_is_split_in_order_into_parts_none_empty() {
        for (n, parts) in [
            (0, 2),
            (1, 2),
            (2, 2),
            (5, 2),
            (50_000, 2),
            (7, 3),
            (9, 1),
            (3, 8),
        ] {
            let runs = split((0..n).collect::<Vec<usize>>(), parts);
            assert!(
                runs.len() <= parts.max(1),
                "{n} in {parts}: {} runs",
                runs.len()
            );
            assert!(runs.iter().all(|r| !r.is_empty()), "{n} in {parts}");
            assert_eq!(runs.concat(), (0..n).collect::<Vec<_>>(), "{n} in {parts}");
            // Equal runs but the last, which is no longer.
            if let Some((last, rest)) = runs.split_last() {
                assert!(
                    rest.iter().all(|r| r.len() == runs[0].len()),
                    "{n} in {parts}"
                );
                assert!(last.len() <= runs[0].len(), "{n} in {parts}");
            }
        }
    }

    fn cacher() -> Cacher {
        Cacher::new(ROOT, &[])
    }

    fn value(name: &str) -> bytes::Bytes {
        serde_json::json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": name}})
            .to_string()
            .into()
    }

    fn put(cacher: &Cacher, key: &str, revision: Revision, existed: bool) {
        let kv = KeyValue {
            key: key.to_owned(),
            value: value(key),
            create_revision: revision,
            mod_revision: revision,
        };
        let prev = existed.then(|| KeyValue {
            mod_revision: revision - 1,
            ..kv.clone()
        });
        cacher.apply(WatchEvent {
            kind: EventKind::Put,
            kv,
            prev,
        });
    }

    fn delete(cacher: &Cacher, key: &str, revision: Revision) {
        let prev = KeyValue {
            key: key.to_owned(),
            value: value(key),
            create_revision: 1,
            mod_revision: revision - 1,
        };
        cacher.apply(WatchEvent {
            kind: EventKind::Delete,
            kv: KeyValue {
                key: key.to_owned(),
                value: bytes::Bytes::new(),
                create_revision: 0,
                mod_revision: revision,
            },
            prev: Some(prev),
        });
    }

    /// Every page of `prefix` at `at`, 3 at a time: each page's `remaining`, and what walking
    /// the rest counts.
    fn walk(cacher: &Cacher, prefix: &str, at: Revision) -> Vec<(usize, usize)> {
        let mut pages = Vec::new();
        let (mut after, mut before) = (None::<String>, None);
        loop {
            let page = cacher
                .page(prefix, Some(at), after.as_deref(), before, 3, |s| {
                    Some(s.revision())
                })
                .unwrap();
            let Some(next) = page.next.clone() else {
                break;
            };
            let walked = cacher
                .page(prefix, Some(at), Some(&next), None, 0, |s| {
                    Some(s.revision())
                })
                .unwrap()
                .items
                .len();
            pages.push((page.remaining, walked));
            before = page.position;
            after = Some(next);
        }
        pages
    }

    #[test]
    fn pages_count_what_follows_without_walking_it_also_at_a_past_revision() {
        let cacher = cacher();
        let mut revision = 0;
        for ns in ["a", "b"] {
            for i in 0..10 {
                revision += 1;
                put(&cacher, &format!("{ROOT}{ns}/m{i:02}"), revision, false);
            }
        }
        let then = revision;
        // Since then: new objects, deletions and updates, in both namespaces.
        for (key, kind) in [
            ("a/m03", "delete"),
            ("a/m10", "create"),
            ("b/m00", "update"),
            ("b/m05", "delete"),
            ("a/m005", "create"),
            ("a/m03", "create"),
            ("b/m11", "create"),
        ] {
            revision += 1;
            let key = format!("{ROOT}{key}");
            match kind {
                "delete" => delete(&cacher, &key, revision),
                "update" => put(&cacher, &key, revision, true),
                _ => put(&cacher, &key, revision, false),
            }
        }
        for at in [then, revision] {
            for prefix in [ROOT.to_owned(), format!("{ROOT}a/"), format!("{ROOT}b/")] {
                let pages = walk(&cacher, &prefix, at);
                assert!(!pages.is_empty());
                for (remaining, walked) in pages {
                    assert_eq!(remaining, walked, "{prefix} at {at}");
                }
            }
        }
        // The count by namespace is the objects' own.
        let state = cacher.state();
        assert_eq!(state.objects.count(&format!("{ROOT}a/"), ROOT), Some(12));
        assert_eq!(state.objects.count(&format!("{ROOT}b/"), ROOT), Some(10));
        assert_eq!(state.objects.count(&format!("{ROOT}c/"), ROOT), Some(0));
        assert_eq!(state.objects.count(ROOT, ROOT), Some(22));
        assert_eq!(state.objects.count(&format!("{ROOT}a/m"), ROOT), None);
    }
}
