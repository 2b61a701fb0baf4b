//! CRD conversion webhooks (`spec.conversion.strategy: Webhook`): objects are stored in the
//! storage version and converted by the CRD's webhook — a `ConversionReview`, several objects
//! at once for a list — whenever they are read or written in another version. The answer is
//! checked as apiextensions-apiserver checks it: one object per object sent, each in the
//! version asked for, of the same kind, with the same name, namespace and uid; metadata other
//! than labels and annotations is kept from the original.

use std::sync::Arc;
use std::time::Duration;

use plinth_core::ApiError;
use serde_json::{Value, json};

use crate::callout::Endpoint;

/// How long a conversion call may take (kube-apiserver's fixed conversion timeout).
const TIMEOUT: Duration = Duration::from_secs(30);

/// A CRD's conversion webhook.
pub struct ConversionWebhook {
    /// The CRD's group.
    pub group: String,
    /// The CRD's kind.
    pub kind: String,
    /// The version objects are stored in.
    pub storage_version: String,
    endpoint: Endpoint,
    tls: Arc<rustls::ClientConfig>,
    review_version: &'static str,
}

impl std::fmt::Debug for ConversionWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConversionWebhook")
            .field("group", &self.group)
            .field("kind", &self.kind)
            .field("storage_version", &self.storage_version)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

fn api_version_of(object: &Value) -> &str {
    object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
}

impl ConversionWebhook {
    /// The webhook of a CRD that converts by webhook (`None` for `strategy: None`, or a
    /// webhook whose `caBundle` does not parse — then its versions are served as they are
    /// stored, with a log line).
    pub fn of(crd: &Value) -> Option<Arc<Self>> {
        let conversion = crd.pointer("/spec/conversion")?;
        if conversion.get("strategy").and_then(Value::as_str) != Some("Webhook") {
            return None;
        }
        let webhook = conversion.get("webhook")?;
        let client = webhook.get("clientConfig")?;
        let bundle = client.get("caBundle").and_then(Value::as_str).unwrap_or("");
        let tls = match crate::callout::tls(bundle) {
            Ok(tls) => Arc::new(tls),
            Err(e) => {
                tracing::warn!(crd = ?crd.pointer("/metadata/name"), error = %e, "conversion webhook unusable");
                return None;
            }
        };
        let versions: Vec<&str> = webhook
            .get("conversionReviewVersions")
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let review_version = if versions.contains(&"v1") || versions.is_empty() {
            "apiextensions.k8s.io/v1"
        } else {
            "apiextensions.k8s.io/v1beta1"
        };
        let storage_version = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|v| v.get("storage") == Some(&Value::Bool(true)))
            .and_then(|v| v.get("name"))
            .and_then(Value::as_str)?
            .to_owned();
        let text = |path: &str| {
            crd.pointer(path)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        Some(Arc::new(Self {
            group: text("/spec/group"),
            kind: text("/spec/names/kind"),
            storage_version,
            endpoint: Endpoint::of(client),
            tls,
            review_version,
        }))
    }

    /// `group/version`.
    pub fn api_version(&self, version: &str) -> String {
        format!("{}/{version}", self.group)
    }

    /// The objects in `desired` (an apiVersion); those already in it are not sent.
    ///
    /// # Errors
    /// 500 with kube's "conversion webhook for … failed" when the call fails or its answer
    /// does not hold.
    pub async fn convert(
        &self,
        services: &dyn crate::services::ServiceResolver,
        objects: Vec<Value>,
        desired: &str,
    ) -> Result<Vec<Value>, ApiError> {
        let pending: Vec<usize> = (0..objects.len())
            .filter(|i| api_version_of(&objects[*i]) != desired)
            .collect();
        if pending.is_empty() {
            return Ok(objects);
        }
        let from = api_version_of(&objects[pending[0]]).to_owned();
        let gvk = format!("{from}, Kind={}", self.kind);
        let failed =
            |why: String| ApiError::internal(format!("conversion webhook for {gvk} failed: {why}"));
        let sent: Vec<&Value> = pending.iter().map(|i| &objects[*i]).collect();
        let uid = uuid::Uuid::new_v4().to_string();
        let review = json!({"apiVersion": self.review_version, "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": desired, "objects": sent}});
        let url = crate::callout::url(&self.endpoint, TIMEOUT);
        let call = async {
            let at = crate::callout::address(&self.endpoint, services)
                .await
                .map_err(|e| e.to_string())?;
            crate::callout::post(&self.tls, &url, at, review.to_string().into_bytes()).await
        };
        let answer = tokio::time::timeout(TIMEOUT, call)
            .await
            .map_err(|_| failed(format!("Post {url:?}: context deadline exceeded")))?
            .map_err(|why| failed(format!("Post {url:?}: {why}")))?;
        let answer: Value = serde_json::from_slice(&answer)
            .map_err(|e| failed(format!("unmarshal response: {e}")))?;
        let response = answer
            .get("response")
            .filter(|r| r.is_object())
            .ok_or_else(|| failed("no response provided".into()))?;
        if response.get("uid").and_then(Value::as_str) != Some(uid.as_str()) {
            return Err(failed(format!(
                "expected response.uid={uid:?}, got {:?}",
                response.get("uid").and_then(Value::as_str).unwrap_or("")
            )));
        }
        let result = response.get("result").unwrap_or(&Value::Null);
        if result.get("status").and_then(Value::as_str) != Some("Success") {
            let message = result.get("message").and_then(Value::as_str).unwrap_or("");
            return Err(ApiError::internal(format!(
                "conversion webhook for {gvk} returned failure: {message}"
            )));
        }
        let converted = response
            .get("convertedObjects")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if converted.len() != pending.len() {
            return Err(failed(format!(
                "returned {} objects, expected {}",
                converted.len(),
                pending.len()
            )));
        }
        let mut objects = objects;
        for (n, (index, mut object)) in pending.into_iter().zip(converted).enumerate() {
            let original = &objects[index];
            let invalid =
                |why: String| failed(format!("invalid converted object at index {n}: {why}"));
            if api_version_of(&object) != desired {
                return Err(invalid(format!(
                    "invalid apiVersion {:?}, expected {desired:?}",
                    api_version_of(&object)
                )));
            }
            if object.get("kind") != original.get("kind") {
                return Err(invalid(format!(
                    "invalid kind {:?}, expected {:?}",
                    object.get("kind").and_then(Value::as_str).unwrap_or(""),
                    self.kind
                )));
            }
            for field in ["name", "namespace", "uid"] {
                let at = format!("/metadata/{field}");
                if object.pointer(&at) != original.pointer(&at) {
                    return Err(invalid(format!("must not change metadata.{field}")));
                }
            }
            // Labels and annotations are the webhook's to change; the rest of metadata stays.
            let mut metadata = original
                .get("metadata")
                .cloned()
                .unwrap_or_else(|| json!({}));
            for field in ["labels", "annotations"] {
                match object.pointer(&format!("/metadata/{field}")) {
                    Some(value) => metadata[field] = value.clone(),
                    None => {
                        if let Some(map) = metadata.as_object_mut() {
                            map.remove(field);
                        }
                    }
                }
            }
            object["metadata"] = metadata;
            objects[index] = object;
        }
        Ok(objects)
    }
}
