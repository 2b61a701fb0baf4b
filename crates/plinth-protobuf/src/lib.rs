//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`) of built-in objects,
//! to and from their JSON form. Depends on `plinth-core` only: no HTTP, no storage.
//!
//! client-go's typed clients send it and ask for it first. A body is `k8s\0` followed by a
//! `runtime.Unknown` whose `raw` holds the object. Each built-in type's message is one table
//! (upstream's `generated.proto` field numbers and shapes): `meta` (ObjectMeta and the other
//! `meta.k8s.io` messages every table embeds), `types` (written by hand), `generated` (by
//! `scripts/protobuf-tables.py`); `encode` writes any of them from the JSON form, `decode`
//! reads any of them into it. Custom resources have none and are JSON, as kube-apiserver
//! serves them.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod decode;
mod encode;
mod generated;
mod json;
mod meta;
mod types;

pub use json::to_json;
use plinth_core::ApiError;
use prost::Message;
use serde_json::{Value, json};

/// The message of the built-in type `kind` of `apiVersion`, if it has one.
fn message_of(api_version: &str, kind: &str) -> Option<&'static [encode::Field]> {
    generated::message_of(api_version, kind).or_else(|| types::message_of(api_version, kind))
}

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
    let Some(fields) = message_of(&api_version, &kind) else {
        return Err(ApiError::unsupported_media_type(&format!(
            "{MEDIA_TYPE} for {kind} {api_version} (send application/json)"
        )));
    };
    let raw = unknown.raw.unwrap_or_default();
    let mut object = decode::message(fields, &raw).map_err(|e| bad(&kind, e))?;
    object.entry("metadata").or_insert_with(|| json!({}));
    object.insert("apiVersion".into(), json!(api_version));
    object.insert("kind".into(), json!(kind));
    Ok(Value::Object(object))
}

pub use encode::Unmapped;

/// The media type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// Whether objects of `kind` in `api_version` can be answered in protobuf (built-in types).
pub fn has_message(api_version: &str, kind: &str) -> bool {
    message_of(api_version, kind).is_some()
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
    let fields = message_of(api_version, kind).ok_or_else(|| Unmapped(kind.to_owned()))?;
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

/// The start of [`encode_list_of`]'s bytes for items of `item_lengths` (the envelope, the
/// list's metadata): written first, then each item after [`list_item_prefix`], it makes the
/// same bytes without the whole list in memory.
///
/// # Errors
/// [`Unmapped`] for metadata the list's message lacks.
pub fn list_head(
    api_version: &str,
    list_kind: &str,
    metadata: &Value,
    item_lengths: impl IntoIterator<Item = usize>,
) -> Result<Vec<u8>, Unmapped> {
    encode::list_head(api_version, list_kind, metadata, item_lengths)
}

/// Appends what precedes an encoded item of `len` bytes in a list (see [`list_head`]).
pub fn list_item_prefix(len: usize, out: &mut Vec<u8>) {
    encode::list_item_prefix(len, out);
}

/// A watch frame of an event whose object is already enveloped (`object`).
pub fn watch_frame(event_type: &str, object: &[u8]) -> Vec<u8> {
    encode::watch_frame(event_type, object)
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

/// One frame of a protobuf watch stream: the event (`ADDED`, …) and its object.
///
/// # Errors
/// As [`encode_object`].
pub fn encode_watch_event(event_type: &str, object: &Value) -> Result<Vec<u8>, Unmapped> {
    Ok(encode::watch_frame(event_type, &encode_object(object)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::api::coordination::v1 as coordination;
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;

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
        // Encoded by upstream's generated bindings, as Go writes it (empty strings included).
        let cm = core::ConfigMap {
            metadata: Some(meta::ObjectMeta {
                name: Some("test".into()),
                namespace: Some("default".into()),
                generate_name: Some(String::new()),
                ..Default::default()
            }),
            data: [
                ("a".to_owned(), "b".to_owned()),
                ("e".to_owned(), String::new()),
            ]
            .into(),
            binary_data: [("bin".to_owned(), vec![0, 1, 2])].into(),
            immutable: Some(false),
        };
        let object = decode(&envelope("v1", "ConfigMap", cm.encode_to_vec())).unwrap();
        assert_eq!(
            object,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "test", "namespace": "default"},
                   "data": {"a": "b", "e": ""}, "binaryData": {"bin": "AAEC"}, "immutable": false})
        );
    }

    #[test]
    fn leases_keep_micro_times() {
        let lease = coordination::Lease {
            metadata: Some(meta::ObjectMeta {
                name: Some("l".into()),
                ..Default::default()
            }),
            spec: Some(coordination::LeaseSpec {
                holder_identity: Some("me".into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(meta::MicroTime {
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
        assert_eq!(object["spec"]["holderIdentity"], "me");
    }

    #[test]
    fn what_is_encoded_decodes_to_the_same_json() {
        for object in [
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "labels": {"a": "b"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u", "controller": true}]},
                "type": "Opaque", "data": {"k": "dmFsdWU="}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "b", "namespace": "team"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
                "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}]}),
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "metadata": {}, "spec": {"resourceAttributes": {"verb": "update", "group": "example.com",
                    "resource": "widgets", "subresource": "status", "namespace": "team"}}}),
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
                "involvedObject": {"kind": "Pod", "name": "p"}, "count": -3,
                "eventTime": "2026-01-01T00:00:00.000001Z", "firstTimestamp": "2026-01-01T00:00:00Z"}),
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {},
                "spec": {"token": "abc", "audiences": ["api"]},
                "status": {"authenticated": true, "user": {"username": "u", "groups": ["g"]}}}),
            // A map of times (client-go's UpdateStatus of a PodDisruptionBudget).
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "p"},
                "spec": {"minAvailable": 1},
                "status": {"disruptedPods": {"web-1": "2026-01-01T00:00:00Z"}, "observedGeneration": 1}}),
        ] {
            let body = encode_object(&object).unwrap();
            assert_eq!(decode(&body).unwrap(), object);
        }
    }

    /// A Deployment as `kubectl create deployment` sends it, with what the generated tables
    /// add: a probe's inlined handler, a volume's inlined source, quantities, int-or-strings.
    #[test]
    fn workloads_decode_from_upstreams_bindings() {
        use k8s_pb::api::apps::v1 as apps;
        use k8s_pb::apimachinery::pkg::api::resource::Quantity;
        use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
        let container = core::Container {
            name: Some("web".into()),
            image: Some("redis:7".into()),
            ports: vec![core::ContainerPort {
                container_port: Some(6379),
                ..Default::default()
            }],
            resources: Some(core::ResourceRequirements {
                limits: [(
                    "cpu".to_owned(),
                    Quantity {
                        string: Some("500m".into()),
                    },
                )]
                .into(),
                ..Default::default()
            }),
            readiness_probe: Some(core::Probe {
                handler: Some(core::ProbeHandler {
                    http_get: Some(core::HttpGetAction {
                        path: Some("/ready".into()),
                        port: Some(IntOrString {
                            r#type: Some(1),
                            int_val: Some(0),
                            str_val: Some("http".into()),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                period_seconds: Some(5),
                ..Default::default()
            }),
            ..Default::default()
        };
        let deployment = apps::Deployment {
            metadata: Some(meta::ObjectMeta {
                name: Some("web".into()),
                ..Default::default()
            }),
            spec: Some(apps::DeploymentSpec {
                replicas: Some(3),
                selector: Some(meta::LabelSelector {
                    match_labels: [("app".to_owned(), "web".to_owned())].into(),
                    ..Default::default()
                }),
                template: Some(core::PodTemplateSpec {
                    metadata: Some(meta::ObjectMeta {
                        labels: [("app".to_owned(), "web".to_owned())].into(),
                        ..Default::default()
                    }),
                    spec: Some(core::PodSpec {
                        containers: vec![container],
                        volumes: vec![core::Volume {
                            name: Some("conf".into()),
                            volume_source: Some(core::VolumeSource {
                                config_map: Some(core::ConfigMapVolumeSource {
                                    local_object_reference: Some(core::LocalObjectReference {
                                        name: Some("settings".into()),
                                    }),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            }),
                        }],
                        ..Default::default()
                    }),
                }),
                strategy: Some(apps::DeploymentStrategy {
                    r#type: Some("RollingUpdate".into()),
                    rolling_update: Some(apps::RollingUpdateDeployment {
                        max_surge: Some(IntOrString {
                            r#type: Some(0),
                            int_val: Some(1),
                            str_val: Some(String::new()),
                        }),
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        };
        let object = decode(&envelope(
            "apps/v1",
            "Deployment",
            deployment.encode_to_vec(),
        ))
        .unwrap();
        let spec = &object["spec"];
        assert_eq!(spec["replicas"], 3);
        assert_eq!(spec["selector"], json!({"matchLabels": {"app": "web"}}));
        assert_eq!(spec["strategy"]["rollingUpdate"]["maxSurge"], 1);
        let pod = &spec["template"]["spec"];
        assert_eq!(
            pod["volumes"][0],
            json!({"name": "conf", "configMap": {"name": "settings"}})
        );
        let c = &pod["containers"][0];
        assert_eq!(c["resources"]["limits"]["cpu"], "500m");
        assert_eq!(c["ports"][0]["containerPort"], 6379);
        assert_eq!(
            c["readinessProbe"],
            json!({"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 5})
        );
        // And what is encoded decodes to the same JSON.
        assert_eq!(decode(&encode_object(&object).unwrap()).unwrap(), object);
    }

    #[test]
    fn admission_and_discovery_types_decode_from_upstreams_bindings() {
        use k8s_pb::api::admissionregistration::v1 as admission;
        use k8s_pb::api::discovery::v1 as discovery;
        let hooks = admission::ValidatingWebhookConfiguration {
            metadata: Some(meta::ObjectMeta {
                name: Some("hooks".into()),
                ..Default::default()
            }),
            webhooks: vec![admission::ValidatingWebhook {
                name: Some("check.example.com".into()),
                client_config: Some(admission::WebhookClientConfig {
                    url: Some("https://127.0.0.1:9443/check".into()),
                    ca_bundle: Some(vec![0, 1, 2]),
                    ..Default::default()
                }),
                rules: vec![admission::RuleWithOperations {
                    operations: vec!["CREATE".into()],
                    rule: Some(admission::Rule {
                        api_groups: vec!["apps".into()],
                        api_versions: vec!["v1".into()],
                        resources: vec!["deployments".into()],
                        scope: Some("Namespaced".into()),
                    }),
                }],
                side_effects: Some("None".into()),
                timeout_seconds: Some(3),
                admission_review_versions: vec!["v1".into()],
                ..Default::default()
            }],
        };
        let object = decode(&envelope(
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
            hooks.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(
            object["webhooks"][0],
            json!({"name": "check.example.com",
                "clientConfig": {"url": "https://127.0.0.1:9443/check", "caBundle": "AAEC"},
                "rules": [{"operations": ["CREATE"], "apiGroups": ["apps"], "apiVersions": ["v1"],
                    "resources": ["deployments"], "scope": "Namespaced"}],
                "sideEffects": "None", "timeoutSeconds": 3, "admissionReviewVersions": ["v1"]})
        );
        assert_eq!(decode(&encode_object(&object).unwrap()).unwrap(), object);

        let policy = admission::ValidatingAdmissionPolicy {
            metadata: Some(meta::ObjectMeta {
                name: Some("replicas".into()),
                ..Default::default()
            }),
            spec: Some(admission::ValidatingAdmissionPolicySpec {
                validations: vec![admission::Validation {
                    expression: Some("object.spec.replicas <= 5".into()),
                    message: Some("too many".into()),
                    ..Default::default()
                }],
                variables: vec![admission::Variable {
                    name: Some("n".into()),
                    expression: Some("1".into()),
                }],
                ..Default::default()
            }),
            status: None,
        };
        let object = decode(&envelope(
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy",
            policy.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(
            object["spec"],
            json!({"validations": [{"expression": "object.spec.replicas <= 5", "message": "too many"}],
                "variables": [{"name": "n", "expression": "1"}]})
        );

        let slice = discovery::EndpointSlice {
            metadata: Some(meta::ObjectMeta {
                name: Some("web-1".into()),
                ..Default::default()
            }),
            address_type: Some("IPv4".into()),
            endpoints: vec![discovery::Endpoint {
                addresses: vec!["10.0.0.7".into()],
                conditions: Some(discovery::EndpointConditions {
                    ready: Some(true),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ports: vec![discovery::EndpointPort {
                name: Some("http".into()),
                port: Some(8080),
                ..Default::default()
            }],
        };
        let object = decode(&envelope(
            "discovery.k8s.io/v1",
            "EndpointSlice",
            slice.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(object["addressType"], "IPv4");
        assert_eq!(
            object["endpoints"][0],
            json!({"addresses": ["10.0.0.7"], "conditions": {"ready": true}})
        );
        assert_eq!(object["ports"][0], json!({"name": "http", "port": 8080}));
        // DeleteOptions come in every group's version (client-go sends the resource's).
        let options = decode(&envelope("apps/v1", "DeleteOptions", vec![0x18, 0x01]))
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(options["orphanDependents"], true);
    }

    #[test]
    fn malformed_and_unknown_bodies_are_client_errors() {
        assert_eq!(decode(b"nope").unwrap_err().code(), 400);
        assert_eq!(decode(b"k8s\0\xff\xff").unwrap_err().code(), 400);
        assert_eq!(
            decode(&envelope("apps/v1", "Widget", vec![]))
                .unwrap_err()
                .code(),
            415
        );
        // A field longer than the message, a wrong wire type.
        assert_eq!(
            decode(&envelope("v1", "ConfigMap", vec![0x0a, 0x7f, 0x01]))
                .unwrap_err()
                .code(),
            400
        );
        assert_eq!(
            decode(&envelope("v1", "ConfigMap", vec![0x08, 0x01]))
                .unwrap_err()
                .code(),
            400
        );
    }
}
