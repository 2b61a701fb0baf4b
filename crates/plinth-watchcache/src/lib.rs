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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use plinth_core::ApiError;
use plinth_core::meta::metadata_mut;
use plinth_store::{EventKind, RangeRequest, Revision, Store, StoreError};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc, watch};

/// How many recent events each resource keeps for resuming watches.
const HISTORY: usize = 10_000;
/// Events buffered per watcher; one that falls this far behind is disconnected.
const WATCHER_BUFFER: usize = 256;
/// How long a read waits for the cache to reach a revision.
const FRESHNESS_WAIT: Duration = Duration::from_secs(3);

/// One change, encoded once and shared by every watcher. It keeps the objects as the cache
/// does (bytes and extracted fields), not decoded: a watcher that needs the object itself (a
/// view that differs, a selector on a field not extracted) decodes it.
#[derive(Debug)]
pub struct CacheEvent {
    /// Put or delete.
    pub kind: EventKind,
    /// The storage key.
    pub key: String,
    /// The object after the change (for a delete: before it), resourceVersion set to the
    /// change's revision: its JSON and the labels selectors read.
    pub stored: Stored,
    /// The object before the change, at its own revision.
    pub prev_stored: Option<Stored>,
    /// The change's revision.
    pub revision: Revision,
}

/// An object's labels, extracted once (`None` in [`Stored`]: it has none).
pub type Labels = Arc<BTreeMap<String, String>>;

/// The `apiVersion` and `kind` an object was stored with, shared by every object of a cache
/// that has the same pair.
#[derive(Debug, PartialEq, Eq)]
pub struct TypeMeta {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
}

/// An object as the cache keeps it: its JSON exactly as a list item or a watch event carries
/// it (compact, resourceVersion in place), encoded once when the change arrives, and what
/// label selectors read, extracted then too. A list concatenates these bytes; a watch event's
/// bytes go to every watcher as they are.
///
/// Its protobuf message (built-in types) is encoded the first time a protobuf client asks for
/// it and kept with it, shared by every copy (a list's, a watch event's): one encoding per
/// object version and format, as kube-apiserver's `cachingObject` keeps them.
#[derive(Clone, Debug)]
pub struct Stored(Arc<StoredObject>);

#[derive(Debug)]
struct StoredObject {
    wire: bytes::Bytes,
    revision: Revision,
    labels: Option<Labels>,
    /// The values of the cache's selectable fields (`Cacher::fields`), in its order.
    fields: Box<[Box<str>]>,
    field_names: Arc<[String]>,
    type_meta: Arc<TypeMeta>,
    protobuf: std::sync::OnceLock<Option<bytes::Bytes>>,
}

impl Stored {
    /// The memory this object version holds, as the cache accounts it: its encodings, the
    /// extracted labels and field values, and the allocations around them (estimated from
    /// their sizes, allocator rounding aside).
    pub fn footprint(&self) -> usize {
        const ARC: usize = 2 * std::mem::size_of::<usize>();
        // A B-tree entry: the key and value in a node, nodes about two-thirds full.
        const ENTRY: usize = 3 * std::mem::size_of::<String>() * 3 / 2;
        let object = &self.0;
        let labels = object.labels.as_ref().map_or(0, |labels| {
            ARC + labels
                .iter()
                .map(|(k, v)| ENTRY + k.len() + v.len())
                .sum::<usize>()
        });
        let fields: usize = object.fields.iter().map(|f| f.len() + 16).sum();
        let protobuf = object
            .protobuf
            .get()
            .and_then(Option::as_ref)
            .map_or(0, bytes::Bytes::len);
        ARC + std::mem::size_of::<StoredObject>() + object.wire.len() + protobuf + labels + fields
    }

    /// The object (resourceVersion set); `None` if the bytes are not an object.
    pub fn decode(&self) -> Option<Value> {
        serde_json::from_slice(&self.0.wire).ok()
    }

    /// The object's JSON, resourceVersion in place.
    pub fn wire(&self) -> &bytes::Bytes {
        &self.0.wire
    }

    /// The object's protobuf message (without the `k8s\0` envelope), encoded on first use;
    /// `None` when its type has no protobuf form.
    pub fn protobuf(&self) -> Option<&bytes::Bytes> {
        self.0
            .protobuf
            .get_or_init(|| {
                let object = self.decode()?;
                plinth_protobuf::encode_message(&object)
                    .ok()
                    .map(|raw| raw.into_boxed_slice().into())
            })
            .as_ref()
    }

    /// The object's labels (empty when it has none).
    pub fn labels(&self) -> &BTreeMap<String, String> {
        static NONE: BTreeMap<String, String> = BTreeMap::new();
        self.0.labels.as_deref().unwrap_or(&NONE)
    }

    /// The value of selectable field `field` (`metadata.name`, `spec.nodeName`…) as field
    /// selectors compare it, extracted when the change arrived; `None` if this cache does not
    /// extract that field.
    pub fn field(&self, field: &str) -> Option<&str> {
        let at = self.0.field_names.iter().position(|f| f == field)?;
        self.0.fields.get(at).map(|v| &**v)
    }

    /// The `apiVersion` and `kind` it was stored with.
    pub fn type_meta(&self) -> &TypeMeta {
        &self.0.type_meta
    }

    /// The revision of its last change.
    pub fn revision(&self) -> Revision {
        self.0.revision
    }
}

/// The `TypeMeta`s a cache has seen (one, but for a custom resource stored at several
/// versions), so that objects share them.
#[derive(Default)]
struct TypeMetas(Mutex<Vec<Arc<TypeMeta>>>);

impl TypeMetas {
    fn intern(&self, object: &Value) -> Arc<TypeMeta> {
        let text = |field: &str| object.get(field).and_then(Value::as_str).unwrap_or("");
        let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = seen
            .iter()
            .find(|t| t.api_version == text("apiVersion") && t.kind == text("kind"))
        {
            return found.clone();
        }
        let meta = Arc::new(TypeMeta {
            api_version: text("apiVersion").to_owned(),
            kind: text("kind").to_owned(),
        });
        seen.push(meta.clone());
        meta
    }
}

struct State {
    objects: BTreeMap<String, Stored>,
    /// Every change after `oldest` is in `history`.
    history: VecDeque<Arc<CacheEvent>>,
    oldest: Revision,
    revision: Revision,
    watchers: Vec<mpsc::Sender<Live>>,
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
        self.watchers.retain(|w| match w.try_send(item.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(%prefix, "watch cache: closing an unresponsive watcher");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
    }
}

/// The cache of one resource (one storage key prefix).
pub struct Cacher {
    prefix: String,
    types: TypeMetas,
    /// The selectable fields extracted from every object (those of the resource that first
    /// asked for this cache).
    fields: Arc<[String]>,
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

/// A field's value as a field selector compares it (kube's field sets: a missing field is
/// the empty string, a non-string is its JSON).
pub fn selector_value(object: &Value, field: &str) -> String {
    match plinth_core::meta::at_path(object, field) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Decodes stored bytes, sets the resourceVersion, and encodes the result once, extracting
/// its labels and the cache's selectable `fields`.
fn encode(
    value: &[u8],
    revision: Revision,
    types: &TypeMetas,
    fields: &Arc<[String]>,
) -> Option<Stored> {
    let mut object: Value = serde_json::from_slice(value).ok()?;
    metadata_mut(&mut object)?.insert("resourceVersion".into(), json!(revision.to_string()));
    let labels = plinth_core::meta::labels(&object);
    let field_values = fields
        .iter()
        .map(|f| selector_value(&object, f).into_boxed_str())
        .collect();
    let stored = Stored(Arc::new(StoredObject {
        // Exactly its length (a `Vec` grown while encoding holds up to twice that).
        wire: serde_json::to_vec(&object).ok()?.into_boxed_slice().into(),
        revision,
        labels: (!labels.is_empty()).then(|| Arc::new(labels)),
        fields: field_values,
        field_names: fields.clone(),
        type_meta: types.intern(&object),
        protobuf: std::sync::OnceLock::new(),
    }));
    Some(stored)
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

    /// The objects under `prefix` and the revision they are at.
    pub fn snapshot(&self, prefix: &str) -> (Vec<Stored>, Revision) {
        let state = self.state();
        (state.objects_under(prefix), state.revision)
    }

    /// One page of the objects under `prefix` as they were at revision `at` (the cache's
    /// current revision when `None`), after the key `after` (exclusive): up to `limit` items
    /// that `item` turns into bytes (it filters too). The state at a past revision is the
    /// current one with every key changed since put back as it was then — the earliest later
    /// event's previous object, or absent — so a paginated list reads one consistent revision
    /// without a snapshot. `None` when `at` is outside what the cache can reconstruct (older
    /// than its history, or newer than the cache).
    pub fn page<T>(
        &self,
        prefix: &str,
        at: Option<Revision>,
        after: Option<&str>,
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
            if in_range(&event.key) {
                then.entry(event.key.as_str())
                    .or_insert(event.prev_stored.as_ref());
            }
        }
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
        for (key, stored) in merged.by_ref() {
            if limit > 0 && items.len() >= limit {
                // A key after the page exists: the list continues after the last item.
                return Some(Page {
                    items,
                    revision: at,
                    next: last,
                });
            }
            if let Some(found) = item(stored) {
                items.push(found);
                last = Some(key.to_owned());
            }
        }
        Some(Page {
            items,
            revision: at,
            next: None,
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
            Some(from) if from < state.oldest => {
                return Err(ApiError::expired(format!(
                    "too old resource version: {from} ({})",
                    state.oldest
                )));
            }
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
        let prev = event
            .prev
            .as_ref()
            .and_then(|kv| encode(&kv.value, kv.mod_revision, &self.types, &self.fields));
        // A deleted object goes out at the deletion's revision, as kube sends it.
        let current = match event.kind {
            EventKind::Put => encode(&event.kv.value, revision, &self.types, &self.fields),
            EventKind::Delete | EventKind::Progress => event
                .prev
                .as_ref()
                .and_then(|kv| encode(&kv.value, revision, &self.types, &self.fields)),
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

/// Keeps one resource's cache in step with the store, relisting after any break.
async fn run(store: Arc<dyn Store>, cacher: Arc<Cacher>, bookmark_interval: Duration) {
    use futures::StreamExt;
    loop {
        let listed = match store
            .range(RangeRequest::prefix(cacher.prefix.clone()))
            .await
        {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!(prefix = %cacher.prefix, error = %e, "watch cache: list failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // Decoding and encoding every object is CPU work: off the async workers.
        let (revision, encoder) = (listed.revision, cacher.clone());
        let encoded = tokio::task::spawn_blocking(move || {
            listed
                .kvs
                .into_iter()
                .filter_map(|kv| {
                    let stored =
                        encode(&kv.value, kv.mod_revision, &encoder.types, &encoder.fields)?;
                    Some((kv.key, stored))
                })
                .collect()
        })
        .await;
        let Ok(objects) = encoded else {
            tracing::warn!(prefix = %cacher.prefix, "watch cache: encoding the list failed; retrying");
            continue;
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

/// Every resource's cache, started on first use.
pub struct Caches {
    store: Arc<dyn Store>,
    bookmark_interval: Duration,
    caches: Mutex<HashMap<String, Arc<Cacher>>>,
    progress: Arc<ProgressRequests>,
    /// Lists served from the caches and from storage, by resource prefix.
    lists: Mutex<BTreeMap<(String, &'static str), u64>>,
}

/// Readers waiting for a cache to catch up with the store; while there are any, a task asks the
/// store for progress notifications (kube-apiserver's `progressRequester`).
#[derive(Default)]
struct ProgressRequests {
    waiting: AtomicUsize,
    wake: Notify,
    started: std::sync::OnceLock<()>,
}

/// Counts one waiting reader while alive.
struct Waiting<'a>(&'a ProgressRequests);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long a reader waits for the answer to its own progress request to an in-process store
/// before asking as for a remote one.
const LOCAL_PROGRESS_WAIT: Duration = Duration::from_millis(100);

/// How often progress is asked for while a reader waits.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(10);
/// The least time between two progress requests (a new reader's comes this soon).
const PROGRESS_SPACING: Duration = Duration::from_millis(1);

async fn request_progress(store: Arc<dyn Store>, requests: Arc<ProgressRequests>) {
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
            caches: Mutex::default(),
            progress: Arc::default(),
            lists: Mutex::default(),
        }
    }

    /// Waits until `cacher` reflects every write acknowledged before this call (the store's
    /// current revision), asking the store for progress notifications meanwhile. Returns the
    /// cache's revision, or `None` if it did not catch up in time (the caller reads storage
    /// instead, as kube-apiserver falls back to etcd).
    ///
    /// # Errors
    /// The store's error if its current revision cannot be read.
    pub async fn consistent(&self, cacher: &Cacher) -> Result<Option<Revision>, StoreError> {
        if !self.store.progress_is_reliable() {
            // The cache cannot know it has every change up to a revision: storage answers.
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

    /// `apiserver_cache_list_total` and `apiserver_storage_list_total` (labelled by resource
    /// prefix), and each cache's live objects and the bytes they hold
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
            for (prefix, objects, bytes) in &sizes {
                let value = if pick == 0 { *objects } else { *bytes };
                let _ = writeln!(out, "{name}{{resource_prefix=\"{prefix}\"}} {value}");
            }
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
    /// `fields` (the selectable fields, when it starts) from every object; it is ready once it
    /// has listed (wait with [`Cacher::wait_for`]).
    pub fn get(&self, prefix: &str, fields: &[String]) -> Arc<Cacher> {
        let mut caches = self.caches.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cacher) = caches.get(prefix) {
            return cacher.clone();
        }
        let cacher = Arc::new(Cacher {
            prefix: prefix.to_owned(),
            types: TypeMetas::default(),
            fields: fields.into(),
            state: RwLock::new(State {
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                oldest: 0,
                revision: 0,
                watchers: Vec::new(),
            }),
            revision: watch::Sender::new(0),
        });
        caches.insert(prefix.to_owned(), cacher.clone());
        tokio::spawn(run(
            self.store.clone(),
            cacher.clone(),
            self.bookmark_interval.max(Duration::from_millis(100)),
        ));
        cacher
    }
}
