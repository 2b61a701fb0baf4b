//! The typed options of every verb — what the HTTP layer parses from query strings and bodies
//! once, and what in-process callers (the controllers) build directly.

use std::time::Duration;

use plinth_core::selector::{FieldSelector, LabelSelector};
use plinth_core::{ApiError, Cause};
use serde_json::{Value, json};

/// `fieldValidation`: what happens to fields the type does not declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Unknown fields are dropped silently.
    Ignore,
    /// Unknown fields are dropped with a warning.
    #[default]
    Warn,
    /// Unknown fields fail the request.
    Strict,
}

impl FieldValidation {
    /// Parses the query parameter.
    ///
    /// # Errors
    /// 400 for anything but `Ignore`, `Warn`, `Strict`.
    pub fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value {
            None | Some("") | Some("Warn") => Ok(Self::Warn),
            Some("Ignore") => Ok(Self::Ignore),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: {other}. Must be one of Ignore, Warn, Strict"
            ))),
        }
    }
}

/// Which part of an object a write addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Part {
    /// The object (its status kept when the type has a `/status` subresource).
    #[default]
    Main,
    /// The `/status` subresource: only the status changes.
    Status,
    /// The `/scale` subresource: only the replicas change.
    Scale,
    /// A subresource that changes one field only: `/approval` of CertificateSigningRequests
    /// (`status.conditions`), `/finalize` of Namespaces (`spec.finalizers`).
    Field {
        /// The subresource.
        name: &'static str,
        /// The JSON pointer of the field it changes.
        pointer: &'static str,
    },
}

impl Part {
    /// The subresource name recorded in managedFields.
    pub fn subresource(self) -> &'static str {
        match self {
            Self::Main => "",
            Self::Status => "status",
            Self::Scale => "scale",
            Self::Field { name, .. } => name,
        }
    }
}

/// Options of a create, update or patch.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: everything but storing.
    pub dry_run: bool,
    /// `fieldValidation`.
    pub field_validation: FieldValidation,
    /// `fieldManager`, as given.
    pub field_manager: Option<String>,
    /// The manager recorded when none is given (from the User-Agent).
    pub default_manager: String,
    /// `force`: an apply takes conflicting fields.
    pub force: bool,
    /// Fields the JSON body gave twice (paths), found before it was parsed into an object:
    /// refused under `fieldValidation=Strict`, warned of under `Warn`.
    pub duplicates: Vec<String>,
    /// Who writes, for the types whose writes depend on it (RBAC: no one grants what they
    /// do not hold); `None` for the server's own writes.
    pub requester: Option<Requester>,
}

/// A writing user and the authorizer that knows what they may do.
#[derive(Clone, Debug)]
pub struct Requester {
    /// The user.
    pub user: crate::user::User,
    /// The authorizer.
    pub authorizer: std::sync::Arc<dyn crate::authz::Authorizer>,
}

impl WriteOptions {
    /// Options for the server's own controllers, whose writes are recorded in managedFields
    /// under `manager` (as kube-controller-manager's and kube-apiserver's are under theirs).
    pub fn internal(manager: &str) -> Self {
        Self {
            default_manager: manager.to_owned(),
            ..Self::default()
        }
    }
}

/// `resourceVersionMatch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceVersionMatch {
    /// Exactly the state at `resourceVersion`.
    Exact,
    /// A state at least as new as `resourceVersion`.
    NotOlderThan,
}

impl ResourceVersionMatch {
    /// Parses the query parameter (empty: unset).
    ///
    /// # Errors
    /// 400 for another value, with kube's wording.
    pub fn parse(value: Option<&str>) -> Result<Option<Self>, ApiError> {
        match value {
            None | Some("") => Ok(None),
            Some("Exact") => Ok(Some(Self::Exact)),
            Some("NotOlderThan") => Ok(Some(Self::NotOlderThan)),
            Some(other) => Err(ApiError::bad_request(format!(
                "resourceVersionMatch: Unsupported value: \"{other}\": supported values: \"Exact\", \"NotOlderThan\""
            ))),
        }
    }
}

/// Options of a list (and the selection and starting point of a watch).
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `limit` (0: none).
    pub limit: usize,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `resourceVersion` (checked to be a revision number).
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<ResourceVersionMatch>,
}

impl ListOptions {
    /// `resourceVersion=0`: any state, as the watch cache has it now (no wait for the store).
    pub fn any_state() -> Self {
        Self {
            resource_version: Some("0".into()),
            ..Self::default()
        }
    }
}

/// Options of a watch.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    /// What is watched and from where.
    pub list: ListOptions,
    /// `sendInitialEvents`: the current objects first, then a bookmark marking their end.
    pub send_initial_events: bool,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `timeoutSeconds`: when the server ends the watch (`None`: 30–60 minutes, at random).
    pub timeout: Option<Duration>,
}

/// How the dependents of a deleted object are treated (`propagationPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// The garbage collector deletes the dependents after the owner is gone.
    Background,
    /// The owner stays (finalizer `foregroundDeletion`) until its blocking dependents are gone.
    Foreground,
    /// The owner stays (finalizer `orphan`) until its dependents no longer reference it.
    Orphan,
}

impl Propagation {
    /// `Foreground`, `Background`, `Orphan`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Foreground => "Foreground",
            Self::Background => "Background",
            Self::Orphan => "Orphan",
        }
    }

    /// Parses `propagationPolicy` and `orphanDependents` as kube-apiserver validates them.
    ///
    /// # Errors
    /// 422 for an unknown policy, or both fields set.
    pub fn parse(policy: Option<&str>, orphan: Option<bool>) -> Result<Option<Self>, ApiError> {
        let invalid = |cause| ApiError::invalid("meta.k8s.io", "DeleteOptions", "", vec![cause]);
        if let (Some(policy), Some(_)) = (policy, orphan) {
            return Err(invalid(Cause::invalid(
                "propagationPolicy",
                &json!(policy),
                "orphanDependents and deletionPropagation cannot be both set",
            )));
        }
        match (policy, orphan) {
            (Some("Background"), _) => Ok(Some(Self::Background)),
            (Some("Foreground"), _) => Ok(Some(Self::Foreground)),
            (Some("Orphan"), _) => Ok(Some(Self::Orphan)),
            (Some(other), _) => Err(invalid(Cause::new(
                "FieldValueNotSupported",
                "propagationPolicy",
                format!(
                    "Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            ))),
            (None, Some(true)) => Ok(Some(Self::Orphan)),
            (None, Some(false)) => Ok(Some(Self::Background)),
            (None, None) => Ok(None),
        }
    }
}

/// `DeleteOptions`.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `propagationPolicy` (or the older `orphanDependents`); `None`: the object's own
    /// `orphan`/`foregroundDeletion` finalizer, else background.
    pub propagation: Option<Propagation>,
    /// `gracePeriodSeconds` (objects without a graceful deletion go at once whatever it is).
    pub grace_period_seconds: Option<i64>,
    /// Who deletes, for admission; `None` for the server's own deletes.
    pub user: Option<crate::user::User>,
}

/// A patch, decoded.
#[derive(Clone, Debug)]
pub enum Patch {
    /// `application/json-patch+json` (RFC 6902).
    Json(json_patch::Patch),
    /// `application/merge-patch+json` (RFC 7386).
    Merge(Value),
    /// `application/strategic-merge-patch+json`: a merge patch whose lists merge by the type's
    /// patch metadata, with kube's `$patch`/`$retainKeys`/... directives.
    Strategic(Value),
    /// `application/apply-patch+yaml`: server-side apply of this configuration.
    Apply(Value),
}

impl Patch {
    /// The media type this patch arrives as.
    pub fn media_type(&self) -> &'static str {
        match self {
            Self::Json(_) => "application/json-patch+json",
            Self::Merge(_) => "application/merge-patch+json",
            Self::Strategic(_) => "application/strategic-merge-patch+json",
            Self::Apply(_) => "application/apply-patch+yaml",
        }
    }

    /// A merge patch of `value` (what the controllers send).
    pub fn merge(value: Value) -> Self {
        Self::Merge(value)
    }
}
