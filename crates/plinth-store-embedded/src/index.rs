//! The in-memory key index: for every key, the revisions at which it changed (etcd's `keyIndex`).
//!
//! The database holds values keyed by revision; this index answers "which revision of key K is
//! visible at revision R" without touching the disk. It is rebuilt from the log at start.
//!
//! Worked example for key `a`: `create` at 2, `update` at 3, `delete` at 4, `create` at 7 gives
//! the entries `[2 (created 2), 3 (created 2), 4 (tombstone), 7 (created 7)]`. At revision 3 the
//! visible entry is 3; at 5 the last entry at or before 5 is the tombstone, so `a` is absent;
//! at 8 it is 7. `compact(4)` keeps the entry just before 4 (3: the previous value of the event at
//! 4) and everything from 4 on, and drops 2; `compact(7)` then drops 3 and the tombstone 4 —
//! nothing older than 7 is visible at 6 — leaving `[7]`.

use std::collections::BTreeMap;
use std::ops::Bound;

use plinth_store::Revision;

/// One change of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) revision: Revision,
    /// The revision the key was created at; 0 for a tombstone (a delete).
    pub(crate) create_revision: Revision,
}

impl Entry {
    pub(crate) fn is_tombstone(&self) -> bool {
        self.create_revision == 0
    }
}

/// Every key's changes, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Index {
    keys: BTreeMap<Box<str>, Vec<Entry>>,
}

impl Index {
    /// Records a change; revisions arrive in increasing order.
    pub(crate) fn record(&mut self, key: &str, entry: Entry) {
        match self.keys.get_mut(key) {
            Some(entries) => entries.push(entry),
            None => {
                self.keys.insert(key.into(), vec![entry]);
            }
        }
    }

    /// The live version of `key` at revision `at`.
    pub(crate) fn visible(&self, key: &str, at: Revision) -> Option<Entry> {
        visible_in(self.keys.get(key)?, at)
    }

    /// The live version of `key` now.
    pub(crate) fn current(&self, key: &str) -> Option<Entry> {
        self.keys
            .get(key)?
            .last()
            .filter(|e| !e.is_tombstone())
            .copied()
    }

    /// Every change of `key` still indexed, oldest first.
    pub(crate) fn changes(&self, key: &str) -> Vec<Entry> {
        self.keys.get(key).cloned().unwrap_or_default()
    }

    /// Keys from `start` on that begin with `prefix` and are live at `at`, in key order; at most
    /// `limit`, plus how many more follow. `start` must not sort before `prefix`.
    pub(crate) fn range(
        &self,
        start: &str,
        prefix: &str,
        at: Revision,
        limit: usize,
    ) -> (Vec<(String, Entry)>, usize) {
        let mut found = Vec::new();
        let mut remaining = 0;
        for (key, entries) in self
            .keys
            .range::<str, _>((Bound::Included(start), Bound::Unbounded))
        {
            if !key.starts_with(prefix) {
                break;
            }
            if let Some(entry) = visible_in(entries, at) {
                if found.len() == limit {
                    remaining += 1;
                } else {
                    found.push((key.to_string(), entry));
                }
            }
        }
        (found, remaining)
    }

    /// The revisions [`Index::compact`] would drop, without dropping them.
    pub(crate) fn compactable(&self, revision: Revision) -> Vec<Revision> {
        let mut dropped = Vec::new();
        for entries in self.keys.values() {
            dropped.extend(
                entries[..cut_point(entries, revision)]
                    .iter()
                    .map(|e| e.revision),
            );
        }
        dropped
    }

    /// Drops what is not needed to read at `revision` or later, nor to give the events from
    /// `revision` on their previous values: per key, everything before the newest entry older
    /// than `revision`, and that entry too if it is a tombstone. Returns the dropped revisions,
    /// whose records the caller deletes from disk.
    pub(crate) fn compact(&mut self, revision: Revision) -> Vec<Revision> {
        let mut dropped = Vec::new();
        self.keys.retain(|_, entries| {
            dropped.extend(
                entries
                    .drain(..cut_point(entries, revision))
                    .map(|e| e.revision),
            );
            !entries.is_empty()
        });
        dropped
    }

    /// How many keys have an entry.
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }
}

/// How many of a key's oldest entries compaction at `revision` drops.
fn cut_point(entries: &[Entry], revision: Revision) -> usize {
    let before = entries.partition_point(|e| e.revision < revision);
    let mut cut = before.saturating_sub(1);
    if entries
        .get(cut)
        .is_some_and(|e| e.revision < revision && e.is_tombstone())
    {
        cut += 1;
    }
    cut
}

fn visible_in(entries: &[Entry], at: Revision) -> Option<Entry> {
    let n = entries.partition_point(|e| e.revision <= at);
    let entry = *entries.get(n.checked_sub(1)?)?;
    (!entry.is_tombstone()).then_some(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> Index {
        let mut index = Index::default();
        for (revision, create_revision) in [(2, 2), (3, 2), (4, 0), (7, 7)] {
            index.record(
                "a",
                Entry {
                    revision,
                    create_revision,
                },
            );
        }
        index.record(
            "b",
            Entry {
                revision: 5,
                create_revision: 5,
            },
        );
        index
    }

    #[test]
    fn visibility_follows_the_worked_example() {
        let index = example();
        assert_eq!(index.visible("a", 1), None);
        assert_eq!(index.visible("a", 3).map(|e| e.revision), Some(3));
        assert_eq!(index.visible("a", 5), None);
        assert_eq!(
            index
                .visible("a", 8)
                .map(|e| (e.revision, e.create_revision)),
            Some((7, 7))
        );
        assert_eq!(index.current("a").map(|e| e.revision), Some(7));
        let (at3, more) = index.range("", "", 3, 10);
        let more = more > 0;
        assert_eq!(
            at3.iter()
                .map(|(k, e)| (k.as_str(), e.revision))
                .collect::<Vec<_>>(),
            [("a", 3)]
        );
        assert!(!more);
        let (now, more) = index.range("a", "", 9, 1);
        assert_eq!((now.len(), more), (1, 1));
        assert_eq!(
            index
                .range("a\0", "", 9, 10)
                .0
                .iter()
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
        assert_eq!(
            index.range("a", "a", 9, 10).0.len(),
            1,
            "the prefix bounds the range"
        );
    }

    #[test]
    fn compaction_follows_the_worked_example() {
        let mut index = example();
        assert_eq!(index.compactable(4), [2]);
        assert_eq!(index.compact(4), [2]);
        assert_eq!(index.visible("a", 4), None);
        assert_eq!(index.compact(7), [3, 4]);
        assert_eq!(
            index.keys["a"],
            [Entry {
                revision: 7,
                create_revision: 7
            }]
        );
        assert_eq!(index.visible("b", 7).map(|e| e.revision), Some(5));
        let mut gone = Index::default();
        gone.record(
            "x",
            Entry {
                revision: 2,
                create_revision: 2,
            },
        );
        gone.record(
            "x",
            Entry {
                revision: 3,
                create_revision: 0,
            },
        );
        assert_eq!(gone.compact(9), [2, 3]);
        assert_eq!(gone.len(), 0);
    }
}
