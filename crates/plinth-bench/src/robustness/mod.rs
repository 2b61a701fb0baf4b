//! `plinth-bench robustness`: etcd-style robustness runs. Clients on every server drive
//! Kubernetes-shaped traffic (create, conditional update and delete, consistent get and
//! list, watches from revisions, a few hot keys) while faults are injected; every call and
//! event is recorded and `plinth-check` verifies the history (linearizable writes, consistent
//! reads, watch guarantees, acknowledged ⇒ durable). Prints a Markdown table; fails if the
//! checker found a violation.

mod cluster;
mod net;
mod traffic;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use plinth_check::{Call, History, Op, Outcome, check};
use tokio::sync::watch;

use crate::common::{Error, ensure_namespace, run_id};
use cluster::{Cluster, FaultKind};
use traffic::{Dice, Phase, Record, Target};

/// What a run is asked to do.
pub(crate) struct Options {
    pub(crate) binary: PathBuf,
    pub(crate) etcd: bool,
    pub(crate) servers: usize,
    pub(crate) seconds: u64,
    pub(crate) clients: u32,
    pub(crate) keys: u64,
    pub(crate) faults: Vec<String>,
    pub(crate) fault_interval: Duration,
    pub(crate) history: Option<PathBuf>,
}

/// One fault as it was done: what, to which process, when (µs on the run's clock).
struct Fault {
    kind: FaultKind,
    /// The server it was done to (its clients are the ones it may keep waiting); `None`: an
    /// etcd member, which every client may wait on.
    server: Option<usize>,
    start: u64,
    end: u64,
}

const NAMESPACE: &str = "plinth-robustness";

/// Runs the traffic and the faults, checks the history, prints the table.
pub(crate) async fn run(options: Options) -> Result<(), Error> {
    let kinds: Vec<FaultKind> = options
        .faults
        .iter()
        .filter(|f| !f.is_empty() && *f != "none")
        .map(|f| FaultKind::parse(f).ok_or_else(|| format!("no fault called {f:?}")))
        .collect::<Result<_, _>>()?;
    if !options.etcd && kinds.iter().any(|k| !k.to_server() || k.partitions()) {
        return Err("etcd member faults and partitions need --etcd".into());
    }
    let namespaced = kinds.iter().any(|k| k.partitions());
    let mut cluster =
        Cluster::start(&options.binary, options.servers, options.etcd, namespaced).await?;
    let (servers, members) = cluster.size();
    let admin = ready_client(&cluster, 0).await?;
    ensure_namespace(&admin, NAMESPACE).await?;
    let target = Arc::new(Target::new(NAMESPACE, run_id()));
    let record = Arc::new(Record::default());
    let start_rev = match target.call(&admin, &Op::List).await {
        Outcome::Listed { rev, .. } => rev,
        other => return Err(format!("the first list failed: {other:?}").into()),
    };

    let (phase, signal) = watch::channel(Phase::Running);
    let mut watchers = Vec::new();
    for n in 0..servers.max(2) {
        let client = ready_client(&cluster, n).await?;
        watchers.push(tokio::spawn(traffic::watcher(
            client,
            target.clone(),
            start_rev,
            signal.clone(),
            None,
            record.clone(),
        )));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for id in 0..options.clients {
        let client = cluster.client(id as usize).await?;
        clients.push(tokio::spawn(traffic::client(
            id,
            client,
            target.clone(),
            options.keys.max(1),
            stop.clone(),
            record.clone(),
        )));
    }

    // Faults, and now and then a short watch from an older revision, until the time is up.
    let mut faults = Vec::new();
    let mut dice = Dice::new(0x5eed);
    let mut late = Vec::new();
    let until = Instant::now() + Duration::from_secs(options.seconds);
    let mut next_fault = 0;
    while Instant::now() < until {
        let pause = options
            .fault_interval
            .min(until.saturating_duration_since(Instant::now()));
        tokio::time::sleep(pause).await;
        let newest = record
            .watches
            .lock()
            .ok()
            .and_then(|w| w.iter().flat_map(|w| &w.events).map(|e| e.rev()).max())
            .unwrap_or(start_rev);
        let from = start_rev + dice.roll(newest.saturating_sub(start_rev) + 1);
        let client = cluster.client(dice.roll(servers as u64) as usize).await?;
        late.push(tokio::spawn(traffic::watcher(
            client,
            target.clone(),
            from,
            signal.clone(),
            Some(Duration::from_secs(2)),
            record.clone(),
        )));
        if kinds.is_empty() || Instant::now() >= until {
            continue;
        }
        let kind = kinds[next_fault % kinds.len()];
        next_fault += 1;
        let victim = dice.roll(servers.max(members) as u64) as usize;
        let pause = Duration::from_millis(500 + dice.roll(2500));
        let begun = target.now();
        cluster.inject(kind, victim, pause).await?;
        let server = kind.to_server().then_some(victim % servers);
        faults.push(Fault {
            kind,
            server,
            start: begun,
            end: target.now(),
        });
    }
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        let _ = client.await;
    }

    // A last consistent list: what is durable. It comes before the closing write, so that the
    // range the watches vouch for (up to that write) covers its revision — which can be past
    // the run's last change to these ConfigMaps when something else was written meanwhile.
    target
        .recorded(&admin, options.clients, Op::List, &record)
        .await;

    // The closing write, then every watcher catches up with it (or is stopped after a minute).
    let mut last = None;
    for attempt in 0..120 {
        let op = Op::Create {
            key: format!("last-{attempt}"),
            value: format!("last-{attempt}"),
        };
        let outcome = target.recorded(&admin, options.clients, op, &record).await;
        let written = match outcome {
            Outcome::Written { rev } => Some(rev),
            _ => None,
        };
        if written.is_some() {
            last = written;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let last = last.ok_or("the servers never took the closing write")?;
    let _ = phase.send(Phase::CatchUp(last));
    let caught_up = tokio::time::timeout(Duration::from_secs(60), async {
        while !watchers.iter().all(|w| w.is_finished()) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .is_ok();
    let _ = phase.send(Phase::Stop);
    for watcher in watchers.into_iter().chain(late) {
        let _ = watcher.await;
    }
    drop(cluster);

    let history = History {
        start_rev,
        calls: std::mem::take(&mut *record.calls.lock().map_err(|_| "poisoned")?),
        watches: std::mem::take(&mut *record.watches.lock().map_err(|_| "poisoned")?),
    };
    if let Some(path) = &options.history {
        std::fs::write(path, serde_json::to_vec(&history)?)?;
    }
    let report = check(&history);
    let backend = if options.etcd {
        format!("{servers} servers on {members} etcd members")
    } else {
        "embedded store, 1 server".to_owned()
    };
    print_table(&backend, &options, &history, &faults, servers, caught_up);
    eprint!("{report}");
    println!();
    println!("{}", report.to_string().lines().next().unwrap_or_default());
    if report.violations.is_empty() {
        Ok(())
    } else {
        Err(format!("{} violations", report.violations.len()).into())
    }
}

/// A client of server `n` once that server answers.
async fn ready_client(cluster: &Cluster, n: usize) -> Result<kube::Client, Error> {
    let client = cluster.client(n).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = client.request_text(http::Request::get("/readyz").body(Vec::new())?);
        if let Ok(Ok(text)) = tokio::time::timeout(Duration::from_secs(5), ready).await
            && text == "ok"
        {
            return Ok(client);
        }
        if Instant::now() > deadline {
            return Err(format!("server {n} was not ready within 60 s").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads a recorded history and checks it again.
pub(crate) fn recheck(path: &Path) -> Result<(), Error> {
    let history: History = serde_json::from_slice(&std::fs::read(path)?)?;
    let report = check(&history);
    print!("{report}");
    if report.violations.is_empty() {
        Ok(())
    } else {
        Err(format!("{} violations", report.violations.len()).into())
    }
}

fn print_table(
    backend: &str,
    options: &Options,
    history: &History,
    faults: &[Fault],
    servers: usize,
    caught_up: bool,
) {
    let secs = |us: u64| us as f64 / 1e6;
    let span = history
        .calls
        .iter()
        .map(|c| c.end)
        .max()
        .unwrap_or(1)
        .max(1);
    let ok = |c: &Call| !matches!(c.outcome, Outcome::Unknown { .. } | Outcome::Refused { .. });
    let succeeded = history.calls.iter().filter(|c| ok(c)).count();
    let refused = history
        .calls
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Refused { .. }))
        .count();
    let unknown = history.calls.len() - succeeded - refused;
    let mut rows = vec![
        ("backend".to_owned(), backend.to_owned()),
        (
            "traffic".to_owned(),
            format!(
                "{} s, {} clients on {} keys (half the calls on 3 hot keys)",
                options.seconds, options.clients, options.keys
            ),
        ),
        (
            "calls: answered / refused (409, 404, …) / unknown (timeouts, 5xx, broken)".to_owned(),
            format!("{succeeded} / {refused} / {unknown}"),
        ),
        (
            "answered calls/s, whole run".to_owned(),
            format!("{:.0}", succeeded as f64 / secs(span)),
        ),
        (
            "watches (connections) / events delivered".to_owned(),
            format!(
                "{} / {}{}",
                history.watches.len(),
                history
                    .watches
                    .iter()
                    .map(|w| w.events.len())
                    .sum::<usize>(),
                if caught_up {
                    ""
                } else {
                    " (some watch did not catch up within 60 s)"
                }
            ),
        ),
    ];
    if !faults.is_empty() {
        let during: usize = history
            .calls
            .iter()
            .filter(|c| ok(c) && faults.iter().any(|f| c.end >= f.start && c.end <= f.end))
            .count();
        let fault_time: u64 = faults.iter().map(|f| f.end - f.start).sum();
        rows.push((
            "answered calls/s while a fault lasted".to_owned(),
            format!("{:.0}", during as f64 / secs(fault_time.max(1))),
        ));
    }
    let mut by_kind: BTreeMap<FaultKind, (usize, u64)> = BTreeMap::new();
    for fault in faults {
        // Unavailability: from the fault until a write that began after it was acknowledged
        // to a client of the server faulted (any client, for an etcd member).
        let affected = |c: &Call| {
            fault
                .server
                .is_none_or(|s| c.client as usize % servers == s)
        };
        let back = history
            .calls
            .iter()
            .filter(|c| c.start >= fault.start && affected(c))
            .filter(|c| matches!(c.outcome, Outcome::Written { .. }))
            .map(|c| c.end)
            .min()
            .unwrap_or(span);
        let entry = by_kind.entry(fault.kind).or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(back - fault.start);
    }
    for (kind, (count, longest)) in by_kind {
        rows.push((
            format!(
                "{}: count / longest time its clients went without an acknowledged write",
                kind.name()
            ),
            format!("{count} / {:.2} s", secs(longest)),
        ));
    }
    println!("| robustness | result |");
    println!("|---|---|");
    for (what, value) in rows {
        println!("| {what} | {value} |");
    }
}
