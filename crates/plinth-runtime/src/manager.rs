//! The manager: runs controllers on shared informers, some only while this process holds the
//! leader lease; serves `/metrics`, `/healthz` and `/readyz`; stops gracefully (work in flight
//! finishes, the lease is released so a standby takes over at once).
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use plinth_runtime::{LeaderElector, Manager};
//! let elector = LeaderElector::new(client.clone(), "default", "my-operator", "pod-a");
//! let mut manager = Manager::new().leader_election("my-operator", elector);
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
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// Completes when the manager stops.
    pub async fn wait(mut self) {
        let _ = self.0.wait_for(|s| *s).await;
    }
}

type Runnable = Box<dyn FnOnce(Shutdown) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// Why a manager stopped other than by being asked to.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// Another process took the lease: this one must stop (controller-runtime exits).
    #[error("leader election lost")]
    LostLeadership,
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

/// Runs controllers; see the module docs.
#[derive(Default)]
pub struct Manager {
    metrics: Metrics,
    checks: crate::health::Checks,
    elector: Option<(String, LeaderElector)>,
    leaders: Vec<Runnable>,
    everywhere: Vec<Runnable>,
    metrics_listener: Option<TcpListener>,
    health_listener: Option<TcpListener>,
    /// One informer per Rust type and resource URL (group, version, resource, namespace),
    /// shared by every controller.
    informers: std::collections::HashMap<(std::any::TypeId, String), Box<dyn std::any::Any + Send>>,
    /// Each informer's sync, awaited before `/readyz` says ready.
    synced: Vec<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>,
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
        self.informer_with(api, crate::informer::InformerOptions::default())
    }

    /// As [`Manager::informer`], with `options` for a new informer (selectors, indexes, a
    /// transform). Informers are shared by resource and selectors: the options of the first
    /// request win for indexes and transform.
    pub fn informer_with<K>(
        &mut self,
        api: impl FnOnce() -> kube::Api<K>,
        options: crate::informer::InformerOptions<K>,
    ) -> std::sync::Arc<crate::informer::Informer<K>>
    where
        K: crate::builder::Cached,
    {
        let api = api();
        let key = (
            std::any::TypeId::of::<K>(),
            format!(
                "{}?labelSelector={}&fieldSelector={}",
                api.resource_url(),
                options.label_selector.as_deref().unwrap_or(""),
                options.field_selector.as_deref().unwrap_or("")
            ),
        );
        if let Some(existing) = self
            .informers
            .get(&key)
            .and_then(|b| b.downcast_ref::<std::sync::Arc<crate::informer::Informer<K>>>())
        {
            return existing.clone();
        }
        let informer = std::sync::Arc::new(crate::informer::Informer::spawn_with(api, options));
        let cache = informer.cache();
        self.synced
            .push(Box::pin(async move { cache.wait_synced().await }));
        self.informers.insert(key, Box::new(informer.clone()));
        informer
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

    /// Runs the leader-only runnables only while `elector` holds the lease `lease`.
    #[must_use]
    pub fn leader_election(mut self, lease: &str, elector: LeaderElector) -> Self {
        self.elector = Some((lease.to_owned(), elector));
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

    /// Adds a runnable (a controller's `run`) that needs leadership when `leader_only`.
    #[must_use]
    pub fn add<F, Fut>(mut self, leader_only: bool, run: F) -> Self
    where
        F: FnOnce(Shutdown) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.push(leader_only, run);
        self
    }

    /// [`Manager::add`] through a borrow (for builders).
    pub(crate) fn push<F, Fut>(&mut self, leader_only: bool, run: F)
    where
        F: FnOnce(Shutdown) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let runnable: Runnable = Box::new(move |shutdown| Box::pin(run(shutdown)));
        if leader_only {
            self.leaders.push(runnable);
        } else {
            self.everywhere.push(runnable);
        }
    }

    /// Runs until `stop` completes; then every runnable finishes and the lease is released.
    ///
    /// # Errors
    /// [`ManagerError::LostLeadership`] if another process took the lease.
    pub async fn run(self, stop: impl Future<Output = ()>) -> Result<(), ManagerError> {
        let (ready_tx, ready) = watch::channel(false);
        let mut servers = Vec::new();
        if let Some(listener) = self.metrics_listener {
            servers.push(tokio::spawn(crate::metrics::serve(
                listener,
                self.metrics.clone(),
                self.checks.clone(),
                ready.clone(),
            )));
        }
        if let Some(listener) = self.health_listener {
            servers.push(tokio::spawn(crate::metrics::serve(
                listener,
                self.metrics.clone(),
                self.checks.clone(),
                ready.clone(),
            )));
        }
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let shutdown = Shutdown(shutdown_rx);
        let everywhere: Vec<_> = self
            .everywhere
            .into_iter()
            .map(|run| tokio::spawn(run(shutdown.clone())))
            .collect();
        // Ready once every informer the manager handed out has synced.
        let syncing = tokio::spawn(async move {
            futures::future::join_all(self.synced).await;
            ready_tx.send_replace(true);
        });
        let leaders = self.leaders;
        // Abort handles of the leader tasks stay reachable outside the leading part: when
        // leadership is lost, the tasks are stopped before `run` returns.
        let leader_tasks: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>> =
            std::sync::Arc::default();
        let leader_part = {
            let (shutdown, handles) = (shutdown.clone(), leader_tasks.clone());
            async move {
                let tasks: Vec<_> = leaders
                    .into_iter()
                    .map(|run| tokio::spawn(run(shutdown.clone())))
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
                stop.await;
                shutdown_tx.send_replace(true);
                let _ = running.await;
                Ok(())
            }
            Some((lease, elector)) => {
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
                tokio::pin!(stop);
                let result = tokio::select! {
                    result = &mut elected => result,
                    () = &mut stop => {
                        shutdown_tx.send_replace(true);
                        elected.await
                    }
                };
                reporter.abort();
                match result {
                    Leadership::Lost => {
                        // Another process leads now: the leader-only work stops (asked to,
                        // then cut off after the grace period) before this returns.
                        shutdown_tx.send_replace(true);
                        let tasks = std::mem::take(
                            &mut *leader_tasks
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner),
                        );
                        stop_tasks(&tasks, LOST_LEADERSHIP_GRACE).await;
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
        syncing.abort();
        for server in servers {
            server.abort();
        }
        outcome
    }
}

/// Waits up to `grace` for `tasks` to finish, then aborts the rest and waits for them.
async fn stop_tasks(tasks: &[tokio::task::AbortHandle], grace: std::time::Duration) {
    let finished = || tasks.iter().all(tokio::task::AbortHandle::is_finished);
    let deadline = tokio::time::Instant::now() + grace;
    while !finished() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    for task in tasks {
        task.abort();
    }
    while !finished() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// How long leader-only work may take to stop after leadership is lost.
const LOST_LEADERSHIP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

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
