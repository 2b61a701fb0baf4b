//! History: every version of a key, the journal of writes, and the notes writes carry.

use std::sync::Arc;

use bytes::Bytes;

use super::b;
use crate::note::noted;
use crate::{EventKind, Store, StoreError};

/// A key's versions and the journal: puts and deletes in revision order, with their values,
/// their notes (when the backend keeps notes), from a revision on, and refused once compacted.
pub async fn history_keeps_versions_and_notes(store: Arc<dyn Store>) {
    let note = |s: &'static str| Bytes::from_static(s.as_bytes());
    let created = noted(note("created by alice"), store.create("/h/a", b("one")))
        .await
        .unwrap();
    // A sibling whose key has `/h/a` as prefix is no version of `/h/a`.
    let sibling = store.create("/h/ab", b("other")).await.unwrap();
    let updated = noted(
        note("updated by bob"),
        store.update("/h/a", b("two"), created),
    )
    .await
    .unwrap();
    let (deleted, _) = noted(note("deleted by carol"), store.delete("/h/a", None))
        .await
        .unwrap();

    let versions = store.versions("/h/a", created).await.unwrap();
    let seen: Vec<_> = versions
        .iter()
        .map(|v| (v.kind, v.kv.mod_revision, v.kv.value.clone()))
        .collect();
    assert_eq!(
        seen,
        [
            (EventKind::Put, created, b("one")),
            (EventKind::Put, updated, b("two")),
            (EventKind::Delete, deleted, Bytes::new()),
        ],
        "the versions of /h/a"
    );
    assert_eq!(versions[1].kv.create_revision, created);
    let notes: Vec<_> = versions.iter().map(|v| v.note.clone()).collect();
    if store.keeps_notes() {
        assert_eq!(
            notes,
            [
                Some(note("created by alice")),
                Some(note("updated by bob")),
                Some(note("deleted by carol")),
            ],
            "each version carries its write's note"
        );
    } else {
        assert!(notes.iter().all(Option::is_none), "no notes: {notes:?}");
    }
    assert_eq!(
        store
            .versions("/h/a", updated)
            .await
            .unwrap()
            .iter()
            .map(|v| v.kv.mod_revision)
            .collect::<Vec<_>>(),
        [updated, deleted],
        "versions from a revision on"
    );
    assert!(store.versions("/h/none", 0).await.unwrap().is_empty());

    let journal = store.journal("/h/", created, 100).await.unwrap();
    assert_eq!(
        journal
            .iter()
            .map(|v| (v.kv.key.as_str(), v.kv.mod_revision))
            .collect::<Vec<_>>(),
        [
            ("/h/a", created),
            ("/h/ab", sibling),
            ("/h/a", updated),
            ("/h/a", deleted)
        ],
        "the journal under /h/"
    );
    if store.keeps_notes() {
        assert_eq!(journal[0].note, Some(note("created by alice")));
        assert_eq!(journal[1].note, None, "a write outside `noted` has no note");
    }
    assert_eq!(store.journal("/h/", created, 2).await.unwrap().len(), 2);

    let after = store.create("/h/after", b("x")).await.unwrap();
    store.compact(after).await.unwrap();
    match store.versions("/h/a", created).await {
        Err(StoreError::Compacted { .. }) => {}
        other => panic!("versions from a compacted revision: {other:?}"),
    }
    match store.journal("/h/", created, 10).await {
        Err(StoreError::Compacted { .. }) => {}
        other => panic!("the journal from a compacted revision: {other:?}"),
    }
    let kept = store.versions("/h/after", after).await.unwrap();
    assert_eq!(
        kept.len(),
        1,
        "the version at the compaction revision stays"
    );
}
