//! The generic registry: every verb on every resource, driven by its
//! [`ResourceDef`](crate::resources::ResourceDef) and the type's
//! [`Strategy`](crate::strategy::Strategy), over [`plinth_store::Store`]. The order of steps
//! lives here once — decode, prepare, validate, store — and optimistic concurrency is the
//! store's guaranteed-update loop (deletion included).
//!
//! Rooms: [`options`] (the typed options of each verb), `codec` (to and from storage, continue
//! tokens, storage errors → API errors), `read` (get, list), `write` (create, update, the
//! guaranteed-update step), `patch`, `apply` (server-side apply and managedFields), `delete`,
//! `watch`, `scale`.

mod apply;
mod codec;
mod delete;
pub mod options;
mod patch;
mod read;
mod scale;
mod watch;
mod write;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use plinth_core::{ApiError, Cause, StatusReason};
use plinth_store::Store;
use serde_json::Value;

pub use codec::{decode_continue, parse_rv, set_type_meta, store_error};
pub use delete::{Deleted, FINALIZER_FOREGROUND, FINALIZER_ORPHAN};
pub use options::{
    DeleteOptions, FieldValidation, ListOptions, Part, Patch, Propagation, ResourceVersionMatch,
    WatchOptions, WriteOptions,
};
pub use scale::ScaleWrite;
pub use watch::{WatchEvent, bookmark, default_watch_timeout};

use crate::resources::ResourceDef;

/// Largest request body accepted (kube-apiserver's limit is 3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// The server's view of the clock, in Unix seconds.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The outcome of a write: the object and the warnings to send back.
#[derive(Debug)]
pub struct Written {
    /// The object as stored (or as it would be, for a dry run).
    pub object: Value,
    /// `Warning` headers.
    pub warnings: Vec<String>,
    /// Whether it was created (201) rather than updated (200).
    pub created: bool,
}

/// The registry.
#[derive(Clone)]
pub struct Registry {
    /// Where objects live.
    pub store: Arc<dyn Store>,
    /// What is served.
    pub resources: Arc<crate::resources::Resources>,
    /// The watch cache.
    pub caches: Arc<crate::cache::Caches>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    /// 404 unless the object at `key` exists.
    async fn require_exists(
        &self,
        def: &ResourceDef,
        key: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        if self.exists(def, key, name).await? {
            Ok(())
        } else {
            Err(ApiError::not_found(&def.group_resource(), name))
        }
    }

    /// Whether the object stored under `key` exists.
    async fn exists(&self, def: &ResourceDef, key: &str, name: &str) -> Result<bool, ApiError> {
        Ok(self
            .store
            .get(key)
            .await
            .map_err(|e| store_error(def, name, e))?
            .is_some())
    }

    /// The namespace must exist and not be terminating, for creating in it.
    async fn check_namespace(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        let Some(ns_def) = self.resources.get("", "v1", "namespaces") else {
            return Ok(());
        };
        let ns = self.get(&ns_def, None, namespace).await?;
        if write::is_deleting(&ns) {
            let mut error = ApiError::new(
                StatusReason::Forbidden,
                format!(
                    "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                    def.group_resource()
                ),
            );
            error.details.name = Some(name.to_owned());
            error.details.kind = Some(def.plural.clone());
            error.details.causes = vec![Cause::new(
                "NamespaceTerminating",
                "metadata.namespace",
                format!("namespace {namespace} is being terminated"),
            )];
            return Err(error);
        }
        Ok(())
    }
}
