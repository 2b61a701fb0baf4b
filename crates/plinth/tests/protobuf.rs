//! Protobuf answers (`application/vnd.kubernetes.protobuf`) of every built-in type — objects,
//! lists and watch frames — decoded with `k8s-pb` (the Kubernetes protobuf bindings, generated
//! from upstream's `.proto` files, independent of the server's tables) and compared, field by
//! field, with the JSON answers; and client-go (kubectl) negotiating protobuf for its typed
//! clients.

#![allow(clippy::unwrap_used)]

mod common;

use base64::Engine;
use common::http::Http;
use common::{Backend, Plinth};
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use prost::Message;
use serde_json::{Map, Value, json};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// A certificate request (CN=pb), for the CertificateSigningRequest case.
const CSR: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIHIMG8CAQAwDTELMAkGA1UEAwwCcGIwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNC
AASvH+GfA0RuKKv/Rp3zIBI6HUMXiLkfxdVLFgwpopN7+gym3Cle8/n9gQUgF4BK
CM9TnZCz5IlvetHr/L+ej6MtoAAwCgYIKoZIzj0EAwIDSQAwRgIhAOeQyULTISPs
otkEPeL5RekZknmyECLgOrB4wISsY1nSAiEArzhoPumg8VVYxemEYDi1xMOWnemi
sWjQyduyHaBZB8Y=
-----END CERTIFICATE REQUEST-----
";

/// Sets `key` when `value` is there (and not an empty map or list), as Go's `omitempty`.
fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    match value {
        Some(Value::Object(m)) if m.is_empty() => {}
        Some(Value::Array(a)) if a.is_empty() => {}
        Some(v) => {
            map.insert(key.to_owned(), v);
        }
        None => {}
    }
}

fn s(v: &Option<String>) -> Option<Value> {
    v.as_ref().map(|v| json!(v))
}

fn strings(m: &std::collections::BTreeMap<String, String>) -> Option<Value> {
    Some(json!(m))
}

fn bytes(m: &std::collections::BTreeMap<String, Vec<u8>>) -> Option<Value> {
    let b64 = base64::engine::general_purpose::STANDARD;
    Some(Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), json!(b64.encode(v))))
            .collect(),
    ))
}

fn time(t: &Option<meta::Time>) -> Option<Value> {
    t.as_ref()
        .map(|t| json!(plinth_core::meta::format_time(t.seconds.unwrap_or(0))))
}

fn micro(t: &Option<meta::MicroTime>) -> Option<Value> {
    t.as_ref().map(|t| {
        let micros = t.seconds.unwrap_or(0) * 1_000_000 + i64::from(t.nanos.unwrap_or(0)) / 1000;
        json!(plinth_core::meta::format_micro_time(micros))
    })
}

fn object(fields: Vec<(&str, Option<Value>)>) -> Value {
    let mut map = Map::new();
    for (k, v) in fields {
        put(&mut map, k, v);
    }
    Value::Object(map)
}

fn object_meta(m: &Option<meta::ObjectMeta>) -> Option<Value> {
    let m = m.as_ref()?;
    let owners = m
        .owner_references
        .iter()
        .map(|o| {
            object(vec![
                ("apiVersion", s(&o.api_version)),
                ("kind", s(&o.kind)),
                ("name", s(&o.name)),
                ("uid", s(&o.uid)),
                ("controller", o.controller.map(Value::from)),
                (
                    "blockOwnerDeletion",
                    o.block_owner_deletion.map(Value::from),
                ),
            ])
        })
        .collect();
    let managed = m
        .managed_fields
        .iter()
        .map(|f| {
            object(vec![
                ("manager", s(&f.manager)),
                ("operation", s(&f.operation)),
                ("apiVersion", s(&f.api_version)),
                ("time", time(&f.time)),
                ("fieldsType", s(&f.fields_type)),
                (
                    "fieldsV1",
                    f.fields_v1
                        .as_ref()
                        .and_then(|r| serde_json::from_slice(r.raw.as_deref()?).ok()),
                ),
                ("subresource", s(&f.subresource)),
            ])
        })
        .collect();
    Some(object(vec![
        ("name", s(&m.name)),
        ("generateName", s(&m.generate_name)),
        ("namespace", s(&m.namespace)),
        ("uid", s(&m.uid)),
        ("resourceVersion", s(&m.resource_version)),
        ("generation", m.generation.map(Value::from)),
        ("creationTimestamp", time(&m.creation_timestamp)),
        ("deletionTimestamp", time(&m.deletion_timestamp)),
        (
            "deletionGracePeriodSeconds",
            m.deletion_grace_period_seconds.map(Value::from),
        ),
        ("labels", strings(&m.labels)),
        ("annotations", strings(&m.annotations)),
        ("ownerReferences", Some(Value::Array(owners))),
        ("finalizers", Some(json!(m.finalizers))),
        ("managedFields", Some(Value::Array(managed))),
    ]))
}

fn object_reference(r: &Option<k8s_pb::api::core::v1::ObjectReference>) -> Option<Value> {
    let r = r.as_ref()?;
    Some(object(vec![
        ("kind", s(&r.kind)),
        ("namespace", s(&r.namespace)),
        ("name", s(&r.name)),
        ("uid", s(&r.uid)),
        ("apiVersion", s(&r.api_version)),
        ("resourceVersion", s(&r.resource_version)),
        ("fieldPath", s(&r.field_path)),
    ]))
}

fn series_json(count: Option<i32>, last: &Option<meta::MicroTime>) -> Value {
    object(vec![
        ("count", count.map(Value::from)),
        ("lastObservedTime", micro(last)),
    ])
}

type Props = k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1::JsonSchemaProps;

fn raw_json(
    j: &Option<k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1::Json>,
) -> Option<Value> {
    serde_json::from_slice(j.as_ref()?.raw.as_deref()?).ok()
}

/// A float as Go's encoding/json writes it (`5`, not `5.0`).
fn number(f: Option<f64>) -> Option<Value> {
    f.map(|f| {
        if f.fract() == 0.0 && f.abs() < 1e15 {
            json!(f as i64)
        } else {
            json!(f)
        }
    })
}

fn schema_map(m: &std::collections::BTreeMap<String, Props>) -> Option<Value> {
    Some(Value::Object(
        m.iter().map(|(k, v)| (k.clone(), schema(v))).collect(),
    ))
}

fn or_bool(
    b: &Option<
        Box<k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1::JsonSchemaPropsOrBool>,
    >,
) -> Option<Value> {
    let b = b.as_ref()?;
    Some(match &b.schema {
        Some(s) => schema(s),
        None => json!(b.allows.unwrap_or(false)),
    })
}

/// `JSONSchemaProps` as JSON.
fn schema(p: &Props) -> Value {
    let list = |v: &[Props]| Some(Value::Array(v.iter().map(schema).collect()));
    let items = p.items.as_ref().map(|i| match &i.schema {
        Some(one) => schema(one),
        None => Value::Array(i.j_son_schemas.iter().map(schema).collect()),
    });
    let dependencies = Value::Object(
        p.dependencies
            .iter()
            .map(|(k, d)| {
                let v = match &d.schema {
                    Some(one) => schema(one),
                    None => json!(d.property),
                };
                (k.clone(), v)
            })
            .collect(),
    );
    let validations = p
        .x_kubernetes_validations
        .iter()
        .map(|r| {
            object(vec![
                ("rule", s(&r.rule)),
                ("message", s(&r.message)),
                ("messageExpression", s(&r.message_expression)),
                ("reason", s(&r.reason)),
                ("fieldPath", s(&r.field_path)),
                ("optionalOldSelf", r.optional_old_self.map(Value::from)),
            ])
        })
        .collect();
    object(vec![
        ("id", s(&p.id)),
        ("$schema", s(&p.schema)),
        ("$ref", s(&p.r#ref)),
        ("description", s(&p.description)),
        ("type", s(&p.r#type)),
        ("format", s(&p.format)),
        ("title", s(&p.title)),
        ("default", raw_json(&p.default)),
        ("maximum", number(p.maximum)),
        ("exclusiveMaximum", p.exclusive_maximum.map(Value::from)),
        ("minimum", number(p.minimum)),
        ("exclusiveMinimum", p.exclusive_minimum.map(Value::from)),
        ("maxLength", p.max_length.map(Value::from)),
        ("minLength", p.min_length.map(Value::from)),
        ("pattern", s(&p.pattern)),
        ("maxItems", p.max_items.map(Value::from)),
        ("minItems", p.min_items.map(Value::from)),
        ("uniqueItems", p.unique_items.map(Value::from)),
        ("multipleOf", number(p.multiple_of)),
        (
            "enum",
            Some(Value::Array(
                p.r#enum
                    .iter()
                    .filter_map(|e| serde_json::from_slice(e.raw.as_deref()?).ok())
                    .collect(),
            )),
        ),
        ("maxProperties", p.max_properties.map(Value::from)),
        ("minProperties", p.min_properties.map(Value::from)),
        ("required", Some(json!(p.required))),
        ("items", items),
        ("allOf", list(&p.all_of)),
        ("oneOf", list(&p.one_of)),
        ("anyOf", list(&p.any_of)),
        ("not", p.not.as_ref().map(|n| schema(n))),
        ("properties", schema_map(&p.properties)),
        ("additionalProperties", or_bool(&p.additional_properties)),
        ("patternProperties", schema_map(&p.pattern_properties)),
        ("dependencies", Some(dependencies)),
        ("additionalItems", or_bool(&p.additional_items)),
        ("definitions", schema_map(&p.definitions)),
        (
            "externalDocs",
            p.external_docs
                .as_ref()
                .map(|d| object(vec![("description", s(&d.description)), ("url", s(&d.url))])),
        ),
        ("example", raw_json(&p.example)),
        ("nullable", p.nullable.map(Value::from)),
        (
            "x-kubernetes-preserve-unknown-fields",
            p.x_kubernetes_preserve_unknown_fields.map(Value::from),
        ),
        (
            "x-kubernetes-embedded-resource",
            p.x_kubernetes_embedded_resource.map(Value::from),
        ),
        (
            "x-kubernetes-int-or-string",
            p.x_kubernetes_int_or_string.map(Value::from),
        ),
        (
            "x-kubernetes-list-map-keys",
            Some(json!(p.x_kubernetes_list_map_keys)),
        ),
        ("x-kubernetes-list-type", s(&p.x_kubernetes_list_type)),
        ("x-kubernetes-map-type", s(&p.x_kubernetes_map_type)),
        ("x-kubernetes-validations", Some(Value::Array(validations))),
    ])
}

fn crd_names(
    n: &Option<k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionNames>,
) -> Option<Value> {
    let n = n.as_ref()?;
    Some(object(vec![
        ("plural", s(&n.plural)),
        ("singular", s(&n.singular)),
        ("shortNames", Some(json!(n.short_names))),
        ("kind", s(&n.kind)),
        ("listKind", s(&n.list_kind)),
        ("categories", Some(json!(n.categories))),
    ]))
}

fn crd_version(
    v: &k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion,
) -> Value {
    let subresources = v.subresources.as_ref().map(|sr| {
        object(vec![
            (
                "status",
                sr.status.as_ref().map(|_| json!({"__empty": true})),
            ),
            (
                "scale",
                sr.scale.as_ref().map(|sc| {
                    object(vec![
                        ("specReplicasPath", s(&sc.spec_replicas_path)),
                        ("statusReplicasPath", s(&sc.status_replicas_path)),
                        ("labelSelectorPath", s(&sc.label_selector_path)),
                    ])
                }),
            ),
        ])
    });
    let columns = v
        .additional_printer_columns
        .iter()
        .map(|c| {
            object(vec![
                ("name", s(&c.name)),
                ("type", s(&c.r#type)),
                ("format", s(&c.format)),
                ("description", s(&c.description)),
                ("priority", c.priority.map(Value::from)),
                ("jsonPath", s(&c.json_path)),
            ])
        })
        .collect();
    object(vec![
        ("name", s(&v.name)),
        ("served", v.served.map(Value::from)),
        ("storage", v.storage.map(Value::from)),
        ("deprecated", v.deprecated.map(Value::from)),
        ("deprecationWarning", s(&v.deprecation_warning)),
        (
            "schema",
            v.schema.as_ref().map(|sc| {
                object(vec![(
                    "openAPIV3Schema",
                    sc.open_apiv3_schema.as_ref().map(schema),
                )])
            }),
        ),
        ("subresources", subresources),
        ("additionalPrinterColumns", Some(Value::Array(columns))),
        (
            "selectableFields",
            Some(Value::Array(
                v.selectable_fields
                    .iter()
                    .map(|f| object(vec![("jsonPath", s(&f.json_path))]))
                    .collect(),
            )),
        ),
    ])
}

fn crd(raw: &[u8]) -> Value {
    use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let c = CustomResourceDefinition::decode(raw).unwrap();
    let spec = c.spec.as_ref().map(|sp| {
        object(vec![
            ("group", s(&sp.group)),
            ("names", crd_names(&sp.names)),
            ("scope", s(&sp.scope)),
            (
                "versions",
                Some(Value::Array(sp.versions.iter().map(crd_version).collect())),
            ),
            (
                "conversion",
                sp.conversion.as_ref().map(|cv| {
                    let webhook = cv.webhook.as_ref().map(|w| {
                        let client = w.client_config.as_ref().map(|c| {
                            let service = c.service.as_ref().map(|sv| {
                                object(vec![
                                    ("namespace", s(&sv.namespace)),
                                    ("name", s(&sv.name)),
                                    ("path", s(&sv.path)),
                                    ("port", sv.port.map(Value::from)),
                                ])
                            });
                            let ca = c.ca_bundle.as_ref().map(|b| {
                                json!(base64::engine::general_purpose::STANDARD.encode(b))
                            });
                            object(vec![
                                ("service", service),
                                ("caBundle", ca),
                                ("url", s(&c.url)),
                            ])
                        });
                        object(vec![
                            ("clientConfig", client),
                            (
                                "conversionReviewVersions",
                                Some(json!(w.conversion_review_versions)),
                            ),
                        ])
                    });
                    object(vec![("strategy", s(&cv.strategy)), ("webhook", webhook)])
                }),
            ),
            (
                "preserveUnknownFields",
                sp.preserve_unknown_fields.map(Value::from),
            ),
        ])
    });
    let status = c.status.as_ref().map(|st| {
        let conditions = st
            .conditions
            .iter()
            .map(|c| {
                object(vec![
                    ("type", s(&c.r#type)),
                    ("status", s(&c.status)),
                    ("lastTransitionTime", time(&c.last_transition_time)),
                    ("reason", s(&c.reason)),
                    ("message", s(&c.message)),
                    ("observedGeneration", c.observed_generation.map(Value::from)),
                ])
            })
            .collect();
        object(vec![
            ("conditions", Some(Value::Array(conditions))),
            ("acceptedNames", crd_names(&st.accepted_names)),
            ("storedVersions", Some(json!(st.stored_versions))),
            (
                "observedGeneration",
                st.observed_generation.map(Value::from),
            ),
        ])
    });
    object(vec![
        ("metadata", object_meta(&c.metadata)),
        ("spec", spec),
        ("status", status),
    ])
}

/// A CRD's JSON with `subresources.status: {}` marked as the decoder marks it (an empty object
/// would vanish under `omitempty`).
fn mark_empty_status(mut crd: Value) -> Value {
    if let Some(versions) = crd
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    {
        for v in versions {
            if let Some(status) = v.pointer_mut("/subresources/status") {
                *status = json!({"__empty": true});
            }
        }
    }
    crd
}

/// A `k8s-pb` message of `kind`, decoded from `raw`, as the JSON kube writes for it.
fn to_json(api_version: &str, kind: &str, raw: &[u8]) -> Value {
    use k8s_pb::api::{coordination, core, events};
    match (api_version, kind) {
        ("v1", "ConfigMap") => {
            let c = core::v1::ConfigMap::decode(raw).unwrap();
            object(vec![
                ("metadata", object_meta(&c.metadata)),
                ("data", strings(&c.data)),
                ("binaryData", bytes(&c.binary_data)),
                ("immutable", c.immutable.map(Value::from)),
            ])
        }
        ("v1", "Secret") => {
            let c = core::v1::Secret::decode(raw).unwrap();
            object(vec![
                ("metadata", object_meta(&c.metadata)),
                ("data", bytes(&c.data)),
                ("type", s(&c.r#type)),
                ("stringData", strings(&c.string_data)),
                ("immutable", c.immutable.map(Value::from)),
            ])
        }
        ("v1", "Namespace") => {
            let n = core::v1::Namespace::decode(raw).unwrap();
            let conditions = n.status.as_ref().map(|st| {
                Value::Array(
                    st.conditions
                        .iter()
                        .map(|c| {
                            object(vec![
                                ("type", s(&c.r#type)),
                                ("status", s(&c.status)),
                                ("lastTransitionTime", time(&c.last_transition_time)),
                                ("reason", s(&c.reason)),
                                ("message", s(&c.message)),
                            ])
                        })
                        .collect(),
                )
            });
            object(vec![
                ("metadata", object_meta(&n.metadata)),
                (
                    "spec",
                    n.spec
                        .as_ref()
                        .map(|sp| object(vec![("finalizers", Some(json!(sp.finalizers)))])),
                ),
                (
                    "status",
                    n.status.as_ref().map(|st| {
                        object(vec![("phase", s(&st.phase)), ("conditions", conditions)])
                    }),
                ),
            ])
        }
        ("v1", "ServiceAccount") => {
            let a = core::v1::ServiceAccount::decode(raw).unwrap();
            object(vec![
                ("metadata", object_meta(&a.metadata)),
                (
                    "secrets",
                    Some(Value::Array(
                        a.secrets
                            .iter()
                            .filter_map(|r| object_reference(&Some(r.clone())))
                            .collect(),
                    )),
                ),
                (
                    "imagePullSecrets",
                    Some(Value::Array(
                        a.image_pull_secrets
                            .iter()
                            .map(|r| object(vec![("name", s(&r.name))]))
                            .collect(),
                    )),
                ),
                (
                    "automountServiceAccountToken",
                    a.automount_service_account_token.map(Value::from),
                ),
            ])
        }
        ("v1", "Event") => {
            let e = core::v1::Event::decode(raw).unwrap();
            object(vec![
                ("metadata", object_meta(&e.metadata)),
                ("involvedObject", object_reference(&e.involved_object)),
                ("reason", s(&e.reason)),
                ("message", s(&e.message)),
                (
                    "source",
                    e.source.as_ref().map(|src| {
                        object(vec![
                            ("component", s(&src.component)),
                            ("host", s(&src.host)),
                        ])
                    }),
                ),
                ("firstTimestamp", time(&e.first_timestamp)),
                ("lastTimestamp", time(&e.last_timestamp)),
                ("count", e.count.map(Value::from)),
                ("type", s(&e.r#type)),
                ("eventTime", micro(&e.event_time)),
                (
                    "series",
                    e.series
                        .as_ref()
                        .map(|x| series_json(x.count, &x.last_observed_time)),
                ),
                ("action", s(&e.action)),
                ("related", object_reference(&e.related)),
                ("reportingComponent", s(&e.reporting_component)),
                ("reportingInstance", s(&e.reporting_instance)),
            ])
        }
        ("events.k8s.io/v1", "Event") => {
            let e = events::v1::Event::decode(raw).unwrap();
            object(vec![
                ("metadata", object_meta(&e.metadata)),
                ("eventTime", micro(&e.event_time)),
                (
                    "series",
                    e.series
                        .as_ref()
                        .map(|x| series_json(x.count, &x.last_observed_time)),
                ),
                ("reportingController", s(&e.reporting_controller)),
                ("reportingInstance", s(&e.reporting_instance)),
                ("action", s(&e.action)),
                ("reason", s(&e.reason)),
                ("regarding", object_reference(&e.regarding)),
                ("related", object_reference(&e.related)),
                ("note", s(&e.note)),
                ("type", s(&e.r#type)),
                (
                    "deprecatedFirstTimestamp",
                    time(&e.deprecated_first_timestamp),
                ),
                (
                    "deprecatedLastTimestamp",
                    time(&e.deprecated_last_timestamp),
                ),
                ("deprecatedCount", e.deprecated_count.map(Value::from)),
                (
                    "deprecatedSource",
                    e.deprecated_source.as_ref().map(|src| {
                        object(vec![
                            ("component", s(&src.component)),
                            ("host", s(&src.host)),
                        ])
                    }),
                ),
            ])
        }
        ("coordination.k8s.io/v1", "Lease") => {
            let l = coordination::v1::Lease::decode(raw).unwrap();
            object(vec![
                ("metadata", object_meta(&l.metadata)),
                (
                    "spec",
                    l.spec.as_ref().map(|sp| {
                        object(vec![
                            ("holderIdentity", s(&sp.holder_identity)),
                            (
                                "leaseDurationSeconds",
                                sp.lease_duration_seconds.map(Value::from),
                            ),
                            ("acquireTime", micro(&sp.acquire_time)),
                            ("renewTime", micro(&sp.renew_time)),
                            ("leaseTransitions", sp.lease_transitions.map(Value::from)),
                            ("strategy", s(&sp.strategy)),
                            ("preferredHolder", s(&sp.preferred_holder)),
                        ])
                    }),
                ),
            ])
        }
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => crd(raw),
        ("apiregistration.k8s.io/v1", "APIService") => {
            use k8s_pb::kube_aggregator::pkg::apis::apiregistration::v1 as ar;
            let a = ar::APIService::decode(raw).unwrap();
            let spec = a.spec.as_ref().map(|sp| {
                object(vec![
                    (
                        "service",
                        sp.service.as_ref().map(|r| {
                            object(vec![
                                ("namespace", s(&r.namespace)),
                                ("name", s(&r.name)),
                                ("port", r.port.map(Value::from)),
                            ])
                        }),
                    ),
                    ("group", s(&sp.group)),
                    ("version", s(&sp.version)),
                    (
                        "insecureSkipTLSVerify",
                        sp.insecure_skip_tls_verify.filter(|b| *b).map(Value::from),
                    ),
                    (
                        "groupPriorityMinimum",
                        sp.group_priority_minimum.map(Value::from),
                    ),
                    ("versionPriority", sp.version_priority.map(Value::from)),
                ])
            });
            let status = a.status.as_ref().map(|st| {
                let conditions: Vec<Value> = st
                    .conditions
                    .iter()
                    .map(|c| {
                        object(vec![
                            ("type", s(&c.r#type)),
                            ("status", s(&c.status)),
                            ("lastTransitionTime", time(&c.last_transition_time)),
                            ("reason", s(&c.reason)),
                            ("message", s(&c.message)),
                        ])
                    })
                    .collect();
                object(vec![("conditions", Some(Value::Array(conditions)))])
            });
            object(vec![
                ("metadata", object_meta(&a.metadata)),
                ("spec", spec),
                ("status", status),
            ])
        }
        ("rbac.authorization.k8s.io/v1", "Role") => {
            let r = k8s_pb::api::rbac::v1::Role::decode(raw).unwrap();
            object(vec![
                ("metadata", object_meta(&r.metadata)),
                ("rules", policy_rules(&r.rules)),
            ])
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
            let r = k8s_pb::api::rbac::v1::ClusterRole::decode(raw).unwrap();
            let aggregation = r.aggregation_rule.as_ref().map(|a| {
                let selectors: Vec<Value> = a
                    .cluster_role_selectors
                    .iter()
                    .map(|sel| object(vec![("matchLabels", strings(&sel.match_labels))]))
                    .collect();
                object(vec![(
                    "clusterRoleSelectors",
                    Some(Value::Array(selectors)),
                )])
            });
            object(vec![
                ("metadata", object_meta(&r.metadata)),
                ("rules", policy_rules(&r.rules)),
                ("aggregationRule", aggregation),
            ])
        }
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => {
            let b = k8s_pb::api::rbac::v1::RoleBinding::decode(raw).unwrap();
            let subjects: Vec<Value> = b
                .subjects
                .iter()
                .map(|x| {
                    object(vec![
                        ("kind", s(&x.kind)),
                        ("apiGroup", s(&x.api_group).filter(|g| g != "")),
                        ("name", s(&x.name)),
                        ("namespace", s(&x.namespace).filter(|n| n != "")),
                    ])
                })
                .collect();
            let role = b.role_ref.as_ref().map(|r| {
                object(vec![
                    ("apiGroup", s(&r.api_group)),
                    ("kind", s(&r.kind)),
                    ("name", s(&r.name)),
                ])
            });
            object(vec![
                ("metadata", object_meta(&b.metadata)),
                ("subjects", Some(Value::Array(subjects))),
                ("roleRef", role),
            ])
        }
        ("certificates.k8s.io/v1", "CertificateSigningRequest") => {
            let c = k8s_pb::api::certificates::v1::CertificateSigningRequest::decode(raw).unwrap();
            let b64 = base64::engine::general_purpose::STANDARD;
            let spec = c.spec.as_ref().map(|sp| {
                object(vec![
                    ("request", sp.request.as_ref().map(|r| json!(b64.encode(r)))),
                    ("signerName", s(&sp.signer_name)),
                    ("expirationSeconds", sp.expiration_seconds.map(Value::from)),
                    ("usages", Some(json!(sp.usages))),
                    ("username", s(&sp.username)),
                    ("groups", Some(json!(sp.groups))),
                ])
            });
            let status = c.status.as_ref().map(|st| {
                let conditions: Vec<Value> = st
                    .conditions
                    .iter()
                    .map(|x| {
                        object(vec![
                            ("type", s(&x.r#type)),
                            ("status", s(&x.status)),
                            ("reason", s(&x.reason)),
                            ("message", s(&x.message)),
                            ("lastUpdateTime", time(&x.last_update_time)),
                            ("lastTransitionTime", time(&x.last_transition_time)),
                        ])
                    })
                    .collect();
                object(vec![
                    ("conditions", Some(Value::Array(conditions))),
                    (
                        "certificate",
                        st.certificate.as_ref().map(|r| json!(b64.encode(r))),
                    ),
                ])
            });
            object(vec![
                ("metadata", object_meta(&c.metadata)),
                ("spec", spec),
                ("status", status),
            ])
        }
        ("flowcontrol.apiserver.k8s.io/v1", "FlowSchema") => {
            use k8s_pb::api::flowcontrol::v1 as fc;
            let f = fc::FlowSchema::decode(raw).unwrap();
            let list = |v: &Vec<String>| Some(json!(v));
            let name = |n: &Option<String>| Some(object(vec![("name", s(n))]));
            let subject = |x: &fc::Subject| {
                object(vec![
                    ("kind", s(&x.kind)),
                    ("user", x.user.as_ref().and_then(|u| name(&u.name))),
                    ("group", x.group.as_ref().and_then(|g| name(&g.name))),
                    (
                        "serviceAccount",
                        x.service_account.as_ref().map(|a| {
                            object(vec![("namespace", s(&a.namespace)), ("name", s(&a.name))])
                        }),
                    ),
                ])
            };
            let rules: Vec<Value> = f
                .spec
                .iter()
                .flat_map(|sp| &sp.rules)
                .map(|r| {
                    object(vec![
                        ("subjects", Some(r.subjects.iter().map(subject).collect())),
                        (
                            "resourceRules",
                            Some(
                                r.resource_rules
                                    .iter()
                                    .map(|x| {
                                        object(vec![
                                            ("verbs", list(&x.verbs)),
                                            ("apiGroups", list(&x.api_groups)),
                                            ("resources", list(&x.resources)),
                                            ("clusterScope", x.cluster_scope.map(Value::from)),
                                            ("namespaces", list(&x.namespaces)),
                                        ])
                                    })
                                    .collect(),
                            ),
                        ),
                        (
                            "nonResourceRules",
                            Some(
                                r.non_resource_rules
                                    .iter()
                                    .map(|x| {
                                        object(vec![
                                            ("verbs", list(&x.verbs)),
                                            ("nonResourceURLs", list(&x.non_resource_ur_ls)),
                                        ])
                                    })
                                    .collect(),
                            ),
                        ),
                    ])
                })
                .collect();
            let spec = f.spec.as_ref().map(|sp| {
                object(vec![
                    (
                        "priorityLevelConfiguration",
                        sp.priority_level_configuration
                            .as_ref()
                            .and_then(|p| name(&p.name)),
                    ),
                    (
                        "matchingPrecedence",
                        sp.matching_precedence.map(Value::from),
                    ),
                    (
                        "distinguisherMethod",
                        sp.distinguisher_method
                            .as_ref()
                            .map(|d| object(vec![("type", s(&d.r#type))])),
                    ),
                    ("rules", Some(Value::Array(rules))),
                ])
            });
            let status = f.status.as_ref().map(|st| {
                let conditions: Vec<Value> = st
                    .conditions
                    .iter()
                    .map(|x| {
                        object(vec![
                            ("type", s(&x.r#type)),
                            ("status", s(&x.status)),
                            ("lastTransitionTime", time(&x.last_transition_time)),
                            ("reason", s(&x.reason)),
                            ("message", s(&x.message)),
                        ])
                    })
                    .collect();
                object(vec![("conditions", Some(Value::Array(conditions)))])
            });
            object(vec![
                ("metadata", object_meta(&f.metadata)),
                ("spec", spec),
                ("status", status),
            ])
        }
        ("flowcontrol.apiserver.k8s.io/v1", "PriorityLevelConfiguration") => {
            let p = k8s_pb::api::flowcontrol::v1::PriorityLevelConfiguration::decode(raw).unwrap();
            let int = |n: Option<i32>| n.map(Value::from);
            let spec = p.spec.as_ref().map(|sp| {
                object(vec![
                    ("type", s(&sp.r#type)),
                    (
                        "limited",
                        sp.limited.as_ref().map(|l| {
                            object(vec![
                                (
                                    "nominalConcurrencyShares",
                                    int(l.nominal_concurrency_shares),
                                ),
                                (
                                    "limitResponse",
                                    l.limit_response.as_ref().map(|r| {
                                        object(vec![
                                            ("type", s(&r.r#type)),
                                            (
                                                "queuing",
                                                r.queuing.as_ref().map(|q| {
                                                    object(vec![
                                                        ("queues", int(q.queues)),
                                                        ("handSize", int(q.hand_size)),
                                                        (
                                                            "queueLengthLimit",
                                                            int(q.queue_length_limit),
                                                        ),
                                                    ])
                                                }),
                                            ),
                                        ])
                                    }),
                                ),
                                ("lendablePercent", int(l.lendable_percent)),
                                ("borrowingLimitPercent", int(l.borrowing_limit_percent)),
                            ])
                        }),
                    ),
                    (
                        "exempt",
                        sp.exempt.as_ref().map(|e| {
                            object(vec![
                                (
                                    "nominalConcurrencyShares",
                                    int(e.nominal_concurrency_shares),
                                ),
                                ("lendablePercent", int(e.lendable_percent)),
                            ])
                        }),
                    ),
                ])
            });
            object(vec![("metadata", object_meta(&p.metadata)), ("spec", spec)])
        }
        other => panic!("no decoder for {other:?}"),
    }
}

fn policy_rules(rules: &[k8s_pb::api::rbac::v1::PolicyRule]) -> Option<Value> {
    let list = |v: &Vec<String>| Some(json!(v));
    Some(Value::Array(
        rules
            .iter()
            .map(|r| {
                object(vec![
                    ("verbs", list(&r.verbs)),
                    ("apiGroups", list(&r.api_groups)),
                    ("resources", list(&r.resources)),
                    ("resourceNames", list(&r.resource_names)),
                    ("nonResourceURLs", list(&r.non_resource_ur_ls)),
                ])
            })
            .collect(),
    ))
}

/// Where two values first differ (a JSON pointer and both sides), for failure messages.
fn difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => x
            .keys()
            .chain(y.keys().filter(|k| !x.contains_key(*k)))
            .find_map(|k| {
                difference(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &format!("{at}/{k}"),
                )
            }),
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| difference(p, q, &format!("{at}/{i}"))),
        _ if a == b => None,
        _ => Some(format!("{at}: {a} vs {b}")),
    }
}

/// Splits `k8s\0` + `runtime.Unknown`: apiVersion, kind, raw.
fn unwrap(body: &[u8]) -> (String, String, Vec<u8>) {
    let rest = body.strip_prefix(b"k8s\0").expect("the k8s\\0 magic");
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(rest).unwrap();
    let type_meta = unknown.type_meta.unwrap_or_default();
    (
        type_meta.api_version.unwrap_or_default(),
        type_meta.kind.unwrap_or_default(),
        unknown.raw.unwrap_or_default(),
    )
}

/// The JSON object without `apiVersion` and `kind` (the envelope carries them).
fn body_of(mut object: Value) -> Value {
    if object["kind"] == "CustomResourceDefinition" {
        object = mark_empty_status(object);
    }
    if let Some(map) = object.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
    object
}

/// Decodes a protobuf list and compares it, item by item, with the JSON list at the same
/// revision (other writers — the server's own controllers — may move the cache on between
/// two reads).
fn check_list(http: &Http, path: &str, api_version: &str, kind: &str) {
    let reply = http.get_as(path, PROTOBUF);
    assert_eq!(reply.code, 200, "{path}: {}", reply.body);
    let (list_version, list_kind, raw) = unwrap(&reply.bytes);
    assert_eq!(
        (list_version.as_str(), list_kind.as_str()),
        (api_version, &*format!("{kind}List"))
    );
    // A list message: ListMeta (1), then the items (2), decoded as the item kind.
    let (list_meta, items) = list_fields(&raw);
    let list_meta = meta::ListMeta::decode(list_meta.as_slice()).unwrap();
    let rv = list_meta.resource_version.unwrap_or_default();
    let listed = http
        .get(&format!(
            "{path}?resourceVersion={rv}&resourceVersionMatch=Exact"
        ))
        .json();
    assert_eq!(listed["metadata"]["resourceVersion"], rv.as_str(), "{path}");
    let decoded: Vec<Value> = items
        .iter()
        .map(|i| to_json(api_version, kind, i))
        .collect();
    let expected: Vec<Value> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .cloned()
        .map(body_of)
        .collect();
    assert!(!expected.is_empty(), "{path}");
    let (decoded, expected) = (Value::Array(decoded), Value::Array(expected));
    assert!(
        decoded == expected,
        "{path}: {:?}",
        difference(&decoded, &expected, "")
    );
}

/// The raw bytes of field 1 (the list's metadata) and field 2 (each item) of a list message.
fn list_fields(raw: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut metadata = Vec::new();
    let mut items = Vec::new();
    let mut buf = raw;
    while !buf.is_empty() {
        let (tag, wire) = prost::encoding::decode_key(&mut buf).unwrap();
        assert_eq!(wire, prost::encoding::WireType::LengthDelimited);
        let len = usize::try_from(prost::encoding::decode_varint(&mut buf).unwrap()).unwrap();
        match tag {
            1 => metadata = buf[..len].to_vec(),
            2 => items.push(buf[..len].to_vec()),
            other => panic!("a list has no field {other}"),
        }
        buf = &buf[len..];
    }
    (metadata, items)
}

/// One watch frame's event: the raw `metav1.WatchEvent` message, without the magic number
/// or an `Unknown` envelope (kube's stream serializer is the raw one; client-go decodes the
/// frame as the message itself).
fn watch_event(frame: &[u8]) -> meta::WatchEvent {
    assert!(!frame.starts_with(b"k8s\0"), "a frame is not enveloped");
    meta::WatchEvent::decode(frame).unwrap()
}

/// Decodes the protobuf watch frames of `path` (initial events from resourceVersion 0).
fn check_watch(http: &Http, path: &str, api_version: &str, kind: &str) {
    let listed = http.get(path).json();
    let reply = http.get_as(
        &format!("{path}?watch=1&resourceVersion=0&timeoutSeconds=1"),
        PROTOBUF,
    );
    assert_eq!(reply.code, 200, "{}", reply.body);
    assert!(
        reply
            .headers
            .to_ascii_lowercase()
            .contains("content-type: application/vnd.kubernetes.protobuf;stream=watch"),
        "{}",
        reply.headers
    );
    let mut frames = reply.bytes.as_slice();
    let mut objects = Vec::new();
    while !frames.is_empty() {
        let len = u32::from_be_bytes(frames[..4].try_into().unwrap()) as usize;
        let event = watch_event(&frames[4..4 + len]);
        assert_eq!(event.r#type.as_deref(), Some("ADDED"));
        let embedded = event.object.unwrap().raw.unwrap();
        let (object_version, object_kind, object_raw) = unwrap(&embedded);
        assert_eq!(
            (object_version.as_str(), object_kind.as_str()),
            (api_version, kind)
        );
        objects.push(to_json(api_version, kind, &object_raw));
        frames = &frames[4 + len..];
    }
    let expected: Vec<Value> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .cloned()
        .map(body_of)
        .collect();
    // The namespace's CA bundle is published by a controller as namespaces appear: it may
    // land between the list and the watch.
    let bundle = |o: &Value| o["metadata"]["name"] == "kube-root-ca.crt";
    let objects: Vec<Value> = objects.into_iter().filter(|o| !bundle(o)).collect();
    let expected: Vec<Value> = expected.into_iter().filter(|o| !bundle(o)).collect();
    assert_eq!(objects, expected, "{path}");
}

#[test]
fn every_built_in_type_in_protobuf_matches_its_json() {
    let plinth = Plinth::start(Backend::Embedded);
    let http = Http::new(&plinth);
    let ns = "/api/v1/namespaces/default";
    let owner = http
        .post(
            &format!("{ns}/configmaps"),
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner"}}"#,
        )
        .json();
    let objects = [
        (
            format!("{ns}/configmaps"),
            "v1",
            "ConfigMap",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "full", "labels": {"app": "pb", "empty": ""},
                    "annotations": {"note": "é \"quoted\""}, "finalizers": ["example.com/keep"],
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                        "uid": owner["metadata"]["uid"], "controller": true, "blockOwnerDeletion": false}]},
                "data": {"a": "1", "empty": ""}, "binaryData": {"bin": "AAEC/w=="}, "immutable": false}),
        ),
        (
            format!("{ns}/secrets"),
            "v1",
            "Secret",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"},
                "type": "Opaque", "data": {"k": "c2VjcmV0"}, "immutable": true}),
        ),
        (
            "/api/v1/namespaces".to_owned(),
            "v1",
            "Namespace",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pb-ns"}}),
        ),
        (
            format!("{ns}/serviceaccounts"),
            "v1",
            "ServiceAccount",
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"},
                "secrets": [{"name": "s1"}], "imagePullSecrets": [{"name": "pull"}],
                "automountServiceAccountToken": false}),
        ),
        (
            format!("{ns}/events"),
            "v1",
            "Event",
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"},
                "involvedObject": {"kind": "ConfigMap", "name": "full", "namespace": "default",
                    "apiVersion": "v1", "fieldPath": "data"},
                "reason": "Checked", "message": "all good", "type": "Normal", "count": 3,
                "source": {"component": "tester", "host": "here"},
                "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-02T00:00:00Z"}),
        ),
        (
            "/apis/events.k8s.io/v1/namespaces/default/events".to_owned(),
            "events.k8s.io/v1",
            "Event",
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e2"},
                "regarding": {"kind": "ConfigMap", "name": "full", "namespace": "default"},
                "reason": "Reconciled", "note": "from a controller", "type": "Normal",
                "action": "Sync", "reportingController": "example.com/ctl",
                "reportingInstance": "ctl-1", "eventTime": "2026-01-01T00:00:00.123456Z",
                "series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000001Z"}}),
        ),
        (
            "/apis/coordination.k8s.io/v1/namespaces/default/leases".to_owned(),
            "coordination.k8s.io/v1",
            "Lease",
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l1"},
                "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15,
                    "acquireTime": "2026-01-01T00:00:00.000000Z", "renewTime": "2026-01-01T00:00:10.500000Z",
                    "leaseTransitions": 2}}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles".to_owned(),
            "rbac.authorization.k8s.io/v1",
            "Role",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "r1"},
                "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"]}]}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles".to_owned(),
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "pb-paths"},
                "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings".to_owned(),
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "b1"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r1"},
                "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
                    {"kind": "ServiceAccount", "name": "robot", "namespace": "default"}]}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".to_owned(),
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "pb-cb"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "devs"}]}),
        ),
        (
            "/apis/certificates.k8s.io/v1/certificatesigningrequests".to_owned(),
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                "metadata": {"name": "csr1"},
                "spec": {"request": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, CSR),
                    "signerName": "example.com/none", "expirationSeconds": 3600, "usages": ["client auth"]}}),
        ),
        (
            "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas".to_owned(),
            "flowcontrol.apiserver.k8s.io/v1",
            "FlowSchema",
            json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
                "metadata": {"name": "pb-flows"},
                "spec": {"priorityLevelConfiguration": {"name": "pb-level"}, "matchingPrecedence": 500,
                    "distinguisherMethod": {"type": "ByNamespace"},
                    "rules": [{"subjects": [{"kind": "User", "user": {"name": "alice"}},
                            {"kind": "ServiceAccount", "serviceAccount": {"namespace": "ns", "name": "robot"}}],
                        "resourceRules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["pods"],
                            "clusterScope": true, "namespaces": ["*"]}],
                        "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]}]}}),
        ),
        (
            "/apis/apiregistration.k8s.io/v1/apiservices".to_owned(),
            "apiregistration.k8s.io/v1",
            "APIService",
            json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": "v1alpha1.pb.example.com"},
                "spec": {"service": {"namespace": "default", "name": "pb-api", "port": 8443},
                    "group": "pb.example.com", "version": "v1alpha1", "insecureSkipTLSVerify": true,
                    "groupPriorityMinimum": 1000, "versionPriority": 15}}),
        ),
        (
            "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations".to_owned(),
            "flowcontrol.apiserver.k8s.io/v1",
            "PriorityLevelConfiguration",
            json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
                "metadata": {"name": "pb-level"},
                "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 7, "lendablePercent": 10,
                    "borrowingLimitPercent": 50,
                    "limitResponse": {"type": "Queue", "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 20}}}}}),
        ),
    ];
    for (collection, api_version, kind, body) in &objects {
        let created = http.post(collection, body.to_string().as_bytes());
        assert_eq!(created.code, 201, "{}", created.body);
        let name = body["metadata"]["name"].as_str().unwrap();
        let path = format!("{collection}/{name}");
        let json = http.get(&path).json();
        let reply = http.get_as(&path, PROTOBUF);
        assert_eq!(reply.code, 200, "{path}: {}", reply.body);
        assert!(
            reply
                .headers
                .to_ascii_lowercase()
                .contains("content-type: application/vnd.kubernetes.protobuf"),
            "{path}: {}",
            reply.headers
        );
        let (got_version, got_kind, raw) = unwrap(&reply.bytes);
        assert_eq!(
            (got_version.as_str(), got_kind.as_str()),
            (*api_version, *kind)
        );
        assert_eq!(to_json(api_version, kind, &raw), body_of(json), "{path}");
        check_list(&http, collection, api_version, kind);
        check_watch(&http, collection, api_version, kind);
    }

    // CustomResourceDefinitions: real ones from the corpus (schemas with every keyword kind).
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plinth-schema/tests/crds");
    let files: Vec<_> = [
        "argo-rollouts__rollout-crd.yaml",
        "cert-manager__cert-manager.io_issuers.yaml",
        "gateway-api__gateway.networking.k8s.io_httproutes.yaml",
        "keda__keda.sh_scaledobjects.yaml",
        "kueue__kueue.x-k8s.io_workloads.yaml",
        "prometheus-operator__monitoring.coreos.com_probes.yaml",
        "tekton__300-task.yaml",
        "velero__velero.io_backups.yaml",
    ]
    .iter()
    .map(|f| corpus.join(f))
    .collect();
    plinth.install_crds(&files, "120s");
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let one = format!("{crds}/scaledobjects.keda.sh");
    let (version, kind, raw) = unwrap(&http.get_as(&one, PROTOBUF).bytes);
    assert_eq!(
        (version.as_str(), kind.as_str()),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    );
    assert_eq!(crd(&raw), body_of(http.get(&one).json()));
    check_list(
        &http,
        crds,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
    );
    check_watch(
        &http,
        crds,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
    );

    // Custom resources have no protobuf form: JSON when the client takes it, else 406.
    let custom = "/apis/keda.sh/v1alpha1/namespaces/default/scaledobjects";
    let either = http.get_as(custom, &format!("{PROTOBUF}, application/json"));
    assert_eq!(either.code, 200, "{}", either.body);
    assert!(
        either
            .headers
            .to_ascii_lowercase()
            .contains("content-type: application/json")
    );
    let only = http.get_as(custom, PROTOBUF);
    assert_eq!(only.code, 406, "{}", only.body);
    assert_eq!(only.json()["reason"], "NotAcceptable");
}

/// Whether a `kubectl -v=8` log shows a response in protobuf (a `Content-Type` among the
/// `Response Headers:`, not the request's).
fn answered_in_protobuf(log: &str) -> bool {
    let mut in_response = false;
    for line in log.lines() {
        if line.contains("Response Headers:") {
            in_response = true;
        } else if in_response && line.contains("Content-Type:") {
            if line.trim_end().ends_with(PROTOBUF) {
                return true;
            }
            in_response = false;
        } else if !line.contains("round_trippers") {
            in_response = false;
        }
    }
    false
}

/// kubectl's typed clients (client-go) ask for protobuf first: creates answered in protobuf
/// print what a JSON read of the object shows; `kubectl events` lists Events through protobuf.
#[test]
fn kubectl_typed_clients_negotiate_protobuf() {
    let plinth = Plinth::start(Backend::Embedded);
    for (create, get) in [
        (
            vec![
                "create",
                "configmap",
                "typed",
                "--from-literal=greeting=hello",
            ],
            vec!["get", "configmap", "typed"],
        ),
        (
            vec!["create", "secret", "generic", "typed", "--from-literal=k=v"],
            vec!["get", "secret", "typed"],
        ),
        (
            vec!["create", "namespace", "typed"],
            vec!["get", "namespace", "typed"],
        ),
        (
            vec!["create", "serviceaccount", "typed"],
            vec!["get", "serviceaccount", "typed"],
        ),
    ] {
        let mut args = create.clone();
        args.extend(["-o", "json", "-v=8"]);
        let out = plinth.kubectl_output(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            answered_in_protobuf(&log),
            "{create:?} did not answer in protobuf:\n{log}"
        );
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut get = get.clone();
        get.extend(["-o", "json"]);
        assert_eq!(printed, plinth.json(&get), "{create:?}");
    }
    let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "seen"},
        "involvedObject": {"kind": "ConfigMap", "name": "typed", "namespace": "default"},
        "reason": "Noticed", "message": "a protobuf list", "type": "Warning",
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1});
    plinth.kubectl_with(&["apply", "-f", "-"], &event.to_string());
    let out = plinth.kubectl_output(&["events", "-v=8"]);
    let log = String::from_utf8_lossy(&out.stderr);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{log}");
    assert!(
        printed.contains("Noticed") && printed.contains("a protobuf list"),
        "{printed}"
    );
    assert!(
        answered_in_protobuf(&log),
        "kubectl events did not read protobuf:\n{log}"
    );
}

/// What client-go's metadata informers (the garbage collector's, the namespace controller's)
/// send: PartialObjectMetadata in protobuf first, for every resource — custom ones too.
const METADATA_PROTOBUF: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

/// The `metadata` of a `PartialObjectMetadata` message (envelope checked) as JSON.
fn partial_metadata(enveloped: &[u8]) -> Value {
    let (version, kind, raw) = unwrap(enveloped);
    assert_eq!(
        (version.as_str(), kind.as_str()),
        ("meta.k8s.io/v1", "PartialObjectMetadata")
    );
    partial_raw(&raw)
}

fn partial_raw(raw: &[u8]) -> Value {
    let partial = meta::PartialObjectMetadata::decode(raw).unwrap();
    object_meta(&partial.metadata).unwrap_or(json!({}))
}

#[test]
fn metadata_clients_read_partial_object_metadata_in_protobuf() {
    let plinth = Plinth::start(Backend::Embedded);
    let http = Http::new(&plinth);
    let dir = tempfile::tempdir().unwrap();
    let crd = dir.path().join("widgets.yaml");
    std::fs::write(
        &crd,
        r"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
",
    )
    .unwrap();
    plinth.install_crds(&[crd], "120s");
    let configmaps = "/api/v1/namespaces/default/configmaps";
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    for i in 0..3 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("m{i}"), "labels": {"i": i.to_string()},
                "annotations": {"note": "é"}, "finalizers": ["example.com/keep"]},
            "data": {"big": "x".repeat(100)}});
        assert_eq!(http.post(configmaps, cm.to_string().as_bytes()).code, 201);
        let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": format!("w{i}")}, "spec": {"size": i}});
        assert_eq!(http.post(widgets, widget.to_string().as_bytes()).code, 201);
    }
    let json_metadata = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    for collection in [configmaps, widgets] {
        let listed = http.get_as(collection, json_metadata).json();
        assert_eq!(listed["kind"], "PartialObjectMetadataList", "{listed}");
        let expected: Vec<Value> = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"].clone())
            .collect();
        assert!(!expected.is_empty(), "{collection}");

        // The list.
        let reply = http.get_as(collection, METADATA_PROTOBUF);
        assert_eq!(reply.code, 200, "{collection}: {}", reply.body);
        assert!(
            reply
                .headers
                .to_ascii_lowercase()
                .contains("content-type: application/vnd.kubernetes.protobuf"),
            "{}",
            reply.headers
        );
        let (version, kind, raw) = unwrap(&reply.bytes);
        assert_eq!(
            (version.as_str(), kind.as_str()),
            ("meta.k8s.io/v1", "PartialObjectMetadataList")
        );
        let (list_meta, items) = list_fields(&raw);
        let list_meta = meta::ListMeta::decode(list_meta.as_slice()).unwrap();
        assert!(list_meta.resource_version.is_some_and(|rv| !rv.is_empty()));
        let decoded: Vec<Value> = items.iter().map(|i| partial_raw(i)).collect();
        assert_eq!(decoded, expected, "{collection}");

        // One object.
        let name = expected[0]["name"].as_str().unwrap();
        let one = http.get_as(&format!("{collection}/{name}"), METADATA_PROTOBUF);
        assert_eq!(one.code, 200, "{}", one.body);
        assert_eq!(partial_metadata(&one.bytes), expected[0]);

        // A watch: every event's object is PartialObjectMetadata.
        let reply = http.get_as(
            &format!("{collection}?watch=1&resourceVersion=0&timeoutSeconds=1"),
            METADATA_PROTOBUF,
        );
        assert_eq!(reply.code, 200, "{}", reply.body);
        let mut frames = reply.bytes.as_slice();
        let mut watched = Vec::new();
        while !frames.is_empty() {
            let len = u32::from_be_bytes(frames[..4].try_into().unwrap()) as usize;
            let event = watch_event(&frames[4..4 + len]);
            assert_eq!(event.r#type.as_deref(), Some("ADDED"));
            watched.push(partial_metadata(&event.object.unwrap().raw.unwrap()));
            frames = &frames[4 + len..];
        }
        assert_eq!(watched, expected, "{collection}");
    }
    // A Table stays JSON, whatever protobuf is asked for first.
    let table = http.get_as(
        configmaps,
        "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1,application/json;as=Table;g=meta.k8s.io;v=v1",
    );
    assert_eq!(table.code, 200, "{}", table.body);
    assert_eq!(table.json()["kind"], "Table");
}
