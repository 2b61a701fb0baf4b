//! One webhook call: the AdmissionReview sent over HTTPS (one connection a call, bounded by the
//! webhook's timeout — a slow webhook costs only the requests it sees), the answer checked and
//! a mutating webhook's JSONPatch applied.

use base64::Engine;
use plinth_core::ApiError;
use serde_json::{Value, json};

use super::Request;
use super::webhook::{Matched, Webhook};

/// What a webhook said, when it allowed the write.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    /// Its warnings.
    pub warnings: Vec<String>,
    /// The object after its patch, if it sent one.
    pub patched: Option<Value>,
}

fn review_body(
    hook: &Webhook,
    request: &Request<'_>,
    matched: &Matched,
    uid: &str,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Value {
    let body = review_request(request, &matched.version, uid, object, old);
    json!({"apiVersion": hook.review_version, "kind": "AdmissionReview", "request": body})
}

/// The review's `request`: the write, its user, and the objects in `version` (the one the
/// webhook's rule names).
pub(super) fn review_request(
    request: &Request<'_>,
    version: &str,
    uid: &str,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Value {
    let matched = Matched {
        version: version.to_owned(),
    };
    let def = request.def;
    let group = &def.group_version.group;
    let relabel = |o: &Value| {
        let mut o = o.clone();
        if matched.version != def.group_version.version {
            let api_version = if group.is_empty() {
                matched.version.clone()
            } else {
                format!("{group}/{}", matched.version)
            };
            o["apiVersion"] = json!(api_version);
        }
        o
    };
    let user = request.user;
    let mut user_info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        user_info["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        user_info["extra"] = json!(user.extra);
    }
    let mut body = json!({
        "uid": uid,
        "kind": {"group": group, "version": matched.version, "kind": def.kind},
        "resource": {"group": group, "version": matched.version, "resource": def.plural},
        "requestKind": {"group": group, "version": def.group_version.version, "kind": def.kind},
        "requestResource": {"group": group, "version": def.group_version.version,
            "resource": def.plural},
        "name": request.name,
        "operation": request.operation.as_str(),
        "userInfo": user_info,
        "object": object.map(relabel),
        "oldObject": old.map(relabel),
        "dryRun": request.dry_run,
        "options": request.options,
    });
    if !request.subresource.is_empty() {
        body["subResource"] = json!(request.subresource);
        body["requestSubResource"] = json!(request.subresource);
    }
    if let Some(namespace) = request.namespace.filter(|n| !n.is_empty()) {
        body["namespace"] = json!(namespace);
    }
    body
}

/// kube's error for a webhook that could not be called or answered nonsense: 500 under
/// `failurePolicy: Fail`, nothing (logged) under `Ignore`.
fn failed(hook: &Webhook, why: &str) -> Result<Outcome, ApiError> {
    if hook.ignore_failures {
        tracing::warn!(webhook = %hook.name, error = %why, "failed calling webhook, failing open");
        return Ok(Outcome::default());
    }
    Err(ApiError::internal(format!(
        "failed calling webhook {:?}: {why}",
        hook.name
    )))
}

/// Sends the review to `hook`; a denial is the webhook's error, a patch is applied.
pub(super) async fn review(
    hook: &Webhook,
    objects: &dyn plinth_registry::resources::Objects,
    request: &Request<'_>,
    matched: &Matched,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<Outcome, ApiError> {
    // Matched in another version of a resource whose CRD converts by webhook: the webhook
    // sees the objects converted to its version (and its patch is converted back).
    let conversion = request
        .def
        .conversion
        .as_ref()
        .filter(|_| matched.version != request.def.group_version.version);
    let (object, old) = match conversion {
        Some(webhook) => {
            let target = webhook.api_version(&matched.version);
            let mut both = Vec::new();
            both.extend(object.cloned());
            both.extend(old.cloned());
            let mut converted = webhook.convert(objects, both, &target).await?.into_iter();
            let object = object.and_then(|_| converted.next());
            let old = old.and_then(|_| converted.next());
            (object, old)
        }
        None => (object.cloned(), old.cloned()),
    };
    let (object, old) = (object.as_ref(), old.as_ref());
    let uid = uuid::Uuid::new_v4().to_string();
    let url = plinth_registry::callout::url(&hook.endpoint, hook.timeout);
    let body = review_body(hook, request, matched, &uid, object, old).to_string();
    let call = async {
        let at = plinth_registry::callout::address(&hook.endpoint, objects)
            .await
            .map_err(|e| e.to_string())?;
        plinth_registry::callout::post(&hook.tls, &url, at, body.into_bytes()).await
    };
    let answer = match tokio::time::timeout(hook.timeout, call).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(why)) => {
            return failed(
                hook,
                &format!("failed to call webhook: Post {url:?}: {why}"),
            );
        }
        Err(_) => {
            return failed(
                hook,
                &format!("failed to call webhook: Post {url:?}: context deadline exceeded"),
            );
        }
    };
    let parsed: Value = match serde_json::from_slice(&answer) {
        Ok(v) => v,
        Err(e) => return failed(hook, &format!("received invalid webhook response: {e}")),
    };
    let got = (
        parsed
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or(""),
        parsed.get("kind").and_then(Value::as_str).unwrap_or(""),
    );
    if got != (hook.review_version, "AdmissionReview") {
        return failed(
            hook,
            &format!(
                "received invalid webhook response: expected webhook response of {}, Kind=AdmissionReview, got {}, Kind={}",
                hook.review_version, got.0, got.1
            ),
        );
    }
    let Some(response) = parsed.get("response").filter(|r| r.is_object()) else {
        return failed(
            hook,
            "received invalid webhook response: webhook response was absent",
        );
    };
    let answered_uid = response.get("uid").and_then(Value::as_str).unwrap_or("");
    if answered_uid != uid {
        return failed(
            hook,
            &format!(
                "received invalid webhook response: expected response.uid={uid:?}, got {answered_uid:?}"
            ),
        );
    }
    let warnings: Vec<String> = response
        .get("warnings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    // `auditAnnotations`, under the webhook's name, whatever it decided.
    for (key, value) in response
        .get("auditAnnotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if let Some(value) = value.as_str() {
            super::annotations::annotate(format!("{}/{key}", hook.name), value.to_owned());
        }
    }
    if response.get("allowed") != Some(&Value::Bool(true)) {
        return Err(denied(&hook.name, response.get("status")));
    }
    let mut outcome = Outcome {
        warnings,
        patched: None,
    };
    let Some(patch) = response
        .get("patch")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
    else {
        return Ok(outcome);
    };
    let kind = response
        .get("patchType")
        .and_then(Value::as_str)
        .unwrap_or("");
    if kind != "JSONPatch" {
        return failed(
            hook,
            &format!("received invalid webhook response: unsupported patch type {kind:?}"),
        );
    }
    let Some(object) = object else {
        return Ok(outcome);
    };
    let patch = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .map_err(|e| e.to_string())
        .and_then(|bytes| {
            serde_json::from_slice::<json_patch::Patch>(&bytes).map_err(|e| e.to_string())
        });
    let patch = match patch {
        Ok(patch) => patch,
        Err(e) => {
            return failed(hook, &format!("received invalid webhook response: {e}"));
        }
    };
    let mut patched = object.clone();
    if let Err(e) = json_patch::patch(&mut patched, &patch) {
        return failed(hook, &format!("JSONPatch failed: {e}"));
    }
    if let Some(webhook) = conversion {
        let back = request.def.group_version.api_version();
        patched = webhook
            .convert(objects, vec![patched], &back)
            .await?
            .pop()
            .ok_or_else(|| ApiError::internal("conversion returned nothing"))?;
    }
    outcome.patched = Some(patched);
    Ok(outcome)
}

/// kube's answer to a webhook that refuses: its status with "admission webhook … denied the
/// request" before the message.
fn denied(webhook: &str, status: Option<&Value>) -> ApiError {
    let status = status.cloned().unwrap_or_else(|| json!({}));
    let message = status.get("message").and_then(Value::as_str).unwrap_or("");
    let why = status.get("reason").and_then(Value::as_str).unwrap_or("");
    let denied_by = format!("admission webhook {webhook:?} denied the request");
    let message = if !message.is_empty() {
        format!("{denied_by}: {message}")
    } else if !why.is_empty() {
        format!("{denied_by}: {why}")
    } else {
        format!("{denied_by} without explanation")
    };
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    let reason = plinth_core::StatusReason::from_name(why)
        .unwrap_or(plinth_core::StatusReason::for_code(code));
    let mut error = ApiError::new(reason, message);
    *error.details = plinth_core::Details::from_status(&status);
    error.details.code = (code != reason.code()).then_some(code);
    error
}
