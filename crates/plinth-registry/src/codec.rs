//! Objects to and from storage: JSON without `resourceVersion` (set on the way out from the
//! store's mod revision, as kube-apiserver's etcd3 storage does), the resource's view of the
//! stored form, continue tokens, and the one place storage errors become API errors.

use bytes::Bytes;
use plinth_core::meta::{metadata, metadata_mut};
use plinth_core::{ApiError, StatusReason};
use plinth_store::{KeyValue, Revision, StoreError};
use serde_json::{Value, json};

use super::MAX_BODY_BYTES;
use crate::resources::ResourceDef;

/// Turns a storage error into the API error kube-apiserver gives (the one place this happens).
pub fn store_error(def: &ResourceDef, name: &str, error: StoreError) -> ApiError {
    let resource = def.group_resource();
    match error {
        StoreError::NotFound { .. } => ApiError::not_found(&resource, name),
        StoreError::AlreadyExists { .. } => ApiError::already_exists(&resource, name),
        StoreError::Conflict { .. } => ApiError::stale(&resource, name),
        StoreError::Compacted {
            requested,
            compacted,
        } => ApiError::expired(format!(
            "too old resource version: {requested} ({})",
            compacted.unwrap_or_default()
        )),
        StoreError::FutureRevision { requested, current } => {
            let mut e = ApiError::new(
                StatusReason::Timeout,
                format!("Too large resource version: {requested}, current: {current}"),
            );
            e.details.retry_after_seconds = Some(1);
            e
        }
        StoreError::ValueTooLarge { .. } => ApiError::too_large(MAX_BODY_BYTES),
        StoreError::InvalidKey { key } => {
            ApiError::bad_request(format!("invalid object key {key:?}"))
        }
        other => ApiError::internal(other),
    }
}

/// Decodes a stored object, setting its resourceVersion.
pub(super) fn decode(kv: &KeyValue) -> Result<Value, ApiError> {
    let mut object: Value = serde_json::from_slice(&kv.value).map_err(|e| {
        ApiError::internal(format!("stored object {} is not valid JSON: {e}", kv.key))
    })?;
    if let Some(meta) = metadata_mut(&mut object) {
        meta.insert("resourceVersion".into(), json!(kv.mod_revision.to_string()));
    }
    Ok(object)
}

/// A stored object as `def` presents it, apiVersion and kind included.
pub(super) fn decode_view(def: &ResourceDef, kv: &KeyValue) -> Result<Value, ApiError> {
    Ok(view(def, decode(kv)?))
}

/// A stored (decoded) object as `def` presents it, apiVersion and kind included — but for a
/// resource converted by webhook, as stored: [`converted`] converts it.
pub(crate) fn view(def: &ResourceDef, object: Value) -> Value {
    let mut object = def.strategy.to_view(object);
    if def.conversion.is_none() {
        set_type_meta(&mut object, def);
    }
    object
}

/// An object read (and viewed) in `def`'s version: converted by the CRD's webhook when it
/// is stored in another.
pub(crate) async fn converted(
    registry: &crate::Registry,
    def: &ResourceDef,
    object: Value,
) -> Result<Value, ApiError> {
    let mut all = converted_all(registry, def, vec![object]).await?;
    all.pop()
        .ok_or_else(|| ApiError::internal("conversion returned nothing"))
}

/// [`converted`] for several objects: one review for all that need it.
pub(crate) async fn converted_all(
    registry: &crate::Registry,
    def: &ResourceDef,
    objects: Vec<Value>,
) -> Result<Vec<Value>, ApiError> {
    match &def.conversion {
        Some(webhook) => {
            webhook
                .convert(registry, objects, &def.group_version.api_version())
                .await
        }
        None => Ok(objects),
    }
}

/// Encodes an object of `def` for storage, converted to the storage version first when its
/// CRD converts by webhook.
pub(super) async fn encode_converted(
    registry: &crate::Registry,
    def: &ResourceDef,
    object: &Value,
) -> Result<Bytes, ApiError> {
    match &def.conversion {
        Some(webhook) if webhook.storage_version != def.group_version.version => {
            let storage = webhook.api_version(&webhook.storage_version);
            let mut stored = webhook
                .convert(registry, vec![object.clone()], &storage)
                .await?;
            let stored = stored
                .pop()
                .ok_or_else(|| ApiError::internal("conversion returned nothing"))?;
            encode_view(def, &stored)
        }
        _ => encode_view(def, object),
    }
}

/// Encodes an object of `def` for storage (in the stored form, without resourceVersion).
pub(super) fn encode_view(def: &ResourceDef, object: &Value) -> Result<Bytes, ApiError> {
    let mut object = def.strategy.to_storage(object.clone());
    if let Some(meta) = metadata_mut(&mut object) {
        meta.remove("resourceVersion");
        meta.remove("selfLink");
    }
    serde_json::to_vec(&object)
        .map(Bytes::from)
        .map_err(|e| ApiError::internal(format!("encode an object: {e}")))
}

/// Sets `apiVersion` and `kind` from the resource.
pub fn set_type_meta(object: &mut Value, def: &ResourceDef) {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), json!(def.group_version.api_version()));
        map.insert("kind".into(), json!(def.kind));
    }
}

/// What kube's typed round trip drops: `metadata` fields left empty (`labels: {}`,
/// `finalizers: []`, `ownerReferences: []`, `generateName: ""`, nulls) — all `omitempty` in
/// `ObjectMeta`.
pub(super) fn normalize(object: &mut Value) {
    if let Some(meta) = metadata_mut(object) {
        meta.retain(|_, v| match v {
            Value::Null => false,
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            Value::Bool(_) | Value::Number(_) => true,
        });
    }
}

/// The object's resourceVersion, if set.
pub(super) fn rv_of(object: &Value) -> Option<&str> {
    metadata(object)?
        .get("resourceVersion")?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// The revision of an object read from storage.
pub(super) fn current_rv(object: &Value) -> Revision {
    rv_of(object).and_then(|rv| rv.parse().ok()).unwrap_or(0)
}

/// The object without its resourceVersion (to compare contents).
pub(super) fn strip_rv(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(meta) = metadata_mut(&mut object) {
        meta.remove("resourceVersion");
    }
    object
}

/// Parses a resourceVersion the client sent.
///
/// # Errors
/// 400 unless it is a non-negative integer.
pub fn parse_rv(rv: &str) -> Result<Revision, ApiError> {
    rv.parse::<Revision>()
        .ok()
        .filter(|r| *r >= 0)
        .ok_or_else(|| ApiError::bad_request(format!("invalid resource version: {rv}")))
}

/// Five random characters from kube's `generateName` alphabet.
pub(super) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4().as_bytes()[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// A continue token: the revision of the first page and the key to resume after.
/// The revision of a continue token that reads at the latest revision (kube's `-1`).
pub(super) const LATEST: Revision = -1;

/// A token of kube's shape; `position`, how many objects the pages so far covered, lets the
/// next page count what follows it without walking it (clients pass tokens back unread).
pub(super) fn encode_continue(revision: Revision, start: &str, position: Option<usize>) -> String {
    use base64::Engine;
    let mut token = json!({"v": "meta.k8s.io/v1", "rv": revision, "start": start});
    if let Some(position) = position {
        token["n"] = json!(position);
    }
    base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
}

/// A continue token's JSON (URL-safe or standard base64), if it is one.
fn token_json(token: &str) -> Option<Value> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .or_else(|_| base64::engine::general_purpose::STANDARD.decode(token))
        .ok()?;
    serde_json::from_slice(&raw).ok()
}

/// The position a continue token carries, if any (a token [`decode_continue`] accepted).
pub(super) fn continue_position(token: &str) -> Option<usize> {
    usize::try_from(token_json(token)?.get("n")?.as_u64()?).ok()
}

/// The revision and resume key of a continue token.
///
/// # Errors
/// 400 with kube's message for anything that is not a token this server wrote.
pub fn decode_continue(token: &str) -> Result<(Revision, String), ApiError> {
    let invalid = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let parsed = token_json(token).ok_or_else(invalid)?;
    // -1: the latest revision (the inconsistent continuation of an expired token).
    let revision = parsed
        .get("rv")
        .and_then(Value::as_i64)
        .filter(|r| *r > 0 || *r == LATEST)
        .ok_or_else(invalid)?;
    let start = parsed
        .get("start")
        .and_then(Value::as_str)
        .ok_or_else(invalid)?;
    if start.contains("..") || start.starts_with('/') {
        return Err(invalid());
    }
    Ok((revision, start.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_metadata_fields_are_dropped() {
        let mut object = json!({"metadata": {"name": "a", "labels": {}, "finalizers": [], "ownerReferences": [], "generateName": "", "annotations": {"k": "v"}, "generation": 1}, "data": {}});
        normalize(&mut object);
        assert_eq!(
            object,
            json!({"metadata": {"name": "a", "annotations": {"k": "v"}, "generation": 1}, "data": {}})
        );
    }

    #[test]
    fn continue_tokens_round_trip_and_refuse_forgeries() {
        let token = encode_continue(42, "ns/name", None);
        assert_eq!(decode_continue(&token).unwrap(), (42, "ns/name".to_owned()));
        assert_eq!(continue_position(&token), None);
        let token = encode_continue(42, "ns/name", Some(500));
        assert_eq!(decode_continue(&token).unwrap(), (42, "ns/name".to_owned()));
        assert_eq!(continue_position(&token), Some(500));
        for bad in [
            "",
            "!!",
            "e30=",
            &encode_continue(3, "../x", None),
            &encode_continue(0, "a", None),
        ] {
            assert_eq!(decode_continue(bad).unwrap_err().code(), 400, "{bad}");
        }
    }
}
