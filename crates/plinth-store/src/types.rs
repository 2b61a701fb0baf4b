//! Values, requests and events.

use std::pin::Pin;

use bytes::Bytes;
use futures::Stream;

use crate::StoreResult;

/// A store-wide revision: strictly increasing, one per successful write.
pub type Revision = i64;

/// A key with its value and revisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// The value (empty in a delete event's `kv`).
    pub value: Bytes,
    /// The revision at which the key was created (since it last did not exist).
    pub create_revision: Revision,
    /// The revision of the key's last change.
    pub mod_revision: Revision,
}

/// A read of the keys under a prefix, at one revision, in key order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeRequest {
    /// Only keys starting with this prefix.
    pub prefix: String,
    /// Start at this key (inclusive) instead of at the prefix — for pagination, pass the last key
    /// of the previous page followed by a NUL byte (see [`RangeRequest::continue_after`]).
    pub start: Option<String>,
    /// At most this many keys; `None` for all.
    pub limit: Option<usize>,
    /// Read at this revision; `None` for the current one.
    pub revision: Option<crate::Revision>,
}

impl RangeRequest {
    /// All keys under `prefix`, at the current revision.
    pub fn prefix(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            ..Self::default()
        }
    }

    /// At most `limit` keys.
    #[must_use]
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Read at `revision`.
    #[must_use]
    pub fn at_revision(mut self, revision: crate::Revision) -> Self {
        self.revision = Some(revision);
        self
    }

    /// Start right after `key` (the next page after a page ending in `key`).
    #[must_use]
    pub fn continue_after(mut self, key: &str) -> Self {
        self.start = Some(format!("{key}\0"));
        self
    }
}

/// The answer to a [`RangeRequest`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeResponse {
    /// The keys found, in key order.
    pub kvs: Vec<KeyValue>,
    /// The revision the read was made at; pass it as `revision` for the next page.
    pub revision: crate::Revision,
    /// Whether more keys follow (the limit cut the answer short).
    pub more: bool,
    /// How many keys in the range follow those returned (etcd's `count` less the page):
    /// kube's `remainingItemCount`. 0 unless `more`.
    pub remaining: usize,
}

/// What happened to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Created or updated.
    Put,
    /// Deleted.
    Delete,
    /// No change: every change under the watch's prefix up to `kv.mod_revision` has been
    /// delivered (a progress notification, sent only after [`crate::Store::request_progress`]).
    Progress,
}

/// One change, as a watch delivers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    /// Put or delete.
    pub kind: EventKind,
    /// The key after the change. For a delete: the key, an empty value, create revision 0 and the
    /// deletion's revision as mod revision.
    pub kv: KeyValue,
    /// The key before the change, if it existed (always set for a delete).
    pub prev: Option<KeyValue>,
}

impl WatchEvent {
    /// The revision of the change (of a progress notification: the revision reached).
    pub fn revision(&self) -> crate::Revision {
        self.kv.mod_revision
    }

    /// A progress notification: the watch has delivered every change up to `revision`.
    pub fn progress(revision: crate::Revision) -> Self {
        Self {
            kind: EventKind::Progress,
            kv: KeyValue {
                key: String::new(),
                value: Bytes::new(),
                create_revision: 0,
                mod_revision: revision,
            },
            prev: None,
        }
    }
}

/// One version of a key kept in history (see [`crate::Store::versions`]): what a write left, and
/// the note it carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// [`EventKind::Put`] or [`EventKind::Delete`].
    pub kind: EventKind,
    /// The key after the write, as a watch event's (a delete: empty value, create revision 0,
    /// the deletion's revision as mod revision).
    pub kv: KeyValue,
    /// The write's note (see [`crate::note`]), if it carried one and the backend keeps notes.
    pub note: Option<Bytes>,
}

/// A stream of changes; see [`crate::Store::watch`]. Dropping it cancels the watch.
pub type WatchStream = Pin<Box<dyn Stream<Item = StoreResult<WatchEvent>> + Send + 'static>>;
