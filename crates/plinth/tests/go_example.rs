//! The Go example (examples/go-tally: client-go's shared informer, leader election through a
//! Lease, server-side apply), built from its Go module and run against `plinth serve`: two
//! copies elect one leader, the leader keeps a summary ConfigMap up to date by server-side
//! apply, the other takes over when the leader is killed, and a stopped leader releases its
//! Lease. Needs `go` (the module proxy fetches client-go the first time).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{Backend, Plinth, Stopped};

/// `go build` of the example into `dir`; the binary's path.
fn built_example(dir: &Path) -> PathBuf {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/go-tally");
    let binary = dir.join("go-tally");
    let temp = dir.join("go-tmp");
    std::fs::create_dir_all(&temp).unwrap();
    let out = Command::new("go")
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(&example)
        .env("TMPDIR", &temp)
        .output()
        .expect("run go build (Go must be installed)");
    assert!(
        out.status.success(),
        "go build failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    binary
}

/// One copy of the example, its output going to `log`.
fn start_copy(plinth: &Plinth, binary: &Path, identity: &str, log: &Path) -> Stopped {
    let log = std::fs::File::create(log).unwrap();
    let child = Command::new(binary)
        .arg("--kubeconfig")
        .arg(&plinth.kubeconfig)
        .args(["--identity", identity, "--lease-duration", "4s"])
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    Stopped(Some(child))
}

/// The Lease's holder, if it exists and has one.
fn holder(plinth: &Plinth) -> Option<String> {
    let out = plinth.kubectl_output(&["get", "lease", "go-tally", "-o", "json"]);
    if !out.status.success() {
        return None;
    }
    let lease: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    lease["spec"]["holderIdentity"]
        .as_str()
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
}

/// The summary ConfigMap's data, once it exists.
fn summary(plinth: &Plinth) -> Option<serde_json::Value> {
    let out = plinth.kubectl_output(&["get", "configmap", "tally", "-o", "json"]);
    out.status
        .success()
        .then(|| serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap())
}

fn labelled(plinth: &Plinth, name: &str) {
    plinth.kubectl(&["create", "configmap", name, "--from-literal=k=v"]);
    plinth.kubectl(&["label", "configmap", name, "example.plinth.dev/tally=true"]);
}

#[test]
fn the_go_example_elects_a_leader_and_applies_its_summary() {
    let plinth = Plinth::start(Backend::Embedded);
    let binary = built_example(plinth.dir.path());
    let logs = plinth.dir.path();
    let mut copies = vec![
        ("a", start_copy(&plinth, &binary, "a", &logs.join("a.log"))),
        ("b", start_copy(&plinth, &binary, "b", &logs.join("b.log"))),
    ];
    let log_of = |identity: &str| {
        std::fs::read_to_string(logs.join(format!("{identity}.log"))).unwrap_or_default()
    };

    let mut leader = String::new();
    plinth.eventually("one copy holds the Lease", || {
        holder(&plinth).is_some_and(|h| {
            leader = h;
            true
        })
    });
    let follower = if leader == "a" { "b" } else { "a" };

    labelled(&plinth, "one");
    labelled(&plinth, "two");
    plinth.kubectl(&["create", "configmap", "unlabelled"]);
    plinth.eventually("the leader's summary counts two ConfigMaps", || {
        summary(&plinth).is_some_and(|cm| cm["data"]["count"] == "2")
    });
    let cm = summary(&plinth).unwrap();
    assert_eq!(cm["data"]["names"], "one,two", "{cm}");
    assert_eq!(cm["data"]["writer"], leader.as_str(), "{cm}");
    // Written by server-side apply: the fields belong to the example's manager, as Apply.
    let managed = plinth.kubectl(&[
        "get",
        "configmap",
        "tally",
        "--show-managed-fields",
        "-o",
        "jsonpath={range .metadata.managedFields[*]}{.manager}/{.operation};{end}",
    ]);
    assert_eq!(managed, "go-tally/Apply;");
    assert!(
        log_of(&leader).contains(&format!("leading as {leader}")),
        "{}",
        log_of(&leader)
    );
    assert!(
        !log_of(follower).contains("leading as"),
        "the follower must not lead while the leader renews: {}",
        log_of(follower)
    );

    // SIGKILL the leader (no release): the follower takes over once the Lease expires.
    let index = copies.iter().position(|(id, _)| *id == leader).unwrap();
    let (_, mut killed) = copies.remove(index);
    let mut child = killed.0.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    plinth.eventually("the follower takes the Lease over", || {
        holder(&plinth).as_deref() == Some(follower)
    });
    labelled(&plinth, "three");
    plinth.kubectl(&["delete", "configmap", "one"]);
    plinth.eventually("the new leader's summary", || {
        summary(&plinth).is_some_and(|cm| {
            cm["data"]["names"] == "three,two" && cm["data"]["writer"] == follower
        })
    });
    let lease = plinth.json(&["get", "lease", "go-tally"]);
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease}");

    // SIGTERM the new leader: it releases the Lease (ReleaseOnCancel) and exits 0.
    let (_, mut last) = copies.remove(0);
    let mut child = last.0.take().unwrap();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}: {}", log_of(follower));
    assert_eq!(holder(&plinth), None, "the Lease is released on stop");
    assert!(log_of(follower).contains("stopped leading"));
}
