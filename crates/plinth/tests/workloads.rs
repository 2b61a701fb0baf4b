//! The workload controllers end to end through kubectl against `plinth serve` with its node
//! agent: Deployments of real `redis-server` pods rolling from one configuration to another
//! without dropping below `replicas - maxUnavailable` ready pods (sampled), `kubectl rollout
//! status|history|undo|pause|resume|restart`, `scale`, `set image`, Recreate, revision
//! history; ReplicaSets adopting and releasing pods and taking them along when deleted; and
//! bad workloads refused with kube's messages, nothing stored.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::{Backend, Plinth};
use serde_json::Value;

fn with_node(name: &str) -> Plinth {
    let plinth = Plinth::start_with(Backend::Embedded, &["--node-name", name]);
    plinth.eventually("the node is Ready", || {
        let out = plinth.kubectl_output(&["get", "node", name, "--no-headers"]);
        String::from_utf8_lossy(&out.stdout).contains(" Ready ")
    });
    plinth
}

/// A Deployment of `redis-server` pods with `maxmemory` set to `memory`, ready through a
/// tcpSocket probe.
fn redis_deployment(memory: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: cache}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: cache}}}}
  strategy: {{rollingUpdate: {{maxUnavailable: 1, maxSurge: 1}}}}
  template:
    metadata: {{labels: {{app: cache}}}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: redis
        image: redis:7
        args: [--bind, $(POD_IP), --maxmemory, {memory}]
        env: [{{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}]
        readinessProbe: {{tcpSocket: {{port: 6379}}, periodSeconds: 1}}
"#
    )
}

/// Pods of `app`: (ready and not being deleted, all).
fn ready_pods(plinth: &Plinth, app: &str) -> (usize, usize) {
    let out = plinth.kubectl_output(&["get", "pods", "-l", &format!("app={app}"), "-o", "json"]);
    let Ok(list) = serde_json::from_slice::<Value>(&out.stdout) else {
        return (usize::MAX, 0);
    };
    let items = list["items"].as_array().cloned().unwrap_or_default();
    let ready = items
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| {
            p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .count();
    (ready, items.len())
}

/// Samples the ready pods of `app` until stopped; the fewest seen.
fn sample_ready(plinth: &Plinth, app: &str, stop: &AtomicBool) -> usize {
    let mut fewest = usize::MAX;
    while !stop.load(Ordering::SeqCst) {
        let (ready, _) = ready_pods(plinth, app);
        fewest = fewest.min(ready);
    }
    fewest
}

/// Whether, until stopped, pods of `app` from two templates were ever running at once.
fn two_templates_running(plinth: &Plinth, app: &str, stop: &AtomicBool) -> bool {
    let mut seen = false;
    while !stop.load(Ordering::SeqCst) {
        let out =
            plinth.kubectl_output(&["get", "pods", "-l", &format!("app={app}"), "-o", "json"]);
        let Ok(list) = serde_json::from_slice::<Value>(&out.stdout) else {
            continue;
        };
        let hashes: std::collections::BTreeSet<String> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["status"]["phase"] == "Running")
            .filter_map(|p| {
                p["metadata"]["labels"]["pod-template-hash"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        seen |= hashes.len() > 1;
    }
    seen
}

fn rollout_status(plinth: &Plinth, what: &str) -> String {
    plinth.kubectl(&["rollout", "status", what, "--timeout=180s"])
}

/// The ReplicaSets of `app`: (name, replicas, first container's args or image).
fn replica_sets(plinth: &Plinth, app: &str) -> Vec<(String, i64, String)> {
    let list = plinth.json(&["get", "rs", "-l", &format!("app={app}")]);
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|rs| {
            let container = &rs["spec"]["template"]["spec"]["containers"][0];
            (
                rs["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                rs["spec"]["replicas"].as_i64().unwrap_or(-1),
                format!("{} {}", container["image"], container["args"]),
            )
        })
        .collect()
}

#[test]
fn a_deployment_rolls_without_dropping_below_its_availability_and_rolls_back() {
    let plinth = with_node("node-w");
    plinth.kubectl_with(&["apply", "-f", "-"], &redis_deployment("10mb"));
    rollout_status(&plinth, "deploy/cache");
    let first = replica_sets(&plinth, "cache");
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].1, 3);
    // Every pod answers at its own address.
    let pods = plinth.json(&["get", "pods", "-l", "app=cache"]);
    for pod in pods["items"].as_array().unwrap() {
        let ip = pod["status"]["podIP"].as_str().unwrap();
        let answer = std::process::Command::new("redis-cli")
            .args(["-h", ip, "config", "get", "maxmemory"])
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&answer.stdout).contains("10485760"),
            "{ip}: {answer:?}"
        );
    }

    // Roll to another configuration while sampling readiness: with maxUnavailable 1 of 3,
    // at least 2 pods are ready at every sample.
    let stop = AtomicBool::new(false);
    let fewest = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| sample_ready(&plinth, "cache", &stop));
        plinth.kubectl_with(&["apply", "-f", "-"], &redis_deployment("20mb"));
        let status = rollout_status(&plinth, "deploy/cache");
        assert!(status.contains("successfully rolled out"), "{status}");
        stop.store(true, Ordering::SeqCst);
        sampler.join().unwrap()
    });
    assert!(
        fewest >= 2 && fewest != usize::MAX,
        "fewest ready pods seen: {fewest}"
    );

    let sets = replica_sets(&plinth, "cache");
    assert_eq!(sets.len(), 2, "{sets:?}");
    let new = sets.iter().find(|s| s.2.contains("20mb")).unwrap();
    let old = sets.iter().find(|s| s.2.contains("10mb")).unwrap();
    assert_eq!((new.1, old.1), (3, 0), "{sets:?}");
    let deployment = plinth.json(&["get", "deploy", "cache"]);
    assert_eq!(
        deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );
    let conditions = deployment["status"]["conditions"].as_array().unwrap();
    let progressing = conditions
        .iter()
        .find(|c| c["type"] == "Progressing")
        .unwrap();
    assert_eq!(progressing["reason"], "NewReplicaSetAvailable");
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "Available" && c["status"] == "True")
    );
    let history = plinth.kubectl(&["rollout", "history", "deploy/cache"]);
    assert!(
        history.contains("1 ") && history.contains("2 "),
        "{history}"
    );

    // rollout undo: back to the first ReplicaSet, now revision 3.
    plinth.kubectl(&["rollout", "undo", "deploy/cache"]);
    rollout_status(&plinth, "deploy/cache");
    let sets = replica_sets(&plinth, "cache");
    assert_eq!(sets.len(), 2, "no third ReplicaSet: {sets:?}");
    let back = sets.iter().find(|s| s.0 == old.0).unwrap();
    assert_eq!(back.1, 3, "{sets:?}");
    let rs = plinth.json(&["get", "rs", &old.0]);
    assert_eq!(
        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );

    // scale, and the events kubectl describe shows.
    plinth.kubectl(&["scale", "deploy/cache", "--replicas=4"]);
    plinth.eventually("four ready pods", || ready_pods(&plinth, "cache").0 == 4);
    let described = plinth.kubectl(&["describe", "deploy", "cache"]);
    assert!(
        described.contains(&format!("Scaled up replica set {} from 3 to 4", old.0)),
        "{described}"
    );
    let all = plinth.kubectl(&["get", "all"]);
    for kind in ["deployment.apps/cache", "replicaset.apps/", "pod/cache-"] {
        assert!(all.contains(kind), "{kind} in {all}");
    }
    // Deleting the Deployment takes its ReplicaSets and pods along.
    plinth.kubectl(&["delete", "deploy", "cache"]);
    plinth.eventually("the pods are gone", || ready_pods(&plinth, "cache").1 == 0);
    assert!(replica_sets(&plinth, "cache").is_empty());
}

#[test]
fn pause_resume_restart_recreate_and_revision_history_behave_as_kubes() {
    let plinth = with_node("node-r");
    plinth.kubectl(&[
        "create",
        "deployment",
        "web",
        "--image=busybox:1.36",
        "--replicas=2",
        "--",
        "sleep",
        "3600",
    ]);
    rollout_status(&plinth, "deploy/web");
    plinth.kubectl(&["rollout", "pause", "deploy/web"]);
    plinth.kubectl(&["set", "image", "deploy/web", "busybox=busybox:1.37"]);
    plinth.eventually("the pause is reported", || {
        let d = plinth.json(&["get", "deploy", "web"]);
        d["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["reason"] == "DeploymentPaused")
    });
    assert_eq!(replica_sets(&plinth, "web").len(), 1, "paused: no rollout");
    // Scaling still works while paused.
    plinth.kubectl(&["scale", "deploy/web", "--replicas=3"]);
    plinth.eventually("three pods", || ready_pods(&plinth, "web").0 == 3);
    plinth.kubectl(&["rollout", "resume", "deploy/web"]);
    rollout_status(&plinth, "deploy/web");
    let sets = replica_sets(&plinth, "web");
    assert_eq!(sets.len(), 2, "{sets:?}");
    assert!(
        sets.iter()
            .any(|s| s.1 == 3 && s.2.contains("busybox:1.37")),
        "{sets:?}"
    );

    // restart: a new template (an annotation), so a new ReplicaSet.
    plinth.kubectl(&["rollout", "restart", "deploy/web"]);
    rollout_status(&plinth, "deploy/web");
    let d = plinth.json(&["get", "deploy", "web"]);
    assert!(
        d["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
            .is_string()
    );
    assert_eq!(replica_sets(&plinth, "web").len(), 3);

    // revisionHistoryLimit 1: one old ReplicaSet is kept; and Recreate stops every old pod
    // before a new one starts.
    plinth.kubectl(&[
        "patch",
        "deploy",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"revisionHistoryLimit":1,"strategy":{"type":"Recreate","rollingUpdate":null}}}"#,
    ]);
    plinth.eventually("old ReplicaSets beyond the limit go", || {
        replica_sets(&plinth, "web").len() == 2
    });
    let stop = AtomicBool::new(false);
    let mixed = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| two_templates_running(&plinth, "web", &stop));
        plinth.kubectl(&["set", "image", "deploy/web", "busybox=busybox:1.36.1"]);
        rollout_status(&plinth, "deploy/web");
        stop.store(true, Ordering::SeqCst);
        watcher.join().unwrap()
    });
    assert!(!mixed, "Recreate never runs old and new pods together");
    let sets = replica_sets(&plinth, "web");
    assert_eq!(sets.len(), 2, "{sets:?}");
    assert!(
        sets.iter().any(|s| s.1 == 3 && s.2.contains("1.36.1")),
        "{sets:?}"
    );
}

#[test]
fn replica_sets_adopt_release_and_take_their_pods_along() {
    let plinth = with_node("node-s");
    plinth.kubectl(&[
        "run",
        "stray",
        "--image=busybox:1.36",
        "--labels=app=herd",
        "--",
        "sleep",
        "3600",
    ]);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: herd}
spec:
  replicas: 2
  selector: {matchLabels: {app: herd}}
  template:
    metadata: {labels: {app: herd}}
    spec:
      containers: [{name: main, image: "busybox:1.36", command: [sleep, "3600"]}]
"#,
    );
    plinth.eventually("two ready pods, the stray adopted", || {
        ready_pods(&plinth, "herd") == (2, 2)
    });
    let stray = plinth.json(&["get", "pod", "stray"]);
    assert_eq!(
        stray["metadata"]["ownerReferences"][0]["kind"],
        "ReplicaSet"
    );
    assert_eq!(stray["metadata"]["ownerReferences"][0]["controller"], true);
    // Relabelled, it is released and replaced.
    plinth.kubectl(&["label", "pod", "stray", "app=loose", "--overwrite"]);
    plinth.eventually("a replacement", || ready_pods(&plinth, "herd") == (2, 2));
    plinth.eventually("the stray released", || {
        plinth.json(&["get", "pod", "stray"])["metadata"]["ownerReferences"]
            .as_array()
            .is_none_or(Vec::is_empty)
    });
    let rs = plinth.json(&["get", "rs", "herd"]);
    assert_eq!(rs["status"]["replicas"], 2);
    assert_eq!(rs["status"]["readyReplicas"], 2);
    assert_eq!(rs["status"]["availableReplicas"], 2);
    let table = plinth.kubectl(&["get", "rs", "herd"]);
    assert!(table.contains("DESIRED   CURRENT   READY"), "{table}");
    // kubectl scale through /scale.
    plinth.kubectl(&["scale", "rs", "herd", "--replicas=1"]);
    plinth.eventually("one pod", || ready_pods(&plinth, "herd").1 == 1);
    plinth.kubectl(&["delete", "rs", "herd"]);
    plinth.eventually("its pods go with it", || ready_pods(&plinth, "herd").1 == 0);
    // The released pod stays.
    plinth.kubectl(&["get", "pod", "stray"]);
}

#[test]
fn bad_workloads_are_refused_with_kubes_messages_and_nothing_is_stored() {
    let plinth = Plinth::start(Backend::Embedded);
    let deployment = |spec: &str| {
        format!("apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: bad}}\nspec:\n{spec}")
    };
    let template = "  template:\n    metadata: {labels: {app: a}}\n    spec: {containers: [{name: c, image: busybox}]}\n";
    for (spec, expected) in [
        (
            format!("  selector: {{matchLabels: {{app: b}}}}\n{template}"),
            "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"a\"}: `selector` does not match template `labels`",
        ),
        (
            format!("  selector: {{}}\n{template}"),
            "spec.selector: Invalid value: &LabelSelector{MatchLabels:map[string]string{},MatchExpressions:[]LabelSelectorRequirement{},}: empty selector is invalid for deployment",
        ),
        (template.to_owned(), "spec.selector: Required value"),
        (
            format!("  replicas: -1\n  selector: {{matchLabels: {{app: a}}}}\n{template}"),
            "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            format!(
                "  selector: {{matchLabels: {{app: a}}}}\n  strategy: {{rollingUpdate: {{maxSurge: 0, maxUnavailable: 0}}}}\n{template}"
            ),
            "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: may not be 0 when `maxSurge` is 0",
        ),
        (
            format!(
                "  selector: {{matchLabels: {{app: a}}}}\n  strategy: {{rollingUpdate: {{maxUnavailable: 120%}}}}\n{template}"
            ),
            "must not be greater than 100%",
        ),
        (
            format!(
                "  selector: {{matchLabels: {{app: a}}}}\n  strategy: {{type: Recreate, rollingUpdate: {{maxSurge: 1}}}}\n{template}"
            ),
            "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'",
        ),
        (
            format!(
                "  selector: {{matchLabels: {{app: a}}}}\n  progressDeadlineSeconds: 5\n  minReadySeconds: 10\n{template}"
            ),
            "spec.progressDeadlineSeconds: Invalid value: 5: must be greater than minReadySeconds",
        ),
        (
            "  selector: {matchLabels: {app: a}}\n  template:\n    metadata: {labels: {app: a}}\n    spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}\n".to_owned(),
            "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
        ),
        (
            "  selector: {matchLabels: {app: a}}\n  replicas: many\n".to_owned(),
            "cannot unmarshal string into Go struct field",
        ),
    ] {
        let out = plinth.kubectl_stdin(&["create", "-f", "-"], &deployment(&spec));
        assert!(!out.status.success(), "refused: {spec}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{expected:?} in {stderr}");
    }
    let listed = plinth.json(&["get", "deploy"]);
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(0));

    // A good one, then changes its selector may not make.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &deployment(&format!(
            "  selector: {{matchLabels: {{app: a}}}}\n{template}"
        )),
    );
    let before = plinth.json(&["get", "deploy", "bad"]);
    let out = plinth.kubectl_output(&[
        "patch",
        "deploy",
        "bad",
        "--type=merge",
        "-p",
        r#"{"spec":{"selector":{"matchLabels":{"app":"a","x":"y"}},"template":{"metadata":{"labels":{"x":"y"}}}}}"#,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("spec.selector: Invalid value: &LabelSelector{MatchLabels:map[string]string{app: a,x: y,},MatchExpressions:[]LabelSelectorRequirement{},}: field is immutable"), "{stderr}");
    let out = plinth.kubectl_output(&["scale", "deploy", "bad", "--replicas=-2"]);
    assert!(!out.status.success());
    // Nothing the refused requests asked for changed (the controller may write the status
    // meanwhile, so the resourceVersion is no witness).
    let after = plinth.json(&["get", "deploy", "bad"]);
    assert_eq!(before["spec"], after["spec"], "nothing changed");
    assert_eq!(
        before["metadata"]["generation"], after["metadata"]["generation"],
        "nothing changed"
    );

    // A StatefulSet's fixed fields, a DaemonSet's strategy, a ControllerRevision's data.
    let out = plinth.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s}\nspec:\n  selector: {matchLabels: {app: s}}\n  podManagementPolicy: Sometimes\n  template:\n    metadata: {labels: {app: s}}\n    spec: {containers: [{name: c, image: busybox}]}\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("spec.podManagementPolicy: Unsupported value: \"Sometimes\": supported values: \"OrderedReady\", \"Parallel\""), "{stderr}");
    let good = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s}\nspec:\n  serviceName: a\n  selector: {matchLabels: {app: s}}\n  template:\n    metadata: {labels: {app: s}}\n    spec: {containers: [{name: c, image: busybox, volumeMounts: [{name: d, mountPath: /d}]}]}\n  volumeClaimTemplates: [{metadata: {name: d}, spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Mi}}}}]\n";
    plinth.kubectl_with(&["create", "-f", "-"], good);
    let out = plinth.kubectl_output(&[
        "patch",
        "sts",
        "s",
        "--type=merge",
        "-p",
        r#"{"spec":{"serviceName":"b"}}"#,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"), "{stderr}");
    plinth.kubectl(&["delete", "sts", "s"]);
    let out = plinth.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: d}\nspec:\n  selector: {matchLabels: {app: d}}\n  updateStrategy: {type: Sometimes}\n  template:\n    metadata: {labels: {app: d}}\n    spec: {containers: [{name: c, image: busybox}]}\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("spec.updateStrategy.type: Unsupported value: \"Sometimes\""),
        "{stderr}"
    );
    let out = plinth.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: apps/v1\nkind: ControllerRevision\nmetadata: {name: r}\nrevision: 1\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("data: Required value: data is mandatory"),
        "{stderr}"
    );
    for kind in ["sts", "ds", "controllerrevisions"] {
        let listed = plinth.json(&["get", kind]);
        assert_eq!(listed["items"].as_array().map(Vec::len), Some(0), "{kind}");
    }
}

/// A StatefulSet of `replicas` busybox pods that append `word` to a log on their claim.
fn stateful_set(replicas: u32, word: &str, policy: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: db}}
spec:
  replicas: {replicas}
  serviceName: db
  selector: {{matchLabels: {{app: db}}}}
  persistentVolumeClaimRetentionPolicy: {policy}
  template:
    metadata: {{labels: {{app: db}}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: busybox:1.36
        command: [sh, -c, "hostname > /data/host; echo {word} >> /data/log; sleep 3600"]
        volumeMounts: [{{name: data, mountPath: /data}}]
        readinessProbe: {{exec: {{command: [cat, /data/host]}}, periodSeconds: 1}}
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Mi}}}}}}
"#
    )
}

/// The names of the PVCs of the default namespace.
fn claims(plinth: &Plinth) -> Vec<String> {
    let list = plinth.json(&["get", "pvc"]);
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// Whether, until stopped, a pod of the set was seen before the one below it was ready.
fn out_of_order(plinth: &Plinth, stop: &AtomicBool) -> Option<String> {
    while !stop.load(Ordering::SeqCst) {
        let out = plinth.kubectl_output(&["get", "pods", "-l", "app=db", "-o", "json"]);
        let Ok(list) = serde_json::from_slice::<Value>(&out.stdout) else {
            continue;
        };
        let pods = list["items"].as_array().cloned().unwrap_or_default();
        let ready = |name: &str| {
            pods.iter().any(|p| {
                p["metadata"]["name"] == name
                    && p["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        };
        for pod in &pods {
            let name = pod["metadata"]["name"].as_str().unwrap_or("");
            let ordinal: u32 = name.trim_start_matches("db-").parse().unwrap_or(0);
            if ordinal > 0 && !ready(&format!("db-{}", ordinal - 1)) {
                return Some(format!("{name} before db-{} was ready", ordinal - 1));
            }
        }
    }
    None
}

#[test]
fn a_stateful_set_keeps_names_and_claims_and_goes_in_order() {
    let plinth = with_node("node-t");
    let stop = AtomicBool::new(false);
    let disorder = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| out_of_order(&plinth, &stop));
        plinth.kubectl_with(&["apply", "-f", "-"], &stateful_set(3, "v1", "{}"));
        rollout_status(&plinth, "sts/db");
        stop.store(true, Ordering::SeqCst);
        watcher.join().unwrap()
    });
    assert_eq!(disorder, None, "OrderedReady creates one ordinal at a time");
    assert_eq!(claims(&plinth), ["data-db-0", "data-db-1", "data-db-2"]);
    let pod = plinth.json(&["get", "pod", "db-1"]);
    assert_eq!(pod["spec"]["hostname"], "db-1");
    assert_eq!(pod["spec"]["subdomain"], "db");
    assert_eq!(
        pod["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
        "db-1"
    );
    assert_eq!(
        plinth
            .kubectl(&["exec", "db-1", "--", "cat", "/data/host"])
            .trim(),
        "db-1"
    );

    // A deleted pod comes back with its name and its volume.
    let uid = pod["metadata"]["uid"].clone();
    plinth.kubectl(&["delete", "pod", "db-1"]);
    plinth.eventually("db-1 is back and ready", || {
        let pod = plinth.json(&["get", "pods", "-l", "app=db"]);
        pod["items"].as_array().into_iter().flatten().any(|p| {
            p["metadata"]["name"] == "db-1"
                && p["metadata"]["uid"] != uid
                && p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    });
    let log = plinth.kubectl(&["exec", "db-1", "--", "cat", "/data/log"]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        ["v1", "v1"],
        "the data outlived the pod"
    );

    // A rolling update replaces every pod; the revisions are ControllerRevisions.
    plinth.kubectl_with(&["apply", "-f", "-"], &stateful_set(3, "v2", "{}"));
    rollout_status(&plinth, "sts/db");
    let set = plinth.json(&["get", "sts", "db"]);
    assert_eq!(
        set["status"]["currentRevision"],
        set["status"]["updateRevision"]
    );
    assert_eq!(set["status"]["updatedReplicas"], 3);
    let revisions = plinth.json(&["get", "controllerrevisions"]);
    assert_eq!(revisions["items"].as_array().map(Vec::len), Some(2));
    let log = plinth.kubectl(&["exec", "db-0", "--", "cat", "/data/log"]);
    assert_eq!(log.lines().last(), Some("v2"), "{log}");
    let history = plinth.kubectl(&["rollout", "history", "sts/db"]);
    assert!(
        history.contains("1 ") && history.contains("2 "),
        "{history}"
    );

    // Scaling down removes the highest ordinals and keeps their claims (Retain).
    plinth.kubectl(&["scale", "sts", "db", "--replicas=1"]);
    plinth.eventually("db-1 and db-2 gone", || ready_pods(&plinth, "db").1 == 1);
    plinth.kubectl(&["get", "pod", "db-0"]);
    assert_eq!(claims(&plinth), ["data-db-0", "data-db-1", "data-db-2"]);
    // With whenScaled and whenDeleted Delete, claims go with their pods and the set.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &stateful_set(2, "v2", "{whenScaled: Delete, whenDeleted: Delete}"),
    );
    rollout_status(&plinth, "sts/db");
    plinth.kubectl(&["scale", "sts", "db", "--replicas=1"]);
    plinth.eventually("db-1's claim goes with it", || {
        claims(&plinth) == ["data-db-0", "data-db-2"]
    });
    plinth.kubectl(&["delete", "sts", "db"]);
    plinth.eventually("the set's claims go with it", || {
        claims(&plinth) == ["data-db-2"]
    });
}

/// The number of pods of `job` that are neither finished nor being deleted.
fn running_pods(plinth: &Plinth, job: &str) -> usize {
    let out = plinth.kubectl_output(&[
        "get",
        "pods",
        "-l",
        &format!("batch.kubernetes.io/job-name={job}"),
        "-o",
        "json",
    ]);
    let Ok(list) = serde_json::from_slice::<Value>(&out.stdout) else {
        return 0;
    };
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
        .count()
}

fn job_condition(plinth: &Plinth, job: &str, kind: &str) -> Option<Value> {
    let job = plinth.json(&["get", "job", job]);
    job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind && c["status"] == "True")
        .cloned()
}

#[test]
fn jobs_run_to_completion_stop_at_their_backoff_limit_and_follow_their_policies() {
    let plinth = with_node("node-j");
    // completions 5, parallelism 2: never more than two at once (sampled).
    let stop = AtomicBool::new(false);
    let most = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut most = 0;
            while !stop.load(Ordering::SeqCst) {
                most = most.max(running_pods(&plinth, "five"));
            }
            most
        });
        plinth.kubectl_with(
            &["apply", "-f", "-"],
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: five}\nspec:\n  completions: 5\n  parallelism: 2\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: c, image: 'busybox:1.36', command: [sh, -c, 'sleep 1; echo done']}]\n",
        );
        plinth.kubectl(&[
            "wait",
            "--for=condition=complete",
            "job/five",
            "--timeout=120s",
        ]);
        stop.store(true, Ordering::SeqCst);
        sampler.join().unwrap()
    });
    assert!(
        (1..=2).contains(&most),
        "at most parallelism pods ran: {most}"
    );
    let job = plinth.json(&["get", "job", "five"]);
    assert_eq!(job["status"]["succeeded"], 5);
    assert!(job["status"]["completionTime"].is_string());
    assert!(job_condition(&plinth, "five", "SuccessCriteriaMet").is_some());
    let table = plinth.kubectl(&["get", "job", "five"]);
    assert!(
        table.contains("Complete") && table.contains("5/5"),
        "{table}"
    );
    // Counted once: the finished pods no longer carry the tracking finalizer.
    let pods = plinth.json(&["get", "pods", "-l", "batch.kubernetes.io/job-name=five"]);
    for pod in pods["items"].as_array().unwrap() {
        assert!(
            pod["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty),
            "{pod}"
        );
    }

    // kubectl create job; a failing Job stops after backoffLimit + 1 failures.
    plinth.kubectl(&[
        "create",
        "job",
        "hello",
        "--image=busybox:1.36",
        "--",
        "echo",
        "hello",
    ]);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: fails}\nspec:\n  backoffLimit: 1\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: c, image: 'busybox:1.36', command: [sh, -c, 'exit 3']}]\n",
    );
    plinth.kubectl(&[
        "wait",
        "--for=condition=complete",
        "job/hello",
        "--timeout=120s",
    ]);
    assert_eq!(plinth.kubectl(&["logs", "job/hello"]).trim(), "hello");
    plinth.kubectl(&[
        "wait",
        "--for=condition=failed",
        "job/fails",
        "--timeout=180s",
    ]);
    let failed = job_condition(&plinth, "fails", "Failed").unwrap();
    assert_eq!(failed["reason"], "BackoffLimitExceeded");
    assert_eq!(
        failed["message"],
        "Job has reached the specified backoff limit"
    );
    assert_eq!(plinth.json(&["get", "job", "fails"])["status"]["failed"], 2);

    // A pod failure policy's FailJob ends the Job at the first matching exit; an Indexed
    // Job runs each index once; a finished Job with a TTL goes.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"apiVersion: batch/v1
kind: Job
metadata: {name: policy}
spec:
  backoffLimit: 6
  podFailurePolicy:
    rules: [{action: FailJob, onExitCodes: {operator: In, values: [42]}}]
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: "busybox:1.36", command: [sh, -c, "exit 42"]}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: indexed}
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  ttlSecondsAfterFinished: 15
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: "busybox:1.36", command: [sh, -c, "echo index=$JOB_COMPLETION_INDEX host=$(hostname)"]}]
"#,
    );
    plinth.kubectl(&[
        "wait",
        "--for=condition=failed",
        "job/policy",
        "--timeout=120s",
    ]);
    let failed = job_condition(&plinth, "policy", "Failed").unwrap();
    assert_eq!(failed["reason"], "PodFailurePolicy");
    assert!(
        failed["message"].as_str().unwrap().contains("exit code 42"),
        "{failed}"
    );
    plinth.kubectl(&[
        "wait",
        "--for=condition=complete",
        "job/indexed",
        "--timeout=120s",
    ]);
    let job = plinth.json(&["get", "job", "indexed"]);
    assert_eq!(job["status"]["completedIndexes"], "0-2");
    let pods = plinth.json(&["get", "pods", "-l", "batch.kubernetes.io/job-name=indexed"]);
    let mut seen: Vec<String> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let name = p["metadata"]["name"].as_str().unwrap().to_owned();
            plinth.kubectl(&["logs", &name]).trim().to_owned()
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            "index=0 host=indexed-0",
            "index=1 host=indexed-1",
            "index=2 host=indexed-2"
        ]
    );
    plinth.eventually("the TTL deletes the finished Job and its pods", || {
        !plinth
            .kubectl_output(&["get", "job", "indexed"])
            .status
            .success()
            && running_pods(&plinth, "indexed") == 0
    });

    // An `Ignore` rule: the matching failure is not counted (backoffLimit 0 holds), its
    // index runs again.
    let marks = tempfile::tempdir().unwrap();
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &format!(
            r#"apiVersion: batch/v1
kind: Job
metadata: {{name: ignored}}
spec:
  completions: 1
  completionMode: Indexed
  backoffLimit: 0
  podFailurePolicy:
    rules: [{{action: Ignore, onExitCodes: {{operator: In, values: [3]}}}}]
  template:
    spec:
      restartPolicy: Never
      volumes: [{{name: marks, hostPath: {{path: {}, type: Directory}}}}]
      containers:
      - name: main
        image: "busybox:1.36"
        command: [sh, -c, "test -f /marks/once && exit 0; touch /marks/once; exit 3"]
        volumeMounts: [{{name: marks, mountPath: /marks}}]
"#,
            marks.path().display()
        ),
    );
    plinth.kubectl(&[
        "wait",
        "--for=condition=complete",
        "job/ignored",
        "--timeout=120s",
    ]);
    let job = plinth.json(&["get", "job", "ignored"]);
    assert_eq!(job["status"]["failed"], Value::Null, "{job}");
    assert_eq!(job["status"]["succeeded"], 1, "{job}");

    // Bad Jobs: kube's messages, nothing stored.
    refused_all(
        &plinth,
        &[
            (
                "apiVersion: batch/v1\nkind: Job\nmetadata: {name: bad}\nspec:\n  template:\n    spec: {containers: [{name: c, image: busybox}]}\n",
                "spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"",
            ),
            (
                "apiVersion: batch/v1\nkind: Job\nmetadata: {name: bad}\nspec:\n  completionMode: Indexed\n  parallelism: 2\n  template:\n    spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}\n",
                "spec.completions: Required value: when completion mode is Indexed",
            ),
            (
                "apiVersion: batch/v1\nkind: Job\nmetadata: {name: bad}\nspec:\n  backoffLimit: -1\n  template:\n    spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}\n",
                "spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0",
            ),
        ],
    );
    assert!(
        !plinth
            .kubectl_output(&["get", "job", "bad"])
            .status
            .success()
    );
}

#[test]
fn a_cron_job_runs_on_its_schedule_and_keeps_its_history() {
    let plinth = with_node("node-c");
    plinth.kubectl(&[
        "create",
        "cronjob",
        "tick",
        "--image=busybox:1.36",
        "--schedule=* * * * *",
        "--",
        "echo",
        "tick",
    ]);
    let table = plinth.kubectl(&["get", "cronjob", "tick"]);
    assert!(
        table.contains("* * * * *") && table.contains("False"),
        "{table}"
    );
    // Within about a minute, the scheduled Job runs and completes.
    plinth.eventually("a scheduled run completed", || {
        let cj = plinth.json(&["get", "cronjob", "tick"]);
        cj["status"]["lastSuccessfulTime"].is_string()
    });
    let cj = plinth.json(&["get", "cronjob", "tick"]);
    assert!(cj["status"]["lastScheduleTime"].is_string(), "{cj}");
    let jobs = plinth.json(&["get", "jobs"]);
    let job = &jobs["items"][0];
    let name = job["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("tick-"), "{name}");
    assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "CronJob");
    assert!(
        job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"]
            .is_string()
    );
    assert_eq!(
        plinth.kubectl(&["logs", &format!("job/{name}")]).trim(),
        "tick"
    );
    // successfulJobsHistoryLimit 0: finished Jobs go.
    plinth.kubectl(&[
        "patch",
        "cronjob",
        "tick",
        "--type=merge",
        "-p",
        r#"{"spec":{"successfulJobsHistoryLimit":0,"suspend":true}}"#,
    ]);
    plinth.eventually("the history is trimmed", || {
        plinth.json(&["get", "jobs"])["items"]
            .as_array()
            .is_some_and(Vec::is_empty)
    });

    refused_all(
        &plinth,
        &[
            (
                "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: bad}\nspec:\n  schedule: often\n  jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}}}}\n",
                "spec.schedule: Invalid value: \"often\": expected exactly 5 fields, found 1: [often]",
            ),
            (
                "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: bad}\nspec:\n  schedule: '@hourly'\n  timeZone: Mars/Olympus\n  jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}}}}\n",
                "spec.timeZone: Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus",
            ),
            (
                "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: bad}\nspec:\n  schedule: '@hourly'\n  concurrencyPolicy: Sometimes\n  jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}}}}\n",
                "spec.concurrencyPolicy: Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\"",
            ),
            // Beyond Go's durations (the fuzzer's find: it overflowed the next run's
            // arithmetic), refused as robfig/cron refuses it in kube.
            (
                "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: bad}\nspec:\n  schedule: '@every 1999999999999999999h3m'\n  jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}}}}\n",
                "spec.schedule: Invalid value: \"@every 1999999999999999999h3m\": failed to parse duration @every 1999999999999999999h3m: time: invalid duration \"1999999999999999999h3m\"",
            ),
        ],
    );
    assert!(
        !plinth
            .kubectl_output(&["get", "cronjob", "bad"])
            .status
            .success()
    );
}

#[test]
fn a_daemon_set_runs_one_pod_per_fitting_node_and_rolls_node_by_node() {
    let plinth = with_node("node-d1");
    let (second, _dir) = second_agent(&plinth, "node-d2");
    let daemon = |image: &str, selector: &str| {
        format!(
            "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: agent}}\nspec:\n  selector: {{matchLabels: {{app: agent}}}}\n  template:\n    metadata: {{labels: {{app: agent}}}}\n    spec:\n      nodeSelector: {selector}\n      terminationGracePeriodSeconds: 1\n      containers: [{{name: main, image: '{image}', command: [sleep, '3600'], readinessProbe: {{exec: {{command: ['true']}}, periodSeconds: 1}}}}]\n"
        )
    };
    plinth.kubectl_with(&["apply", "-f", "-"], &daemon("busybox:1.36", "{}"));
    rollout_status(&plinth, "ds/agent");
    let nodes_of = || {
        let pods = plinth.json(&["get", "pods", "-l", "app=agent"]);
        let mut nodes: Vec<String> = pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_owned))
            .collect();
        nodes.sort();
        nodes
    };
    assert_eq!(nodes_of(), ["node-d1", "node-d2"]);
    let table = plinth.kubectl(&["get", "ds", "agent"]);
    assert!(table.contains("NODE SELECTOR"), "{table}");
    // A rolling update replaces each node's pod.
    plinth.kubectl_with(&["apply", "-f", "-"], &daemon("busybox:1.37", "{}"));
    rollout_status(&plinth, "ds/agent");
    let pods = plinth.json(&["get", "pods", "-l", "app=agent"]);
    let images: Vec<&str> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|p| p["spec"]["containers"][0]["image"].as_str())
        .collect();
    assert_eq!(images, ["busybox:1.37", "busybox:1.37"]);
    let history = plinth.kubectl(&["rollout", "history", "ds/agent"]);
    assert!(
        history.contains("1 ") && history.contains("2 "),
        "{history}"
    );
    // Its revisions carry kube's hash labels.
    let revisions = plinth.json(&["get", "controllerrevisions", "-l", "app=agent"]);
    for revision in revisions["items"].as_array().unwrap() {
        let labels = &revision["metadata"]["labels"];
        let hash = labels["controller-revision-hash"].as_str().unwrap_or("");
        assert!(!hash.is_empty(), "{revision}");
        assert_eq!(labels["controller.kubernetes.io/hash"], hash);
        assert!(
            revision["metadata"]["name"]
                .as_str()
                .unwrap()
                .ends_with(hash)
        );
        // Its data is kube's patch: the template as Go encodes it, replacing the whole.
        let template = &revision["data"]["spec"]["template"];
        assert_eq!(template["$patch"], "replace", "{revision}");
        assert!(template["metadata"]["creationTimestamp"].is_null());
        assert!(
            template["metadata"]
                .as_object()
                .unwrap()
                .contains_key("creationTimestamp")
        );
        assert_eq!(
            template["spec"]["containers"][0]["resources"],
            serde_json::json!({})
        );
    }
    // A rollout to an image that never starts stops after one node (the other keeps its
    // pod: nodes without an available pod count against maxUnavailable), and rolls back.
    plinth.kubectl_with(&["apply", "-f", "-"], &daemon("foo:non-existent", "{}"));
    let by_image = |image: &str| {
        plinth.json(&["get", "pods", "-l", "app=agent"])["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter(|p| p["spec"]["containers"][0]["image"] == image)
            .count()
    };
    plinth.eventually("one node runs the new image", || {
        by_image("foo:non-existent") == 1
    });
    assert_eq!(by_image("busybox:1.37"), 1);
    plinth.kubectl(&["rollout", "undo", "ds/agent"]);
    rollout_status(&plinth, "ds/agent");
    plinth.eventually("both nodes run the old image again", || {
        by_image("busybox:1.37") == 2 && by_image("foo:non-existent") == 0
    });
    // Only labelled nodes, once the selector says so.
    plinth.kubectl(&["label", "node", "node-d2", "role=edge"]);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &daemon("busybox:1.37", "{role: edge}"),
    );
    plinth.eventually("only node-d2 runs it", || nodes_of() == ["node-d2"]);
    let ds = plinth.json(&["get", "ds", "agent"]);
    plinth.eventually("the status counts one node", || {
        let ds = plinth.json(&["get", "ds", "agent"]);
        ds["status"]["desiredNumberScheduled"] == 1 && ds["status"]["numberReady"] == 1
    });
    assert_eq!(ds["kind"], "DaemonSet");
    plinth.kubectl(&["delete", "ds", "agent"]);
    plinth.eventually("its pods go", || nodes_of().is_empty());
    drop(second);
}

/// A second node agent called `name` (a `plinth node` process, stopped by its PID when the
/// guard drops), once its node is Ready.
fn second_agent(plinth: &Plinth, name: &str) -> (common::Stopped, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let agent = common::Stopped(Some(
        std::process::Command::new(env!("CARGO_BIN_EXE_plinth"))
            .args(["node", "--kubeconfig"])
            .arg(&plinth.kubeconfig)
            .args(["--node-name", name, "--data-dir"])
            .arg(dir.path())
            .env("RUST_LOG", "warn")
            .spawn()
            .unwrap(),
    ));
    plinth.eventually("the second node is Ready", || {
        let out = plinth.kubectl_output(&["get", "node", name, "--no-headers"]);
        String::from_utf8_lossy(&out.stdout).contains(" Ready ")
    });
    (agent, dir)
}

/// POSTs an Eviction of `pod`; kubectl's error text when refused.
fn evict(plinth: &Plinth, pod: &str) -> Result<(), String> {
    let body = format!(
        r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"{pod}","namespace":"default"}}}}"#
    );
    let out = plinth.kubectl_stdin(
        &[
            "create",
            "--raw",
            &format!("/api/v1/namespaces/default/pods/{pod}/eviction"),
            "-f",
            "-",
        ],
        &body,
    );
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// kube's eviction marks the pod before it deletes it: a Job's pod failure policy can tell
/// an evicted pod from a failed one.
#[test]
fn an_evicted_pod_is_marked_as_a_disruption_target() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: held, namespace: default, finalizers: [example.com/hold]}\nspec:\n  containers: [{name: c, image: busybox}]\n",
    );
    evict(&plinth, "held").unwrap();
    let pod = plinth.json(&["get", "pod", "held"]);
    assert!(pod["metadata"]["deletionTimestamp"].is_string(), "{pod}");
    let condition = pod["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "DisruptionTarget")
        .cloned()
        .unwrap_or_else(|| panic!("no DisruptionTarget: {pod}"));
    assert_eq!(condition["status"], "True");
    assert_eq!(condition["reason"], "EvictionByEvictionAPI");
    assert_eq!(condition["message"], "Eviction API: evicting");
    plinth.kubectl(&[
        "patch",
        "pod",
        "held",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
}

#[test]
fn disruption_budgets_hold_evictions_back_and_kubectl_drain_moves_pods() {
    let plinth = with_node("node-e1");
    let (agent, _dir) = second_agent(&plinth, "node-e2");
    plinth.kubectl(&["cordon", "node-e2"]);
    plinth.kubectl(&[
        "create",
        "deployment",
        "web",
        "--image=busybox:1.36",
        "--replicas=3",
        "--",
        "sleep",
        "3600",
    ]);
    rollout_status(&plinth, "deploy/web");
    plinth.kubectl(&[
        "create",
        "pdb",
        "web",
        "--selector=app=web",
        "--min-available=2",
    ]);
    plinth.eventually("the budget allows one disruption", || {
        plinth.json(&["get", "pdb", "web"])["status"]["disruptionsAllowed"] == 1
    });
    let table = plinth.kubectl(&["get", "pdb", "web"]);
    assert!(
        table.contains("MIN AVAILABLE") && table.contains("N/A"),
        "{table}"
    );
    // With both nodes cordoned, an evicted pod's replacement cannot start: the budget lets
    // one eviction through and holds the next.
    plinth.kubectl(&["cordon", "node-e1"]);
    let pods = plinth.json(&["get", "pods", "-l", "app=web"]);
    let names: Vec<String> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    evict(&plinth, &names[0]).unwrap();
    let refused = evict(&plinth, &names[1]).unwrap_err();
    assert!(
        refused.contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "{refused}"
    );
    plinth.kubectl(&["get", "pod", &names[1]]);
    // kubectl drain evicts node-e1's pods as the budget allows; they start on node-e2.
    plinth.kubectl(&["uncordon", "node-e2"]);
    let drained = plinth.kubectl(&[
        "drain",
        "node-e1",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=180s",
    ]);
    assert!(drained.contains("node/node-e1 drained"), "{drained}");
    plinth.eventually("three ready pods on node-e2", || {
        let pods = plinth.json(&["get", "pods", "-l", "app=web"]);
        let on_e2 = pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| {
                p["spec"]["nodeName"] == "node-e2" && p["metadata"]["deletionTimestamp"].is_null()
            })
            .filter(|p| {
                p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .count();
        on_e2 == 3
    });
    assert_eq!(
        plinth.json(&["get", "node", "node-e1"])["spec"]["unschedulable"],
        true
    );
    // A budget with both minAvailable and maxUnavailable is refused.
    let out = plinth.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: both}\nspec: {minAvailable: 1, maxUnavailable: 1, selector: {matchLabels: {app: web}}}\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("minAvailable and maxUnavailable cannot be both set"),
        "{stderr}"
    );
    drop(agent);
}

/// A Deployment `name` of one pod that burns a CPU (requests 100m) while `burn`, else idles.
fn burner(name: &str, burn: bool) -> String {
    let command = if burn {
        "while true; do :; done"
    } else {
        "sleep 3600"
    };
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      terminationGracePeriodSeconds: 1\n      containers: [{{name: main, image: 'busybox:1.36', command: [sh, -c, '{command}'], resources: {{requests: {{cpu: 100m}}}}}}]\n"
    )
}

#[test]
fn autoscalers_scale_a_busy_deployment_up_and_down_and_a_custom_resource_through_its_scale() {
    let plinth = with_node("node-h");
    plinth.kubectl_with(&["apply", "-f", "-"], &burner("busy", true));
    rollout_status(&plinth, "deploy/busy");
    // kubectl autoscale writes autoscaling/v1; the controller reads v2 with a quick
    // scale-down.
    plinth.kubectl(&[
        "autoscale",
        "deploy",
        "busy",
        "--cpu-percent=50",
        "--min=1",
        "--max=3",
    ]);
    plinth.kubectl(&[
        "patch",
        "horizontalpodautoscalers.v2.autoscaling",
        "busy",
        "--type=merge",
        "-p",
        r#"{"spec":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":0}}}}"#,
    ]);
    plinth.eventually("the busy Deployment is scaled up", || {
        plinth.json(&["get", "deploy", "busy"])["spec"]["replicas"] == 3
    });
    let hpa = plinth.json(&["get", "horizontalpodautoscalers.v2.autoscaling", "busy"]);
    let current = &hpa["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"];
    assert!(current.as_i64().unwrap() > 50, "{hpa}");
    let v1 = plinth.json(&["get", "horizontalpodautoscalers.v1.autoscaling", "busy"]);
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
    let described = plinth.kubectl(&["describe", "hpa", "busy"]);
    assert!(
        described.contains("SuccessfulRescale") && described.contains("New size: 3"),
        "{described}"
    );
    let table = plinth.kubectl(&["get", "hpa", "busy"]);
    assert!(
        table.contains("Deployment/busy") && table.contains("/50%"),
        "{table}"
    );
    // Idle pods: back down to the minimum.
    plinth.kubectl_with(&["apply", "-f", "-"], &burner("busy", false));
    plinth.eventually("the idle Deployment is scaled down", || {
        plinth.json(&["get", "deploy", "busy"])["spec"]["replicas"] == 1
    });
    plinth.kubectl(&["delete", "deploy", "busy"]);

    // A custom resource with /scale: its selector picks busy pods, its replicas grow.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: pools.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: pools, singular: pool, kind: Pool}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas, labelSelectorPath: .status.selector}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {replicas: {type: integer}}}
          status: {type: object, properties: {replicas: {type: integer}, selector: {type: string}}}
"#,
    );
    plinth.eventually("pools are served", || {
        plinth.kubectl_output(&["get", "pools"]).status.success()
    });
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Pool\nmetadata: {name: workers}\nspec: {replicas: 1}\n",
    );
    plinth.kubectl(&[
        "patch",
        "pool",
        "workers",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":1,"selector":"app=pooled"}}"#,
    ]);
    plinth.kubectl_with(&["apply", "-f", "-"], &burner("pooled", true));
    rollout_status(&plinth, "deploy/pooled");
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: workers}\nspec:\n  scaleTargetRef: {apiVersion: example.com/v1, kind: Pool, name: workers}\n  minReplicas: 1\n  maxReplicas: 3\n  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}}]\n",
    );
    plinth.eventually("the pool is scaled through /scale", || {
        plinth.json(&["get", "pool", "workers"])["spec"]["replicas"] == 3
    });
    let limited = plinth.json(&["get", "horizontalpodautoscalers.v2.autoscaling", "workers"]);
    let conditions = limited["status"]["conditions"].as_array().unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "ScalingLimited" && c["reason"] == "TooManyReplicas"),
        "{limited}"
    );

    // Bad autoscalers are refused with kube's messages.
    let out = plinth.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: bad}\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: x}\n  minReplicas: 3\n  maxReplicas: 2\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`"
        ),
        "{stderr}"
    );
    let out = plinth.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: bad}\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, name: x}\n  maxReplicas: 2\n  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 0}}}]\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("spec.scaleTargetRef.kind: Required value"),
        "{stderr}"
    );
    assert!(
        stderr.contains("averageUtilization: Invalid value: 0: must be greater than 0"),
        "{stderr}"
    );
    assert!(
        !plinth
            .kubectl_output(&["get", "hpa", "bad"])
            .status
            .success()
    );
}

#[test]
fn a_rollout_survives_a_server_restart_without_duplicate_or_orphaned_pods() {
    let mut plinth = with_node("node-k");
    let manifest = |tag: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: steady}}\nspec:\n  replicas: 4\n  selector: {{matchLabels: {{app: steady}}}}\n  strategy: {{rollingUpdate: {{maxSurge: 1, maxUnavailable: 0}}}}\n  template:\n    metadata: {{labels: {{app: steady}}}}\n    spec:\n      terminationGracePeriodSeconds: 1\n      containers: [{{name: main, image: 'busybox:{tag}', command: [sleep, '3600'], readinessProbe: {{exec: {{command: ['true']}}, initialDelaySeconds: 2, periodSeconds: 1}}}}]\n"
        )
    };
    plinth.kubectl_with(&["apply", "-f", "-"], &manifest("1.36"));
    rollout_status(&plinth, "deploy/steady");
    plinth.kubectl_with(&["apply", "-f", "-"], &manifest("1.37"));
    plinth.eventually("the rollout has begun", || {
        replica_sets(&plinth, "steady")
            .iter()
            .any(|s| s.2.contains("1.37") && s.1 >= 1)
    });
    // SIGKILL mid-rollout; the restarted server (controllers and agent) finishes it.
    plinth.kill_and_restart();
    plinth.eventually("the server answers again", || {
        plinth
            .kubectl_output(&["get", "deploy", "steady"])
            .status
            .success()
    });
    rollout_status(&plinth, "deploy/steady");
    let sets = replica_sets(&plinth, "steady");
    assert_eq!(sets.len(), 2, "{sets:?}");
    let new = sets.iter().find(|s| s.2.contains("1.37")).unwrap();
    assert_eq!(new.1, 4, "{sets:?}");
    plinth.eventually("only the new pods remain", || {
        let pods = plinth.json(&["get", "pods", "-l", "app=steady"]);
        let items = pods["items"].as_array().cloned().unwrap_or_default();
        let live: Vec<&Value> = items
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        live.len() == 4
            && live.iter().all(|p| {
                p["metadata"]["ownerReferences"][0]["name"] == new.0.as_str()
                    && p["metadata"]["ownerReferences"][0]["controller"] == true
            })
    });
    // And every pod there is has a controller: none orphaned, none doubled.
    let pods = plinth.json(&["get", "pods"]);
    for pod in pods["items"].as_array().unwrap() {
        assert!(
            pod["metadata"]["ownerReferences"][0]["controller"] == true,
            "{pod}"
        );
    }
}

#[test]
fn a_stuck_rollout_exceeds_its_deadline_and_scales_in_proportion() {
    let plinth = with_node("node-p");
    let manifest = |image: &str, replicas: u32| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: stuck}}\nspec:\n  replicas: {replicas}\n  progressDeadlineSeconds: 5\n  selector: {{matchLabels: {{app: stuck}}}}\n  template:\n    metadata: {{labels: {{app: stuck}}}}\n    spec:\n      terminationGracePeriodSeconds: 1\n      containers: [{{name: main, image: '{image}', command: [sleep, '3600']}}]\n"
        )
    };
    plinth.kubectl_with(&["apply", "-f", "-"], &manifest("busybox:1.36", 4));
    rollout_status(&plinth, "deploy/stuck");
    // An image the node cannot run: the new pods never become ready.
    plinth.kubectl_with(&["apply", "-f", "-"], &manifest("example.com/never:1", 4));
    let out = plinth.kubectl_output(&["rollout", "status", "deploy/stuck", "--timeout=120s"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(said.contains("exceeded its progress deadline"), "{said}");
    let deployment = plinth.json(&["get", "deploy", "stuck"]);
    let progressing = deployment["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Progressing")
        .cloned()
        .unwrap();
    assert_eq!(progressing["status"], "False");
    assert_eq!(progressing["reason"], "ProgressDeadlineExceeded");
    // Scaling mid-rollout shares the new replicas between both ReplicaSets.
    let before = replica_sets(&plinth, "stuck");
    assert_eq!(before.iter().map(|s| s.1).sum::<i64>(), 5, "{before:?}");
    plinth.kubectl(&["scale", "deploy", "stuck", "--replicas=8"]);
    plinth.eventually("both ReplicaSets grow", || {
        let after = replica_sets(&plinth, "stuck");
        let total: i64 = after.iter().map(|s| s.1).sum();
        total == 10
            && after.iter().all(|a| {
                before
                    .iter()
                    .find(|b| b.0 == a.0)
                    .is_some_and(|b| a.1 > b.1)
            })
    });
}

#[test]
fn a_parallel_stateful_set_with_a_partition_and_an_ordinal_start() {
    let plinth = with_node("node-q");
    let manifest = |word: &str, partition: u32| {
        format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: shard}}\nspec:\n  replicas: 3\n  ordinals: {{start: 5}}\n  podManagementPolicy: Parallel\n  updateStrategy: {{rollingUpdate: {{partition: {partition}}}}}\n  selector: {{matchLabels: {{app: shard}}}}\n  template:\n    metadata: {{labels: {{app: shard}}, annotations: {{word: {word}}}}}\n    spec:\n      terminationGracePeriodSeconds: 1\n      containers: [{{name: main, image: 'busybox:1.36', command: [sleep, '3600']}}]\n"
        )
    };
    plinth.kubectl_with(&["apply", "-f", "-"], &manifest("one", 0));
    rollout_status(&plinth, "sts/shard");
    let names = || {
        let pods = plinth.json(&["get", "pods", "-l", "app=shard"]);
        let mut names: Vec<(String, String)> = pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .map(|p| {
                (
                    p["metadata"]["name"].as_str().unwrap().to_owned(),
                    p["metadata"]["annotations"]["word"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                )
            })
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names().iter().map(|n| n.0.as_str()).collect::<Vec<_>>(),
        ["shard-5", "shard-6", "shard-7"]
    );
    // partition 2: only the ordinals from start + 2 up are updated.
    plinth.kubectl_with(&["apply", "-f", "-"], &manifest("two", 2));
    plinth.eventually("shard-7 runs the new template, the others the old", || {
        names()
            == [
                ("shard-5".to_owned(), "one".to_owned()),
                ("shard-6".to_owned(), "one".to_owned()),
                ("shard-7".to_owned(), "two".to_owned()),
            ]
    });
    let set = plinth.json(&["get", "sts", "shard"]);
    assert_ne!(
        set["status"]["currentRevision"],
        set["status"]["updateRevision"]
    );
    assert_eq!(set["status"]["updatedReplicas"], 1);
}

#[test]
fn deadlines_concurrency_policies_and_on_delete_updates_behave_as_kubes() {
    let plinth = with_node("node-o");
    // activeDeadlineSeconds ends a Job that runs too long.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: slow}\nspec:\n  activeDeadlineSeconds: 2\n  template:\n    spec:\n      restartPolicy: Never\n      terminationGracePeriodSeconds: 1\n      containers: [{name: c, image: 'busybox:1.36', command: [sleep, '3600']}]\n",
    );
    plinth.kubectl(&[
        "wait",
        "--for=condition=failed",
        "job/slow",
        "--timeout=120s",
    ]);
    let failed = job_condition(&plinth, "slow", "Failed").unwrap();
    assert_eq!(failed["reason"], "DeadlineExceeded");
    assert_eq!(
        failed["message"],
        "Job was active longer than specified deadline"
    );
    plinth.eventually("its pod is stopped", || running_pods(&plinth, "slow") == 0);

    // Forbid: while one runs, no other starts; Replace: the running one gives way.
    let cron = |name: &str, policy: &str| {
        format!(
            "apiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: {name}}}\nspec:\n  schedule: '@every 2s'\n  concurrencyPolicy: {policy}\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          terminationGracePeriodSeconds: 1\n          containers: [{{name: c, image: 'busybox:1.36', command: [sleep, '3600']}}]\n"
        )
    };
    let jobs_of = |cronjob: &str| -> Vec<String> {
        let jobs = plinth.json(&["get", "jobs"]);
        jobs["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["metadata"]["ownerReferences"][0]["name"] == cronjob)
            .filter(|j| j["metadata"]["deletionTimestamp"].is_null())
            .map(|j| j["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    plinth.kubectl_with(&["apply", "-f", "-"], &cron("forbid", "Forbid"));
    plinth.eventually("a later run is skipped while the first runs", || {
        let events = plinth.kubectl(&[
            "get",
            "events",
            "--field-selector",
            "reason=JobAlreadyActive",
        ]);
        events.contains("Not starting job because prior execution is running")
    });
    assert_eq!(jobs_of("forbid").len(), 1, "{:?}", jobs_of("forbid"));
    plinth.kubectl(&[
        "patch",
        "cronjob",
        "forbid",
        "--type=merge",
        "-p",
        r#"{"spec":{"suspend":true}}"#,
    ]);
    plinth.kubectl_with(&["apply", "-f", "-"], &cron("replace", "Replace"));
    plinth.eventually("a first run", || jobs_of("replace").len() == 1);
    let first = jobs_of("replace")[0].clone();
    plinth.eventually("the next run replaces it", || {
        let now = jobs_of("replace");
        now.len() == 1 && now[0] != first
    });
    plinth.kubectl(&[
        "patch",
        "cronjob",
        "replace",
        "--type=merge",
        "-p",
        r#"{"spec":{"suspend":true}}"#,
    ]);

    // OnDelete: a new template reaches a StatefulSet's pods only as they are deleted.
    let set = |word: &str| {
        format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: manual}}\nspec:\n  replicas: 2\n  updateStrategy: {{type: OnDelete}}\n  selector: {{matchLabels: {{app: manual}}}}\n  template:\n    metadata: {{labels: {{app: manual}}, annotations: {{word: {word}}}}}\n    spec:\n      terminationGracePeriodSeconds: 1\n      containers: [{{name: main, image: 'busybox:1.36', command: [sleep, '3600']}}]\n"
        )
    };
    plinth.kubectl_with(&["apply", "-f", "-"], &set("one"));
    // (kubectl rollout status refuses OnDelete sets, as against kube.)
    plinth.eventually("both pods are ready", || {
        plinth.json(&["get", "sts", "manual"])["status"]["readyReplicas"] == 2
    });
    plinth.kubectl_with(&["apply", "-f", "-"], &set("two"));
    plinth.eventually("the set records the new revision", || {
        let s = plinth.json(&["get", "sts", "manual"]);
        s["status"]["observedGeneration"] == 2
            && s["status"]["currentRevision"] != s["status"]["updateRevision"]
    });
    let word = |pod: &str| {
        plinth.json(&["get", "pod", pod])["metadata"]["annotations"]["word"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(
        (word("manual-0"), word("manual-1")),
        ("one".to_owned(), "one".to_owned())
    );
    plinth.kubectl(&["delete", "pod", "manual-1"]);
    plinth.eventually("manual-1 comes back with the new template", || {
        plinth
            .kubectl_output(&["get", "pod", "manual-1"])
            .status
            .success()
            && word("manual-1") == "two"
    });
    assert_eq!(word("manual-0"), "one");
}

/// `kubectl create` of each manifest fails with its expected message.
fn refused_all(plinth: &Plinth, cases: &[(&str, &str)]) {
    for (manifest, expected) in cases {
        let out = plinth.kubectl_stdin(&["create", "-f", "-"], manifest);
        assert!(!out.status.success(), "refused: {manifest}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{expected:?} in {stderr}");
    }
}

/// The value of the series `name` (labels included) in a `/metrics` text, if it is there.
fn series(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
}

#[test]
fn the_workload_controllers_share_one_informer_per_resource() {
    let plinth = Plinth::start(Backend::Embedded);
    // The controllers start once this server holds their Lease; then `/metrics` shows their
    // informers: one of pods, heard by the eleven controllers that follow pods (ReplicaSet,
    // ReplicationController, Deployment, StatefulSet, DaemonSet, Job, disruption budget,
    // scheduler, endpoints, node lifecycle, and the garbage collector, which joins the
    // informers it finds).
    let mut metrics = String::new();
    plinth.eventually("the controllers' informers are shown", || {
        metrics = plinth.kubectl(&["get", "--raw", "/metrics"]);
        series(&metrics, r#"plinth_informer_handlers{resource="pods"}"#).is_some_and(|n| n >= 11.0)
    });
    for resource in [
        "pods",
        "replicasets.apps",
        "replicationcontrollers",
        "deployments.apps",
        "statefulsets.apps",
        "controllerrevisions.apps",
        "jobs.batch",
        "nodes",
        "services",
        "namespaces",
        "resourcequotas",
        "persistentvolumeclaims",
    ] {
        assert_eq!(
            series(
                &metrics,
                &format!(r#"plinth_informers{{resource="{resource}"}}"#)
            ),
            Some(1.0),
            "one informer of {resource}:\n{metrics}"
        );
    }
    assert_eq!(
        series(&metrics, r#"plinth_informer_handlers{resource="pods"}"#),
        Some(11.0),
        "{metrics}"
    );
    // Several controllers follow ReplicaSets (their own, the Deployment's, the budget's).
    assert!(
        series(
            &metrics,
            r#"plinth_informer_handlers{resource="replicasets.apps"}"#
        )
        .is_some_and(|n| n >= 3.0),
        "{metrics}"
    );
}

/// A write through `/status` keeps what the type's kube strategy keeps: a Deployment's new
/// status and annotations, its stored spec and labels; a custom resource's new status only.
#[test]
fn status_writes_keep_what_each_types_strategy_keeps() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.kubectl(&[
        "create",
        "deployment",
        "st",
        "--image=busybox",
        "--replicas=0",
    ]);
    let mut deployment = plinth.json(&["get", "deployment", "st"]);
    deployment["metadata"]["annotations"] = serde_json::json!({"note": "from-status"});
    deployment["metadata"]["labels"] = serde_json::json!({"app": "changed"});
    deployment["spec"]["replicas"] = serde_json::json!(5);
    deployment["status"] = serde_json::json!({"observedGeneration": 7});
    plinth.kubectl_with(
        &["replace", "--subresource=status", "-f", "-"],
        &deployment.to_string(),
    );
    let stored = plinth.json(&["get", "deployment", "st"]);
    assert_eq!(
        stored["metadata"]["annotations"]["note"], "from-status",
        "{stored}"
    );
    assert_eq!(
        stored["metadata"]["labels"],
        serde_json::json!({"app": "st"})
    );
    assert_eq!(stored["spec"]["replicas"], 0);

    // A Namespace's keeps the request's metadata (the conformance suite's "apply changes to
    // a namespace status") and the stored spec.
    plinth.kubectl(&["create", "namespace", "st-ns"]);
    plinth.kubectl(&[
        "patch",
        "namespace",
        "st-ns",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"metadata":{"annotations":{"note":"from-status"}},"spec":{"finalizers":[]},"status":{"conditions":[{"type":"StatusPatch","status":"True","reason":"E2E"}]}}"#,
    ]);
    let ns = plinth.json(&["get", "namespace", "st-ns"]);
    assert_eq!(ns["metadata"]["annotations"]["note"], "from-status", "{ns}");
    assert_eq!(ns["spec"]["finalizers"], serde_json::json!(["kubernetes"]));
    assert_eq!(ns["status"]["conditions"][0]["reason"], "E2E");

    // A Job's (and the other legacy strategies': Service, PodDisruptionBudget, …) keeps the
    // request's metadata and the stored spec (the suite's "apply changes to a job status").
    plinth.kubectl(&["create", "job", "st-job", "--image=busybox", "--", "true"]);
    // The answer to the patch itself: the Job controller writes the status too.
    let patched = plinth.kubectl(&[
        "patch",
        "job",
        "st-job",
        "-o",
        "json",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"metadata":{"annotations":{"patchedstatus":"true"}},"spec":{"parallelism":9},"status":{"conditions":[{"type":"CustomConditionType","status":"True","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#,
    ]);
    let job: Value = serde_json::from_str(&patched).unwrap();
    assert_eq!(
        job["metadata"]["annotations"]["patchedstatus"], "true",
        "{job}"
    );
    assert_eq!(job["spec"]["parallelism"], 1, "{job}");
    assert!(
        job["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "CustomConditionType"),
        "{job}"
    );

    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gauges.status.example.com"},
            "spec": {"group": "status.example.com", "scope": "Namespaced",
              "names": {"plural": "gauges", "singular": "gauge", "kind": "Gauge"},
              "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object",
                  "x-kubernetes-preserve-unknown-fields": true}}}]}}"#,
    );
    plinth.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/gauges.status.example.com",
        "--timeout=60s",
    ]);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "status.example.com/v1", "kind": "Gauge",
            "metadata": {"name": "g", "labels": {"a": "b"}}, "spec": {"level": 1}}"#,
    );
    let mut gauge = plinth.json(&["get", "gauge", "g"]);
    gauge["metadata"]["annotations"] = serde_json::json!({"note": "from-status"});
    gauge["spec"]["level"] = serde_json::json!(2);
    gauge["status"] = serde_json::json!({"seen": true});
    plinth.kubectl_with(
        &["replace", "--subresource=status", "-f", "-"],
        &gauge.to_string(),
    );
    let stored = plinth.json(&["get", "gauge", "g"]);
    assert_eq!(stored["status"]["seen"], true, "{stored}");
    assert_eq!(stored["spec"]["level"], 1);
    assert_eq!(
        stored["metadata"]["annotations"]["note"],
        Value::Null,
        "{stored}"
    );
}
