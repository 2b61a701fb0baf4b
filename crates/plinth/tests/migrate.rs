//! `plinth migrate` moves a cluster from embedded storage to etcd and back: every stored
//! value byte for byte; into etcd with new resourceVersions past every old one (an informer
//! kept across the move gets a 410 and relists, never an event from another history); back
//! into the embedded store with etcd's resourceVersions kept (a watch from one goes on).
//! What it cannot do safely it refuses, changing nothing.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use common::{Backend, Plinth};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::watcher;
use plinth_store::{RangeRequest, Store};
use plinth_store_etcd::testing::EtcdProcess;

fn migrate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plinth"))
        .arg("migrate")
        .args(args)
        .output()
        .unwrap()
}

fn refused(args: &[&str], says: &str) {
    let out = migrate(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(stderr.contains(says), "{args:?}: {stderr}");
}

/// Every key and value of `store`, and each key's mod revision.
async fn raw(store: &dyn Store) -> (BTreeMap<String, bytes::Bytes>, BTreeMap<String, i64>) {
    let all = store.range(RangeRequest::prefix("")).await.unwrap();
    let values = all
        .kvs
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect();
    let revisions = all
        .kvs
        .iter()
        .map(|kv| (kv.key.clone(), kv.mod_revision))
        .collect();
    (values, revisions)
}

async fn raw_embedded(dir: &std::path::Path) -> BTreeMap<String, bytes::Bytes> {
    let store = plinth_store_embedded::EmbeddedStore::open(dir.join("store")).unwrap();
    let (values, _) = raw(&store).await;
    store.close().await;
    values
}

/// The objects the API serves, by kind/namespace/name, without their resourceVersions.
fn objects(plinth: &Plinth) -> BTreeMap<String, serde_json::Value> {
    let listed = plinth.json(&[
        "get",
        "configmaps,secrets,namespaces,widgets",
        "-A",
        "-o",
        "json",
    ]);
    listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let mut item = item.clone();
            item["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("resourceVersion");
            let key = format!(
                "{}/{}/{}",
                item["kind"].as_str().unwrap(),
                item["metadata"]["namespace"].as_str().unwrap_or(""),
                item["metadata"]["name"].as_str().unwrap()
            );
            (key, item)
        })
        .collect()
}

/// `a` and `b` hold the same keys with the same bytes (named, not printed whole).
fn same(a: &BTreeMap<String, bytes::Bytes>, b: &BTreeMap<String, bytes::Bytes>, what: &str) {
    let differ: Vec<&String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .collect();
    assert!(differ.is_empty(), "{what}: {differ:?} differ");
    assert!(!a.is_empty(), "{what}: nothing copied");
}

fn rv(plinth: &Plinth, args: &[&str]) -> i64 {
    let mut args = args.to_vec();
    args.extend(["-o", "jsonpath={.metadata.resourceVersion}"]);
    plinth.kubectl(&args).parse().unwrap()
}

/// Lists seen and the newest resourceVersion of configmap `one`, as an informer saw them.
#[derive(Default)]
struct Seen {
    lists: usize,
    one: Option<i64>,
}

#[test]
fn a_cluster_moves_to_etcd_and_back_with_every_object() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let etcd = runtime.block_on(EtcdProcess::start()).unwrap();
    let endpoint = etcd.endpoint();
    let mut plinth = Plinth::start(Backend::Embedded);
    let data = plinth.dir.path().to_str().unwrap().to_owned();
    plinth.kubectl(&["create", "namespace", "team"]);
    plinth.kubectl(&[
        "-n",
        "team",
        "create",
        "configmap",
        "settings",
        "--from-literal=a=1",
    ]);
    plinth.kubectl(&[
        "create",
        "secret",
        "generic",
        "token",
        "--from-literal=t=s3cr3t",
    ]);
    plinth.kubectl(&["create", "configmap", "one", "--from-literal=n=0"]);
    let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: widgets, kind: Widget}\n  versions:\n  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}\n";
    plinth.kubectl_with(&["apply", "-f", "-"], crd);
    plinth.eventually("widgets served", || {
        plinth.kubectl_output(&["get", "widgets"]).status.success()
    });
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 3}\n",
    );
    // Enough history that the embedded store's revision is well past a new etcd's.
    for n in 1..=40 {
        plinth.kubectl(&[
            "patch",
            "configmap",
            "one",
            "-p",
            &format!(r#"{{"data":{{"n":"{n}"}}}}"#),
        ]);
    }
    let old_rv = rv(&plinth, &["get", "configmap", "one"]);

    // Not while the server holds the data directory; nothing reaches etcd.
    refused(
        &["--from-data-dir", &data, "--to-etcd", &endpoint],
        "in use by another process",
    );
    let etcd_store = runtime
        .block_on(plinth_store_etcd::EtcdStore::connect(
            std::slice::from_ref(&endpoint),
            "/registry/",
        ))
        .unwrap();
    assert!(runtime.block_on(raw(&etcd_store)).0.is_empty());
    refused(&["--to-etcd", &endpoint], "--from-data-dir");

    // An informer that lives through the move (the server comes back on its port).
    let seen = Arc::new(Mutex::new(Seen::default()));
    let informer = {
        let client = runtime.block_on(plinth.kube_client());
        let seen = seen.clone();
        runtime.spawn(async move {
            let api: Api<ConfigMap> = Api::namespaced(client, "default");
            let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                let mut seen = seen.lock().unwrap();
                match event {
                    watcher::Event::Init => seen.lists += 1,
                    watcher::Event::InitApply(cm) | watcher::Event::Apply(cm)
                        if cm.metadata.name.as_deref() == Some("one") =>
                    {
                        seen.one = cm.metadata.resource_version.and_then(|rv| rv.parse().ok());
                    }
                    _ => {}
                }
            }
        })
    };
    plinth.eventually("the informer to list", || {
        seen.lock().unwrap().one == Some(old_rv)
    });
    let before = objects(&plinth);

    // Embedded → etcd.
    plinth.stop();
    let stored = runtime.block_on(raw_embedded(plinth.dir.path()));
    let out = migrate(&["--from-data-dir", &data, "--to-etcd", &endpoint]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with(&format!("copied {} objects", stored.len())),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (in_etcd, etcd_revisions) = runtime.block_on(raw(&etcd_store));
    same(&in_etcd, &stored, "embedded → etcd");
    assert!(
        etcd_revisions.values().all(|r| *r > old_rv),
        "new resourceVersions are past every old one"
    );
    // Into a prefix that holds keys: refused, etcd unchanged.
    let revision = runtime.block_on(etcd_store.current_revision()).unwrap();
    refused(
        &["--from-data-dir", &data, "--to-etcd", &endpoint],
        "holds keys under /registry/ already",
    );
    assert_eq!(
        runtime.block_on(etcd_store.current_revision()).unwrap(),
        revision
    );

    plinth.set_backend(Backend::SharedEtcd(endpoint.clone()));
    plinth.relaunch();
    assert_eq!(
        objects(&plinth),
        before,
        "the same objects, through the API"
    );
    let new_rv = rv(&plinth, &["get", "configmap", "one"]);
    assert_eq!(Some(&new_rv), etcd_revisions.get("/configmaps/default/one"));
    // A watch from an old resourceVersion is told to relist; the informer did just that.
    let events = plinth.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={old_rv}&timeoutSeconds=5"),
    ]);
    assert!(events.contains(r#""code":410"#), "{events}");
    plinth.eventually("the informer to relist", || {
        let seen = seen.lock().unwrap();
        seen.lists == 2 && seen.one == Some(new_rv)
    });
    informer.abort();

    // etcd → embedded, into a data directory with the same credentials.
    plinth.stop();
    let back = tempfile::tempdir().unwrap();
    for file in ["ca.crt", "ca.key", "admin.token", "sa.key"] {
        std::fs::copy(plinth.dir.path().join(file), back.path().join(file)).unwrap();
    }
    let back_dir = back.path().to_str().unwrap().to_owned();
    let out = migrate(&["--from-etcd", &endpoint, "--to-data-dir", &back_dir]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    refused(
        &["--from-etcd", &endpoint, "--to-data-dir", &back_dir],
        "holds a store already",
    );
    let (values, revisions) = runtime.block_on(async {
        let imported =
            plinth_store_embedded::EmbeddedStore::open(back.path().join("store")).unwrap();
        let read = raw(&imported).await;
        imported.close().await;
        read
    });
    // Exactly what etcd held (the server on etcd wrote its leases and such meanwhile), at
    // etcd's revisions; the objects nobody touched since are the embedded originals.
    let (in_etcd, etcd_revisions) = runtime.block_on(raw(&etcd_store));
    same(&values, &in_etcd, "etcd → embedded");
    assert_eq!(revisions, etcd_revisions, "etcd's resourceVersions kept");
    for key in [
        "/configmaps/default/one",
        "/configmaps/team/settings",
        "/secrets/default/token",
        "/example.com/widgets/default/w1",
    ] {
        assert_eq!(values.get(key), stored.get(key), "{key}: round trip");
        assert!(values.contains_key(key), "{key}");
    }
    let at_copy = runtime.block_on(etcd_store.current_revision()).unwrap();

    let embedded = Plinth::start_in(back, Backend::Embedded, &[]);
    assert_eq!(objects(&embedded), before);
    assert_eq!(rv(&embedded, &["get", "configmap", "one"]), new_rv);
    // A watch from the copy's revision goes on: the next change arrives.
    let watch = {
        let url = format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={at_copy}&timeoutSeconds=5"
        );
        let mut command = embedded.kubectl_command();
        command.args(["get", "--raw", &url]);
        std::thread::spawn(move || command.output().unwrap())
    };
    std::thread::sleep(std::time::Duration::from_secs(1));
    embedded.kubectl(&[
        "patch",
        "configmap",
        "one",
        "-p",
        r#"{"data":{"n":"after"}}"#,
    ]);
    let out = watch.join().unwrap();
    let events = String::from_utf8_lossy(&out.stdout);
    assert!(
        events.contains(r#""type":"MODIFIED""#) && events.contains(r#""n":"after""#),
        "{events}"
    );
    assert!(!events.contains(r#""code":410"#), "{events}");
}
