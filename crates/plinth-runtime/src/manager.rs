//! The manager: runs controllers on shared informers, some only while this process holds the
//! leader lease; serves `/metrics`, `/healthz` and `/readyz`; stops gracefully (work in flight
//! finishes, the lease is released so a standby takes over at once).
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use plinth_runtime::{LeaderElector, Manager};
//! let elector = LeaderElector::new(client.clone(), "default", "my-operator", "pod-a");
//! let mut manager = Manager::new().leader_election(elector);
//! manager.bind_metrics(([127, 0, 0, 1], 8080).into()).await?;
//! manager.bind_health_probes(([127, 0, 0, 1], 8081).into()).await?;
//! manager.add_ready_check("upstream", || Ok(()));
//! // manager.controller(api).owns(...).run(reconcile, context)?  — see `builder`.
//! manager.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::leader::{LeaderElector, Leadership};
use crate::metrics::Metrics;

/// A signal that the manager is stopping; runnables finish their work and return.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use plinth_runtime::Manager;
/// let env = plinth_testenv::TestEnv::start().await?;
/// use plinth_runtime::manager::Runs;
/// let (started, running) = tokio::sync::oneshot::channel();
/// let (finished, done) = tokio::sync::oneshot::channel();
/// let manager = Manager::new().add(Runs::Everywhere, move |shutdown| async move {
///     let _ = started.send(());
///     shutdown.wait().await; // until the manager stops
///     let _ = finished.send("cleaned up");
///     Ok(())
/// });
/// // Stopped once the runnable runs: it is told, and finishes before `run` returns.
/// manager.run(async { let _ = running.await; }).await?;
/// assert_eq!(done.await?, "cleaned up");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>, Option<crate::leader::LeaseGate>);

impl std::fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shutdown").finish_non_exhaustive()
    }
}

impl Shutdown {
    /// For a leader-only runnable under leader election: whether this process holds the lease
    /// now ([`LeaderElector::holds_lease`]), so that work stops being started the moment it
    /// is lost (before the shutdown signal is given).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::Manager;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// use plinth_runtime::manager::Runs;
    /// // Without leader election there is no gate: the runnable may always work.
    /// let (told, gated) = tokio::sync::oneshot::channel();
    /// let manager = Manager::new().add(Runs::LeaderOnly, move |shutdown| async move {
    ///     let _ = told.send(shutdown.leadership().is_some());
    ///     shutdown.wait().await;
    ///     Ok(())
    /// });
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// let running = tokio::spawn(manager.run(async { let _ = stopped.await; }));
    /// assert!(!gated.await?);
    /// let _ = stop.send(());
    /// running.await??;
    /// # Ok(()) }
    /// ```
    pub fn leadership(&self) -> Option<crate::leader::LeaseGate> {
        self.1.clone()
    }

    /// Completes when the manager stops.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::Manager;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// use plinth_runtime::manager::Runs;
    /// let manager = Manager::new().add(Runs::Everywhere, |shutdown| async move {
    ///     shutdown.wait().await;
    ///     Ok(())
    /// });
    /// manager.run(tokio::time::sleep(std::time::Duration::from_millis(50))).await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait(mut self) {
        let _ = self.0.wait_for(|s| *s).await;
    }
}

/// Why a runnable stopped without being asked to.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use plinth_runtime::Manager;
/// let env = plinth_testenv::TestEnv::start().await?;
/// use plinth_runtime::manager::{ManagerError, Runs};
/// let manager = Manager::new().add(Runs::Everywhere, |_| async {
///     Err::<(), plinth_runtime::manager::RunError>("the upstream is gone".into())
/// });
/// // A runnable's error stops the manager.
/// let stopped = manager.run(std::future::pending()).await;
/// assert!(matches!(stopped, Err(ManagerError::Runnable(e)) if e.to_string() == "the upstream is gone"));
/// # Ok(()) }
/// ```
pub type RunError = Box<dyn std::error::Error + Send + Sync>;

type Runnable =
    Box<dyn FnOnce(Shutdown) -> Pin<Box<dyn Future<Output = Result<(), RunError>> + Send>> + Send>;

/// Where a runnable runs.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use plinth_runtime::Manager;
/// let env = plinth_testenv::TestEnv::start().await?;
/// use plinth_runtime::manager::Runs;
/// let manager = Manager::new()
///     .add(Runs::LeaderOnly, |shutdown| async move { shutdown.wait().await; Ok(()) })
///     .add(Runs::Everywhere, |shutdown| async move { shutdown.wait().await; Ok(()) });
/// manager.run(async {}).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    /// Only while this process holds the leader lease (controllers, by default).
    LeaderOnly,
    /// On every replica (work that is local to the process).
    Everywhere,
}

/// Why a manager stopped other than by being asked to.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use plinth_runtime::Manager;
/// let env = plinth_testenv::TestEnv::start().await?;
/// use plinth_runtime::manager::ManagerError;
/// let mut manager = Manager::new();
/// let taken = manager.bind_metrics(([127, 0, 0, 1], 0).into()).await?;
/// // The same port again: refused, naming what and where.
/// let mut other = Manager::new();
/// match other.bind_metrics(taken).await {
///     Err(ManagerError::Bind { what, addr, .. }) => assert_eq!((what, addr), ("metrics", taken)),
///     other => panic!("{other:?}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// Another process took the lease: this one must stop (controller-runtime exits).
    #[error("leader election lost")]
    LostLeadership,
    /// A runnable (a controller) stopped with an error: the manager stopped the others.
    #[error("a runnable failed: {0}")]
    Runnable(#[source] RunError),
    /// The informers the manager handed out did not sync in time.
    #[error("caches did not sync within {0:?}")]
    CacheSyncTimeout(std::time::Duration),
    /// An address could not be bound.
    #[error("bind {what} on {addr}: {source}")]
    Bind {
        /// Metrics or health probes.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Options for an informer that exists already which cannot be merged into it.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use plinth_runtime::Manager;
/// let env = plinth_testenv::TestEnv::start().await?;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use plinth_runtime::InformerOptions;
/// let api = || kube::Api::<ConfigMap>::namespaced(env.client(), "default");
/// let mut manager = Manager::new();
/// manager.informer(api);
/// // The informer exists: a transform now would leave the objects it holds untransformed.
/// let late = InformerOptions::default().transform(|cm: &mut ConfigMap| cm.data = None);
/// let conflict = manager.informer_with(api, late).unwrap_err();
/// assert!(conflict.reason.contains("transform"));
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[error("the informer of {resource} cannot take these options: {reason}")]
pub struct InformerConflict {
    /// The resource's URL and selectors.
    pub resource: String,
    /// What conflicts.
    pub reason: String,
}

/// Runs controllers; see the module docs.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use plinth_runtime::Manager;
/// let env = plinth_testenv::TestEnv::start().await?;
/// use plinth_runtime::manager::Runs;
/// let mut manager = Manager::new();
/// let metrics = manager.bind_metrics(([127, 0, 0, 1], 0).into()).await?;
/// let manager = manager.add(Runs::Everywhere, |shutdown| async move { shutdown.wait().await; Ok(()) });
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let running = tokio::spawn(manager.run(async { let _ = stopped.await; }));
/// let scraped = loop {
///     let text = plinth_testenv::scrape(metrics.port(), "/metrics").await;
///     if !text.is_empty() { break text; }
///     tokio::task::yield_now().await;
/// };
/// assert!(scraped.contains("controller_runtime_reconcile_total"));
/// let _ = stop.send(());
/// running.await??;
/// # Ok(()) }
/// ```
pub struct Manager {
    cache_sync_timeout: std::time::Duration,
    metrics: Metrics,
    checks: crate::health::Checks,
    elector: Option<LeaderElector>,
    leaders: Vec<Runnable>,
    everywhere: Vec<Runnable>,
    metrics_listener: Option<TcpListener>,
    health_listener: Option<TcpListener>,
    /// One informer per Rust type and resource URL (group, version, resource, namespace),
    /// shared by every controller.
    informers: std::collections::HashMap<(std::any::TypeId, String), Box<dyn std::any::Any + Send>>,
    /// Each informer's sync, awaited before any runnable starts and `/readyz` says ready.
    synced: Vec<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl Default for Manager {
    fn default() -> Self {
        Self {
            cache_sync_timeout: std::time::Duration::from_secs(120),
            metrics: Metrics::default(),
            checks: crate::health::Checks::default(),
            elector: None,
            leaders: Vec::new(),
            everywhere: Vec::new(),
            metrics_listener: None,
            health_listener: None,
            informers: std::collections::HashMap::new(),
            synced: Vec::new(),
        }
    }
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager").finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager without leader election or endpoints.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::Manager;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// // No leader election, no endpoints, nothing to run: it returns when told to stop.
    /// Manager::new().run(async {}).await?;
    /// # Ok(()) }
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The informer of the objects `api` reads, started on first use and shared by every
    /// controller that asks for the same resource (group, version, resource and namespace —
    /// two `DynamicObject` resources are two informers): one watch per resource.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::Manager;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let api = || kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut manager = Manager::new();
    /// let first = manager.informer(api);
    /// let again = manager.informer(api);
    /// // One watch per resource, however many ask.
    /// assert!(std::sync::Arc::ptr_eq(&first, &again));
    /// # Ok(()) }
    /// ```
    pub fn informer<K>(
        &mut self,
        api: impl FnOnce() -> kube::Api<K>,
    ) -> std::sync::Arc<crate::informer::Informer<K>>
    where
        K: crate::builder::Cached,
    {
        // Without options there is nothing to conflict with.
        self.shared_informer(api, crate::informer::InformerOptions::default())
            .0
    }

    /// As [`Manager::informer`], with `options` for the informer (selectors, indexes, a
    /// transform). Informers are shared by resource and selectors: asking again adds the
    /// indexes the informer lacks (over the objects it holds already).
    ///
    /// # Errors
    /// [`InformerConflict`] when the informer exists and the options cannot be merged into
    /// it: an index of a name it has already, or a transform (objects cached already were not
    /// transformed).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::Manager;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::InformerOptions;
    /// let api = || kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut manager = Manager::new();
    /// manager.informer(api);
    /// // An index added to the shared informer later covers what it holds already.
    /// let by_name = InformerOptions::default()
    ///     .index("name", |cm: &ConfigMap| cm.metadata.name.clone().into_iter().collect());
    /// let informer = manager.informer_with(api, by_name)?;
    /// informer.cache().wait_synced().await;
    /// plinth_testenv::eventually("the root CA ConfigMap", || async {
    ///     !informer.cache().by_index("name", "kube-root-ca.crt").is_empty()
    /// }).await;
    /// # Ok(()) }
    /// ```
    pub fn informer_with<K>(
        &mut self,
        api: impl FnOnce() -> kube::Api<K>,
        options: crate::informer::InformerOptions<K>,
    ) -> Result<std::sync::Arc<crate::informer::Informer<K>>, InformerConflict>
    where
        K: crate::builder::Cached,
    {
        match self.shared_informer(api, options) {
            (_, Some(conflict)) => Err(conflict),
            (informer, None) => Ok(informer),
        }
    }

    /// The shared informer, and the conflict if `options` could not be merged into an
    /// existing one (which is returned as it is).
    pub(crate) fn shared_informer<K>(
        &mut self,
        api: impl FnOnce() -> kube::Api<K>,
        options: crate::informer::InformerOptions<K>,
    ) -> (
        std::sync::Arc<crate::informer::Informer<K>>,
        Option<InformerConflict>,
    )
    where
        K: crate::builder::Cached,
    {
        let api = api();
        let resource = format!(
            "{}?labelSelector={}&fieldSelector={}",
            api.resource_url(),
            options.label_selector.as_deref().unwrap_or(""),
            options.field_selector.as_deref().unwrap_or("")
        );
        let key = (std::any::TypeId::of::<K>(), resource.clone());
        if let Some(existing) = self
            .informers
            .get(&key)
            .and_then(|b| b.downcast_ref::<std::sync::Arc<crate::informer::Informer<K>>>())
        {
            let conflict = |reason: String| InformerConflict {
                resource: resource.clone(),
                reason,
            };
            if options.transform.is_some() {
                return (
                    existing.clone(),
                    Some(conflict(
                        "a transform was asked for after the informer was made".into(),
                    )),
                );
            }
            let cache = existing.cache();
            for (name, index) in options.indexers {
                if !cache.add_indexer(&name, index) {
                    return (
                        existing.clone(),
                        Some(conflict(format!("it has an index named {name} already"))),
                    );
                }
            }
            return (existing.clone(), None);
        }
        let informer = std::sync::Arc::new(crate::informer::Informer::spawn_with(api, options));
        let cache = informer.cache();
        self.synced
            .push(Box::pin(async move { cache.wait_synced().await }));
        self.informers.insert(key, Box::new(informer.clone()));
        (informer, None)
    }

    /// The metrics its controllers report to.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::Manager;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let manager = Manager::new();
    /// manager.metrics().gauge("tenants", "Tenants managed").set(3);
    /// assert!(manager.metrics().render().contains("tenants 3"));
    /// # Ok(()) }
    /// ```
    pub fn metrics(&self) -> Metrics {
        self.metrics.clone()
    }

    /// Adds a `/healthz` check (see [`crate::health`]).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::Manager;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let mut manager = Manager::new();
    /// let probes = manager.bind_health_probes(([127, 0, 0, 1], 0).into()).await?;
    /// manager.add_health_check("worker", || Err("stuck".into()));
    /// let running = tokio::spawn(manager.run(std::future::pending()));
    /// let answer = loop {
    ///     let text = plinth_testenv::scrape(probes.port(), "/healthz").await;
    ///     if !text.is_empty() { break text; }
    ///     tokio::task::yield_now().await;
    /// };
    /// assert!(answer.starts_with("HTTP/1.1 500") && answer.contains("[-]worker failed"));
    /// running.abort();
    /// # Ok(()) }
    /// ```
    pub fn add_health_check(
        &self,
        name: &str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        self.checks.add_health(name, check);
    }

    /// Adds a `/readyz` check (besides the manager's own: its caches have synced).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::Manager;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let mut manager = Manager::new();
    /// let probes = manager.bind_health_probes(([127, 0, 0, 1], 0).into()).await?;
    /// manager.add_ready_check("upstream", || Ok(()));
    /// let running = tokio::spawn(manager.run(std::future::pending()));
    /// plinth_testenv::eventually("ready", || async {
    ///     plinth_testenv::scrape(probes.port(), "/readyz").await.ends_with("\r\n\r\nok")
    /// }).await;
    /// running.abort();
    /// # Ok(()) }
    /// ```
    pub fn add_ready_check(
        &self,
        name: &str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        self.checks.add_ready(name, check);
    }

    /// Runs the leader-only runnables only while `elector` holds its lease.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::Manager;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// use plinth_runtime::{manager::Runs, LeaderElector};
    /// let elector = LeaderElector::new(env.client(), "default", "my-operator", "replica-a");
    /// let (led, leading) = tokio::sync::oneshot::channel();
    /// let manager = Manager::new()
    ///     .leader_election(elector)
    ///     .add(Runs::LeaderOnly, move |_| async move {
    ///         let _ = led.send(()); // runs once this replica holds the lease
    ///         Ok(())
    ///     });
    /// let running = tokio::spawn(manager.run(std::future::pending()));
    /// leading.await?;
    /// running.abort();
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn leader_election(mut self, elector: LeaderElector) -> Self {
        self.elector = Some(elector);
        self
    }

    /// How long `run` waits for the informers it handed out to sync before it starts any
    /// runnable (default 2 minutes); then it fails with [`ManagerError::CacheSyncTimeout`].
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::Manager;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::manager::ManagerError;
    /// // An informer whose list never succeeds (a server that is not there) never syncs.
    /// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    /// let mut manager = Manager::new().cache_sync_timeout(std::time::Duration::from_millis(300));
    /// manager.informer(|| kube::Api::<ConfigMap>::default_namespaced(offline));
    /// let stopped = manager.run(std::future::pending()).await;
    /// assert!(matches!(stopped, Err(ManagerError::CacheSyncTimeout(_))));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn cache_sync_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.cache_sync_timeout = timeout;
        self
    }

    /// Serves `/metrics` on `addr` (port 0: any); returns the bound address.
    ///
    /// # Errors
    /// If it cannot be bound.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::Manager;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let mut manager = Manager::new();
    /// // Port 0: any free one, answered.
    /// let bound = manager.bind_metrics(([127, 0, 0, 1], 0).into()).await?;
    /// assert_ne!(bound.port(), 0);
    /// # Ok(()) }
    /// ```
    pub async fn bind_metrics(&mut self, addr: SocketAddr) -> Result<SocketAddr, ManagerError> {
        let listener = bind("metrics", addr).await?;
        let local = listener.local_addr().unwrap_or(addr);
        self.metrics_listener = Some(listener);
        Ok(local)
    }

    /// Serves `/healthz` and `/readyz` on `addr` (port 0: any); returns the bound address.
    ///
    /// # Errors
    /// If it cannot be bound.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::Manager;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let mut manager = Manager::new();
    /// let bound = manager.bind_health_probes(([127, 0, 0, 1], 0).into()).await?;
    /// let running = tokio::spawn(manager.run(std::future::pending()));
    /// plinth_testenv::eventually("/healthz answers", || async {
    ///     plinth_testenv::scrape(bound.port(), "/healthz").await.ends_with("\r\n\r\nok")
    /// }).await;
    /// running.abort();
    /// # Ok(()) }
    /// ```
    pub async fn bind_health_probes(
        &mut self,
        addr: SocketAddr,
    ) -> Result<SocketAddr, ManagerError> {
        let listener = bind("health probes", addr).await?;
        let local = listener.local_addr().unwrap_or(addr);
        self.health_listener = Some(listener);
        Ok(local)
    }

    /// Adds a runnable (a controller's `run`): it returns when the shutdown signal is given;
    /// an error from it stops the manager ([`ManagerError::Runnable`]).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::Manager;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// use plinth_runtime::manager::Runs;
    /// // Any long-running work the manager should start and stop: a periodic sweep, say.
    /// let manager = Manager::new().add(Runs::LeaderOnly, |shutdown| async move {
    ///     let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
    ///     let stop = shutdown.wait();
    ///     tokio::pin!(stop);
    ///     loop {
    ///         tokio::select! {
    ///             _ = tick.tick() => { /* sweep */ }
    ///             () = &mut stop => return Ok(()),
    ///         }
    ///     }
    /// });
    /// manager.run(tokio::time::sleep(std::time::Duration::from_millis(50))).await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn add<F, Fut>(mut self, runs: Runs, run: F) -> Self
    where
        F: FnOnce(Shutdown) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), RunError>> + Send + 'static,
    {
        self.push(runs, run);
        self
    }

    /// [`Manager::add`] through a borrow (for builders).
    pub(crate) fn push<F, Fut>(&mut self, runs: Runs, run: F)
    where
        F: FnOnce(Shutdown) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), RunError>> + Send + 'static,
    {
        let runnable: Runnable = Box::new(move |shutdown| Box::pin(run(shutdown)));
        match runs {
            Runs::LeaderOnly => self.leaders.push(runnable),
            Runs::Everywhere => self.everywhere.push(runnable),
        }
    }

    /// Waits for the informers it handed out to sync, then runs its runnables until `stop`
    /// completes or one of them fails; then every runnable finishes and the lease is released.
    /// When leadership is lost, leader-only work is stopped at once (not given a grace
    /// period: another process leads already).
    ///
    /// # Errors
    /// [`ManagerError::LostLeadership`] if another process took the lease;
    /// [`ManagerError::Runnable`] if a runnable failed (a controller's caches never synced);
    /// [`ManagerError::CacheSyncTimeout`] if the informers did not sync in time.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::Manager;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// use plinth_runtime::manager::Runs;
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// let manager = Manager::new().add(Runs::Everywhere, |shutdown| async move {
    ///     shutdown.wait().await;
    ///     Ok(())
    /// });
    /// let running = tokio::spawn(manager.run(async { let _ = stopped.await; }));
    /// let _ = stop.send(());
    /// // A clean stop: Ok.
    /// running.await??;
    /// # Ok(()) }
    /// ```
    pub async fn run(self, stop: impl Future<Output = ()>) -> Result<(), ManagerError> {
        let (ready_tx, ready) = watch::channel(false);
        let mut servers = Vec::new();
        for listener in [self.metrics_listener, self.health_listener]
            .into_iter()
            .flatten()
        {
            servers.push(tokio::spawn(crate::metrics::serve(
                listener,
                self.metrics.clone(),
                self.checks.clone(),
                ready.clone(),
            )));
        }
        let abort_servers = |servers: Vec<tokio::task::JoinHandle<()>>| {
            for server in servers {
                server.abort();
            }
        };
        tokio::pin!(stop);
        // Every informer handed out syncs before any runnable starts (controller-runtime starts
        // its cache and waits for it before the controllers).
        let synced = futures::future::join_all(self.synced);
        let timeout = self.cache_sync_timeout;
        tokio::select! {
            timed = tokio::time::timeout(timeout, synced) => if timed.is_err() {
                tracing::error!(?timeout, "Could not wait for the manager's caches to sync");
                abort_servers(servers);
                return Err(ManagerError::CacheSyncTimeout(timeout));
            },
            () = &mut stop => {
                abort_servers(servers);
                return Ok(());
            }
        }
        ready_tx.send_replace(true);
        let (failed_tx, mut failed_rx) = tokio::sync::mpsc::unbounded_channel::<RunError>();
        let start = move |run: Runnable, shutdown: Shutdown| {
            let failed = failed_tx.clone();
            tokio::spawn(async move {
                if let Err(error) = run(shutdown).await {
                    let _ = failed.send(error);
                }
            })
        };
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let shutdown = Shutdown(shutdown_rx, None);
        let everywhere: Vec<_> = self
            .everywhere
            .into_iter()
            .map(|run| start(run, shutdown.clone()))
            .collect();
        // Stopped (`None`), or a runnable failed (then the manager stops, not ready any more).
        let ended = async move {
            tokio::select! {
                () = &mut stop => None,
                Some(error) = failed_rx.recv() => {
                    tracing::error!(%error, "A runnable failed; stopping the manager");
                    ready_tx.send_replace(false);
                    Some(error)
                }
            }
        };
        let mut failure = None;
        let leaders = self.leaders;
        // Abort handles of the leader tasks stay reachable outside the leading part: when
        // leadership is lost, the tasks are stopped before `run` returns.
        let leader_tasks: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>> =
            std::sync::Arc::default();
        let leader_part = {
            let shutdown = Shutdown(
                shutdown.0.clone(),
                self.elector.as_ref().map(LeaderElector::gate),
            );
            let handles = leader_tasks.clone();
            async move {
                let tasks: Vec<_> = leaders
                    .into_iter()
                    .map(|run| start(run, shutdown.clone()))
                    .collect();
                handles
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend(tasks.iter().map(tokio::task::JoinHandle::abort_handle));
                for task in tasks {
                    let _ = task.await;
                }
            }
        };
        let outcome = match self.elector {
            None => {
                let running = tokio::spawn(leader_part);
                failure = ended.await;
                shutdown_tx.send_replace(true);
                let _ = running.await;
                Ok(())
            }
            Some(elector) => {
                let lease = elector.lease_name().to_owned();
                let metrics = self.metrics.clone();
                metrics.set_leader(&lease, false);
                let mut leading = elector.watch_leadership();
                let reporter = tokio::spawn(async move {
                    while leading.changed().await.is_ok() {
                        metrics.set_leader(&lease, *leading.borrow());
                    }
                });
                // The leader part ends when the shutdown signal is given, after its work in
                // flight; until then the elector renews, and the lease is released only after.
                // A stop before leadership ends the campaign.
                let mut stopping = shutdown.0.clone();
                let candidate = elector.clone();
                let elected = elector.run(leader_part, async move {
                    let _ = stopping.wait_for(|s| *s).await;
                    if candidate.is_leader() {
                        std::future::pending::<()>().await;
                    }
                });
                tokio::pin!(elected);
                tokio::pin!(ended);
                let result = tokio::select! {
                    result = &mut elected => result,
                    failed = &mut ended => {
                        failure = failed;
                        shutdown_tx.send_replace(true);
                        elected.await
                    }
                };
                reporter.abort();
                match result {
                    Leadership::Lost => {
                        // Another process leads now: leader-only work is cut off at once
                        // (controller-runtime exits without waiting) before this returns.
                        shutdown_tx.send_replace(true);
                        let tasks = std::mem::take(
                            &mut *leader_tasks
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner),
                        );
                        for task in &tasks {
                            task.abort();
                        }
                        while !tasks.iter().all(tokio::task::AbortHandle::is_finished) {
                            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                        }
                        Err(ManagerError::LostLeadership)
                    }
                    Leadership::NeverLed | Leadership::Released => Ok(()),
                }
            }
        };
        shutdown_tx.send_replace(true);
        for task in everywhere {
            let _ = task.await;
        }
        abort_servers(servers);
        match failure {
            Some(error) => Err(ManagerError::Runnable(error)),
            None => outcome,
        }
    }
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, ManagerError> {
    crate::metrics::bind(addr)
        .await
        .map_err(|source| ManagerError::Bind { what, addr, source })
}

/// Completes on SIGTERM or Ctrl-C (controller-runtime's `SetupSignalHandler`): the stop
/// signal an operator's `main` hands to [`Manager::run`].
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// // An operator's main: run until SIGTERM (a pod being stopped) or Ctrl-C.
/// let manager = plinth_runtime::Manager::new();
/// manager.run(plinth_runtime::manager::shutdown_signal()).await?;
/// # Ok(()) }
/// ```
pub async fn shutdown_signal() {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
