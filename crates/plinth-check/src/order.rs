//! Real time: each call's place in the write order must fall after everything acknowledged
//! or observed before the call began, and before every write that began after it ended.
//! Reads are checked against the timeline's states in that window.

use crate::history::{History, Op, Outcome, Rev};
use crate::report::{Kind, Violation};
use crate::timeline::{Change, Timeline};

/// The window `[lo, hi)` of revisions a call may have taken effect at, by real time.
struct Windows {
    /// `(end, rev)` of calls whose result is known, by end, with the running maximum of rev.
    ended: Vec<(u64, Rev)>,
    /// `(start, rev)` of writes that took effect, by start, with the minimum rev from there on.
    begun: Vec<(u64, Rev)>,
    floor: Rev,
}

impl Windows {
    fn new(history: &History, revs: &[Option<Rev>]) -> Windows {
        let mut ended = Vec::new();
        let mut begun = Vec::new();
        for (call, rev) in history.calls.iter().zip(revs) {
            let seen = match (&call.outcome, rev) {
                (Outcome::Written { .. } | Outcome::Deleted, Some(rev)) => Some(*rev),
                (Outcome::Found(version), _) => Some(version.rev),
                (Outcome::Listed { rev, .. }, _) => Some(*rev),
                _ => None,
            };
            if let Some(seen) = seen {
                ended.push((call.end, seen));
            }
            if let (true, Some(rev)) = (call.op.writes(), rev) {
                begun.push((call.start, *rev));
            }
        }
        ended.sort_unstable();
        let mut max = 0;
        for entry in &mut ended {
            max = max.max(entry.1);
            entry.1 = max;
        }
        begun.sort_unstable();
        let mut min = Rev::MAX;
        for entry in begun.iter_mut().rev() {
            min = min.min(entry.1);
            entry.1 = min;
        }
        Windows {
            ended,
            begun,
            floor: history.start_rev,
        }
    }

    /// The highest revision acknowledged or observed by calls that ended before `start`.
    fn lo(&self, start: u64) -> Rev {
        let at = self.ended.partition_point(|(end, _)| *end < start);
        at.checked_sub(1)
            .map_or(self.floor, |i| self.ended[i].1.max(self.floor))
    }

    /// The lowest revision written by calls that started after `end` (`Rev::MAX`: none).
    fn hi(&self, end: u64) -> Rev {
        let at = self.begun.partition_point(|(start, _)| *start <= end);
        self.begun.get(at).map_or(Rev::MAX, |(_, rev)| *rev)
    }
}

/// Checks each call's window: writes' revisions, and what reads returned.
pub(crate) fn check(
    history: &History,
    revs: &[Option<Rev>],
    timeline: &Timeline,
    out: &mut Vec<Violation>,
    unverified: &mut Vec<String>,
) {
    let windows = Windows::new(history, revs);
    let last_change = timeline.writes.keys().next_back().copied().unwrap_or(0);
    for (i, call) in history.calls.iter().enumerate() {
        let (lo, hi) = (windows.lo(call.start), windows.hi(call.end));
        match (&call.op, &call.outcome) {
            (op, _) if op.writes() => {
                if let Some(rev) = revs[i].filter(|rev| *rev <= lo) {
                    out.push(Violation::new(
                        Kind::RealTimeOrder,
                        format!(
                            "call {i} ({op:?}) took effect at rev {rev}, but rev {lo} had been acknowledged or observed before it began"
                        ),
                    ));
                }
            }
            (Op::Get { key }, Outcome::Found(version)) => {
                if version.rev >= hi {
                    out.push(Violation::new(
                        Kind::RealTimeOrder,
                        format!("call {i} read {key} at rev {}, written by a call that began after it ended (first such rev {hi})", version.rev),
                    ));
                }
                if !timeline.covered(version.rev.saturating_sub(1), version.rev) {
                    unverified.push(timeline.uncovered(
                        &format!("call {i} read {key} at rev {}", version.rev),
                        version.rev.saturating_sub(1),
                        version.rev,
                    ));
                    continue;
                }
                let written = timeline.writes.get(&version.rev).filter(|w| {
                    w.key == *key && w.value == version.value && w.change != Change::Deleted
                });
                if written.is_none() {
                    out.push(Violation::new(
                        Kind::ReadNeverWritten,
                        format!(
                            "call {i} read {key} = {:?} at rev {}; the watches saw {:?} there",
                            version.value,
                            version.rev,
                            timeline.writes.get(&version.rev)
                        ),
                    ));
                }
                if let Some((next, _)) = timeline.after(key, version.rev).filter(|(n, _)| *n <= lo)
                {
                    out.push(Violation::new(
                        Kind::StaleRead,
                        format!(
                            "call {i} read {key} at rev {} (replaced at rev {next}), but rev {lo} had been acknowledged or observed before it began",
                            version.rev
                        ),
                    ));
                }
            }
            (Op::Get { key }, Outcome::Missing) => {
                let upto = if hi == Rev::MAX { last_change } else { hi - 1 };
                if !timeline.covered(history.start_rev, upto.max(lo)) {
                    unverified.push(timeline.uncovered(
                        &format!("call {i} found no {key}"),
                        history.start_rev,
                        upto.max(lo),
                    ));
                } else if !timeline.absent_within(key, lo, hi) {
                    out.push(Violation::new(
                        Kind::StaleRead,
                        format!("call {i} found no {key}, but it existed from rev {lo} (acknowledged or observed before the read began) until after rev {upto}"),
                    ));
                }
            }
            (Op::List, Outcome::Listed { rev, items }) => {
                if *rev < lo {
                    out.push(Violation::new(
                        Kind::StaleRead,
                        format!("call {i} listed at rev {rev}, but rev {lo} had been acknowledged or observed before it began"),
                    ));
                }
                if *rev >= hi {
                    out.push(Violation::new(
                        Kind::RealTimeOrder,
                        format!("call {i} listed at rev {rev}, not below rev {hi}, written by a call that began after it ended"),
                    ));
                }
                if !timeline.covered(history.start_rev, *rev) {
                    unverified.push(timeline.uncovered(
                        &format!("call {i} listed at rev {rev}"),
                        history.start_rev,
                        *rev,
                    ));
                    continue;
                }
                let state = timeline.state_at(*rev);
                if state != *items {
                    let differ: Vec<&String> = state
                        .keys()
                        .chain(items.keys())
                        .filter(|k| state.get(*k) != items.get(*k))
                        .take(5)
                        .collect();
                    out.push(Violation::new(
                        Kind::ListNotSnapshot,
                        format!(
                            "call {i} listed at rev {rev}; keys differing from the state there: {differ:?} (listed {:?}, state {:?})",
                            differ.iter().map(|k| items.get(*k)).collect::<Vec<_>>(),
                            differ.iter().map(|k| state.get(*k)).collect::<Vec<_>>()
                        ),
                    ));
                }
            }
            _ => {}
        }
    }
}
