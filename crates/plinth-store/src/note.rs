//! Notes: what a write says of itself (who made it, through which request), kept by the store
//! with the revision the write produces — the provenance of every version in history.
//!
//! A note rides with the task that writes, as Go's `context.Context` carries a request's user
//! down to storage: the caller wraps its work in [`noted`], and every create, update and delete
//! made inside (a guaranteed-update loop's retries included) carries the note. Notes are opaque
//! bytes to the store; a backend that keeps none says so ([`crate::Store::keeps_notes`]).

use std::future::Future;

use bytes::Bytes;

tokio::task_local! {
    static NOTE: Bytes;
}

/// Runs `work` with `note` attached to every write it makes through a store.
pub async fn noted<F: Future>(note: Bytes, work: F) -> F::Output {
    NOTE.scope(note, work).await
}

/// The note of the task's current writes, if it runs inside [`noted`].
pub fn current_note() -> Option<Bytes> {
    NOTE.try_with(Clone::clone).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_note_is_seen_inside_its_scope_only() {
        assert_eq!(current_note(), None);
        let seen = noted(Bytes::from_static(b"alice"), async { current_note() }).await;
        assert_eq!(seen, Some(Bytes::from_static(b"alice")));
        let inner = noted(Bytes::from_static(b"outer"), async {
            noted(Bytes::from_static(b"inner"), async { current_note() }).await
        })
        .await;
        assert_eq!(inner, Some(Bytes::from_static(b"inner")));
        assert_eq!(current_note(), None);
    }
}
