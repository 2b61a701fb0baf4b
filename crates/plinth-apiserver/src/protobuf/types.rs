//! The messages of the built-in types, as upstream's `generated.proto` numbers their fields.
//! Custom resources have none: they are served as JSON, as kube-apiserver serves them. (Nor,
//! yet, do CustomResourceDefinitions: answered in JSON, which client-go accepts.)

use super::encode::Shape::{Bool, BytesMap, I32, I64, Message, RawJson, Str, StringMap, Time};
use super::encode::{Field, many, one};

const OWNER_REFERENCE: &[Field] = &[
    one("kind", 1, Str),
    one("name", 3, Str),
    one("uid", 4, Str),
    one("apiVersion", 5, Str),
    one("controller", 6, Bool),
    one("blockOwnerDeletion", 7, Bool),
];

const MANAGED_FIELDS_ENTRY: &[Field] = &[
    one("manager", 1, Str),
    one("operation", 2, Str),
    one("apiVersion", 3, Str),
    one("time", 4, Time),
    one("fieldsType", 6, Str),
    one("fieldsV1", 7, RawJson),
    one("subresource", 8, Str),
];

/// `metav1.ObjectMeta`.
pub(crate) const OBJECT_META: &[Field] = &[
    one("name", 1, Str),
    one("generateName", 2, Str),
    one("namespace", 3, Str),
    one("selfLink", 4, Str),
    one("uid", 5, Str),
    one("resourceVersion", 6, Str),
    one("generation", 7, I64),
    one("creationTimestamp", 8, Time),
    one("deletionTimestamp", 9, Time),
    one("deletionGracePeriodSeconds", 10, I64),
    one("labels", 11, StringMap),
    one("annotations", 12, StringMap),
    many("ownerReferences", 13, Message(OWNER_REFERENCE)),
    many("finalizers", 14, Str),
    many("managedFields", 17, Message(MANAGED_FIELDS_ENTRY)),
];

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
    one("data", 2, StringMap),
    one("binaryData", 3, BytesMap),
    one("immutable", 4, Bool),
];

const SECRET: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one("data", 2, BytesMap),
    one("type", 3, Str),
    one("stringData", 4, StringMap),
    one("immutable", 5, Bool),
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

const SERVICE_ACCOUNT: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    many("secrets", 2, Message(OBJECT_REFERENCE)),
    many("imagePullSecrets", 3, Message(LOCAL_OBJECT_REFERENCE)),
    one("automountServiceAccountToken", 4, Bool),
];

const EVENT_SERIES: &[Field] = &[one("count", 1, I32), one("lastObservedTime", 2, Time)];

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
    one("eventTime", 10, Time),
    one("series", 11, Message(EVENT_SERIES)),
    one("action", 12, Str),
    one("related", 13, Message(OBJECT_REFERENCE)),
    one("reportingComponent", 14, Str),
    one("reportingInstance", 15, Str),
];

const EVENTS_V1_EVENT: &[Field] = &[
    one("metadata", 1, Message(OBJECT_META)),
    one("eventTime", 2, Time),
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
            one("holderIdentity", 1, Str),
            one("leaseDurationSeconds", 2, I32),
            one("acquireTime", 3, Time),
            one("renewTime", 4, Time),
            one("leaseTransitions", 5, I32),
            one("strategy", 6, Str),
            one("preferredHolder", 7, Str),
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
            many("causes", 4, Message(STATUS_CAUSE)),
            one("retryAfterSeconds", 5, I32),
            one("uid", 6, Str),
        ]),
    ),
    one("code", 6, I32),
];

/// The message of the built-in type `kind` of `apiVersion`, if it has one.
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
        _ => return None,
    })
}
