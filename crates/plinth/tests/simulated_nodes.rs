//! Simulated nodes (`plinth serve --simulate-nodes N`, `plinth node --simulate N`) beside a
//! real agent, through kubectl: their pods move through their phases without processes and
//! obey Deployments, Jobs (completions, failures by exit code), StatefulSets (ordered),
//! PodDisruptionBudgets (evictions allowed and refused by readiness) and taint eviction
//! (a `NoExecute` taint, and a simulator that stops heartbeating); a pod pinned to the real
//! node runs as a process meanwhile.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Backend, Plinth, Stopped};
use serde_json::Value;

fn json(plinth: &Plinth, args: &[&str]) -> Value {
    let out = plinth.kubectl_output(args);
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn items(plinth: &Plinth, args: &[&str]) -> Vec<Value> {
    json(plinth, args)["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn node_of(pod: &Value) -> &str {
    pod["spec"]["nodeName"].as_str().unwrap_or("")
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn status_number(plinth: &Plinth, what: &str, field: &str) -> i64 {
    json(plinth, &["get", what, "-o", "json"])["status"][field]
        .as_i64()
        .unwrap_or(-1)
}

/// The pods of `app` (not being deleted).
fn app_pods(plinth: &Plinth, app: &str) -> Vec<Value> {
    items(
        plinth,
        &["get", "pods", "-l", &format!("app={app}"), "-o", "json"],
    )
    .into_iter()
    .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
    .collect()
}

fn evict(plinth: &Plinth, pod: &str) -> std::process::Output {
    let body = format!(
        r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"{pod}","namespace":"default"}}}}"#
    );
    plinth.kubectl_stdin(
        &[
            "create",
            "--raw",
            &format!("/api/v1/namespaces/default/pods/{pod}/eviction"),
            "-f",
            "-",
        ],
        &body,
    )
}

#[test]
fn simulated_pods_obey_workloads_budgets_and_taints_beside_a_real_node() {
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &[
            "--node-name",
            "real-1",
            "--simulate-nodes",
            "4",
            "--simulate-start-delay",
            "200ms",
            "--simulate-run-for",
            "300ms",
        ],
    );
    plinth.eventually("the real node and four simulated ones are Ready", || {
        let nodes = items(&plinth, &["get", "nodes", "-o", "json"]);
        let ready = |n: &Value| {
            n["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        };
        nodes.len() == 5 && nodes.iter().all(ready)
    });
    let simulated = plinth.kubectl(&[
        "get",
        "nodes",
        "-l",
        "node.plinth.dev/simulated=true",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    assert_eq!(simulated.trim(), "sim-0 sim-1 sim-2 sim-3");
    let cidr = plinth.kubectl(&["get", "node", "sim-2", "-o", "jsonpath={.spec.podCIDR}"]);
    assert_eq!(cidr.trim(), "127.128.2.0/24");

    // A Deployment kept to the simulated nodes: every replica Running and Ready, each at an
    // address of its node's range.
    let deployment = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 20
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {node.plinth.dev/simulated: "true"}
      containers: [{name: web, image: nginx:1.27, resources: {requests: {cpu: 100m}}}]
"#;
    plinth.kubectl_with(&["apply", "-f", "-"], deployment);
    plinth.eventually("the Deployment's 20 replicas are available", || {
        status_number(&plinth, "deployment/web", "availableReplicas") == 20
    });
    let pods = app_pods(&plinth, "web");
    assert_eq!(pods.len(), 20);
    let mut nodes_used = std::collections::BTreeSet::new();
    for pod in &pods {
        let node = node_of(pod);
        assert!(node.starts_with("sim-"), "{node}");
        nodes_used.insert(node.to_owned());
        assert_eq!(pod["status"]["phase"], "Running");
        assert!(ready(pod), "{pod}");
        let index: usize = node.trim_start_matches("sim-").parse().unwrap();
        let ip = pod["status"]["podIP"].as_str().unwrap();
        assert!(
            ip.starts_with(&format!("127.128.{index}.")),
            "{ip} on {node}"
        );
        assert!(
            pod["status"]["containerStatuses"][0]["state"]["running"].is_object(),
            "{pod}"
        );
    }
    assert!(
        nodes_used.len() > 1,
        "the scheduler spread them: {nodes_used:?}"
    );
    let ips: std::collections::BTreeSet<&str> = pods
        .iter()
        .map(|p| p["status"]["podIP"].as_str().unwrap())
        .collect();
    assert_eq!(ips.len(), 20, "every pod has an address of its own");

    // A real pod on the real node meanwhile: a process that prints.
    plinth.kubectl(&[
        "run",
        "real",
        "--image=busybox:1.36",
        "--restart=Never",
        "--overrides",
        r#"{"spec":{"nodeName":"real-1"}}"#,
        "--",
        "sh",
        "-c",
        "echo from-a-process",
    ]);
    plinth.eventually("the real pod ran to completion", || {
        plinth
            .kubectl(&["get", "pod", "real", "-o", "jsonpath={.status.phase}"])
            .trim()
            == "Succeeded"
    });
    assert!(plinth.kubectl(&["logs", "real"]).contains("from-a-process"));

    // Jobs: completions counted as their pods exit 0; a pod that exits 1 each run fails the
    // Job past its backoff limit.
    let jobs = r#"apiVersion: batch/v1
kind: Job
metadata: {name: batch}
spec:
  completions: 4
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {node.plinth.dev/simulated: "true"}
      containers: [{name: work, image: busybox:1.36}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: broken}
spec:
  backoffLimit: 1
  template:
    metadata: {annotations: {sim.plinth.dev/exit-code: "1"}}
    spec:
      restartPolicy: Never
      nodeSelector: {node.plinth.dev/simulated: "true"}
      containers: [{name: work, image: busybox:1.36}]
"#;
    plinth.kubectl_with(&["apply", "-f", "-"], jobs);
    plinth.eventually("the Job completes 4 of 4", || {
        let job = json(&plinth, &["get", "job", "batch", "-o", "json"]);
        job["status"]["succeeded"] == 4
            && job["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Complete" && c["status"] == "True")
    });
    plinth.eventually("the broken Job fails past its backoff limit", || {
        json(&plinth, &["get", "job", "broken", "-o", "json"])["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "Failed"
                    && c["status"] == "True"
                    && c["reason"] == "BackoffLimitExceeded"
            })
    });
    let failed = items(
        &plinth,
        &["get", "pods", "-l", "job-name=broken", "-o", "json"],
    );
    assert_eq!(failed.len(), 2, "the first run and one retry");
    for pod in &failed {
        assert_eq!(pod["status"]["phase"], "Failed");
        assert_eq!(
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            1
        );
    }

    // A StatefulSet: ordered pods, each started only once the one before is Ready.
    let set = r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 3
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      nodeSelector: {node.plinth.dev/simulated: "true"}
      containers: [{name: db, image: redis:7}]
"#;
    plinth.kubectl_with(&["apply", "-f", "-"], set);
    plinth.eventually("the StatefulSet's 3 pods are ready", || {
        status_number(&plinth, "statefulset/db", "readyReplicas") == 3
    });
    let mut db: Vec<Value> = app_pods(&plinth, "db");
    db.sort_by_key(|p| p["metadata"]["name"].as_str().unwrap().to_owned());
    let names: Vec<&str> = db
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["db-0", "db-1", "db-2"]);
    // OrderedReady: each pod was created no earlier than its predecessor became Ready.
    for pair in db.windows(2) {
        let ready_at = pair[0]["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()["lastTransitionTime"]
            .as_str()
            .unwrap()
            .to_owned();
        let created = pair[1]["metadata"]["creationTimestamp"].as_str().unwrap();
        assert!(created >= ready_at.as_str(), "{created} before {ready_at}");
    }

    // A PodDisruptionBudget: an eviction within it goes; one past it is refused with kube's
    // reason while the replacement is not Ready (it never will be: its template says so).
    let budget = r#"apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 19
  selector: {matchLabels: {app: web}}
"#;
    plinth.kubectl_with(&["apply", "-f", "-"], budget);
    plinth.eventually("the budget allows one disruption", || {
        status_number(&plinth, "pdb/web", "disruptionsAllowed") == 1
    });
    let first = app_pods(&plinth, "web")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = evict(&plinth, &first);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    plinth.eventually(
        "the evicted pod is replaced and the budget allows one again",
        || {
            let pods = app_pods(&plinth, "web");
            pods.len() == 20
                && pods.iter().all(ready)
                && pods.iter().all(|p| p["metadata"]["name"] != first.as_str())
                && status_number(&plinth, "pdb/web", "disruptionsAllowed") == 1
        },
    );
    // A rollout whose new pods never turn Ready (their template says so) takes one old pod
    // down and stalls: 19 healthy, the budget's minimum.
    plinth.kubectl(&[
        "patch",
        "deployment",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"strategy":{"rollingUpdate":{"maxSurge":0,"maxUnavailable":1}},"template":{"metadata":{"annotations":{"sim.plinth.dev/ready":"false"}}}}}"#,
    ]);
    plinth.eventually("the new pod runs, not ready, beside 19 ready", || {
        let pods = app_pods(&plinth, "web");
        pods.len() == 20
            && pods
                .iter()
                .filter(|p| p["status"]["phase"] == "Running" && !ready(p))
                .count()
                == 1
    });
    plinth.eventually("the budget allows no disruption", || {
        status_number(&plinth, "pdb/web", "disruptionsAllowed") == 0
    });
    let second = app_pods(&plinth, "web").into_iter().find(ready).unwrap()["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = evict(&plinth, &second);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Cannot evict pod as it would violate the pod's disruption budget"),
        "{stderr}"
    );
    assert!(
        plinth
            .kubectl_output(&["get", "pod", &second])
            .status
            .success(),
        "a refused eviction leaves the pod"
    );
    plinth.kubectl(&["delete", "pdb", "web"]);

    // A NoExecute taint: the node's pods that do not tolerate it go, their replacements land
    // elsewhere.
    plinth.kubectl(&["taint", "node", "sim-0", "maintenance=now:NoExecute"]);
    plinth.eventually("no pod of web is left on sim-0", || {
        let pods = app_pods(&plinth, "web");
        pods.len() == 20 && pods.iter().all(|p| node_of(p) != "sim-0")
    });
    let events = plinth.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "reason=TaintManagerEviction",
    ]);
    assert!(events.contains("TaintManagerEviction"), "{events}");
}

#[test]
fn a_simulator_that_stops_leaves_its_nodes_unreachable_and_its_pods_evicted() {
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &[
            "--simulate-nodes",
            "2",
            "--node-monitor-grace-period",
            "6s",
            "--node-monitor-period",
            "1s",
            "--default-unreachable-toleration-seconds",
            "2",
        ],
    );
    // A second simulator, a process of its own: `plinth node --simulate`.
    let outside = std::process::Command::new(env!("CARGO_BIN_EXE_plinth"))
        .args(["node", "--kubeconfig"])
        .arg(&plinth.kubeconfig)
        .args([
            "--simulate",
            "2",
            "--simulate-prefix",
            "away",
            "--node-status-update-frequency",
            "1s",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut outside = Stopped(Some(outside));
    plinth.eventually("four simulated nodes are Ready", || {
        plinth
            .kubectl(&["get", "nodes", "--no-headers"])
            .lines()
            .filter(|l| l.contains(" Ready "))
            .count()
            == 4
    });
    // Pods only on the outside simulator's nodes at first.
    plinth.kubectl(&["cordon", "sim-0", "sim-1"]);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  replicas: 6
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: api, image: nginx:1.27}]
"#,
    );
    plinth.eventually("six pods run on the outside simulator's nodes", || {
        let pods = app_pods(&plinth, "api");
        pods.len() == 6
            && pods
                .iter()
                .all(|p| node_of(p).starts_with("away-") && ready(p))
    });
    plinth.kubectl(&["uncordon", "sim-0", "sim-1"]);
    // The outside simulator stops (killed by its PID): its nodes go Unknown and tainted, and
    // their pods are evicted to the nodes still heard from.
    let mut child = outside.0.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    plinth.eventually("the outside nodes are unreachable", || {
        ["away-0", "away-1"].iter().all(|n| {
            let taints = plinth.kubectl(&["get", "node", n, "-o", "jsonpath={.spec.taints}"]);
            taints.contains("node.kubernetes.io/unreachable")
        })
    });
    plinth.eventually("the six pods run again on sim-0 and sim-1", || {
        let pods = app_pods(&plinth, "api");
        pods.len() == 6
            && pods
                .iter()
                .all(|p| node_of(p).starts_with("sim-") && ready(p))
    });
}
