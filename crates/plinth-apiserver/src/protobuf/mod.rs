//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! which client-go's typed clients send — `kubectl create configmap|secret|namespace|
//! serviceaccount` among them. A body is `k8s\0` followed by a `runtime.Unknown` whose `raw`
//! holds the object; the messages below declare the fields of upstream's `generated.proto`
//! (same numbers) for the kinds typed clients write, and are turned into the JSON form the
//! registry works on. Responses are written by `encode` from the tables in `types`, for the
//! built-in types; the rest is answered in JSON, which those clients accept.

mod encode;
mod types;

use std::collections::BTreeMap;

use base64::Engine;
use plinth_core::ApiError;
use plinth_core::meta::{format_micro_time, format_time};
use prost::Message;
use serde_json::{Map, Value, json};

/// The media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
const MAGIC: &[u8] = b"k8s\0";

#[derive(Clone, PartialEq, Message)]
struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    kind: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    raw: Option<Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    content_encoding: Option<String>,
    #[prost(string, optional, tag = "4")]
    content_type: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct Time {
    #[prost(int64, optional, tag = "1")]
    seconds: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    nanos: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
struct OwnerReference {
    #[prost(string, optional, tag = "1")]
    kind: Option<String>,
    #[prost(string, optional, tag = "3")]
    name: Option<String>,
    #[prost(string, optional, tag = "4")]
    uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    api_version: Option<String>,
    #[prost(bool, optional, tag = "6")]
    controller: Option<bool>,
    #[prost(bool, optional, tag = "7")]
    block_owner_deletion: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "5")]
    uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    generation: Option<i64>,
    #[prost(message, optional, tag = "8")]
    creation_timestamp: Option<Time>,
    #[prost(message, optional, tag = "9")]
    deletion_timestamp: Option<Time>,
    #[prost(int64, optional, tag = "10")]
    deletion_grace_period_seconds: Option<i64>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    owner_references: Vec<OwnerReference>,
    #[prost(string, repeated, tag = "14")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct ConfigMap {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(btree_map = "string, string", tag = "2")]
    data: BTreeMap<String, String>,
    #[prost(btree_map = "string, bytes", tag = "3")]
    binary_data: BTreeMap<String, Vec<u8>>,
    #[prost(bool, optional, tag = "4")]
    immutable: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct Secret {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(btree_map = "string, bytes", tag = "2")]
    data: BTreeMap<String, Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    r#type: Option<String>,
    #[prost(btree_map = "string, string", tag = "4")]
    string_data: BTreeMap<String, String>,
    #[prost(bool, optional, tag = "5")]
    immutable: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct NamespaceSpec {
    #[prost(string, repeated, tag = "1")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct Namespace {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<NamespaceSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct ObjectReference {
    #[prost(string, optional, tag = "1")]
    kind: Option<String>,
    #[prost(string, optional, tag = "2")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "3")]
    name: Option<String>,
    #[prost(string, optional, tag = "4")]
    uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(string, optional, tag = "7")]
    field_path: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct LocalObjectReference {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct ServiceAccount {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, repeated, tag = "2")]
    secrets: Vec<ObjectReference>,
    #[prost(message, repeated, tag = "3")]
    image_pull_secrets: Vec<LocalObjectReference>,
    #[prost(bool, optional, tag = "4")]
    automount_service_account_token: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct LeaseSpec {
    #[prost(string, optional, tag = "1")]
    holder_identity: Option<String>,
    #[prost(int32, optional, tag = "2")]
    lease_duration_seconds: Option<i32>,
    #[prost(message, optional, tag = "3")]
    acquire_time: Option<Time>,
    #[prost(message, optional, tag = "4")]
    renew_time: Option<Time>,
    #[prost(int32, optional, tag = "5")]
    lease_transitions: Option<i32>,
    #[prost(string, optional, tag = "6")]
    strategy: Option<String>,
    #[prost(string, optional, tag = "7")]
    preferred_holder: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct Lease {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<LeaseSpec>,
}

/// A string field as JSON; Go writes unset strings as empty ones, which JSON leaves out.
fn text(value: &Option<String>) -> Option<Value> {
    value.as_ref().filter(|s| !s.is_empty()).map(|s| json!(s))
}

/// Inserts `value` under `key` if it is set.
fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        map.insert(key.into(), value);
    }
}

fn time(t: &Option<Time>, micro: bool) -> Option<Value> {
    let t = t.as_ref()?;
    let seconds = t.seconds.unwrap_or(0);
    Some(if micro {
        json!(format_micro_time(
            seconds * 1_000_000 + i64::from(t.nanos.unwrap_or(0)) / 1000
        ))
    } else {
        json!(format_time(seconds))
    })
}

fn strings(map: &BTreeMap<String, String>) -> Option<Value> {
    (!map.is_empty()).then(|| json!(map))
}

fn bytes_map(map: &BTreeMap<String, Vec<u8>>) -> Option<Value> {
    (!map.is_empty()).then(|| {
        Value::Object(
            map.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        json!(base64::engine::general_purpose::STANDARD.encode(v)),
                    )
                })
                .collect(),
        )
    })
}

fn meta(m: &Option<ObjectMeta>) -> Value {
    let Some(m) = m else { return json!({}) };
    let mut out = Map::new();
    put(&mut out, "name", text(&m.name));
    put(&mut out, "generateName", text(&m.generate_name));
    put(&mut out, "namespace", text(&m.namespace));
    put(&mut out, "uid", text(&m.uid));
    put(&mut out, "resourceVersion", text(&m.resource_version));
    put(
        &mut out,
        "generation",
        m.generation.filter(|g| *g != 0).map(Value::from),
    );
    put(
        &mut out,
        "creationTimestamp",
        time(&m.creation_timestamp, false),
    );
    put(
        &mut out,
        "deletionTimestamp",
        time(&m.deletion_timestamp, false),
    );
    put(
        &mut out,
        "deletionGracePeriodSeconds",
        m.deletion_grace_period_seconds.map(Value::from),
    );
    put(&mut out, "labels", strings(&m.labels));
    put(&mut out, "annotations", strings(&m.annotations));
    if !m.owner_references.is_empty() {
        let refs: Vec<Value> = m
            .owner_references
            .iter()
            .map(|r| {
                let mut o = Map::new();
                put(&mut o, "apiVersion", text(&r.api_version));
                put(&mut o, "kind", text(&r.kind));
                put(&mut o, "name", text(&r.name));
                put(&mut o, "uid", text(&r.uid));
                put(&mut o, "controller", r.controller.map(Value::from));
                put(
                    &mut o,
                    "blockOwnerDeletion",
                    r.block_owner_deletion.map(Value::from),
                );
                Value::Object(o)
            })
            .collect();
        out.insert("ownerReferences".into(), Value::Array(refs));
    }
    if !m.finalizers.is_empty() {
        out.insert("finalizers".into(), json!(m.finalizers));
    }
    Value::Object(out)
}

fn bad(kind: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("the protobuf body is not a valid {kind}: {e}"))
}

/// Decodes a protobuf body into the JSON form of the object.
///
/// # Errors
/// 415 for a kind this server takes only as JSON; 400 for a malformed body.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let raw = body.strip_prefix(MAGIC).ok_or_else(|| {
        ApiError::bad_request("the protobuf body does not start with the Kubernetes magic number")
    })?;
    let unknown = Unknown::decode(raw).map_err(|e| bad("runtime.Unknown", e))?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    if unknown
        .content_encoding
        .as_deref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(ApiError::unsupported_media_type(
            "application/vnd.kubernetes.protobuf with a content encoding",
        ));
    }
    let raw = unknown.raw.unwrap_or_default();
    let mut object = match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => {
            let m = ConfigMap::decode(raw.as_slice()).map_err(|e| bad("ConfigMap", e))?;
            let mut o = Map::new();
            o.insert("metadata".into(), meta(&m.metadata));
            put(&mut o, "data", strings(&m.data));
            put(&mut o, "binaryData", bytes_map(&m.binary_data));
            put(&mut o, "immutable", m.immutable.map(Value::from));
            o
        }
        ("v1", "Secret") => {
            let m = Secret::decode(raw.as_slice()).map_err(|e| bad("Secret", e))?;
            let mut o = Map::new();
            o.insert("metadata".into(), meta(&m.metadata));
            put(&mut o, "data", bytes_map(&m.data));
            put(&mut o, "stringData", strings(&m.string_data));
            put(&mut o, "type", text(&m.r#type));
            put(&mut o, "immutable", m.immutable.map(Value::from));
            o
        }
        ("v1", "Namespace") => {
            let m = Namespace::decode(raw.as_slice()).map_err(|e| bad("Namespace", e))?;
            let mut o = Map::new();
            o.insert("metadata".into(), meta(&m.metadata));
            if let Some(spec) = m.spec.filter(|s| !s.finalizers.is_empty()) {
                o.insert("spec".into(), json!({"finalizers": spec.finalizers}));
            }
            o
        }
        ("v1", "ServiceAccount") => {
            let m = ServiceAccount::decode(raw.as_slice()).map_err(|e| bad("ServiceAccount", e))?;
            let mut o = Map::new();
            o.insert("metadata".into(), meta(&m.metadata));
            if !m.secrets.is_empty() {
                let secrets: Vec<Value> = m
                    .secrets
                    .iter()
                    .map(|r| {
                        let mut s = Map::new();
                        put(&mut s, "kind", text(&r.kind));
                        put(&mut s, "namespace", text(&r.namespace));
                        put(&mut s, "name", text(&r.name));
                        put(&mut s, "uid", text(&r.uid));
                        put(&mut s, "apiVersion", text(&r.api_version));
                        put(&mut s, "resourceVersion", text(&r.resource_version));
                        put(&mut s, "fieldPath", text(&r.field_path));
                        Value::Object(s)
                    })
                    .collect();
                o.insert("secrets".into(), Value::Array(secrets));
            }
            if !m.image_pull_secrets.is_empty() {
                o.insert(
                    "imagePullSecrets".into(),
                    m.image_pull_secrets
                        .iter()
                        .map(|r| json!({"name": r.name.clone().unwrap_or_default()}))
                        .collect(),
                );
            }
            put(
                &mut o,
                "automountServiceAccountToken",
                m.automount_service_account_token.map(Value::from),
            );
            o
        }
        ("coordination.k8s.io/v1", "Lease") => {
            let m = Lease::decode(raw.as_slice()).map_err(|e| bad("Lease", e))?;
            let mut o = Map::new();
            o.insert("metadata".into(), meta(&m.metadata));
            if let Some(spec) = m.spec {
                let mut s = Map::new();
                put(&mut s, "holderIdentity", text(&spec.holder_identity));
                put(
                    &mut s,
                    "leaseDurationSeconds",
                    spec.lease_duration_seconds.map(Value::from),
                );
                put(&mut s, "acquireTime", time(&spec.acquire_time, true));
                put(&mut s, "renewTime", time(&spec.renew_time, true));
                put(
                    &mut s,
                    "leaseTransitions",
                    spec.lease_transitions.map(Value::from),
                );
                put(&mut s, "strategy", text(&spec.strategy));
                put(&mut s, "preferredHolder", text(&spec.preferred_holder));
                o.insert("spec".into(), Value::Object(s));
            }
            o
        }
        _ => {
            return Err(ApiError::unsupported_media_type(&format!(
                "{MEDIA_TYPE} for {kind} {api_version} (send application/json)"
            )));
        }
    };
    object.insert("apiVersion".into(), json!(api_version));
    object.insert("kind".into(), json!(kind));
    Ok(Value::Object(object))
}

pub use encode::Unmapped;

/// The media type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// Whether objects of `kind` in `api_version` can be answered in protobuf (built-in types).
pub fn has_message(api_version: &str, kind: &str) -> bool {
    types::message_of(api_version, kind).is_some()
}

fn type_meta(object: &Value) -> (&str, &str) {
    let text = |f: &str| object.get(f).and_then(Value::as_str).unwrap_or("");
    (text("apiVersion"), text("kind"))
}

/// An object's protobuf message, without the envelope (its `apiVersion` and `kind` say which
/// message).
///
/// # Errors
/// [`Unmapped`] when the type has no message or the object a field its message lacks.
pub fn encode_message(object: &Value) -> Result<Vec<u8>, Unmapped> {
    let (api_version, kind) = type_meta(object);
    let fields = types::message_of(api_version, kind).ok_or_else(|| Unmapped(kind.to_owned()))?;
    encode::message(fields, object, "")
}

/// `raw`, the message of an object of `api_version`/`kind`, in the `k8s\0` envelope.
pub fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    encode::envelope(api_version, kind, raw)
}

/// A list of `api_version`/`list_kind` from its `metadata` and its items' messages.
///
/// # Errors
/// [`Unmapped`] for list metadata the `ListMeta` message lacks.
pub fn encode_list_of<T: AsRef<[u8]>>(
    api_version: &str,
    list_kind: &str,
    metadata: &Value,
    items: &[T],
) -> Result<Vec<u8>, Unmapped> {
    let raw = encode::list(metadata, items)?;
    Ok(encode::envelope(api_version, list_kind, &raw))
}

/// A watch frame of an event whose object is already enveloped (`object`).
pub fn watch_frame(api_version: &str, event_type: &str, object: &[u8]) -> Vec<u8> {
    encode::watch_frame(api_version, event_type, object)
}

/// An object (its `apiVersion` and `kind` say which) in its protobuf envelope.
///
/// # Errors
/// [`Unmapped`] when the type has no message or the object a field its message lacks.
pub fn encode_object(object: &Value) -> Result<Vec<u8>, Unmapped> {
    let (api_version, kind) = type_meta(object);
    Ok(encode::envelope(
        api_version,
        kind,
        &encode_message(object)?,
    ))
}

/// A list (`metadata`, and `items` that carry their `apiVersion` and `kind`) as its `…List`
/// message, enveloped.
///
/// # Errors
/// As [`encode_object`], for any item.
pub fn encode_list(list: &Value) -> Result<Vec<u8>, Unmapped> {
    let (api_version, kind) = type_meta(list);
    let items = list
        .get("items")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(encode_message)
        .collect::<Result<Vec<_>, _>>()?;
    let empty = json!({});
    encode_list_of(
        api_version,
        kind,
        list.get("metadata").unwrap_or(&empty),
        &items,
    )
}

/// One frame of a protobuf watch stream of a resource of `api_version`: the event
/// (`ADDED`, …) and its object.
///
/// # Errors
/// As [`encode_object`].
pub fn encode_watch_event(
    api_version: &str,
    event_type: &str,
    object: &Value,
) -> Result<Vec<u8>, Unmapped> {
    Ok(encode::watch_frame(
        api_version,
        event_type,
        &encode_object(object)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut body = MAGIC.to_vec();
        body.extend(unknown.encode_to_vec());
        body
    }

    #[test]
    fn config_maps_decode_to_json() {
        let cm = ConfigMap {
            metadata: Some(ObjectMeta {
                name: Some("test".into()),
                namespace: Some("default".into()),
                ..Default::default()
            }),
            data: BTreeMap::from([("a".to_owned(), "b".to_owned())]),
            binary_data: BTreeMap::from([("bin".to_owned(), vec![0, 1, 2])]),
            immutable: None,
        };
        let object = decode(&envelope("v1", "ConfigMap", cm.encode_to_vec())).unwrap();
        assert_eq!(
            object,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "test", "namespace": "default"},
                   "data": {"a": "b"}, "binaryData": {"bin": "AAEC"}})
        );
    }

    #[test]
    fn leases_keep_micro_times() {
        let lease = Lease {
            metadata: Some(ObjectMeta {
                name: Some("l".into()),
                ..Default::default()
            }),
            spec: Some(LeaseSpec {
                holder_identity: Some("me".into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(Time {
                    seconds: Some(1_700_000_000),
                    nanos: Some(123_456_000),
                }),
                ..Default::default()
            }),
        };
        let object = decode(&envelope(
            "coordination.k8s.io/v1",
            "Lease",
            lease.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(object["spec"]["renewTime"], "2023-11-14T22:13:20.123456Z");
        assert_eq!(object["spec"]["leaseDurationSeconds"], 15);
    }

    #[test]
    fn malformed_and_unknown_bodies_are_client_errors() {
        assert_eq!(decode(b"nope").unwrap_err().code(), 400);
        assert_eq!(decode(b"k8s\0\xff\xff").unwrap_err().code(), 400);
        assert_eq!(
            decode(&envelope("apps/v1", "Deployment", vec![]))
                .unwrap_err()
                .code(),
            415
        );
    }
}
