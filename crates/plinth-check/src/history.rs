//! What a robustness run records: every call a client made, with its start, end and outcome,
//! and every watch with the events it delivered. Serializable, so a run's history can be kept
//! and checked again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A store revision (a Kubernetes `resourceVersion`, which on both of Plinth's stores and on
/// etcd is the revision of the write that made the object's current state).
pub type Rev = u64;

/// A key's state as a read returned it: the value written and the revision that wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    /// The value (unique per write in a run, so it names the write).
    pub value: String,
    /// The object's `resourceVersion`.
    pub rev: Rev,
}

/// What a client asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Op {
    /// Create `key` holding `value`.
    Create {
        /// The object's name.
        key: String,
        /// The value written.
        value: String,
    },
    /// Replace `key`'s value if its `resourceVersion` is still `expect`.
    Update {
        /// The object's name.
        key: String,
        /// The value written.
        value: String,
        /// The `resourceVersion` the update is conditional on.
        expect: Rev,
    },
    /// Delete `key` if its `resourceVersion` is still `expect` (a precondition).
    Delete {
        /// The object's name.
        key: String,
        /// The `resourceVersion` the delete is conditional on.
        expect: Rev,
    },
    /// Read `key` (a consistent read).
    Get {
        /// The object's name.
        key: String,
    },
    /// List every key (a consistent list).
    List,
}

impl Op {
    /// The key a single-object call names.
    pub fn key(&self) -> Option<&str> {
        match self {
            Op::Create { key, .. }
            | Op::Update { key, .. }
            | Op::Delete { key, .. }
            | Op::Get { key } => Some(key),
            Op::List => None,
        }
    }

    /// Whether the call writes.
    pub fn writes(&self) -> bool {
        matches!(
            self,
            Op::Create { .. } | Op::Update { .. } | Op::Delete { .. }
        )
    }
}

/// How a call ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum Outcome {
    /// A create or update was acknowledged at `rev`.
    Written {
        /// The `resourceVersion` the server answered with.
        rev: Rev,
    },
    /// A delete was acknowledged.
    Deleted,
    /// A read found the key.
    Found(Version),
    /// A read found no such key (404).
    Missing,
    /// A list answered: its `resourceVersion` and the keys it held.
    Listed {
        /// The list's `resourceVersion`.
        rev: Rev,
        /// Every key in the list.
        items: BTreeMap<String, Version>,
    },
    /// The server refused the call in a way that means it did nothing (a 4xx such as 409 or
    /// 404, or a 429 before it was admitted).
    Refused {
        /// The HTTP status code.
        code: u16,
    },
    /// Nobody knows whether the call took effect (a timeout, a broken connection, a 5xx).
    Unknown {
        /// What happened.
        why: String,
    },
}

/// One call: who made it, what it was, when it started and ended, how it ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    /// The client's number.
    pub client: u32,
    /// What was asked.
    pub op: Op,
    /// When the request was sent (any clock common to the run, e.g. µs since its start).
    pub start: u64,
    /// When the answer (or the failure) arrived, on the same clock.
    pub end: u64,
    /// How it ended.
    pub outcome: Outcome,
}

/// What a watch delivered, in the order it did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Event {
    /// `ADDED`: the key was created by the write at `rev`.
    Added {
        /// The object's name.
        key: String,
        /// Its value.
        value: String,
        /// Its `resourceVersion`.
        rev: Rev,
    },
    /// `MODIFIED`: the key was replaced by the write at `rev`.
    Modified {
        /// The object's name.
        key: String,
        /// Its new value.
        value: String,
        /// Its `resourceVersion`.
        rev: Rev,
    },
    /// `DELETED` at `rev`; `value` is the state it had.
    Deleted {
        /// The object's name.
        key: String,
        /// The value it held until deleted.
        value: String,
        /// The revision of the deletion.
        rev: Rev,
    },
    /// `BOOKMARK`: every change up to `rev` has been delivered.
    Bookmark {
        /// The bookmark's `resourceVersion`.
        rev: Rev,
    },
}

impl Event {
    /// The event's revision.
    pub fn rev(&self) -> Rev {
        match self {
            Event::Added { rev, .. }
            | Event::Modified { rev, .. }
            | Event::Deleted { rev, .. }
            | Event::Bookmark { rev } => *rev,
        }
    }
}

/// How a watch ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "end", rename_all = "camelCase")]
pub enum WatchEnd {
    /// The server answered 410 Gone (its start is compacted or too old): it promises nothing
    /// beyond what it delivered.
    Gone,
    /// The connection broke or the server closed it.
    Broken {
        /// What happened.
        why: String,
    },
    /// The run ended and the watch had delivered everything up to `rev` (the run's last write).
    CaughtUp {
        /// The last revision it was waited for.
        rev: Rev,
    },
}

/// One watch: from which revision it was asked for, what it delivered, how it ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watch {
    /// The `resourceVersion` it was started from (events after it are promised).
    pub from: Rev,
    /// Its events and bookmarks, in the order delivered.
    pub events: Vec<Event>,
    /// How it ended.
    pub end: WatchEnd,
}

/// A whole run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The revision at which no key existed yet (the run writes keys nobody else does).
    pub start_rev: Rev,
    /// Every call.
    pub calls: Vec<Call>,
    /// Every watch.
    pub watches: Vec<Watch>,
}
