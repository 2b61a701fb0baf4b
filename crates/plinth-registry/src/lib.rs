//! The generic registry: every verb on every resource, driven by its
//! [`ResourceDef`](crate::resources::ResourceDef) and the type's
//! [`Strategy`](crate::strategy::Strategy), over [`plinth_store::Store`]. The order of steps
//! lives here once — decode, prepare, validate, store — and optimistic concurrency is the
//! store's guaranteed-update loop (deletion included).
//!
//! Rooms: [`admit`] (what the registry asks of admission: the trait, the request),
//! [`authz`] (what it and the type hooks ask of authorization and token issuing),
//! [`resources`] (a resource's definition; the `Objects` and `NodeDialer` traits hooks read
//! through), [`strategy`] (a type's behaviour), [`schema`] (built-in schemas), [`table`],
//! [`conversion`], [`callout`] (HTTPS to webhooks), [`metrics`], [`user`] (who writes),
//! [`options`] (the typed options of each verb), `client` ([`Client`], the in-process client
//! with the server's admission, and [`Admitted`], a registry and an admission for one call;
//! every write takes its admission as an argument), `codec` (to and from storage, continue
//! tokens, storage errors → API errors), `read` (get, list), `write` (create, update, the
//! guaranteed-update step), `patch`, `apply` (server-side apply and managedFields), `delete`,
//! `watch`, `scale`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod admit;
mod apply;
pub mod authz;
pub mod callout;
mod client;
mod codec;
pub mod conversion;
mod delete;
mod graph;
pub mod history;
pub mod metrics;
pub mod options;
pub mod patch;
pub mod provenance;
mod read;
pub mod resources;
mod scale;
pub mod schema;
pub mod service_range;
pub mod services;
pub mod strategy;
pub mod table;
pub mod timeline;
pub mod user;
mod watch;
mod write;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use plinth_core::{ApiError, Cause, StatusReason};
use plinth_store::Store;
use serde_json::Value;

pub use client::{Admitted, Client};
pub use codec::{decode_continue, parse_rv, set_type_meta, store_error};
pub use delete::{Deleted, FINALIZER_FOREGROUND, FINALIZER_ORPHAN};
pub use options::{
    DeleteOptions, FieldValidation, ListOptions, Part, Patch, Propagation, Requester,
    ResourceVersionMatch, WatchOptions, WriteOptions,
};
pub use read::{EncodedList, Items, ListItem, Listed};
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

/// The clock as a MicroTime (`2006-01-02T15:04:05.000000Z`), as Leases record it.
pub fn now_micro_time() -> String {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    plinth_core::meta::format_micro_time(micros)
}

/// Whether the object's deletion has begun.
fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
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
    pub caches: Arc<plinth_watchcache::Caches>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    /// The watch cache of `def` (started on first use); `None` for a resource kept in none
    /// ([`ResourceDef::watch_cached`]), whose readers go to storage.
    pub(crate) fn cache_of(&self, def: &ResourceDef) -> Option<Arc<plinth_watchcache::Cacher>> {
        def.watch_cached
            .then(|| self.caches.get(&def.key_prefix(), &def.selector_fields()))
    }

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

    /// The namespace must exist and not be terminating, for creating in it. `known`: the
    /// namespace as the write has read it already (from the watch cache), if it has.
    async fn check_namespace(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        known: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(ns_def) = self.resources.get("", "v1", "namespaces") else {
            return Ok(());
        };
        let read;
        let ns = match known.filter(|ns| plinth_core::meta::name(ns) == Some(namespace)) {
            Some(ns) => ns,
            None => {
                read = self.get(&ns_def, None, namespace).await?;
                &read
            }
        };
        if is_deleting(ns) {
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
