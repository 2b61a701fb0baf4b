//! The per-type policy the generic registry calls — kube-apiserver's `RESTCreateStrategy`,
//! `RESTUpdateStrategy` and friends in one small trait. A type implements only what differs
//! from the defaults; the registry owns the order of the calls:
//!
//! create: `decode` → server-set metadata → `prepare_create` → metadata validation +
//! `validate` → store. update: `decode` → the part's rules (`main` or `/status`) → `prepare_update`
//! → metadata validation + `validate` → store.
//!
//! `prepare_*` may change the object; `validate` must not (the borrow says so).

use plinth_core::Cause;
use plinth_core::managed::{ListType, MapType};
use serde_json::Value;

use crate::resources::ResourceDef;
use crate::schema::{self, Findings};

/// How a list field merges, in strategic merge patches and in server-side apply (the Go
/// struct tags `patchStrategy`/`patchMergeKey`, which agree with `listType`/`listMapKeys` for
/// the built-in types unless [`Strategy::list_type`] says otherwise).
pub use plinth_core::smp::ListMerge;

/// A field path as the tables below spell it: field names joined by `.`, list items as `[]`
/// (`spec.containers[].ports`).
pub type FieldPath = &'static str;

/// A resource's behaviour.
pub trait Strategy: Send + Sync + std::fmt::Debug {
    /// Checks a request body against the type's shape as its decoder would, and removes what
    /// the type does not declare: the first type error, and the paths of unknown fields.
    fn decode(&self, def: &ResourceDef, object: &mut Value) -> Findings {
        let findings = schema::check(object, &def.schema, &def.kind);
        schema::prune(object, &def.schema);
        findings
    }

    /// Removes what the type does not declare (an apply configuration, before it is merged).
    fn prune(&self, def: &ResourceDef, object: &mut Value) {
        schema::prune(object, &def.schema);
    }

    /// Type defaults of a new object, after the server set its metadata.
    fn prepare_create(&self, _object: &mut Value) {}

    /// Type defaults of an updated object (`old` is what is stored).
    fn prepare_update(&self, _object: &mut Value, _old: &Value) {}

    /// What an update through `/status` makes of the stored object `current` and the request
    /// `new`, for a type whose kube status strategy keeps more of the request than its
    /// status (a Deployment's keeps its new metadata, apart from its labels). `None`: the
    /// custom resources' rule — only the status changes.
    fn merge_status(&self, _current: &Value, _new: &Value) -> Option<Value> {
        None
    }

    /// The type's own validation (metadata is validated for every type by the registry).
    fn validate(&self, _object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        Vec::new()
    }

    /// The validation of an update through `subresource`, when the type validates it apart
    /// from [`Strategy::validate`] (a pod's `ephemeralcontainers`); `None`: as any update.
    fn validate_subresource(
        &self,
        _subresource: &str,
        _object: &Value,
        _old: &Value,
    ) -> Option<Vec<Cause>> {
        None
    }

    /// Records who creates the object, for the types that keep it (a
    /// CertificateSigningRequest's `spec.username` and groups); called before
    /// [`Strategy::prepare_create`] for requests from users.
    fn stamp(&self, _object: &mut Value, _requester: &crate::Requester) {}

    /// Checks that the requesting user may write this object as it is (beyond being allowed
    /// the verb): RBAC objects must not grant more than their writer holds. Called after
    /// [`Strategy::validate`] for requests from users, not for the server's own writes.
    ///
    /// # Errors
    /// Typically 403.
    fn admit(
        &self,
        _object: &Value,
        _old: Option<&Value>,
        _requester: &crate::Requester,
    ) -> Result<(), plinth_core::ApiError> {
        Ok(())
    }

    /// Whether deletion waits for something besides `metadata.finalizers` (a namespace's
    /// `spec.finalizers`).
    fn deletion_pending(&self, _object: &Value) -> bool {
        false
    }

    /// The grace period of a delete asking for `requested` seconds (kube's
    /// `CheckGracefulDelete`): above 0, the object is only marked — `deletionTimestamp` that
    /// far ahead — until its owner (a node agent) deletes it with 0. Most types have none.
    fn deletion_grace(&self, _object: &Value, _requested: Option<i64>) -> i64 {
        0
    }

    /// Marks an object whose deletion began (a namespace turns `Terminating`).
    fn mark_deleting(&self, _object: &mut Value) {}

    /// The merge rules of the type's list fields, by [`FieldPath`].
    fn lists(&self) -> &[(FieldPath, ListMerge)] {
        &[]
    }

    /// The list type of the list at `path` (field names, items as `[]`), for server-side
    /// apply; `None` falls back to [`Strategy::lists`] and then atomic.
    fn list_type(&self, _path: &[&str]) -> Option<ListType> {
        None
    }

    /// The map type of the object at `path`, for server-side apply; `None`: from the type's
    /// shape (maps are granular, structs per field).
    fn map_type(&self, _path: &[&str]) -> Option<MapType> {
        None
    }

    /// Whether `application/strategic-merge-patch+json` is accepted (not for custom resources:
    /// they have no patch metadata).
    fn strategic_merge_patch(&self) -> bool {
        true
    }

    /// The object as stored, from the form this resource serves (for two resources over one
    /// storage, as core/v1 and events.k8s.io/v1 Events).
    fn to_storage(&self, object: Value) -> Value {
        object
    }

    /// The object as this resource serves it, from the stored form.
    fn to_view(&self, object: Value) -> Value {
        object
    }

    /// Whether this resource serves objects in their stored form ([`Strategy::to_view`] is
    /// the identity): then lists and watches send the watch cache's encoded bytes as they
    /// are. A strategy that overrides `to_view` returns `false`.
    fn serves_stored_form(&self) -> bool {
        true
    }
}

/// What most of kube's built-in status strategies make of a `/status` update: the request's
/// object (its status and metadata: a status patch can add an annotation) with the stored
/// spec. For [`Strategy::merge_status`].
pub fn with_stored_spec(current: &Value, new: &Value) -> Value {
    let mut merged = new.clone();
    if let Some(map) = merged.as_object_mut() {
        match current.get("spec") {
            Some(spec) => {
                map.insert("spec".into(), spec.clone());
            }
            None => {
                map.remove("spec");
            }
        }
        if map.get("status").is_some_and(Value::is_null) {
            map.remove("status");
        }
    }
    merged
}

/// The strategy of a type with no behaviour of its own.
#[derive(Debug, Default)]
pub struct Plain;

impl Strategy for Plain {}

/// The [`ListMerge`] declared for `path` in `lists`.
pub fn list_merge(lists: &[(FieldPath, ListMerge)], path: &str) -> Option<ListMerge> {
    lists.iter().find(|(p, _)| *p == path).map(|(_, m)| *m)
}
