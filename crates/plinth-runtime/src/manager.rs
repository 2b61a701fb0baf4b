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
    pub fn leadership(&self) -> Option<crate::leader::LeaseGate> {
        self.1.clone()
    }

    /// Completes when the manager stops.
    pub async fn wait(mut self) {
        let _ = self.0.wait_for(|s| *s).await;
    }
}

/// Why a runnable stopped without being asked to.
pub type RunError = Box<dyn std::error::Error + Send + Sync>;

type Runnable =
    Box<dyn FnOnce(Shutdown) -> Pin<Box<dyn Future<Output = Result<(), RunError>> + Send>> + Send>;

/// Where a runnable runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    /// Only while this process holds the leader lease (controllers, by default).
    LeaderOnly,
    /// On every replica (work that is local to the process).
    Everywhere,
}

/// Why a manager stopped other than by being asked to.
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
#[derive(Debug, thiserror::Error)]
#[error("the informer of {resource} cannot take these options: {reason}")]
pub struct InformerConflict {
    /// The resource's URL and selectors.
    pub resource: String,
    /// What conflicts.
    pub reason: String,
}

/// Runs controllers; see the module docs.
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
    pub fn new() -> Self {
        Self::default()
    }

    /// The informer of the objects `api` reads, started on first use and shared by every
    /// controller that asks for the same resource (group, version, resource and namespace —
    /// two `DynamicObject` resources are two informers): one watch per resource.
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
    pub fn metrics(&self) -> Metrics {
        self.metrics.clone()
    }

    /// Adds a `/healthz` check (see [`crate::health`]).
    pub fn add_health_check(
        &self,
        name: &str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        self.checks.add_health(name, check);
    }

    /// Adds a `/readyz` check (besides the manager's own: its caches have synced).
    pub fn add_ready_check(
        &self,
        name: &str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        self.checks.add_ready(name, check);
    }

    /// Runs the leader-only runnables only while `elector` holds its lease.
    #[must_use]
    pub fn leader_election(mut self, elector: LeaderElector) -> Self {
        self.elector = Some(elector);
        self
    }

    /// How long `run` waits for the informers it handed out to sync before it starts any
    /// runnable (default 2 minutes); then it fails with [`ManagerError::CacheSyncTimeout`].
    #[must_use]
    pub fn cache_sync_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.cache_sync_timeout = timeout;
        self
    }

    /// Serves `/metrics` on `addr` (port 0: any); returns the bound address.
    ///
    /// # Errors
    /// If it cannot be bound.
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
