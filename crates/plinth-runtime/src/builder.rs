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

use crate::controller::{Action, Controller, Predicate, ReconcileError};
use crate::informer::{Informer, InformerOptions, ObjectKey};
use crate::manager::Manager;
use crate::metrics::DuplicateController;

/// Builds a controller on a [`Manager`]; see the module docs.
pub struct ControllerBuilder<'m, K> {
    manager: &'m mut Manager,
    primary: Arc<Informer<K>>,
    controller: Controller<K>,
    name: Option<String>,
    leader_only: bool,
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
        let primary = self.informer_with(|| api, options);
        let controller = Controller::new(&primary);
        ControllerBuilder {
            manager: self,
            primary,
            controller,
            name: None,
            leader_only: true,
        }
    }
}

impl<K> ControllerBuilder<'_, K>
where
    K: Cached,
    K::DynamicType: Default,
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
        let owned = self.manager.informer_with(|| api, options);
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
        let other = self.manager.informer_with(|| api, options);
        self.controller = self.controller.watches(&other, map);
        self
    }

    /// Reconciles a primary object only for changes that pass `predicate`.
    #[must_use]
    pub fn with_predicate(mut self, predicate: Predicate) -> Self {
        self.controller = self.controller.with_predicate(&self.primary, predicate);
        self
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
        self.leader_only = false;
        self
    }

    /// Registers the controller with its manager: when the manager runs, `reconcile` is
    /// called with each changed object (from the cache) and `context`. An object gone from
    /// the cache is not reconciled — clean-up outside the cluster belongs in a finalizer
    /// ([`crate::helpers::finalizer`]); owned objects go with their owner.
    ///
    /// # Errors
    /// If a controller of the same name is registered on the manager already.
    pub fn run<Ctx, F, Fut>(
        self,
        reconcile: F,
        context: Arc<Ctx>,
    ) -> Result<(), DuplicateController>
    where
        Ctx: Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, ReconcileError>> + Send + 'static,
    {
        let name = self
            .name
            .unwrap_or_else(|| K::kind(&K::DynamicType::default()).to_lowercase());
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
        self.manager.push(self.leader_only, move |shutdown| {
            controller.run(by_key, shutdown.wait())
        });
        Ok(())
    }
}
