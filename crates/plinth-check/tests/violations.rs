//! The checker finds what it claims to: a consistent history passes, and each kind of
//! impossible history — a stale read, a reordered watch event, a lost acknowledged write, a
//! duplicate event, and more — is reported as exactly that.

use std::collections::BTreeMap;

use plinth_check::{
    Call, Event, History, Kind, Op, Outcome, Report, Version, Watch, WatchEnd, check,
};

fn call(start: u64, op: Op, outcome: Outcome) -> Call {
    Call {
        client: 0,
        op,
        start,
        end: start + 1,
        outcome,
    }
}

fn create(key: &str, value: &str) -> Op {
    Op::Create {
        key: key.into(),
        value: value.into(),
    }
}

fn update(key: &str, value: &str, expect: u64) -> Op {
    Op::Update {
        key: key.into(),
        value: value.into(),
        expect,
    }
}

fn get(key: &str) -> Op {
    Op::Get { key: key.into() }
}

fn found(value: &str, rev: u64) -> Outcome {
    Outcome::Found(Version {
        value: value.into(),
        rev,
    })
}

fn written(rev: u64) -> Outcome {
    Outcome::Written { rev }
}

fn added(key: &str, value: &str, rev: u64) -> Event {
    Event::Added {
        key: key.into(),
        value: value.into(),
        rev,
    }
}

fn modified(key: &str, value: &str, rev: u64) -> Event {
    Event::Modified {
        key: key.into(),
        value: value.into(),
        rev,
    }
}

fn deleted(key: &str, value: &str, rev: u64) -> Event {
    Event::Deleted {
        key: key.into(),
        value: value.into(),
        rev,
    }
}

/// A run without faults: `a` created at 10, updated at 12, read, listed at 13, deleted at 14
/// and found missing; `z` created at 15 closes the run. One watch saw it all.
fn consistent() -> History {
    let listed = BTreeMap::from([(
        "a".to_owned(),
        Version {
            value: "a2".into(),
            rev: 12,
        },
    )]);
    History {
        start_rev: 9,
        calls: vec![
            call(0, create("a", "a1"), written(10)),
            call(2, update("a", "a2", 10), written(12)),
            call(4, get("a"), found("a2", 12)),
            call(
                6,
                Op::List,
                Outcome::Listed {
                    rev: 13,
                    items: listed,
                },
            ),
            call(
                8,
                Op::Delete {
                    key: "a".into(),
                    expect: 12,
                },
                Outcome::Deleted,
            ),
            call(10, get("a"), Outcome::Missing),
            call(12, update("a", "a3", 12), Outcome::Refused { code: 404 }),
            call(14, create("z", "z1"), written(15)),
        ],
        watches: vec![Watch {
            from: 9,
            events: vec![
                added("a", "a1", 10),
                modified("a", "a2", 12),
                Event::Bookmark { rev: 13 },
                deleted("a", "a2", 14),
                added("z", "z1", 15),
            ],
            end: WatchEnd::CaughtUp { rev: 15 },
        }],
    }
}

fn kinds(report: &Report) -> Vec<Kind> {
    let mut kinds: Vec<Kind> = report.violations.iter().map(|v| v.kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    kinds
}

#[test]
fn a_consistent_history_passes() {
    let report = check(&consistent());
    assert_eq!(report.violations, [], "{report}");
    assert_eq!((report.calls, report.changes, report.unverified), (8, 4, 0));
}

#[test]
fn a_stale_read_is_caught() {
    let mut history = consistent();
    // After the update to rev 12 was acknowledged, a read returns the version of rev 10.
    history.calls.push(call(4, get("a"), found("a1", 10)));
    let report = check(&history);
    assert_eq!(kinds(&report), [Kind::StaleRead], "{report}");
    // So is a list older than an acknowledged write.
    let mut history = consistent();
    history.calls.push(call(
        9,
        Op::List,
        Outcome::Listed {
            rev: 11,
            items: BTreeMap::from([(
                "a".to_owned(),
                Version {
                    value: "a1".into(),
                    rev: 10,
                },
            )]),
        },
    ));
    let report = check(&history);
    assert_eq!(kinds(&report), [Kind::StaleRead], "{report}");
}

#[test]
fn a_reordered_watch_event_is_caught() {
    let mut history = consistent();
    history.watches.push(Watch {
        from: 9,
        events: vec![
            added("a", "a1", 10),
            deleted("a", "a2", 14),
            modified("a", "a2", 12),
            added("z", "z1", 15),
        ],
        end: WatchEnd::Gone,
    });
    let report = check(&history);
    assert_eq!(kinds(&report), [Kind::ReorderedEvent], "{report}");
}

#[test]
fn a_lost_acknowledged_write_is_caught() {
    let mut history = consistent();
    // Acknowledged at 13, but the watch that vouched for 10..=15 never saw it (nor did a list).
    history.calls.push(call(6, create("b", "b1"), written(13)));
    let report = check(&history);
    assert_eq!(kinds(&report), [Kind::LostWrite], "{report}");
}

#[test]
fn a_duplicate_event_is_caught() {
    let mut history = consistent();
    history.watches[0].events.insert(2, modified("a", "a2", 12));
    let report = check(&history);
    assert_eq!(kinds(&report), [Kind::DuplicateEvent], "{report}");
}

#[test]
fn a_skipped_event_is_caught() {
    let mut history = consistent();
    history.watches.push(Watch {
        from: 11,
        events: vec![deleted("a", "a2", 14), added("z", "z1", 15)],
        end: WatchEnd::Broken {
            why: "closed".into(),
        },
    });
    let report = check(&history);
    assert_eq!(kinds(&report), [Kind::MissingEvent], "{report}");
}

#[test]
fn an_event_behind_a_bookmark_is_caught() {
    let mut history = consistent();
    history.watches.push(Watch {
        from: 9,
        events: vec![
            added("a", "a1", 10),
            Event::Bookmark { rev: 13 },
            modified("a", "a2", 12),
        ],
        end: WatchEnd::Gone,
    });
    let report = check(&history);
    assert!(kinds(&report).contains(&Kind::BookmarkAhead), "{report}");
}

#[test]
fn a_lost_update_is_caught() {
    let mut history = consistent();
    // The update to a2 named rev 10, but the store applied it over another write at 11.
    history
        .calls
        .push(call(1, update("a", "x", 10), written(11)));
    history.watches[0].events.insert(1, modified("a", "x", 11));
    let report = check(&history);
    assert_eq!(kinds(&report), [Kind::LostUpdate], "{report}");
}

#[test]
fn a_refused_write_that_took_effect_is_caught() {
    let mut history = consistent();
    history.calls[6].outcome = Outcome::Refused { code: 409 };
    history.watches[0].events.push(modified("z", "a3", 16));
    let report = check(&history);
    assert!(
        kinds(&report).contains(&Kind::RefusedWriteApplied),
        "{report}"
    );
}

#[test]
fn a_list_that_is_no_snapshot_is_caught() {
    let mut history = consistent();
    history.calls[3].outcome = Outcome::Listed {
        rev: 13,
        items: BTreeMap::new(),
    };
    let report = check(&history);
    assert_eq!(kinds(&report), [Kind::ListNotSnapshot], "{report}");
}

#[test]
fn what_no_watch_vouched_for_is_unverified_not_a_violation() {
    let mut history = consistent();
    // The only watch ended (410) after rev 12: what followed is nobody's word.
    let watch = &mut history.watches[0];
    watch.events.truncate(2);
    watch.end = WatchEnd::Gone;
    let report = check(&history);
    assert_eq!(report.violations, [], "{report}");
    assert!(report.unverified >= 2, "{report}");
    // Each is named, with the range it needed and the ranges the watches did vouch for.
    assert_eq!(
        report.unverified_checks.len(),
        report.unverified,
        "{report}"
    );
    assert!(
        report
            .unverified_checks
            .iter()
            .all(|c| c.contains("needs (") && c.contains("the watches vouched for (9, 12]")),
        "{report}"
    );
}

#[test]
fn a_history_round_trips_through_json() {
    let history = consistent();
    let text = serde_json::to_string(&history).unwrap_or_default();
    let back: History = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(back, history);
}

#[test]
fn an_unknown_delete_does_not_take_an_acknowledged_ones_place() {
    let mut history = consistent();
    // Before the acknowledged delete (call 4), another delete of the same version failed to
    // connect: the deletion at 14 is the acknowledged call's, and nothing is lost.
    history.calls.insert(
        4,
        call(
            7,
            Op::Delete {
                key: "a".into(),
                expect: 12,
            },
            Outcome::Unknown {
                why: "connect".into(),
            },
        ),
    );
    let report = check(&history);
    assert_eq!(report.violations, [], "{report}");
}

#[test]
fn a_watch_refused_at_once_vouches_for_nothing() {
    let mut history = consistent();
    // A second watch answered 410 before any event (its start older than the server keeps):
    // it vouches for nothing, and the check does not trip over its empty range.
    history.watches.push(Watch {
        from: 12,
        events: vec![],
        end: WatchEnd::Gone,
    });
    let report = check(&history);
    assert_eq!(report.violations, [], "{report}");
    assert_eq!(
        report.unverified,
        check(&consistent()).unverified,
        "{report}"
    );
}
