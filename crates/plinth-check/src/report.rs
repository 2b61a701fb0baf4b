//! What the checker reports: violations by kind, and how much it checked.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What kind of impossible thing a history shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Kind {
    /// Two watches reported different changes at one revision.
    WatchersDisagree,
    /// A change its key's state did not allow (a create of an existing key, …).
    ImpossibleChange,
    /// A change no call asked for.
    UnknownWrite,
    /// A change made by a call the server refused.
    RefusedWriteApplied,
    /// One write's value applied at two revisions.
    AppliedTwice,
    /// Two acknowledged writes answered with one revision, or an acknowledged revision that is
    /// not where the watches saw the write.
    WrongRevision,
    /// An acknowledged write missing from a range the watches vouched for.
    LostWrite,
    /// An update applied over a version other than the one its precondition named.
    LostUpdate,
    /// A write ordered before a write acknowledged before it started, or a read that saw a
    /// write that started after it ended.
    RealTimeOrder,
    /// A read that returned a state older than one acknowledged or observed before it began.
    StaleRead,
    /// A read returned a value that was never written at the revision it named.
    ReadNeverWritten,
    /// A list that is not the state at its own `resourceVersion`.
    ListNotSnapshot,
    /// A watch delivered an event after a later one, or at or before its start.
    ReorderedEvent,
    /// A watch delivered one revision twice.
    DuplicateEvent,
    /// A watch skipped a change in the range it vouched for.
    MissingEvent,
    /// A watch delivered a change at or below a bookmark it had already sent.
    BookmarkAhead,
}

/// One violation: its kind and what shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// What kind.
    pub kind: Kind,
    /// The calls, events and revisions involved.
    pub detail: String,
}

impl Violation {
    pub(crate) fn new(kind: Kind, detail: String) -> Violation {
        Violation { kind, detail }
    }
}

/// What [`check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Calls checked.
    pub calls: usize,
    /// Watch events checked (bookmarks included).
    pub events: usize,
    /// Distinct changes the watches reported.
    pub changes: usize,
    /// Checks that needed a revision range no watch vouched for.
    pub unverified: usize,
    /// The first (up to 20) of those checks, each with the range it needed.
    #[serde(default)]
    pub unverified_checks: Vec<String>,
    /// Everything impossible, in the order found.
    pub violations: Vec<Violation>,
}

impl Report {
    /// Violations of one kind.
    pub fn count(&self, kind: Kind) -> usize {
        self.violations.iter().filter(|v| v.kind == kind).count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "checked {} calls, {} watch events ({} changes); {} checks unverified; {} violations",
            self.calls,
            self.events,
            self.changes,
            self.unverified,
            self.violations.len()
        )?;
        for check in &self.unverified_checks {
            writeln!(f, "  unverified: {check}")?;
        }
        for violation in self.violations.iter().take(50) {
            writeln!(f, "  {:?}: {}", violation.kind, violation.detail)?;
        }
        if self.violations.len() > 50 {
            writeln!(f, "  … and {} more", self.violations.len() - 50)?;
        }
        Ok(())
    }
}
