//! Each watch on its own: its events in revision order, none twice, none at or below a
//! bookmark it had sent, and none of the timeline's changes missing from the range it vouched
//! for.

use std::collections::BTreeSet;

use crate::history::{Event, History, Rev};
use crate::report::{Kind, Violation};
use crate::timeline::{Timeline, vouched};

/// Checks every watch of `history` against `timeline`.
pub(crate) fn check(history: &History, timeline: &Timeline, out: &mut Vec<Violation>) {
    for (n, watch) in history.watches.iter().enumerate() {
        let mut received = BTreeSet::new();
        let mut last: Rev = watch.from;
        let mut bookmark: Option<Rev> = None;
        for event in &watch.events {
            let rev = event.rev();
            if let Event::Bookmark { .. } = event {
                bookmark = Some(bookmark.map_or(rev, |b| b.max(rev)));
                continue;
            }
            if rev <= watch.from {
                out.push(Violation::new(
                    Kind::ReorderedEvent,
                    format!("watch {n} from rev {} delivered rev {rev}", watch.from),
                ));
            } else if !received.insert(rev) {
                out.push(Violation::new(
                    Kind::DuplicateEvent,
                    format!("watch {n} delivered rev {rev} twice"),
                ));
            } else if rev < last {
                out.push(Violation::new(
                    Kind::ReorderedEvent,
                    format!("watch {n} delivered rev {rev} after rev {last}"),
                ));
            }
            if let Some(b) = bookmark.filter(|b| rev <= *b) {
                out.push(Violation::new(
                    Kind::BookmarkAhead,
                    format!("watch {n} delivered rev {rev} after a bookmark at rev {b}"),
                ));
            }
            last = last.max(rev);
        }
        let upto = vouched(watch.from, &watch.events, &watch.end);
        if upto <= watch.from {
            // Nothing delivered nor vouched for (answered 410 at once, or broken first).
            continue;
        }
        let missing: Vec<Rev> = timeline
            .writes
            .range(watch.from + 1..=upto)
            .map(|(rev, _)| *rev)
            .filter(|rev| !received.contains(rev))
            .collect();
        if !missing.is_empty() {
            out.push(Violation::new(
                Kind::MissingEvent,
                format!(
                    "watch {n} (revs {}..={upto}, ended {:?}) skipped {} changes: revs {:?}",
                    watch.from + 1,
                    watch.end,
                    missing.len(),
                    &missing[..missing.len().min(10)]
                ),
            ));
        }
    }
}
