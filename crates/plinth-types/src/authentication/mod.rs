//! The `authentication.k8s.io` API group: SelfSubjectReview (`kubectl auth whoami`), which
//! tells the caller who the server takes them for; answered, never stored.

use plinth_core::ApiError;
use serde_json::{Value, json};

use plinth_registry::resources::{Asker, ResourceDef};
use plinth_registry::schema::{Schema, top};

/// Every resource of the group.
pub fn resources() -> Vec<ResourceDef> {
    vec![
        ResourceDef::new(
            "authentication.k8s.io",
            "v1",
            "SelfSubjectReview",
            "selfsubjectreviews",
        )
        .cluster_scoped()
        .schema(top(vec![("status", Schema::Any)]))
        .answered_by(self_subject_review),
    ]
}

fn self_subject_review(asker: &Asker<'_>, mut object: Value) -> Result<Value, ApiError> {
    let user = asker.user;
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        info["extra"] = json!(user.extra);
    }
    object["status"] = json!({"userInfo": info});
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("creationTimestamp".into(), Value::Null);
    }
    Ok(object)
}
