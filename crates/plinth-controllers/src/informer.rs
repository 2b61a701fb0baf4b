//! What the workload controllers are built on, client-go's ideas in-process: an [`Informer`]
//! keeps every object of one resource from a list and its watch (relisting when the watch
//! ends) and tells its handlers about each change; [`SharedInformers`] gives every controller
//! the same informer of a resource (one cache, one decoded object per event, however many
//! controllers follow it); a [`Queue`] holds the keys (`namespace/name`)
//! to reconcile — each key once, however often it is added, delayed adds keeping the
//! earliest time. A controller's expectations are waits on its informers: after it creates or
//! deletes, it waits until its cache shows the change ([`Informer::wait_until`]), so a
//! reconcile never acts on a cache that has not seen its own writes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use plinth_registry::{Client, ListOptions, WatchOptions};
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// A change the handler hears of: the object now (`None` once deleted) and before.
#[derive(Clone, Copy)]
pub(crate) struct Change<'a> {
    /// The object as it is now; `None` when it was deleted.
    pub(crate) new: Option<&'a Value>,
    /// The object as it was; `None` when it is new.
    pub(crate) old: Option<&'a Value>,
}

type Handler = Box<dyn Fn(Change<'_>) + Send + Sync>;

/// A resource an informer follows: (group, version, plural).
type Resource = (&'static str, &'static str, &'static str);

/// One informer per resource, shared by every controller of one leadership term (client-go's
/// `SharedInformerFactory`): the first controller to ask starts it, later ones subscribe to
/// it. Every informer stops when `stopping` becomes true.
#[derive(Clone)]
pub struct SharedInformers {
    inner: Arc<SharedInner>,
}

struct SharedInner {
    registry: Client,
    stopping: watch::Receiver<bool>,
    informers: Mutex<BTreeMap<Resource, Informer>>,
}

impl SharedInformers {
    /// No informer yet; they follow `registry` until `stopping` becomes true.
    pub fn new(registry: Client, stopping: watch::Receiver<bool>) -> Self {
        Self {
            inner: Arc::new(SharedInner {
                registry,
                stopping,
                informers: Mutex::default(),
            }),
        }
    }

    /// The informer of `(group, plural)` in v1, started at its first use; `handler` hears
    /// every change from now on, and of every object it already holds.
    pub(crate) fn start(
        &self,
        (group, plural): (&'static str, &'static str),
        handler: impl Fn(Change<'_>) + Send + Sync + 'static,
    ) -> Informer {
        self.start_version((group, "v1", plural), handler)
    }

    /// As [`SharedInformers::start`], of a resource in `version`.
    pub(crate) fn start_version(
        &self,
        resource: Resource,
        handler: impl Fn(Change<'_>) + Send + Sync + 'static,
    ) -> Informer {
        let informer = self
            .inner
            .informers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(resource)
            .or_insert_with(|| {
                Informer::spawn(
                    self.inner.registry.clone(),
                    resource,
                    self.inner.stopping.clone(),
                )
            })
            .clone();
        informer.subscribe(Box::new(handler));
        informer
    }

    /// Subscribes `handler` to the informer of `resource` (group, version, plural) if another
    /// controller has started one, as [`SharedInformers::start_version`] would; `None` (and
    /// nothing started) otherwise.
    pub(crate) fn join(
        &self,
        (group, version, plural): (&str, &str, &str),
        handler: impl Fn(Change<'_>) + Send + Sync + 'static,
    ) -> Option<Informer> {
        let informer = self
            .inner
            .informers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .find(|((g, v, p), _)| *g == group && *v == version && *p == plural)
            .map(|(_, informer)| informer.clone())?;
        informer.subscribe(Box::new(handler));
        Some(informer)
    }

    /// The informers' metrics in the Prometheus text format: `plinth_informers{resource}`
    /// (how many informers follow the resource: one, shared) and
    /// `plinth_informer_handlers{resource}` (how many controllers' handlers hear it).
    pub fn render_metrics(&self) -> String {
        use std::fmt::Write;
        let informers = self
            .inner
            .informers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for ((group, _, plural), informer) in informers.iter() {
            let name = if group.is_empty() {
                (*plural).to_owned()
            } else {
                format!("{plural}.{group}")
            };
            let entry = counts.entry(name).or_default();
            entry.0 += 1;
            entry.1 += informer.handlers().len();
        }
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP plinth_informers Informers the built-in controllers hold, by resource.\n# TYPE plinth_informers gauge"
        );
        for (resource, (n, _)) in &counts {
            let _ = writeln!(out, "plinth_informers{{resource=\"{resource}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP plinth_informer_handlers Controllers' handlers subscribed to an informer, by resource.\n# TYPE plinth_informer_handlers gauge"
        );
        for (resource, (_, handlers)) in &counts {
            let _ = writeln!(
                out,
                "plinth_informer_handlers{{resource=\"{resource}\"}} {handlers}"
            );
        }
        out
    }
}

/// The objects of one resource, kept from a list and watch.
#[derive(Clone)]
pub(crate) struct Informer {
    inner: Arc<Inner>,
}

struct Inner {
    objects: RwLock<BTreeMap<String, Arc<Value>>>,
    /// Who hears of changes. Lock order: `handlers` (read) is taken after `objects` is released.
    handlers: RwLock<Vec<Handler>>,
    synced: watch::Sender<bool>,
    changes: watch::Sender<u64>,
}

/// `namespace/name` (or `name`) of an object.
pub(crate) fn key_of(object: &Value) -> String {
    let name = plinth_core::meta::name(object).unwrap_or("");
    match plinth_core::meta::namespace(object) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

impl Informer {
    /// Starts keeping `resource`, with no handler yet. It stops when `stopping` becomes true.
    fn spawn(registry: Client, resource: Resource, stopping: watch::Receiver<bool>) -> Self {
        let informer = Self {
            inner: Arc::new(Inner {
                objects: RwLock::new(BTreeMap::new()),
                handlers: RwLock::new(Vec::new()),
                synced: watch::channel(false).0,
                changes: watch::channel(0).0,
            }),
        };
        tokio::spawn(informer.clone().run(registry, resource, stopping));
        informer
    }

    fn handlers(&self) -> std::sync::RwLockReadGuard<'_, Vec<Handler>> {
        self.inner
            .handlers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds `handler`, first telling it of every object held (as added).
    fn subscribe(&self, handler: Handler) {
        let mut handlers = self
            .inner
            .handlers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for object in self.all_values() {
            handler(Change {
                new: Some(&object),
                old: None,
            });
        }
        handlers.push(handler);
    }

    /// Tells every handler of `change`.
    fn dispatch(&self, change: &Change<'_>) {
        for handler in self.handlers().iter() {
            handler(*change);
        }
    }

    async fn run(
        self,
        registry: Client,
        (group, version, plural): Resource,
        stopping: watch::Receiver<bool>,
    ) {
        let mut failures = 0u32;
        while !*stopping.borrow() {
            match self
                .list_and_watch(&registry, (group, version, plural), &stopping)
                .await
            {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    let wait = Duration::from_millis(200 << failures.min(5));
                    tracing::warn!(resource = plural, error = %e, "informer: list or watch failed; retrying");
                    let mut stop = stopping.clone();
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        _ = stop.wait_for(|s| *s) => return,
                    }
                }
            }
        }
    }

    async fn list_and_watch(
        &self,
        registry: &Client,
        (group, version, plural): (&str, &str, &str),
        stopping: &watch::Receiver<bool>,
    ) -> Result<(), String> {
        let def = registry
            .resources
            .get(group, version, plural)
            .ok_or_else(|| format!("{plural} is not served"))?;
        let list = registry
            .list(&def, None, &ListOptions::default())
            .await
            .map_err(|e| e.message)?;
        let revision = list
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let fresh: BTreeMap<String, Arc<Value>> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| (key_of(o), Arc::new(o.clone())))
            .collect();
        let previous = std::mem::replace(&mut *self.write(), fresh.clone());
        for (key, old) in &previous {
            if !fresh.contains_key(key) {
                self.dispatch(&Change {
                    new: None,
                    old: Some(old),
                });
            }
        }
        for (key, new) in &fresh {
            self.dispatch(&Change {
                new: Some(new),
                old: previous.get(key).map(|o| &**o),
            });
        }
        self.inner.synced.send_replace(true);
        self.bump();
        let options = WatchOptions {
            list: ListOptions {
                resource_version: revision,
                ..ListOptions::default()
            },
            ..WatchOptions::default()
        };
        let mut events = registry
            .watch(def, None, options)
            .await
            .map_err(|e| e.message)?;
        let mut stop = stopping.clone();
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                _ = stop.wait_for(|s| *s) => return Ok(()),
            };
            let Some(event) = event else { return Ok(()) };
            let object = event.object();
            let key = key_of(&object);
            match event.kind {
                "ADDED" | "MODIFIED" => {
                    let old = self.write().insert(key, object.clone());
                    self.dispatch(&Change {
                        new: Some(&object),
                        old: old.as_deref(),
                    });
                }
                "DELETED" => {
                    let old = self.write().remove(&key);
                    self.dispatch(&Change {
                        new: None,
                        old: Some(old.as_deref().unwrap_or(&object)),
                    });
                }
                "ERROR" => return Err(object["message"].as_str().unwrap_or("").to_owned()),
                _ => {}
            }
            self.bump();
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Value>>> {
        self.inner
            .objects
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Value>>> {
        self.inner
            .objects
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bump(&self) {
        self.inner.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The object called `key` (`namespace/name`).
    pub(crate) fn get(&self, key: &str) -> Option<Arc<Value>> {
        self.read().get(key).cloned()
    }

    /// Every object in `namespace`.
    pub(crate) fn in_namespace(&self, namespace: &str) -> Vec<Arc<Value>> {
        let prefix = format!("{namespace}/");
        self.read()
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Every object.
    pub(crate) fn all_values(&self) -> Vec<Arc<Value>> {
        self.read().values().cloned().collect()
    }

    /// The key of every object.
    pub(crate) fn all_keys(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// Waits for the first list.
    pub(crate) async fn synced(&self) {
        let mut synced = self.inner.synced.subscribe();
        let _ = synced.wait_for(|s| *s).await;
    }

    /// Waits until `seen` holds for this cache (a write of the caller's has arrived), at most
    /// `deadline`; whether it did.
    pub(crate) async fn wait_until(
        &self,
        deadline: Duration,
        seen: impl Fn(&Self) -> bool,
    ) -> bool {
        let mut changes = self.inner.changes.subscribe();
        let until = Instant::now() + deadline;
        loop {
            if seen(self) {
                return true;
            }
            if tokio::time::timeout_at(until, changes.changed())
                .await
                .is_err()
            {
                return seen(self);
            }
        }
    }
}

/// A handler that queues the changed object's own key.
pub(crate) fn enqueue(queue: &Queue) -> impl Fn(Change<'_>) + Send + Sync + 'static {
    let queue = queue.clone();
    move |c| {
        if let Some(object) = c.new.or(c.old) {
            queue.add(key_of(object));
        }
    }
}

/// The worker loop every controller runs (kube-controller-manager's `processNextWorkItem`):
/// once `caches` have listed, each key taken from `queue` whose object `primary` holds is
/// synced; `sync` answers when to look at it again, if it must. Ends when `stopping`
/// becomes true.
pub(crate) async fn run_workers<SyncFn, SyncFuture>(
    queue: Queue,
    mut stopping: watch::Receiver<bool>,
    caches: &[&Informer],
    primary: &Informer,
    sync: SyncFn,
) where
    SyncFn: Fn(Arc<Value>) -> SyncFuture,
    SyncFuture: std::future::Future<Output = Option<Duration>>,
{
    for cache in caches {
        cache.synced().await;
    }
    while let Some(key) = queue.next(&mut stopping).await {
        let Some(object) = primary.get(&key) else {
            continue;
        };
        if let Some(wait) = sync(object).await {
            queue.add_after(key, wait);
        }
    }
}

/// Keys to reconcile, each held once; delayed keys wait in time order.
#[derive(Clone, Default)]
pub(crate) struct Queue {
    inner: Arc<QueueInner>,
}

#[derive(Default)]
struct QueueInner {
    state: Mutex<QueueState>,
    ready: Notify,
}

#[derive(Default)]
struct QueueState {
    /// Ready now, in arrival order (`queued` says which are in it).
    order: std::collections::VecDeque<String>,
    queued: BTreeSet<String>,
    /// When each delayed key is due (the earliest asked for).
    delayed: HashMap<String, Instant>,
}

impl Queue {
    fn state(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `key` now.
    pub(crate) fn add(&self, key: String) {
        let mut state = self.state();
        state.delayed.remove(&key);
        if state.queued.insert(key.clone()) {
            state.order.push_back(key);
        }
        drop(state);
        self.inner.ready.notify_one();
    }

    /// Queues `key` after `delay`, unless it is queued sooner.
    pub(crate) fn add_after(&self, key: String, delay: Duration) {
        let due = Instant::now() + delay;
        let mut state = self.state();
        if state.queued.contains(&key) {
            return;
        }
        let entry = state.delayed.entry(key).or_insert(due);
        if due < *entry {
            *entry = due;
        }
        drop(state);
        self.inner.ready.notify_one();
    }

    /// The next key, waiting for one; `None` once `stopping` is true.
    pub(crate) async fn next(&self, stopping: &mut watch::Receiver<bool>) -> Option<String> {
        loop {
            let wake = {
                let mut state = self.state();
                let now = Instant::now();
                let due: Vec<String> = state
                    .delayed
                    .iter()
                    .filter(|(_, at)| **at <= now)
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in due {
                    state.delayed.remove(&key);
                    if state.queued.insert(key.clone()) {
                        state.order.push_back(key);
                    }
                }
                if let Some(key) = state.order.pop_front() {
                    state.queued.remove(&key);
                    return Some(key);
                }
                state.delayed.values().min().copied()
            };
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.inner.ready.notified() => {}
                () = sleep => {}
                _ = stopping.wait_for(|s| *s) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn keys_are_held_once_and_delays_keep_the_earliest() {
        let queue = Queue::default();
        let (_stop, mut stopping) = watch::channel(false);
        queue.add("a".into());
        queue.add("a".into());
        queue.add("b".into());
        assert_eq!(queue.next(&mut stopping).await.as_deref(), Some("a"));
        assert_eq!(queue.next(&mut stopping).await.as_deref(), Some("b"));
        for seconds in [30, 10, 20] {
            queue.add_after("c".into(), Duration::from_secs(seconds));
        }
        let start = Instant::now();
        assert_eq!(queue.next(&mut stopping).await.as_deref(), Some("c"));
        assert_eq!(start.elapsed().as_secs(), 10, "the earliest delay wins");
        // A key queued now is not delivered again by its pending delay.
        queue.add_after("d".into(), Duration::from_secs(5));
        queue.add("d".into());
        assert_eq!(queue.next(&mut stopping).await.as_deref(), Some("d"));
        let none = tokio::time::timeout(Duration::from_secs(60), queue.next(&mut stopping)).await;
        assert!(none.is_err(), "nothing is left");
    }
}
