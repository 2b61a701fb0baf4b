//! Deletion: preconditions, the garbage collector's finalizers by propagation policy, marking
//! objects that wait for finalizers, and the final delete — all one guaranteed update.

use crate::admit::Admit;
use plinth_core::ApiError;
use plinth_core::meta::{finalizers, format_time, metadata_mut};
use plinth_store::{Update, guaranteed_update};
use serde_json::{Value, json};

use super::codec::{decode_view, encode_view, rv_of, store_error};
use super::is_deleting;
use super::write::UpdateError;
use super::{DeleteOptions, Propagation, Registry, now};
use crate::resources::ResourceDef;

/// The finalizer that keeps an owner until its dependents are orphaned.
pub const FINALIZER_ORPHAN: &str = "orphan";
/// The finalizer that keeps an owner until its blocking dependents are deleted.
pub const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

/// What a delete did.
#[derive(Debug)]
pub struct Deleted {
    /// The object as deleted, or as marked for deletion.
    pub object: Value,
    /// Whether it is gone (else it waits for finalizers).
    pub gone: bool,
}

impl Registry {
    /// Deletes an object, or marks it deleted while finalizers remain.
    ///
    /// # Errors
    /// 404 if absent; 409 if a precondition fails.
    pub async fn delete(
        &self,
        admit: &dyn Admit,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        let key = def.key(namespace, name);
        let user = options
            .user
            .clone()
            .unwrap_or_else(super::admit::server_user);
        if admit.admits_deletes(&user) && super::admit::admits(def) {
            let current = self.get(def, namespace, name).await?;
            let mut delete_options =
                json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
            if options.dry_run {
                delete_options["dryRun"] = json!(["All"]);
            }
            if let Some(p) = options.propagation {
                delete_options["propagationPolicy"] = json!(p.as_str());
            }
            let request = super::admit::Request {
                operation: super::admit::Operation::Delete,
                def,
                subresource: "",
                namespace: namespace.filter(|_| def.namespaced),
                name,
                namespace_object: None,
                user: &user,
                dry_run: options.dry_run,
                options: delete_options,
            };
            let mut none = Value::Null;
            admit
                .mutate(&self.admitted(admit), &request, &mut none, Some(&current))
                .await?;
            admit
                .validate(&self.admitted(admit), &request, None, Some(&current))
                .await?;
        }
        let mut outcome: Option<Deleted> = None;
        let mut decide = |kv: &plinth_store::KeyValue| -> Result<Update, UpdateError> {
            let current = decode_view(def, kv)?;
            check_preconditions(options, def, name, &current)?;
            let had = finalizers(&current);
            let wanted = deletion_finalizers(&had, options.propagation);
            let grace = def
                .strategy
                .deletion_grace(&current, options.grace_period_seconds);
            if grace > 0 {
                return graceful(def, current, grace, &had, &wanted, options, &mut outcome);
            }
            if wanted.is_empty() && !def.strategy.deletion_pending(&current) {
                outcome = Some(Deleted {
                    object: current,
                    gone: true,
                });
                return Ok(if options.dry_run {
                    Update::Unchanged
                } else {
                    Update::Delete
                });
            }
            let same = had.len() == wanted.len() && wanted.iter().all(|f| had.contains(f));
            if is_deleting(&current) && same {
                outcome = Some(Deleted {
                    object: current,
                    gone: false,
                });
                return Ok(Update::Unchanged);
            }
            let mut marked = current.clone();
            if let Some(meta) = metadata_mut(&mut marked) {
                if !same {
                    meta.insert("finalizers".into(), json!(wanted));
                }
                if !meta.contains_key("deletionTimestamp") {
                    meta.insert("deletionTimestamp".into(), json!(format_time(now())));
                    meta.insert("deletionGracePeriodSeconds".into(), json!(0));
                }
            }
            write_marked(def, marked, options, &mut outcome)
        };
        let written = guaranteed_update::<_, _, UpdateError>(&*self.store, &key, |kv| {
            Box::pin(std::future::ready(decide(kv)))
        })
        .await
        .map_err(|e| match e {
            UpdateError::Api(api) => api,
            UpdateError::Store(store) => store_error(def, name, store),
        })?;
        let mut outcome = outcome.ok_or_else(|| ApiError::internal("delete decided nothing"))?;
        // (Marked in the stored form: metadata is the same in every version.)
        outcome.object = super::codec::converted(self, def, outcome.object).await?;
        if !outcome.gone
            && !options.dry_run
            && let Some(meta) = metadata_mut(&mut outcome.object)
        {
            meta.insert(
                "resourceVersion".into(),
                json!(written.mod_revision.to_string()),
            );
        }
        Ok(outcome)
    }
}

/// The first step of a graceful delete: the object is marked to go `grace` seconds from now
/// (or sooner, when it already was marked with a longer period), and stays until its owner
/// deletes it with no grace.
fn graceful(
    def: &ResourceDef,
    current: Value,
    grace: i64,
    had: &[String],
    wanted: &[String],
    options: &DeleteOptions,
    outcome: &mut Option<Deleted>,
) -> Result<Update, UpdateError> {
    let pending = current
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64);
    let same = had.len() == wanted.len() && wanted.iter().all(|f| had.contains(f));
    if pending.is_some_and(|p| p <= grace) && same {
        *outcome = Some(Deleted {
            object: current,
            gone: false,
        });
        return Ok(Update::Unchanged);
    }
    let mut marked = current;
    if let Some(meta) = metadata_mut(&mut marked) {
        if !same {
            meta.insert("finalizers".into(), json!(wanted));
        }
        if pending.is_none_or(|p| p > grace) {
            meta.insert(
                "deletionTimestamp".into(),
                json!(format_time(now() + grace)),
            );
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
        }
    }
    write_marked(def, marked, options, outcome)
}

/// Stores an object marked for deletion (unless a dry run), as the delete's outcome.
fn write_marked(
    def: &ResourceDef,
    mut marked: Value,
    options: &DeleteOptions,
    outcome: &mut Option<Deleted>,
) -> Result<Update, UpdateError> {
    def.strategy.mark_deleting(&mut marked);
    let encoded = encode_view(def, &marked)?;
    *outcome = Some(Deleted {
        object: marked,
        gone: false,
    });
    Ok(if options.dry_run {
        Update::Unchanged
    } else {
        Update::Write(encoded)
    })
}

/// The finalizers an object gets when deleted with `propagation` (kube-apiserver's
/// `deletionFinalizersForGarbageCollection`): the garbage collector's two finalizers are
/// dropped, and the one the policy asks for added.
fn deletion_finalizers(current: &[String], propagation: Option<Propagation>) -> Vec<String> {
    let propagation = propagation.unwrap_or_else(|| {
        if current.iter().any(|f| f == FINALIZER_ORPHAN) {
            Propagation::Orphan
        } else if current.iter().any(|f| f == FINALIZER_FOREGROUND) {
            Propagation::Foreground
        } else {
            Propagation::Background
        }
    });
    let mut finalizers: Vec<String> = current
        .iter()
        .filter(|f| *f != FINALIZER_ORPHAN && *f != FINALIZER_FOREGROUND)
        .cloned()
        .collect();
    match propagation {
        Propagation::Orphan => finalizers.push(FINALIZER_ORPHAN.to_owned()),
        Propagation::Foreground => finalizers.push(FINALIZER_FOREGROUND.to_owned()),
        Propagation::Background => {}
    }
    finalizers
}

/// The delete's preconditions against the stored object.
fn check_preconditions(
    options: &DeleteOptions,
    def: &ResourceDef,
    name: &str,
    current: &Value,
) -> Result<(), ApiError> {
    let resource = def.group_resource();
    if let Some(uid) = &options.uid {
        let actual = plinth_core::meta::meta_str(current, "uid").unwrap_or("");
        if uid != actual {
            return Err(ApiError::conflict(
                &resource,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                ),
            ));
        }
    }
    if let Some(rv) = &options.resource_version {
        let actual = rv_of(current).unwrap_or("");
        if rv != actual {
            return Err(ApiError::conflict(
                &resource,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"
                ),
            ));
        }
    }
    Ok(())
}
