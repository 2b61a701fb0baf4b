//! core/v1 ServiceAccount.

use futures::future::BoxFuture;
use plinth_core::{ApiError, Cause};
use serde_json::{Value, json};

use plinth_registry::resources::{Asker, ResourceDef, column, count};
use plinth_registry::schema::{Schema, array, obj, object_reference, top};
use plinth_registry::strategy::{FieldPath, ListMerge, Strategy};

/// The `serviceaccounts` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("", "v1", "ServiceAccount", "serviceaccounts")
        .short_names(&["sa"])
        .columns(vec![column(
            "Secrets",
            "integer",
            "Number of secrets",
            0,
            |o, _| count(o, &["secrets"]),
        )])
        .schema(schema())
        .strategy(ServiceAccounts)
        .answered_subresource("token", token)
        .discovered(
            "token",
            Some(("authentication.k8s.io", "v1", "TokenRequest")),
            &["create"],
        )
}

/// `serviceaccounts/<name>/token`: a TokenRequest answered with a signed token for the
/// account, for the audiences asked (the API server's by default), valid
/// `expirationSeconds` (an hour by default, ten minutes at least), bound to a Secret or Pod of
/// the namespace if asked.
fn token<'a>(
    asker: &'a Asker<'a>,
    account: Value,
    request: Value,
) -> BoxFuture<'a, Result<Value, ApiError>> {
    Box::pin(async move {
        let name = plinth_core::meta::name(&account).unwrap_or("").to_owned();
        let namespace = plinth_core::meta::namespace(&account)
            .unwrap_or("")
            .to_owned();
        let uid = plinth_core::meta::meta_str(&account, "uid")
            .unwrap_or("")
            .to_owned();
        let invalid = |cause: Cause| {
            ApiError::invalid("authentication.k8s.io", "TokenRequest", &name, vec![cause])
        };
        let spec = request.get("spec").cloned().unwrap_or_else(|| json!({}));
        if let Some(node) = asker.user.node() {
            node_bound_token(asker, node, &name, &namespace, &spec).await?;
        }
        let expiration = match spec.get("expirationSeconds") {
            None | Some(Value::Null) => plinth_registry::authz::DEFAULT_EXPIRATION,
            Some(v) => v.as_i64().ok_or_else(|| {
                ApiError::bad_request("spec.expirationSeconds must be an integer")
            })?,
        };
        if expiration < 600 {
            return Err(invalid(Cause::invalid(
                "spec.expirationSeconds",
                &json!(expiration),
                "may not specify a duration less than 10 minutes",
            )));
        }
        if expiration > 1 << 32 {
            return Err(invalid(Cause::invalid(
                "spec.expirationSeconds",
                &json!(expiration),
                "may not specify a duration larger than 2^32 seconds",
            )));
        }
        let audiences: Vec<String> = spec
            .get("audiences")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let mut node = None;
        let bound = match spec.get("boundObjectRef").filter(|b| b.is_object()) {
            None => None,
            Some(reference) => {
                let text = |f: &str| reference.get(f).and_then(Value::as_str).unwrap_or("");
                let plural = match text("kind") {
                    "Secret" => "secrets",
                    "Pod" => "pods",
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "cannot bind token for object of kind {other:?}"
                        )));
                    }
                };
                let def = asker.objects.resource("", "v1", plural).ok_or_else(|| {
                    ApiError::bad_request(format!("cannot bind token to {plural}"))
                })?;
                let object = asker
                    .objects
                    .get(&def, Some(&namespace), text("name"))
                    .await?;
                let object_uid = plinth_core::meta::meta_str(&object, "uid").unwrap_or("");
                if !text("uid").is_empty() && text("uid") != object_uid {
                    return Err(ApiError::conflict(
                        &def.group_resource(),
                        text("name"),
                        &format!(
                            "the UID in the bound object reference ({}) does not match the UID in record. The object might have been deleted and then recreated",
                            text("uid")
                        ),
                    ));
                }
                // A pod's token names its node too (kube's ServiceAccountTokenPodNodeInfo).
                let node_name = object
                    .pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .filter(|n| plural == "pods" && !n.is_empty());
                if let Some(node_name) = node_name
                    && let Some(nodes) = asker.objects.resource("", "v1", "nodes")
                    && let Ok(found) = asker.objects.get(&nodes, None, node_name).await
                {
                    let node_uid = plinth_core::meta::meta_str(&found, "uid").unwrap_or("");
                    node = Some((node_name.to_owned(), node_uid.to_owned()));
                }
                Some((
                    text("kind").to_owned(),
                    text("name").to_owned(),
                    object_uid.to_owned(),
                ))
            }
        };
        let (token, expires) = asker.tokens.issue(
            (&namespace, &name, &uid),
            &audiences,
            expiration,
            bound
                .as_ref()
                .map(|(k, n, u)| (k.as_str(), n.as_str(), u.as_str())),
            node.as_ref().map(|(n, u)| (n.as_str(), u.as_str())),
        )?;
        let mut spec = spec;
        spec["expirationSeconds"] = json!(expiration);
        if audiences.is_empty() {
            spec["audiences"] = json!([plinth_registry::authz::ISSUER]);
        }
        if let Some((kind, object, object_uid)) = &bound {
            spec["boundObjectRef"] =
                json!({"kind": kind, "apiVersion": "v1", "name": object, "uid": object_uid});
        }
        Ok(json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": null},
            "spec": spec,
            "status": {
                "token": token,
                "expirationTimestamp": plinth_core::meta::format_time(expires),
            },
        }))
    })
}

/// The shape of a ServiceAccount.
pub fn schema() -> Schema {
    top(vec![
        ("secrets", array(object_reference())),
        (
            "imagePullSecrets",
            array(obj(vec![("name", Schema::String)])),
        ),
        ("automountServiceAccountToken", Schema::Bool),
    ])
}

#[derive(Debug)]
struct ServiceAccounts;

impl Strategy for ServiceAccounts {
    fn lists(&self) -> &[(FieldPath, ListMerge)] {
        &[
            ("secrets", ListMerge::Keyed("name")),
            ("imagePullSecrets", ListMerge::Keyed("name")),
        ]
    }
}

/// kube's NodeRestriction for token requests: a node asks only for tokens bound to a pod of
/// its own (that exists, with the uid given).
async fn node_bound_token(
    asker: &Asker<'_>,
    node: &str,
    account: &str,
    namespace: &str,
    spec: &Value,
) -> Result<(), ApiError> {
    let forbid = |why: &str| {
        ApiError::forbidden(
            Some(&plinth_core::gvk::GroupResource::new("", "serviceaccounts")),
            account,
            why,
        )
    };
    let reference = &spec["boundObjectRef"];
    if reference["kind"] != "Pod" {
        return Err(forbid("node requested token not bound to a pod"));
    }
    let uid = reference["uid"].as_str().unwrap_or("");
    if uid.is_empty() {
        return Err(forbid(
            "node requested token with a pod binding without a uid",
        ));
    }
    let Some(pods) = asker.objects.resource("", "v1", "pods") else {
        return Ok(());
    };
    let pod = asker
        .objects
        .get(
            &pods,
            Some(namespace),
            reference["name"].as_str().unwrap_or(""),
        )
        .await?;
    if pod["metadata"]["uid"] != uid {
        return Err(forbid(&format!(
            "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
        )));
    }
    if pod["spec"]["nodeName"] != node {
        return Err(forbid(
            "node requested token bound to a pod scheduled on a different node",
        ));
    }
    Ok(())
}
