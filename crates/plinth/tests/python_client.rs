//! The official Python `kubernetes` client against `plinth serve` on both backends
//! (tests/python/client_checks.py holds the checks).

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{Backend, Plinth};
use plinth_store_etcd::testing::EtcdProcess;

fn run_checks(plinth: &Plinth) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/python/client_checks.py"
    );
    let out = Command::new("python3")
        .arg(script)
        .arg(&plinth.kubeconfig)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python checks failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("python client: all checks passed"),
        "{stdout}"
    );
    assert!(
        stdout.lines().filter(|l| l.starts_with("ok: ")).count() >= 9,
        "{stdout}"
    );
}

#[test]
fn python_client_on_embedded_storage() {
    let plinth = Plinth::start_with(Backend::Embedded, &["--compaction-interval", "1s"]);
    run_checks(&plinth);
}

#[test]
fn python_client_on_etcd() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let etcd = runtime.block_on(EtcdProcess::start()).expect("start etcd");
    let plinth = Plinth::start_with(Backend::Etcd(etcd), &["--compaction-interval", "1s"]);
    run_checks(&plinth);
}
