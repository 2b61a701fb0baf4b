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
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use plinth_runtime::{Action, BuildError, Manager};
/// # let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
/// let api = kube::Api::<ConfigMap>::default_namespaced(client);
/// let reconcile = |_: Arc<ConfigMap>, _: Arc<()>| async { Ok(Action::Done) };
/// let mut manager = Manager::new();
/// manager.controller(api.clone()).named("settings").run(reconcile, Arc::new(()))?;
/// // A second controller of the same name would overwrite the first one's metrics.
/// let twice = manager.controller(api).named("settings").run(reconcile, Arc::new(()));
/// assert!(matches!(twice, Err(BuildError::Duplicate(_))));
/// # Ok(()) }
/// ```
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
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use std::sync::Arc;
/// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
/// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
/// # let env = plinth_testenv::TestEnv::start().await?;
/// # let client = env.client();
/// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
/// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
/// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
/// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
/// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
/// #     Ok(Action::Done)
/// # }
/// let mut manager = Manager::new();
/// manager
///     .controller(api.clone())
///     .named("settings")
///     .concurrency(2)
///     .run(reconcile, Arc::new(seen))?;
/// # let running = tokio::spawn(manager.run(std::future::pending()));
/// # let mut cm = ConfigMap::default();
/// # cm.metadata.name = Some("settings".into());
/// # api.create(&Default::default(), &cm).await?;
/// # // The reconciler saw it: the controller ran as configured.
/// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
/// # running.abort();
/// # Ok(()) }
/// ```
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
///
/// # Example
///
/// ```
/// // Every `kube` resource type is one: built-in types, `#[derive(CustomResource)]` types,
/// // `DynamicObject`, `PartialObjectMeta<K>`.
/// fn cached<K: plinth_runtime::builder::Cached>() {}
/// cached::<k8s_openapi::api::core::v1::Pod>();
/// cached::<kube::api::DynamicObject>();
/// ```
pub trait Cached: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static {}
impl<T: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static> Cached for T {}

impl Manager {
    /// A controller of the objects `api` reads (its namespace, or all); finish it with
    /// [`ControllerBuilder::run`].
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// manager.controller(api.clone()).run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
    pub fn controller<K>(&mut self, api: Api<K>) -> ControllerBuilder<'_, K>
    where
        K: Cached,
        K::DynamicType: Default,
    {
        self.controller_with(api, InformerOptions::default())
    }

    /// As [`Manager::controller`], with the primary informer's `options` (selectors,
    /// indexes, a transform).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// use plinth_runtime::InformerOptions;
    /// // Only ConfigMaps named `settings` are watched (and cached).
    /// let options = InformerOptions::default().fields("metadata.name=settings");
    /// manager.controller_with(api.clone(), options).run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    /// use plinth_runtime::{Action, InformerOptions, Manager, ReconcileError};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// // A type known only at run time (read from a CRD, a flag, a config file).
    /// let gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
    /// let resource = ApiResource::from_gvk_with_plural(&gvk, "configmaps");
    /// let api: kube::Api<DynamicObject> = kube::Api::namespaced_with(env.client(), "default", &resource);
    /// let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// let reconcile = move |object: Arc<DynamicObject>, _: Arc<()>| {
    ///     let _ = seen.send(object.metadata.name.clone().unwrap_or_default());
    ///     async { Ok::<_, ReconcileError>(Action::Done) }
    /// };
    /// let mut manager = Manager::new();
    /// manager.controller_for(api, &resource, InformerOptions::default()).run(reconcile, Arc::new(()))?;
    /// let running = tokio::spawn(manager.run(std::future::pending()));
    /// // The namespace's root CA ConfigMap is reconciled like any other.
    /// while saw.recv().await.expect("the controller runs").as_str() != "kube-root-ca.crt" {}
    /// running.abort();
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// // A Secret whose controller owner is a ConfigMap brings that ConfigMap back to reconcile.
    /// manager
    ///     .controller(api.clone())
    ///     .owns(kube::Api::<Secret>::namespaced(client.clone(), "default"))
    ///     .run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn owns<C>(self, api: Api<C>) -> Self
    where
        C: Cached,
    {
        self.owns_with(api, InformerOptions::default())
    }

    /// As [`ControllerBuilder::owns`], with the owned informer's `options` (e.g. a transform
    /// stripping large fields the reconciler never reads).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// use plinth_runtime::InformerOptions;
    /// // The Secrets' data is never read by the reconciler: not cached.
    /// let lean = InformerOptions::default().transform(|secret: &mut Secret| secret.data = None);
    /// manager
    ///     .controller(api.clone())
    ///     .owns_with(kube::Api::<Secret>::namespaced(client.clone(), "default"), lean)
    ///     .run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// // A Secret `x-tls` asks for the ConfigMap `x` to be reconciled.
    /// manager
    ///     .controller(api.clone())
    ///     .watches(kube::Api::<Secret>::namespaced(client.clone(), "default"), |secret: &Secret| {
    ///         let name = secret.metadata.name.clone().unwrap_or_default();
    ///         name.strip_suffix("-tls")
    ///             .map(|base| ObjectKey { namespace: Some("default".into()), name: base.into() })
    ///             .into_iter()
    ///             .collect()
    ///     })
    ///     .run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// use plinth_runtime::InformerOptions;
    /// // Only Secrets labelled for this operator are watched.
    /// manager
    ///     .controller(api.clone())
    ///     .watches_with(
    ///         kube::Api::<Secret>::namespaced(client.clone(), "default"),
    ///         InformerOptions::default().labels("app.kubernetes.io/managed-by=my-operator"),
    ///         |_secret: &Secret| vec![ObjectKey { namespace: Some("default".into()), name: "settings".into() }],
    ///     )
    ///     .run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// // Resyncs (the same resourceVersion again) are not worth a reconcile; for a custom
    /// // resource, `Predicate::GenerationChanged` also skips status-only writes.
    /// manager
    ///     .controller(api.clone())
    ///     .with_predicate(Predicate::ResourceVersionChanged)
    ///     .run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_predicate(mut self, predicate: Predicate) -> Self {
        self.controller = self.controller.with_predicate(&self.primary, predicate);
        self
    }

    /// Reconciles a primary object only for changes `predicate` accepts (a predicate of the
    /// user's own: old and new object in the [`Change`]).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// // Reconciled only when the data changed (or on creation).
    /// manager
    ///     .controller(api.clone())
    ///     .with_predicate_fn(|change| match (&change.old, &change.new) {
    ///         (Some(old), Some(new)) => old.data != new.data,
    ///         _ => true,
    ///     })
    ///     .run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// manager
    ///     .controller(api.clone())
    ///     .cache_sync_timeout(std::time::Duration::from_secs(30))
    ///     .run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn cache_sync_timeout(mut self, timeout: Duration) -> Self {
        self.controller = self.controller.cache_sync_timeout(timeout);
        self
    }

    /// How long a stop waits for reconciles in flight (see
    /// [`Controller::shutdown_timeout`]).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// // A stop waits up to 10 s for reconciles in flight.
    /// manager
    ///     .controller(api.clone())
    ///     .shutdown_timeout(std::time::Duration::from_secs(10))
    ///     .run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.controller = self.controller.shutdown_timeout(timeout);
        self
    }

    /// A token telling reconcilers that the controller is stopping (put it in the context).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// let builder = manager.controller(api.clone());
    /// // Long reconciles look at it and return early when the controller stops.
    /// let stopping = builder.stopping();
    /// assert!(!stopping.is_stopping());
    /// builder.run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
    pub fn stopping(&self) -> Stopping {
        self.controller.stopping()
    }

    /// Names the controller (its metrics label; by default the kind in lower case).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// let metrics = manager.metrics();
    /// manager.controller(api.clone()).named("settings-sync").run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// // Its metrics carry the name (once the reconcile that just ran is counted).
    /// plinth_testenv::eventually("the reconcile counted", || async {
    ///     metrics.render().contains(r#"controller_runtime_reconcile_total{controller="settings-sync""#)
    /// }).await;
    /// # running.abort();
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// How many objects are reconciled at once.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// manager.controller(api.clone()).concurrency(4).run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn concurrency(mut self, workers: usize) -> Self {
        self.controller = self.controller.concurrency(workers);
        self
    }

    /// Reconciles every object again every `period`.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// // Every object again every 10 minutes, changed or not (drift outside the cluster).
    /// manager
    ///     .controller(api.clone())
    ///     .resync_every(std::time::Duration::from_secs(600))
    ///     .run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn resync_every(mut self, period: Duration) -> Self {
        self.controller = self.controller.resync_every(period);
        self
    }

    /// What follows a failed reconcile (see [`Controller::error_policy`]).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// // A failed reconcile is tried again in 5 s, whatever the failure.
    /// manager
    ///     .controller(api.clone())
    ///     .error_policy(|_key, _error| Some(Action::RequeueAfter(std::time::Duration::from_secs(5))))
    ///     .run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn error_policy(
        mut self,
        policy: impl Fn(&ObjectKey, &ReconcileError) -> Option<Action> + Send + Sync + 'static,
    ) -> Self {
        self.controller = self.controller.error_policy(policy);
        self
    }

    /// Runs on every replica, not only while leading (for controllers whose work is local).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// // Local work (say, a node-level cache) runs on every replica.
    /// manager
    ///     .controller(api.clone())
    ///     .without_leader_election()
    ///     .run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use plinth_runtime::{Action, Manager, ObjectKey, Predicate, ReconcileError};
    /// # let env = plinth_testenv::TestEnv::start().await?;
    /// # let client = env.client();
    /// # let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    /// # type Seen = tokio::sync::mpsc::UnboundedSender<String>;
    /// # let (seen, mut saw) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// # async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    /// #     let _ = seen.send(cm.metadata.name.clone().unwrap_or_default());
    /// #     Ok(Action::Done)
    /// # }
    /// let mut manager = Manager::new();
    /// // `seen` is the context every reconcile gets.
    /// manager.controller(api.clone()).run(reconcile, Arc::new(seen))?;
    /// # let running = tokio::spawn(manager.run(std::future::pending()));
    /// # let mut cm = ConfigMap::default();
    /// # cm.metadata.name = Some("settings".into());
    /// # api.create(&Default::default(), &cm).await?;
    /// # // The reconciler saw it: the controller ran as configured.
    /// # while saw.recv().await.expect("the controller runs").as_str() != "settings" {}
    /// # running.abort();
    /// # Ok(()) }
    /// ```
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
