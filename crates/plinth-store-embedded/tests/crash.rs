//! Crash safety: a child process writes with many concurrent writers and is killed with SIGKILL;
//! after a restart every acknowledged write is there, history replays, and revisions go on
//! strictly increasing. The child is this same test binary, running the ignored `crash_child`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use plinth_store::{EventKind, RangeRequest, Revision, Store, StoreError};
use plinth_store_embedded::EmbeddedStore;

const WRITERS: usize = 64;

/// The child's body: writes forever, printing `ACK <key> <revision> <value>` after each
/// acknowledged write. Runs only when the parent starts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by acknowledged_writes_survive_sigkill as a child process"]
async fn crash_child() {
    let dir = std::env::var("PLINTH_CRASH_DIR")
        .expect("run by the crash test, which sets PLINTH_CRASH_DIR");
    let generation = std::env::var("PLINTH_CRASH_GENERATION").expect("generation");
    let store = Arc::new(EmbeddedStore::open(&dir).expect("child opens the store"));
    println!("READY");
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (store, generation) = (store.clone(), generation.clone());
        tasks.push(tokio::spawn(async move {
            let counter = format!("/crash/counter/{w}");
            for i in 0u64.. {
                let key = format!("/crash/{generation}/{w}/{i}");
                let value = format!("{generation}-{w}-{i}");
                let rev = store
                    .create(&key, Bytes::from(value.clone()))
                    .await
                    .expect("create");
                ack(&key, rev, &value);
                let rev = match store.get(&counter).await.expect("get") {
                    None => store.create(&counter, Bytes::from(i.to_string())).await,
                    Some(kv) => {
                        store
                            .update(&counter, Bytes::from(i.to_string()), kv.mod_revision)
                            .await
                    }
                };
                if let Ok(rev) = rev {
                    ack(&counter, rev, &i.to_string());
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
}

fn ack(key: &str, rev: Revision, value: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ACK {key} {rev} {value}").expect("stdout");
    out.flush().expect("stdout");
}

/// Starts a child writing into `dir`, lets it acknowledge at least `acks` writes, checks that the
/// data directory is locked against a second process meanwhile, kills it with SIGKILL and
/// returns every acknowledged (key → (revision, value)), last write per key.
fn run_child_and_kill(
    dir: &Path,
    generation: u32,
    acks: usize,
) -> BTreeMap<String, (Revision, String)> {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PLINTH_CRASH_DIR", dir)
        .env("PLINTH_CRASH_GENERATION", generation.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut acked = BTreeMap::new();
    let mut count = 0;
    let started = Instant::now();
    let mut killed = false;
    let mut checked_lock = false;
    while let Some(Ok(line)) = lines.next() {
        if line == "READY" && !checked_lock {
            checked_lock = true;
            let runtime = tokio::runtime::Runtime::new().expect("runtime");
            let second = runtime.block_on(async { EmbeddedStore::open(dir).map(drop) });
            match second {
                Err(StoreError::Locked { path, .. }) => assert_eq!(path, dir),
                other => panic!("a second process must get Locked, got {other:?}"),
            }
        }
        let mut parts = line.splitn(4, ' ');
        if parts.next() != Some("ACK") {
            continue;
        }
        let (key, rev, value) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let rev: Revision = rev.parse().unwrap();
        // Later acknowledgements of the same key carry later revisions.
        let entry = acked.entry(key.to_owned()).or_insert((0, String::new()));
        if rev > entry.0 {
            *entry = (rev, value.to_owned());
        }
        count += 1;
        if !killed && (count >= acks || started.elapsed() > Duration::from_secs(30)) {
            child.kill().expect("SIGKILL the child");
            killed = true;
        }
    }
    assert!(killed, "the child stopped by itself before it was killed");
    let status = child.wait().expect("reap child");
    assert!(
        !status.success(),
        "the child was killed, not finished: {status:?}"
    );
    assert!(
        count >= acks,
        "the child acknowledged {count} writes before dying"
    );
    acked
}

async fn verify(dir: &Path, acked: &BTreeMap<String, (Revision, String)>) -> Revision {
    let store = EmbeddedStore::open(dir).expect("reopen after the crash");
    let max_acked = acked.values().map(|(rev, _)| *rev).max().unwrap();
    let current = store.current_revision().await.unwrap();
    assert!(
        current >= max_acked,
        "revision went back: {current} < acknowledged {max_acked}"
    );
    for (key, (rev, value)) in acked {
        let kv = store
            .get(key)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("acknowledged {key} lost"));
        assert!(
            kv.mod_revision >= *rev,
            "{key}: stored revision {} older than acknowledged {rev}",
            kv.mod_revision
        );
        if kv.mod_revision == *rev {
            assert_eq!(kv.value, value.as_bytes(), "{key}");
        }
    }
    // History replays in order from the beginning, with every acknowledged revision in it.
    let mut watch = store.watch("/crash/", 1).await.unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut last = 0;
    while last < current {
        let event = tokio::time::timeout(Duration::from_secs(30), watch.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(event.revision() > last, "history out of order");
        if event.kind == EventKind::Delete {
            assert_eq!(event.kv.key, "/crash/after", "only the verifier deletes");
        }
        last = event.revision();
        seen.insert(last);
    }
    for (key, (rev, _)) in acked {
        assert!(
            seen.contains(rev),
            "{key}'s acknowledged revision {rev} missing from history"
        );
    }
    let next = store
        .create("/crash/after", Bytes::from_static(b"x"))
        .await
        .unwrap();
    assert!(next > current, "revisions continue strictly increasing");
    store.delete("/crash/after", None).await.unwrap();
    let listed = store.range(RangeRequest::prefix("/crash/")).await.unwrap();
    assert!(listed.kvs.len() >= acked.len());
    store.close().await;
    next
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("store");
    let mut all = BTreeMap::new();
    let mut previous = 0;
    for generation in 0..3 {
        let acked = tokio::task::block_in_place(|| run_child_and_kill(&dir, generation, 3000));
        for (key, value) in acked {
            let entry = all.entry(key).or_insert((0, String::new()));
            if value.0 > entry.0 {
                *entry = value;
            }
        }
        let next = verify(&dir, &all).await;
        assert!(next > previous);
        previous = next;
    }
}
