//! The generic registry: every verb on every resource, driven by its
//! [`ResourceDef`](crate::resources::ResourceDef) and the type's
//! [`Strategy`](crate::strategy::Strategy), over [`plinth_store::Store`]. The order of steps
//! lives here once — decode, prepare, validate, store — and optimistic concurrency is the
//! store's guaranteed-update loop (deletion included).
//!
//! Rooms: [`admit`] (what the registry asks of admission: the trait, the request),
//! [`user`] (who writes), [`options`] (the typed options of each verb), `codec` (to and from storage, continue
//! tokens, storage errors → API errors), `read` (get, list), `write` (create, update, the
//! guaranteed-update step), `patch`, `apply` (server-side apply and managedFields), `delete`,
//! `watch`, `scale`.

pub mod admit;
mod apply;
mod codec;
mod delete;
mod objects;
pub mod options;
mod patch;
mod read;
mod scale;
pub mod user;
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
    DeleteOptions, FieldValidation, ListOptions, Part, Patch, Propagation, Requester,
    ResourceVersionMatch, WatchOptions, WriteOptions,
};
pub use read::{EncodedList, ListItem, Listed};
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
    /// Admission, called on every create, update and delete (the server's chain: webhooks,
    /// policies, quota).
    pub admission: Arc<dyn admit::Admit>,
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

/// Property tests of the registry's steps over arbitrary objects and patches, for every
/// built-in type: decoding against the type, server-set metadata and defaults, validation,
/// patches of all three kinds. Nothing panics; every refusal is a 4xx.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Map, json};

    fn config() -> ProptestConfig {
        ProptestConfig {
            cases: 128,
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z]{1,6}",
            Just("metadata".to_owned()),
            Just("name".to_owned()),
            Just("labels".to_owned()),
            Just("finalizers".to_owned()),
            Just("ownerReferences".to_owned()),
            Just("data".to_owned()),
            Just("spec".to_owned()),
            Just("status".to_owned()),
            Just("type".to_owned()),
            Just("$patch".to_owned()),
            Just("op".to_owned()),
            Just("path".to_owned()),
            Just("value".to_owned()),
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            "[a-zA-Z0-9/._~-]{0,10}".prop_map(Value::String),
            Just(json!("add")),
            Just(json!("/metadata/name")),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(key(), inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    fn client_error(e: &ApiError) -> bool {
        (400..500).contains(&e.code())
    }

    /// An object at the top, with metadata most of the time.
    fn object() -> impl Strategy<Value = Value> {
        (
            prop::collection::btree_map(key(), json_value(), 0..6),
            prop::option::of(prop::collection::btree_map(key(), json_value(), 0..6)),
        )
            .prop_map(|(fields, metadata)| {
                let mut map: Map<String, Value> = fields.into_iter().collect();
                if let Some(metadata) = metadata {
                    let mut meta: Map<String, Value> = metadata.into_iter().collect();
                    meta.insert("name".into(), json!("x"));
                    map.insert("metadata".into(), Value::Object(meta));
                }
                Value::Object(map)
            })
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn every_type_decodes_prepares_and_validates_any_object(object in object(), old in object()) {
            for def in crate::types::builtin() {
                let mut body = object.clone();
                let options = WriteOptions {
                    field_validation: FieldValidation::Strict,
                    ..WriteOptions::default()
                };
                let steps = Registry::check_body(&def, &mut body, &options)
                    .and_then(|_| Registry::prepare_create(&def, &mut body, Some("default")))
                    .and_then(|()| Registry::validate(&def, &body, None))
                    .and_then(|()| Registry::validate(&def, &body, Some(&old)));
                if let Err(e) = steps {
                    prop_assert!(client_error(&e), "{}: {} {}", def.kind, e.code(), e.message);
                }
            }
        }

        #[test]
        fn patches_of_every_kind_apply_or_get_a_4xx(target in json_value(), patch in json_value()) {
            let def = crate::types::core::serviceaccount::resource();
            let lists = patch::patch_lists(&def);
            let mut patches = vec![Patch::Merge(patch.clone()), Patch::Strategic(patch.clone())];
            if let Ok(ops) = serde_json::from_value::<json_patch::Patch>(patch.clone()) {
                patches.push(Patch::Json(ops));
            }
            for p in &patches {
                let mut patched = target.clone();
                if let Err(e) = patch::apply_patch(&mut patched, p, &lists) {
                    prop_assert!(client_error(&e), "{}: {}", p.media_type(), e.message);
                }
            }
        }

        #[test]
        fn continue_tokens_and_resource_versions_decode_or_get_a_400(text in ".{0,60}") {
            if let Err(e) = decode_continue(&text) {
                prop_assert_eq!(e.code(), 400);
            }
            if let Err(e) = parse_rv(&text) {
                prop_assert_eq!(e.code(), 400);
            }
        }
    }
}
