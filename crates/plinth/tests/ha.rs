//! Three Plinth servers over a three-member etcd are one control plane: they share one set of
//! credential files, a write acknowledged by one is read by the others, and while each server
//! and each etcd member in turn is SIGKILLed and restarted, a writer (through the failover
//! client, over `plinth kubeconfig --servers`) loses no acknowledged write and an informer on
//! each server sees every one of them, in order, without a gap or a relist; the built-in
//! controllers move to another server when their server dies.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Backend, Plinth, holds, lease_holder};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use plinth_store_etcd::testing::EtcdCluster;

/// The files that make a server one of the control plane: its CA, the admin token and the
/// ServiceAccount signing key (everything of a data directory but the store and kubeconfig).
const CREDENTIALS: [&str; 4] = ["ca.crt", "ca.key", "admin.token", "sa.key"];

/// A server on `etcd` whose data directory holds a copy of `first`'s credential files.
fn joined(first: &Plinth, etcd: &str) -> Plinth {
    let dir = tempfile::tempdir().unwrap();
    for file in CREDENTIALS {
        std::fs::copy(first.dir.path().join(file), dir.path().join(file)).unwrap();
    }
    Plinth::start_in(dir, Backend::SharedEtcd(etcd.to_owned()), &[])
}

/// A write the API acknowledged: the object's name and the resourceVersion it was given.
#[derive(Clone, Debug)]
struct Ack {
    name: String,
    rv: u64,
}

fn rv_of(cm: &ConfigMap) -> u64 {
    cm.metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

/// Creates `c-N` and patches `u-(N mod 8)` in turn until stopped, recording what was
/// acknowledged; a failed write (its server died with it) is counted, not recorded.
async fn write(
    client: kube::Client,
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<Vec<Ack>>>,
    failed: Arc<AtomicUsize>,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    for name in (0..8).map(|i| format!("u-{i}")) {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}, "data": {"n": "0"}
        }))
        .unwrap();
        let created = api.create(&PostParams::default(), &cm).await.unwrap();
        acks.lock().unwrap().push(Ack {
            name,
            rv: rv_of(&created),
        });
    }
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        n += 1;
        let result = if n.is_multiple_of(2) {
            let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("c-{n}")}, "data": {"n": n.to_string()}
            }))
            .unwrap();
            api.create(&PostParams::default(), &cm).await
        } else {
            let patch = serde_json::json!({"data": {"n": n.to_string()}});
            api.patch(
                &format!("u-{}", n % 8),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        };
        match result {
            Ok(cm) => acks.lock().unwrap().push(Ack {
                name: cm.metadata.name.clone().unwrap(),
                rv: rv_of(&cm),
            }),
            Err(_) => {
                failed.fetch_add(1, Ordering::AcqRel);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// What one informer saw.
#[derive(Default, Debug)]
struct Seen {
    /// Lists (the first one included).
    lists: usize,
    /// Watch events' (name, resourceVersion), in arrival order.
    events: Vec<(String, u64)>,
    /// Objects of the lists.
    listed: HashMap<String, u64>,
}

/// An informer (kube-runtime's watcher, its default back-off) on one server's configmaps.
async fn inform(client: kube::Client, seen: Arc<Mutex<Seen>>) {
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
    while let Some(event) = events.next().await {
        let Ok(event) = event else {
            // Its server is down: the watcher retries from its resourceVersion.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut seen = seen.lock().unwrap();
        match event {
            watcher::Event::Init => seen.lists += 1,
            watcher::Event::InitApply(cm) => {
                let name = cm.metadata.name.clone().unwrap();
                seen.listed.insert(name, rv_of(&cm));
            }
            watcher::Event::InitDone => {}
            watcher::Event::Apply(cm) | watcher::Event::Delete(cm) => {
                let name = cm.metadata.name.clone().unwrap();
                seen.events.push((name, rv_of(&cm)));
            }
        }
    }
}

/// Waits until `more` writes beyond those acknowledged now are acknowledged.
fn progress(acks: &Mutex<Vec<Ack>>, more: usize, what: &str) {
    let target = acks.lock().unwrap().len() + more;
    plinth_testenv::eventually_blocking(what, || acks.lock().unwrap().len() >= target);
}

#[test]
fn three_servers_on_three_etcd_members_lose_nothing_when_any_one_dies() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut etcd = runtime
        .block_on(EtcdCluster::start(3))
        .expect("start a 3-member etcd");
    let endpoints = etcd.endpoints_flag();
    let a = Plinth::start(Backend::SharedEtcd(endpoints.clone()));
    let b = joined(&a, &endpoints);
    let c = joined(&a, &endpoints);
    let mut servers = [a, b, c];

    // One kubeconfig for the three (A's admin token and CA): every server accepts it.
    let kubeconfig = servers[0].dir.path().join("kubeconfig-servers");
    let urls = servers.iter().map(Plinth::server_url).collect::<Vec<_>>();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_plinth"))
        .args(["kubeconfig", "--data-dir"])
        .arg(servers[0].dir.path())
        .args(["--servers", &urls.join(",")])
        .arg("--out")
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    for context in ["plinth-1", "plinth-2", "plinth-3"] {
        let out = std::process::Command::new("kubectl")
            .env("KUBECONFIG", &kubeconfig)
            .args([
                "--context",
                context,
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "plinth-admin",
            "{context}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A ServiceAccount token issued by one server is accepted by another (one signing key).
    servers[0].kubectl(&["create", "serviceaccount", "robot"]);
    let token = servers[0].kubectl(&["create", "token", "robot"]);
    let out = servers[2].kubectl(&[
        "auth",
        "whoami",
        "--token",
        token.trim(),
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(out, "system:serviceaccount:default:robot");

    // A write acknowledged by one server is visible to a consistent read on another.
    runtime.block_on(async {
        let clients = [
            servers[0].kube_client().await,
            servers[1].kube_client().await,
            servers[2].kube_client().await,
        ];
        for i in 0..30 {
            let (writer, reader) = (&clients[i % 3], &clients[(i + 1) % 3]);
            let on_writer: Api<ConfigMap> = Api::namespaced(writer.clone(), "default");
            let on_reader: Api<ConfigMap> = Api::namespaced(reader.clone(), "default");
            let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("read-{i}")}, "data": {"i": i.to_string()}
            }))
            .unwrap();
            let written = on_writer.create(&PostParams::default(), &cm).await.unwrap();
            let read = on_reader.get(&format!("read-{i}")).await.unwrap();
            assert_eq!(rv_of(&read), rv_of(&written), "read-{i}");
            let listed = on_reader.list(&Default::default()).await.unwrap();
            assert!(
                listed
                    .items
                    .iter()
                    .any(|cm| cm.metadata.name.as_deref() == Some(&format!("read-{i}"))),
                "a consistent list through another server misses read-{i}"
            );
        }
    });

    // The writer, through the failover client; an informer on each server.
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(Mutex::new(Vec::new()));
    let failed = Arc::new(AtomicUsize::new(0));
    let seen: Vec<Arc<Mutex<Seen>>> = (0..3).map(|_| Arc::default()).collect();
    let failover = runtime
        .block_on(plinth_runtime::failover::client_from_kubeconfig(Some(
            &kubeconfig,
        )))
        .unwrap();
    let mut informers = Vec::new();
    for (server, seen) in servers.iter().zip(&seen) {
        let client = runtime.block_on(server.kube_client());
        informers.push(runtime.spawn(inform(client, seen.clone())));
    }
    let writer = runtime.spawn(write(failover, stop.clone(), acks.clone(), failed.clone()));
    progress(&acks, 20, "the writer to start");

    let mut takeovers = Vec::new();
    for round in 0..2 {
        for victim in 0..servers.len() {
            let held = holds(&lease_holder(&servers[(victim + 1) % 3]), &servers[victim]);
            let killed = std::time::Instant::now();
            servers[victim].kill();
            progress(
                &acks,
                30,
                &format!("writes while server {victim} is down (round {round})"),
            );
            if held && takeovers.len() < 2 {
                // The controllers' server died: another takes the Lease over once it expires
                // (waited for twice; later the server comes back before its Lease expires).
                let other = &servers[(victim + 1) % 3];
                let others = [&servers[(victim + 1) % 3], &servers[(victim + 2) % 3]];
                other.eventually("another server to take the controllers over", || {
                    let holder = lease_holder(other);
                    others.iter().any(|s| holds(&holder, s))
                });
                takeovers.push(killed.elapsed());
            }
            servers[victim].relaunch();
            progress(&acks, 20, &format!("writes after server {victim} is back"));
        }
        for member in 0..etcd.members.len() {
            etcd.members[member].kill();
            progress(
                &acks,
                30,
                &format!("writes while etcd member {member} is down (round {round})"),
            );
            if member == 1 {
                // A server starts and serves while a member is down.
                servers[round].kill();
                servers[round].relaunch();
                servers[round].kubectl(&["get", "configmap", "u-0"]);
            }
            runtime.block_on(etcd.members[member].restart()).unwrap();
            progress(
                &acks,
                20,
                &format!("writes after etcd member {member} is back"),
            );
        }
    }
    assert!(
        !takeovers.is_empty(),
        "the controllers' server was never among the killed"
    );
    stop.store(true, Ordering::Release);
    runtime.block_on(writer).unwrap();
    let acks = acks.lock().unwrap().clone();
    eprintln!(
        "{} writes acknowledged, {} failed with their server or etcd member; controllers taken over after {takeovers:?}",
        acks.len(),
        failed.load(Ordering::Acquire)
    );

    // Every acknowledged write is stored: each object at its last acknowledged version or later.
    let mut last: HashMap<&str, u64> = HashMap::new();
    for ack in &acks {
        let entry = last.entry(&ack.name).or_default();
        *entry = (*entry).max(ack.rv);
    }
    for server in &servers {
        let listed = server.json(&["get", "configmaps"]);
        let stored: HashMap<&str, u64> = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|cm| {
                (
                    cm["metadata"]["name"].as_str().unwrap(),
                    cm["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap(),
                )
            })
            .collect();
        for (name, rv) in &last {
            assert!(
                stored.get(name).is_some_and(|stored| stored >= rv),
                "{name} at {rv} is missing: {:?}",
                stored.get(name)
            );
        }
    }

    // Every informer saw every acknowledged write as an event, in order, with no relist.
    let newest = acks.iter().map(|a| a.rv).max().unwrap();
    for (i, seen) in seen.iter().enumerate() {
        plinth_testenv::eventually_blocking(&format!("informer {i} to catch up"), || {
            seen.lock()
                .unwrap()
                .events
                .iter()
                .any(|(_, rv)| *rv >= newest)
        });
        let seen = seen.lock().unwrap();
        assert_eq!(seen.lists, 1, "informer {i} had to relist");
        for pair in seen.events.windows(2) {
            assert!(pair[0].1 < pair[1].1, "informer {i}: {pair:?} out of order");
        }
        let events: std::collections::HashSet<(&str, u64)> = seen
            .events
            .iter()
            .map(|(n, rv)| (n.as_str(), *rv))
            .collect();
        for ack in &acks {
            assert!(
                events.contains(&(ack.name.as_str(), ack.rv))
                    || seen.listed.get(&ack.name) == Some(&ack.rv),
                "informer {i} never saw {ack:?}"
            );
        }
    }
    for informer in informers {
        informer.abort();
    }

    // The controllers run on whichever server holds the Lease now: the garbage collector
    // removes a dependent of a deleted owner.
    let owner: serde_json::Value = serde_json::from_str(&servers[0].kubectl_with(
        &["create", "-f", "-", "-o", "json"],
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner"}}"#,
    ))
    .unwrap();
    let uid = owner["metadata"]["uid"].as_str().unwrap();
    servers[1].kubectl_with(
        &["create", "-f", "-"],
        &format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"dependent","ownerReferences":[{{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"{uid}"}}]}}}}"#
        ),
    );
    servers[2].kubectl(&["delete", "configmap", "owner"]);
    servers[2].eventually("the garbage collector to remove the dependent", || {
        !servers[2]
            .kubectl_output(&["get", "configmap", "dependent"])
            .status
            .success()
    });
}
