//! Informers: one list+watch per resource type (watch-list when the server offers it, list and
//! watch otherwise; resumed from the last resourceVersion, relisted after a 410 — the `kube`
//! crate's watcher does the protocol), feeding a local cache of shared immutable objects with
//! indexes, and telling subscribers what changed.
//!
//! ```no_run
//! # async fn example(client: kube::Client) {
//! use k8s_openapi::api::core::v1::Pod;
//! use plinth_runtime::{Informer, InformerOptions};
//! let options = InformerOptions::default()
//!     .labels("app=web")
//!     .strip_managed_fields()
//!     .index("node", |pod: &Pod| {
//!         pod.spec.as_ref().and_then(|s| s.node_name.clone()).into_iter().collect()
//!     });
//! let informer = Informer::spawn_with(kube::Api::<Pod>::all(client), options);
//! let cache = informer.cache();
//! cache.wait_synced().await;
//! println!("{} web pods on node-1", cache.by_index("node", "node-1").len());
//! # }
//! ```
//!
//! A metadata-only informer is an informer of `PartialObjectMeta<K>`: its `Api` asks the server
//! for `meta.k8s.io/v1` `PartialObjectMetadata`, so the cache holds names, labels, owners and
//! finalizers but not the objects' bodies.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, PoisonError, RwLock};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};

/// An object's namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The namespace (none for cluster-scoped objects).
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl ObjectKey {
    /// The key of `object`.
    pub fn of<K: Resource>(object: &K) -> Self {
        Self {
            namespace: object.meta().namespace.clone(),
            name: object.meta().name.clone().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A function giving the index values of an object.
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// A change seen by an informer: `old` → `new` (`new` is `None` for a deletion).
#[derive(Debug)]
pub struct Change<K> {
    /// The object before.
    pub old: Option<Arc<K>>,
    /// The object after.
    pub new: Option<Arc<K>>,
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        Self {
            old: self.old.clone(),
            new: self.new.clone(),
        }
    }
}

struct CacheState<K> {
    objects: HashMap<ObjectKey, Arc<K>>,
    indexers: Vec<(String, IndexFn<K>)>,
    indexes: HashMap<String, HashMap<String, HashSet<ObjectKey>>>,
}

impl<K> CacheState<K> {
    fn unindex(&mut self, key: &ObjectKey, object: &K) {
        for (name, index) in &self.indexers {
            for value in index(object) {
                if let Some(keys) = self.indexes.get_mut(name).and_then(|i| i.get_mut(&value)) {
                    keys.remove(key);
                }
            }
        }
    }

    fn put(&mut self, key: ObjectKey, object: Arc<K>) -> Option<Arc<K>> {
        let old = self.objects.insert(key.clone(), object.clone());
        if let Some(old) = &old {
            self.unindex(&key, old);
        }
        for (name, index) in &self.indexers {
            for value in index(&object) {
                self.indexes
                    .entry(name.clone())
                    .or_default()
                    .entry(value)
                    .or_default()
                    .insert(key.clone());
            }
        }
        old
    }

    fn remove(&mut self, key: &ObjectKey) -> Option<Arc<K>> {
        let old = self.objects.remove(key)?;
        self.unindex(key, &old);
        Some(old)
    }
}

/// The local cache an informer keeps; clones share it. Reads return shared objects, never
/// copies.
pub struct Cache<K> {
    state: Arc<RwLock<CacheState<K>>>,
    synced: watch::Receiver<bool>,
}

impl<K> Clone for Cache<K> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
            synced: self.synced.clone(),
        }
    }
}

impl<K> Debug for Cache<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").finish_non_exhaustive()
    }
}

impl<K> Cache<K> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, CacheState<K>> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The object with this key.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.read().objects.get(key).cloned()
    }

    /// Every object.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.read().objects.values().cloned().collect()
    }

    /// The objects whose index `index` has `value` (`namespace` and `owner` — a controller
    /// owner's uid — always exist).
    pub fn by_index(&self, index: &str, value: &str) -> Vec<Arc<K>> {
        let state = self.read();
        state
            .indexes
            .get(index)
            .and_then(|i| i.get(value))
            .into_iter()
            .flatten()
            .filter_map(|key| state.objects.get(key).cloned())
            .collect()
    }

    /// How many objects the cache holds.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds the index `name` over the objects cached now and those to come; `false` (nothing
    /// changed) if the cache has an index of that name already.
    pub(crate) fn add_indexer(&self, name: &str, index: IndexFn<K>) -> bool {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if state.indexers.iter().any(|(n, _)| n == name) {
            return false;
        }
        let mut built: HashMap<String, HashSet<ObjectKey>> = HashMap::new();
        for (key, object) in &state.objects {
            for value in index(object) {
                built.entry(value).or_default().insert(key.clone());
            }
        }
        state.indexes.insert(name.to_owned(), built);
        state.indexers.push((name.to_owned(), index));
        true
    }

    /// Whether the first full list has been read (client-go's `HasSynced`).
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until the first full list has been read.
    pub async fn wait_synced(&self) {
        let mut synced = self.synced.clone();
        let _ = synced.wait_for(|s| *s).await;
    }
}

/// The uid of `object`'s controller owner, if any.
pub fn controller_uid<K: Resource>(object: &K) -> Option<String> {
    object
        .meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

/// A function applied to every object before it is cached (controller-runtime's transform):
/// strip what the controller never reads, to keep the cache small.
pub type TransformFn<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// How an informer watches and what it keeps.
pub struct InformerOptions<K> {
    /// Only objects with these labels (`labelSelector`).
    pub label_selector: Option<String>,
    /// Only objects with these fields (`fieldSelector`).
    pub field_selector: Option<String>,
    /// Indexes beyond `namespace` and `owner`.
    pub indexers: Vec<(String, IndexFn<K>)>,
    /// Applied to every object before it is cached.
    pub transform: Option<TransformFn<K>>,
}

impl<K> Default for InformerOptions<K> {
    fn default() -> Self {
        Self {
            label_selector: None,
            field_selector: None,
            indexers: Vec::new(),
            transform: None,
        }
    }
}

impl<K> Debug for InformerOptions<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerOptions")
            .field("label_selector", &self.label_selector)
            .field("field_selector", &self.field_selector)
            .finish_non_exhaustive()
    }
}

impl<K: Resource + 'static> InformerOptions<K> {
    /// Watches only objects matching the label selector `selector`.
    #[must_use]
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_owned());
        self
    }

    /// Watches only objects matching the field selector `selector`.
    #[must_use]
    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_owned());
        self
    }

    /// Adds the index `name`.
    #[must_use]
    pub fn index(
        mut self,
        name: &str,
        index: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.indexers.push((name.to_owned(), Arc::new(index)));
        self
    }

    /// Applies `transform` to every object before it is cached (after the previous one).
    #[must_use]
    pub fn transform(mut self, transform: impl Fn(&mut K) + Send + Sync + 'static) -> Self {
        let previous = self.transform.take();
        self.transform = Some(Arc::new(move |object: &mut K| {
            if let Some(previous) = &previous {
                previous(object);
            }
            transform(object);
        }));
        self
    }

    /// Drops `metadata.managedFields` from cached objects (controllers rarely read them; they
    /// are often the larger part of an object).
    #[must_use]
    pub fn strip_managed_fields(self) -> Self {
        self.transform(|object: &mut K| object.meta_mut().managed_fields = None)
    }
}

/// One resource type's informer: its cache, and a feed of changes.
pub struct Informer<K> {
    cache: Cache<K>,
    changes: broadcast::Sender<Change<K>>,
}

impl<K> Debug for Informer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer").finish_non_exhaustive()
    }
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Starts watching `api` with the default indexes plus `indexers`.
    pub fn spawn(api: Api<K>, indexers: Vec<(String, IndexFn<K>)>) -> Self {
        Self::spawn_with(
            api,
            InformerOptions {
                indexers,
                ..InformerOptions::default()
            },
        )
    }

    /// Starts watching `api` as `options` say (selectors, indexes, a transform).
    pub fn spawn_with(api: Api<K>, options: InformerOptions<K>) -> Self {
        let InformerOptions {
            label_selector,
            field_selector,
            indexers,
            transform,
        } = options;
        let mut all: Vec<(String, IndexFn<K>)> = vec![
            (
                "namespace".into(),
                Arc::new(|o: &K| o.meta().namespace.clone().into_iter().collect()),
            ),
            (
                "owner".into(),
                Arc::new(|o: &K| controller_uid(o).into_iter().collect()),
            ),
        ];
        all.extend(indexers);
        let (synced_tx, synced) = watch::channel(false);
        let cache = Cache {
            state: Arc::new(RwLock::new(CacheState {
                objects: HashMap::new(),
                indexers: all,
                indexes: HashMap::new(),
            })),
            synced,
        };
        let (changes, _) = broadcast::channel(4096);
        let selectors = Selectors {
            labels: label_selector,
            fields: field_selector,
            transform,
        };
        tokio::spawn(run(
            api,
            selectors,
            cache.clone(),
            changes.clone(),
            synced_tx,
        ));
        Self { cache, changes }
    }

    /// The cache.
    pub fn cache(&self) -> Cache<K> {
        self.cache.clone()
    }

    /// Changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Change<K>> {
        self.changes.subscribe()
    }
}

/// What an informer's watch selects, and how objects are transformed.
struct Selectors<K> {
    labels: Option<String>,
    fields: Option<String>,
    transform: Option<TransformFn<K>>,
}

impl<K> Selectors<K> {
    fn config(&self, streaming: bool) -> watcher::Config {
        let mut config = watcher::Config::default();
        if streaming {
            config = config.streaming_lists();
        }
        if let Some(labels) = &self.labels {
            config = config.labels(labels);
        }
        if let Some(fields) = &self.fields {
            config = config.fields(fields);
        }
        config
    }

    fn apply(&self, mut object: K) -> K {
        if let Some(transform) = &self.transform {
            transform(&mut object);
        }
        object
    }
}

async fn run<K>(
    api: Api<K>,
    selectors: Selectors<K>,
    cache: Cache<K>,
    changes: broadcast::Sender<Change<K>>,
    synced: watch::Sender<bool>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    // Watch-list first (one request, consistent, from the watch cache); servers that refuse it
    // get list-then-watch.
    let mut streaming = true;
    loop {
        let config = selectors.config(streaming);
        let mut events = watcher::watcher(api.clone(), config).boxed();
        let mut listing: Option<HashMap<ObjectKey, Arc<K>>> = None;
        let mut ever_synced = false;
        let mut failures = 0u32;
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => {
                    failures = 0;
                    event
                }
                Err(e) => {
                    failures += 1;
                    if streaming && !ever_synced && failures >= 3 {
                        // The server does not do watch-list: fall back.
                        streaming = false;
                        break;
                    }
                    let delay = watch_backoff(failures);
                    tracing::warn!(
                        resource = api.resource_url(),
                        error = %e,
                        failures,
                        retry_in = ?delay,
                        "watch failed"
                    );
                    tokio::time::sleep(delay).await;
                    continue;
                }
            };
            match event {
                watcher::Event::Init => listing = Some(HashMap::new()),
                watcher::Event::InitApply(object) => {
                    if let Some(listing) = &mut listing {
                        let object = selectors.apply(object);
                        listing.insert(ObjectKey::of(&object), Arc::new(object));
                    }
                }
                watcher::Event::InitDone => {
                    let listed = listing.take().unwrap_or_default();
                    let mut sent = Vec::new();
                    {
                        let mut state = cache.state.write().unwrap_or_else(PoisonError::into_inner);
                        let gone: Vec<ObjectKey> = state
                            .objects
                            .keys()
                            .filter(|k| !listed.contains_key(*k))
                            .cloned()
                            .collect();
                        for key in gone {
                            let old = state.remove(&key);
                            sent.push(Change { old, new: None });
                        }
                        for (key, object) in listed {
                            let unchanged = state
                                .objects
                                .get(&key)
                                .is_some_and(|o| o.resource_version() == object.resource_version());
                            if unchanged {
                                continue;
                            }
                            let old = state.put(key, object.clone());
                            sent.push(Change {
                                old,
                                new: Some(object),
                            });
                        }
                    }
                    ever_synced = true;
                    synced.send_replace(true);
                    for change in sent {
                        let _ = changes.send(change);
                    }
                }
                watcher::Event::Apply(object) => {
                    let object = Arc::new(selectors.apply(object));
                    let old = cache
                        .state
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .put(ObjectKey::of(&*object), object.clone());
                    let _ = changes.send(Change {
                        old,
                        new: Some(object),
                    });
                }
                watcher::Event::Delete(object) => {
                    let object = selectors.apply(object);
                    let old = cache
                        .state
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&ObjectKey::of(&object));
                    let _ = changes.send(Change {
                        old: old.or_else(|| Some(Arc::new(object))),
                        new: None,
                    });
                }
            }
        }
    }
}

/// How long to wait after the `failures`-th consecutive watch error: 200 ms doubling to 30 s
/// (a missing resource or a refused list is retried, not hammered).
fn watch_backoff(failures: u32) -> std::time::Duration {
    let doubled = 200u64.saturating_mul(1u64 << failures.saturating_sub(1).min(20));
    std::time::Duration::from_millis(doubled.min(30_000))
}

#[cfg(test)]
mod tests {
    use super::watch_backoff;
    use std::time::Duration;

    #[test]
    fn watch_errors_back_off_exponentially_to_thirty_seconds() {
        let delays: Vec<Duration> = (1..=10).map(watch_backoff).collect();
        assert_eq!(delays[0], Duration::from_millis(200));
        assert_eq!(delays[1], Duration::from_millis(400));
        assert_eq!(delays[4], Duration::from_millis(3200));
        assert_eq!(delays[9], Duration::from_secs(30));
        assert_eq!(watch_backoff(u32::MAX), Duration::from_secs(30));
    }
}
