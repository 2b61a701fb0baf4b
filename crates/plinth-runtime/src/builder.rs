//! The controller builder a manager hands out: the primary type, what it owns and watches,
//! predicates, and the reconcile function with its context — informers shared through the
//! manager, the controller started (leader-only by default) when the manager runs.
//!
//! ```no_run
//! use std::sync::Arc;
//! use k8s_openapi::api::apps::v1::Deployment;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use plinth_runtime::{Action, Manager, Predicate, ReconcileError};
//!
//! struct Context { client: kube::Client }
//!
//! async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
//!     let _ = (cm, &ctx.client);
//!     Ok(Action::Done)
//! }
//!
//! # async fn example(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let mut manager = Manager::new();
//! manager
//!     .controller(kube::Api::<ConfigMap>::namespaced(client.clone(), "default"))
//!     .owns(kube::Api::<Deployment>::namespaced(client.clone(), "default"))
//!     .with_predicate(Predicate::GenerationChanged)
//!     .run(reconcile, Arc::new(Context { client }))?;
//! manager.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::controller::{Action, Controller, Predicate, ReconcileError, Stopping};
use crate::informer::{Change, Informer, InformerOptions, ObjectKey};
use crate::manager::InformerConflict;
use crate::manager::Manager;
use crate::metrics::DuplicateController;

/// Why a controller could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Another controller of that name is registered.
    #[error(transparent)]
    Duplicate(#[from] DuplicateController),
    /// An informer's options conflict with the shared informer's.
    #[error(transparent)]
    Informer(#[from] InformerConflict),
}

/// Builds a controller on a [`Manager`]; see the module docs.
pub struct ControllerBuilder<'m, K> {
    manager: &'m mut Manager,
    primary: Arc<Informer<K>>,
    controller: Controller<K>,
    name: Option<String>,
    runs: crate::manager::Runs,
    /// The first informer conflict, reported by `run`.
    conflict: Option<InformerConflict>,
}

impl<K> Debug for ControllerBuilder<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerBuilder")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The bounds every cached type meets.
pub trait Cached: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static {}
impl<T: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static> Cached for T {}

impl Manager {
    /// A controller of the objects `api` reads (its namespace, or all); finish it with
    /// [`ControllerBuilder::run`].
    pub fn controller<K>(&mut self, api: Api<K>) -> ControllerBuilder<'_, K>
    where
        K: Cached,
        K::DynamicType: Default,
    {
        self.controller_with(api, InformerOptions::default())
    }

    /// As [`Manager::controller`], with the primary informer's `options` (selectors,
    /// indexes, a transform).
    pub fn controller_with<K>(
        &mut self,
        api: Api<K>,
        options: InformerOptions<K>,
    ) -> ControllerBuilder<'_, K>
    where
        K: Cached,
        K::DynamicType: Default,
    {
        let resource = K::DynamicType::default();
        self.controller_for(api, &resource, options)
    }

    /// A controller of a primary resource known only at run time: `DynamicObject`s of the
    /// [`kube::core::ApiResource`] `resource` (`api` is `Api::all_with(client, &resource)` or
    /// `namespaced_with`), with the primary informer's `options`.
    pub fn controller_for<K>(
        &mut self,
        api: Api<K>,
        resource: &K::DynamicType,
        options: InformerOptions<K>,
    ) -> ControllerBuilder<'_, K>
    where
        K: Cached,
    {
        let (primary, conflict) = self.shared_informer(|| api, options);
        let controller = Controller::for_type(&primary, resource);
        ControllerBuilder {
            manager: self,
            primary,
            controller,
            name: None,
            runs: crate::manager::Runs::LeaderOnly,
            conflict,
        }
    }
}

impl<K> ControllerBuilder<'_, K>
where
    K: Cached,
{
    /// Also reconciles the controller owner of any object `api` reads that changes.
    #[must_use]
    pub fn owns<C>(self, api: Api<C>) -> Self
    where
        C: Cached,
    {
        self.owns_with(api, InformerOptions::default())
    }

    /// As [`ControllerBuilder::owns`], with the owned informer's `options` (e.g. a transform
    /// stripping large fields the reconciler never reads).
    #[must_use]
    pub fn owns_with<C>(mut self, api: Api<C>, options: InformerOptions<C>) -> Self
    where
        C: Cached,
    {
        let (owned, conflict) = self.manager.shared_informer(|| api, options);
        self.conflict = self.conflict.or(conflict);
        self.controller = self.controller.owns(&owned);
        self
    }

    /// Also reconciles the keys `map` gives for any object `api` reads that changes.
    #[must_use]
    pub fn watches<C>(
        self,
        api: Api<C>,
        map: impl Fn(&C) -> Vec<ObjectKey> + Send + 'static,
    ) -> Self
    where
        C: Cached,
    {
        self.watches_with(api, InformerOptions::default(), map)
    }

    /// As [`ControllerBuilder::watches`], with the watched informer's `options` (a selector,
    /// a transform stripping what the reconciler never reads).
    #[must_use]
    pub fn watches_with<C>(
        mut self,
        api: Api<C>,
        options: InformerOptions<C>,
        map: impl Fn(&C) -> Vec<ObjectKey> + Send + 'static,
    ) -> Self
    where
        C: Cached,
    {
        let (other, conflict) = self.manager.shared_informer(|| api, options);
        self.conflict = self.conflict.or(conflict);
        self.controller = self.controller.watches(&other, map);
        self
    }

    /// Reconciles a primary object only for changes that pass `predicate`.
    #[must_use]
    pub fn with_predicate(mut self, predicate: Predicate) -> Self {
        self.controller = self.controller.with_predicate(&self.primary, predicate);
        self
    }

    /// Reconciles a primary object only for changes `predicate` accepts (a predicate of the
    /// user's own: old and new object in the [`Change`]).
    #[must_use]
    pub fn with_predicate_fn(
        mut self,
        predicate: impl Fn(&Change<K>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.controller = self.controller.with_predicate_fn(&self.primary, predicate);
        self
    }

    /// How long the controller waits for its caches to sync (see
    /// [`Controller::cache_sync_timeout`]); the manager's own wait comes first
    /// ([`Manager::cache_sync_timeout`]).
    #[must_use]
    pub fn cache_sync_timeout(mut self, timeout: Duration) -> Self {
        self.controller = self.controller.cache_sync_timeout(timeout);
        self
    }

    /// How long a stop waits for reconciles in flight (see
    /// [`Controller::shutdown_timeout`]).
    #[must_use]
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.controller = self.controller.shutdown_timeout(timeout);
        self
    }

    /// A token telling reconcilers that the controller is stopping (put it in the context).
    pub fn stopping(&self) -> Stopping {
        self.controller.stopping()
    }

    /// Names the controller (its metrics label; by default the kind in lower case).
    #[must_use]
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// How many objects are reconciled at once.
    #[must_use]
    pub fn concurrency(mut self, workers: usize) -> Self {
        self.controller = self.controller.concurrency(workers);
        self
    }

    /// Reconciles every object again every `period`.
    #[must_use]
    pub fn resync_every(mut self, period: Duration) -> Self {
        self.controller = self.controller.resync_every(period);
        self
    }

    /// What follows a failed reconcile (see [`Controller::error_policy`]).
    #[must_use]
    pub fn error_policy(
        mut self,
        policy: impl Fn(&ObjectKey, &ReconcileError) -> Option<Action> + Send + Sync + 'static,
    ) -> Self {
        self.controller = self.controller.error_policy(policy);
        self
    }

    /// Runs on every replica, not only while leading (for controllers whose work is local).
    #[must_use]
    pub fn without_leader_election(mut self) -> Self {
        self.runs = crate::manager::Runs::Everywhere;
        self
    }

    /// Registers the controller with its manager: when the manager runs, `reconcile` is
    /// called with each changed object (from the cache) and `context`. An object gone from
    /// the cache is not reconciled — clean-up outside the cluster belongs in a finalizer
    /// ([`crate::helpers::finalizer`]); owned objects go with their owner.
    ///
    /// # Errors
    /// If a controller of the same name is registered on the manager already, or the options
    /// of one of its informers conflict with those of an informer shared already.
    pub fn run<Ctx, F, Fut>(self, reconcile: F, context: Arc<Ctx>) -> Result<(), BuildError>
    where
        Ctx: Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, ReconcileError>> + Send + 'static,
    {
        if let Some(conflict) = self.conflict {
            return Err(conflict.into());
        }
        let name = self
            .name
            .unwrap_or_else(|| self.controller.name().to_owned());
        let metrics = self.manager.metrics();
        let controller = self.controller.metrics(&name, &metrics)?;
        let cache = self.primary.cache();
        let reconcile = Arc::new(reconcile);
        let by_key = move |key: ObjectKey| -> crate::controller::ReconcileFuture {
            let (cache, reconcile, context) = (cache.clone(), reconcile.clone(), context.clone());
            Box::pin(async move {
                match cache.get(&key) {
                    Some(object) => reconcile(object, context).await,
                    None => Ok(Action::Done),
                }
            })
        };
        self.manager.push(self.runs, move |shutdown| async move {
            controller
                .gated_by(shutdown.leadership())
                .run(by_key, shutdown.wait())
                .await
                .map_err(crate::manager::RunError::from)
        });
        Ok(())
    }
}
