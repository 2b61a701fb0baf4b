//! Writes: each change the watches saw is matched to the call that made it (values are unique
//! per write; a delete is named by its key and precondition), and each acknowledged call to
//! its change. Returns every write call's place in the order, where known.

use std::collections::HashMap;

use crate::history::{History, Op, Outcome, Rev};
use crate::report::{Kind, Violation};
use crate::timeline::{Change, Timeline};

/// Matches changes and write calls; returns, per call, the revision of its write if it took
/// effect (acknowledged, or seen by the watches).
pub(crate) fn check(
    history: &History,
    timeline: &Timeline,
    out: &mut Vec<Violation>,
    unverified: &mut Vec<String>,
) -> Vec<Option<Rev>> {
    let calls = &history.calls;
    let mut revs: Vec<Option<Rev>> = vec![None; calls.len()];
    let mut by_value: HashMap<&str, usize> = HashMap::new();
    let mut deletes: HashMap<(&str, Rev), Vec<usize>> = HashMap::new();
    let mut acknowledged: HashMap<Rev, usize> = HashMap::new();
    for (i, call) in calls.iter().enumerate() {
        match &call.op {
            Op::Create { value, .. } | Op::Update { value, .. } => {
                by_value.insert(value, i);
            }
            Op::Delete { key, expect } => deletes.entry((key, *expect)).or_default().push(i),
            _ => {}
        }
        if let (true, Outcome::Written { rev }) = (call.op.writes(), &call.outcome)
            && let Some(other) = acknowledged.insert(*rev, i)
        {
            out.push(Violation::new(
                Kind::WrongRevision,
                format!("calls {other} and {i} were both acknowledged at rev {rev}"),
            ));
        }
    }

    let mut applied: HashMap<&str, Rev> = HashMap::new();
    let mut matched_deletes = vec![false; calls.len()];
    for (&rev, write) in &timeline.writes {
        if write.change == Change::Deleted {
            let Some((version, _)) = timeline.before(&write.key, rev) else {
                continue; // reported by the timeline as impossible
            };
            let candidates = deletes
                .get(&(write.key.as_str(), version))
                .map(Vec::as_slice)
                .unwrap_or_default();
            // The acknowledged delete if there is one, else one whose outcome is unknown.
            let open = |i: &usize| !matched_deletes[*i];
            let unrefused = candidates
                .iter()
                .copied()
                .filter(open)
                .find(|&i| calls[i].outcome == Outcome::Deleted)
                .or_else(|| {
                    candidates
                        .iter()
                        .copied()
                        .filter(open)
                        .find(|&i| !matches!(calls[i].outcome, Outcome::Refused { .. }))
                });
            match (unrefused, candidates.first()) {
                (Some(i), _) => {
                    matched_deletes[i] = true;
                    revs[i] = Some(rev);
                }
                (None, Some(&i)) => out.push(Violation::new(
                    Kind::RefusedWriteApplied,
                    format!(
                        "{} deleted at rev {rev}, but call {i} (the only delete of its rev {version}) was {:?}",
                        write.key, calls[i].outcome
                    ),
                )),
                (None, None) => out.push(Violation::new(
                    Kind::UnknownWrite,
                    format!("{} deleted at rev {rev}; no call deleted rev {version}", write.key),
                )),
            }
            continue;
        }
        if let Some(first) = applied.insert(&write.value, rev) {
            out.push(Violation::new(
                Kind::AppliedTwice,
                format!(
                    "value {:?} written at rev {first} and rev {rev}",
                    write.value
                ),
            ));
            continue;
        }
        let Some(&i) = by_value.get(write.value.as_str()) else {
            out.push(Violation::new(
                Kind::UnknownWrite,
                format!("rev {rev}: {write:?}, which no call wrote"),
            ));
            continue;
        };
        let call = &calls[i];
        let kind_fits = matches!(
            (&call.op, write.change),
            (Op::Create { .. }, Change::Added) | (Op::Update { .. }, Change::Modified)
        );
        if !kind_fits || call.op.key() != Some(write.key.as_str()) {
            out.push(Violation::new(
                Kind::ImpossibleChange,
                format!("rev {rev}: {write:?}, but call {i} was {:?}", call.op),
            ));
        }
        match &call.outcome {
            Outcome::Refused { code } => out.push(Violation::new(
                Kind::RefusedWriteApplied,
                format!(
                    "call {i} ({:?}) was refused with {code}, yet applied at rev {rev}",
                    call.op
                ),
            )),
            Outcome::Written { rev: acked } if *acked != rev => out.push(Violation::new(
                Kind::WrongRevision,
                format!(
                    "call {i} was acknowledged at rev {acked}; the watches saw it at rev {rev}"
                ),
            )),
            _ => {}
        }
        revs[i] = Some(rev);
        if let Op::Update { expect, .. } = &call.op {
            let over = timeline.before(&write.key, rev).map(|(r, _)| r);
            if over != Some(*expect) && timeline.covered(*expect, rev) {
                out.push(Violation::new(
                    Kind::LostUpdate,
                    format!(
                        "call {i} updated {} on condition of rev {expect}, but was applied at rev {rev} over rev {over:?}",
                        write.key
                    ),
                ));
            }
        }
    }

    // The run's last acknowledged write (its closing one) comes after every delete: an
    // acknowledged delete missing up to there is lost.
    let last_acknowledged = acknowledged.keys().max().copied().unwrap_or(0);
    for (i, call) in calls.iter().enumerate() {
        match (&call.op, &call.outcome) {
            (Op::Create { value, key } | Op::Update { value, key, .. }, Outcome::Written { rev }) => {
                if revs[i].is_none() {
                    revs[i] = Some(*rev);
                }
                if applied.contains_key(value.as_str()) {
                    continue;
                }
                if timeline.covered(rev - 1, *rev) {
                    out.push(Violation::new(
                        Kind::LostWrite,
                        format!("call {i} ({key} = {value}) acknowledged at rev {rev}; no watch saw it"),
                    ));
                } else {
                    unverified.push(timeline.uncovered(
                        &format!("call {i} ({key} = {value}) acknowledged at rev {rev}"),
                        rev - 1,
                        *rev,
                    ));
                }
            }
            (Op::Delete { key, expect }, Outcome::Deleted) if !matched_deletes[i] => {
                match timeline.after(key, *expect) {
                    Some((next, _)) => out.push(Violation::new(
                        Kind::LostWrite,
                        format!(
                            "call {i} deleted {key} at rev {expect} (acknowledged), but the next change to it, at rev {next}, is not that delete"
                        ),
                    )),
                    None if timeline.covered(*expect, last_acknowledged) => {
                        out.push(Violation::new(
                            Kind::LostWrite,
                            format!("call {i} deleted {key} at rev {expect} (acknowledged); no watch saw it"),
                        ))
                    }
                    None => unverified.push(timeline.uncovered(
                        &format!("call {i} deleted {key} at rev {expect} (acknowledged)"),
                        *expect,
                        last_acknowledged,
                    )),
                }
            }
            _ => {}
        }
    }
    revs
}
