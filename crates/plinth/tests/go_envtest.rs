//! controller-runtime's envtest, built from its Go module, running its control plane on
//! Plinth: `plinth envtest-assets DIR` and `KUBEBUILDER_ASSETS=DIR go test` of an unchanged
//! envtest suite (tests/go/envtest: a manager reconciling a CRD's objects, users with groups
//! held by RBAC). Needs `go` (the module proxy fetches controller-runtime the first time).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::envtest::{go_test, written_assets};

/// The processes whose command line names `needle`.
fn processes_naming(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

#[test]
fn an_unchanged_envtest_suite_runs_on_plinths_assets() {
    let (work, assets) = written_assets();
    // envtest checks the API server's flags through its --help.
    let help = Command::new(assets.join("kube-apiserver"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--secure-port") && !help.contains("--insecure-port"),
        "{help}"
    );

    let temp = work.path().join("tmp");
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/go/envtest");
    let out = go_test(&suite, &assets, &temp, &["-count=1", "-v", "."]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for test in [
        "TestAManagerReconcilesACustomResource",
        "TestProvisionedUsersAreAuthorizedByRBAC",
    ] {
        assert!(
            stdout.contains(&format!("--- PASS: {test}")),
            "{test} did not pass:\n{stdout}"
        );
    }
    assert!(stdout.contains("status.doubled=42"), "{stdout}");
    // Stopped: no process of the assets is left, and envtest's directories are gone.
    let left = processes_naming(&assets.display().to_string());
    assert!(left.is_empty(), "left running: {left:?}");
    let dirs: Vec<_> = std::fs::read_dir(&temp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("k8s_test_framework"))
        .collect();
    assert!(dirs.is_empty(), "left behind: {dirs:?}");
}

#[test]
fn the_stand_ins_stop_when_the_process_that_started_them_dies() {
    let (work, assets) = written_assets();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // A shell starts the `etcd` stand-in in the background and exits a moment later, as a
    // test binary that panicked would: the stand-in is left an orphan.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} --listen-client-urls=http://127.0.0.1:{port} --data-dir={} >/dev/null 2>&1 & echo $!; sleep 1",
            assets.join("etcd").display(),
            work.path().join("data").display()
        ))
        .output()
        .unwrap();
    let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let alive = || {
        Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    if alive() {
        let _ = Command::new("kill").arg(pid.to_string()).status();
        panic!("the orphaned etcd stand-in {pid} kept running");
    }
}
