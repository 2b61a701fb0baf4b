//! A full disk: the embedded store on a small tmpfs this test mounts (and unmounts), and etcd
//! with a small space quota (its `NOSPACE` alarm). Writes are refused with a clear 500
//! `Status` and change nothing; reads and watches go on; writes come back once space is freed
//! (etcd: compacted, defragmented, the alarm disarmed) without a restart; after a SIGKILL and
//! restart every acknowledged write is there.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::http::Http;
use common::{Backend, Plinth};
use plinth_store_etcd::testing::{EtcdProcess, etcdctl_binary};
use serde_json::json;

const CM: &str = "/api/v1/namespaces/default/configmaps";

/// A tmpfs mounted for the test; unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .unwrap();
        assert!(status.success(), "mount a tmpfs (needs root)");
        Tmpfs(at.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A watch of the namespace's ConfigMaps from `resourceVersion` (curl, its output in a file);
/// stopped by PID.
struct Watch {
    child: Child,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Watch {
    fn start(plinth: &Plinth, from: &str) -> Watch {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("watch.txt");
        let token = std::fs::read_to_string(plinth.dir.path().join("admin.token")).unwrap();
        let child = Command::new("curl")
            .args(["-sN", "--cacert"])
            .arg(plinth.dir.path().join("ca.crt"))
            .args(["-H", &format!("Authorization: Bearer {}", token.trim())])
            .arg(format!(
                "{}{CM}?watch=1&resourceVersion={from}",
                plinth.server_url()
            ))
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Watch {
            child,
            out,
            _dir: dir,
        }
    }

    /// `TYPE name` of every event so far.
    fn seen(&self) -> Vec<String> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|e| {
                format!(
                    "{} {}",
                    e["type"].as_str().unwrap_or(""),
                    e["object"]["metadata"]["name"].as_str().unwrap_or("")
                )
            })
            .collect()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn configmap(name: &str, value: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name}, "data": {"v": value}}))
    .unwrap()
}

/// Writes ConfigMaps of `size` bytes until the store refuses one (it must, within 200);
/// returns the acknowledged ones and the refused one's name, having checked the refusal.
fn fill(http: &Http, size: usize, words: &str) -> (Vec<String>, String) {
    let value = "x".repeat(size);
    let mut acknowledged = Vec::new();
    for i in 0..200 {
        let name = format!("big-{i}");
        let reply = http.post(CM, &configmap(&name, &value));
        match reply.code {
            201 => acknowledged.push(name),
            500 => {
                let status = reply.json();
                assert_eq!(status["reason"], "InternalError", "{status}");
                let message = status["message"].as_str().unwrap();
                assert!(
                    message.contains("out of space") && message.contains(words),
                    "{message}"
                );
                return (acknowledged, name);
            }
            other => panic!("write {name}: {other} {}", reply.body),
        }
    }
    panic!("200 writes of {size} bytes and none refused");
}

/// Everything a full store must still do, then space comes back (`free`), then a restart.
fn full_store_keeps_its_promises(
    plinth: &mut Plinth,
    size: usize,
    words: &str,
    fill_up: impl FnOnce(),
    free: impl FnOnce(&Plinth) -> Vec<String>,
) {
    let http = Http::new(plinth);
    let from = http.get(CM).json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let watch = Watch::start(plinth, &from);
    let mut acknowledged: Vec<String> = (0..3).map(|i| format!("before-{i}")).collect();
    for name in &acknowledged {
        assert_eq!(http.post(CM, &configmap(name, "small")).code, 201);
    }
    fill_up();
    let (filled, refused) = fill(&http, size, words);
    acknowledged.extend(filled);

    // The refused write changed nothing; reads go on, lists have every acknowledged write.
    assert_eq!(http.get(&format!("{CM}/{refused}")).code, 404);
    let names = |http: &Http| common::item_names(&http.get(CM).json());
    let listed = names(&http);
    for name in &acknowledged {
        assert!(listed.contains(name), "{name} missing from {listed:?}");
    }
    assert_eq!(
        http.get(&format!("{CM}/{}", acknowledged[0])).json()["data"]["v"],
        "small"
    );

    // Space comes back: the very next write is taken, with no restart.
    let deleted = free(plinth);
    let after = http.post(CM, &configmap("after", "small"));
    assert_eq!(after.code, 201, "{}", after.body);
    acknowledged.push("after".to_owned());

    // The watch went on: it saw every acknowledged write, and not the refused one.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let seen = watch.seen();
        let missing: Vec<&String> = acknowledged
            .iter()
            .filter(|n| !seen.contains(&format!("ADDED {n}")))
            .collect();
        if missing.is_empty() {
            assert!(!seen.contains(&format!("ADDED {refused}")), "{seen:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the watch missed {missing:?}: {seen:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drop(watch);

    // Nothing lost or corrupt: after a SIGKILL every acknowledged write is there, whole (but
    // what was deleted to make room).
    acknowledged.retain(|n| !deleted.contains(n));
    plinth.kill_and_restart();
    let http = Http::new(plinth);
    let listed = names(&http);
    for name in &acknowledged {
        assert!(listed.contains(name), "{name} missing after restart");
    }
    for name in acknowledged.iter().filter(|n| n.starts_with("big-")) {
        let big = http.get(&format!("{CM}/{name}")).json();
        assert_eq!(
            big["data"]["v"].as_str().map(str::len),
            Some(size),
            "{name}"
        );
    }
}

#[test]
fn the_embedded_store_on_a_full_disk_refuses_writes_clearly_and_loses_nothing() {
    // The store's directory on a 24 MiB tmpfs; everything else of the server (and the test's
    // request files) elsewhere.
    let mount = tempfile::tempdir().unwrap();
    let _tmpfs = Tmpfs::mount(mount.path(), "24m");
    let store = mount.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&store, dir.path().join("store")).unwrap();
    let mut plinth = Plinth::start_in(dir, Backend::Embedded, &[]);
    let ballast = mount.path().join("ballast");
    // Fill the file system with a ballast file, all but nothing left.
    let fill_up = || {
        use std::io::Write;
        let mut file = std::fs::File::create(&ballast).unwrap();
        let chunk = vec![0u8; 1 << 20];
        while file.write_all(&chunk).is_ok() {}
        let _ = file.flush();
    };
    let free = |_: &Plinth| {
        std::fs::remove_file(&ballast).unwrap();
        Vec::new()
    };
    full_store_keeps_its_promises(
        &mut plinth,
        256 << 10,
        "database or disk is full",
        fill_up,
        free,
    );
    drop(plinth);
}

#[test]
fn etcd_past_its_space_quota_refuses_writes_clearly_and_loses_nothing() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let etcd = runtime
        .block_on(EtcdProcess::start_with_quota(24 << 20))
        .unwrap();
    let endpoint = etcd.endpoint();
    let mut plinth = Plinth::start(Backend::Etcd(etcd));
    let etcdctl = |args: &[&str]| -> String {
        let out = Command::new(etcdctl_binary())
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &endpoint])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "etcdctl {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // What an operator does (etcd's maintenance guide): delete what is not needed — deletes
    // are allowed under the alarm —, compact, defragment, disarm the alarm.
    let free = |plinth: &Plinth| {
        let http = Http::new(plinth);
        let list = http.get(CM).json();
        let spare: Vec<String> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i["metadata"]["name"].as_str())
            .filter(|n| n.starts_with("big-") && n.ends_with('5'))
            .map(str::to_owned)
            .collect();
        assert!(!spare.is_empty());
        for name in &spare {
            let reply = http.request(
                "DELETE",
                &format!("{CM}/{name}"),
                "application/json",
                None,
                true,
            );
            assert_eq!(reply.code, 200, "{}", reply.body);
        }
        let status: serde_json::Value =
            serde_json::from_str(&etcdctl(&["endpoint", "status", "-w", "json"])).unwrap();
        let revision = status[0]["Status"]["header"]["revision"].as_u64().unwrap();
        etcdctl(&["compact", &revision.to_string(), "--physical"]);
        etcdctl(&["defrag"]);
        etcdctl(&["alarm", "disarm"]);
        assert_eq!(etcdctl(&["alarm", "list"]).trim(), "");
        spare
    };
    full_store_keeps_its_promises(
        &mut plinth,
        900 << 10,
        "database space exceeded",
        || {},
        free,
    );
    // The deletes made room: those big ones are gone, the rest are kept.
    let http = Http::new(&plinth);
    assert_eq!(http.get(&format!("{CM}/big-5")).code, 404);
    assert_eq!(http.get(&format!("{CM}/big-4")).code, 200);
}
