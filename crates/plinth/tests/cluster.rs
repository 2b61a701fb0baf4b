//! Several Plinth servers over one etcd are one cluster; and `plinth serve` refuses a data
//! directory it cannot use, saying why.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read;
use std::process::{Command, Stdio};

use common::{Backend, Plinth, holds, lease_holder};

#[test]
fn two_servers_over_one_etcd_are_one_cluster() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let a = runtime.block_on(Plinth::start_etcd());
    let b = Plinth::start(Backend::SharedEtcd(a.etcd_endpoint().unwrap()));

    a.kubectl(&["create", "configmap", "from-a", "--from-literal=k=v"]);
    assert_eq!(
        b.kubectl(&["get", "configmap", "from-a", "-o", "jsonpath={.data.k}"]),
        "v"
    );
    let on_a = a.json(&["get", "configmap", "from-a"]);
    let on_b = b.json(&["get", "configmap", "from-a"]);
    assert_eq!(
        on_a["metadata"]["resourceVersion"], on_b["metadata"]["resourceVersion"],
        "one revision sequence"
    );

    // A write through B with A's stale copy conflicts: the compare-and-swap is etcd's.
    b.kubectl(&[
        "patch",
        "configmap",
        "from-a",
        "-p",
        r#"{"data":{"k":"w"}}"#,
    ]);
    let stale = a.kubectl_stdin(&["replace", "-f", "-"], &on_a.to_string());
    assert!(String::from_utf8_lossy(&stale.stderr).contains("the object has been modified"));

    // A CRD created through A is served by B too (B's CRD controller watches storage).
    let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: things.example.com}\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: things, kind: Thing}\n  versions:\n  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}\n";
    assert!(a.kubectl_stdin(&["apply", "-f", "-"], crd).status.success());
    b.eventually("B to serve A's CRD", || {
        b.kubectl_output(&["get", "things"]).status.success()
    });
    let thing = "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: t1}\nspec: {size: 1}\n";
    assert!(
        b.kubectl_stdin(&["apply", "-f", "-"], thing)
            .status
            .success()
    );
    assert_eq!(a.json(&["get", "thing", "t1"])["spec"]["size"], 1);
    // Watches on one server see writes through the other.
    let rv = a.json(&["get", "thing", "t1"])["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    b.kubectl(&[
        "patch",
        "thing",
        "t1",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":2}}"#,
    ]);
    let events = a.kubectl(&["get", "--raw", &format!("/apis/example.com/v1/namespaces/default/things?watch=1&resourceVersion={rv}&timeoutSeconds=2")]);
    assert!(
        events.contains(r#""type":"MODIFIED""#) && events.contains(r#""size":2"#),
        "{events}"
    );
}

#[test]
fn a_data_directory_that_cannot_be_used_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("plinth.db"), vec![0x5a; 8192]).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plinth"))
        .args(["serve", "--pod-network=shared", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success(), "plinth must refuse a corrupt store");
    assert!(
        stderr.contains("cannot open storage")
            && stderr.contains(&store.join("plinth.db").display().to_string()),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(store.join("plinth.db")).unwrap(),
        vec![0x5a; 8192],
        "the file is left as it was"
    );
}

#[test]
fn the_built_in_controllers_run_on_one_server_at_a_time_and_hand_over() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut a = runtime.block_on(Plinth::start_etcd());
    let mut b = Plinth::start(Backend::SharedEtcd(a.etcd_endpoint().unwrap()));
    a.eventually("one server holds the lease", || {
        let holder = lease_holder(&a);
        holds(&holder, &a) || holds(&holder, &b)
    });
    // One ReplicaSet controller: a ReplicaSet of three gets exactly three pods, created
    // once each (two controllers racing would create, then delete, extras).
    a.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: once}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: once}}\n  template:\n    metadata: {labels: {app: once}}\n    spec: {containers: [{name: c, image: busybox, command: [sleep, '3600']}]}\n",
    );
    a.eventually("three pods", || {
        a.json(&["get", "rs", "once"])["status"]["replicas"] == 3
    });
    let events = b.json(&[
        "get",
        "events",
        "--field-selector",
        "reason=SuccessfulCreate,involvedObject.name=once",
    ]);
    assert_eq!(
        events["items"].as_array().map(Vec::len),
        Some(3),
        "{events}"
    );
    // The holder stops (SIGTERM, releasing the lease): the other takes over and runs them.
    let (leader, other) = if holds(&lease_holder(&a), &a) {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    leader.terminate();
    other.eventually("the other server takes the lease over", || {
        holds(&lease_holder(other), other)
    });
    other.kubectl(&["scale", "rs", "once", "--replicas=4"]);
    other.eventually("the new leader's controller adds a pod", || {
        other.json(&["get", "rs", "once"])["status"]["replicas"] == 4
    });
}

#[test]
fn a_server_without_controllers_serves_and_never_takes_the_controllers_lease() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut a = runtime.block_on(Plinth::start_etcd());
    let endpoint = a.etcd_endpoint().unwrap();
    let b = Plinth::start_with(
        Backend::SharedEtcd(endpoint.clone()),
        &["--controllers=false"],
    );
    a.eventually("A holds the lease", || holds(&lease_holder(&a), &a));
    // B serves: a ReplicaSet written through it is run by A's controllers.
    b.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: pure}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: pure}}\n  template:\n    metadata: {labels: {app: pure}}\n    spec: {containers: [{name: c, image: busybox, command: [sleep, '3600']}]}\n",
    );
    b.eventually("two pods", || {
        b.json(&["get", "rs", "pure"])["status"]["replicas"] == 2
    });
    // A third server with controllers; A stops and releases the lease. B never campaigns,
    // so C — not B — takes it, however the race between them would have gone.
    let c = Plinth::start(Backend::SharedEtcd(endpoint));
    a.terminate();
    c.eventually("C takes the lease", || {
        let holder = lease_holder(&c);
        assert!(!holds(&holder, &b), "B took the lease: {holder}");
        holds(&holder, &c)
    });
}

#[test]
fn a_kubeconfig_for_several_servers_refuses_what_it_cannot_use() {
    let plinth = Plinth::start(Backend::Embedded);
    let out_file = plinth.dir.path().join("kubeconfig-bad");
    for (args, says) in [
        (
            vec!["--servers", "https://127.0.0.1:1,ftp://x"],
            "\"ftp://x\" is not a server URL",
        ),
        (vec!["--servers", ","], "\"\" is not a server URL"),
        (
            vec!["--group", "ops"],
            "--group names a group of --user's certificate",
        ),
        (vec!["--user", " "], "the user name must not be empty"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_plinth"))
            .args(["kubeconfig", "--data-dir"])
            .arg(plinth.dir.path())
            .args(&args)
            .arg("--out")
            .arg(&out_file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!out_file.exists(), "{args:?} wrote a kubeconfig");
    }
    // The admin's kubeconfig for two servers: `plinth` is the first, then one per server.
    let url = plinth.server_url();
    let out = Command::new(env!("CARGO_BIN_EXE_plinth"))
        .args(["kubeconfig", "--data-dir"])
        .arg(plinth.dir.path())
        .args(["--servers", &format!("{url},127.0.0.1:1")])
        .arg("--out")
        .arg(&out_file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let contexts = plinth.kubectl(&[
        "--kubeconfig",
        out_file.to_str().unwrap(),
        "config",
        "get-contexts",
        "-o",
        "name",
    ]);
    assert_eq!(
        contexts.split_whitespace().collect::<Vec<_>>(),
        ["plinth", "plinth-1", "plinth-2"]
    );
    let server = plinth.kubectl(&[
        "--kubeconfig",
        out_file.to_str().unwrap(),
        "config",
        "view",
        "-o",
        "jsonpath={.clusters[?(@.name==\"plinth-2\")].cluster.server}",
    ]);
    assert_eq!(server, "https://127.0.0.1:1");
    let whoami = plinth.kubectl(&[
        "--kubeconfig",
        out_file.to_str().unwrap(),
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(whoami, "plinth-admin");
}

/// The ports of the `kubernetes` Service's endpoints and the names of its EndpointSlices.
fn kubernetes_endpoints(server: &Plinth) -> (Vec<u64>, Vec<String>) {
    let endpoints = server.json(&["get", "endpoints", "kubernetes"]);
    let mut ports: Vec<u64> = endpoints["subsets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["ports"][0]["port"].as_u64())
        .collect();
    ports.sort_unstable();
    let slices = server.json(&[
        "get",
        "endpointslices",
        "-l",
        "kubernetes.io/service-name=kubernetes",
    ]);
    let mut names: Vec<String> = slices["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    (ports, names)
}

/// How many API server identity Leases `server` lists.
fn identity_leases(server: &Plinth) -> usize {
    let leases = server.json(&[
        "get",
        "leases",
        "-n",
        "kube-system",
        "-l",
        "apiserver.kubernetes.io/identity=kube-apiserver",
    ]);
    leases["items"].as_array().map_or(0, Vec::len)
}

fn port_of(server: &Plinth) -> u64 {
    server
        .server_url()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn the_kubernetes_service_points_at_every_live_server() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let a = runtime.block_on(Plinth::start_etcd());
    let mut b = Plinth::start(Backend::SharedEtcd(a.etcd_endpoint().unwrap()));
    let mut both = vec![port_of(&a), port_of(&b)];
    both.sort_unstable();
    a.eventually("both servers in the endpoints", || {
        kubernetes_endpoints(&a).0 == both
    });
    let (_, slices) = kubernetes_endpoints(&b);
    assert_eq!(
        slices,
        ["kubernetes".to_owned(), format!("kubernetes-{}", both[1])],
        "one slice per server"
    );
    // Each server keeps an identity Lease, as kube-apiserver does.
    assert_eq!(identity_leases(&a), 2, "identity Leases");
    // B stops: it takes itself out at once, its Lease gone.
    let b_port = port_of(&b);
    b.terminate();
    a.eventually("only A in the endpoints", || {
        kubernetes_endpoints(&a) == (vec![port_of(&a)], vec!["kubernetes".to_owned()])
    });
    assert_eq!(identity_leases(&a), 1, "identity Leases");
    assert!(!kubernetes_endpoints(&a).0.contains(&b_port));
}
