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
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use plinth_runtime::{Informer, ObjectKey, SplitClient};
/// let env = plinth_testenv::TestEnv::start().await?;
/// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
/// let informer = Informer::spawn(api.clone(), Vec::new());
/// informer.cache().wait_synced().await;
/// let split = SplitClient::new(informer.cache(), api);
/// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("settings".into());
/// split.create(&cm).await?;
/// let cache = informer.cache();
/// plinth_testenv::eventually("the cache has it", || async { cache.get(&key).is_some() }).await;
/// // A read is the cache's shared object: no request.
/// assert_eq!(split.get(&key).unwrap().metadata.name.as_deref(), Some("settings"));
/// # Ok(()) }
/// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, ObjectKey, SplitClient};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// informer.cache().wait_synced().await;
    /// let split = SplitClient::new(informer.cache(), api);
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// split.create(&cm).await?;
    /// let cache = informer.cache();
    /// plinth_testenv::eventually("the cache has it", || async { cache.get(&key).is_some() }).await;
    /// assert_eq!(split.list().len(), cache.list().len());
    /// # Ok(()) }
    /// ```
    pub fn new(cache: Cache<K>, api: Api<K>) -> Self {
        Self { cache, api }
    }

    /// The object from the cache.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, ObjectKey, SplitClient};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// informer.cache().wait_synced().await;
    /// let split = SplitClient::new(informer.cache(), api);
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// split.create(&cm).await?;
    /// let cache = informer.cache();
    /// plinth_testenv::eventually("the cache has it", || async { cache.get(&key).is_some() }).await;
    /// let missing = ObjectKey { namespace: Some("default".into()), name: "nope".into() };
    /// assert!(split.get(&missing).is_none());
    /// assert!(split.get(&key).is_some());
    /// # Ok(()) }
    /// ```
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.cache.get(key)
    }

    /// Every cached object.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, ObjectKey, SplitClient};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// informer.cache().wait_synced().await;
    /// let split = SplitClient::new(informer.cache(), api);
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// split.create(&cm).await?;
    /// let cache = informer.cache();
    /// plinth_testenv::eventually("the cache has it", || async { cache.get(&key).is_some() }).await;
    /// assert!(split.list().iter().any(|cm| cm.metadata.name.as_deref() == Some("settings")));
    /// # Ok(()) }
    /// ```
    pub fn list(&self) -> Vec<Arc<K>> {
        self.cache.list()
    }

    /// Cached objects by index (`namespace`, `owner`, or a custom one).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, ObjectKey, SplitClient};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// informer.cache().wait_synced().await;
    /// let split = SplitClient::new(informer.cache(), api);
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// split.create(&cm).await?;
    /// let cache = informer.cache();
    /// plinth_testenv::eventually("the cache has it", || async { cache.get(&key).is_some() }).await;
    /// // Every informer indexes by namespace.
    /// assert!(!split.by_index("namespace", "default").is_empty());
    /// assert!(split.by_index("namespace", "elsewhere").is_empty());
    /// # Ok(()) }
    /// ```
    pub fn by_index(&self, index: &str, value: &str) -> Vec<Arc<K>> {
        self.cache.by_index(index, value)
    }

    /// Creates `object` on the server.
    ///
    /// # Errors
    /// The server's answer.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, ObjectKey, SplitClient};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// informer.cache().wait_synced().await;
    /// let split = SplitClient::new(informer.cache(), api);
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// split.create(&cm).await?;
    /// let cache = informer.cache();
    /// plinth_testenv::eventually("the cache has it", || async { cache.get(&key).is_some() }).await;
    /// // A second create of the same name: the server's 409.
    /// assert!(matches!(split.create(&cm).await, Err(kube::Error::Api(s)) if s.code == 409));
    /// # Ok(()) }
    /// ```
    pub async fn create(&self, object: &K) -> Result<K, kube::Error> {
        self.api.create(&PostParams::default(), object).await
    }

    /// Replaces `object` on the server (optimistic concurrency through its resourceVersion).
    ///
    /// # Errors
    /// The server's answer (409 on a stale resourceVersion).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, ObjectKey, SplitClient};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// informer.cache().wait_synced().await;
    /// let split = SplitClient::new(informer.cache(), api);
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// split.create(&cm).await?;
    /// let cache = informer.cache();
    /// plinth_testenv::eventually("the cache has it", || async { cache.get(&key).is_some() }).await;
    /// let mut current = (*split.get(&key).unwrap()).clone();
    /// current.data = Some([("mode".to_owned(), "fast".to_owned())].into());
    /// let replaced = split.replace("settings", &current).await?;
    /// // The cached copy was stale once the write landed: replacing it again is a conflict.
    /// assert!(matches!(split.replace("settings", &current).await, Err(kube::Error::Api(s)) if s.code == 409));
    /// assert_eq!(replaced.data.unwrap()["mode"], "fast");
    /// # Ok(()) }
    /// ```
    pub async fn replace(&self, name: &str, object: &K) -> Result<K, kube::Error> {
        self.api.replace(name, &PostParams::default(), object).await
    }

    /// Patches object `name`.
    ///
    /// # Errors
    /// The server's answer.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, ObjectKey, SplitClient};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// informer.cache().wait_synced().await;
    /// let split = SplitClient::new(informer.cache(), api);
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// split.create(&cm).await?;
    /// let cache = informer.cache();
    /// plinth_testenv::eventually("the cache has it", || async { cache.get(&key).is_some() }).await;
    /// let patch = kube::api::Patch::Merge(serde_json::json!({"data": {"mode": "slow"}}));
    /// let patched = split.patch("settings", &patch).await?;
    /// assert_eq!(patched.data.unwrap()["mode"], "slow");
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, ObjectKey, SplitClient};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// informer.cache().wait_synced().await;
    /// let split = SplitClient::new(informer.cache(), api);
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// split.create(&cm).await?;
    /// let cache = informer.cache();
    /// plinth_testenv::eventually("the cache has it", || async { cache.get(&key).is_some() }).await;
    /// let intent = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
    ///     "metadata": {"name": "settings"}, "data": {"owner": "my-operator"}});
    /// let applied = split.apply("settings", "my-operator", &intent).await?;
    /// assert_eq!(applied.data.unwrap()["owner"], "my-operator");
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(split: plinth_runtime::SplitClient<k8s_openapi::api::apps::v1::Deployment>) -> Result<(), kube::Error> {
    /// // The status of one's own custom resource, say; a Deployment's here.
    /// let status = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
    ///     "metadata": {"name": "web"}, "status": {"observedGeneration": 2}});
    /// split.apply_status("web", "my-operator", &status).await?;
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(split: plinth_runtime::SplitClient<k8s_openapi::api::apps::v1::Deployment>) -> Result<(), kube::Error> {
    /// let patch = kube::api::Patch::Merge(serde_json::json!({"status": {"observedGeneration": 2}}));
    /// split.patch_status("web", &patch).await?;
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, ObjectKey, SplitClient};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// informer.cache().wait_synced().await;
    /// let split = SplitClient::new(informer.cache(), api);
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// split.create(&cm).await?;
    /// let cache = informer.cache();
    /// plinth_testenv::eventually("the cache has it", || async { cache.get(&key).is_some() }).await;
    /// split.delete("settings").await?;
    /// plinth_testenv::eventually("the cache lets it go", || async { cache.get(&key).is_none() }).await;
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let writer = plinth_runtime::ObjectClient::new(env.client());
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.namespace = Some("default".into());
    /// let cm = writer.create(&cm).await?;
    /// // One writer for every type; the namespace comes from each object.
    /// assert_eq!(cm.metadata.namespace.as_deref(), Some("default"));
    /// # Ok(()) }
    /// ```
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    /// Creates `object` in its namespace.
    ///
    /// # Errors
    /// The server's answer.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let writer = plinth_runtime::ObjectClient::new(env.client());
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.namespace = Some("default".into());
    /// let cm = writer.create(&cm).await?;
    /// assert!(cm.metadata.uid.is_some());
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let writer = plinth_runtime::ObjectClient::new(env.client());
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.namespace = Some("default".into());
    /// let cm = writer.create(&cm).await?;
    /// let mut changed = cm.clone();
    /// changed.data = Some([("mode".to_owned(), "fast".to_owned())].into());
    /// writer.replace(&changed).await?;
    /// // `cm` still carries the old resourceVersion: refused.
    /// assert!(matches!(writer.replace(&cm).await, Err(kube::Error::Api(s)) if s.code == 409));
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let writer = plinth_runtime::ObjectClient::new(env.client());
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.namespace = Some("default".into());
    /// let cm = writer.create(&cm).await?;
    /// let patch = kube::api::Patch::Merge(serde_json::json!({"data": {"mode": "slow"}}));
    /// let patched = writer.patch(&cm, &patch).await?;
    /// assert_eq!(patched.data.unwrap()["mode"], "slow");
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let writer = plinth_runtime::ObjectClient::new(env.client());
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.namespace = Some("default".into());
    /// let cm = writer.create(&cm).await?;
    /// let mut intent = ConfigMap::default();
    /// intent.metadata.name = Some("settings".into());
    /// intent.metadata.namespace = Some("default".into());
    /// intent.data = Some([("a".to_owned(), "1".to_owned())].into());
    /// writer.apply(&intent, "my-operator").await?;
    /// // The whole intent each time: `a` left out is removed.
    /// intent.data = Some([("b".to_owned(), "2".to_owned())].into());
    /// let applied = writer.apply(&intent, "my-operator").await?;
    /// assert_eq!(applied.data.unwrap().keys().collect::<Vec<_>>(), ["b"]);
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::apps::v1::Deployment;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let writer = plinth_runtime::ObjectClient::new(env.client());
    /// let deployment: Deployment = serde_json::from_value(serde_json::json!({
    ///     "metadata": {"name": "web", "namespace": "default"},
    ///     "spec": {"selector": {"matchLabels": {"app": "web"}},
    ///              "template": {"metadata": {"labels": {"app": "web"}},
    ///                           "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}
    /// }))?;
    /// let mut deployment = writer.create(&deployment).await?;
    /// deployment.status = Some(Default::default());
    /// deployment.status.as_mut().unwrap().observed_generation = Some(7);
    /// let written = writer.apply_status(&deployment, "my-operator").await?;
    /// assert_eq!(written.status.unwrap().observed_generation, Some(7));
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(writer: plinth_runtime::ObjectClient, deployment: k8s_openapi::api::apps::v1::Deployment) -> Result<(), kube::Error> {
    /// let patch = kube::api::Patch::Merge(serde_json::json!({"status": {"observedGeneration": 3}}));
    /// writer.patch_status(&deployment, &patch).await?;
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::apps::v1::Deployment;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let writer = plinth_runtime::ObjectClient::new(env.client());
    /// let deployment: Deployment = serde_json::from_value(serde_json::json!({
    ///     "metadata": {"name": "web", "namespace": "default"},
    ///     "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
    ///              "template": {"metadata": {"labels": {"app": "web"}},
    ///                           "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}
    /// }))?;
    /// let deployment = writer.create(&deployment).await?;
    /// let scale = writer.scale(&deployment, 3).await?;
    /// assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let writer = plinth_runtime::ObjectClient::new(env.client());
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.namespace = Some("default".into());
    /// let cm = writer.create(&cm).await?;
    /// writer.delete(&cm).await?;
    /// // A namesake created since is another object (another UID): left alone.
    /// let mut namesake = ConfigMap::default();
    /// namesake.metadata.name = Some("settings".into());
    /// namesake.metadata.namespace = Some("default".into());
    /// writer.create(&namesake).await?;
    /// assert!(matches!(writer.delete(&cm).await, Err(kube::Error::Api(s)) if s.code == 409));
    /// # Ok(()) }
    /// ```
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
