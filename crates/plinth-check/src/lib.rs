//! Checks a recorded history of API calls and watches: linearizable writes, consistent
//! reads, watch guarantees, and that acknowledged writes are durable.
//!
//! A robustness run (`plinth-bench robustness`) records every call its clients make — create,
//! conditional update, conditional delete, consistent get and list — with when it started,
//! when it ended and how, and every watch with the events it delivered. [`check`] then looks
//! for anything a linearizable store with revisions could not have produced.
//!
//! # How
//! A Kubernetes store numbers its writes: each write's `resourceVersion` is its place in one
//! total order. So where a Porcupine/Knossos checker searches for an order of the operations
//! that explains every result, here the order of the writes is given and only has to be
//! *verified*, which takes `O(n log n)` rather than a search:
//!
//! 1. **The write order.** Every watch event is a write at its revision; the watches together
//!    give the order (two watches telling different stories of one revision is a violation),
//!    and each key's states from revision to revision. Each watch vouches for the range from
//!    its start to the last revision it delivered (or caught up to); checks that need a range
//!    no watch vouched for are counted as *unverified*, not guessed.
//! 2. **Writes.** Values are unique per write, so each change names the call that made it. A
//!    change nobody asked for, a change whose call was refused, a value applied twice, an
//!    acknowledged write absent from a range the watches vouched for (lost), an update applied
//!    over another version than its precondition named (lost update) — violations.
//! 3. **Real time.** A write that started after another was acknowledged must come later in
//!    the order; a read must see a state no older than anything acknowledged or observed
//!    before it started (stale read), and nothing written by a call that started after it
//!    ended. A list must be exactly the state at its `resourceVersion`.
//! 4. **Watches.** Every change after a watch's start, exactly once, in revision order, no gap
//!    (a watch ended by 410 vouches only for what it delivered); nothing at or below a bookmark
//!    after it.
//!
//! [`check`] is pure: it takes a [`History`] and returns a [`Report`].

#![forbid(unsafe_code)]

mod history;
mod order;
mod report;
mod timeline;
mod watches;
mod writes;

pub use history::{Call, Event, History, Op, Outcome, Rev, Version, Watch, WatchEnd};
pub use report::{Kind, Report, Violation};

/// Checks `history`: see the crate's documentation for what.
pub fn check(history: &History) -> Report {
    let mut violations = Vec::new();
    let mut unverified = Vec::new();
    let timeline = timeline::Timeline::build(history, &mut violations);
    watches::check(history, &timeline, &mut violations);
    let revs = writes::check(history, &timeline, &mut violations, &mut unverified);
    order::check(history, &revs, &timeline, &mut violations, &mut unverified);
    Report {
        calls: history.calls.len(),
        events: history.watches.iter().map(|w| w.events.len()).sum(),
        changes: timeline.writes.len(),
        unverified: unverified.len(),
        unverified_checks: unverified.into_iter().take(20).collect(),
        violations,
    }
}
