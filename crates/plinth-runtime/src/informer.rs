//! Informers: one list+watch per resource type (watch-list when the server offers it, list and
//! watch otherwise; resumed from the last resourceVersion, relisted after a 410 — the `kube`
//! crate's watcher does the protocol), feeding a local cache of shared immutable objects with
//! indexes, and telling subscribers what changed.
//!
//! ```no_run
//! # async fn example(client: kube::Client) {
//! use k8s_openapi::api::core::v1::Pod;
//! use plinth_runtime::{Informer, InformerOptions};
//! let options = InformerOptions::default()
//!     .labels("app=web")
//!     .strip_managed_fields()
//!     .index("node", |pod: &Pod| {
//!         pod.spec.as_ref().and_then(|s| s.node_name.clone()).into_iter().collect()
//!     });
//! let informer = Informer::spawn_with(kube::Api::<Pod>::all(client), options);
//! let cache = informer.cache();
//! cache.wait_synced().await;
//! println!("{} web pods on node-1", cache.by_index("node", "node-1").len());
//! # }
//! ```
//!
//! A metadata-only informer is an informer of `PartialObjectMeta<K>`: its `Api` asks the server
//! for `meta.k8s.io/v1` `PartialObjectMetadata`, so the cache holds names, labels, owners and
//! finalizers but not the objects' bodies.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, PoisonError, RwLock};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};

/// An object's namespace and name.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
/// let env = plinth_testenv::TestEnv::start().await?;
/// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("settings".into());
/// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
/// api.create(&Default::default(), &cm).await?;
/// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
/// # plinth_testenv::eventually("kube-root-ca.crt", || async {
/// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
/// # }).await;
/// let informer = Informer::spawn(api.clone(), Vec::new());
/// let cache = informer.cache();
/// cache.wait_synced().await;
/// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
/// let cached = cache.get(&key).expect("listed");
/// assert_eq!(ObjectKey::of(&*cached), key);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The namespace (none for cluster-scoped objects).
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl ObjectKey {
    /// The key of `object`.
    ///
    /// # Example
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::Namespace;
    /// let mut namespace = Namespace::default();
    /// namespace.metadata.name = Some("team-a".into());
    /// let key = plinth_runtime::ObjectKey::of(&namespace);
    /// assert_eq!((key.namespace, key.name.as_str()), (None, "team-a"));
    /// ```
    pub fn of<K: Resource>(object: &K) -> Self {
        Self {
            namespace: object.meta().namespace.clone(),
            name: object.meta().name.clone().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A function giving the index values of an object.
///
/// # Example
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// // Pods by the node they run on (client-go's `spec.nodeName` index).
/// let by_node: plinth_runtime::informer::IndexFn<Pod> = std::sync::Arc::new(|pod: &Pod| {
///     pod.spec.as_ref().and_then(|s| s.node_name.clone()).into_iter().collect()
/// });
/// assert!(by_node(&Pod::default()).is_empty());
/// ```
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// A change seen by an informer: `old` → `new` (`new` is `None` for a deletion).
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
/// let env = plinth_testenv::TestEnv::start().await?;
/// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("settings".into());
/// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
/// api.create(&Default::default(), &cm).await?;
/// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
/// # plinth_testenv::eventually("kube-root-ca.crt", || async {
/// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
/// # }).await;
/// let informer = Informer::spawn(api.clone(), Vec::new());
/// let cache = informer.cache();
/// cache.wait_synced().await;
/// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
/// let mut changes = informer.subscribe();
/// api.delete("settings", &Default::default()).await?;
/// // (Changes may also replay the objects listed at the start: skip to ours.)
/// let change = loop {
///     let change = changes.recv().await?;
///     if change.new.is_none() { break change; }
/// };
/// // A deletion: the object before, nothing after.
/// assert!(change.old.is_some() && change.new.is_none());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Change<K> {
    /// The object before.
    pub old: Option<Arc<K>>,
    /// The object after.
    pub new: Option<Arc<K>>,
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        Self {
            old: self.old.clone(),
            new: self.new.clone(),
        }
    }
}

struct CacheState<K> {
    objects: HashMap<ObjectKey, Arc<K>>,
    indexers: Vec<(String, IndexFn<K>)>,
    indexes: HashMap<String, HashMap<String, HashSet<ObjectKey>>>,
}

impl<K> CacheState<K> {
    fn unindex(&mut self, key: &ObjectKey, object: &K) {
        for (name, index) in &self.indexers {
            for value in index(object) {
                if let Some(keys) = self.indexes.get_mut(name).and_then(|i| i.get_mut(&value)) {
                    keys.remove(key);
                }
            }
        }
    }

    fn put(&mut self, key: ObjectKey, object: Arc<K>) -> Option<Arc<K>> {
        let old = self.objects.insert(key.clone(), object.clone());
        if let Some(old) = &old {
            self.unindex(&key, old);
        }
        for (name, index) in &self.indexers {
            for value in index(&object) {
                self.indexes
                    .entry(name.clone())
                    .or_default()
                    .entry(value)
                    .or_default()
                    .insert(key.clone());
            }
        }
        old
    }

    fn remove(&mut self, key: &ObjectKey) -> Option<Arc<K>> {
        let old = self.objects.remove(key)?;
        self.unindex(key, &old);
        Some(old)
    }
}

/// The local cache an informer keeps; clones share it. Reads return shared objects, never
/// copies.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
/// let env = plinth_testenv::TestEnv::start().await?;
/// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("settings".into());
/// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
/// api.create(&Default::default(), &cm).await?;
/// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
/// # plinth_testenv::eventually("kube-root-ca.crt", || async {
/// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
/// # }).await;
/// let informer = Informer::spawn(api.clone(), Vec::new());
/// let cache = informer.cache();
/// cache.wait_synced().await;
/// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
/// let shared = cache.clone();
/// assert!(std::sync::Arc::ptr_eq(&shared.get(&key).unwrap(), &cache.get(&key).unwrap()));
/// # Ok(()) }
/// ```
pub struct Cache<K> {
    state: Arc<RwLock<CacheState<K>>>,
    synced: watch::Receiver<bool>,
}

impl<K> Clone for Cache<K> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
            synced: self.synced.clone(),
        }
    }
}

impl<K> Debug for Cache<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").finish_non_exhaustive()
    }
}

impl<K> Cache<K> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, CacheState<K>> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The object with this key.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// let cache = informer.cache();
    /// cache.wait_synced().await;
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// let cached = cache.get(&key).expect("listed");
    /// assert_eq!(cached.metadata.labels.as_ref().unwrap()["app"], "web");
    /// # Ok(()) }
    /// ```
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.read().objects.get(key).cloned()
    }

    /// Every object.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// let cache = informer.cache();
    /// cache.wait_synced().await;
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// // (The namespace's own `kube-root-ca.crt` may be there too.)
    /// assert!(cache.list().iter().any(|cm| cm.metadata.name.as_deref() == Some("settings")));
    /// # Ok(()) }
    /// ```
    pub fn list(&self) -> Vec<Arc<K>> {
        self.read().objects.values().cloned().collect()
    }

    /// The objects whose index `index` has `value` (`namespace` and `owner` — a controller
    /// owner's uid — always exist).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// let cache = informer.cache();
    /// cache.wait_synced().await;
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// assert!(!cache.by_index("namespace", "default").is_empty());
    /// // Nothing here has a controller owner of that uid.
    /// assert!(cache.by_index("owner", "0b6c4e4e-0000-4000-8000-000000000000").is_empty());
    /// # Ok(()) }
    /// ```
    pub fn by_index(&self, index: &str, value: &str) -> Vec<Arc<K>> {
        let state = self.read();
        state
            .indexes
            .get(index)
            .and_then(|i| i.get(value))
            .into_iter()
            .flatten()
            .filter_map(|key| state.objects.get(key).cloned())
            .collect()
    }

    /// How many objects the cache holds.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// let cache = informer.cache();
    /// cache.wait_synced().await;
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// assert_eq!(cache.len(), cache.list().len());
    /// assert!(cache.len() >= 1);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// Whether the cache holds nothing.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// let cache = informer.cache();
    /// cache.wait_synced().await;
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// assert!(!cache.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds the index `name` over the objects cached now and those to come; `false` (nothing
    /// changed) if the cache has an index of that name already.
    pub(crate) fn add_indexer(&self, name: &str, index: IndexFn<K>) -> bool {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if state.indexers.iter().any(|(n, _)| n == name) {
            return false;
        }
        let mut built: HashMap<String, HashSet<ObjectKey>> = HashMap::new();
        for (key, object) in &state.objects {
            for value in index(object) {
                built.entry(value).or_default().insert(key.clone());
            }
        }
        state.indexes.insert(name.to_owned(), built);
        state.indexers.push((name.to_owned(), index));
        true
    }

    /// Whether the first full list has been read (client-go's `HasSynced`).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// let cache = informer.cache();
    /// cache.wait_synced().await;
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// assert!(cache.is_synced());
    /// # Ok(()) }
    /// ```
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until the first full list has been read.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// informer.cache().wait_synced().await;
    /// // After the first full list: what existed before is there.
    /// assert!(informer.cache().list().iter().any(|cm| cm.metadata.name.as_deref() == Some("settings")));
    /// # Ok(()) }
    /// ```
    pub async fn wait_synced(&self) {
        let mut synced = self.synced.clone();
        let _ = synced.wait_for(|s| *s).await;
    }
}

/// The uid of `object`'s controller owner, if any.
///
/// # Example
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
/// let mut cm = ConfigMap::default();
/// assert_eq!(plinth_runtime::informer::controller_uid(&cm), None);
/// cm.metadata.owner_references = Some(vec![OwnerReference {
///     api_version: "example.com/v1".into(), kind: "Tenant".into(), name: "acme".into(),
///     uid: "6d9f1c1e-0000-4000-8000-000000000001".into(), controller: Some(true),
///     ..Default::default()
/// }]);
/// assert_eq!(
///     plinth_runtime::informer::controller_uid(&cm).as_deref(),
///     Some("6d9f1c1e-0000-4000-8000-000000000001")
/// );
/// ```
pub fn controller_uid<K: Resource>(object: &K) -> Option<String> {
    object
        .meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

/// A function applied to every object before it is cached (controller-runtime's transform):
/// strip what the controller never reads, to keep the cache small.
///
/// # Example
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// // Keep the cache small: the controller never reads the data.
/// let drop_data: plinth_runtime::informer::TransformFn<ConfigMap> =
///     std::sync::Arc::new(|cm: &mut ConfigMap| cm.data = None);
/// let mut cm = ConfigMap { data: Some(Default::default()), ..Default::default() };
/// drop_data(&mut cm);
/// assert!(cm.data.is_none());
/// ```
pub type TransformFn<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// How an informer watches and what it keeps.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
/// let env = plinth_testenv::TestEnv::start().await?;
/// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("settings".into());
/// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
/// api.create(&Default::default(), &cm).await?;
/// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
/// # plinth_testenv::eventually("kube-root-ca.crt", || async {
/// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
/// # }).await;
/// let options = InformerOptions::default().labels("app=web").strip_managed_fields();
/// let informer = Informer::spawn_with(api.clone(), options);
/// informer.cache().wait_synced().await;
/// let names: Vec<_> = informer.cache().list().iter().map(|cm| cm.metadata.name.clone()).collect();
/// assert_eq!(names, [Some("settings".to_owned())]);
/// # Ok(()) }
/// ```
pub struct InformerOptions<K> {
    /// Only objects with these labels (`labelSelector`).
    pub label_selector: Option<String>,
    /// Only objects with these fields (`fieldSelector`).
    pub field_selector: Option<String>,
    /// Indexes beyond `namespace` and `owner`.
    pub indexers: Vec<(String, IndexFn<K>)>,
    /// Applied to every object before it is cached.
    pub transform: Option<TransformFn<K>>,
}

impl<K> Default for InformerOptions<K> {
    fn default() -> Self {
        Self {
            label_selector: None,
            field_selector: None,
            indexers: Vec::new(),
            transform: None,
        }
    }
}

impl<K> Debug for InformerOptions<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerOptions")
            .field("label_selector", &self.label_selector)
            .field("field_selector", &self.field_selector)
            .finish_non_exhaustive()
    }
}

impl<K: Resource + 'static> InformerOptions<K> {
    /// Watches only objects matching the label selector `selector`.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let informer = Informer::spawn_with(api.clone(), InformerOptions::default().labels("app=db"));
    /// informer.cache().wait_synced().await;
    /// assert!(informer.cache().is_empty());
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_owned());
        self
    }

    /// Watches only objects matching the field selector `selector`.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let options = InformerOptions::default().fields("metadata.name=settings");
    /// let informer = Informer::spawn_with(api.clone(), options);
    /// informer.cache().wait_synced().await;
    /// assert_eq!(informer.cache().len(), 1);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_owned());
        self
    }

    /// Adds the index `name`.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let options = InformerOptions::default().index("app", |cm: &ConfigMap| {
    ///     cm.metadata.labels.iter().flatten().filter(|(k, _)| *k == "app").map(|(_, v)| v.clone()).collect()
    /// });
    /// let informer = Informer::spawn_with(api.clone(), options);
    /// informer.cache().wait_synced().await;
    /// assert_eq!(informer.cache().by_index("app", "web").len(), 1);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn index(
        mut self,
        name: &str,
        index: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.indexers.push((name.to_owned(), Arc::new(index)));
        self
    }

    /// Applies `transform` to every object before it is cached (after the previous one).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let options = InformerOptions::default().transform(|cm: &mut ConfigMap| cm.metadata.labels = None);
    /// let informer = Informer::spawn_with(api.clone(), options);
    /// informer.cache().wait_synced().await;
    /// assert!(informer.cache().list().iter().all(|cm| cm.metadata.labels.is_none()));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn transform(mut self, transform: impl Fn(&mut K) + Send + Sync + 'static) -> Self {
        let previous = self.transform.take();
        self.transform = Some(Arc::new(move |object: &mut K| {
            if let Some(previous) = &previous {
                previous(object);
            }
            transform(object);
        }));
        self
    }

    /// Drops `metadata.managedFields` from cached objects (controllers rarely read them; they
    /// are often the larger part of an object).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let informer = Informer::spawn_with(api.clone(), InformerOptions::default().strip_managed_fields());
    /// informer.cache().wait_synced().await;
    /// assert!(informer.cache().list().iter().all(|cm| cm.metadata.managed_fields.is_none()));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn strip_managed_fields(self) -> Self {
        self.transform(|object: &mut K| object.meta_mut().managed_fields = None)
    }
}

/// One resource type's informer: its cache, and a feed of changes.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
/// let env = plinth_testenv::TestEnv::start().await?;
/// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("settings".into());
/// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
/// api.create(&Default::default(), &cm).await?;
/// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
/// # plinth_testenv::eventually("kube-root-ca.crt", || async {
/// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
/// # }).await;
/// let informer = Informer::spawn(api.clone(), Vec::new());
/// let cache = informer.cache();
/// cache.wait_synced().await;
/// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
/// let mut changes = informer.subscribe();
/// api.patch("settings", &Default::default(),
///     &kube::api::Patch::Merge(serde_json::json!({"data": {"k": "v"}}))).await?;
/// // (Changes may also replay the objects listed at the start: skip to ours.)
/// let change = loop {
///     let change = changes.recv().await?;
///     let ours = |cm: &ConfigMap| cm.metadata.name.as_deref() == Some("settings") && cm.data.is_some();
///     if change.new.as_deref().is_some_and(ours) { break change; }
/// };
/// assert_eq!(change.new.unwrap().data.as_ref().unwrap()["k"], "v");
/// # Ok(()) }
/// ```
pub struct Informer<K> {
    cache: Cache<K>,
    changes: broadcast::Sender<Change<K>>,
}

impl<K> Debug for Informer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer").finish_non_exhaustive()
    }
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Starts watching `api` with the default indexes plus `indexers`.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let by_app: plinth_runtime::informer::IndexFn<ConfigMap> = std::sync::Arc::new(|cm: &ConfigMap| {
    ///     cm.metadata.labels.iter().flatten().filter(|(k, _)| *k == "app").map(|(_, v)| v.clone()).collect()
    /// });
    /// let informer = Informer::spawn(api.clone(), vec![("app".to_owned(), by_app)]);
    /// informer.cache().wait_synced().await;
    /// assert_eq!(informer.cache().by_index("app", "web").len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn spawn(api: Api<K>, indexers: Vec<(String, IndexFn<K>)>) -> Self {
        Self::spawn_with(
            api,
            InformerOptions {
                indexers,
                ..InformerOptions::default()
            },
        )
    }

    /// Starts watching `api` as `options` say (selectors, indexes, a transform).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let informer = Informer::spawn_with(api.clone(), InformerOptions::default());
    /// informer.cache().wait_synced().await;
    /// assert!(informer.cache().len() >= 1);
    /// # Ok(()) }
    /// ```
    pub fn spawn_with(api: Api<K>, options: InformerOptions<K>) -> Self {
        let InformerOptions {
            label_selector,
            field_selector,
            indexers,
            transform,
        } = options;
        let mut all: Vec<(String, IndexFn<K>)> = vec![
            (
                "namespace".into(),
                Arc::new(|o: &K| o.meta().namespace.clone().into_iter().collect()),
            ),
            (
                "owner".into(),
                Arc::new(|o: &K| controller_uid(o).into_iter().collect()),
            ),
        ];
        all.extend(indexers);
        let (synced_tx, synced) = watch::channel(false);
        let cache = Cache {
            state: Arc::new(RwLock::new(CacheState {
                objects: HashMap::new(),
                indexers: all,
                indexes: HashMap::new(),
            })),
            synced,
        };
        let (changes, _) = broadcast::channel(4096);
        let selectors = Selectors {
            labels: label_selector,
            fields: field_selector,
            transform,
        };
        tokio::spawn(run(
            api,
            selectors,
            cache.clone(),
            changes.clone(),
            synced_tx,
        ));
        Self { cache, changes }
    }

    /// The cache.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// let cache = informer.cache();
    /// cache.wait_synced().await;
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// assert!(informer.cache().get(&key).is_some());
    /// # Ok(()) }
    /// ```
    pub fn cache(&self) -> Cache<K> {
        self.cache.clone()
    }

    /// Changes from now on.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::{Informer, InformerOptions, ObjectKey};
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let api = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    /// api.create(&Default::default(), &cm).await?;
    /// # // The root CA publisher's ConfigMap lands first, so that changes below are ours.
    /// # plinth_testenv::eventually("kube-root-ca.crt", || async {
    /// #     api.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
    /// # }).await;
    /// let informer = Informer::spawn(api.clone(), Vec::new());
    /// let cache = informer.cache();
    /// cache.wait_synced().await;
    /// let key = ObjectKey { namespace: Some("default".into()), name: "settings".into() };
    /// let mut changes = informer.subscribe();
    /// let mut another = ConfigMap::default();
    /// another.metadata.name = Some("another".into());
    /// api.create(&Default::default(), &another).await?;
    /// // (Changes may also replay the objects listed at the start: skip to ours.)
    /// let change = loop {
    ///     let change = changes.recv().await?;
    ///     if change.new.as_ref().is_some_and(|cm| cm.metadata.name.as_deref() == Some("another")) {
    ///         break change;
    ///     }
    /// };
    /// // A creation: nothing before.
    /// assert!(change.old.is_none());
    /// assert_eq!(change.new.unwrap().metadata.name.as_deref(), Some("another"));
    /// # Ok(()) }
    /// ```
    pub fn subscribe(&self) -> broadcast::Receiver<Change<K>> {
        self.changes.subscribe()
    }
}

/// What an informer's watch selects, and how objects are transformed.
struct Selectors<K> {
    labels: Option<String>,
    fields: Option<String>,
    transform: Option<TransformFn<K>>,
}

impl<K> Selectors<K> {
    fn config(&self, streaming: bool) -> watcher::Config {
        let mut config = watcher::Config::default();
        if streaming {
            config = config.streaming_lists();
        }
        if let Some(labels) = &self.labels {
            config = config.labels(labels);
        }
        if let Some(fields) = &self.fields {
            config = config.fields(fields);
        }
        config
    }

    fn apply(&self, mut object: K) -> K {
        if let Some(transform) = &self.transform {
            transform(&mut object);
        }
        object
    }
}

async fn run<K>(
    api: Api<K>,
    selectors: Selectors<K>,
    cache: Cache<K>,
    changes: broadcast::Sender<Change<K>>,
    synced: watch::Sender<bool>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    // Watch-list first (one request, consistent, from the watch cache); servers that refuse it
    // get list-then-watch.
    let mut streaming = true;
    loop {
        let config = selectors.config(streaming);
        let mut events = watcher::watcher(api.clone(), config).boxed();
        let mut listing: Option<HashMap<ObjectKey, Arc<K>>> = None;
        let mut ever_synced = false;
        let mut failures = 0u32;
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => {
                    failures = 0;
                    event
                }
                Err(e) => {
                    failures += 1;
                    if streaming && !ever_synced && failures >= 3 {
                        // The server does not do watch-list: fall back.
                        streaming = false;
                        break;
                    }
                    let delay = watch_backoff(failures);
                    tracing::warn!(
                        resource = api.resource_url(),
                        error = %e,
                        failures,
                        retry_in = ?delay,
                        "watch failed"
                    );
                    tokio::time::sleep(delay).await;
                    continue;
                }
            };
            match event {
                watcher::Event::Init => listing = Some(HashMap::new()),
                watcher::Event::InitApply(object) => {
                    if let Some(listing) = &mut listing {
                        let object = selectors.apply(object);
                        listing.insert(ObjectKey::of(&object), Arc::new(object));
                    }
                }
                watcher::Event::InitDone => {
                    let listed = listing.take().unwrap_or_default();
                    let mut sent = Vec::new();
                    {
                        let mut state = cache.state.write().unwrap_or_else(PoisonError::into_inner);
                        let gone: Vec<ObjectKey> = state
                            .objects
                            .keys()
                            .filter(|k| !listed.contains_key(*k))
                            .cloned()
                            .collect();
                        for key in gone {
                            let old = state.remove(&key);
                            sent.push(Change { old, new: None });
                        }
                        for (key, object) in listed {
                            let unchanged = state
                                .objects
                                .get(&key)
                                .is_some_and(|o| o.resource_version() == object.resource_version());
                            if unchanged {
                                continue;
                            }
                            let old = state.put(key, object.clone());
                            sent.push(Change {
                                old,
                                new: Some(object),
                            });
                        }
                    }
                    ever_synced = true;
                    synced.send_replace(true);
                    for change in sent {
                        let _ = changes.send(change);
                    }
                }
                watcher::Event::Apply(object) => {
                    let object = Arc::new(selectors.apply(object));
                    let old = cache
                        .state
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .put(ObjectKey::of(&*object), object.clone());
                    let _ = changes.send(Change {
                        old,
                        new: Some(object),
                    });
                }
                watcher::Event::Delete(object) => {
                    let object = selectors.apply(object);
                    let old = cache
                        .state
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&ObjectKey::of(&object));
                    let _ = changes.send(Change {
                        old: old.or_else(|| Some(Arc::new(object))),
                        new: None,
                    });
                }
            }
        }
    }
}

/// How long to wait after the `failures`-th consecutive watch error: 200 ms doubling to 30 s
/// (a missing resource or a refused list is retried, not hammered).
fn watch_backoff(failures: u32) -> std::time::Duration {
    let doubled = 200u64.saturating_mul(1u64 << failures.saturating_sub(1).min(20));
    std::time::Duration::from_millis(doubled.min(30_000))
}

#[cfg(test)]
mod tests {
    use super::watch_backoff;
    use std::time::Duration;

    #[test]
    fn watch_errors_back_off_exponentially_to_thirty_seconds() {
        let delays: Vec<Duration> = (1..=10).map(watch_backoff).collect();
        assert_eq!(delays[0], Duration::from_millis(200));
        assert_eq!(delays[1], Duration::from_millis(400));
        assert_eq!(delays[4], Duration::from_millis(3200));
        assert_eq!(delays[9], Duration::from_secs(30));
        assert_eq!(watch_backoff(u32::MAX), Duration::from_secs(30));
    }
}
