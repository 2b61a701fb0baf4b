//! The messages of `meta.k8s.io/v1` that every other table embeds: `ObjectMeta`, its owner
//! references and managed fields, `LabelSelector`, `Condition`, `DeleteOptions`. Both the
//! hand-written tables (`types`) and the generated ones (`generated`) use them.

use crate::encode::Field;
use crate::encode::Shape::{Bool, I64, Message, RawJson, Str, StringMap, Time};
use crate::encode::{many, one};

/// `metav1.OwnerReference`.
pub(crate) const OWNER_REFERENCE: &[Field] = &[
    one("apiVersion", 5, Str),
    one("kind", 1, Str),
    one("name", 3, Str),
    one("uid", 4, Str),
    one("controller", 6, Bool),
    one("blockOwnerDeletion", 7, Bool),
];

pub(crate) const MANAGED_FIELDS_ENTRY: &[Field] = &[
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

pub(crate) const LABEL_SELECTOR_REQUIREMENT: &[Field] = &[
    one("key", 1, Str),
    one("operator", 2, Str),
    many("values", 3, Str),
];

/// `metav1.LabelSelector`.
pub(crate) const LABEL_SELECTOR: &[Field] = &[
    one("matchLabels", 1, StringMap),
    many("matchExpressions", 2, Message(LABEL_SELECTOR_REQUIREMENT)),
];

/// `metav1.Condition`.
pub(crate) const CONDITION: &[Field] = &[
    one("type", 1, Str),
    one("status", 2, Str),
    one("observedGeneration", 3, I64),
    one("lastTransitionTime", 4, Time),
    one("reason", 5, Str),
    one("message", 6, Str),
];

/// `metav1.DeleteOptions` (an Eviction's).
pub(crate) const DELETE_OPTIONS: &[Field] = &[
    one("gracePeriodSeconds", 1, I64),
    one(
        "preconditions",
        2,
        Message(&[one("uid", 1, Str), one("resourceVersion", 2, Str)]),
    ),
    one("orphanDependents", 3, Bool),
    one("propagationPolicy", 4, Str),
    many("dryRun", 5, Str),
    one("ignoreStoreReadErrorWithClusterBreakingPotential", 6, Bool),
];
