//! The `authentication.k8s.io` API group, answered, never stored: SelfSubjectReview
//! (`kubectl auth whoami`: who the server takes the caller for) and TokenReview (who a bearer
//! token authenticates as, for which audiences — what webhook authenticators and
//! `system:auth-delegator` servers ask).

use futures::future::BoxFuture;
use plinth_core::ApiError;
use serde_json::{Value, json};

use plinth_registry::resources::{Asker, ResourceDef};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::user::User;

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
        ResourceDef::new("authentication.k8s.io", "v1", "TokenReview", "tokenreviews")
            .cluster_scoped()
            .schema(top(vec![
                (
                    "spec",
                    obj(vec![
                        ("token", Schema::String),
                        ("audiences", array(Schema::String)),
                    ]),
                ),
                ("status", Schema::Any),
            ]))
            .answered_by(token_review),
    ]
}

/// `userInfo` of a user.
fn user_info(user: &User) -> Value {
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        info["extra"] = json!(user.extra);
    }
    info
}

/// An answered object carries no creation time (kube's `creationTimestamp: null`).
fn unstamped(mut object: Value) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("creationTimestamp".into(), Value::Null);
    }
    object
}

fn self_subject_review<'a>(
    asker: &'a Asker<'a>,
    mut object: Value,
) -> BoxFuture<'a, Result<Value, ApiError>> {
    object["status"] = json!({"userInfo": user_info(asker.user)});
    Box::pin(std::future::ready(Ok(unstamped(object))))
}

fn token_review<'a>(
    asker: &'a Asker<'a>,
    mut object: Value,
) -> BoxFuture<'a, Result<Value, ApiError>> {
    Box::pin(async move {
        let token = object
            .pointer("/spec/token")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if token.is_empty() {
            return Err(ApiError::bad_request(
                "token is required for TokenReview in authentication.k8s.io",
            ));
        }
        let audiences: Vec<String> = object
            .pointer("/spec/audiences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        object["status"] = match asker
            .reviewer
            .review(asker.objects, &token, &audiences)
            .await
        {
            Ok((user, matched)) => json!({
                "authenticated": true,
                "user": user_info(&user),
                "audiences": matched,
            }),
            // kube leaves `authenticated: false` and an empty error out.
            Err(error) if error.is_empty() => json!({"user": {}}),
            Err(error) => json!({"user": {}, "error": error}),
        };
        Ok(unstamped(object))
    })
}
