//! Controllers: changes to a primary resource, to the objects it owns, and to anything mapped to
//! it become keys on a [`WorkQueue`]; workers hand each key to a reconciler that sees only the
//! key (level-triggered by construction) and answers done, requeue-after, or an error (retried
//! with backoff unless terminal).
//!
//! ```no_run
//! # async fn example(client: kube::Client) {
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use plinth_runtime::{Action, Controller, Informer, ObjectKey, ReconcileFuture};
//! let informer = Informer::spawn(kube::Api::<ConfigMap>::all(client), Vec::new());
//! let cache = informer.cache();
//! let reconcile = move |key: ObjectKey| -> ReconcileFuture {
//!     let exists = cache.get(&key).is_some();
//!     Box::pin(async move {
//!         tracing::info!(%key.name, exists, "reconciled");
//!         Ok(Action::Done)
//!     })
//! };
//! Controller::new(&informer)
//!     .concurrency(2)
//!     .run(reconcile, async { let _ = tokio::signal::ctrl_c().await; })
//!     .await;
//! # }
//! ```

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kube::Resource;
use serde::de::DeserializeOwned;
use tokio::sync::broadcast;

use crate::informer::{Cache, Change, Informer, ObjectKey};
use crate::workqueue::WorkQueue;

/// What a reconcile asks for next.
///
/// # Example
///
/// ```
/// use plinth_runtime::Action;
/// // Poll something outside the cluster every 30 s; otherwise wait for a change.
/// let next = |ready: bool| if ready { Action::Done } else {
///     Action::RequeueAfter(std::time::Duration::from_secs(30))
/// };
/// assert_eq!(next(true), Action::Done);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing until something changes.
    Done,
    /// Look again after this long (e.g. to poll something outside the cluster).
    RequeueAfter(Duration),
}

/// A failed reconcile.
///
/// # Example
///
/// ```
/// use plinth_runtime::ReconcileError;
/// async fn reconcile(api: kube::Api<k8s_openapi::api::core::v1::ConfigMap>) -> Result<(), ReconcileError> {
///     let cm = api.get("settings").await?; // a kube error: retried with backoff
///     let mode = cm.data.unwrap_or_default().remove("mode")
///         // Nothing will fix this but a change to the object: not retried.
///         .ok_or_else(|| ReconcileError::Terminal("no key `mode`".into()))?;
///     if mode == "later" {
///         return Err(ReconcileError::Retry("not yet".into()));
///     }
///     Ok(())
/// }
/// # let _ = reconcile;
/// assert_eq!(ReconcileError::Terminal("x".into()).to_string(), "terminal: x");
/// ```
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Retried with per-key exponential backoff.
    #[error("{0}")]
    Retry(String),
    /// A request to the API server failed: retried with backoff, the cause kept
    /// (`reconcile(...).await?` on a `kube` call gives this).
    #[error("{0}")]
    Api(#[from] kube::Error),
    /// Not retried (the object cannot be reconciled as it is; a change to it will enqueue it).
    #[error("terminal: {0}")]
    Terminal(String),
}

/// Decides what follows a failed reconcile (kube-runtime's `error_policy`): by default, a
/// rate-limited retry — `None` — unless the error is terminal.
///
/// # Example
///
/// ```
/// use plinth_runtime::{controller::ErrorPolicy, Action, ReconcileError};
/// // Conflicts again at once; anything else the default backoff.
/// let policy: ErrorPolicy = std::sync::Arc::new(|_key, error| match error {
///     ReconcileError::Api(kube::Error::Api(status)) if status.code == 409 => {
///         Some(Action::RequeueAfter(std::time::Duration::ZERO))
///     }
///     _ => None,
/// });
/// let key = plinth_runtime::ObjectKey { namespace: None, name: "x".into() };
/// assert_eq!(policy(&key, &ReconcileError::Retry("later".into())), None);
/// ```
pub type ErrorPolicy = Arc<dyn Fn(&ObjectKey, &ReconcileError) -> Option<Action> + Send + Sync>;

/// Which changes of the primary resource are worth a reconcile (controller-runtime's
/// predicates). Creations and deletions always are.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use std::sync::Arc;
/// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
/// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
/// # let env = plinth_testenv::TestEnv::start().await?;
/// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
/// let informer = Informer::spawn(api.clone(), Vec::new());
/// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
/// // The reconciler gets a key; it reads the object from the cache if it needs it.
/// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
///     let _ = seen.send(key.name.clone());
///     Box::pin(async { Ok(Action::Done) })
/// };
/// // Creations and deletions always pass; updates only when labels changed.
/// let controller = Controller::new(&informer).with_predicate(&informer, Predicate::LabelsChanged);
/// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
/// # let mut cm = ConfigMap::default();
/// # cm.metadata.name = Some("settings".into());
/// # api.create(&Default::default(), &cm).await?;
/// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
/// # let _ = stop.send(());
/// # running.await??;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Predicate {
    /// Every change (the default).
    Any,
    /// Only when `metadata.generation` changed (spec changes; not status-only writes).
    GenerationChanged,
    /// Only when labels changed.
    LabelsChanged,
    /// Only when annotations changed.
    AnnotationsChanged,
    /// Only when the resourceVersion changed (drops resync duplicates).
    ResourceVersionChanged,
}

impl Predicate {
    fn passes<K: Resource>(self, change: &Change<K>) -> bool {
        let (Some(old), Some(new)) = (&change.old, &change.new) else {
            return true;
        };
        let (old, new) = (old.meta(), new.meta());
        match self {
            Self::Any => true,
            Self::GenerationChanged => old.generation != new.generation,
            Self::LabelsChanged => old.labels != new.labels,
            Self::AnnotationsChanged => old.annotations != new.annotations,
            Self::ResourceVersionChanged => old.resource_version != new.resource_version,
        }
    }
}

/// Why a controller stopped without being asked to.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use plinth_runtime::{controller::ControllerError, Action, Controller, Informer, ReconcileFuture};
/// // No server answers: the cache never syncs.
/// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
/// let informer = Informer::spawn(kube::Api::<ConfigMap>::default_namespaced(offline), Vec::new());
/// let outcome = Controller::new(&informer)
///     .cache_sync_timeout(std::time::Duration::from_millis(200))
///     .run(|_| -> ReconcileFuture { Box::pin(async { Ok(Action::Done) }) }, std::future::pending())
///     .await;
/// assert!(matches!(outcome, Err(ControllerError::CacheSyncTimeout { .. })));
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// Its caches did not sync within the cache-sync timeout (a missing CRD, a refused list).
    #[error("controller {controller}: caches did not sync within {timeout:?}")]
    CacheSyncTimeout {
        /// The controller's name.
        controller: String,
        /// The timeout.
        timeout: Duration,
    },
}

/// The future a reconciler returns.
///
/// # Example
///
/// ```
/// use plinth_runtime::{Action, ObjectKey, ReconcileFuture};
/// let reconcile = |key: ObjectKey| -> ReconcileFuture {
///     Box::pin(async move {
///         tracing::info!(name = %key.name, "reconciling");
///         Ok(Action::Done)
///     })
/// };
/// # let _ = reconcile;
/// ```
pub type ReconcileFuture = Pin<Box<dyn Future<Output = Result<Action, ReconcileError>> + Send>>;

/// A future that completes when a cache has synced.
type Synced = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Tells reconcilers that their controller is stopping (a cancellation token): long work can
/// end early; the controller still waits for reconciles in flight, up to its shutdown timeout.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use std::sync::Arc;
/// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
/// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
/// # let env = plinth_testenv::TestEnv::start().await?;
/// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
/// let informer = Informer::spawn(api.clone(), Vec::new());
/// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
/// // The reconciler gets a key; it reads the object from the cache if it needs it.
/// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
///     let _ = seen.send(key.name.clone());
///     Box::pin(async { Ok(Action::Done) })
/// };
/// let controller = Controller::new(&informer);
/// let stopping = controller.stopping();
/// // A long reconcile checks it between steps (or selects on `stopping.clone().wait()`).
/// assert!(!stopping.is_stopping());
/// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
/// # let mut cm = ConfigMap::default();
/// # cm.metadata.name = Some("settings".into());
/// # api.create(&Default::default(), &cm).await?;
/// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
/// # let _ = stop.send(());
/// # running.await??;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Stopping(tokio::sync::watch::Receiver<bool>);

impl Stopping {
    /// Whether the controller is stopping.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// let controller = Controller::new(&informer);
    /// let stopping = controller.stopping();
    /// assert!(!stopping.is_stopping());
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    pub fn is_stopping(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes when the controller begins to stop.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Action, Controller, Informer, ReconcileFuture};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api, Vec::new());
    /// let controller = Controller::new(&informer);
    /// let stopping = controller.stopping();
    /// let noticed = tokio::spawn(stopping.wait());
    /// let reconcile = |_| -> ReconcileFuture { Box::pin(async { Ok(Action::Done) }) };
    /// controller.run(reconcile, tokio::time::sleep(std::time::Duration::from_millis(100))).await?;
    /// noticed.await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait(mut self) {
        let _ = self.0.wait_for(|s| *s).await;
    }
}

/// A controller for primary resource `K`.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use std::sync::Arc;
/// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
/// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
/// # let env = plinth_testenv::TestEnv::start().await?;
/// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
/// let informer = Informer::spawn(api.clone(), Vec::new());
/// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
/// // The reconciler gets a key; it reads the object from the cache if it needs it.
/// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
///     let _ = seen.send(key.name.clone());
///     Box::pin(async { Ok(Action::Done) })
/// };
/// let controller = Controller::new(&informer).concurrency(2);
/// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
/// # let mut cm = ConfigMap::default();
/// # cm.metadata.name = Some("settings".into());
/// # api.create(&Default::default(), &cm).await?;
/// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
/// # let _ = stop.send(());
/// # running.await??;
/// # Ok(()) }
/// ```
pub struct Controller<K> {
    name: String,
    /// The primary's kind and group (an owner reference names them).
    kind: String,
    group: String,
    metrics: Option<crate::metrics::Metrics>,
    primary: Cache<K>,
    queue: WorkQueue<ObjectKey>,
    feeds: Vec<tokio::task::JoinHandle<()>>,
    workers: usize,
    resync: Option<Duration>,
    /// Every cache the controller reads: the primary's, the owned and watched types'.
    synced: Vec<Synced>,
    sync_timeout: Duration,
    shutdown_timeout: Duration,
    stopping: tokio::sync::watch::Sender<bool>,
    error_policy: Option<ErrorPolicy>,
    /// Leadership, for a leader-only controller: no reconcile starts while it is false.
    leading: Option<crate::leader::LeaseGate>,
}

/// A future completing when `cache` has synced.
fn synced<T: Send + Sync + 'static>(cache: Cache<T>) -> Synced {
    Box::pin(async move { cache.wait_synced().await })
}

impl<K> Debug for Controller<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller").finish_non_exhaustive()
    }
}

/// What a worker reconciles with.
struct Worker<'a> {
    name: &'a str,
    queue: &'a WorkQueue<ObjectKey>,
    metrics: Option<&'a crate::metrics::Metrics>,
    policy: Option<&'a ErrorPolicy>,
}

/// Runs one reconcile of `key`, catching a panic, and queues what comes next.
async fn reconcile_one<F>(
    worker: &Worker<'_>,
    key: &ObjectKey,
    reconcile: &F,
) -> crate::metrics::Outcome
where
    F: Fn(ObjectKey) -> ReconcileFuture + Send + Sync,
{
    use crate::metrics::Outcome;
    use futures::FutureExt;
    let Worker {
        name,
        queue,
        metrics,
        policy,
    } = *worker;
    use tracing::Instrument;
    let span = tracing::info_span!("reconcile", controller = name, key = %key);
    let result = std::panic::AssertUnwindSafe(async { reconcile(key.clone()).await })
        .catch_unwind()
        .instrument(span)
        .await;
    match result {
        Ok(Ok(Action::Done)) => {
            queue.forget(key);
            Outcome::Success
        }
        Ok(Ok(Action::RequeueAfter(delay))) => {
            queue.forget(key);
            queue.add_after(key.clone(), delay);
            Outcome::RequeueAfter
        }
        Ok(Err(ReconcileError::Terminal(error))) => {
            tracing::error!(controller = name, key = %key, %error, "Reconciler error (terminal: not retried)");
            queue.forget(key);
            Outcome::Error
        }
        Ok(Err(error)) => {
            tracing::error!(controller = name, key = %key, %error, "Reconciler error");
            // A panicking policy must not end the worker: its answer is then the default.
            let decided = policy.and_then(|policy| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| policy(key, &error)))
                    .unwrap_or_else(|panic| {
                        tracing::error!(controller = name, key = %key, panic = %panic_message(&*panic), "Observed a panic in the error policy");
                        if let Some(metrics) = metrics {
                            metrics.panicked(name);
                        }
                        None
                    })
            });
            match decided {
                Some(Action::Done) => queue.forget(key),
                Some(Action::RequeueAfter(delay)) => queue.add_after(key.clone(), delay),
                None => queue.add_rate_limited(key.clone()),
            }
            Outcome::Error
        }
        Err(panic) => {
            let message = panic_message(&*panic);
            tracing::error!(controller = name, key = %key, panic = %message, "Observed a panic in reconciler");
            if let Some(metrics) = metrics {
                metrics.panicked(name);
            }
            queue.add_rate_limited(key.clone());
            Outcome::Error
        }
    }
}

/// Feeds keys from an informer's changes into the queue; after missed changes (the feed fell
/// behind), everything in `resync` is queued again.
fn feed<C, P>(
    changes: broadcast::Receiver<Change<C>>,
    queue: WorkQueue<ObjectKey>,
    resync: Cache<P>,
    map: impl Fn(&C) -> Vec<ObjectKey> + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    C: Send + Sync + 'static,
    P: Resource + Send + Sync + 'static,
{
    feed_filtered(changes, queue, resync, |_| true, map)
}

/// What a caught panic says (its `&str` or `String` payload).
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

fn feed_filtered<C, P>(
    mut changes: broadcast::Receiver<Change<C>>,
    queue: WorkQueue<ObjectKey>,
    resync: Cache<P>,
    keep: impl Fn(&Change<C>) -> bool + Send + 'static,
    map: impl Fn(&C) -> Vec<ObjectKey> + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    C: Send + Sync + 'static,
    P: Resource + Send + Sync + 'static,
{
    tokio::spawn(async move {
        loop {
            match changes.recv().await {
                Ok(change) => {
                    if !keep(&change) {
                        continue;
                    }
                    for object in change.old.iter().chain(change.new.iter()) {
                        // A panicking mapping must not end the feed: that change maps to
                        // nothing, later ones are mapped again.
                        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| map(object)))
                        {
                            Ok(keys) => {
                                for key in keys {
                                    queue.add(key);
                                }
                            }
                            Err(panic) => {
                                tracing::error!(panic = %panic_message(&*panic), "Observed a panic in a watch's mapping function; the change is dropped");
                            }
                        }
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    for object in resync.list() {
                        queue.add(ObjectKey::of(&*object));
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    })
}

impl<K> Controller<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// A controller reconciling every object of `primary`'s resource.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// let controller = Controller::new(&informer);
    /// assert_eq!(controller.name(), "configmap");
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    pub fn new(primary: &Informer<K>) -> Self
    where
        K::DynamicType: Default,
    {
        Self::for_type(primary, &K::DynamicType::default())
    }

    /// A controller of a primary resource known only at run time (a `DynamicObject` of the
    /// [`kube::core::ApiResource`] `resource`).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    /// use plinth_runtime::{Controller, Informer};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
    /// let resource = ApiResource::from_gvk_with_plural(&gvk, "configmaps");
    /// let api = kube::Api::<DynamicObject>::namespaced_with(env.client(), "default", &resource);
    /// let informer = Informer::spawn(api, Vec::new());
    /// let controller = Controller::for_type(&informer, &resource);
    /// assert_eq!(controller.name(), "configmap");
    /// # Ok(()) }
    /// ```
    pub fn for_type(primary: &Informer<K>, resource: &K::DynamicType) -> Self {
        let queue = WorkQueue::new();
        let cache = primary.cache();
        let feeds = vec![feed(
            primary.subscribe(),
            queue.clone(),
            cache.clone(),
            |o: &K| vec![ObjectKey::of(o)],
        )];
        Self {
            name: K::kind(resource).to_lowercase(),
            kind: K::kind(resource).into_owned(),
            group: K::group(resource).into_owned(),
            metrics: None,
            synced: vec![synced(cache.clone())],
            primary: cache,
            queue,
            feeds,
            workers: 1,
            resync: None,
            sync_timeout: Duration::from_secs(120),
            shutdown_timeout: Duration::from_secs(30),
            stopping: tokio::sync::watch::Sender::new(false),
            error_policy: None,
            leading: None,
        }
    }

    /// Its name (the `controller` label of its metrics).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// let metrics = plinth_runtime::Metrics::default();
    /// let controller = Controller::new(&informer).metrics("settings-sync", &metrics)?;
    /// assert_eq!(controller.name(), "settings-sync");
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Starts no reconcile unless `leading` says yes (a leader-only controller under a
    /// manager: work stops being started the moment the lease is no longer surely held; the
    /// manager then stops the controller).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// // A gate of one's own; a manager passes its elector's (`LeaderElector::gate`).
    /// let controller = Controller::new(&informer).gated_by(Some(Arc::new(|| true)));
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn gated_by(mut self, leading: Option<crate::leader::LeaseGate>) -> Self {
        self.leading = leading;
        self
    }

    /// Reconciles a primary object only for changes that pass `predicate` (replacing the
    /// default: every change).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// let controller = Controller::new(&informer)
    ///     .with_predicate(&informer, Predicate::ResourceVersionChanged);
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_predicate(self, primary: &Informer<K>, predicate: Predicate) -> Self {
        self.with_predicate_fn(primary, move |change: &Change<K>| predicate.passes(change))
    }

    /// Reconciles a primary object only for changes `predicate` accepts (a user's predicate;
    /// replacing the default: every change). Creations and deletions reach it too.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// // Updates only when the data changed.
    /// let controller = Controller::new(&informer).with_predicate_fn(&informer, |change| {
    ///     match (&change.old, &change.new) {
    ///         (Some(old), Some(new)) => old.data != new.data,
    ///         _ => true,
    ///     }
    /// });
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_predicate_fn(
        mut self,
        primary: &Informer<K>,
        predicate: impl Fn(&Change<K>) -> bool + Send + Sync + 'static,
    ) -> Self {
        if let Some(first) = self.feeds.first() {
            first.abort();
        }
        let feed = feed_filtered(
            primary.subscribe(),
            self.queue.clone(),
            self.primary.clone(),
            predicate,
            |o: &K| vec![ObjectKey::of(o)],
        );
        if self.feeds.is_empty() {
            self.feeds.push(feed);
        } else {
            self.feeds[0] = feed;
        }
        self
    }

    /// Reconciles every primary object again every `period` (a periodic resync).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// let controller = Controller::new(&informer).resync_every(std::time::Duration::from_secs(300));
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn resync_every(mut self, period: Duration) -> Self {
        self.resync = Some(period);
        self
    }

    /// Names the controller and reports its reconciles and queue in `metrics` (the name is the
    /// `controller` label; by default, the primary kind in lower case).
    ///
    /// # Errors
    /// If another controller of that name reports to `metrics` already (controller-runtime
    /// refuses duplicate names too).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// let metrics = plinth_runtime::Metrics::default();
    /// let controller = Controller::new(&informer).metrics("settings-sync", &metrics)?;
    /// // The same name twice on one set of metrics: refused.
    /// let again = Controller::new(&informer).metrics("settings-sync", &metrics);
    /// assert!(again.is_err());
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    pub fn metrics(
        mut self,
        name: &str,
        metrics: &crate::metrics::Metrics,
    ) -> Result<Self, crate::metrics::DuplicateController> {
        metrics.register_queue(name, self.queue.clone())?;
        name.clone_into(&mut self.name);
        self.metrics = Some(metrics.clone());
        Ok(self)
    }

    /// Also reconciles the controller owner (of kind `K`) of any `C` that changes.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// // A Secret whose controller owner is a ConfigMap enqueues that ConfigMap.
    /// let secrets = Informer::spawn(kube::Api::<Secret>::namespaced(env.client(), "default"), Vec::new());
    /// let controller = Controller::new(&informer).owns(&secrets);
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn owns<C>(mut self, owned: &Informer<C>) -> Self
    where
        C: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let (kind, group) = (self.kind.clone(), self.group.clone());
        let primary = self.primary.clone();
        // The owner is `K` by kind and group (`apps/v1`'s group is `apps`; `v1`'s the core's).
        let of_group =
            move |api_version: &str| api_version.rsplit_once('/').map_or("", |(g, _)| g) == group;
        let map = move |child: &C| -> Vec<ObjectKey> {
            child
                .meta()
                .owner_references
                .iter()
                .flatten()
                .filter(|r| {
                    r.controller == Some(true) && r.kind == kind && of_group(&r.api_version)
                })
                .map(|r| {
                    // A namespaced owner is in its dependent's namespace; a cluster-scoped one
                    // (as the cache knows it) in none.
                    let namespaced = ObjectKey {
                        namespace: child.meta().namespace.clone(),
                        name: r.name.clone(),
                    };
                    let cluster = ObjectKey {
                        namespace: None,
                        name: r.name.clone(),
                    };
                    if primary.get(&namespaced).is_none() && primary.get(&cluster).is_some() {
                        cluster
                    } else {
                        namespaced
                    }
                })
                .collect()
        };
        self.feeds.push(feed(
            owned.subscribe(),
            self.queue.clone(),
            self.primary.clone(),
            map,
        ));
        self.synced.push(synced(owned.cache()));
        self
    }

    /// Also reconciles the keys `map` gives for any `C` that changes.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// // Any Secret change enqueues the ConfigMap `settings`.
    /// let secrets = Informer::spawn(kube::Api::<Secret>::namespaced(env.client(), "default"), Vec::new());
    /// let controller = Controller::new(&informer).watches(&secrets, |_secret: &Secret| {
    ///     vec![ObjectKey { namespace: Some("default".into()), name: "settings".into() }]
    /// });
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn watches<C>(
        mut self,
        other: &Informer<C>,
        map: impl Fn(&C) -> Vec<ObjectKey> + Send + 'static,
    ) -> Self
    where
        C: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        self.feeds.push(feed(
            other.subscribe(),
            self.queue.clone(),
            self.primary.clone(),
            map,
        ));
        self.synced.push(synced(other.cache()));
        self
    }

    /// How many keys are reconciled at once (never the same key twice).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// let controller = Controller::new(&informer).concurrency(4);
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn concurrency(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// How long `run` waits for its caches to sync before giving up (controller-runtime's
    /// `CacheSyncTimeout`; default 2 minutes).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// let controller = Controller::new(&informer).cache_sync_timeout(std::time::Duration::from_secs(30));
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn cache_sync_timeout(mut self, timeout: Duration) -> Self {
        self.sync_timeout = timeout;
        self
    }

    /// How long a stop waits for reconciles in flight (default 30 s); then `run` returns
    /// anyway, their tasks aborted.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// let controller = Controller::new(&informer).shutdown_timeout(std::time::Duration::from_secs(5));
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// What follows a failed reconcile: `policy` may answer an action (done, or requeue after
    /// a delay of its choosing) instead of the default rate-limited retry (`None`).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// // Terminal errors are logged and left; everything else is tried again in 10 s.
    /// let controller = Controller::new(&informer).error_policy(|_key, error| match error {
    ///     plinth_runtime::ReconcileError::Terminal(_) => Some(Action::Done),
    ///     _ => Some(Action::RequeueAfter(std::time::Duration::from_secs(10))),
    /// });
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn error_policy(
        mut self,
        policy: impl Fn(&ObjectKey, &ReconcileError) -> Option<Action> + Send + Sync + 'static,
    ) -> Self {
        self.error_policy = Some(Arc::new(policy));
        self
    }

    /// A token reconcilers can hold to learn that the controller is stopping.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// let controller = Controller::new(&informer);
    /// let stopping = controller.stopping();
    /// assert!(!stopping.is_stopping());
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    pub fn stopping(&self) -> Stopping {
        Stopping(self.stopping.subscribe())
    }

    /// The controller's queue (for its metrics).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// let controller = Controller::new(&informer);
    /// let queue = controller.queue();
    /// assert_eq!(queue.metrics().depth, 0);
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    pub fn queue(&self) -> WorkQueue<ObjectKey> {
        self.queue.clone()
    }

    /// Waits until every cache it reads (the primary's, the owned and watched types') has
    /// synced — giving up after the cache-sync timeout, and honouring `stop` meanwhile (a
    /// missing CRD, a refused list) — then runs until `stop` completes, and lets reconciles in
    /// flight finish within the shutdown timeout ([`Stopping`] tells them).
    ///
    /// A reconcile that panics is caught: its key is released and retried with backoff, the
    /// panic counted (`controller_runtime_reconcile_panics_total`) and logged; the worker goes
    /// on. Errors are logged with the controller and the object's key.
    ///
    /// # Errors
    /// [`ControllerError::CacheSyncTimeout`] if the caches did not sync in time (a stop
    /// meanwhile is not an error).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Controller, Informer, ObjectKey, Predicate, ReconcileFuture};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// // The reconciler gets a key; it reads the object from the cache if it needs it.
    /// let reconcile = move |key: ObjectKey| -> ReconcileFuture {
    ///     let _ = seen.send(key.name.clone());
    ///     Box::pin(async { Ok(Action::Done) })
    /// };
    /// let controller = Controller::new(&informer);
    /// // Below: `controller.run(reconcile, stop)` until `stop` completes.
    /// # let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # let running = tokio::spawn(controller.run(reconcile, async { let _ = stopped.await; }));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # let _ = stop.send(());
    /// # running.await??;
    /// # Ok(()) }
    /// ```
    pub async fn run<F>(
        mut self,
        reconcile: F,
        stop: impl Future<Output = ()>,
    ) -> Result<(), ControllerError>
    where
        F: Fn(ObjectKey) -> ReconcileFuture + Send + Sync + 'static,
    {
        let reconcile = Arc::new(reconcile);
        let (name, metrics) = (self.name.clone(), self.metrics.clone());
        let mut stop = std::pin::pin!(stop);
        let synced = futures::future::join_all(std::mem::take(&mut self.synced));
        // Some(true): synced; Some(false): timed out; None: stopped first.
        let outcome = tokio::select! {
            timed = tokio::time::timeout(self.sync_timeout, synced) => Some(timed.is_ok()),
            () = &mut stop => None,
        };
        if outcome != Some(true) {
            let stopped = outcome.is_none();
            self.stopping.send_replace(true);
            for feed in &self.feeds {
                feed.abort();
            }
            self.queue.shut_down();
            if stopped {
                return Ok(());
            }
            tracing::error!(controller = %name, timeout = ?self.sync_timeout, "Could not wait for caches to sync");
            return Err(ControllerError::CacheSyncTimeout {
                controller: name,
                timeout: self.sync_timeout,
            });
        }
        for object in self.primary.list() {
            self.queue.add(ObjectKey::of(&*object));
        }
        let mut workers = Vec::new();
        for _ in 0..self.workers {
            let (queue, reconcile) = (self.queue.clone(), reconcile.clone());
            let (name, metrics) = (name.clone(), metrics.clone());
            let policy = self.error_policy.clone();
            let leading = self.leading.clone();
            workers.push(tokio::spawn(async move {
                while let Some(key) = queue.get().await {
                    if leading.as_ref().is_some_and(|l| !l()) {
                        // Leadership is lost: the key stays for the next leader's list.
                        queue.done(&key);
                        break;
                    }
                    let started = tokio::time::Instant::now();
                    let worker = Worker {
                        name: &name,
                        queue: &queue,
                        metrics: metrics.as_ref(),
                        policy: policy.as_ref(),
                    };
                    let outcome = reconcile_one(&worker, &key, &*reconcile).await;
                    if let Some(metrics) = &metrics {
                        metrics.reconciled(&name, outcome, started.elapsed());
                    }
                    queue.done(&key);
                }
            }));
        }
        let resync = self.resync.map(|period| {
            let (queue, primary) = (self.queue.clone(), self.primary.clone());
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(period);
                ticks.tick().await;
                loop {
                    ticks.tick().await;
                    for object in primary.list() {
                        queue.add(ObjectKey::of(&*object));
                    }
                }
            })
        });
        stop.await;
        self.stopping.send_replace(true);
        if let Some(resync) = resync {
            resync.abort();
        }
        for feed in &self.feeds {
            feed.abort();
        }
        let drained =
            tokio::time::timeout(self.shutdown_timeout, self.queue.shut_down_with_drain()).await;
        if drained.is_err() {
            tracing::error!(controller = %name, timeout = ?self.shutdown_timeout, "Reconciles still running at the shutdown timeout; stopping them");
            for worker in &workers {
                worker.abort();
            }
        }
        for worker in workers {
            let _ = worker.await;
        }
        Ok(())
    }
}
