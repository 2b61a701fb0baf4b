//! The order of writes the watches report: every change at its revision, what each key held
//! from when to when, and which revision ranges some watch vouched for in full.

use std::collections::BTreeMap;

use crate::history::{Event, History, Rev, Version, WatchEnd};
use crate::report::{Kind, Violation};

/// What a change did to its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// Created it.
    Added,
    /// Replaced its value.
    Modified,
    /// Removed it (the value is the one it held).
    Deleted,
}

/// One write as the watches saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Write {
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) change: Change,
}

/// A key's states in revision order: from `rev` on, it held `Some(value)` or nothing.
type States = Vec<(Rev, Option<String>)>;

/// Every change the watches saw, by revision.
pub(crate) struct Timeline {
    pub(crate) start_rev: Rev,
    pub(crate) writes: BTreeMap<Rev, Write>,
    keys: BTreeMap<String, States>,
    /// Merged `(from, to]` ranges in which some watch delivered every change.
    covered: Vec<(Rev, Rev)>,
}

/// The last revision a watch vouched for: its last event or bookmark, or where it caught up.
pub(crate) fn vouched(from: Rev, events: &[Event], end: &WatchEnd) -> Rev {
    let delivered = events.iter().map(Event::rev).max().unwrap_or(from);
    match end {
        WatchEnd::CaughtUp { rev } => delivered.max(*rev),
        _ => delivered.max(from),
    }
}

impl Timeline {
    /// The changes of every watch, merged; watches that tell different stories of one
    /// revision, and changes impossible for their key's state, are violations.
    pub(crate) fn build(history: &History, out: &mut Vec<Violation>) -> Timeline {
        let mut writes: BTreeMap<Rev, Write> = BTreeMap::new();
        let mut ranges = Vec::new();
        for (n, watch) in history.watches.iter().enumerate() {
            ranges.push((watch.from, vouched(watch.from, &watch.events, &watch.end)));
            for event in &watch.events {
                let (key, value, change) = match event {
                    Event::Added { key, value, .. } => (key, value, Change::Added),
                    Event::Modified { key, value, .. } => (key, value, Change::Modified),
                    Event::Deleted { key, value, .. } => (key, value, Change::Deleted),
                    Event::Bookmark { .. } => continue,
                };
                let write = Write {
                    key: key.clone(),
                    value: value.clone(),
                    change,
                };
                let rev = event.rev();
                match writes.get(&rev) {
                    Some(known) if *known != write => out.push(Violation::new(
                        Kind::WatchersDisagree,
                        format!("watch {n} says rev {rev} was {write:?}, another said {known:?}"),
                    )),
                    Some(_) => {}
                    None => {
                        writes.insert(rev, write);
                    }
                }
            }
        }
        ranges.sort_unstable();
        let mut covered: Vec<(Rev, Rev)> = Vec::new();
        for (from, to) in ranges {
            match covered.last_mut() {
                Some(last) if from <= last.1 => last.1 = last.1.max(to),
                _ => covered.push((from, to)),
            }
        }
        let mut timeline = Timeline {
            start_rev: history.start_rev,
            writes,
            keys: BTreeMap::new(),
            covered,
        };
        timeline.replay(out);
        timeline
    }

    /// Each key's states; a change its key's state does not allow is a violation (checked
    /// only while every earlier change is known).
    fn replay(&mut self, out: &mut Vec<Violation>) {
        let mut keys: BTreeMap<String, States> = BTreeMap::new();
        for (&rev, write) in &self.writes {
            let states = keys.entry(write.key.clone()).or_default();
            let held = states.last().and_then(|(_, value)| value.as_deref());
            let known = self.covered(self.start_rev, rev);
            let wrong = match (write.change, held) {
                (Change::Added, Some(_)) => Some("created while it existed"),
                (Change::Modified, None) => Some("modified while it did not exist"),
                (Change::Deleted, None) => Some("deleted while it did not exist"),
                (Change::Deleted, Some(value)) if *value != write.value => {
                    Some("deleted with a value it did not hold")
                }
                _ => None,
            };
            if let (true, Some(wrong)) = (known, wrong) {
                out.push(Violation::new(
                    Kind::ImpossibleChange,
                    format!("rev {rev}: {} {wrong} ({write:?})", write.key),
                ));
            }
            let next = match write.change {
                Change::Deleted => None,
                _ => Some(write.value.clone()),
            };
            states.push((rev, next));
        }
        self.keys = keys;
    }

    /// Whether some watch delivered every change in `(from, to]`.
    pub(crate) fn covered(&self, from: Rev, to: Rev) -> bool {
        to <= from || self.covered.iter().any(|&(a, b)| a <= from && to <= b)
    }

    /// A note that `what` needed `(from, to]`, which no watch vouched for, with the ranges
    /// the watches did vouch for (the first ten).
    pub(crate) fn uncovered(&self, what: &str, from: Rev, to: Rev) -> String {
        let ranges: Vec<String> = self
            .covered
            .iter()
            .take(10)
            .map(|(a, b)| format!("({a}, {b}]"))
            .collect();
        format!(
            "{what} needs ({from}, {to}]; the watches vouched for {}{}",
            ranges.join(", "),
            if self.covered.len() > 10 { ", …" } else { "" }
        )
    }

    /// The change before `rev` to `key`, and what the key held after it.
    pub(crate) fn before(&self, key: &str, rev: Rev) -> Option<(Rev, Option<&str>)> {
        let states = self.keys.get(key)?;
        let at = states.partition_point(|(r, _)| *r < rev);
        let (r, value) = states.get(at.checked_sub(1)?)?;
        Some((*r, value.as_deref()))
    }

    /// The first change to `key` after `rev`.
    pub(crate) fn after(&self, key: &str, rev: Rev) -> Option<(Rev, Option<&str>)> {
        let states = self.keys.get(key)?;
        let at = states.partition_point(|(r, _)| *r <= rev);
        states.get(at).map(|(r, value)| (*r, value.as_deref()))
    }

    /// What `key` held at `rev`.
    pub(crate) fn at(&self, key: &str, rev: Rev) -> Option<&str> {
        self.before(key, rev + 1).and_then(|(_, value)| value)
    }

    /// Whether `key` was absent at some revision in `[lo, hi)`.
    pub(crate) fn absent_within(&self, key: &str, lo: Rev, hi: Rev) -> bool {
        if self.at(key, lo).is_none() {
            return true;
        }
        let Some(states) = self.keys.get(key) else {
            return true;
        };
        states
            .iter()
            .any(|(r, value)| *r > lo && *r < hi && value.is_none())
    }

    /// Every key's state at `rev`.
    pub(crate) fn state_at(&self, rev: Rev) -> BTreeMap<String, Version> {
        self.keys
            .keys()
            .filter_map(|key| {
                let (at, value) = self.before(key, rev + 1)?;
                Some((
                    key.clone(),
                    Version {
                        value: value?.to_owned(),
                        rev: at,
                    },
                ))
            })
            .collect()
    }
}
