//! The registry as a type's hooks see it ([`Objects`]): reads, guaranteed updates and deletes
//! by resource, with nothing of the registry's own type in their signatures.

use plinth_core::ApiError;
use serde_json::Value;

use super::{DeleteOptions, ListOptions, Part, Registry, WriteOptions};
use crate::resources::{Objects, ResourceDef};

#[async_trait::async_trait]
impl Objects for Registry {
    fn resource(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<std::sync::Arc<ResourceDef>> {
        self.resources.get(group, version, plural)
    }

    fn resources(&self) -> Vec<std::sync::Arc<ResourceDef>> {
        self.resources.all()
    }

    fn cached(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Option<Value>> {
        self.caches
            .get(&def.key_prefix(), &def.selector_fields())
            .object(&def.key(namespace, name))
            .map(|stored| stored.and_then(|s| s.decode()))
    }

    async fn get(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        Registry::get(self, def, namespace, name).await
    }

    async fn list(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<Value, ApiError> {
        Registry::list(self, def, namespace, options).await
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
        Ok(Registry::modify(
            self,
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
        Registry::delete(self, def, namespace, name, options)
            .await
            .map(drop)
    }
}
