//! `plinth-bench robustness` for a minute per backend, as CI runs it: mixed traffic while
//! servers (and etcd members) are SIGKILLed, paused and cut off the network (namespaces the
//! run makes, removed after it), then the recorded history is checked —
//! and, to show the check has teeth on a real history, checked again with one watch event
//! dropped and one read made stale, which must be reported.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use plinth_check::{Event, History, Kind, Op, Outcome, check};

/// The plinth binary the workspace's tests built beside this one.
fn plinth() -> PathBuf {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_plinth-bench"));
    let plinth = bench.with_file_name("plinth");
    assert!(
        plinth.exists(),
        "{} is missing: build it first (cargo build -p plinth)",
        plinth.display()
    );
    plinth
}

/// Runs the harness in a process group of its own (so that a hung run is stopped with every
/// server it started, by the group's PID); returns its table and the recorded history.
fn robustness(args: &[&str]) -> (String, History) {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_plinth-bench"))
        .arg("robustness")
        .arg("--binary")
        .arg(plinth())
        .arg("--history")
        .arg(&history)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(540);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", &format!("-{pid}")])
                .status();
            let _ = child.wait();
            panic!("the robustness run did not end within 9 minutes");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let output = child.wait_with_output().unwrap();
    // The partition network's namespaces and bridges carry the run's PID: none is left.
    let tag = format!("plrb{pid}");
    for listing in [&["netns", "list"][..], &["link", "show"][..]] {
        let out = Command::new("ip").args(listing).output().unwrap();
        let out = String::from_utf8_lossy(&out.stdout);
        assert!(!out.contains(&tag), "left behind: {out}");
    }
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{table}\n{log}");
    let history: History = serde_json::from_slice(&std::fs::read(&history).unwrap()).unwrap();
    (table, history)
}

/// The table's row for `what`.
fn row<'t>(table: &'t str, what: &str) -> &'t str {
    table
        .lines()
        .find(|l| l.starts_with(&format!("| {what}")))
        .unwrap_or_else(|| panic!("no row {what:?} in\n{table}"))
}

/// The history passed; now spoil it twice and see each spoiling reported.
fn spoiled_histories_are_caught(history: &History) {
    let clean = check(history);
    assert_eq!(clean.violations, [], "{clean}");
    assert_eq!(clean.unverified, 0, "{clean}");

    // One watch misses one change.
    let mut dropped = history.clone();
    let watch = dropped
        .watches
        .iter_mut()
        .find(|w| w.events.len() > 2)
        .expect("a watch with events");
    let at = watch
        .events
        .iter()
        .position(|e| !matches!(e, Event::Bookmark { .. }))
        .unwrap();
    watch.events.remove(at);
    let report = check(&dropped);
    assert!(report.count(Kind::MissingEvent) >= 1, "{report}");

    // A read long after a key's first version was replaced returns that first version.
    let mut stale = history.clone();
    let (key, first) = history
        .watches
        .iter()
        .flat_map(|w| &w.events)
        .find_map(|e| match e {
            Event::Added { key, value, rev } => Some((key.clone(), (value.clone(), *rev))),
            _ => None,
        })
        .unwrap();
    let last = stale.calls.last().unwrap().end;
    stale.calls.push(plinth_check::Call {
        client: 0,
        op: Op::Get { key },
        start: last + 1,
        end: last + 2,
        outcome: Outcome::Found(plinth_check::Version {
            value: first.0,
            rev: first.1,
        }),
    });
    let report = check(&stale);
    assert!(report.count(Kind::StaleRead) >= 1, "{report}");
}

#[test]
fn a_minute_of_kills_and_pauses_on_the_embedded_store_breaks_no_guarantee() {
    let (table, history) = robustness(&["--seconds", "60", "--faults", "kill-server,pause-server"]);
    assert!(row(&table, "SIGKILL a server").contains("| "), "{table}");
    assert!(row(&table, "SIGSTOP a server").contains("| "), "{table}");
    assert!(table.contains("; 0 violations"), "{table}");
    assert!(history.calls.len() > 100, "{table}");
    spoiled_histories_are_caught(&history);
}

#[test]
fn a_minute_of_kills_pauses_and_partitions_on_three_servers_and_etcd_members_breaks_no_guarantee() {
    let (table, history) = robustness(&[
        "--etcd",
        "--servers",
        "3",
        "--seconds",
        "60",
        "--faults",
        "partition-member,kill-server,partition-server,kill-member,pause-server,pause-member",
        "--fault-interval",
        "3",
    ]);
    for fault in [
        "SIGKILL a server",
        "SIGSTOP a server",
        "cut a server off from etcd",
        "SIGKILL an etcd member",
        "SIGSTOP an etcd member",
        "cut an etcd member off",
    ] {
        row(&table, fault);
    }
    assert!(table.contains("; 0 violations"), "{table}");
    assert!(history.calls.len() > 100, "{table}");
    spoiled_histories_are_caught(&history);
}
