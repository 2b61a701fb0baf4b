//! `plinth backup` and `plinth restore` (issue #18): a backup of a live server under writes
//! restores to a server whose objects and resourceVersions are the snapshot's; bad
//! requests are refused and change nothing.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::{Backend, Plinth};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};

fn plinth(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_plinth"))
        .args(args)
        .output()
        .unwrap()
}

/// The test's ConfigMaps as a server lists them (at `revision`, if given): name → (its
/// resourceVersion, its data).
fn listed(
    plinth: &Plinth,
    revision: Option<&str>,
) -> BTreeMap<String, (String, serde_json::Value)> {
    let mut path = "/api/v1/namespaces/default/configmaps?labelSelector=backup%3Dtest".to_owned();
    if let Some(revision) = revision {
        path.push_str(&format!(
            "&resourceVersion={revision}&resourceVersionMatch=Exact"
        ));
    }
    let list: serde_json::Value =
        serde_json::from_str(&plinth.kubectl(&["get", "--raw", &path])).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            (
                item["metadata"]["name"].as_str().unwrap().to_owned(),
                (
                    item["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                    item["data"].clone(),
                ),
            )
        })
        .collect()
}

/// A writer creating ConfigMaps `<prefix>N` (labelled `backup=test`) and updating every third
/// one's predecessor until stopped; counts what it wrote.
fn spawn_writer(
    runtime: &tokio::runtime::Runtime,
    client: kube::Client,
    prefix: &'static str,
) -> (
    Arc<AtomicBool>,
    Arc<AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    let (stop, written) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let writer = {
        let (stop, written) = (stop.clone(), written.clone());
        runtime.spawn(async move {
            let api: Api<ConfigMap> = Api::default_namespaced(client);
            let mut n = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let map: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("{prefix}{n}"), "labels": {"backup": "test"}},
                    "data": {"n": n.to_string()},
                }))
                .unwrap();
                api.create(&PostParams::default(), &map).await.unwrap();
                if n > 0 && n.is_multiple_of(3) {
                    let patch = serde_json::json!({"data": {"updated": n.to_string()}});
                    api.patch(
                        &format!("{prefix}{}", n / 2),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .unwrap();
                }
                n += 1;
                written.store(n, Ordering::SeqCst);
            }
        })
    };
    (stop, written, writer)
}

/// Runs `plinth backup ARGS` while a [`spawn_writer`] writes (from 50 writes before it to 20
/// after it); returns what it printed, the revision.
fn back_up_under_writes(
    runtime: &tokio::runtime::Runtime,
    client: kube::Client,
    prefix: &'static str,
    args: &[&str],
) -> String {
    let (stop, written, writer) = spawn_writer(runtime, client, prefix);
    plinth_testenv::eventually_blocking("the writer writes", || {
        written.load(Ordering::SeqCst) >= 50
    });
    let mut command = vec!["backup"];
    command.extend_from_slice(args);
    let out = plinth(&command);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let at_backup = written.load(Ordering::SeqCst);
    plinth_testenv::eventually_blocking("writes go on after the backup", || {
        written.load(Ordering::SeqCst) >= at_backup + 20
    });
    stop.store(true, Ordering::SeqCst);
    runtime.block_on(writer).unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn a_backup_of_a_live_server_restores_its_objects_at_their_resource_versions() {
    let source = Plinth::start(Backend::Embedded);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(source.kube_client());

    // A writer creates ConfigMaps and updates earlier ones while the backup runs.
    let file = source.dir.path().join("backup.db");
    let revision = back_up_under_writes(
        &runtime,
        client,
        "m",
        &[
            "--data-dir",
            source.dir.path().to_str().unwrap(),
            "--to",
            file.to_str().unwrap(),
        ],
    );

    // The snapshot, as the live server lists it at the backup's revision: what was written
    // by then and nothing after.
    let snapshot = listed(&source, Some(&revision));
    let now = listed(&source, None);
    assert!(snapshot.len() >= 50, "{} objects", snapshot.len());
    assert!(
        now.len() > snapshot.len(),
        "writes went on after the backup"
    );

    // Bad requests: an existing target, a directory with a store, a file that is not a
    // store — each refused with a reason, nothing changed.
    let again = plinth(&[
        "backup",
        "--data-dir",
        source.dir.path().to_str().unwrap(),
        "--to",
        file.to_str().unwrap(),
    ]);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("cannot create the backup"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let refused = plinth(&[
        "restore",
        "--from",
        file.to_str().unwrap(),
        "--data-dir",
        source.dir.path().to_str().unwrap(),
    ]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("holds a store already"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let empty = tempfile::tempdir().unwrap();
    let not_a_store = empty.path().join("notes.txt");
    std::fs::write(&not_a_store, "not a store").unwrap();
    let target = empty.path().join("data");
    let refused = plinth(&[
        "restore",
        "--from",
        not_a_store.to_str().unwrap(),
        "--data-dir",
        target.to_str().unwrap(),
    ]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("not a"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(!target.exists(), "a refused restore creates nothing");

    // Restored into a fresh data directory, a server serves the snapshot's objects at their
    // resourceVersions.
    let restored_dir = tempfile::tempdir().unwrap();
    let out = plinth(&[
        "restore",
        "--from",
        file.to_str().unwrap(),
        "--data-dir",
        restored_dir.path().to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), revision);
    let restored = Plinth::start_in(restored_dir, Backend::Embedded, &[]);
    assert_eq!(
        listed(&restored, None),
        snapshot,
        "the restored objects, their data and resourceVersions"
    );
}

#[test]
fn an_etcd_snapshot_under_writes_restores_with_its_resource_versions() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let source = runtime.block_on(Plinth::start_etcd());
    let endpoint = source.etcd_endpoint().unwrap();
    let client = runtime.block_on(source.kube_client());
    let file = source.dir.path().join("etcd.snapshot");
    let at_least: i64 = back_up_under_writes(
        &runtime,
        client,
        "e",
        &["--etcd-servers", &endpoint, "--to", file.to_str().unwrap()],
    )
    .parse()
    .unwrap();
    // A second snapshot into the same file is refused, the first left as it was.
    let before = std::fs::read(&file).unwrap();
    let again = plinth(&[
        "backup",
        "--etcd-servers",
        &endpoint,
        "--to",
        file.to_str().unwrap(),
    ]);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("create the snapshot file"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(std::fs::read(&file).unwrap(), before);

    // etcd's own tool accepts the file and names its revision.
    let status = Command::new(plinth_store_etcd::testing::etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .args(["snapshot", "status", "-w", "json"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let revision = status["revision"].as_i64().unwrap();
    assert!(revision >= at_least, "{revision} < {at_least}");
    let snapshot = listed(&source, Some(&revision.to_string()));
    assert!(snapshot.len() >= 50, "{} objects", snapshot.len());
    assert!(listed(&source, None).len() > snapshot.len());

    // A server on an etcd restored from it serves the snapshot's objects at their
    // resourceVersions.
    let restored_etcd = runtime
        .block_on(plinth_store_etcd::testing::EtcdProcess::start_restored(
            &file,
        ))
        .unwrap();
    let restored = Plinth::start(Backend::Etcd(restored_etcd));
    assert_eq!(
        listed(&restored, None),
        snapshot,
        "the restored objects, their data and resourceVersions"
    );
}
