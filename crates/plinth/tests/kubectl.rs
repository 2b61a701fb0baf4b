//! kubectl against `plinth serve`, on the embedded store and on a real etcd: what a user types,
//! and what kube-apiserver would answer.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use common::Plinth;
use serde_json::json;

on_both_backends! {
    system_namespaces_and_default_service_accounts;
    configmap_lifecycle;
    errors_read_like_kube_apiserver;
    watch_streams_changes;
    finalizers_hold_deletion;
    namespace_deletion_empties_the_namespace;
    secrets_leases_and_events;
    restart_keeps_objects_and_revisions;
    custom_resources_end_to_end;
    strategic_merge_patches;
    every_type_patches_explains_and_prints_wide;
    real_world_crds_install_and_explain;
    custom_resource_schemas_validate_default_and_prune;
    crd_versions_share_storage_and_warn_when_deprecated;
    garbage_collection_in_the_background;
    garbage_collection_foreground_and_orphan;
    garbage_collection_across_restarts;
    server_side_apply;
    server_side_apply_merges_custom_resource_lists;
    client_side_apply_is_three_way;
    dry_runs_store_nothing;
    cel_rules_validate_custom_resources;
    crd_schemas_must_be_structural;
    field_selectors_read_absent_booleans_as_false;
}

fn system_namespaces_and_default_service_accounts(p: &mut Plinth) {
    let out = p.kubectl(&["get", "namespaces"]);
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(ns) && l.contains("Active")),
            "{ns} missing:\n{out}"
        );
    }
    assert!(out.starts_with("NAME"), "table output with headers:\n{out}");
    p.eventually("the default service account", || {
        p.kubectl_output(&["get", "serviceaccount", "default", "-n", "kube-system"])
            .status
            .success()
    });
    let resources = p.kubectl(&["api-resources"]);
    for line in [
        "configmaps",
        "namespaces",
        "leases",
        "serviceaccounts",
        "secrets",
    ] {
        assert!(
            resources.contains(line),
            "api-resources lacks {line}:\n{resources}"
        );
    }
    let version = p.kubectl(&["version", "-o", "json"]);
    assert!(version.contains("\"minor\": \"32\""), "{version}");
}

const APP_CONFIG: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
  labels: {app: web, tier: front}
data:
  color: blue
";

fn configmap_lifecycle(p: &mut Plinth) {
    // A typed create: kubectl sends protobuf.
    assert_eq!(
        p.kubectl(&["create", "configmap", "literal", "--from-literal=a=b"])
            .trim(),
        "configmap/literal created"
    );
    assert_eq!(
        p.kubectl(&["get", "configmap", "literal", "-o", "jsonpath={.data.a}"]),
        "b"
    );

    let applied = p.kubectl_stdin(&["apply", "-f", "-"], APP_CONFIG);
    assert_eq!(
        String::from_utf8_lossy(&applied.stdout).trim(),
        "configmap/app-config created"
    );
    let again = p.kubectl_stdin(&["apply", "-f", "-"], APP_CONFIG);
    assert_eq!(
        String::from_utf8_lossy(&again.stdout).trim(),
        "configmap/app-config unchanged"
    );

    let table = p.kubectl(&["get", "configmaps", "-l", "app=web"]);
    let mut lines = table.lines();
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["NAME", "DATA", "AGE"]
    );
    assert!(lines.next().unwrap().starts_with("app-config"));
    assert!(
        lines.next().is_none(),
        "the selector leaves out other configmaps:\n{table}"
    );
    assert_eq!(
        p.kubectl(&[
            "get",
            "cm",
            "--field-selector",
            "metadata.name=literal",
            "-o",
            "name"
        ])
        .trim(),
        "configmap/literal"
    );

    p.kubectl(&["label", "configmap", "app-config", "env=prod"]);
    p.kubectl(&["annotate", "configmap", "app-config", "note=hello"]);
    p.kubectl(&[
        "patch",
        "configmap",
        "app-config",
        "-p",
        r#"{"data":{"color":"red"}}"#,
    ]);
    p.kubectl(&[
        "patch",
        "configmap",
        "app-config",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/data/size","value":"L"}]"#,
    ]);
    p.kubectl(&[
        "patch",
        "configmap",
        "app-config",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"tier":null}}}"#,
    ]);
    let object = p.json(&["get", "configmap", "app-config"]);
    assert_eq!(
        object["data"],
        serde_json::json!({"color": "red", "size": "L"})
    );
    assert_eq!(
        object["metadata"]["labels"],
        serde_json::json!({"app": "web", "env": "prod"})
    );
    assert_eq!(object["metadata"]["annotations"]["note"], "hello");
    let yaml = p.kubectl(&["get", "configmap", "app-config", "-o", "yaml"]);
    assert!(
        yaml.contains("kind: ConfigMap") && yaml.contains("color: red"),
        "{yaml}"
    );

    // Edit through $KUBE_EDITOR, as a user would.
    let edit = p
        .kubectl_command()
        .args(["edit", "configmap", "app-config"])
        .env("KUBE_EDITOR", "sed -i s/color:\\ red/color:\\ green/")
        .output()
        .unwrap();
    assert!(
        edit.status.success(),
        "{}",
        String::from_utf8_lossy(&edit.stderr)
    );
    assert_eq!(
        p.kubectl(&["get", "cm", "app-config", "-o", "jsonpath={.data.color}"]),
        "green"
    );

    // Replace with a stale resourceVersion: 409, as on a cluster.
    let mut stale = object.clone();
    stale["data"]["color"] = serde_json::json!("purple");
    let replaced = p.kubectl_stdin(&["replace", "-f", "-"], &stale.to_string());
    assert!(!replaced.status.success());
    let stderr = String::from_utf8_lossy(&replaced.stderr);
    assert!(
        stderr.contains("Operation cannot be fulfilled on configmaps \"app-config\": the object has been modified; please apply your changes to the latest version and try again"),
        "{stderr}"
    );
    let mut fresh = p.json(&["get", "configmap", "app-config"]);
    fresh["data"]["color"] = serde_json::json!("purple");
    let replaced = p.kubectl_stdin(&["replace", "-f", "-"], &fresh.to_string());
    assert!(
        replaced.status.success(),
        "{}",
        String::from_utf8_lossy(&replaced.stderr)
    );

    assert_eq!(
        p.kubectl(&["delete", "configmap", "app-config"]).trim(),
        "configmap \"app-config\" deleted"
    );
    let gone = p.kubectl_fails(&["get", "configmap", "app-config"]);
    assert_eq!(
        gone.trim(),
        "Error from server (NotFound): configmaps \"app-config\" not found"
    );
}

fn errors_read_like_kube_apiserver(p: &mut Plinth) {
    let bad_name = p.kubectl_fails(&["create", "configmap", "Bad_Name"]);
    assert!(
        bad_name.contains(r#"ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#),
        "{bad_name}"
    );
    let no_ns = p.kubectl_fails(&["create", "configmap", "x", "-n", "nowhere"]);
    assert!(
        no_ns.contains(r#"failed to create configmap: namespaces "nowhere" not found"#),
        "{no_ns}"
    );
    let no_ns = p.kubectl_stdin(
        &["apply", "-n", "nowhere", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    );
    let stderr = String::from_utf8_lossy(&no_ns.stderr);
    assert!(
        stderr.contains("Error from server (NotFound)")
            && stderr.contains(r#"namespaces "nowhere" not found"#),
        "{stderr}"
    );
    let exists = p.kubectl_fails(&["create", "namespace", "default"]);
    assert!(
        exists
            .contains(r#"Error from server (AlreadyExists): namespaces "default" already exists"#),
        "{exists}"
    );

    let unknown = p.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: strict}\nbogus: 1\n",
    );
    assert!(!unknown.status.success());
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        stderr.contains("strict decoding error: unknown field \"bogus\""),
        "{stderr}"
    );
    let wrong_type = p.kubectl_stdin(
        &["create", "-f", "-", "--validate=false"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: typed}\ndata: {a: [1]}\n",
    );
    let stderr = String::from_utf8_lossy(&wrong_type.stderr);
    assert!(
        stderr.contains("cannot unmarshal array into Go struct field ConfigMap.data"),
        "{stderr}"
    );
    let bad_selector = p.kubectl_fails(&["get", "cm", "-l", "a in b"]);
    assert!(
        bad_selector.contains("unable to parse requirement"),
        "{bad_selector}"
    );
    let bad_field = p.kubectl_fails(&["get", "cm", "--field-selector", "data.x=1"]);
    assert!(
        bad_field.contains(
            r#""data.x" is not a known field selector: only "metadata.name", "metadata.namespace""#
        ),
        "{bad_field}"
    );
    let own = p.kubectl_fails(&["get", "namespaces", "--field-selector", "spec.x=1"]);
    assert!(own.contains("field label not supported: spec.x"), "{own}");
    let active = p.kubectl(&[
        "get",
        "namespaces",
        "--field-selector",
        "status.phase=Active",
        "-o",
        "name",
    ]);
    assert!(active.contains("namespace/default"), "{active}");
    assert!(
        p.kubectl_output(&["get", "configmaps"]).status.success(),
        "the server is still fine"
    );
}

fn watch_streams_changes(p: &mut Plinth) {
    p.kubectl(&["create", "configmap", "before"]);
    let mut watch = p
        .kubectl_command()
        .args([
            "get",
            "configmaps",
            "--watch",
            "--output-watch-events",
            "--no-headers",
        ])
        .env("KUBECONFIG", &p.kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The existing object comes first (kubectl lists, then watches from the list's version).
    let first = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        first.split_whitespace().any(|cell| cell == "before"),
        "{first}"
    );
    p.kubectl(&["create", "configmap", "watched", "--from-literal=k=1"]);
    p.kubectl(&[
        "patch",
        "configmap",
        "watched",
        "-p",
        r#"{"data":{"k":"2"}}"#,
    ]);
    p.kubectl(&["delete", "configmap", "watched"]);
    // Table rows from the server: EVENT NAME DATA AGE.
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("watch event");
        let cells: Vec<&str> = line.split_whitespace().collect();
        // The namespace's CA bundle is published when the namespace is; it may show up here.
        if cells.get(1) != Some(&"kube-root-ca.crt") {
            seen.push(cells[..3].join(" "));
        }
    }
    assert_eq!(
        seen,
        ["ADDED watched 1", "MODIFIED watched 1", "DELETED watched 1"]
    );
    let _ = watch.kill();
    let _ = watch.wait();
}

fn finalizers_hold_deletion(p: &mut Plinth) {
    let held = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers: [example.com/hold]\ndata: {a: b}\n";
    p.kubectl_with(&["apply", "-f", "-"], held);
    p.kubectl(&["delete", "configmap", "held", "--wait=false"]);
    let marked = p.json(&["get", "configmap", "held"]);
    assert!(
        marked["metadata"]["deletionTimestamp"].is_string(),
        "marked, not removed: {marked}"
    );
    p.kubectl(&[
        "patch",
        "configmap",
        "held",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    p.eventually("the finalized configmap to go", || {
        !p.kubectl_output(&["get", "configmap", "held"])
            .status
            .success()
    });
}

fn namespace_deletion_empties_the_namespace(p: &mut Plinth) {
    p.kubectl(&["create", "namespace", "doomed"]);
    p.kubectl(&["create", "configmap", "inside", "-n", "doomed"]);
    p.kubectl(&[
        "create",
        "secret",
        "generic",
        "secret-inside",
        "-n",
        "doomed",
        "--from-literal=a=b",
    ]);
    let out = p.kubectl(&["delete", "namespace", "doomed", "--timeout=30s"]);
    assert_eq!(out.trim(), "namespace \"doomed\" deleted");
    assert!(
        !p.kubectl_output(&["get", "namespace", "doomed"])
            .status
            .success()
    );
    let listed = p.kubectl(&[
        "get",
        "configmaps",
        "-A",
        "-o",
        "name",
        "--field-selector",
        "metadata.namespace=doomed",
    ]);
    assert!(listed.trim().is_empty(), "contents deleted: {listed}");

    // Custom resources with finalizers hold the namespace, which says so in its conditions and
    // refuses new content meanwhile.
    install_crd(p, WIDGET_CRD, "widgets.example.com", "widgets");
    p.kubectl(&["create", "namespace", "held"]);
    p.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: held, finalizers: [example.com/hold]}\nspec: {replicas: 1}\n",
    );
    p.kubectl(&["create", "configmap", "plain", "-n", "held"]);
    p.kubectl(&["delete", "namespace", "held", "--wait=false"]);
    let condition = |ns: &serde_json::Value, kind: &str| {
        ns["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == kind)
            .cloned()
            .unwrap_or_default()
    };
    p.eventually("the namespace to report what remains", || {
        let ns = p.json(&["get", "namespace", "held"]);
        condition(&ns, "NamespaceContentRemaining")["status"] == "True"
    });
    let ns = p.json(&["get", "namespace", "held"]);
    assert_eq!(ns["status"]["phase"], "Terminating");
    let remaining = condition(&ns, "NamespaceContentRemaining");
    assert_eq!(remaining["reason"], "SomeResourcesRemain");
    assert_eq!(
        remaining["message"],
        "Some resources are remaining: widgets.example.com has 1 resource instances"
    );
    let finalizers = condition(&ns, "NamespaceFinalizersRemaining");
    assert_eq!(finalizers["status"], "True");
    assert_eq!(
        finalizers["message"],
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    );
    assert_eq!(
        condition(&ns, "NamespaceDeletionContentFailure")["reason"],
        "ContentDeleted"
    );
    assert!(
        !p.kubectl_output(&["get", "configmap", "plain", "-n", "held"])
            .status
            .success()
    );
    let refused = p.kubectl_fails(&["create", "configmap", "late", "-n", "held"]);
    assert!(
        refused.contains("because it is being terminated"),
        "{refused}"
    );
    p.kubectl(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "held",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    p.eventually("the namespace to go", || {
        !p.kubectl_output(&["get", "namespace", "held"])
            .status
            .success()
    });
}

fn secrets_leases_and_events(p: &mut Plinth) {
    p.kubectl(&[
        "create",
        "secret",
        "generic",
        "creds",
        "--from-literal=password=hunter2",
    ]);
    assert_eq!(
        p.kubectl(&["get", "secret", "creds", "-o", "jsonpath={.data.password}"]),
        "aHVudGVyMg=="
    );
    assert_eq!(
        p.kubectl(&["get", "secret", "creds", "-o", "jsonpath={.type}"]),
        "Opaque"
    );
    let lease = "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: leader}\nspec: {holderIdentity: node-1, leaseDurationSeconds: 15}\n";
    p.kubectl_with(&["apply", "-f", "-"], lease);
    let table = p.kubectl(&["get", "leases"]);
    assert!(
        table.lines().next().unwrap().contains("HOLDER") && table.contains("node-1"),
        "{table}"
    );
    let event = "apiVersion: v1\nkind: Event\nmetadata: {name: ev1}\ninvolvedObject: {kind: ConfigMap, name: x, namespace: default}\nreason: Tested\nmessage: it works\ntype: Normal\n";
    p.kubectl_with(&["apply", "-f", "-"], event);
    let events = p.kubectl(&["get", "events"]);
    assert!(
        events.contains("Tested") && events.contains("configmap/x") && events.contains("it works"),
        "{events}"
    );

    // events.k8s.io/v1 and core/v1 Events are one resource, as on a cluster.
    let recorded = "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {name: ev2}\nregarding: {kind: Widget, name: w9, namespace: default}\nreason: Reconciled\nnote: from a controller\ntype: Normal\naction: Sync\nreportingController: example.com/ctl\nreportingInstance: ctl-1\neventTime: \"2026-01-01T00:00:00.000000Z\"\n";
    p.kubectl_with(&["apply", "-f", "-"], recorded);
    let core: serde_json::Value = serde_json::from_str(&p.kubectl(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/events/ev2",
    ]))
    .unwrap();
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["message"], "from a controller");
    assert_eq!(core["involvedObject"]["name"], "w9");
    assert_eq!(core["reportingComponent"], "example.com/ctl");
    let modern = p.json(&["get", "events.v1.events.k8s.io", "ev1"]);
    assert_eq!(modern["apiVersion"], "events.k8s.io/v1");
    assert_eq!(modern["note"], "it works");
    assert_eq!(modern["regarding"]["kind"], "ConfigMap");
    let listed = p.kubectl(&["get", "events.v1.events.k8s.io", "-o", "name"]);
    assert!(listed.contains("ev1") && listed.contains("ev2"), "{listed}");
    // core/v1's `source` selects the source's component, else the reporting controller.
    let by_source = |source: &str| {
        p.kubectl(&[
            "get",
            "events",
            "--field-selector",
            &format!("source={source}"),
            "-o",
            "name",
        ])
    };
    assert_eq!(by_source("example.com/ctl").trim(), "event/ev2");
    p.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Event\nmetadata: {name: ev3}\ninvolvedObject: {kind: Pod, name: p, namespace: default}\nreason: Seen\nsource: {component: kubelet, host: n1}\ntype: Normal\n",
    );
    assert_eq!(by_source("kubelet").trim(), "event/ev3");
}

fn restart_keeps_objects_and_revisions(p: &mut Plinth) {
    p.kubectl(&["create", "configmap", "durable", "--from-literal=k=v"]);
    let before = p.json(&["get", "configmap", "durable"]);
    let rv = before["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    p.kill_and_restart();
    let after = p.json(&["get", "configmap", "durable"]);
    assert_eq!(
        before["metadata"]["resourceVersion"],
        after["metadata"]["resourceVersion"]
    );
    assert_eq!(before["metadata"]["uid"], after["metadata"]["uid"]);
    assert_eq!(after["data"]["k"], "v");
    p.kubectl(&["create", "configmap", "after-restart"]);
    // A watch resumed from a resourceVersion taken before the crash sees what came after.
    let path = format!(
        "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=2"
    );
    let events = p.kubectl(&["get", "--raw", &path]);
    // (The namespace's CA bundle, published as the server starts, may come first.)
    let first: serde_json::Value = events
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["object"]["metadata"]["name"] != "kube-root-ca.crt")
        .expect("an event");
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["metadata"]["name"], "after-restart");
    let status = p.terminate();
    assert!(
        status.success(),
        "SIGTERM ends plinth with exit 0, got {status:?}"
    );
}

/// Applies a CRD and waits until it is established and its endpoint answers.
fn install_crd(p: &Plinth, crd: &str, name: &str, resource: &str) {
    p.kubectl_with(&["apply", "-f", "-"], crd);
    p.kubectl(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/{name}"),
        "--timeout=10s",
    ]);
    p.eventually(
        &format!("the custom resource endpoint ({resource})"),
        || {
            let out = p.kubectl_output(&["get", resource]);
            if !out.status.success() {
                // Shown with the hang guard's failure.
                eprintln!(
                    "kubectl get {resource}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            out.status.success()
        },
    );
}

const WIDGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    additionalPrinterColumns:
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
"#;

fn custom_resources_end_to_end(p: &mut Plinth) {
    p.kubectl_with(&["apply", "-f", "-"], WIDGET_CRD);
    p.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=10s",
    ]);
    let crd = p.json(&["get", "crd", "widgets.example.com"]);
    let conditions = crd["status"]["conditions"].as_array().unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "NamesAccepted" && c["status"] == "True"),
        "{crd}"
    );
    assert_eq!(crd["status"]["storedVersions"], serde_json::json!(["v1"]));
    assert_eq!(crd["spec"]["names"]["listKind"], "WidgetList");

    let widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {replicas: 2}\nstatus: {replicas: 9}\n";
    p.kubectl_with(&["apply", "-f", "-"], widget);
    let created = p.json(&["get", "widget", "w1"]);
    assert!(
        created.get("status").is_none(),
        "status is ignored on create with a status subresource: {created}"
    );
    assert_eq!(created["metadata"]["generation"], 1);

    let table = p.kubectl(&["get", "wd"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "REPLICAS", "READY", "AGE"], "{table}");

    assert_eq!(
        p.kubectl(&["scale", "widget", "w1", "--replicas=5"]).trim(),
        "widget.example.com/w1 scaled"
    );
    let scaled = p.json(&["get", "widget", "w1"]);
    assert_eq!(
        (
            scaled["spec"]["replicas"].as_i64(),
            scaled["metadata"]["generation"].as_i64()
        ),
        (Some(5), Some(2))
    );
    let scale = p.kubectl(&[
        "get",
        "--raw",
        "/apis/example.com/v1/namespaces/default/widgets/w1/scale",
    ]);
    let scale: serde_json::Value = serde_json::from_str(&scale).unwrap();
    assert_eq!(
        (scale["kind"].as_str(), scale["spec"]["replicas"].as_i64()),
        (Some("Scale"), Some(5))
    );

    p.kubectl(&[
        "patch", "widget", "w1", "--subresource=status", "--type=merge",
        "-p", r#"{"status":{"replicas":5,"conditions":[{"type":"Ready","status":"True"}]},"spec":{"replicas":99}}"#,
    ]);
    let patched = p.json(&["get", "widget", "w1"]);
    assert_eq!(patched["status"]["replicas"], 5);
    assert_eq!(
        patched["spec"]["replicas"], 5,
        "a status write ignores spec"
    );
    assert_eq!(
        patched["metadata"]["generation"], 2,
        "a status write does not bump generation"
    );
    let row = p.kubectl(&["get", "widget", "w1", "--no-headers"]);
    assert_eq!(
        row.split_whitespace().take(3).collect::<Vec<_>>(),
        ["w1", "5", "True"]
    );
    p.kubectl(&[
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":1}}"#,
    ]);
    assert_eq!(
        p.json(&["get", "widget", "w1"])["status"]["replicas"],
        5,
        "a main write ignores status"
    );

    let resources = p.kubectl(&["api-resources", "--api-group=example.com"]);
    assert!(
        resources.contains("widgets") && resources.contains("wd"),
        "{resources}"
    );

    p.kubectl(&["delete", "crd", "widgets.example.com", "--timeout=30s"]);
    let listed = p.kubectl_output(&[
        "get",
        "--raw",
        "/apis/example.com/v1/namespaces/default/widgets",
    ]);
    assert!(
        !listed.status.success(),
        "the endpoint is gone with the CRD"
    );
    // Recreating the CRD finds no leftover objects.
    install_crd(p, WIDGET_CRD, "widgets.example.com", "widgets");
    assert_eq!(
        p.kubectl(&["get", "widgets", "-o", "name"]).trim(),
        "",
        "custom resources went with their CRD"
    );
}

fn strategic_merge_patches(p: &mut Plinth) {
    let two = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: smp\n  finalizers: [example.com/a, example.com/b]\ndata: {k: v}\n";
    let one = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: smp\n  finalizers: [example.com/b]\ndata: {k: v}\n";
    p.kubectl_with(&["apply", "-f", "-"], two);
    // Client-side apply sends a strategic merge patch with $deleteFromPrimitiveList.
    p.kubectl_with(&["apply", "-f", "-"], one);
    assert_eq!(
        p.json(&["get", "cm", "smp"])["metadata"]["finalizers"],
        serde_json::json!(["example.com/b"])
    );
    // kubectl patch defaults to a strategic merge patch: finalizers merge as a set, the
    // patch's items first (apimachinery's element order: a server-only item keeps its place
    // only relative to items it preceded on the server).
    p.kubectl(&[
        "patch",
        "cm",
        "smp",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/c"]}}"#,
    ]);
    assert_eq!(
        p.json(&["get", "cm", "smp"])["metadata"]["finalizers"],
        serde_json::json!(["example.com/c", "example.com/b"])
    );
    p.kubectl(&[
        "patch",
        "cm",
        "smp",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    p.kubectl(&["delete", "cm", "smp"]);

    install_crd(p, WIDGET_CRD, "widgets.example.com", "widgets");
    let widget =
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: s1}\nspec: {replicas: 1}\n";
    p.kubectl_with(&["apply", "-f", "-"], widget);
    let refused = p.kubectl_fails(&[
        "patch",
        "widget",
        "s1",
        "--type=strategic",
        "-p",
        r#"{"spec":{"replicas":2}}"#,
    ]);
    assert!(
        refused.contains("application/merge-patch+json"),
        "{refused}"
    );

    // Client-side apply of a changed object with a keyed list: kubectl sends a three-way
    // strategic merge patch ($setElementOrder, a $patch: delete item, the added item); an item
    // another client added is kept, in apimachinery's order.
    let first = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: merged}\nsecrets: [{name: a}, {name: b}]\nimagePullSecrets: [{name: x}]\n";
    p.kubectl_with(&["apply", "-f", "-"], first);
    p.kubectl(&[
        "patch",
        "serviceaccount",
        "merged",
        "-p",
        r#"{"secrets":[{"name":"z"}]}"#,
    ]);
    let names = |p: &Plinth| -> Vec<String> {
        p.json(&["get", "serviceaccount", "merged"])["secrets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(p), ["z", "a", "b"]);
    let second = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: merged}\nsecrets: [{name: b}, {name: c}]\nimagePullSecrets: [{name: x}]\n";
    p.kubectl_with(&["apply", "-f", "-"], second);
    assert_eq!(names(p), ["z", "b", "c"]);
}

fn every_type_patches_explains_and_prints_wide(p: &mut Plinth) {
    p.kubectl(&["create", "namespace", "patched"]);
    p.kubectl(&["create", "configmap", "cm1", "-n", "patched"]);
    p.kubectl(&[
        "create",
        "secret",
        "generic",
        "s1",
        "-n",
        "patched",
        "--from-literal=a=b",
    ]);
    p.kubectl(&["create", "serviceaccount", "sa1", "-n", "patched"]);
    let lease = "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: l1, namespace: patched}\nspec: {holderIdentity: a}\n";
    p.kubectl_with(&["apply", "-f", "-"], lease);
    let event = "apiVersion: v1\nkind: Event\nmetadata: {name: e1, namespace: patched}\ninvolvedObject: {kind: Pod, name: x}\nreason: R\n";
    p.kubectl_with(&["apply", "-f", "-"], event);
    for (kind, name, namespaced) in [
        ("namespace", "patched", false),
        ("configmap", "cm1", true),
        ("secret", "s1", true),
        ("serviceaccount", "sa1", true),
        ("lease", "l1", true),
        ("event", "e1", true),
    ] {
        for patch_type in ["strategic", "merge", "json"] {
            let patch = if patch_type == "json" {
                format!(
                    r#"[{{"op":"add","path":"/metadata/labels","value":{{"by":"{patch_type}"}}}}]"#
                )
            } else {
                format!(r#"{{"metadata":{{"labels":{{"by":"{patch_type}"}}}}}}"#)
            };
            let mut args = vec!["patch", kind, name, "--type", patch_type, "-p", &patch];
            if namespaced {
                args.extend(["-n", "patched"]);
            }
            p.kubectl(&args);
            let mut get = vec!["get", kind, name];
            if namespaced {
                get.extend(["-n", "patched"]);
            }
            assert_eq!(
                p.json(&get)["metadata"]["labels"]["by"],
                patch_type,
                "{kind} {patch_type}"
            );
        }
    }
    let explained = p.kubectl(&["explain", "configmap.data"]);
    assert!(
        explained.contains("KIND:       ConfigMap")
            && explained.contains("FIELD: data <map[string]string>"),
        "{explained}"
    );
    let explained = p.kubectl(&["explain", "lease.spec"]);
    assert!(explained.contains("holderIdentity"), "{explained}");
    let wide = p.kubectl(&["get", "configmaps", "-n", "patched", "-o", "wide"]);
    assert!(wide.starts_with("NAME") && wide.contains("cm1"), "{wide}");
    let all = p.kubectl(&["get", "configmaps", "-A"]);
    assert!(
        all.lines().next().unwrap().starts_with("NAMESPACE") && all.contains("patched"),
        "{all}"
    );
}

fn real_world_crds_install_and_explain(p: &mut Plinth) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/crds");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 11, "the shared CRDs are there: {files:?}");
    p.install_crds(&files, "30s");
    let names = p.kubectl(&["get", "crd", "-o", "name"]);
    assert_eq!(names.lines().count(), files.len(), "{names}");
    // What these projects also document: server-side apply, over the created CRDs (no
    // conflicts: the creator's fields are its own, and the values are the same).
    for file in &files {
        let out = p.kubectl(&["apply", "--server-side", "-f", file.to_str().unwrap()]);
        assert!(out.contains("serverside-applied"), "{out}");
    }
    for (resource, field, expected) in [
        ("prometheus.spec.replicas", "replicas", "<integer>"),
        ("certificate.spec.secretName", "secretName", "<string>"),
        ("gateway.spec.listeners", "listeners", "<[]Object>"),
        ("kafka.spec", "spec", "<Object>"),
    ] {
        let explained = p.kubectl(&["explain", resource]);
        assert!(
            explained.contains(&format!("FIELD: {field} {expected}")),
            "{resource}:\n{explained}"
        );
        // The same from /openapi/v2, which kubectl reads in gnostic's protobuf.
        let v2 = p.kubectl(&["explain", resource, "--output=plaintext-openapiv2"]);
        assert!(
            v2.contains(&format!("FIELD:    {field} {expected}"))
                || v2.contains(&format!("RESOURCE: {field} {expected}")),
            "{resource} (openapi v2):\n{v2}"
        );
    }
}

const DATABASE_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: databases.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: databases, kind: Database}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [engine]
            properties:
              engine: {type: string, enum: [postgres, mysql]}
              replicas: {type: integer, minimum: 0, maximum: 5, default: 1}
              storage:
                type: object
                default: {}
                properties:
                  size: {type: string, pattern: '^[0-9]+Gi$', default: 10Gi}
              users:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    admin: {type: boolean, default: false}
"#;

fn custom_resource_schemas_validate_default_and_prune(p: &mut Plinth) {
    install_crd(p, DATABASE_CRD, "databases.example.com", "databases");

    let good = "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: db1}\nspec: {engine: postgres, users: [{name: alice}]}\n";
    p.kubectl_with(&["apply", "-f", "-"], good);
    let db = p.json(&["get", "database", "db1"]);
    assert_eq!(db["spec"]["replicas"], 1, "defaulted: {db}");
    assert_eq!(
        db["spec"]["storage"]["size"], "10Gi",
        "nested default: {db}"
    );
    assert_eq!(
        db["spec"]["users"][0]["admin"], false,
        "default inside a list item: {db}"
    );

    let bad = "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: db2}\nspec: {engine: oracle, replicas: -1, storage: {size: 10TB}, users: [{name: a}, {name: a}]}\n";
    let out = p.kubectl_stdin(&["create", "-f", "-"], bad);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        r#"The Database "db2" is invalid"#,
        r#"spec.engine: Unsupported value: "oracle": supported values: "postgres", "mysql""#,
        "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
        r#"spec.storage.size: Invalid value: "10TB": spec.storage.size in body should match '^[0-9]+Gi$'"#,
        r#"spec.users[1]: Duplicate value: {"name":"a"}"#,
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
    let missing = p.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: db3}\nspec: {}\n",
    );
    assert!(String::from_utf8_lossy(&missing.stderr).contains("spec.engine: Required value"));

    // kubectl validates strictly by default: unknown fields are refused...
    let unknown = "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: db4}\nspec: {engine: mysql, colour: red}\n";
    let out = p.kubectl_stdin(&["create", "-f", "-"], unknown);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(r#"unknown field "spec.colour""#),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // ...and pruned when validation is off.
    p.kubectl_with(&["create", "--validate=false", "-f", "-"], unknown);
    assert!(
        p.json(&["get", "database", "db4"])["spec"]
            .get("colour")
            .is_none()
    );
    // A scale beyond the schema's maximum through a patch is refused too.
    let out = p.kubectl_output(&[
        "patch",
        "database",
        "db1",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":9}}"#,
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("spec.replicas in body should be less than or equal to 5")
    );
    let explained = p.kubectl(&["explain", "database.spec.engine"]);
    assert!(explained.contains("FIELD: engine <string>"), "{explained}");
    // A default added to the CRD shows on objects stored before it, as they are read (get,
    // list), as kube-apiserver defaults what it reads from storage.
    p.kubectl(&[
        "patch",
        "crd",
        "databases.example.com",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/tier","value":{"type":"string","default":"gold"}}]"#,
    ]);
    p.eventually("a default added later, on read", || {
        p.json(&["get", "database", "db1"])["spec"]["tier"] == "gold"
            && p.json(&["get", "databases"])["items"][0]["spec"]["tier"] == "gold"
    });
}

const GIZMO_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gizmos.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gizmos, kind: Gizmo, shortNames: [gz], categories: [all]}
  versions:
  - name: v1
    served: true
    storage: false
    deprecated: true
    deprecationWarning: "example.com/v1 Gizmo is deprecated; use example.com/v2"
    schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {size: {type: integer}}}}}}
  - name: v2
    served: true
    storage: true
    selectableFields: [{jsonPath: .spec.size}]
    schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {size: {type: integer}}}}}}
"#;

fn crd_versions_share_storage_and_warn_when_deprecated(p: &mut Plinth) {
    install_crd(p, GIZMO_CRD, "gizmos.example.com", "gizmos.v2.example.com");
    let old = "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g1}\nspec: {size: 3}\n";
    let out = p.kubectl_stdin(&["create", "-f", "-"], old);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Warning: example.com/v1 Gizmo is deprecated; use example.com/v2"),
        "{stderr}"
    );
    // One object, seen through either version with that version's apiVersion (conversion None).
    assert_eq!(
        p.json(&["get", "gizmos.v2.example.com", "g1"])["apiVersion"],
        "example.com/v2"
    );
    assert_eq!(
        p.json(&["get", "gizmos.v1.example.com", "g1"])["apiVersion"],
        "example.com/v1"
    );
    assert_eq!(
        p.json(&["get", "crd", "gizmos.example.com"])["status"]["storedVersions"],
        serde_json::json!(["v2"])
    );
    // Field selectors on the version's selectable fields.
    let new = "apiVersion: example.com/v2\nkind: Gizmo\nmetadata: {name: g2}\nspec: {size: 7}\n";
    p.kubectl_with(&["create", "-f", "-"], new);
    let selected = p.kubectl(&[
        "get",
        "gizmos.v2.example.com",
        "--field-selector",
        "spec.size=7",
        "-o",
        "name",
    ]);
    assert_eq!(selected.trim(), "gizmo.example.com/g2");
    let refused = p.kubectl_fails(&[
        "get",
        "gizmos.v1.example.com",
        "--field-selector",
        "spec.size=7",
    ]);
    assert!(
        refused.contains(r#""spec.size" is not a known field selector"#),
        "{refused}"
    );
    // Short names and categories reach discovery.
    assert!(p.kubectl(&["get", "gz", "-o", "name"]).contains("g1"));
    assert!(
        p.kubectl(&["get", "all", "-o", "name"])
            .contains("gizmo.example.com/g2")
    );
}

fn owned(p: &Plinth, kind: &str, name: &str, ns: &str) -> String {
    p.json(&["get", kind, name, "-n", ns])["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn garbage_collection_in_the_background(p: &mut Plinth) {
    p.kubectl(&["create", "configmap", "owner"]);
    let uid = owned(p, "configmap", "owner", "default");
    let child = |name: &str, api: &str, kind: &str, owner: &str, uid: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  ownerReferences:\n  - {{apiVersion: {api}, kind: {kind}, name: {owner}, uid: {uid}}}\n"
        )
    };
    assert!(
        p.kubectl_stdin(
            &["apply", "-f", "-"],
            &child("child", "v1", "ConfigMap", "owner", &uid)
        )
        .status
        .success()
    );
    // An object whose owner never existed, and one whose owner has another uid, are collected.
    assert!(
        p.kubectl_stdin(
            &["apply", "-f", "-"],
            &child(
                "orphan",
                "v1",
                "ConfigMap",
                "ghost",
                "00000000-0000-0000-0000-000000000000"
            )
        )
        .status
        .success()
    );
    assert!(
        p.kubectl_stdin(
            &["apply", "-f", "-"],
            &child(
                "stale",
                "v1",
                "ConfigMap",
                "owner",
                "11111111-1111-1111-1111-111111111111"
            )
        )
        .status
        .success()
    );
    let gone = |name: &str| {
        !p.kubectl_output(&["get", "configmap", name])
            .status
            .success()
    };
    p.eventually("the dangling dependents to be collected", || {
        gone("orphan") && gone("stale")
    });
    assert!(!gone("child"), "a dependent whose owner exists stays");
    p.kubectl(&["delete", "configmap", "owner"]);
    p.eventually("the dependent of a deleted owner to be collected", || {
        gone("child")
    });

    // A cluster-scoped owner of a namespaced dependent, and a custom resource as owner.
    p.kubectl(&["create", "namespace", "owner-ns"]);
    let ns_uid = p.json(&["get", "namespace", "owner-ns"])["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        p.kubectl_stdin(
            &["apply", "-f", "-"],
            &child("ns-child", "v1", "Namespace", "owner-ns", &ns_uid)
        )
        .status
        .success()
    );
    install_crd(p, WIDGET_CRD, "widgets.example.com", "widgets");
    p.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: boss}\nspec: {replicas: 1}\n",
    );
    let widget_uid = owned(p, "widget", "boss", "default");
    assert!(
        p.kubectl_stdin(
            &["apply", "-f", "-"],
            &child("cr-child", "example.com/v1", "Widget", "boss", &widget_uid)
        )
        .status
        .success()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !gone("ns-child") && !gone("cr-child"),
        "dependents of live owners stay"
    );
    p.kubectl(&["delete", "widget", "boss"]);
    p.eventually("the custom resource's dependent to be collected", || {
        gone("cr-child")
    });
    p.kubectl(&["delete", "namespace", "owner-ns", "--wait=false"]);
    p.eventually("the namespace's dependent to be collected", || {
        gone("ns-child")
    });
}

/// A ConfigMap in `default` owned by the ConfigMap `owner` (uid `uid`); `extra` is added to the
/// metadata (finalizers, say).
fn dependent(name: &str, owner: &str, uid: &str, block: bool, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{extra}  ownerReferences:\n  - {{apiVersion: v1, kind: ConfigMap, name: {owner}, uid: {uid}, blockOwnerDeletion: {block}}}\n"
    )
}

fn exists(p: &Plinth, kind: &str, name: &str) -> bool {
    p.kubectl_output(&["get", kind, name]).status.success()
}

fn garbage_collection_foreground_and_orphan(p: &mut Plinth) {
    // Foreground: the owner waits, with a deletionTimestamp, for its blocking dependents.
    p.kubectl(&["create", "configmap", "fg-owner"]);
    let uid = owned(p, "configmap", "fg-owner", "default");
    p.kubectl_with(
        &["apply", "-f", "-"],
        &dependent(
            "fg-blocker",
            "fg-owner",
            &uid,
            true,
            "  finalizers: [example.com/hold]\n",
        ),
    );
    p.kubectl_with(
        &["apply", "-f", "-"],
        &dependent("fg-free", "fg-owner", &uid, false, ""),
    );
    p.kubectl(&[
        "delete",
        "configmap",
        "fg-owner",
        "--cascade=foreground",
        "--wait=false",
    ]);
    let owner = p.json(&["get", "configmap", "fg-owner"]);
    assert!(
        owner["metadata"]["deletionTimestamp"].is_string(),
        "{owner}"
    );
    assert_eq!(
        owner["metadata"]["finalizers"],
        json!(["foregroundDeletion"]),
        "{owner}"
    );
    p.eventually("the dependents to be deleted while the owner waits", || {
        !exists(p, "configmap", "fg-free")
            && p.json(&["get", "configmap", "fg-blocker"])["metadata"]["deletionTimestamp"]
                .is_string()
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        exists(p, "configmap", "fg-owner"),
        "the owner stays while a blocking dependent exists"
    );
    p.kubectl(&[
        "patch",
        "configmap",
        "fg-blocker",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    p.eventually("the owner to go after its blocker", || {
        !exists(p, "configmap", "fg-owner") && !exists(p, "configmap", "fg-blocker")
    });

    // A chain: grandparent -> parent -> child, all blocking; deleting the top takes them all.
    p.kubectl(&["create", "configmap", "top"]);
    let top = owned(p, "configmap", "top", "default");
    p.kubectl_with(
        &["apply", "-f", "-"],
        &dependent("middle", "top", &top, true, ""),
    );
    let middle = owned(p, "configmap", "middle", "default");
    p.kubectl_with(
        &["apply", "-f", "-"],
        &dependent("bottom", "middle", &middle, true, ""),
    );
    // kubectl waits for the top object itself to be gone.
    p.kubectl(&[
        "delete",
        "configmap",
        "top",
        "--cascade=foreground",
        "--timeout=20s",
    ]);
    assert!(!exists(p, "configmap", "middle") && !exists(p, "configmap", "bottom"));

    // Orphan: the dependents lose their reference and stay.
    p.kubectl(&["create", "configmap", "or-owner"]);
    let uid = owned(p, "configmap", "or-owner", "default");
    for name in ["or-a", "or-b"] {
        p.kubectl_with(
            &["apply", "-f", "-"],
            &dependent(name, "or-owner", &uid, true, ""),
        );
    }
    p.kubectl(&[
        "delete",
        "configmap",
        "or-owner",
        "--cascade=orphan",
        "--timeout=20s",
    ]);
    std::thread::sleep(Duration::from_millis(500));
    for name in ["or-a", "or-b"] {
        let kept = p.json(&["get", "configmap", name]);
        // Gone, not `[]`: kube's typed round trip drops the empty list.
        assert!(kept["metadata"].get("ownerReferences").is_none(), "{kept}");
        assert!(kept["metadata"]["deletionTimestamp"].is_null(), "{kept}");
    }

    // A cluster-scoped dependent cannot have a namespaced owner: it stays, with a warning event.
    p.kubectl(&["create", "configmap", "ns-owner"]);
    let uid = owned(p, "configmap", "ns-owner", "default");
    p.kubectl_with(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: invalid-owned\n  ownerReferences:\n  - {{apiVersion: v1, kind: ConfigMap, name: ns-owner, uid: {uid}}}\n"
        ),
    );
    p.eventually("an OwnerRefInvalidNamespace event", || {
        p.kubectl(&[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            "reason=OwnerRefInvalidNamespace",
            "-o",
            "name",
        ])
        .trim()
        .starts_with("event/invalid-owned.")
    });
    assert!(exists(p, "namespace", "invalid-owned"));

    // An owner that exists only in another namespace is absent for its dependent: collected,
    // and reported.
    p.kubectl(&["create", "namespace", "far"]);
    p.kubectl(&["create", "configmap", "far-owner", "-n", "far"]);
    let uid = owned(p, "configmap", "far-owner", "far");
    p.kubectl_with(
        &["apply", "-f", "-"],
        &dependent("cross-ns", "far-owner", &uid, false, ""),
    );
    p.eventually("the cross-namespace dependent to go", || {
        !exists(p, "configmap", "cross-ns")
    });
    let events = p.kubectl(&[
        "get",
        "events",
        "-n",
        "default",
        "--field-selector",
        "reason=OwnerRefInvalidNamespace,involvedObject.name=cross-ns",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert_eq!(
        events,
        format!(
            "ownerRef [v1/ConfigMap, namespace: default, name: far-owner, uid: {uid}] does not exist in namespace \"default\""
        )
    );
}

fn garbage_collection_across_restarts(p: &mut Plinth) {
    // A restart in the middle of a foreground deletion: it still completes.
    p.kubectl(&["create", "configmap", "slow-owner"]);
    let uid = owned(p, "configmap", "slow-owner", "default");
    p.kubectl_with(
        &["apply", "-f", "-"],
        &dependent(
            "slow-blocker",
            "slow-owner",
            &uid,
            true,
            "  finalizers: [example.com/hold]\n",
        ),
    );
    p.kubectl(&[
        "delete",
        "configmap",
        "slow-owner",
        "--cascade=foreground",
        "--wait=false",
    ]);
    p.eventually("the blocker to be marked", || {
        p.json(&["get", "configmap", "slow-blocker"])["metadata"]["deletionTimestamp"].is_string()
    });
    p.kill_and_restart();
    assert!(
        exists(p, "configmap", "slow-owner"),
        "still waiting after the restart"
    );
    p.kubectl(&[
        "patch",
        "configmap",
        "slow-blocker",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    p.eventually("the owner to go after the restart", || {
        !exists(p, "configmap", "slow-owner")
    });

    // An owner deleted while the server was down: its dependent is collected after the start.
    p.kubectl(&["create", "configmap", "lost-owner"]);
    let uid = owned(p, "configmap", "lost-owner", "default");
    p.kubectl_with(
        &["apply", "-f", "-"],
        &dependent("left-behind", "lost-owner", &uid, false, ""),
    );
    p.delete_while_down("/configmaps/default/lost-owner");
    p.eventually("the dependent of the vanished owner to go", || {
        !exists(p, "configmap", "left-behind")
    });
}

fn manager_fields(object: &serde_json::Value, manager: &str) -> serde_json::Value {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["manager"] == manager)
        .map(|e| e["fieldsV1"].clone())
        .unwrap_or_default()
}

fn server_side_apply(p: &mut Plinth) {
    let manifest = |data: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  labels: {{team: core}}\ndata:\n{data}"
        )
    };
    let full = manifest("  a: one\n  b: two\n");
    let out = p.kubectl_with(&["apply", "--server-side", "-f", "-"], &full);
    assert_eq!(out.trim(), "configmap/ssa serverside-applied");
    let applied = p.json(&["get", "configmap", "ssa", "--show-managed-fields"]);
    let entry = &applied["metadata"]["managedFields"][0];
    assert_eq!(entry["manager"], "kubectl");
    assert_eq!(entry["operation"], "Apply");
    assert_eq!(entry["fieldsType"], "FieldsV1");
    assert_eq!(
        entry["fieldsV1"],
        json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:team": {}}}})
    );
    // The same configuration again changes nothing, not even the resourceVersion.
    p.kubectl_with(&["apply", "--server-side", "-f", "-"], &full);
    let again = p.json(&["get", "configmap", "ssa"]);
    assert_eq!(
        again["metadata"]["resourceVersion"],
        applied["metadata"]["resourceVersion"]
    );

    // Another writer takes `a`; re-applying the old value conflicts, naming it.
    p.kubectl(&[
        "patch",
        "configmap",
        "ssa",
        "--type=merge",
        "-p",
        r#"{"data":{"a":"patched"}}"#,
    ]);
    let patched = p.json(&["get", "configmap", "ssa", "--show-managed-fields"]);
    assert_eq!(
        manager_fields(&patched, "kubectl-patch"),
        json!({"f:data": {"f:a": {}}})
    );
    assert_eq!(
        manager_fields(&patched, "kubectl"),
        json!({"f:data": {"f:b": {}}, "f:metadata": {"f:labels": {"f:team": {}}}})
    );
    let refused = p.kubectl_stdin(&["apply", "--server-side", "-f", "-"], &full);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(
            r#"Apply failed with 1 conflict: conflict with "kubectl-patch" using v1: .data.a"#
        ),
        "{stderr}"
    );
    assert_eq!(
        p.kubectl(&["get", "configmap", "ssa", "-o", "jsonpath={.data.a}"]),
        "patched"
    );
    // Forced: the applier takes the field back.
    p.kubectl_with(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &full,
    );
    let forced = p.json(&["get", "configmap", "ssa", "--show-managed-fields"]);
    assert_eq!(forced["data"], json!({"a": "one", "b": "two"}));
    assert!(
        manager_fields(&forced, "kubectl-patch").is_null(),
        "{forced}"
    );

    // A field another manager also set survives the applier dropping it; one only the applier
    // set goes.
    p.kubectl_with(
        &["apply", "--server-side", "--field-manager=other", "-f", "-"],
        &manifest("  b: two\n  c: three\n"),
    );
    p.kubectl_with(
        &["apply", "--server-side", "-f", "-"],
        &manifest("  a: one\n"),
    );
    let shared = p.json(&["get", "configmap", "ssa"]);
    assert_eq!(
        shared["data"],
        json!({"a": "one", "b": "two", "c": "three"})
    );
    p.kubectl_with(&["apply", "--server-side", "-f", "-"], &manifest(""));
    let dropped = p.json(&["get", "configmap", "ssa"]);
    assert_eq!(
        dropped["data"],
        json!({"b": "two", "c": "three"}),
        "`a` was the applier's alone"
    );

    // A dry run validates and answers, storing nothing.
    let out = p.kubectl_with(
        &["apply", "--server-side", "--dry-run=server", "-f", "-"],
        &manifest("  z: dry\n"),
    );
    assert!(out.contains("serverside-applied (server dry run)"), "{out}");
    assert!(
        p.json(&["get", "configmap", "ssa"])["data"]
            .get("z")
            .is_none()
    );

    // Ordinary writes record their fields too.
    p.kubectl(&["create", "configmap", "made", "--from-literal=k=v"]);
    let made = p.json(&["get", "configmap", "made", "--show-managed-fields"]);
    assert_eq!(
        manager_fields(&made, "kubectl-create"),
        json!({"f:data": {".": {}, "f:k": {}}})
    );
    assert_eq!(made["metadata"]["managedFields"][0]["operation"], "Update");
}

const PORTS_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gateways.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gateways, singular: gateway, kind: Gateway}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              listeners:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    port: {type: integer}
              hosts:
                type: array
                items: {type: string}
"#;

fn server_side_apply_merges_custom_resource_lists(p: &mut Plinth) {
    install_crd(p, PORTS_CRD, "gateways.example.com", "gateways");
    let gateway = |listener: &str, port: u16, hosts: &str| {
        format!(
            "apiVersion: example.com/v1\nkind: Gateway\nmetadata: {{name: gw}}\nspec:\n  listeners:\n  - {{name: {listener}, port: {port}}}\n  hosts: [{hosts}]\n"
        )
    };
    p.kubectl_with(
        &[
            "apply",
            "--server-side",
            "--field-manager=team-a",
            "-f",
            "-",
        ],
        &gateway("http", 80, "a.example.com"),
    );
    // A map list merges item by item; an atomic list belongs to one manager at a time.
    p.kubectl_with(
        &[
            "apply",
            "--server-side",
            "--field-manager=team-b",
            "--force-conflicts",
            "-f",
            "-",
        ],
        &gateway("https", 443, "b.example.com"),
    );
    let gw = p.json(&["get", "gateway", "gw", "--show-managed-fields"]);
    assert_eq!(
        gw["spec"]["listeners"],
        json!([{"name": "http", "port": 80}, {"name": "https", "port": 443}])
    );
    assert_eq!(gw["spec"]["hosts"], json!(["b.example.com"]));
    assert_eq!(
        manager_fields(&gw, "team-a"),
        json!({"f:spec": {"f:listeners": {"k:{\"name\":\"http\"}": {".": {}, "f:name": {}, "f:port": {}}}}})
    );
    // Changing another team's listener conflicts, with the item's key in the path.
    let refused = p.kubectl_stdin(
        &[
            "apply",
            "--server-side",
            "--field-manager=team-b",
            "-f",
            "-",
        ],
        &gateway("http", 8080, "b.example.com"),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(r#"conflict with "team-a": .spec.listeners[name="http"].port"#),
        "{stderr}"
    );
    // team-a withdrawing its listener removes it and leaves team-b's.
    p.kubectl_with(
        &[
            "apply",
            "--server-side",
            "--field-manager=team-a",
            "-f",
            "-",
        ],
        "apiVersion: example.com/v1\nkind: Gateway\nmetadata: {name: gw}\n",
    );
    let gw = p.json(&["get", "gateway", "gw"]);
    assert_eq!(
        gw["spec"]["listeners"],
        json!([{"name": "https", "port": 443}])
    );
}

/// Client-side `kubectl apply`: the last-applied annotation, a strategic merge patch for
/// built-in types and a merge patch for custom resources, fields dropped from the manifest
/// removed, fields others set kept.
fn client_side_apply_is_three_way(p: &mut Plinth) {
    let cm = |data: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: csa\ndata:\n{data}")
    };
    p.kubectl_with(&["apply", "-f", "-"], &cm("  a: one\n  b: two\n"));
    p.kubectl(&[
        "patch",
        "configmap",
        "csa",
        "--type=merge",
        "-p",
        r#"{"data":{"other":"kept"}}"#,
    ]);
    let out = p.kubectl_with(&["apply", "-f", "-"], &cm("  a: uno\n"));
    assert_eq!(out.trim(), "configmap/csa configured");
    let applied = p.json(&["get", "configmap", "csa", "--show-managed-fields"]);
    assert_eq!(applied["data"], json!({"a": "uno", "other": "kept"}));
    assert!(
        applied["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap()
            .contains(r#""a":"uno""#)
    );
    assert_eq!(
        manager_fields(&applied, "kubectl-client-side-apply")["f:data"]["f:a"],
        json!({})
    );
    assert_eq!(
        p.kubectl_with(&["apply", "-f", "-"], &cm("  a: uno\n"))
            .trim(),
        "configmap/csa unchanged"
    );

    install_crd(p, WIDGET_CRD, "widgets.example.com", "widgets");
    let widget = |spec: &str| {
        format!("apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: csa}}\nspec: {spec}\n")
    };
    p.kubectl_with(&["apply", "-f", "-"], &widget("{replicas: 2, color: red}"));
    p.kubectl_with(&["apply", "-f", "-"], &widget("{replicas: 3}"));
    let w = p.json(&["get", "widget", "csa"]);
    assert_eq!(w["spec"]["replicas"], 3);
    assert!(w["spec"].get("color").is_none(), "{w}");
}

/// `--dry-run=server` for every write: full validation, an answer, nothing stored.
fn dry_runs_store_nothing(p: &mut Plinth) {
    p.kubectl(&["create", "configmap", "dry", "--from-literal=k=v"]);
    let before = p.json(&["get", "configmap", "dry"]);
    let rv = before["metadata"]["resourceVersion"].clone();
    let out = p.kubectl(&[
        "create",
        "configmap",
        "dry2",
        "--from-literal=k=v",
        "--dry-run=server",
    ]);
    assert_eq!(out.trim(), "configmap/dry2 created (server dry run)");
    assert!(!exists(p, "configmap", "dry2"));
    let out = p.kubectl(&[
        "patch",
        "configmap",
        "dry",
        "--dry-run=server",
        "-p",
        r#"{"data":{"k":"patched"}}"#,
    ]);
    // kubectl's patch prints no dry-run suffix; "patched" (not "no change") shows the answer
    // carried the change.
    assert_eq!(out.trim(), "configmap/dry patched");
    let mut replaced = before.clone();
    replaced["data"]["k"] = json!("replaced");
    let out = p.kubectl_with(
        &["replace", "--dry-run=server", "-f", "-"],
        &replaced.to_string(),
    );
    assert_eq!(out.trim(), "configmap/dry replaced (server dry run)");
    let out = p.kubectl(&["delete", "configmap", "dry", "--dry-run=server"]);
    assert_eq!(out.trim(), "configmap \"dry\" deleted (server dry run)");
    let after = p.json(&["get", "configmap", "dry"]);
    assert_eq!(after["data"]["k"], "v");
    assert_eq!(after["metadata"]["resourceVersion"], rv);
    // Validation still runs.
    let invalid = p.kubectl_fails(&[
        "patch",
        "configmap",
        "dry",
        "--dry-run=server",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"bad key!":"x"}}}"#,
    ]);
    assert!(invalid.contains("is invalid"), "{invalid}");
}

const CEL_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: scalers.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: scalers, singular: scaler, kind: Scaler}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: self.minReplicas <= self.maxReplicas
              message: minReplicas must not exceed maxReplicas
            - rule: self.tier == oldSelf.tier
              message: tier is immutable
              fieldPath: .tier
            properties:
              minReplicas: {type: integer, default: 1}
              maxReplicas: {type: integer}
              tier:
                type: string
                enum: [gold, silver]
              owners:
                type: array
                maxItems: 8
                items: {type: string, maxLength: 63}
                x-kubernetes-validations:
                - rule: self.all(o, o.matches('^[a-z]+$'))
                  messageExpression: "'owners must be lowercase words, got ' + self.join(', ')"
                  reason: FieldValueForbidden
"#;

/// `x-kubernetes-validations` end to end: rules with messages, defaults feeding rules, a
/// transition rule on update, a messageExpression, and a CRD whose rule does not compile.
fn cel_rules_validate_custom_resources(p: &mut Plinth) {
    install_crd(p, CEL_CRD, "scalers.example.com", "scalers");
    let scaler = |spec: &str| {
        format!("apiVersion: example.com/v1\nkind: Scaler\nmetadata: {{name: s1}}\nspec: {spec}\n")
    };
    p.kubectl_with(
        &["apply", "-f", "-"],
        &scaler("{maxReplicas: 3, tier: gold, owners: [ann]}"),
    );
    // The default minReplicas (1) takes part in the rule.
    let refused = p.kubectl_stdin(
        &["apply", "-f", "-"],
        &scaler("{maxReplicas: 0, tier: gold}"),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(r#"The Scaler "s1" is invalid: spec: Invalid value: "object": minReplicas must not exceed maxReplicas"#),
        "{stderr}"
    );
    let refused = p.kubectl_stdin(
        &["apply", "-f", "-"],
        &scaler("{maxReplicas: 3, tier: silver}"),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(r#"spec.tier: Invalid value: "object": tier is immutable"#),
        "{stderr}"
    );
    let refused = p.kubectl_stdin(
        &["apply", "-f", "-"],
        &scaler("{maxReplicas: 3, tier: gold, owners: [ann, Bob]}"),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("spec.owners: Forbidden: owners must be lowercase words, got ann, Bob"),
        "{stderr}"
    );
    let stored = p.json(&["get", "scaler", "s1"]);
    assert_eq!(
        stored["spec"]["maxReplicas"], 3,
        "refused writes change nothing: {stored}"
    );
    let explained = p.kubectl(&["explain", "scalers.spec.owners"]);
    assert!(
        explained.contains("owners") && explained.contains("<[]string>"),
        "{explained}"
    );

    let broken = CEL_CRD
        .replace("scalers.example.com", "brokens.example.com")
        .replace(
            "plural: scalers, singular: scaler, kind: Scaler",
            "plural: brokens, singular: broken, kind: Broken",
        )
        .replace(
            "self.minReplicas <= self.maxReplicas",
            "self.minReplicas <=",
        );
    let refused = p.kubectl_stdin(&["apply", "-f", "-"], &broken);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{Rule:\"self.minReplicas <=\"")
            && stderr.contains("compilation failed: ERROR: <input>:1:20: Syntax error"),
        "{stderr}"
    );
    // Rules that nest deeply once overflowed the server's stack: they are refused, and the
    // server goes on serving.
    for (rule, error) in [
        (
            "((((((((((((((((",
            "compilation failed: ERROR: <input>:1:17: Syntax error",
        ),
        (
            &"[".repeat(200)[..],
            ": expression recursion limit exceeded: 96",
        ),
    ] {
        let deep = broken.replace("self.minReplicas <=", &format!("'{rule}'"));
        let refused = p.kubectl_stdin(&["apply", "-f", "-"], &deep);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && stderr.contains(error),
            "{}",
            &stderr[..stderr.len().min(600)]
        );
    }
    assert_eq!(p.json(&["get", "scaler", "s1"])["spec"]["maxReplicas"], 3);
}

/// A CRD whose schema is not structural is refused with every violation; one already stored
/// (written before the rules, say) is served with a `NonStructuralSchema` condition.
fn crd_schemas_must_be_structural(p: &mut Plinth) {
    let crd = |schema: &str| {
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: loose.example.com}}\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {{plural: loose, singular: loose, kind: Loose}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {schema}\n"
        )
    };
    let loose = crd(
        "{type: object, properties: {spec: {properties: {size: {type: integer}}}, list: {type: array}}}",
    );
    let refused = p.kubectl_stdin(&["apply", "-f", "-"], &loose);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    for line in [
        "spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
        "spec.validation.openAPIV3Schema.properties[list].items: Required value: must be specified",
    ] {
        assert!(stderr.contains(line), "{line}\n{stderr}");
    }
    assert!(!exists(p, "crd", "loose.example.com"));

    // The manifest as JSON, through kubectl itself.
    let out = p.kubectl_stdin(
        &["create", "--dry-run=client", "-o", "json", "-f", "-"],
        &loose,
    );
    let mut stored: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    stored["metadata"]["uid"] = json!("00000000-0000-0000-0000-0000000000aa");
    stored["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    p.put_while_down(
        "/apiextensions.k8s.io/customresourcedefinitions/loose.example.com",
        &stored,
    );
    p.eventually("the NonStructuralSchema condition", || {
        let crd = p.json(&["get", "crd", "loose.example.com"]);
        crd["status"]["conditions"].as_array().into_iter().flatten().any(|c| {
            c["type"] == "NonStructuralSchema"
                && c["status"] == "True"
                && c["reason"] == "Violations"
                && c["message"].as_str().unwrap_or("").contains(
                    "spec.versions[0].schema.openAPIV3Schema.properties[list].items: Required value: must be specified",
                )
        })
    });
}

/// A boolean field an object lacks reads `false` in field selectors, as kube's field sets
/// format Go's zero value: `spec.unschedulable=false` lists the nodes that are not cordoned
/// (kube-rs and the e2e suite ask so), `spec.hostNetwork=false` the pods on the pod network.
fn field_selectors_read_absent_booleans_as_false(p: &mut Plinth) {
    p.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Node\nmetadata: {name: open-node}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: cordoned-node}\nspec: {unschedulable: true}\n",
    );
    let names = |kind: &str, selector: &str| -> Vec<String> {
        p.kubectl(&["get", kind, "--field-selector", selector, "-o", "name"])
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        names("nodes", "spec.unschedulable=false"),
        ["node/open-node"]
    );
    assert_eq!(
        names("nodes", "spec.unschedulable!=true"),
        ["node/open-node"]
    );
    assert_eq!(
        names("nodes", "spec.unschedulable=true"),
        ["node/cordoned-node"]
    );
    assert_eq!(
        names("nodes", "spec.unschedulable=false,metadata.name=open-node"),
        ["node/open-node"]
    );
    p.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: plain}\nspec: {containers: [{name: c, image: busybox}]}\n",
    );
    assert_eq!(names("pods", "spec.hostNetwork=false"), ["pod/plain"]);
    assert!(names("pods", "spec.hostNetwork=true").is_empty());
}
