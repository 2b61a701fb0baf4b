//! What the registry asks of admission, and nothing more: the write being admitted
//! ([`Request`], kube's `admission.Attributes`) and the [`Admit`] trait the server's admission
//! chain implements (`plinth-admission`). The registry calls it between decoding and storage;
//! it never names the chain's concrete type.

use plinth_core::ApiError;
use serde_json::Value;

use super::user::User;
use crate::resources::{Objects, ResourceDef};

/// What a write does, as admission names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A create (a POST, an apply or a PUT that creates).
    Create,
    /// An update (PUT, PATCH, apply).
    Update,
    /// A delete.
    Delete,
    /// A connection to a subresource (`pods/exec`, `pods/attach`, `pods/portforward`, a
    /// proxy): its options object is what is admitted.
    Connect,
}

impl Operation {
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
            Self::Connect => "CONNECT",
        }
    }
}

/// One write being admitted (kube's `admission.Attributes`).
#[derive(Debug)]
pub struct Request<'a> {
    /// What it does.
    pub operation: Operation,
    /// The resource written.
    pub def: &'a ResourceDef,
    /// `status`, `approval`, or empty.
    pub subresource: &'a str,
    /// The object's namespace, for namespaced resources.
    pub namespace: Option<&'a str>,
    /// The object's name (empty for a create with `generateName`).
    pub name: &'a str,
    /// The object's Namespace, when the registry has read it already (once per write, from
    /// the watch cache).
    pub namespace_object: Option<&'a Value>,
    /// Who writes.
    pub user: &'a User,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// The verb's options (`CreateOptions`, `UpdateOptions`, `DeleteOptions`).
    pub options: Value,
}

/// The user the server's own writes are admitted as (kube-apiserver's loopback identity).
pub fn server_user() -> User {
    User::new("system:apiserver", &[super::user::MASTERS])
}

/// Whether writes of `def` are admitted at all: never the admission configuration types
/// themselves (a broken webhook or policy could otherwise never be removed), nor types that
/// are answered rather than stored.
pub fn admits(def: &ResourceDef) -> bool {
    def.group_version.group != "admissionregistration.k8s.io" && def.answer.is_none()
}

/// Admission as the registry calls it: mutation before the type's validation, validation just
/// before the object is stored (kube-apiserver's order). `objects`: what admission may read
/// (namespaces, policy parameters, quotas) and the quota writes it makes.
#[async_trait::async_trait]
pub trait Admit: Send + Sync + std::fmt::Debug {
    /// Lets mutating admission change `object` (`old`: the stored object of an update).
    /// Returns the warnings to send back.
    ///
    /// # Errors
    /// A denial or a failed call that must fail the write.
    async fn mutate(
        &self,
        objects: &dyn Objects,
        request: &Request<'_>,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<Vec<String>, ApiError>;

    /// Validating admission of the object about to be stored (`None` for a delete). Returns
    /// the warnings to send back.
    ///
    /// # Errors
    /// A denial or a failed call that must fail the write.
    async fn validate(
        &self,
        objects: &dyn Objects,
        request: &Request<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<Vec<String>, ApiError>;

    /// Whether deletes by `user` need admitting at all (any webhook or policy in force, or a
    /// node agent's, which NodeRestriction checks).
    fn admits_deletes(&self, user: &User) -> bool;
}
