//! The split client: reads come from an informer's cache (shared objects, no request), writes
//! go to the API server.

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
