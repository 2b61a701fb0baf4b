//! Plinth's storage contract: etcd's data model — one global revision, compare-and-swap writes,
//! reads at a revision, watches that replay history, compaction — as a backend-neutral trait.
//!
//! This crate must not depend on any backend. Backends live in their own crates
//! (`plinth-store-embedded`, `plinth-store-etcd`) and all of them pass the one
//! [`conformance`] suite (feature `conformance`), unchanged.
//!
//! # The data model, by example
//!
//! A store starts at revision 1, holding nothing. Every successful write advances the global
//! revision by exactly one, and that revision is stamped on what was written:
//!
//! | call                                   | returns | key `a` afterwards                        |
//! |----------------------------------------|---------|-------------------------------------------|
//! | `create("a", "x")`                     | `2`     | value `x`, create_revision 2, mod_revision 2 |
//! | `update("a", "y", 2)`                  | `3`     | value `y`, create_revision 2, mod_revision 3 |
//! | `update("a", "z", 2)`                  | `Conflict` (current is at 3) | unchanged          |
//! | `delete("a", Some(3))`                 | `4`, prior value `y` | absent                       |
//! | `create("a", "w")`                     | `5`     | value `w`, create_revision 5, mod_revision 5 |
//!
//! A range at revision 3 still sees `a = y`; a watch from revision 2 replays the puts at 2 and 3,
//! the delete at 4 (carrying `y` as its previous value) and the put at 5. After `compact(4)`, reads
//! and watches at revisions below 4 fail with [`StoreError::Compacted`] — what the API server turns
//! into `410 Gone`.
//!
//! # Naming
//!
//! Names follow etcd: *revision* is the store-wide counter; a key's *create revision* and *mod
//! revision* are the revisions of its creation and last change. The API server exposes the mod
//! revision as `metadata.resourceVersion`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod error;
pub mod note;
pub mod replay;
mod types;
mod update;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use error::{StoreError, StoreResult};
pub use types::{
    EventKind, KeyValue, RangeRequest, RangeResponse, Revision, Version, WatchEvent, WatchStream,
};
pub use update::{Update, guaranteed_update};

use async_trait::async_trait;
use bytes::Bytes;

/// Keys must not contain this byte (backends use it as a separator); [`validate_key`] checks it.
pub const FORBIDDEN_KEY_BYTE: u8 = 0;

/// A key-value store with etcd's data model. See the [crate docs](crate) for the model.
///
/// Keys are UTF-8 paths (`/namespaces/default/configmaps/a`); they are never empty and never
/// contain a NUL byte. Values are opaque bytes.
///
/// # Guarantees
/// - Every successful write returns a revision strictly greater than every revision returned
///   before it, by this store or any other client of the same backend.
/// - A write that returned `Ok` is durable: it survives a crash of the process (and, for etcd,
///   of the etcd member) that acknowledged it.
/// - A write that returned `Err` changed nothing.
/// - Watches deliver every change under their prefix exactly once, in revision order, from their
///   start revision on; a watcher that stops reading never blocks writers or other watchers.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The current value of `key`, or `None` if it does not exist.
    async fn get(&self, key: &str) -> StoreResult<Option<KeyValue>>;

    /// Keys under a prefix in key order, read at one revision (see [`RangeRequest`]).
    ///
    /// # Errors
    /// [`StoreError::Compacted`] if the requested revision was compacted;
    /// [`StoreError::FutureRevision`] if it is newer than the current revision.
    async fn range(&self, request: RangeRequest) -> StoreResult<RangeResponse>;

    /// Creates `key` if it does not exist; returns the new revision.
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] if it exists.
    async fn create(&self, key: &str, value: Bytes) -> StoreResult<Revision>;

    /// Replaces the value of `key` if its mod revision is `expected`; returns the new revision.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] if the key does not exist; [`StoreError::Conflict`], carrying
    /// the current value, if its mod revision is not `expected`.
    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> StoreResult<Revision>;

    /// Deletes `key`, if `expected` is given only when its mod revision matches. Returns the
    /// revision of the deletion and the value deleted.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] if the key does not exist; [`StoreError::Conflict`] on a
    /// mod-revision mismatch.
    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> StoreResult<(Revision, KeyValue)>;

    /// Watches every key under `prefix`, delivering each change with revision `>= from`; `from = 0`
    /// means "changes after now".
    ///
    /// # Errors
    /// A start revision that was compacted is reported *in the stream*: its first and only item is
    /// [`StoreError::Compacted`]. The stream also ends with that error if the watcher fell so far
    /// behind that the history it needs was compacted. `watch` itself fails only when the backend
    /// cannot be reached.
    async fn watch(&self, prefix: &str, from: Revision) -> StoreResult<WatchStream>;

    /// Discards history before `revision`: afterwards reads and watches at revisions below it fail
    /// with [`StoreError::Compacted`]; the state at `revision` and later stays readable.
    ///
    /// # Errors
    /// [`StoreError::Compacted`] if `revision` is not above the last compaction;
    /// [`StoreError::FutureRevision`] if it is above the current revision.
    async fn compact(&self, revision: Revision) -> StoreResult<()>;

    /// Asks every open watch of this store to report its progress: each watch that has
    /// delivered every change up to the latest revision it knows of gets an
    /// [`EventKind::Progress`] event at that revision, after those changes (etcd's
    /// `RequestProgress`). A watch still catching up reports nothing; ask again later. Readers
    /// use it to learn that a cache fed by a quiet watch is nonetheless up to date.
    ///
    /// # Errors
    /// Only if the backend cannot be reached.
    async fn request_progress(&self) -> StoreResult<()>;

    /// Whether [`Store::request_progress`] is answered in this process as it is called — no
    /// round trip, the notifications already queued when it returns — and
    /// [`Store::current_revision`] never runs ahead of what watches were handed. A reader may
    /// then ask for progress itself instead of batching its request with other readers'
    /// (which a remote store needs).
    fn progress_is_local(&self) -> bool {
        false
    }

    /// Whether other processes — other API servers of the cluster — may write to this storage
    /// too (etcd), or this process holds it alone (the embedded store's locked directory).
    fn shared(&self) -> bool {
        false
    }

    /// Whether a progress report can be trusted: that every change up to its revision was
    /// delivered to the watch first. etcd before 3.4.31 and 3.5.13 may report progress ahead
    /// of events it has still to send (etcd issue 15220); consistent reads then come from
    /// storage, not from a watch cache, as kube-apiserver does.
    fn progress_is_reliable(&self) -> bool {
        true
    }

    /// Whether `kv`, as this store returned it, should be written again even unchanged (a
    /// value encrypted with a key that no longer writes, by a store that encrypts).
    fn stale(&self, _kv: &KeyValue) -> bool {
        false
    }

    /// The store's current revision (the revision of the last write, or 1 for a new store).
    async fn current_revision(&self) -> StoreResult<Revision>;

    /// Every version of `key` kept in history from revision `from` on (0: from the oldest
    /// kept), oldest first — each put and delete, with the note its write carried
    /// ([`note`]). History is kept until [`Store::compact`] drops it.
    ///
    /// # Errors
    /// [`StoreError::Compacted`] if `from` is below the oldest revision kept.
    async fn versions(&self, key: &str, from: Revision) -> StoreResult<Vec<Version>> {
        replay::key_versions(self, key, from).await
    }

    /// The writes under `prefix` from revision `from` on (0: from the oldest kept), oldest
    /// first, at most `limit` of them, with their values and notes: the store's journal.
    ///
    /// # Errors
    /// [`StoreError::Compacted`] if `from` is below the oldest revision kept.
    async fn journal(
        &self,
        prefix: &str,
        from: Revision,
        limit: usize,
    ) -> StoreResult<Vec<Version>> {
        replay::replay(self, prefix, from, limit).await
    }

    /// Whether this store keeps the notes of writes ([`note`]); without them
    /// [`Store::versions`] and [`Store::journal`] give `note: None`.
    fn keeps_notes(&self) -> bool {
        false
    }
}

/// Checks that `key` is a usable key: not empty, no NUL byte.
///
/// # Errors
/// [`StoreError::InvalidKey`] otherwise.
pub fn validate_key(key: &str) -> StoreResult<()> {
    if key.is_empty() || key.as_bytes().contains(&FORBIDDEN_KEY_BYTE) {
        return Err(StoreError::InvalidKey {
            key: key.to_owned(),
        });
    }
    Ok(())
}

/// The smallest key greater than every key starting with `prefix` (etcd's "range end"), or `None`
/// if there is no such key (the prefix is empty or all `0xff`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_last_byte() {
        assert_eq!(prefix_end(b"/a/"), Some(b"/a0".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b""), None);
        assert_eq!(prefix_end(b"\xff\xff"), None);
    }

    #[test]
    fn keys_are_validated() {
        assert!(validate_key("/registry/a").is_ok());
        assert!(matches!(
            validate_key(""),
            Err(StoreError::InvalidKey { .. })
        ));
        assert!(matches!(
            validate_key("a\0b"),
            Err(StoreError::InvalidKey { .. })
        ));
    }
}
