//! The messages of the built-in types, as upstream's `generated.proto` numbers their fields.
//! Custom resources have none: they are served as JSON, as kube-apiserver serves them.

use crate::encode::Shape;
use crate::encode::Shape::{
    Bool, Bytes, BytesMap, Double, I32, I64, Map, Message, MicroTime, OrArray, OrBool,
    OrStringArray, RawJson, Str, StringMap, Strings, Time,
};
use crate::encode::{Field, dropped, kept, many, one};
use crate::meta::{DELETE_OPTIONS, LABEL_SELECTOR, OBJECT_META};

const OBJECT_REFERENCE: &[Field] = &[
    one("kind", 1, Str),
    one("namespace", 2, Str),
    one("name", 3, Str),
    one("uid", 4, Str),
    one("apiVersion", 5, Str),
    one("resourceVersion", 6, Str),
    one("fieldPath", 7, Str),
];

const LOCAL_OBJECT_REFERENCE: &[Field] = &[one("name", 1, Str)];

const CONFIG_MAP: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one("immutable", 4, Bool),
    one("data", 2, StringMap),
    one("binaryData", 3, BytesMap),
];

const SECRET: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one("immutable", 5, Bool),
    one("data", 2, BytesMap),
    one("stringData", 4, StringMap),
    one("type", 3, Str),
];

const NAMESPACE_CONDITION: &[Field] = &[
    one("type", 1, Str),
    one("status", 2, Str),
    one("lastTransitionTime", 4, Time),
    one("reason", 5, Str),
    one("message", 6, Str),
];

const NAMESPACE: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one("spec", 2, Message(&[many("finalizers", 1, Str)])),
    one(
        "status",
        3,
        Message(&[
            one("phase", 1, Str),
            many("conditions", 2, Message(NAMESPACE_CONDITION)),
        ]),
    ),
];

const POLICY_RULE: &[Field] = &[
    many("verbs", 1, Str),
    many("apiGroups", 2, Str),
    many("resources", 3, Str),
    many("resourceNames", 4, Str),
    many("nonResourceURLs", 5, Str),
];

const ROLE: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    many("rules", 2, Message(POLICY_RULE)),
];

const CLUSTER_ROLE: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    many("rules", 2, Message(POLICY_RULE)),
    one(
        "aggregationRule",
        3,
        Message(&[many("clusterRoleSelectors", 1, Message(LABEL_SELECTOR))]),
    ),
];

const BINDING: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    many(
        "subjects",
        2,
        Message(&[
            one("kind", 1, Str),
            one("apiGroup", 2, Str),
            one("name", 3, Str),
            one("namespace", 4, Str),
        ]),
    ),
    one(
        "roleRef",
        3,
        Message(&[
            one("apiGroup", 1, Str),
            one("kind", 2, Str),
            one("name", 3, Str),
        ]),
    ),
];

const RESOURCE_ATTRIBUTES: &[Field] = &[
    one("namespace", 1, Str),
    one("verb", 2, Str),
    one("group", 3, Str),
    one("version", 4, Str),
    one("resource", 5, Str),
    one("subresource", 6, Str),
    one("name", 7, Str),
];

const NON_RESOURCE_ATTRIBUTES: &[Field] = &[one("path", 1, Str), one("verb", 2, Str)];

const ACCESS_REVIEW_STATUS: &[Field] = &[
    one("allowed", 1, Bool),
    one("denied", 4, Bool),
    one("reason", 2, Str),
    one("evaluationError", 3, Str),
];

const SELF_SUBJECT_ACCESS_REVIEW: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one(
        "spec",
        2,
        Message(&[
            one("resourceAttributes", 1, Message(RESOURCE_ATTRIBUTES)),
            one("nonResourceAttributes", 2, Message(NON_RESOURCE_ATTRIBUTES)),
        ]),
    ),
    one("status", 3, Message(ACCESS_REVIEW_STATUS)),
];

const SUBJECT_ACCESS_REVIEW: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one(
        "spec",
        2,
        Message(&[
            one("resourceAttributes", 1, Message(RESOURCE_ATTRIBUTES)),
            one("nonResourceAttributes", 2, Message(NON_RESOURCE_ATTRIBUTES)),
            one("user", 3, Str),
            many("groups", 4, Str),
            one("extra", 5, Map(&Strings)),
            one("uid", 6, Str),
        ]),
    ),
    one("status", 3, Message(ACCESS_REVIEW_STATUS)),
];

const SELF_SUBJECT_RULES_REVIEW: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one("spec", 2, Message(&[one("namespace", 1, Str)])),
    one(
        "status",
        3,
        Message(&[
            many(
                "resourceRules",
                1,
                Message(&[
                    many("verbs", 1, Str),
                    many("apiGroups", 2, Str),
                    many("resources", 3, Str),
                    many("resourceNames", 4, Str),
                ]),
            ),
            many(
                "nonResourceRules",
                2,
                Message(&[many("verbs", 1, Str), many("nonResourceURLs", 2, Str)]),
            ),
            one("incomplete", 3, Bool),
            one("evaluationError", 4, Str),
        ]),
    ),
];

const SELF_SUBJECT_REVIEW: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one(
        "status",
        2,
        Message(&[one("userInfo", 1, Message(USER_INFO))]),
    ),
];

/// `authentication/v1` `UserInfo`.
const USER_INFO: &[Field] = &[
    one("username", 1, Str),
    one("uid", 2, Str),
    many("groups", 3, Str),
    one("extra", 4, Map(&Strings)),
];

const TOKEN_REVIEW: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one(
        "spec",
        2,
        Message(&[one("token", 1, Str), many("audiences", 2, Str)]),
    ),
    one(
        "status",
        3,
        Message(&[
            one("authenticated", 1, Bool),
            one("user", 2, Message(USER_INFO)),
            one("error", 3, Str),
            many("audiences", 4, Str),
        ]),
    ),
];

const TOKEN_REQUEST: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one(
        "spec",
        2,
        Message(&[
            many("audiences", 1, Str),
            one("expirationSeconds", 4, I64),
            one(
                "boundObjectRef",
                3,
                Message(&[
                    one("kind", 1, Str),
                    one("apiVersion", 2, Str),
                    one("name", 3, Str),
                    one("uid", 4, Str),
                ]),
            ),
        ]),
    ),
    one(
        "status",
        3,
        Message(&[one("token", 1, Str), one("expirationTimestamp", 2, Time)]),
    ),
];

const CERTIFICATE_SIGNING_REQUEST: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one(
        "spec",
        2,
        Message(&[
            one("request", 1, Bytes),
            one("signerName", 7, Str),
            one("expirationSeconds", 8, I32),
            many("usages", 5, Str),
            one("username", 2, Str),
            one("uid", 3, Str),
            many("groups", 4, Str),
            one("extra", 6, Map(&Strings)),
        ]),
    ),
    one(
        "status",
        3,
        Message(&[
            many(
                "conditions",
                1,
                Message(&[
                    one("type", 1, Str),
                    one("status", 6, Str),
                    one("reason", 2, Str),
                    one("message", 3, Str),
                    one("lastUpdateTime", 4, Time),
                    one("lastTransitionTime", 5, Time),
                ]),
            ),
            one("certificate", 2, Bytes),
        ]),
    ),
];

const FLOW_CONDITION: &[Field] = &[
    one("type", 1, Str),
    one("status", 2, Str),
    one("lastTransitionTime", 3, Time),
    one("reason", 4, Str),
    one("message", 5, Str),
];

const FLOW_SUBJECT: &[Field] = &[
    one("kind", 1, Str),
    one("user", 2, Message(&[one("name", 1, Str)])),
    one("group", 3, Message(&[one("name", 1, Str)])),
    one(
        "serviceAccount",
        4,
        Message(&[one("namespace", 1, Str), one("name", 2, Str)]),
    ),
];

const FLOW_SCHEMA: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one(
        "spec",
        2,
        Message(&[
            one(
                "priorityLevelConfiguration",
                1,
                Message(&[one("name", 1, Str)]),
            ),
            one("matchingPrecedence", 2, I32),
            one("distinguisherMethod", 3, Message(&[one("type", 1, Str)])),
            many(
                "rules",
                4,
                Message(&[
                    many("subjects", 1, Message(FLOW_SUBJECT)),
                    many(
                        "resourceRules",
                        2,
                        Message(&[
                            many("verbs", 1, Str),
                            many("apiGroups", 2, Str),
                            many("resources", 3, Str),
                            one("clusterScope", 4, Bool),
                            many("namespaces", 5, Str),
                        ]),
                    ),
                    many(
                        "nonResourceRules",
                        3,
                        Message(&[many("verbs", 1, Str), many("nonResourceURLs", 6, Str)]),
                    ),
                ]),
            ),
        ]),
    ),
    one(
        "status",
        3,
        Message(&[many("conditions", 1, Message(FLOW_CONDITION))]),
    ),
];

const PRIORITY_LEVEL_CONFIGURATION: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one(
        "spec",
        2,
        Message(&[
            one("type", 1, Str),
            one(
                "limited",
                2,
                Message(&[
                    one("nominalConcurrencyShares", 1, I32),
                    one(
                        "limitResponse",
                        2,
                        Message(&[
                            one("type", 1, Str),
                            one(
                                "queuing",
                                2,
                                Message(&[
                                    one("queues", 1, I32),
                                    one("handSize", 2, I32),
                                    one("queueLengthLimit", 3, I32),
                                ]),
                            ),
                        ]),
                    ),
                    one("lendablePercent", 3, I32),
                    one("borrowingLimitPercent", 4, I32),
                ]),
            ),
            one(
                "exempt",
                3,
                Message(&[
                    one("nominalConcurrencyShares", 1, I32),
                    one("lendablePercent", 2, I32),
                ]),
            ),
        ]),
    ),
    one(
        "status",
        3,
        Message(&[many("conditions", 1, Message(FLOW_CONDITION))]),
    ),
];

/// `metav1.PartialObjectMetadata` (its list numbers `metadata` 1 and `items` 2, as every
/// list does in `meta.k8s.io/v1`).
const PARTIAL_OBJECT_METADATA: &[Field] = &[one("metadata", 1, Message(OBJECT_META))];

const SERVICE_ACCOUNT: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    many("secrets", 2, Message(OBJECT_REFERENCE)),
    many("imagePullSecrets", 3, Message(LOCAL_OBJECT_REFERENCE)),
    one("automountServiceAccountToken", 4, Bool),
];

const EVENT_SERIES: &[Field] = &[one("count", 1, I32), one("lastObservedTime", 2, MicroTime)];

const EVENT_SOURCE: &[Field] = &[one("component", 1, Str), one("host", 2, Str)];

const CORE_EVENT: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one("involvedObject", 2, Message(OBJECT_REFERENCE)),
    one("reason", 3, Str),
    one("message", 4, Str),
    one("source", 5, Message(EVENT_SOURCE)),
    one("firstTimestamp", 6, Time),
    one("lastTimestamp", 7, Time),
    one("count", 8, I32),
    one("type", 9, Str),
    one("eventTime", 10, MicroTime),
    one("series", 11, Message(EVENT_SERIES)),
    one("action", 12, Str),
    one("related", 13, Message(OBJECT_REFERENCE)),
    one("reportingComponent", 14, Str),
    one("reportingInstance", 15, Str),
];

const EVENTS_V1_EVENT: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one("eventTime", 2, MicroTime),
    one("series", 3, Message(EVENT_SERIES)),
    one("reportingController", 4, Str),
    one("reportingInstance", 5, Str),
    one("action", 6, Str),
    one("reason", 7, Str),
    one("regarding", 8, Message(OBJECT_REFERENCE)),
    one("related", 9, Message(OBJECT_REFERENCE)),
    one("note", 10, Str),
    one("type", 11, Str),
    one("deprecatedSource", 12, Message(EVENT_SOURCE)),
    one("deprecatedFirstTimestamp", 13, Time),
    one("deprecatedLastTimestamp", 14, Time),
    one("deprecatedCount", 15, I32),
];

const LEASE: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one(
        "spec",
        2,
        Message(&[
            // Every field a Go pointer: a zero read from the wire was set.
            kept("holderIdentity", 1, Str),
            kept("leaseDurationSeconds", 2, I32),
            one("acquireTime", 3, MicroTime),
            one("renewTime", 4, MicroTime),
            kept("leaseTransitions", 5, I32),
            kept("strategy", 6, Str),
            kept("preferredHolder", 7, Str),
        ]),
    ),
];

const STATUS_CAUSE: &[Field] = &[
    one("reason", 1, Str),
    one("message", 2, Str),
    one("field", 3, Str),
];

/// `metav1.Status` (an error in a watch).
const STATUS: &[Field] = &[
    one("metadata", 1, Message(super::encode::LIST_META)),
    one("status", 2, Str),
    one("message", 3, Str),
    one("reason", 4, Str),
    one(
        "details",
        5,
        Message(&[
            one("name", 1, Str),
            one("group", 2, Str),
            one("kind", 3, Str),
            one("uid", 6, Str),
            many("causes", 4, Message(STATUS_CAUSE)),
            one("retryAfterSeconds", 5, I32),
        ]),
    ),
    one("code", 6, I32),
];

const VALIDATION_RULE: &[Field] = &[
    one("rule", 1, Str),
    one("message", 2, Str),
    one("messageExpression", 3, Str),
    one("reason", 4, Str),
    one("fieldPath", 5, Str),
    one("optionalOldSelf", 6, Bool),
];

/// `apiextensions.v1.JSONSchemaProps`. It nests itself, so it and everything that holds it
/// are statics (a constant cannot refer to a static).
static JSON_SCHEMA_PROPS: [Field; 44] = [
    one("id", 1, Str),
    one("$schema", 2, Str),
    one("$ref", 3, Str),
    one("description", 4, Str),
    one("type", 5, Str),
    one("format", 6, Str),
    one("title", 7, Str),
    one("default", 8, RawJson),
    one("maximum", 9, Double),
    dropped("exclusiveMaximum", 10, Bool),
    one("minimum", 11, Double),
    dropped("exclusiveMinimum", 12, Bool),
    one("maxLength", 13, I64),
    one("minLength", 14, I64),
    one("pattern", 15, Str),
    one("maxItems", 16, I64),
    one("minItems", 17, I64),
    dropped("uniqueItems", 18, Bool),
    one("multipleOf", 19, Double),
    many("enum", 20, RawJson),
    one("maxProperties", 21, I64),
    one("minProperties", 22, I64),
    many("required", 23, Str),
    one("items", 24, OrArray(&JSON_SCHEMA_PROPS)),
    many("allOf", 25, Message(&JSON_SCHEMA_PROPS)),
    many("oneOf", 26, Message(&JSON_SCHEMA_PROPS)),
    many("anyOf", 27, Message(&JSON_SCHEMA_PROPS)),
    one("not", 28, Message(&JSON_SCHEMA_PROPS)),
    one("properties", 29, Map(&SCHEMA)),
    one("additionalProperties", 30, OrBool(&JSON_SCHEMA_PROPS)),
    one("patternProperties", 31, Map(&SCHEMA)),
    one("dependencies", 32, Map(&SCHEMA_OR_STRINGS)),
    one("additionalItems", 33, OrBool(&JSON_SCHEMA_PROPS)),
    one("definitions", 34, Map(&SCHEMA)),
    one("externalDocs", 35, Message(EXTERNAL_DOCS)),
    one("example", 36, RawJson),
    dropped("nullable", 37, Bool),
    one("x-kubernetes-preserve-unknown-fields", 38, Bool),
    dropped("x-kubernetes-embedded-resource", 39, Bool),
    dropped("x-kubernetes-int-or-string", 40, Bool),
    many("x-kubernetes-list-map-keys", 41, Str),
    one("x-kubernetes-list-type", 42, Str),
    one("x-kubernetes-map-type", 43, Str),
    many("x-kubernetes-validations", 44, Message(VALIDATION_RULE)),
];

static SCHEMA: Shape = Message(&JSON_SCHEMA_PROPS);
static SCHEMA_OR_STRINGS: Shape = OrStringArray(&JSON_SCHEMA_PROPS);

const EXTERNAL_DOCS: &[Field] = &[one("description", 1, Str), one("url", 2, Str)];

const CRD_NAMES: &[Field] = &[
    one("plural", 1, Str),
    one("singular", 2, Str),
    many("shortNames", 3, Str),
    one("kind", 4, Str),
    one("listKind", 5, Str),
    many("categories", 6, Str),
];

static CRD_VALIDATION: [Field; 1] = [one("openAPIV3Schema", 1, Message(&JSON_SCHEMA_PROPS))];

const CRD_SCALE: &[Field] = &[
    one("specReplicasPath", 1, Str),
    one("statusReplicasPath", 2, Str),
    one("labelSelectorPath", 3, Str),
];

const CRD_SUBRESOURCES: &[Field] = &[
    one("status", 1, Message(&[])),
    one("scale", 2, Message(CRD_SCALE)),
];

const CRD_COLUMN: &[Field] = &[
    one("name", 1, Str),
    one("type", 2, Str),
    one("format", 3, Str),
    one("description", 4, Str),
    one("priority", 5, I32),
    one("jsonPath", 6, Str),
];

static CRD_VERSION: [Field; 9] = [
    one("name", 1, Str),
    one("served", 2, Bool),
    one("storage", 3, Bool),
    one("deprecated", 7, Bool),
    one("deprecationWarning", 8, Str),
    one("schema", 4, Message(&CRD_VALIDATION)),
    one("subresources", 5, Message(CRD_SUBRESOURCES)),
    many("additionalPrinterColumns", 6, Message(CRD_COLUMN)),
    many("selectableFields", 9, Message(&[one("jsonPath", 1, Str)])),
];

const SERVICE_REFERENCE: &[Field] = &[
    one("namespace", 1, Str),
    one("name", 2, Str),
    one("path", 3, Str),
    one("port", 4, I32),
];

const WEBHOOK_CLIENT_CONFIG: &[Field] = &[
    one("url", 3, Str),
    one("service", 1, Message(SERVICE_REFERENCE)),
    one("caBundle", 2, Bytes),
];

const CRD_CONVERSION: &[Field] = &[
    one("strategy", 1, Str),
    one(
        "webhook",
        2,
        Message(&[
            one("clientConfig", 2, Message(WEBHOOK_CLIENT_CONFIG)),
            many("conversionReviewVersions", 3, Str),
        ]),
    ),
];

static CRD_SPEC: [Field; 6] = [
    one("group", 1, Str),
    one("names", 3, Message(CRD_NAMES)),
    one("scope", 4, Str),
    many("versions", 7, Message(&CRD_VERSION)),
    one("conversion", 9, Message(CRD_CONVERSION)),
    one("preserveUnknownFields", 10, Bool),
];

const CRD_CONDITION: &[Field] = &[
    one("type", 1, Str),
    one("status", 2, Str),
    one("lastTransitionTime", 3, Time),
    one("reason", 4, Str),
    one("message", 5, Str),
    one("observedGeneration", 6, I64),
];

const CRD_STATUS: &[Field] = &[
    many("conditions", 1, Message(CRD_CONDITION)),
    one("acceptedNames", 2, Message(CRD_NAMES)),
    many("storedVersions", 3, Str),
    one("observedGeneration", 4, I64),
];

static CRD: [Field; 3] = [
    one("metadata", 1, Message(OBJECT_META)),
    one("spec", 2, Message(&CRD_SPEC)),
    one("status", 3, Message(CRD_STATUS)),
];

/// The message of the built-in type `kind` of `apiVersion`, if it has one.
/// `apiregistration.v1.APIService` (kube-aggregator's).
const API_SERVICE: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one(
        "spec",
        2,
        Message(&[
            one(
                "service",
                1,
                Message(&[
                    one("namespace", 1, Str),
                    one("name", 2, Str),
                    one("port", 3, I32),
                ]),
            ),
            one("group", 2, Str),
            one("version", 3, Str),
            dropped("insecureSkipTLSVerify", 4, Bool),
            one("caBundle", 5, Bytes),
            kept("groupPriorityMinimum", 7, I32),
            kept("versionPriority", 8, I32),
        ]),
    ),
    one(
        "status",
        3,
        Message(&[many(
            "conditions",
            1,
            Message(&[
                one("type", 1, Str),
                one("status", 2, Str),
                one("lastTransitionTime", 3, Time),
                one("reason", 4, Str),
                one("message", 5, Str),
            ]),
        )]),
    ),
];

pub(crate) fn message_of(api_version: &str, kind: &str) -> Option<&'static [Field]> {
    Some(match (api_version, kind) {
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("v1", "Event") => CORE_EVENT,
        ("events.k8s.io/v1", "Event") => EVENTS_V1_EVENT,
        ("coordination.k8s.io/v1", "Lease") => LEASE,
        ("v1", "Status") => STATUS,
        // Every group version has DeleteOptions: client-go sends the resource's.
        (_, "DeleteOptions") => DELETE_OPTIONS,
        ("meta.k8s.io/v1", "PartialObjectMetadata") => PARTIAL_OBJECT_METADATA,
        ("rbac.authorization.k8s.io/v1", "Role") => ROLE,
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => CLUSTER_ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => BINDING,
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => SELF_SUBJECT_ACCESS_REVIEW,
        ("authorization.k8s.io/v1", "SubjectAccessReview" | "LocalSubjectAccessReview") => {
            SUBJECT_ACCESS_REVIEW
        }
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => SELF_SUBJECT_RULES_REVIEW,
        ("authentication.k8s.io/v1", "SelfSubjectReview") => SELF_SUBJECT_REVIEW,
        ("authentication.k8s.io/v1", "TokenRequest") => TOKEN_REQUEST,
        ("authentication.k8s.io/v1", "TokenReview") => TOKEN_REVIEW,
        ("certificates.k8s.io/v1", "CertificateSigningRequest") => CERTIFICATE_SIGNING_REQUEST,
        ("flowcontrol.apiserver.k8s.io/v1", "FlowSchema") => FLOW_SCHEMA,
        ("flowcontrol.apiserver.k8s.io/v1", "PriorityLevelConfiguration") => {
            PRIORITY_LEVEL_CONFIGURATION
        }
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => &CRD,
        ("apiregistration.k8s.io/v1", "APIService") => API_SERVICE,
        _ => return None,
    })
}
