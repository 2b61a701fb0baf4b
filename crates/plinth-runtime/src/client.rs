//! The split client: reads come from an informer's cache (shared objects, no request), writes
//! go to the API server.
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), kube::Error> {
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use plinth_runtime::{Informer, ObjectKey, SplitClient};
//! let api = kube::Api::<ConfigMap>::namespaced(client, "default");
//! let informer = Informer::spawn(api.clone(), Vec::new());
//! informer.cache().wait_synced().await;
//! let split = SplitClient::new(informer.cache(), api);
//! let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
//! if split.get(&key).is_none() {
//!     let mut cm = ConfigMap::default();
//!     cm.metadata.name = Some("settings".into());
//!     split.create(&cm).await?; // a write: to the server
//! }
//! # Ok(()) }
//! ```

use std::fmt::Debug;
use std::sync::Arc;

use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::informer::{Cache, ObjectKey};

/// Reads from `cache`, writes through `api`.
pub struct SplitClient<K> {
    cache: Cache<K>,
    api: Api<K>,
}

impl<K: Clone> Clone for SplitClient<K> {
    fn clone(&self) -> Self {
        Self {
            cache: self.cache.clone(),
            api: self.api.clone(),
        }
    }
}

impl<K> Debug for SplitClient<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SplitClient").finish_non_exhaustive()
    }
}

impl<K> SplitClient<K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    /// A client reading `cache` and writing through `api`.
    pub fn new(cache: Cache<K>, api: Api<K>) -> Self {
        Self { cache, api }
    }

    /// The object from the cache.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.cache.get(key)
    }

    /// Every cached object.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.cache.list()
    }

    /// Cached objects by index (`namespace`, `owner`, or a custom one).
    pub fn by_index(&self, index: &str, value: &str) -> Vec<Arc<K>> {
        self.cache.by_index(index, value)
    }

    /// Creates `object` on the server.
    ///
    /// # Errors
    /// The server's answer.
    pub async fn create(&self, object: &K) -> Result<K, kube::Error> {
        self.api.create(&PostParams::default(), object).await
    }

    /// Replaces `object` on the server (optimistic concurrency through its resourceVersion).
    ///
    /// # Errors
    /// The server's answer (409 on a stale resourceVersion).
    pub async fn replace(&self, name: &str, object: &K) -> Result<K, kube::Error> {
        self.api.replace(name, &PostParams::default(), object).await
    }

    /// Patches object `name`.
    ///
    /// # Errors
    /// The server's answer.
    pub async fn patch<P: Serialize + Debug>(
        &self,
        name: &str,
        patch: &Patch<P>,
    ) -> Result<K, kube::Error> {
        self.api.patch(name, &PatchParams::default(), patch).await
    }

    /// Server-side applies `config` as `manager` (forcing conflicts, as controllers do).
    ///
    /// # Errors
    /// The server's answer.
    pub async fn apply<P: Serialize + Debug>(
        &self,
        name: &str,
        manager: &str,
        config: &P,
    ) -> Result<K, kube::Error> {
        self.api
            .patch(
                name,
                &PatchParams::apply(manager).force(),
                &Patch::Apply(config),
            )
            .await
    }

    /// Server-side applies `config` to the `/status` subresource.
    ///
    /// # Errors
    /// The server's answer.
    pub async fn apply_status<P: Serialize + Debug>(
        &self,
        name: &str,
        manager: &str,
        config: &P,
    ) -> Result<K, kube::Error> {
        self.api
            .patch_status(
                name,
                &PatchParams::apply(manager).force(),
                &Patch::Apply(config),
            )
            .await
    }

    /// Patches the `/status` subresource of `name`.
    ///
    /// # Errors
    /// The server's answer.
    pub async fn patch_status<P: Serialize + Debug>(
        &self,
        name: &str,
        patch: &Patch<P>,
    ) -> Result<K, kube::Error> {
        self.api
            .patch_status(name, &PatchParams::default(), patch)
            .await
    }

    /// Deletes `name` (background propagation).
    ///
    /// # Errors
    /// The server's answer.
    pub async fn delete(&self, name: &str) -> Result<(), kube::Error> {
        self.api
            .delete(name, &DeleteParams::background())
            .await
            .map(drop)
    }
}

/// Writes that take the namespace (and name) from the object itself: one client for every
/// type, namespaced or cluster-scoped, as controller-runtime's `client.Client`.
///
/// ```no_run
/// # async fn example(client: kube::Client) -> Result<(), kube::Error> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// let writer = plinth_runtime::ObjectClient::new(client);
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("settings".into());
/// cm.metadata.namespace = Some("team-a".into());
/// let created = writer.create(&cm).await?; // POST /api/v1/namespaces/team-a/configmaps
/// writer.delete(&created).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ObjectClient {
    client: kube::Client,
}

impl Debug for ObjectClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectClient").finish_non_exhaustive()
    }
}

/// The collection URL and name of `object`.
fn locate<K: Resource>(object: &K) -> (kube::core::Request, String)
where
    K::DynamicType: Default,
{
    let meta = object.meta();
    let url = K::url_path(&K::DynamicType::default(), meta.namespace.as_deref());
    (
        kube::core::Request::new(url),
        meta.name.clone().unwrap_or_default(),
    )
}

fn serialize<T: Serialize>(value: &T) -> Result<Vec<u8>, kube::Error> {
    serde_json::to_vec(value).map_err(kube::Error::SerdeError)
}

impl ObjectClient {
    /// Sends a built request, answering the decoded body.
    async fn send<T: DeserializeOwned>(
        &self,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<T, kube::Error> {
        let request = request.map_err(kube::Error::BuildRequest)?;
        self.client.request(request).await
    }

    /// Writes through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    /// Creates `object` in its namespace.
    ///
    /// # Errors
    /// The server's answer.
    pub async fn create<K>(&self, object: &K) -> Result<K, kube::Error>
    where
        K: Resource + Serialize + DeserializeOwned + Clone + Debug,
        K::DynamicType: Default,
    {
        let (request, _) = locate(object);
        self.send(request.create(&PostParams::default(), serialize(object)?))
            .await
    }

    /// Replaces `object` (optimistic concurrency through its resourceVersion: 409 when stale).
    ///
    /// # Errors
    /// The server's answer.
    pub async fn replace<K>(&self, object: &K) -> Result<K, kube::Error>
    where
        K: Resource + Serialize + DeserializeOwned + Clone + Debug,
        K::DynamicType: Default,
    {
        let (request, name) = locate(object);
        self.send(request.replace(&name, &PostParams::default(), serialize(object)?))
            .await
    }

    /// Patches `object` (located by its namespace and name) with `patch`.
    ///
    /// # Errors
    /// The server's answer.
    pub async fn patch<K, P>(&self, object: &K, patch: &Patch<P>) -> Result<K, kube::Error>
    where
        K: Resource + DeserializeOwned + Clone + Debug,
        K::DynamicType: Default,
        P: Serialize + Debug,
    {
        let (request, name) = locate(object);
        self.send(request.patch(&name, &PatchParams::default(), patch))
            .await
    }

    /// Server-side applies `object` as field manager `manager` (forcing conflicts, as
    /// controllers do). `object` is the whole intent: fields it leaves out that `manager`
    /// set before are removed. Its `managedFields` are dropped (an object read back from the
    /// server may be applied); a `resourceVersion` it carries is a precondition.
    ///
    /// # Errors
    /// The server's answer.
    pub async fn apply<K>(&self, object: &K, manager: &str) -> Result<K, kube::Error>
    where
        K: Resource + Serialize + DeserializeOwned + Clone + Debug,
        K::DynamicType: Default,
    {
        self.apply_part(object, manager, None).await
    }

    /// Server-side applies `object`'s status (only: its name, namespace and `status`) to the
    /// `/status` subresource.
    ///
    /// # Errors
    /// The server's answer.
    pub async fn apply_status<K>(&self, object: &K, manager: &str) -> Result<K, kube::Error>
    where
        K: Resource + Serialize + DeserializeOwned + Clone + Debug,
        K::DynamicType: Default,
    {
        self.apply_part(object, manager, Some("status")).await
    }

    async fn apply_part<K>(
        &self,
        object: &K,
        manager: &str,
        subresource: Option<&str>,
    ) -> Result<K, kube::Error>
    where
        K: Resource + Serialize + DeserializeOwned + Clone + Debug,
        K::DynamicType: Default,
    {
        let (request, name) = locate(object);
        // An applied configuration names its type; a typed object may leave both unset.
        let mut config = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
        if let Some(map) = config.as_object_mut() {
            let dt = K::DynamicType::default();
            map.entry("apiVersion")
                .or_insert_with(|| K::api_version(&dt).into_owned().into());
            map.entry("kind")
                .or_insert_with(|| K::kind(&dt).into_owned().into());
            // An object read back from the server carries managedFields, which an applied
            // configuration may not; to /status only the status is applied (claiming the
            // spec there would make this manager an owner of fields it never sets).
            if let Some(meta) = map.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                meta.remove("managedFields");
                if subresource.is_some() {
                    meta.retain(|k, _| k == "name" || k == "namespace");
                }
            }
            if let Some(sub) = subresource {
                map.retain(|k, _| k == "apiVersion" || k == "kind" || k == "metadata" || k == sub);
            }
        }
        let params = PatchParams::apply(manager).force();
        let patch = Patch::Apply(config);
        self.send(match subresource {
            None => request.patch(&name, &params, &patch),
            Some(sub) => request.patch_subresource(sub, &name, &params, &patch),
        })
        .await
    }

    /// Patches the `/status` subresource of `object`.
    ///
    /// # Errors
    /// The server's answer.
    pub async fn patch_status<K, P>(&self, object: &K, patch: &Patch<P>) -> Result<K, kube::Error>
    where
        K: Resource + DeserializeOwned + Clone + Debug,
        K::DynamicType: Default,
        P: Serialize + Debug,
    {
        let (request, name) = locate(object);
        self.send(request.patch_subresource("status", &name, &PatchParams::default(), patch))
            .await
    }

    /// Sets `object`'s replicas through its `/scale` subresource; answers the new `Scale`.
    ///
    /// # Errors
    /// The server's answer (404 for a type without `/scale`).
    pub async fn scale<K>(
        &self,
        object: &K,
        replicas: i32,
    ) -> Result<k8s_openapi::api::autoscaling::v1::Scale, kube::Error>
    where
        K: Resource,
        K::DynamicType: Default,
    {
        let (request, name) = locate(object);
        let patch = Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}}));
        self.send(request.patch_subresource("scale", &name, &PatchParams::default(), &patch))
            .await
    }

    /// Deletes `object` (background propagation), only if it is still the object of that
    /// UID (a precondition, so a namesake created since is left alone).
    ///
    /// # Errors
    /// The server's answer (409 if the UID no longer matches).
    pub async fn delete<K>(&self, object: &K) -> Result<(), kube::Error>
    where
        K: Resource,
        K::DynamicType: Default,
    {
        let (request, name) = locate(object);
        let mut params = DeleteParams::background();
        if let Some(uid) = object.meta().uid.clone() {
            params = params.preconditions(kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            });
        }
        let request = request
            .delete(&name, &params)
            .map_err(kube::Error::BuildRequest)?;
        // A delete answers the object (while finalizers hold it) or a Status.
        self.client
            .request_status::<serde_json::Value>(request)
            .await
            .map(drop)
    }
}
