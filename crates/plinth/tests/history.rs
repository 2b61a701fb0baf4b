//! Object history (issue #32): every write keeps who made it — user, groups, impersonator,
//! operation, field manager, user agent, audit ID, time — with the revision it produced; the
//! history API (`history.plinth.dev/v1alpha1`) reads revisions, diffs, objects and lists as of
//! a past revision or time and deleted objects, with the rights to read the object; `plinth
//! history` / `plinth get --as-of` (also as `kubectl plinth …`) show them; retention expires
//! history and a restart keeps it.

#![allow(clippy::unwrap_used)]

mod common;

use serde_json::Value;

use plinth_store_etcd::testing::EtcdProcess;

use common::http::Http;
use common::{Backend, Plinth};

const ROOT: &str = "/apis/history.plinth.dev/v1alpha1";

fn raw(plinth: &Plinth, path: &str) -> Value {
    serde_json::from_str(&plinth.kubectl(&["get", "--raw", path])).unwrap()
}

fn revisions(plinth: &Plinth, object_path: &str) -> Vec<Value> {
    raw(plinth, &format!("{ROOT}/revisions{object_path}"))["revisions"]
        .as_array()
        .cloned()
        .unwrap()
}

fn field<'a>(version: &'a Value, name: &str) -> &'a str {
    version["provenance"][name].as_str().unwrap_or("")
}

/// `plinth` (or `kubectl plinth`, with `kubectl-plinth` on the PATH) against the server.
fn plinth_cli(plinth: &Plinth, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_plinth"))
        .args(args)
        .env("KUBECONFIG", &plinth.kubeconfig)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "plinth {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn etcd() -> Backend {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let etcd = runtime.block_on(EtcdProcess::start()).expect("start etcd");
    drop(runtime);
    Backend::Etcd(etcd)
}

#[test]
fn every_write_keeps_who_made_it_and_history_reads_back() {
    writes_keep_who_made_them(Backend::Embedded);
}

#[test]
fn every_write_keeps_who_made_it_in_etcd_too() {
    writes_keep_who_made_them(etcd());
}

fn writes_keep_who_made_them(backend: Backend) {
    let plinth = Plinth::start_with(backend, &["--history-retention", "1h"]);
    let path = "/api/v1/namespaces/default/configmaps/settings";
    plinth.kubectl(&["create", "configmap", "settings", "--from-literal=mode=one"]);
    plinth.kubectl(&[
        "patch",
        "configmap",
        "settings",
        "-p",
        r#"{"data":{"mode":"two"}}"#,
    ]);
    plinth.kubectl_with(
        &["apply", "--server-side", "--field-manager=tuner", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {level: high}\n",
    );
    plinth.kubectl(&[
        "label",
        "configmap",
        "settings",
        "team=blue",
        "--as=alice",
        "--as-group=system:masters",
    ]);
    // A client's own audit ID is kept (and returned, as kube-apiserver does).
    let http = Http::new(&plinth);
    let reply = http.request_with(
        "PATCH",
        path,
        "application/merge-patch+json",
        Some(br#"{"data":{"mode":"three"}}"#),
        true,
        &["Audit-ID: my-request-42", "User-Agent: tuning-script/1.0"],
    );
    assert_eq!(reply.code, 200, "{}", reply.body);
    assert!(
        reply
            .headers
            .to_lowercase()
            .contains("audit-id: my-request-42"),
        "{}",
        reply.headers
    );
    plinth.kubectl(&["delete", "configmap", "settings"]);

    let versions = revisions(&plinth, path);
    let seen: Vec<(&str, &str, &str, &str)> = versions
        .iter()
        .map(|v| {
            (
                v["type"].as_str().unwrap(),
                field(v, "operation"),
                field(v, "user"),
                field(v, "fieldManager"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("ADDED", "create", "plinth-admin", "kubectl-create"),
            ("MODIFIED", "patch", "plinth-admin", "kubectl-patch"),
            ("MODIFIED", "apply", "plinth-admin", "tuner"),
            ("MODIFIED", "patch", "alice", "kubectl-label"),
            ("MODIFIED", "patch", "plinth-admin", "tuning-script"),
            ("DELETED", "delete", "plinth-admin", ""),
        ],
        "{versions:#?}"
    );
    assert_eq!(field(&versions[3], "impersonator"), "plinth-admin");
    assert!(
        versions[3]["provenance"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g == "system:masters")
    );
    assert_eq!(field(&versions[4], "auditID"), "my-request-42");
    assert_eq!(field(&versions[4], "userAgent"), "tuning-script/1.0");
    assert!(field(&versions[0], "userAgent").starts_with("kubectl/"));
    let audit_ids: std::collections::BTreeSet<&str> =
        versions.iter().map(|v| field(v, "auditID")).collect();
    assert_eq!(audit_ids.len(), versions.len(), "one audit ID per request");
    let times: Vec<&str> = versions.iter().map(|v| field(v, "time")).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    // Each version is the object then; the deletion carries the object it deleted.
    assert_eq!(versions[0]["object"]["data"]["mode"], "one");
    assert_eq!(versions[2]["object"]["data"]["level"], "high");
    assert_eq!(versions[5]["object"]["metadata"]["labels"]["team"], "blue");
    let revision = |i: usize| versions[i]["revision"].as_str().unwrap().to_owned();

    // A diff between two revisions, as JSON and as text.
    let diff = raw(
        &plinth,
        &format!("{ROOT}/diff{path}?from={}&to={}", revision(0), revision(1)),
    );
    assert_eq!(diff["kind"], "ObjectDiff");
    let text = diff["diff"].as_str().unwrap();
    assert!(text.contains("-  mode: one\n+  mode: two\n"), "{text}");
    assert!(
        text.starts_with(&format!("--- settings@{}\n", revision(0))),
        "{text}"
    );
    let plain = http.get_as(
        &format!("{ROOT}/diff{path}?to={}", revision(3)),
        "text/plain",
    );
    assert_eq!(plain.code, 200);
    assert!(plain.body.contains("+    team: blue"), "{}", plain.body);

    // The object, and the whole list, as of a past revision.
    let then = raw(
        &plinth,
        &format!("{ROOT}/object{path}?revision={}", revision(1)),
    );
    assert_eq!(then["data"]["mode"], "two");
    assert_eq!(then["metadata"]["resourceVersion"], revision(1));
    let list = raw(
        &plinth,
        &format!(
            "/api/v1/namespaces/default/configmaps?resourceVersion={}&resourceVersionMatch=Exact",
            revision(1)
        ),
    );
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["metadata"]["name"] == "settings" && i["data"]["mode"] == "two")
    );
    let gone = plinth.kubectl_fails(&[
        "get",
        "--raw",
        &format!("{ROOT}/object{path}?revision={}", revision(5)),
    ]);
    assert!(
        gone.contains("NotFound") || gone.contains("not found"),
        "{gone}"
    );

    // The objects deleted lately.
    let deleted = raw(
        &plinth,
        &format!("{ROOT}/deleted/api/v1/namespaces/default/configmaps"),
    );
    let items = deleted["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{deleted}");
    assert_eq!(items[0]["object"]["metadata"]["name"], "settings");
    assert_eq!(items[0]["provenance"]["operation"], "delete");

    // A time resolves to the revision current then.
    let now = raw(&plinth, &format!("{ROOT}/revision?time=0s"));
    let at: i64 = now["revision"].as_str().unwrap().parse().unwrap();
    assert!(at >= revision(5).parse::<i64>().unwrap(), "{now}");

    // The command line, and as a kubectl plugin.
    let table = plinth_cli(&plinth, &["history", "cm/settings"]);
    assert!(table.starts_with("REVISION"), "{table}");
    assert!(table.contains("alice (by plinth-admin)"), "{table}");
    assert!(table.contains("apply"), "{table}");
    let diffs = plinth_cli(&plinth, &["history", "configmap/settings", "--diff"]);
    assert!(diffs.contains("+  mode: two"), "{diffs}");
    let old = plinth_cli(
        &plinth,
        &[
            "get",
            "configmap/settings",
            "--as-of",
            &revision(0),
            "-o",
            "json",
        ],
    );
    let old: Value = serde_json::from_str(&old).unwrap();
    assert_eq!(old["data"]["mode"], "one");
    let names = plinth_cli(&plinth, &["get", "configmaps", "--as-of", &revision(2)]);
    assert!(names.lines().any(|l| l == "settings"), "{names}");
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_plinth"),
        bin.path().join("kubectl-plinth"),
    )
    .unwrap();
    let path_var = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let plugin = plinth
        .kubectl_command()
        .env("PATH", path_var)
        .args(["plinth", "history", "configmap/settings", "-o", "json"])
        .output()
        .unwrap();
    assert!(
        plugin.status.success(),
        "{}",
        String::from_utf8_lossy(&plugin.stderr)
    );
    let through_plugin: Value = serde_json::from_slice(&plugin.stdout).unwrap();
    assert_eq!(through_plugin["revisions"].as_array().unwrap().len(), 6);
}

#[test]
fn controllers_and_the_node_agent_write_under_their_own_names() {
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &["--node-name", "history-node", "--history-retention", "1h"],
    );
    plinth.kubectl(&[
        "create",
        "deployment",
        "web",
        "--image=busybox:1.36",
        "--",
        "sleep",
        "3600",
    ]);
    plinth.kubectl(&["rollout", "status", "deploy/web", "--timeout=120s"]);
    let sets = plinth.json(&["get", "replicasets", "-l", "app=web"]);
    let set = sets["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let set_history = revisions(
        &plinth,
        &format!("/apis/apps/v1/namespaces/default/replicasets/{set}"),
    );
    assert_eq!(
        field(&set_history[0], "user"),
        "system:serviceaccount:kube-system:deployment-controller"
    );
    assert!(
        set_history.iter().any(|v| field(v, "user")
            == "system:serviceaccount:kube-system:replicaset-controller"
            && field(v, "subresource") == "status"),
        "the ReplicaSet controller writes its status: {set_history:#?}"
    );
    let pods = plinth.json(&["get", "pods", "-l", "app=web"]);
    let pod = pods["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let pod_history = revisions(&plinth, &format!("/api/v1/namespaces/default/pods/{pod}"));
    let writers: Vec<(&str, &str)> = pod_history
        .iter()
        .map(|v| (field(v, "user"), field(v, "subresource")))
        .collect();
    assert_eq!(
        writers[0],
        (
            "system:serviceaccount:kube-system:replicaset-controller",
            ""
        )
    );
    assert!(
        writers.contains(&("system:kube-scheduler", "")),
        "{writers:?}"
    );
    assert!(
        writers.contains(&("system:node:history-node", "status")),
        "the agent reports the pod's status: {writers:?}"
    );
    // The Deployment's timeline: its writes, its ReplicaSet's and pods', their Events and the
    // container's start, in revision order.
    let timeline = raw(
        &plinth,
        &format!("{ROOT}/timeline/apis/apps/v1/namespaces/default/deployments/web"),
    );
    let steps = timeline["steps"].as_array().unwrap();
    let order: Vec<i64> = steps
        .iter()
        .map(|s| s["revision"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
    let has = |kind: &str, what: &str, by: &str| {
        steps.iter().any(|s| {
            s["object"]["kind"] == kind
                && s["type"] == what
                && s["provenance"]["user"].as_str().unwrap_or("") == by
        })
    };
    assert!(has("Deployment", "ADDED", "plinth-admin"), "{timeline:#}");
    assert!(
        has(
            "ReplicaSet",
            "ADDED",
            "system:serviceaccount:kube-system:deployment-controller"
        ),
        "{timeline:#}"
    );
    assert!(
        has(
            "Pod",
            "ADDED",
            "system:serviceaccount:kube-system:replicaset-controller"
        ),
        "{timeline:#}"
    );
    assert!(
        has("Pod", "ContainerStarted", "system:node:history-node"),
        "{timeline:#}"
    );
    assert!(
        steps.iter().any(|s| s["type"] == "Event"
            && s["summary"].as_str().unwrap().contains("ScalingReplicaSet")),
        "{timeline:#}"
    );
    // The owner graph, as the garbage collector sees it: ReplicaSet, then its pod.
    let graph = raw(
        &plinth,
        &format!("{ROOT}/graph/apis/apps/v1/namespaces/default/deployments/web"),
    );
    let replica_set = &graph["dependents"][0];
    assert_eq!(replica_set["kind"], "ReplicaSet", "{graph:#}");
    assert_eq!(replica_set["controller"], true);
    assert_eq!(replica_set["dependents"][0]["kind"], "Pod", "{graph:#}");
    assert_eq!(replica_set["dependents"][0]["name"], pod.as_str());
    let pod_graph = raw(
        &plinth,
        &format!("{ROOT}/graph/api/v1/namespaces/default/pods/{pod}"),
    );
    assert_eq!(pod_graph["owners"][0]["kind"], "ReplicaSet");
    assert_eq!(pod_graph["owners"][0]["exists"], true);
    let printed = plinth_cli(&plinth, &["timeline", "deploy/web"]);
    assert!(printed.starts_with("TIME"), "{printed}");
    assert!(printed.contains("container busybox started"), "{printed}");
    // A reader of Deployments who may not read pods sees none of theirs.
    plinth.kubectl(&[
        "create",
        "role",
        "deploy-reader",
        "--verb=get",
        "--resource=deployments,replicasets",
    ]);
    plinth.kubectl(&[
        "create",
        "rolebinding",
        "carol-reads",
        "--role=deploy-reader",
        "--user=carol",
    ]);
    let as_carol = plinth.kubectl(&[
        "get",
        "--raw",
        &format!("{ROOT}/timeline/apis/apps/v1/namespaces/default/deployments/web"),
        "--as=carol",
    ]);
    let as_carol: Value = serde_json::from_str(&as_carol).unwrap();
    let kinds: std::collections::BTreeSet<&str> = as_carol["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["object"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Deployment", "ReplicaSet"].into_iter().collect());

    plinth.kubectl(&["delete", "deployment", "web", "--cascade=foreground"]);
    plinth.eventually("the pods are gone", || {
        plinth.json(&["get", "pods", "-l", "app=web"])["items"]
            .as_array()
            .is_some_and(Vec::is_empty)
    });
    // The garbage collector deleted the ReplicaSet.
    let set_history = revisions(
        &plinth,
        &format!("/apis/apps/v1/namespaces/default/replicasets/{set}"),
    );
    let last = set_history.last().unwrap();
    assert_eq!(last["type"], "DELETED");
    assert_eq!(
        field(last, "user"),
        "system:serviceaccount:kube-system:generic-garbage-collector"
    );
}

/// The write that removes a deleting object's last finalizer deletes it, in that writer's name
/// (kube's delete-during-update): the object goes without a write of its emptied finalizers
/// first, so no later writer (a controller updating its status) can finish the delete.
#[test]
fn removing_the_last_finalizer_deletes_in_the_removers_name() {
    let plinth = Plinth::start_with(Backend::Embedded, &["--history-retention", "1h"]);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "held", "finalizers": ["example.com/hold"]}}"#,
    );
    plinth.kubectl(&[
        "create",
        "role",
        "finalize",
        "--verb=get,patch",
        "--resource=configmaps",
    ]);
    plinth.kubectl(&[
        "create",
        "rolebinding",
        "dave-finalizes",
        "--role=finalize",
        "--user=dave",
    ]);
    plinth.kubectl(&["delete", "configmap", "held", "--wait=false"]);
    let marked = plinth.json(&["get", "configmap", "held", "-o", "json"]);
    assert!(
        marked["metadata"]["deletionTimestamp"].is_string(),
        "{marked:#}"
    );
    let patched = plinth.kubectl(&[
        "patch",
        "configmap",
        "held",
        "--type=json",
        "-p",
        r#"[{"op": "remove", "path": "/metadata/finalizers"}]"#,
        "--as=dave",
        "-o",
        "json",
    ]);
    let patched: Value = serde_json::from_str(&patched).unwrap();
    assert!(patched["metadata"]["finalizers"].is_null(), "{patched:#}");
    let gone = plinth.kubectl_fails(&["get", "configmap", "held"]);
    assert!(gone.contains("NotFound"), "{gone}");
    let history = revisions(&plinth, "/api/v1/namespaces/default/configmaps/held");
    let types: Vec<&str> = history
        .iter()
        .map(|v| v["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"], "{history:#?}");
    let last = history.last().unwrap();
    assert_eq!(field(last, "user"), "dave");
    assert_eq!(field(last, "operation"), "patch");
}

#[test]
fn history_is_read_with_the_rights_to_read_the_object() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.kubectl(&["create", "secret", "generic", "key", "--from-literal=k=v"]);
    plinth.kubectl(&["create", "configmap", "open", "--from-literal=k=v"]);
    plinth.kubectl(&[
        "create",
        "role",
        "cm-reader",
        "--verb=get,list",
        "--resource=configmaps",
    ]);
    plinth.kubectl(&[
        "create",
        "rolebinding",
        "bob-reads",
        "--role=cm-reader",
        "--user=bob",
    ]);
    let as_bob = |path: &str| plinth.kubectl_output(&["get", "--raw", path, "--as=bob"]);
    let ok = as_bob(&format!(
        "{ROOT}/revisions/api/v1/namespaces/default/configmaps/open"
    ));
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    for view in ["revisions", "diff", "object"] {
        let refused = as_bob(&format!(
            "{ROOT}/{view}/api/v1/namespaces/default/secrets/key?revision=2"
        ));
        let text = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && text.contains("Forbidden"),
            "{view}: {text}"
        );
    }
    let refused = as_bob(&format!("{ROOT}/deleted/api/v1/namespaces/default/secrets"));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("Forbidden"));
    let refused = as_bob(&format!(
        "{ROOT}/revisions/api/v1/namespaces/other/configmaps/open"
    ));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("Forbidden"));
}

#[test]
fn malformed_history_requests_get_a_clear_4xx_and_change_nothing() {
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &["--compaction-interval", "1s", "--history-retention", "2s"],
    );
    plinth.kubectl(&["create", "configmap", "c", "--from-literal=k=1"]);
    let first = plinth.json(&["get", "configmap", "c"])["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    plinth.kubectl(&["patch", "configmap", "c", "-p", r#"{"data":{"k":"2"}}"#]);
    let http = Http::new(&plinth);
    let object = "/api/v1/namespaces/default/configmaps/c";
    let before = plinth.json(&["get", "configmap", "c"]);
    for (path, code, words) in [
        (
            format!("{ROOT}/object{object}?revision=abc"),
            400,
            "revision: Invalid value",
        ),
        (
            format!("{ROOT}/object{object}?revision=-3"),
            400,
            "revision: Invalid value",
        ),
        (format!("{ROOT}/object{object}"), 400, "Required value"),
        (
            format!("{ROOT}/object{object}?revision=1&time=1m"),
            400,
            "exclusive",
        ),
        (
            format!("{ROOT}/revisions{object}?since=yesterday"),
            400,
            "since: Invalid value",
        ),
        (
            format!("{ROOT}/revision?time=later"),
            400,
            "time: Invalid value",
        ),
        (
            format!("{ROOT}/deleted/api/v1/configmaps?limit=0"),
            400,
            "limit: Invalid value",
        ),
        (
            format!("{ROOT}/revisions/api/v1/namespaces/default/configmaps/none"),
            404,
            "not found",
        ),
        (
            format!("{ROOT}/revisions/api/v1/namespaces/default/widgets/x"),
            404,
            "NotFound",
        ),
        (format!("{ROOT}/nonsense{object}"), 404, "NotFound"),
    ] {
        let reply = http.get(&path);
        assert_eq!(reply.code, code, "{path}: {}", reply.body);
        let status = reply.json();
        assert_eq!(status["kind"], "Status", "{path}");
        assert!(
            status["message"].as_str().unwrap().contains(words)
                || status["reason"].as_str().unwrap().contains(words),
            "{path}: {status}"
        );
    }
    let post = http.post(&format!("{ROOT}/revisions{object}"), b"{}");
    assert_eq!(post.code, 405, "{}", post.body);
    assert_eq!(
        plinth.json(&["get", "configmap", "c"]),
        before,
        "nothing changed"
    );

    // Past the retention the first version goes: a 410 naming the oldest revision kept.
    plinth.eventually("the first revision expires", || {
        http.get(&format!("{ROOT}/object{object}?revision={first}"))
            .code
            == 410
    });
    let expired = http.get(&format!("{ROOT}/revisions{object}?from={first}"));
    assert_eq!(expired.code, 410, "{}", expired.body);
    let status = expired.json();
    assert_eq!(status["reason"], "Expired");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("oldest retained revision"),
        "{status}"
    );
    // The current version stays.
    let kept = revisions(&plinth, object);
    assert_eq!(kept.last().unwrap()["object"]["data"]["k"], "2");
}

#[test]
fn history_survives_a_restart() {
    survives_a_restart(Backend::Embedded);
}

#[test]
fn history_survives_a_restart_in_etcd_mode() {
    survives_a_restart(etcd());
}

fn survives_a_restart(backend: Backend) {
    let mut plinth = Plinth::start_with(backend, &["--history-retention", "1h"]);
    plinth.kubectl(&["create", "configmap", "kept", "--from-literal=k=1"]);
    plinth.kubectl(&["patch", "configmap", "kept", "-p", r#"{"data":{"k":"2"}}"#]);
    let before = revisions(&plinth, "/api/v1/namespaces/default/configmaps/kept");
    plinth.kill_and_restart();
    let after = revisions(&plinth, "/api/v1/namespaces/default/configmaps/kept");
    assert_eq!(after, before);
    assert_eq!(after.len(), 2);
    assert_eq!(field(&after[1], "operation"), "patch");
}

/// A list as of a past revision — from the watch cache while the revision is in its history,
/// from storage when paginated — is exactly the state then, either way.
#[test]
fn a_list_as_of_a_past_revision_is_the_state_then() {
    let plinth = Plinth::start(Backend::Embedded);
    for i in 0..30 {
        plinth.kubectl(&[
            "create",
            "configmap",
            &format!("c{i:02}"),
            &format!("--from-literal=v={i}"),
        ]);
    }
    let then = raw(&plinth, "/api/v1/namespaces/default/configmaps");
    let revision = then["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    for i in (0..30).step_by(3) {
        plinth.kubectl(&[
            "patch",
            "configmap",
            &format!("c{i:02}"),
            "-p",
            r#"{"data":{"v":"changed"}}"#,
        ]);
    }
    for i in (1..30).step_by(7) {
        plinth.kubectl(&["delete", "configmap", &format!("c{i:02}")]);
    }
    plinth.kubectl(&["create", "configmap", "late"]);
    let path = format!(
        "/api/v1/namespaces/default/configmaps?resourceVersion={revision}&resourceVersionMatch=Exact"
    );
    let http = Http::new(&plinth);
    let lists = |source: &str| -> u64 {
        let metrics = http.get("/metrics").body;
        let name = format!("apiserver_{source}_list_total{{resource_prefix=\"/configmaps\"}}");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let from_storage = lists("storage");
    let cached = raw(&plinth, &path);
    assert_eq!(
        lists("storage"),
        from_storage,
        "served from the watch cache"
    );
    let paged = raw(&plinth, &format!("{path}&limit=1000"));
    assert_eq!(
        lists("storage"),
        from_storage + 1,
        "paginated: from storage"
    );
    assert_eq!(cached["metadata"]["resourceVersion"], revision.as_str());
    assert_eq!(
        cached["items"], then["items"],
        "the state then, from the cache"
    );
    assert_eq!(
        paged["items"], then["items"],
        "the state then, from storage"
    );
    let now = raw(&plinth, "/api/v1/namespaces/default/configmaps");
    assert_ne!(now["items"], then["items"]);
}
