//! The registry as everything above it writes through: admission is an argument of every
//! write ([`Registry::create`] and the rest take `&dyn Admit`, as kube's `rest.Creater` takes
//! the admission attributes), and two ways of carrying it along:
//! - [`Admitted`]: the registry and an admission borrowed for one call — what admission and a
//!   type's hooks read and write through while a write is under way ([`Objects`]);
//! - [`Client`]: the one in-process client, the registry with the server's admission chain,
//!   which the built-in controllers and the server's own bootstrapping use (kube's loopback
//!   client). Reads go straight to the registry (`Deref`).

use std::sync::Arc;

use plinth_core::ApiError;
use serde_json::Value;

use super::{
    DeleteOptions, Deleted, ListOptions, Part, Patch, Registry, ScaleWrite, WriteOptions, Written,
};
use crate::admit::Admit;
use crate::provenance::Provenance;
use crate::resources::{Objects, ResourceDef};

/// The registry with an admission, for the length of one call.
#[derive(Clone, Copy)]
pub struct Admitted<'a> {
    /// The registry.
    pub registry: &'a Registry,
    /// The admission every write through it passes.
    pub admit: &'a dyn Admit,
}

impl std::fmt::Debug for Admitted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted").finish_non_exhaustive()
    }
}

impl Registry {
    /// This registry with `admit` (what a write hands admission and the type's hooks).
    pub fn admitted<'a>(&'a self, admit: &'a dyn Admit) -> Admitted<'a> {
        Admitted {
            registry: self,
            admit,
        }
    }
}

#[async_trait::async_trait]
impl crate::services::ServiceResolver for Registry {
    async fn resolve(
        &self,
        namespace: &str,
        name: &str,
        port: u16,
    ) -> Result<std::net::SocketAddr, crate::services::Unresolved> {
        let read = |plural: &'static str| async move {
            let def = self.resources.get("", "v1", plural)?;
            let cached = self
                .caches
                .get(&def.key_prefix(), &def.selector_fields())
                .object(&def.key(Some(namespace), name))
                .map(|stored| stored.and_then(|s| s.decode()));
            match cached {
                Some(found) => found,
                None => self.get(&def, Some(namespace), name).await.ok(),
            }
        };
        let service = read("services").await;
        let endpoints = read("endpoints").await;
        crate::services::endpoint_of(name, service.as_ref(), endpoints.as_ref(), port)
    }
}

#[async_trait::async_trait]
impl crate::services::ServiceResolver for Admitted<'_> {
    async fn resolve(
        &self,
        namespace: &str,
        name: &str,
        port: u16,
    ) -> Result<std::net::SocketAddr, crate::services::Unresolved> {
        self.registry.resolve(namespace, name, port).await
    }
}

#[async_trait::async_trait]
impl crate::services::ServiceResolver for Client {
    async fn resolve(
        &self,
        namespace: &str,
        name: &str,
        port: u16,
    ) -> Result<std::net::SocketAddr, crate::services::Unresolved> {
        crate::services::ServiceResolver::resolve(&**self, namespace, name, port).await
    }
}

#[async_trait::async_trait]
impl Objects for Admitted<'_> {
    fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.registry.resources.get(group, version, plural)
    }

    fn resources(&self) -> Vec<Arc<ResourceDef>> {
        self.registry.resources.all()
    }

    fn cached(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Option<Value>> {
        self.registry
            .cache_of(def)?
            .object(&def.key(namespace, name))
            .map(|stored| stored.and_then(|s| s.decode()))
    }

    fn cached_list(&self, def: &ResourceDef, namespace: Option<&str>) -> Option<Vec<Value>> {
        let (objects, revision) = self
            .registry
            .cache_of(def)?
            .snapshot(&def.list_prefix(namespace));
        (revision > 0).then(|| objects.iter().filter_map(|s| s.decode()).collect())
    }

    async fn get(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.registry.get(def, namespace, name).await
    }

    async fn list(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<Value, ApiError> {
        self.registry.list(def, namespace, options).await
    }

    async fn modify(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        part: Part,
        options: &WriteOptions,
        change: &(dyn for<'v> Fn(&'v mut Value) -> Result<bool, ApiError> + Sync),
    ) -> Result<Option<Value>, ApiError> {
        Ok(self
            .registry
            .modify(
                self.admit,
                def,
                namespace,
                name,
                part,
                options,
                |v: &mut Value| change(v),
            )
            .await?
            .map(|written| written.object))
    }

    async fn delete(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<(), ApiError> {
        self.registry
            .delete(self.admit, def, namespace, name, options)
            .await
            .map(drop)
    }
}

/// The in-process client: the registry and the server's admission chain, which every write
/// through it passes (as a loopback client's writes pass the server's admission).
#[derive(Clone)]
pub struct Client {
    registry: Registry,
    admission: Arc<dyn Admit>,
    /// The built-in controller writing through it, whose service account its writes'
    /// provenance names (`None`: the server itself).
    controller: Option<Arc<str>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl std::ops::Deref for Client {
    type Target = Registry;

    fn deref(&self) -> &Registry {
        &self.registry
    }
}

impl Client {
    /// A client writing through `registry` with `admission`.
    pub fn new(registry: Registry, admission: Arc<dyn Admit>) -> Self {
        Self {
            registry,
            admission,
            controller: None,
        }
    }

    /// This client for the built-in controller `name` (`deployment-controller`): its writes'
    /// provenance names that controller's service account, as kube-controller-manager's do.
    #[must_use]
    pub fn acting_as(&self, name: &str) -> Self {
        Self {
            controller: Some(name.into()),
            ..self.clone()
        }
    }

    /// Runs `work` under this client's provenance, unless a request's is already around it
    /// (a write made while serving one).
    async fn as_writer<F: std::future::Future>(
        &self,
        operation: &str,
        options: Option<&WriteOptions>,
        part: Part,
        work: F,
    ) -> F::Output {
        if plinth_store::note::current_note().is_some() {
            return work.await;
        }
        let manager = options.map_or("", |o| {
            o.field_manager.as_deref().unwrap_or(&o.default_manager)
        });
        let mut provenance = Provenance::internal(self.controller.as_deref(), operation, manager);
        part.subresource().clone_into(&mut provenance.subresource);
        provenance.scope(work).await
    }

    /// The registry below (reads need no client).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The admission every write passes.
    pub fn admission(&self) -> &dyn Admit {
        &*self.admission
    }

    /// The registry with this client's admission, as [`Objects`].
    pub fn objects(&self) -> Admitted<'_> {
        self.registry.admitted(&*self.admission)
    }

    /// [`Registry::create`], admitted.
    ///
    /// # Errors
    /// As [`Registry::create`].
    pub async fn create(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        object: Value,
        options: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let work = self
            .registry
            .create(&*self.admission, def, namespace, object, options);
        self.as_writer("create", Some(options), Part::Main, work)
            .await
    }

    /// [`Registry::update`], admitted.
    ///
    /// # Errors
    /// As [`Registry::update`].
    pub async fn update(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        object: Value,
        part: Part,
        options: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let work = self.registry.update(
            &*self.admission,
            def,
            namespace,
            name,
            object,
            part,
            options,
        );
        self.as_writer("update", Some(options), part, work).await
    }

    /// [`Registry::modify`], admitted.
    ///
    /// # Errors
    /// As [`Registry::modify`].
    pub async fn modify(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        part: Part,
        options: &WriteOptions,
        change: impl Fn(&mut Value) -> Result<bool, ApiError> + Sync,
    ) -> Result<Option<Written>, ApiError> {
        let work = self.registry.modify(
            &*self.admission,
            def,
            namespace,
            name,
            part,
            options,
            change,
        );
        self.as_writer("update", Some(options), part, work).await
    }

    /// [`Registry::patch`], admitted.
    ///
    /// # Errors
    /// As [`Registry::patch`].
    pub async fn patch(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        patch: Patch,
        part: Part,
        options: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let operation = if matches!(patch, Patch::Apply(_)) {
            "apply"
        } else {
            "patch"
        };
        let work =
            self.registry
                .patch(&*self.admission, def, namespace, name, patch, part, options);
        self.as_writer(operation, Some(options), part, work).await
    }

    /// [`Registry::delete`], admitted.
    ///
    /// # Errors
    /// As [`Registry::delete`].
    pub async fn delete(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        let work = self
            .registry
            .delete(&*self.admission, def, namespace, name, options);
        self.as_writer("delete", None, Part::Main, work).await
    }

    /// [`Registry::write_scale`], admitted.
    ///
    /// # Errors
    /// As [`Registry::write_scale`].
    pub async fn write_scale(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        change: ScaleWrite,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let work =
            self.registry
                .write_scale(&*self.admission, def, namespace, name, change, options);
        self.as_writer("update", Some(options), Part::Scale, work)
            .await
    }
}

#[async_trait::async_trait]
impl Objects for Client {
    fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.objects().resource(group, version, plural)
    }

    fn resources(&self) -> Vec<Arc<ResourceDef>> {
        self.objects().resources()
    }

    fn cached(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Option<Value>> {
        self.objects().cached(def, namespace, name)
    }

    fn cached_list(&self, def: &ResourceDef, namespace: Option<&str>) -> Option<Vec<Value>> {
        self.objects().cached_list(def, namespace)
    }

    async fn get(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        Objects::get(&self.objects(), def, namespace, name).await
    }

    async fn list(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<Value, ApiError> {
        Objects::list(&self.objects(), def, namespace, options).await
    }

    async fn modify(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        part: Part,
        options: &WriteOptions,
        change: &(dyn for<'v> Fn(&'v mut Value) -> Result<bool, ApiError> + Sync),
    ) -> Result<Option<Value>, ApiError> {
        let objects = self.objects();
        let work = Objects::modify(&objects, def, namespace, name, part, options, change);
        self.as_writer("update", Some(options), part, work).await
    }

    async fn delete(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<(), ApiError> {
        let objects = self.objects();
        let work = Objects::delete(&objects, def, namespace, name, options);
        self.as_writer("delete", None, Part::Main, work).await
    }
}
