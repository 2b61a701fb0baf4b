//! Pods that run, end to end through kubectl against `plinth serve` with its node agent:
//! real `redis-server` processes behind a tcpSocket probe, logs, graceful deletion, kube's
//! crash-loop and image errors, finished pods, namespaces that keep pods apart, ConfigMap
//! volumes that follow their ConfigMap, the scheduler's refusals — and bad pods refused with
//! kube's 422s, nothing stored.

#![allow(clippy::unwrap_used)]

mod common;

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

fn pod(plinth: &Plinth, name: &str) -> Value {
    plinth.json(&["get", "pod", name])
}

fn container_status(plinth: &Plinth, name: &str) -> Value {
    pod(plinth, name)["status"]["containerStatuses"][0].clone()
}

fn logs(plinth: &Plinth, args: &[&str]) -> String {
    let mut full = vec!["logs"];
    full.extend(args);
    String::from_utf8_lossy(&plinth.kubectl_output(&full).stdout).into_owned()
}

fn redis_answers(ip: &str) -> bool {
    std::process::Command::new("redis-cli")
        .args(["-h", ip, "ping"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG")
}

const REDIS: &str = r"apiVersion: v1
kind: Pod
metadata: {name: redis, labels: {app: redis}}
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: redis
    image: redis:7
    ports: [{name: redis, containerPort: 6379}]
    readinessProbe:
      tcpSocket: {port: redis}
      periodSeconds: 1
";

#[test]
fn a_redis_pod_becomes_ready_answers_logs_and_stops_when_deleted() {
    let plinth = with_node("node-a");
    plinth.kubectl_with(&["apply", "-f", "-"], REDIS);
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/redis",
        "--timeout=120s",
    ]);
    let pod = pod(&plinth, "redis");
    let ip = pod["status"]["podIP"].as_str().unwrap().to_owned();
    assert!(ip.starts_with("127.64."), "a loopback pod address: {ip}");
    assert_eq!(pod["spec"]["nodeName"], "node-a");
    assert_eq!(pod["status"]["phase"], "Running");
    assert_eq!(pod["status"]["qosClass"], "BestEffort");
    assert_eq!(pod["status"]["containerStatuses"][0]["ready"], true);
    assert!(redis_answers(&ip), "redis-cli -h {ip} ping answers PONG");

    let wide = plinth.kubectl(&["get", "pod", "redis", "-o", "wide", "--no-headers"]);
    let columns: Vec<&str> = wide.split_whitespace().collect();
    assert_eq!(&columns[..3], ["redis", "1/1", "Running"], "{wide}");
    assert!(
        columns.contains(&ip.as_str()) && columns.contains(&"node-a"),
        "{wide}"
    );

    plinth.eventually("kubectl logs shows redis starting", || {
        logs(&plinth, &["redis"]).contains("Ready to accept connections")
    });
    let tail = logs(&plinth, &["redis", "--tail=1", "--timestamps"]);
    assert_eq!(tail.lines().count(), 1, "{tail}");
    assert!(tail.starts_with("20"), "a timestamp first: {tail}");
    let previous = plinth.kubectl_fails(&["logs", "redis", "--previous"]);
    assert!(
        previous.contains("previous terminated container \"redis\" in pod \"redis\" not found"),
        "{previous}"
    );
    let events = plinth.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=redis",
    ]);
    assert!(
        events.contains("Successfully assigned default/redis to node-a"),
        "{events}"
    );

    // kubectl delete waits for the pod to be gone: the agent stopped redis first.
    plinth.kubectl(&["delete", "pod", "redis", "--timeout=60s"]);
    assert!(!redis_answers(&ip), "redis is stopped with its pod");
}

#[test]
fn containers_crash_loop_finish_and_report_unmapped_images_as_kube_does() {
    let plinth = with_node("node-b");
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"apiVersion: v1
kind: Pod
metadata: {name: crash}
spec:
  containers:
  - {name: main, image: busybox:1.36, command: [sh, -c, "echo boom; exit 3"]}
---
apiVersion: v1
kind: Pod
metadata: {name: unmapped}
spec:
  containers:
  - {name: web, image: "nginx:1.27"}
---
apiVersion: v1
kind: Pod
metadata: {name: done}
spec:
  restartPolicy: Never
  containers:
  - {name: main, image: busybox:1.36, command: [sh, -c, "echo finished"]}
---
apiVersion: v1
kind: Pod
metadata: {name: failed}
spec:
  restartPolicy: Never
  containers:
  - {name: main, image: busybox:1.36, command: [sh, -c, "exit 2"]}
"#,
    );
    plinth.eventually("the crashing container is in CrashLoopBackOff", || {
        let status = container_status(&plinth, "crash");
        status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
            && status["lastState"]["terminated"]["exitCode"] == 3
    });
    let status = container_status(&plinth, "crash");
    assert_eq!(status["lastState"]["terminated"]["reason"], "Error");
    assert!(
        status["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .starts_with("back-off 10s restarting failed container=main pod=crash_default("),
        "{status}"
    );
    let row = plinth.kubectl(&["get", "pod", "crash", "--no-headers"]);
    assert!(row.contains("CrashLoopBackOff"), "{row}");
    plinth.eventually("the container restarted", || {
        container_status(&plinth, "crash")["restartCount"]
            .as_i64()
            .unwrap_or(0)
            >= 1
    });
    plinth.eventually("the previous run's log", || {
        logs(&plinth, &["crash", "--previous"]).contains("boom")
    });

    plinth.eventually("an unmapped image waits with a clear reason", || {
        container_status(&plinth, "unmapped")["state"]["waiting"]["reason"] == "ErrImagePull"
    });
    let waiting = container_status(&plinth, "unmapped")["state"]["waiting"].clone();
    assert!(
        waiting["message"]
            .as_str()
            .unwrap()
            .contains("\"nginx:1.27\" is not in this node's image map"),
        "{waiting}"
    );

    plinth.eventually("a finished pod Succeeded", || {
        pod(&plinth, "done")["status"]["phase"] == "Succeeded"
    });
    let done = container_status(&plinth, "done");
    assert_eq!(done["state"]["terminated"]["reason"], "Completed");
    assert_eq!(done["state"]["terminated"]["exitCode"], 0);
    let row = plinth.kubectl(&["get", "pod", "done", "--no-headers"]);
    assert!(row.contains("0/1") && row.contains("Completed"), "{row}");
    assert!(logs(&plinth, &["done"]).contains("finished"));

    plinth.eventually("a failed pod Failed", || {
        pod(&plinth, "failed")["status"]["phase"] == "Failed"
    });
    let failed = container_status(&plinth, "failed");
    assert_eq!(failed["state"]["terminated"]["exitCode"], 2);
    let row = plinth.kubectl(&["get", "pod", "failed", "--no-headers"]);
    assert!(row.contains("Error"), "{row}");
    plinth.kubectl(&["delete", "pod", "--all", "--timeout=60s"]);
}

#[test]
fn pods_see_neither_each_others_files_nor_processes_and_config_maps_follow() {
    let plinth = with_node("node-c");
    plinth.kubectl(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=mode=first",
    ]);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"apiVersion: v1
kind: Pod
metadata: {name: writer}
spec:
  volumes: [{name: scratch, emptyDir: {}}]
  containers:
  - name: main
    image: busybox:1.36
    command: [sh, -c, "echo secret > /data/mine; sleep 3600"]
    volumeMounts: [{name: scratch, mountPath: /data}]
---
apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: settings, configMap: {name: settings}}
  containers:
  - name: main
    image: busybox:1.36
    command: [sh, -c, "sleep 2; echo files=$(ls -A /data | wc -l); echo processes=$(ls /proc | grep -c '^[0-9]'); while true; do echo mode=$(cat /config/mode); sleep 1; done"]
    volumeMounts:
    - {name: scratch, mountPath: /data}
    - {name: settings, mountPath: /config}
"#,
    );
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/writer",
        "pod/reader",
        "--timeout=120s",
    ]);
    plinth.eventually("the reader reports what it sees", || {
        logs(&plinth, &["reader"]).contains("mode=first")
    });
    let seen = logs(&plinth, &["reader"]);
    assert!(
        seen.contains("files=0"),
        "the writer's file is not in the reader's /data: {seen}"
    );
    let processes: usize = seen
        .lines()
        .find_map(|l| l.strip_prefix("processes="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    assert!(
        processes < 10,
        "the reader sees its own few processes, not the machine's: {processes}"
    );
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: second}\n",
    );
    plinth.eventually("the ConfigMap's new value reaches the file", || {
        logs(&plinth, &["reader"]).contains("mode=second")
    });
    plinth.kubectl(&[
        "delete",
        "pod",
        "--all",
        "--grace-period=1",
        "--timeout=60s",
    ]);
}

#[test]
fn pods_that_fit_nowhere_get_kubes_failed_scheduling() {
    let plinth = with_node("node-d");
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r"apiVersion: v1
kind: Pod
metadata: {name: picky}
spec:
  nodeSelector: {disk: ssd}
  containers: [{name: main, image: busybox:1.36, command: [sleep, '3600']}]
---
apiVersion: v1
kind: Pod
metadata: {name: greedy}
spec:
  containers:
  - name: main
    image: busybox:1.36
    command: [sleep, '3600']
    resources: {requests: {cpu: '5000'}}
",
    );
    let wanted = [
        (
            "picky",
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        ),
        (
            "greedy",
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        ),
    ];
    for (name, message) in wanted {
        plinth.eventually("the FailedScheduling event", || {
            let events = plinth.json(&[
                "get",
                "events",
                "--field-selector",
                &format!("involvedObject.name={name},reason=FailedScheduling"),
            ]);
            events["items"]
                .as_array()
                .is_some_and(|items| items.iter().any(|e| e["message"] == message))
        });
        let condition = pod(&plinth, name)["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "PodScheduled")
            .cloned()
            .unwrap();
        assert_eq!(condition["status"], "False");
        assert_eq!(condition["reason"], "Unschedulable");
        let row = plinth.kubectl(&["get", "pod", name, "--no-headers"]);
        assert!(row.contains("Pending"), "{row}");
    }
    // A label on the node makes room for the picky one.
    plinth.kubectl(&["label", "node", "node-d", "disk=ssd"]);
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/picky",
        "--timeout=120s",
    ]);
    plinth.kubectl(&[
        "delete",
        "pod",
        "--all",
        "--grace-period=1",
        "--timeout=60s",
    ]);
}

#[test]
fn bad_pods_are_refused_with_kubes_messages_and_nothing_is_stored() {
    let plinth = Plinth::start(Backend::Embedded);
    let refused = |manifest: &str, expected: &str| {
        let out = plinth.kubectl_stdin(&["create", "-f", "-"], manifest);
        assert!(!out.status.success(), "refused: {manifest}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{expected:?} in {stderr}");
    };
    refused(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: empty}\nspec: {containers: []}\n",
        "spec.containers: Required value",
    );
    refused(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: noimage}\nspec: {containers: [{name: a}]}\n",
        "spec.containers[0].image: Required value",
    );
    refused(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: policy}\nspec: {restartPolicy: Sometimes, containers: [{name: a, image: busybox}]}\n",
        "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
    );
    refused(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: mount}\nspec: {containers: [{name: a, image: busybox, volumeMounts: [{name: nope, mountPath: /x}]}]}\n",
        "spec.containers[0].volumeMounts[0].name: Not found: \"nope\"",
    );
    refused(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: dup}\nspec: {containers: [{name: a, image: busybox}, {name: a, image: busybox}]}\n",
        "spec.containers[1].name: Duplicate value: \"a\"",
    );
    refused(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: port}\nspec: {containers: [{name: a, image: busybox, ports: [{containerPort: 70000}]}]}\n",
        "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
    );
    refused(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: typed}\nspec: {containers: [{name: a, image: busybox, command: sleep}]}\n",
        "cannot unmarshal string into Go struct field",
    );
    let listed = plinth.json(&["get", "pods"]);
    assert_eq!(
        listed["items"].as_array().unwrap().len(),
        0,
        "nothing stored"
    );

    // Defaults as kube gives them; a running pod's spec is frozen but for images.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: one}\nspec: {containers: [{name: a, image: busybox, resources: {limits: {cpu: 100m, memory: 64Mi}}}]}\n",
    );
    let stored = pod(&plinth, "one");
    assert_eq!(stored["spec"]["restartPolicy"], "Always");
    assert_eq!(stored["spec"]["terminationGracePeriodSeconds"], 30);
    assert_eq!(stored["spec"]["dnsPolicy"], "ClusterFirst");
    assert_eq!(stored["spec"]["schedulerName"], "default-scheduler");
    assert_eq!(stored["spec"]["containers"][0]["imagePullPolicy"], "Always");
    assert_eq!(
        stored["spec"]["containers"][0]["terminationMessagePath"],
        "/dev/termination-log"
    );
    assert_eq!(
        stored["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "100m"
    );
    assert_eq!(stored["status"]["qosClass"], "Guaranteed");
    assert_eq!(stored["status"]["phase"], "Pending");
    let before = stored["metadata"]["resourceVersion"].clone();
    let out = plinth.kubectl_stdin(
        &[
            "patch",
            "pod",
            "one",
            "--type=merge",
            "-p",
            "{\"spec\":{\"restartPolicy\":\"Never\"}}",
        ],
        "",
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("pod updates may not change fields other than `spec.containers[*].image`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(pod(&plinth, "one")["metadata"]["resourceVersion"], before);
    plinth.kubectl(&["set", "image", "pod/one", "a=busybox:1.37"]);
    assert_eq!(
        pod(&plinth, "one")["spec"]["containers"][0]["image"],
        "busybox:1.37"
    );
    // A log of a pod no node runs, and of a container it does not have.
    let out = plinth.kubectl_fails(&["logs", "one"]);
    assert!(out.contains("is waiting to start"), "{out}");
    let out = plinth.kubectl_fails(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods/one/log?container=zzz",
    ]);
    assert!(
        out.contains("container zzz is not valid for pod one"),
        "{out}"
    );
    let out = plinth.kubectl_fails(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods/one/log?tailLines=x",
    ]);
    assert!(out.contains("tailLines"), "{out}");
    // An unscheduled pod is deleted at once (nothing to stop).
    plinth.kubectl(&["delete", "pod", "one", "--timeout=30s"]);
}
