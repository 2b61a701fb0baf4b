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

/// Deletes every pod of the default namespace (a second's grace) and waits for them to go.
fn delete_all_pods(plinth: &Plinth) {
    plinth.kubectl(&[
        "delete",
        "pod",
        "--all",
        "--grace-period=1",
        "--timeout=60s",
    ]);
}

/// `kubectl create` of `manifest` fails with `expected` in its message.
fn refused(plinth: &Plinth, manifest: &str, expected: &str) {
    let out = plinth.kubectl_stdin(&["create", "-f", "-"], manifest);
    assert!(!out.status.success(), "refused: {manifest}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(expected), "{expected:?} in {stderr}");
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
    # As redis charts probe: the client inside the pod reaches the pod's server.
    startupProbe:
      exec: {command: [redis-cli, ping]}
      periodSeconds: 1
      failureThreshold: 60
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
    let octets: Vec<u8> = ip.split('.').map(|o| o.parse().unwrap()).collect();
    assert!(
        octets[0] == 127 && (64..128).contains(&octets[1]),
        "a loopback pod address from the pod range: {ip}"
    );
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
    // kubectl exec (WebSocket, v5.channel.k8s.io) runs inside the container's namespaces;
    // the image's client talks to the pod's own server.
    let answer = plinth.kubectl(&["exec", "redis", "--", "redis-cli", "ping"]);
    assert_eq!(answer.trim(), "PONG");
    let port = plinth.kubectl(&["exec", "redis", "--", "redis-cli", "config", "get", "port"]);
    assert_eq!(
        port.split_whitespace().collect::<Vec<_>>(),
        ["port", "6379"]
    );
    let processes = plinth.kubectl(&["exec", "redis", "--", "ps", "ax"]);
    assert!(processes.contains("redis-server"), "{processes}");
    assert!(
        processes.lines().count() < 8,
        "only the pod's processes: {processes}"
    );
    let out = plinth.kubectl_output(&[
        "exec",
        "redis",
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3), "the command's exit code");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("err"));
    let echoed = plinth.kubectl_stdin(&["exec", "-i", "redis", "--", "cat"], "through stdin\n");
    assert_eq!(String::from_utf8_lossy(&echoed.stdout), "through stdin\n");
    let refused = plinth.kubectl_fails(&["exec", "redis", "-c", "nope", "--", "true"]);
    assert!(
        refused.contains("container nope is not valid for pod redis"),
        "{refused}"
    );
    // With a terminal (`-it`; `script` gives kubectl one): the command runs on a pty.
    let on_tty = std::process::Command::new("script")
        .args([
            "-qec",
            "kubectl exec -it redis -- sh -c 'tty; exit 4'",
            "/dev/null",
        ])
        .env("KUBECONFIG", &plinth.kubeconfig)
        .env("KUBECACHEDIR", plinth.dir.path().join("kube-cache"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&on_tty.stdout);
    assert!(shown.contains("/dev/pts/"), "{shown}");
    assert!(
        shown.contains("command terminated with exit code 4"),
        "{shown}"
    );

    // kubectl port-forward reaches redis: SPDY tunnelled in a WebSocket (kubectl's first
    // choice), and SPDY as the connection's upgrade (with the tunnel turned off).
    for websockets in ["true", "false"] {
        assert_eq!(forwarded_ping(&plinth, websockets), "PONG", "{websockets}");
    }

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
    for said in [
        "Container image \"redis:7\" already present on machine",
        "Created container: redis",
        "Started container redis",
    ] {
        assert!(events.contains(said), "{said:?} in {events}");
    }
    let described = plinth.kubectl(&["describe", "pod", "redis"]);
    assert!(described.contains("Started container redis"), "{described}");
    assert!(
        described
            .lines()
            .any(|l| l.starts_with("IP:") && l.trim_end().ends_with(ip.as_str())),
        "{described}"
    );

    // kubectl delete waits for the pod to be gone: the agent stopped redis first.
    plinth.kubectl(&["delete", "pod", "redis", "--timeout=60s"]);
    assert!(!redis_answers(&ip), "redis is stopped with its pod");
}

/// `redis-cli ping` through `kubectl port-forward pod/redis` (WebSocket tunnel or not).
fn forwarded_ping(plinth: &Plinth, websockets: &str) -> String {
    let forward = common::Forwarded::start(plinth, "pod/redis", 6379, Some(websockets));
    let answer = std::process::Command::new("redis-cli")
        .args(["-p", &forward.local, "ping"])
        .output()
        .unwrap();
    drop(forward);
    String::from_utf8_lossy(&answer.stdout).trim().to_owned()
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
    plinth.eventually("the BackOff warning", || {
        plinth
            .kubectl(&[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=crash,reason=BackOff",
            ])
            .contains("Back-off restarting failed container main in pod crash_default(")
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
    // Following a finished container's log ends with it.
    assert!(logs(&plinth, &["-f", "done"]).contains("finished"));

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
    // kubectl attach -i reaches the stdin of a container that keeps one open.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: listener}\nspec:\n  containers: [{name: main, image: busybox:1.36, stdin: true, command: [sh, -c, 'while read line; do echo got:$line; done']}]\n",
    );
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/listener",
        "--timeout=120s",
    ]);
    let mut attached = plinth
        .kubectl_command()
        .args(["attach", "-i", "listener"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut input = attached.stdin.take().unwrap();
    let attached = common::Stopped(Some(attached));
    plinth.eventually("what is typed reaches the process", || {
        use std::io::Write;
        let _ = input.write_all(b"hello\n");
        let _ = input.flush();
        logs(&plinth, &["listener"]).contains("got:hello")
    });
    drop(input);
    drop(attached);
    // `kubectl run -i --rm`: a script on stdin, its output back, the pod gone — while kubectl
    // watches the pod in protobuf frames, which must decode.
    let run = plinth.kubectl_stdin(
        &[
            "run",
            "-i",
            "--rm",
            "--restart=Never",
            "once",
            "--image=busybox:1.36",
            "--",
            "sh",
        ],
        "echo hello from $(hostname)\nexit 0\n",
    );
    let (out, err) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    assert!(run.status.success(), "{out}{err}");
    assert!(out.contains("hello from once"), "{out}");
    assert!(out.contains("pod \"once\" deleted"), "{out}");
    assert!(!err.contains("unable to decode"), "{err}");

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
    delete_all_pods(&plinth);
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
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
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
    delete_all_pods(&plinth);
}

#[test]
fn bad_pods_are_refused_with_kubes_messages_and_nothing_is_stored() {
    let plinth = Plinth::start(Backend::Embedded);
    let refused = |manifest: &str, expected: &str| refused(&plinth, manifest, expected);
    refused(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: empty}\nspec: {containers: []}\n",
        "spec.containers: Required value",
    );
    refused(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: noimage}\nspec: {containers: [{name: a}]}\n",
        "spec.containers[0].image: Required value",
    );
    refused(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: over}\nspec: {containers: [{name: a, image: busybox, resources: {requests: {cpu: '2'}, limits: {cpu: '1'}}}]}\n",
        "spec.containers[0].resources.requests[cpu]: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
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
    refused(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: sysctls}\nspec: {securityContext: {sysctls: [{name: foo-, value: bar}, {name: kernel.shmmax, value: '1'}, {name: bar.., value: '42'}]}, containers: [{name: a, image: busybox}]}\n",
        "spec.securityContext.sysctls[0].name: Invalid value: \"foo-\": must have at most 253 characters and match regex ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?",
    );
    refused(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: sysctls}\nspec: {securityContext: {sysctls: [{name: bar.., value: '42'}]}, containers: [{name: a, image: busybox}]}\n",
        "spec.securityContext.sysctls[0].name: Invalid value: \"bar..\"",
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
    // The scheduler writes its verdict (no node) once; read the pod after it.
    plinth.eventually("the scheduler's PodScheduled condition", || {
        pod(&plinth, "one")["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "PodScheduled"))
    });
    let before = pod(&plinth, "one")["metadata"]["resourceVersion"].clone();
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

    // LimitRanger: the namespace's defaults, and its maximum.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: LimitRange\nmetadata: {name: limits}\nspec:\n  limits:\n  - {type: Container, default: {cpu: 200m, memory: 64Mi}, defaultRequest: {cpu: 100m}, max: {cpu: '1'}}\n",
    );
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: limited}\nspec: {containers: [{name: a, image: busybox}]}\n",
    );
    let limited = pod(&plinth, "limited");
    let resources = &limited["spec"]["containers"][0]["resources"];
    assert_eq!(resources["limits"]["cpu"], "200m", "{resources}");
    assert_eq!(resources["limits"]["memory"], "64Mi");
    // kube's LimitRanger: requests from `defaultRequest` (cpu), which defaults to `default`
    // where it names nothing (memory) — not from the default limits.
    assert_eq!(resources["requests"]["cpu"], "100m", "{resources}");
    assert_eq!(
        resources["requests"]["memory"], "64Mi",
        "the default request follows the default limit"
    );
    assert_eq!(limited["status"]["qosClass"], "Burstable", "{limited}");
    let range = plinth.kubectl(&[
        "get",
        "limitrange",
        "limits",
        "-o",
        "jsonpath={.spec.limits[0].defaultRequest}",
    ]);
    assert_eq!(
        serde_json::from_str::<Value>(&range).unwrap(),
        serde_json::json!({"cpu": "100m", "memory": "64Mi"}),
        "the LimitRange itself is defaulted as kube defaults it"
    );
    refused(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: big}\nspec: {containers: [{name: a, image: busybox, resources: {limits: {cpu: '2'}}}]}\n",
        "pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2",
    );
}

/// A `plinth node` process against a test server, stopped by its PID.
struct Agent {
    child: Option<std::process::Child>,
    _dir: tempfile::TempDir,
}

impl Agent {
    fn start(plinth: &Plinth, name: &str) -> Self {
        Self::start_in(plinth, name, tempfile::tempdir().unwrap())
    }

    /// An agent keeping its files in `dir` (a restarted agent finds its pods' there).
    fn start_in(plinth: &Plinth, name: &str, dir: tempfile::TempDir) -> Self {
        Self::start_as(plinth, name, dir, None)
    }

    /// An agent running as `user` (through `setpriv`; it owns `dir` and reads a copy of the
    /// kubeconfig there), or as this process's user.
    fn start_as(plinth: &Plinth, name: &str, dir: tempfile::TempDir, user: Option<u32>) -> Self {
        let mut kubeconfig = plinth.kubeconfig.clone();
        let mut command = match user {
            Some(uid) => {
                kubeconfig = dir.path().join("kubeconfig");
                std::fs::copy(&plinth.kubeconfig, &kubeconfig).unwrap();
                for path in [dir.path(), kubeconfig.as_path()] {
                    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
                }
                let mut command = std::process::Command::new("setpriv");
                command
                    .arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={uid}"))
                    .arg("--clear-groups")
                    .arg(env!("CARGO_BIN_EXE_plinth"));
                command
            }
            None => std::process::Command::new(env!("CARGO_BIN_EXE_plinth")),
        };
        let child = command
            .args(["node", "--kubeconfig"])
            .arg(&kubeconfig)
            .args([
                "--node-name",
                name,
                "--node-status-update-frequency",
                "1s",
                "--data-dir",
            ])
            .arg(dir.path())
            .env("RUST_LOG", "warn")
            .spawn()
            .unwrap();
        Self {
            child: Some(child),
            _dir: dir,
        }
    }

    /// SIGKILL, and its data directory back for a new agent.
    fn crash(mut self) -> tempfile::TempDir {
        self.kill();
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self._dir, dir)
    }

    /// SIGKILL: the agent is gone at once, as a crashed machine's would be.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

#[test]
fn an_agent_without_root_keeps_its_pods_apart_in_user_namespaces() {
    // The machine must let users make user namespaces (Debian and this CI do).
    let allowed = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["unshare", "--user", "--map-root-user", "true"])
        .status()
        .unwrap();
    assert!(
        allowed.success(),
        "unprivileged user namespaces are allowed"
    );
    let plinth = Plinth::start_with(Backend::Embedded, &[]);
    let agent = Agent::start_as(
        &plinth,
        "rootless",
        tempfile::tempdir().unwrap(),
        Some(65534),
    );
    // Waited for as the other agents' nodes are: `kubectl wait` fails at once on a Node the
    // agent has not registered yet (CI flake).
    plinth.eventually("the rootless agent's node is Ready", || {
        let out = plinth.kubectl_output(&["get", "node", "rootless", "--no-headers"]);
        String::from_utf8_lossy(&out.stdout).contains(" Ready ")
    });
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
    command: [sh, -c, "echo secret > /data/mine; echo ready > /tmp/ready; sleep 3600"]
    volumeMounts: [{name: scratch, mountPath: /data}]
    readinessProbe: {exec: {command: [cat, /tmp/ready]}, periodSeconds: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  volumes: [{name: scratch, emptyDir: {}}]
  containers:
  - name: main
    image: busybox:1.36
    command: [sleep, "3600"]
    volumeMounts: [{name: scratch, mountPath: /data}]
"#,
    );
    // The exec probe runs in the writer's namespaces: its /tmp is its own.
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/writer",
        "pod/reader",
        "--timeout=120s",
    ]);
    let seen = plinth.kubectl(&[
        "exec",
        "reader",
        "--",
        "sh",
        "-c",
        "id -u; hostname; cat /proc/self/uid_map; echo files=$(ls -A /data | wc -l); \
         echo processes=$(ls /proc | grep -c '^[0-9]'); ls /tmp/ready 2>&1; true",
    ]);
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines.first(), Some(&"0"), "root inside: {seen}");
    assert_eq!(lines.get(1), Some(&"reader"), "the pod's host name: {seen}");
    let map: Vec<&str> = lines.get(2).unwrap_or(&"").split_whitespace().collect();
    assert_eq!(
        map,
        ["0", "65534", "1"],
        "root inside is the agent's user: {seen}"
    );
    assert!(seen.contains("files=0"), "not the writer's /data: {seen}");
    let processes: usize = seen
        .lines()
        .find_map(|l| l.strip_prefix("processes="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    assert!(processes < 10, "its own few processes: {seen}");
    assert!(
        seen.contains("No such file"),
        "not the writer's /tmp: {seen}"
    );
    // And the writer's file is where the writer looks.
    let own = plinth.kubectl(&["exec", "writer", "--", "cat", "/data/mine"]);
    assert_eq!(own.trim(), "secret");
    delete_all_pods(&plinth);
    drop(agent);
}

#[test]
fn pods_spread_by_anti_affinity_and_leave_a_node_that_stops_heartbeating() {
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &[
            "--node-name",
            "node-1",
            "--node-status-update-frequency",
            "1s",
            "--node-monitor-grace-period",
            "8s",
            "--node-monitor-period",
            "1s",
            "--default-unreachable-toleration-seconds",
            "2",
        ],
    );
    let mut agent = Agent::start(&plinth, "node-2");
    for node in ["node-1", "node-2"] {
        plinth.eventually("both nodes are Ready", || {
            let out = plinth.kubectl_output(&["get", "node", node, "--no-headers"]);
            String::from_utf8_lossy(&out.stdout).contains(" Ready ")
        });
    }
    let spread = |name: &str| {
        format!(
            r"apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{app: spread}}}}
spec:
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: {{matchLabels: {{app: spread}}}}
        topologyKey: kubernetes.io/hostname
  containers: [{{name: main, image: busybox:1.36, command: [sleep, '3600']}}]
"
        )
    };
    plinth.kubectl_with(&["apply", "-f", "-"], &spread("one"));
    plinth.kubectl_with(&["apply", "-f", "-"], &spread("two"));
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/one",
        "pod/two",
        "--timeout=120s",
    ]);
    let node_of = |name: &str| {
        pod(&plinth, name)["spec"]["nodeName"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (first, second) = (node_of("one"), node_of("two"));
    assert_ne!(first, second, "anti-affinity puts them on different nodes");
    // Default tolerations, as DefaultTolerationSeconds gives them.
    let tolerations = pod(&plinth, "one")["spec"]["tolerations"].clone();
    assert!(
        tolerations
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/unreachable"
                && t["tolerationSeconds"] == 2
                && t["effect"] == "NoExecute"),
        "{tolerations}"
    );
    // Required pod affinity: with the pod it names.
    plinth.kubectl(&["label", "pod", "one", "first=yes"]);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r"apiVersion: v1
kind: Pod
metadata: {name: buddy}
spec:
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: {matchLabels: {first: 'yes'}}
        topologyKey: kubernetes.io/hostname
  containers: [{name: main, image: busybox:1.36, command: [sleep, '3600']}]
",
    );
    plinth.eventually("the buddy is scheduled", || {
        pod(&plinth, "buddy")["spec"]["nodeName"].is_string()
    });
    assert_eq!(node_of("buddy"), first, "next to the pod it asks for");
    plinth.kubectl(&[
        "delete",
        "pod",
        "buddy",
        "--grace-period=1",
        "--timeout=60s",
    ]);
    // A third one fits nowhere.
    plinth.kubectl_with(&["apply", "-f", "-"], &spread("three"));
    plinth.eventually("the third pod's FailedScheduling", || {
        let events = plinth.kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=three,reason=FailedScheduling",
            "-o",
            "jsonpath={.items[*].message}",
        ]);
        events.contains("0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules.")
    });
    plinth.kubectl(&["delete", "pod", "three", "--timeout=30s"]);

    agent.kill();
    plinth.eventually("the silent node is NotReady", || {
        let node = plinth.json(&["get", "node", "node-2"]);
        node["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| {
                c["type"] == "Ready"
                    && c["status"] == "Unknown"
                    && c["reason"] == "NodeStatusUnknown"
            })
    });
    let row = plinth.kubectl(&["get", "node", "node-2", "--no-headers"]);
    assert!(row.contains("NotReady"), "{row}");
    plinth.eventually("the unreachable taint", || {
        let taints = plinth.json(&["get", "node", "node-2"])["spec"]["taints"].clone();
        taints.as_array().is_some_and(|t| {
            t.iter()
                .any(|t| t["key"] == "node.kubernetes.io/unreachable" && t["effect"] == "NoExecute")
        })
    });
    let on_lost = if first == "node-2" { "one" } else { "two" };
    let on_live = if first == "node-2" { "two" } else { "one" };
    plinth.eventually("the lost node's pod is evicted", || {
        pod(&plinth, on_lost)["metadata"]["deletionTimestamp"].is_string()
    });
    let events = plinth.kubectl(&[
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.name={on_lost},reason=TaintManagerEviction"),
    ]);
    assert!(
        events.contains(&format!("Marking for deletion Pod default/{on_lost}")),
        "{events}"
    );
    assert!(pod(&plinth, on_live)["metadata"]["deletionTimestamp"].is_null());
    let live = plinth.kubectl(&["get", "node", "node-1", "--no-headers"]);
    assert!(live.contains(" Ready "), "{live}");
    plinth.kubectl(&["delete", "pod", on_live, "--timeout=60s"]);
}

const WEB: &str = r"apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
";

fn web_pod(name: &str) -> String {
    format!(
        r"apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{app: web}}}}
spec:
  containers:
  - name: web
    image: busybox:1.36
    command: [sh, -c, 'mkdir -p /www; echo {name} > /www/index.html; exec httpd -f -p $(POD_IP):8080 -h /www']
    env: [{{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}]
    ports: [{{name: http, containerPort: 8080}}]
    readinessProbe: {{httpGet: {{path: /, port: http}}, periodSeconds: 1, failureThreshold: 1}}
"
    )
}

fn fetch(address: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(stream, "GET / HTTP/1.0\r\nHost: web\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split("\r\n\r\n").nth(1).map(|b| b.trim().to_owned())
}

#[test]
fn a_service_reaches_its_ready_pods_and_drops_one_that_is_not() {
    let plinth = with_node("node-s");
    plinth.kubectl_with(&["apply", "-f", "-"], WEB);
    plinth.kubectl_with(&["apply", "-f", "-"], &web_pod("web-1"));
    plinth.kubectl_with(&["apply", "-f", "-"], &web_pod("web-2"));
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/web-1",
        "pod/web-2",
        "--timeout=120s",
    ]);
    let service = plinth.json(&["get", "service", "web"]);
    let ip = service["spec"]["clusterIP"].as_str().unwrap().to_owned();
    let kubernetes = plinth.json(&["get", "service", "kubernetes"]);
    let first = kubernetes["spec"]["clusterIP"].as_str().unwrap().to_owned();
    assert!(
        first.starts_with("127.") && first.ends_with(".0.1"),
        "{first}"
    );
    let range = first.trim_end_matches("0.1");
    assert!(
        ip.starts_with(range),
        "a ClusterIP from the service range: {ip}"
    );
    assert_eq!(service["spec"]["clusterIPs"][0], ip.as_str());
    assert_eq!(service["spec"]["sessionAffinity"], "None");
    assert_eq!(service["spec"]["ports"][0]["protocol"], "TCP");
    let row = plinth.kubectl(&["get", "service", "web", "--no-headers"]);
    assert!(
        row.contains("ClusterIP") && row.contains(&ip) && row.contains("80/TCP"),
        "{row}"
    );
    // The default Service points at the API server.
    plinth.eventually("the kubernetes endpoints", || {
        plinth
            .kubectl(&["get", "endpoints", "kubernetes", "--no-headers"])
            .contains("127.0.0.1:")
    });

    plinth.eventually("both pods in the EndpointSlice", || {
        let slices = plinth.json(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
        ]);
        slices["items"][0]["endpoints"]
            .as_array()
            .is_some_and(|e| e.len() == 2 && e.iter().all(|e| e["conditions"]["ready"] == true))
    });
    let address = format!("{ip}:80");
    let mut seen = std::collections::BTreeSet::new();
    plinth.eventually("the ClusterIP reaches both pods", || {
        if let Some(body) = fetch(&address) {
            seen.insert(body);
        }
        seen.len() == 2
    });
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["web-1", "web-2"]);
    let endpoints = plinth.kubectl(&["get", "endpoints", "web", "--no-headers"]);
    assert!(
        endpoints.contains(":8080"),
        "the named target port resolved: {endpoints}"
    );

    // sessionAffinity: ClientIP keeps one client on one pod.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Service\nmetadata: {name: sticky}\nspec:\n  selector: {app: web}\n  sessionAffinity: ClientIP\n  ports: [{name: http, port: 80, targetPort: http}]\n",
    );
    let sticky = plinth.json(&["get", "service", "sticky"]);
    assert_eq!(
        sticky["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"],
        10800
    );
    let sticky_address = format!("{}:80", sticky["spec"]["clusterIP"].as_str().unwrap());
    plinth.eventually("the sticky Service answers", || {
        fetch(&sticky_address).is_some()
    });
    let first_answer = fetch(&sticky_address);
    assert!(
        (0..6).all(|_| fetch(&sticky_address) == first_answer),
        "the same pod every time"
    );
    plinth.kubectl(&["delete", "service", "sticky"]);

    // web-2 stops passing its readiness probe: it leaves the ready endpoints.
    plinth.kubectl(&["exec", "web-2", "--", "rm", "/www/index.html"]);
    plinth.eventually("web-2 is not ready in the EndpointSlice", || {
        let slices = plinth.json(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
        ]);
        slices["items"][0]["endpoints"].as_array().is_some_and(|e| {
            e.iter()
                .any(|e| e["targetRef"]["name"] == "web-2" && e["conditions"]["ready"] == false)
        })
    });
    let endpoints = plinth.json(&["get", "endpoints", "web"]);
    assert_eq!(
        endpoints["subsets"][0]["notReadyAddresses"][0]["targetRef"]["name"], "web-2",
        "{endpoints}"
    );
    plinth.eventually("the proxy sends everything to web-1", || {
        (0..6).all(|_| fetch(&address).as_deref() == Some("web-1"))
    });
    // A pod started now learns of the Service from its environment.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: client}\nspec:\n  restartPolicy: Never\n  containers: [{name: main, image: busybox:1.36, command: [sh, -c, 'echo host=$WEB_SERVICE_HOST port=$WEB_SERVICE_PORT; wget -qO- http://$WEB_SERVICE_HOST:$WEB_SERVICE_PORT_HTTP/']}]\n",
    );
    plinth.eventually("the client pod finished", || {
        pod(&plinth, "client")["status"]["phase"] == "Succeeded"
    });
    let out = logs(&plinth, &["client"]);
    assert!(out.contains(&format!("host={ip} port=80")), "{out}");
    assert!(out.contains("web-1"), "{out}");
    // The Service's endpoints go with it.
    plinth.kubectl(&["delete", "service", "web"]);
    plinth.eventually("the EndpointSlice is collected", || {
        plinth.json(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
        ])["items"]
            .as_array()
            .is_some_and(Vec::is_empty)
    });
    plinth.kubectl(&["delete", "pod", "--all", "--timeout=60s"]);
}

/// kube's EndpointSlice mirroring: a Service without a selector and Endpoints of the user's
/// own get a slice that follows them.
#[test]
fn custom_endpoints_are_mirrored_into_an_endpoint_slice() {
    let plinth = Plinth::start(Backend::Embedded);
    let endpoints = |ip: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: custom}}\nspec: {{ports: [{{name: example, port: 80}}]}}\n---\napiVersion: v1\nkind: Endpoints\nmetadata: {{name: custom}}\nsubsets: [{{addresses: [{{ip: {ip}}}], ports: [{{name: example, port: 80}}]}}]\n"
        )
    };
    let slices = || {
        plinth.json(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=custom",
        ])["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    plinth.kubectl_with(&["apply", "-f", "-"], &endpoints("10.1.2.3"));
    plinth.eventually("the Endpoints are mirrored", || {
        slices().first().is_some_and(|s| {
            s["endpoints"][0]["addresses"][0] == "10.1.2.3" && s["ports"][0]["port"] == 80
        })
    });
    let slice = slices()[0].clone();
    assert_eq!(
        slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslicemirroring-controller.k8s.io"
    );
    plinth.kubectl_with(&["apply", "-f", "-"], &endpoints("10.2.3.4"));
    plinth.eventually("an update is mirrored", || {
        let now = slices();
        now.len() == 1 && now[0]["endpoints"][0]["addresses"][0] == "10.2.3.4"
    });
    plinth.kubectl(&["delete", "endpoints", "custom"]);
    plinth.eventually("the mirrored slice goes with the Endpoints", || {
        slices().is_empty()
    });
}

#[test]
fn bad_services_are_refused_with_kubes_messages() {
    let plinth = Plinth::start(Backend::Embedded);
    let refused = |manifest: &str, expected: &str| refused(&plinth, manifest, expected);
    refused(
        "apiVersion: v1\nkind: Service\nmetadata: {name: noports}\nspec: {selector: {a: b}}\n",
        "spec.ports: Required value",
    );
    refused(
        "apiVersion: v1\nkind: Service\nmetadata: {name: kind}\nspec: {type: Magic, ports: [{port: 80}]}\n",
        "spec.type: Unsupported value: \"Magic\"",
    );
    refused(
        "apiVersion: v1\nkind: Service\nmetadata: {name: taken}\nspec: {clusterIP: 127.32.0.1, ports: [{port: 80}]}\n",
        "provided IP is already allocated",
    );
    refused(
        "apiVersion: v1\nkind: Service\nmetadata: {name: outside}\nspec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}\n",
        "is not in the valid range",
    );
    refused(
        "apiVersion: v1\nkind: Service\nmetadata: {name: two}\nspec: {ports: [{port: 80}, {port: 81}]}\n",
        "spec.ports[0].name: Required value",
    );
    assert_eq!(
        plinth.json(&["get", "services"])["items"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "only the kubernetes Service"
    );
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Service\nmetadata: {name: np}\nspec: {type: NodePort, ports: [{port: 80}]}\n",
    );
    let np = plinth.json(&["get", "service", "np"]);
    let node_port = np["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=32767).contains(&node_port), "{np}");
    let out = plinth.kubectl_fails(&[
        "patch",
        "service",
        "np",
        "--type=merge",
        "-p",
        "{\"spec\":{\"clusterIP\":\"127.32.9.9\"}}",
    ]);
    assert!(out.contains("may not change once set"), "{out}");
    // Changed to ExternalName: what only the old type needed goes (kube's
    // dropTypeDependentFields); back to ClusterIP: a new address.
    plinth.kubectl(&[
        "patch",
        "service",
        "np",
        "--type=merge",
        "-p",
        r#"{"spec":{"type":"ExternalName","externalName":"example.invalid"}}"#,
    ]);
    let external = plinth.json(&["get", "service", "np"])["spec"].clone();
    for gone in [
        "clusterIP",
        "clusterIPs",
        "ipFamilies",
        "externalTrafficPolicy",
    ] {
        assert!(external[gone].is_null(), "{gone}: {external}");
    }
    assert!(external["ports"][0]["nodePort"].is_null(), "{external}");
    plinth.kubectl(&[
        "patch",
        "service",
        "np",
        "--type=merge",
        "-p",
        r#"{"spec":{"type":"ClusterIP","externalName":null}}"#,
    ]);
    let back = plinth.json(&["get", "service", "np"])["spec"].clone();
    assert_eq!(back["ipFamilies"], serde_json::json!(["IPv4"]), "{back}");
    assert!(
        back["clusterIP"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("127.32.")),
        "{back}"
    );
}

#[test]
fn memory_limits_kill_with_oom_and_kubectl_top_shows_usage() {
    let plinth = with_node("node-m");
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox:1.36
    command: [sh, -c, 'x=$(head -c 200000000 /dev/zero | tr "\0" a); echo ${#x}']
    resources: {limits: {memory: 32Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: busy, labels: {load: high}}
spec:
  containers:
  - {name: spin, image: busybox:1.36, command: [sh, -c, 'while true; do :; done']}
---
apiVersion: v1
kind: Pod
metadata: {name: idle}
spec:
  containers:
  - {name: rest, image: busybox:1.36, command: [sleep, '3600']}
"#,
    );
    // A CPU limit is a CFS quota of the container's cgroup (100m: 10 ms per 100 ms).
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: capped}\nspec:\n  containers:\n  - name: main\n    image: busybox:1.36\n    command: [sh, -c, 'cat /sys/fs/cgroup/cpu$(grep :cpu: /proc/self/cgroup | cut -d: -f3)/cpu.cfs_quota_us; exec sleep 3600']\n    resources: {limits: {cpu: 100m}}\n",
    );
    plinth.eventually("the capped pod reports its quota", || {
        logs(&plinth, &["capped"]).trim() == "10000"
    });
    plinth.eventually("the memory hog is OOMKilled", || {
        container_status(&plinth, "hog")["state"]["terminated"]["reason"] == "OOMKilled"
    });
    let hog = container_status(&plinth, "hog");
    assert_eq!(hog["state"]["terminated"]["exitCode"], 137);
    let row = plinth.kubectl(&["get", "pod", "hog", "--no-headers"]);
    assert!(row.contains("OOMKilled"), "{row}");

    let millicores = |text: &str, pod: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(pod))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|c| c.strip_suffix('m'))
            .and_then(|c| c.parse().ok())
    };
    plinth.eventually("kubectl top shows the busy pod's CPU", || {
        let out = plinth.kubectl_output(&["top", "pods"]);
        let text = String::from_utf8_lossy(&out.stdout);
        millicores(&text, "busy").is_some_and(|m| m > 0) && millicores(&text, "idle").is_some()
    });
    let out = plinth.kubectl(&["top", "pods", "-l", "load=high", "--containers"]);
    assert!(out.contains("spin") && !out.contains("idle"), "{out}");
    let nodes = plinth.kubectl(&["top", "nodes"]);
    assert!(nodes.contains("node-m"), "{nodes}");
    let metrics: Value = serde_json::from_str(&plinth.kubectl(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/idle",
    ]))
    .unwrap();
    assert_eq!(metrics["kind"], "PodMetrics");
    assert_eq!(metrics["containers"][0]["name"], "rest");
    plinth.kubectl(&[
        "delete",
        "pod",
        "busy",
        "idle",
        "capped",
        "--grace-period=1",
        "--timeout=60s",
    ]);
}

#[test]
fn pods_get_their_service_account_token_and_reach_the_api_through_the_kubernetes_service() {
    let plinth = with_node("node-t");
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: sa}\nspec:\n  containers: [{name: main, image: busybox:1.36, command: [sleep, '3600']}]\n",
    );
    plinth.kubectl(&["wait", "--for=condition=Ready", "pod/sa", "--timeout=120s"]);
    let stored = pod(&plinth, "sa");
    assert_eq!(stored["spec"]["serviceAccountName"], "default");
    let mount = &stored["spec"]["containers"][0]["volumeMounts"][0];
    assert_eq!(
        mount["mountPath"],
        "/var/run/secrets/kubernetes.io/serviceaccount"
    );
    assert!(
        mount["name"]
            .as_str()
            .unwrap()
            .starts_with("kube-api-access-"),
        "{mount}"
    );
    let dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    let namespace = plinth.kubectl(&["exec", "sa", "--", "cat", &format!("{dir}/namespace")]);
    assert_eq!(namespace, "default");
    let token = plinth.kubectl(&["exec", "sa", "--", "cat", &format!("{dir}/token")]);
    let ca = plinth.kubectl(&["exec", "sa", "--", "cat", &format!("{dir}/ca.crt")]);
    assert!(ca.contains("BEGIN CERTIFICATE"), "{ca}");
    // The token is the pod's account's, bound to the pod.
    let whoami = plinth.kubectl(&["auth", "whoami", "--token", token.trim(), "-o", "json"]);
    let whoami: Value = serde_json::from_str(&whoami).unwrap();
    assert_eq!(
        whoami["status"]["userInfo"]["username"],
        "system:serviceaccount:default:default"
    );
    assert_eq!(
        whoami["status"]["userInfo"]["extra"]["authentication.kubernetes.io/pod-name"][0],
        "sa"
    );
    // It names the pod's node too (kube's ServiceAccountTokenPodNodeInfo).
    let node = plinth.json(&["get", "node", "node-t"]);
    let extra = &whoami["status"]["userInfo"]["extra"];
    assert_eq!(extra["authentication.kubernetes.io/node-name"][0], "node-t");
    assert_eq!(
        extra["authentication.kubernetes.io/node-uid"][0],
        node["metadata"]["uid"]
    );
    // The in-cluster address: the kubernetes Service's ClusterIP, port 443, with the CA.
    let env = plinth.kubectl(&["exec", "sa", "--", "env"]);
    let host = env
        .lines()
        .find_map(|l| l.strip_prefix("KUBERNETES_SERVICE_HOST="))
        .unwrap()
        .to_owned();
    let ca_file = plinth.dir.path().join("pod-ca.crt");
    std::fs::write(&ca_file, &ca).unwrap();
    let out = std::process::Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&ca_file)
        .args(["-H", &format!("Authorization: Bearer {}", token.trim())])
        .arg(format!(
            "https://{host}:443/api/v1/namespaces/default/pods/sa"
        ))
        .output()
        .unwrap();
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    // The default account may not read pods: the answer is RBAC's, through TLS the CA trusts.
    assert_eq!(
        answer["kind"],
        "Status",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(answer["code"], 403);
    assert!(
        answer["message"].as_str().unwrap().contains(
            "User \"system:serviceaccount:default:default\" cannot get resource \"pods\""
        ),
        "{answer}"
    );
    plinth.kubectl(&["delete", "pod", "sa", "--grace-period=1", "--timeout=60s"]);
}

#[test]
fn init_containers_sidecars_and_probes_follow_kubes_lifecycle() {
    let plinth = with_node("node-l");
    let marks = plinth.dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let manifest = STAGED.replace("MARKS", &marks.display().to_string());
    plinth.kubectl_with(&["apply", "-f", "-"], &manifest);
    let waited = plinth.kubectl_output(&[
        "wait",
        "--for=condition=Ready",
        "pod/staged",
        "--timeout=120s",
    ]);
    if !waited.status.success() {
        // What the pod and its containers went through, for a run that never gets there.
        let status = &pod(&plinth, "staged")["status"];
        let events = plinth.kubectl_output(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=staged",
            "--sort-by=.lastTimestamp",
        ]);
        panic!(
            "pod/staged not Ready within 120 s:\n{}\nevents:\n{}",
            serde_json::to_string_pretty(status).unwrap_or_default(),
            String::from_utf8_lossy(&events.stdout)
        );
    }

    let row = plinth.kubectl(&["get", "pod", "staged", "--no-headers"]);
    assert!(
        row.contains("2/2") && row.contains("Running"),
        "main and the sidecar: {row}"
    );
    // Ready after being not ready: no reason or message left from before.
    let ready = pod(&plinth, "staged")["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .unwrap();
    assert_eq!(ready["status"], "True");
    assert!(
        ready.get("reason").is_none() && ready.get("message").is_none(),
        "{ready}"
    );
    // postStart ran before the container was reported running.
    assert_eq!(
        std::fs::read_to_string(marks.join("started")).unwrap(),
        "hooked\n"
    );
    // A failing postStart hook stops its container, which restarts as its policy says.
    plinth.eventually("the failed hook restarts its container", || {
        container_status(&plinth, "hook-fails")["restartCount"]
            .as_i64()
            .unwrap_or(0)
            >= 1
    });
    let events = plinth.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=hook-fails,reason=FailedPostStartHook",
        "-o",
        "jsonpath={.items[*].type} {.items[*].message} {.items[*].involvedObject.fieldPath}",
    ]);
    assert!(
        events.starts_with("Warning")
            && events.contains("PostStartHook failed")
            && events.contains("spec.containers{main}"),
        "{events}"
    );
    let status = container_status(&plinth, "hook-fails");
    assert!(
        status["state"]["running"].is_null(),
        "never reported running: {status}"
    );
    plinth.kubectl(&[
        "delete",
        "pod",
        "hook-fails",
        "--grace-period=1",
        "--timeout=60s",
    ]);
    // A failed init container fails a Never pod; its containers never start.
    plinth.eventually("the pod with a failing init container fails", || {
        pod(&plinth, "init-fails")["status"]["phase"] == "Failed"
    });
    let status = pod(&plinth, "init-fails")["status"].clone();
    let initialized = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Initialized")
        .unwrap();
    assert_eq!(initialized["status"], "False");
    assert_eq!(initialized["reason"], "ContainersNotInitialized");
    assert_eq!(
        initialized["message"],
        "containers with incomplete status: [init2]"
    );
    assert_eq!(
        status["containerStatuses"][0]["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    let order = logs(&plinth, &["staged", "-c", "main"]);
    assert_eq!(
        order, "one\ntwo\nsidecar\n",
        "init containers in order, then the sidecar"
    );
    let stored = pod(&plinth, "staged");
    let init = stored["status"]["initContainerStatuses"]
        .as_array()
        .unwrap();
    assert_eq!(init[0]["state"]["terminated"]["reason"], "Completed");
    assert_eq!(init[1]["state"]["terminated"]["reason"], "Completed");
    assert!(
        init[2]["state"]["running"].is_object(),
        "the sidecar runs: {}",
        init[2]
    );
    assert_eq!(stored["status"]["containerStatuses"][0]["started"], true);

    // Liveness fails (the file goes): the container is restarted.
    plinth.kubectl(&["exec", "staged", "-c", "main", "--", "rm", "/tmp/started"]);
    plinth.eventually("the liveness probe restarts main", || {
        container_status(&plinth, "staged")["restartCount"]
            .as_i64()
            .unwrap_or(0)
            >= 1
    });
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/staged",
        "--timeout=120s",
    ]);
    // preStop runs before the container is stopped.
    plinth.kubectl(&["delete", "pod", "staged", "--timeout=60s"]);
    let stopped = std::fs::read_to_string(marks.join("stopped")).unwrap();
    assert_eq!(stopped, "stopping\n");
}

#[test]
fn a_pod_past_its_active_deadline_fails_as_the_kubelet_fails_it() {
    let plinth = with_node("node-d");
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bounded}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {name: main, image: busybox:1.36, command: [sleep, '3600']}\n",
    );
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/bounded",
        "--timeout=120s",
    ]);
    // The deadline can be set on a running pod (and only lowered after).
    plinth.kubectl(&[
        "patch",
        "pod",
        "bounded",
        "-p",
        r#"{"spec":{"activeDeadlineSeconds":2}}"#,
    ]);
    plinth.eventually("the pod fails past its deadline", || {
        pod(&plinth, "bounded")["status"]["phase"] == "Failed"
    });
    let status = pod(&plinth, "bounded")["status"].clone();
    assert_eq!(status["reason"], "DeadlineExceeded", "{status}");
    assert_eq!(
        status["message"],
        "Pod was active on the node longer than the specified deadline"
    );
    plinth.eventually("its container is stopped", || {
        container_status(&plinth, "bounded")["state"]["terminated"].is_object()
    });
    let events = plinth.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=bounded,reason=DeadlineExceeded",
        "-o",
        "jsonpath={.items[*].type}",
    ]);
    assert_eq!(events, "Warning");
    let raised = plinth.kubectl_output(&[
        "patch",
        "pod",
        "bounded",
        "-p",
        r#"{"spec":{"activeDeadlineSeconds":20}}"#,
    ]);
    assert!(
        String::from_utf8_lossy(&raised.stderr).contains(
            r#"The Pod "bounded" is invalid: spec.activeDeadlineSeconds: Invalid value: 20: must be less than or equal to previous value"#
        ),
        "{raised:?}"
    );
    plinth.kubectl(&["delete", "pod", "bounded", "--timeout=60s"]);
}

/// Probes wait up to 30 s for their command (kube's default is 1 s): on a loaded machine two
/// slow `test -f` runs in a row would otherwise restart `main` at a moment the test does not
/// expect; a probe that fails, fails at once.
const STAGED: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: staged}
spec:
  volumes:
  - {name: shared, emptyDir: {}}
  - {name: marks, hostPath: {path: MARKS, type: Directory}}
  initContainers:
  - {name: first, image: busybox:1.36, command: [sh, -c, 'echo one >> /work/order'], volumeMounts: [{name: shared, mountPath: /work}]}
  - {name: second, image: busybox:1.36, command: [sh, -c, 'echo two >> /work/order'], volumeMounts: [{name: shared, mountPath: /work}]}
  - name: helper
    image: busybox:1.36
    restartPolicy: Always
    command: [sh, -c, 'echo sidecar >> /work/order; exec sleep 3600']
    volumeMounts: [{name: shared, mountPath: /work}]
    startupProbe: {exec: {command: [grep, -q, sidecar, /work/order]}, periodSeconds: 1, timeoutSeconds: 30}
  containers:
  - name: main
    image: busybox:1.36
    command: [sh, -c, 'cat /work/order; touch /tmp/started; exec sleep 3600']
    volumeMounts: [{name: shared, mountPath: /work}, {name: marks, mountPath: /marks}]
    startupProbe: {exec: {command: [test, -f, /tmp/started]}, periodSeconds: 1, timeoutSeconds: 30}
    livenessProbe: {exec: {command: [test, -f, /tmp/started]}, periodSeconds: 1, failureThreshold: 2, timeoutSeconds: 30}
    lifecycle:
      postStart: {exec: {command: [sh, -c, 'echo hooked > /marks/started']}}
      preStop: {exec: {command: [sh, -c, 'echo stopping > /marks/stopped']}}
---
apiVersion: v1
kind: Pod
metadata: {name: hook-fails}
spec:
  containers:
  - name: main
    image: busybox:1.36
    command: [sleep, '3600']
    lifecycle:
      postStart: {httpGet: {host: 127.0.0.1, port: 1, path: /nobody-listens}}
---
apiVersion: v1
kind: Pod
metadata: {name: init-fails}
spec:
  restartPolicy: Never
  initContainers:
  - {name: init1, image: busybox:1.36, command: ['true']}
  - {name: init2, image: busybox:1.36, command: ['false']}
  containers:
  - {name: run1, image: busybox:1.36, command: ['true']}
"#;

#[test]
fn a_restarted_agent_starts_its_pods_again_at_their_addresses() {
    let plinth = Plinth::start_with(Backend::Embedded, &["--node-name", "node-main"]);
    let agent = Agent::start(&plinth, "node-r");
    plinth.eventually("the agent's node is Ready", || {
        let out = plinth.kubectl_output(&["get", "node", "node-r", "--no-headers"]);
        String::from_utf8_lossy(&out.stdout).contains(" Ready ")
    });
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: kept}\nspec:\n  nodeSelector: {kubernetes.io/hostname: node-r}\n  containers:\n  - {name: redis, image: 'redis:7', readinessProbe: {tcpSocket: {port: 6379}, periodSeconds: 1}}\n",
    );
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/kept",
        "--timeout=120s",
    ]);
    let ip = pod(&plinth, "kept")["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(redis_answers(&ip));
    // The agent dies, and its containers with it.
    let dir = agent.crash();
    plinth.eventually("redis stopped with its agent", || !redis_answers(&ip));
    let _agent = Agent::start_in(&plinth, "node-r", dir);
    plinth.eventually("redis answers again", || redis_answers(&ip));
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/kept",
        "--timeout=120s",
    ]);
    let status = container_status(&plinth, "kept");
    assert_eq!(
        pod(&plinth, "kept")["status"]["podIP"],
        ip.as_str(),
        "the same address"
    );
    assert_eq!(status["restartCount"], 1, "{status}");
    assert_eq!(
        status["lastState"]["terminated"]["message"],
        "the node agent restarted"
    );
    plinth.kubectl(&["delete", "pod", "kept", "--timeout=60s"]);

    // A pod deleted while its agent was dead: the next agent removes what is left of it,
    // its memory-backed volume (a tmpfs on the machine) too.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: gone}\nspec:\n  nodeSelector: {kubernetes.io/hostname: node-r}\n  volumes: [{name: m, emptyDir: {medium: Memory}}]\n  containers:\n  - {name: c, image: busybox, command: [sleep, '3600'], volumeMounts: [{name: m, mountPath: /m}]}\n",
    );
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/gone",
        "--timeout=120s",
    ]);
    let uid = pod(&plinth, "gone")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let mounted = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(&format!("/pods/{uid}/"))
    };
    assert!(mounted(), "the pod's tmpfs is mounted");
    let dir = _agent.crash();
    plinth.kubectl(&["delete", "pod", "gone", "--grace-period=0", "--force"]);
    let leftover = dir.path().join("pods").join(&uid);
    assert!(leftover.is_dir());
    let _agent = Agent::start_in(&plinth, "node-r", dir);
    plinth.eventually("the dead agent's leftovers are removed", || {
        !mounted() && !leftover.exists()
    });
}

#[test]
fn claims_get_volumes_that_outlive_their_pods() {
    let plinth = with_node("node-v");
    let class = plinth.json(&["get", "storageclass", "standard"]);
    assert_eq!(class["provisioner"], "plinth.dev/local");
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 1Gi}}\n",
    );
    plinth.eventually("the claim is bound", || {
        plinth.json(&["get", "pvc", "data"])["status"]["phase"] == "Bound"
    });
    let claim = plinth.json(&["get", "pvc", "data"]);
    assert_eq!(
        claim["spec"]["storageClassName"], "standard",
        "the default class"
    );
    let volume = claim["spec"]["volumeName"].as_str().unwrap().to_owned();
    assert!(volume.starts_with("pvc-"), "{volume}");
    let row = plinth.kubectl(&["get", "pvc", "data", "--no-headers"]);
    assert!(
        row.contains("Bound")
            && row.contains(&volume)
            && row.contains("1Gi")
            && row.contains("RWO"),
        "{row}"
    );
    let pv = plinth.json(&["get", "pv", &volume]);
    assert_eq!(pv["status"]["phase"], "Bound");
    assert_eq!(pv["spec"]["claimRef"]["name"], "data");

    let user = |name: &str, command: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  restartPolicy: Never\n  volumes: [{{name: data, persistentVolumeClaim: {{claimName: data}}}}]\n  containers: [{{name: main, image: busybox:1.36, command: [sh, -c, '{command}'], volumeMounts: [{{name: data, mountPath: /data}}]}}]\n"
        )
    };
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &user("writer", "echo kept > /data/note"),
    );
    plinth.eventually("the writer finished", || {
        pod(&plinth, "writer")["status"]["phase"] == "Succeeded"
    });
    plinth.kubectl(&["delete", "pod", "writer"]);
    plinth.kubectl_with(&["apply", "-f", "-"], &user("reader", "cat /data/note"));
    plinth.eventually("the reader finished", || {
        pod(&plinth, "reader")["status"]["phase"] == "Succeeded"
    });
    assert_eq!(
        logs(&plinth, &["reader"]),
        "kept\n",
        "the claim's data outlived the writer"
    );
    plinth.kubectl(&["delete", "pod", "reader"]);

    // Deleting the claim deletes its volume (the class's reclaim policy).
    plinth.kubectl(&["delete", "pvc", "data"]);
    plinth.eventually("the volume is reclaimed", || {
        !plinth
            .kubectl_output(&["get", "pv", &volume])
            .status
            .success()
    });
    refused(
        &plinth,
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: bad}\nspec: {resources: {requests: {storage: 1Gi}}}\n",
        "spec.accessModes: Required value",
    );
    refused(
        &plinth,
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: bad}\nspec: {accessModes: [ReadWriteSometimes], resources: {requests: {storage: 1Gi}}}\n",
        "spec.accessModes: Unsupported value: \"ReadWriteSometimes\"",
    );
    refused(
        &plinth,
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: bad}\nspec: {accessModes: [ReadWriteOnce]}\n",
        "spec.resources[storage]: Required value",
    );
}

const HEALTH_SERVER: &str = r#"import os, time
from concurrent import futures
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
servicer = health.HealthServicer()
health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
server.add_insecure_port(os.environ["POD_IP"] + ":9090")
servicer.set("", health_pb2.HealthCheckResponse.SERVING)
server.start()
while True:
    time.sleep(0.2)
    if os.path.exists("/tmp/down"):
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
"#;

#[test]
fn grpc_and_https_probes_ask_the_pods_servers() {
    // A python image is the machine's Python (which has grpcio: the test script installs it).
    let python = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let python = String::from_utf8_lossy(&python.stdout).trim().to_owned();
    let images = tempfile::NamedTempFile::new().unwrap();
    // An image whose directory (a web site) each container gets a writable copy of.
    let site = tempfile::tempdir().unwrap();
    std::fs::write(site.path().join("index.html"), "hello\n").unwrap();
    std::fs::write(
        images.path(),
        format!(
            "\"python:*\": {python}\n\"site:*\":\n  cmd: [sh]\n  files: {{/srv/site: {}}}\n",
            site.path().display()
        ),
    )
    .unwrap();
    let plinth = Plinth::start_with(
        Backend::Embedded,
        &[
            "--node-name",
            "node-g",
            "--images",
            images.path().to_str().unwrap(),
        ],
    );
    plinth.eventually("the node is Ready", || {
        let out = plinth.kubectl_output(&["get", "node", "node-g", "--no-headers"]);
        String::from_utf8_lossy(&out.stdout).contains(" Ready ")
    });
    let script = plinth.dir.path().join("server.py");
    std::fs::write(&script, HEALTH_SERVER).unwrap();
    plinth.kubectl(&[
        "create",
        "configmap",
        "health",
        &format!("--from-file={}", script.display()),
    ]);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r"apiVersion: v1
kind: Pod
metadata: {name: grpc}
spec:
  volumes: [{name: app, configMap: {name: health}}]
  containers:
  - name: server
    image: python:3.11
    args: [/app/server.py]
    env: [{name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]
    volumeMounts: [{name: app, mountPath: /app}]
    readinessProbe: {grpc: {port: 9090}, periodSeconds: 1, failureThreshold: 1}
",
    );
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/grpc",
        "--timeout=120s",
    ]);
    plinth.kubectl(&["exec", "grpc", "--", "touch", "/tmp/down"]);
    plinth.eventually("NOT_SERVING makes the pod not ready", || {
        container_status(&plinth, "grpc")["ready"] == false
    });
    plinth.eventually("the Unhealthy event says why", || {
        plinth
            .kubectl(&[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=grpc,reason=Unhealthy",
            ])
            .contains("Readiness probe failed: service unhealthy (responded with \"NOT_SERVING\")")
    });
    plinth.kubectl(&["delete", "pod", "grpc", "--grace-period=1", "--timeout=60s"]);

    // The image's directory is the container's own: changed inside, the original stays.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: site}\nspec:\n  restartPolicy: Never\n  containers:\n  - {name: web, image: 'site:1', command: [sh, -c, 'cat /srv/site/index.html && mv /srv/site/index.html /srv/site/moved.html && ls /srv/site']}\n",
    );
    plinth.eventually("pod site Succeeded", || {
        pod(&plinth, "site")["status"]["phase"] == "Succeeded"
    });
    assert_eq!(logs(&plinth, &["site"]), "hello\nmoved.html\n");
    assert!(site.path().join("index.html").is_file());
    assert!(!site.path().join("moved.html").exists());

    // An HTTPS httpGet probe: the pod's self-signed certificate is not checked.
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["tls".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_file, key_file) = (
        plinth.dir.path().join("tls.crt"),
        plinth.dir.path().join("tls.key"),
    );
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    plinth.kubectl(&[
        "create",
        "secret",
        "tls",
        "serving",
        &format!("--cert={}", cert_file.display()),
        &format!("--key={}", key_file.display()),
    ]);
    let https = plinth.dir.path().join("https.py");
    std::fs::write(&https, HTTPS_SERVER).unwrap();
    plinth.kubectl(&[
        "create",
        "configmap",
        "https",
        &format!("--from-file={}", https.display()),
    ]);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r"apiVersion: v1
kind: Pod
metadata: {name: tls}
spec:
  volumes:
  - {name: app, configMap: {name: https}}
  - {name: tls, secret: {secretName: serving}}
  containers:
  - name: server
    image: python:3.11
    args: [/app/https.py]
    env: [{name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]
    volumeMounts: [{name: app, mountPath: /app}, {name: tls, mountPath: /tls}]
    readinessProbe: {httpGet: {scheme: HTTPS, port: 8443, path: /}, periodSeconds: 1}
",
    );
    plinth.kubectl(&["wait", "--for=condition=Ready", "pod/tls", "--timeout=120s"]);
    plinth.kubectl(&["delete", "pod", "tls", "--grace-period=1", "--timeout=60s"]);
}

const HTTPS_SERVER: &str = r#"import http.server, os, ssl
server = http.server.HTTPServer((os.environ["POD_IP"], 8443), http.server.SimpleHTTPRequestHandler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("/tls/tls.crt", "/tls/tls.key")
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"#;

#[test]
fn bad_nodes_endpoints_classes_limits_bindings_and_evictions_are_refused() {
    let plinth = Plinth::start(Backend::Embedded);
    refused(
        &plinth,
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nspec: {taints: [{key: a, effect: Sometimes}]}\n",
        "spec.taints[0].effect: Unsupported value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
    );
    refused(
        &plinth,
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s1}\nendpoints: []\n",
        "addressType: Required value",
    );
    refused(
        &plinth,
        "apiVersion: v1\nkind: Endpoints\nmetadata: {name: e1}\nsubsets: [{addresses: [{ip: nope}], ports: [{port: 80}]}]\n",
        "subsets[0].addresses[0].ip: Invalid value: \"nope\": must be a valid IP address",
    );
    refused(
        &plinth,
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: c1}\nprovisioner: x\nvolumeBindingMode: Later\n",
        "volumeBindingMode: Unsupported value: \"Later\"",
    );
    refused(
        &plinth,
        "apiVersion: v1\nkind: LimitRange\nmetadata: {name: l1}\nspec: {limits: [{type: Cluster}]}\n",
        "spec.limits[0].type: Unsupported value: \"Cluster\"",
    );
    for (resource, name) in [
        ("nodes", "n1"),
        ("endpointslices", "s1"),
        ("endpoints", "e1"),
        ("storageclasses", "c1"),
        ("limitranges", "l1"),
    ] {
        let out = plinth.kubectl_output(&["get", resource, name]);
        assert!(!out.status.success(), "{resource}/{name} was not stored");
    }

    // A pod already on a node cannot be bound again; an eviction names its pod.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: placed}\nspec: {nodeName: elsewhere, containers: [{name: a, image: busybox}]}\n",
    );
    let before = pod(&plinth, "placed")["metadata"]["resourceVersion"].clone();
    let binding = plinth.dir.path().join("binding.json");
    std::fs::write(
        &binding,
        r#"{"apiVersion":"v1","kind":"Binding","metadata":{"name":"placed"},"target":{"kind":"Node","name":"other"}}"#,
    )
    .unwrap();
    let out = plinth.kubectl_fails(&[
        "create",
        "--raw",
        "/api/v1/namespaces/default/pods/placed/binding",
        "-f",
        binding.to_str().unwrap(),
    ]);
    assert!(
        out.contains("pod placed is already assigned to node \"elsewhere\""),
        "{out}"
    );
    let eviction = plinth.dir.path().join("eviction.json");
    std::fs::write(
        &eviction,
        r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"someone-else"}}"#,
    )
    .unwrap();
    let out = plinth.kubectl_fails(&[
        "create",
        "--raw",
        "/api/v1/namespaces/default/pods/placed/eviction",
        "-f",
        eviction.to_str().unwrap(),
    ]);
    assert!(
        out.contains("name in URL does not match name in Eviction object"),
        "{out}"
    );
    let after = pod(&plinth, "placed");
    assert_eq!(
        after["metadata"]["resourceVersion"], before,
        "nothing changed"
    );
    assert_eq!(after["spec"]["nodeName"], "elsewhere");
}

/// The processes (PIDs) whose command line or environment holds `mark`.
fn marked_processes(mark: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let holds = |file: &str| {
            std::fs::read(entry.path().join(file))
                .is_ok_and(|bytes| String::from_utf8_lossy(&bytes).contains(mark))
        };
        if pid != std::process::id() && (holds("cmdline") || holds("environ")) {
            found.push(pid);
        }
    }
    found
}

#[test]
fn a_sandbox_killed_as_it_starts_leaves_no_process_behind() {
    // The agent kills a container's first stage when the pod goes; if that happens while the
    // first stage is still starting the second (a pod deleted as it starts), the second —
    // init of its own PID namespace — must not live on.
    let mark = format!("plinth-sandbox-test-{}", std::process::id());
    let root = tempfile::tempdir().unwrap();
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_plinth"));
    assert!(
        plinth_node::sandbox::available(exe),
        "this machine lets the sandbox make namespaces (CI runs as root)"
    );
    let mut started = 0;
    for attempt in 0..60u64 {
        let spec = plinth_node::sandbox::Spec {
            argv: vec!["/bin/sleep".into(), "3600".into()],
            env: vec![("PLINTH_TEST_MARK".into(), mark.clone())],
            root: root.path().join(attempt.to_string()),
            parent: plinth_node::sandbox::Parent::this(),
            ..Default::default()
        };
        std::fs::create_dir_all(&spec.root).unwrap();
        let mut first = std::process::Command::new(exe)
            .arg("sandbox")
            .arg(serde_json::to_string(&spec).unwrap())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // From at once to well after the container started.
        std::thread::sleep(std::time::Duration::from_micros(attempt * attempt * 20));
        first.kill().unwrap();
        first.wait().unwrap();
        started += 1;
    }
    assert_eq!(started, 60);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut left = marked_processes(&mark);
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
        left = marked_processes(&mark);
    }
    for pid in &left {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// A pod of higher priority that fits nowhere preempts: the scheduler evicts the
/// lowest-priority pod whose leaving makes room (kube's `DisruptionTarget` condition and
/// `Preempted` event), nominates the pod to the node, and binds it once the room is free; a
/// pod with `preemptionPolicy: Never` waits instead, with kube's message.
#[test]
fn a_higher_priority_pod_preempts_the_lowest_priority_pod_of_a_full_node() {
    let plinth = with_node("node-p");
    let node = plinth.json(&["get", "node", "node-p"]);
    let cpus: i64 = node["status"]["allocatable"]["cpu"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // Half the node each: two pods fill it.
    let half = format!("{}m", cpus * 500);
    for (name, value) in [("low", "10"), ("lower", "5"), ("high", "1000")] {
        plinth.kubectl(&["create", "priorityclass", name, &format!("--value={value}")]);
    }
    plinth.kubectl(&[
        "create",
        "priorityclass",
        "polite",
        "--value=1000",
        "--preemption-policy=Never",
    ]);
    let manifest = |name: &str, class: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  priorityClassName: {class}\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: busybox:1.36\n    command: [sleep, '3600']\n    resources: {{requests: {{cpu: '{half}'}}}}\n"
        )
    };
    plinth.kubectl_with(&["apply", "-f", "-"], &manifest("keeper", "low"));
    plinth.kubectl_with(&["apply", "-f", "-"], &manifest("victim", "lower"));
    for name in ["keeper", "victim"] {
        plinth.eventually("the low-priority pods run", || {
            pod(&plinth, name)["status"]["phase"] == "Running"
        });
    }
    // Never preempts: it waits, and says why.
    plinth.kubectl_with(&["apply", "-f", "-"], &manifest("waiter", "polite"));
    plinth.eventually("the polite pod's FailedScheduling", || {
        let events = plinth.json(&["get", "events", "--field-selector", "involvedObject.name=waiter,reason=FailedScheduling"]);
        events["items"].as_array().is_some_and(|items| {
            items.iter().any(|e| {
                e["message"] == "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
            })
        })
    });
    plinth.kubectl(&["delete", "pod", "waiter", "--grace-period=1"]);

    plinth.kubectl_with(&["apply", "-f", "-"], &manifest("urgent", "high"));
    let urgent_uid = pod(&plinth, "urgent")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    plinth.eventually("the victim is preempted", || {
        let events = plinth.json(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=victim,reason=Preempted",
        ]);
        events["items"].as_array().is_some_and(|items| {
            items
                .iter()
                .any(|e| e["message"] == format!("Preempted by pod {urgent_uid} on node node-p"))
        })
    });
    plinth.eventually("the urgent pod runs on the node", || {
        let urgent = pod(&plinth, "urgent");
        urgent["spec"]["nodeName"] == "node-p" && urgent["status"]["phase"] == "Running"
    });
    plinth.eventually("the victim is gone", || {
        plinth
            .kubectl_output(&["get", "pod", "victim"])
            .status
            .code()
            != Some(0)
    });
    // The higher of the two low-priority pods kept its place.
    assert_eq!(pod(&plinth, "keeper")["status"]["phase"], "Running");
    delete_all_pods(&plinth);
}

/// Extended resources a node advertises (patched into its status, as device plugins and the
/// e2e suite do) are scheduled as cpu is: a pod asking for more than is left waits, with
/// kube's "Insufficient <resource>", and runs once room is made; the agent's own status
/// reports keep the resource.
#[test]
fn extended_resources_a_node_advertises_are_counted_by_the_scheduler() {
    let plinth = with_node("node-x");
    let heartbeat = || {
        plinth.kubectl(&[
            "get",
            "node",
            "node-x",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].lastHeartbeatTime}",
        ])
    };
    let before = heartbeat();
    plinth.kubectl(&[
        "patch",
        "node",
        "node-x",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"capacity":{"example.com/widget":"3"},"allocatable":{"example.com/widget":"3"}}}"#,
    ]);
    let manifest = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: busybox:1.36\n    command: [sleep, '3600']\n    resources: {{requests: {{example.com/widget: '2'}}, limits: {{example.com/widget: '2'}}}}\n"
        )
    };
    plinth.kubectl_with(&["apply", "-f", "-"], &manifest("first"));
    plinth.eventually("the first pod runs", || {
        pod(&plinth, "first")["status"]["phase"] == "Running"
    });
    plinth.kubectl_with(&["apply", "-f", "-"], &manifest("second"));
    plinth.eventually("the second pod's FailedScheduling", || {
        let events = plinth.json(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=second,reason=FailedScheduling",
        ]);
        events["items"].as_array().is_some_and(|items| {
            items.iter().any(|e| {
                e["message"] == "0/1 nodes are available: 1 Insufficient example.com/widget. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
            })
        })
    });
    assert_eq!(pod(&plinth, "second")["spec"]["nodeName"], Value::Null);
    // The agent reports its status again: the resource stays.
    plinth.eventually("a status report after the patch", || heartbeat() != before);
    let node = plinth.json(&["get", "node", "node-x"]);
    assert_eq!(
        node["status"]["allocatable"]["example.com/widget"], "3",
        "{node}"
    );
    plinth.kubectl(&["delete", "pod", "first", "--grace-period=1"]);
    plinth.eventually("the second pod runs", || {
        pod(&plinth, "second")["status"]["phase"] == "Running"
    });
    delete_all_pods(&plinth);
}

/// The kubelet's read-only paths through `nodes/<name>/proxy`, as clients and the upstream
/// e2e suite read them: the node's pods, health, configuration, metrics, usage and logs.
#[test]
fn the_node_agent_answers_the_kubelets_paths_through_the_node_proxy() {
    let plinth = with_node("node-k");
    plinth.kubectl(&[
        "run",
        "sleeper",
        "--image=busybox:1.36",
        "--",
        "sleep",
        "3600",
    ]);
    plinth.eventually("the pod runs", || {
        pod(&plinth, "sleeper")["status"]["phase"] == "Running"
    });
    let raw = |path: &str| {
        plinth.kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/nodes/node-k/proxy/{path}"),
        ])
    };
    let pods: Value = serde_json::from_str(&raw("pods")).unwrap();
    assert_eq!(pods["kind"], "PodList");
    assert!(
        pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["metadata"]["name"] == "sleeper"),
        "{pods}"
    );
    assert_eq!(raw("healthz").trim(), "ok");
    let configz: Value = serde_json::from_str(&raw("configz")).unwrap();
    assert_eq!(configz["kubeletconfig"]["kind"], "KubeletConfiguration");
    let port = plinth.json(&["get", "node", "node-k"])["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].clone();
    assert_eq!(configz["kubeletconfig"]["port"], port);
    let summary: Value = serde_json::from_str(&raw("stats/summary")).unwrap();
    assert_eq!(summary["node"]["nodeName"], "node-k");
    let metrics = raw("metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("kubelet_running_pods ")),
        "{metrics}"
    );
    assert!(raw("logs/").contains("<pre>"));
    // Only reads go through: a POST is kube's 405.
    let posted = plinth.kubectl_stdin(
        &[
            "create",
            "--raw",
            "/api/v1/nodes/node-k/proxy/pods",
            "-f",
            "-",
        ],
        "{}",
    );
    let stderr = String::from_utf8_lossy(&posted.stderr);
    assert!(
        !posted.status.success()
            && stderr.contains("the server does not allow this method on the requested resource"),
        "{stderr}"
    );
    let missing = plinth.kubectl_fails(&["get", "--raw", "/api/v1/nodes/nowhere/proxy/pods"]);
    assert!(
        missing.contains("NotFound") || missing.contains("not found"),
        "{missing}"
    );
    delete_all_pods(&plinth);
}

/// `pods/<name>[:port]/proxy/<path>` and `services/<[scheme:]name[:port]>/proxy/<path>`
/// through kubectl: the API server forwards to the pod (at the port named, else its first
/// container port), or to a ready endpoint of the Service's port; a Service without one is
/// kube's 503, as is a pod port nothing listens on. The proxy's root without its slash
/// redirects to it with one, and an HTML page's absolute links lead back through the proxy.
#[test]
fn pods_and_services_are_reached_through_the_api_servers_proxy() {
    let plinth = with_node("node-p");
    plinth.kubectl_with(&["apply", "-f", "-"], WEB);
    plinth.kubectl_with(&["apply", "-f", "-"], &web_pod("web-1"));
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/web-1",
        "--timeout=120s",
    ]);
    for path in [
        "/api/v1/namespaces/default/pods/web-1/proxy/",
        "/api/v1/namespaces/default/pods/web-1:8080/proxy/index.html",
        "/api/v1/namespaces/default/pods/http:web-1:8080/proxy/",
    ] {
        assert_eq!(
            plinth.kubectl(&["get", "--raw", path]).trim(),
            "web-1",
            "{path}"
        );
    }
    // The proxy's root without its slash: kube's 301 to it with the slash (kubectl follows).
    assert_eq!(
        plinth
            .kubectl(&[
                "get",
                "--raw",
                "/api/v1/namespaces/default/pods/web-1/proxy"
            ])
            .trim(),
        "web-1"
    );
    // An HTML page's absolute links lead back through the proxy.
    plinth.kubectl(&[
        "exec",
        "web-1",
        "--",
        "sh",
        "-c",
        r#"echo '<a href="/rewriteme">x</a><a href="relative">y</a>' > /www/links.html"#,
    ]);
    assert_eq!(
        plinth
            .kubectl(&[
                "get",
                "--raw",
                "/api/v1/namespaces/default/pods/http:web-1:8080/proxy/links.html"
            ])
            .trim(),
        r#"<a href="/api/v1/namespaces/default/pods/http:web-1:8080/proxy/rewriteme">x</a><a href="relative">y</a>"#
    );
    plinth.eventually("the Service to have its endpoint", || {
        plinth
            .kubectl_output(&[
                "get",
                "--raw",
                "/api/v1/namespaces/default/services/web:http/proxy/",
            ])
            .stdout
            == b"web-1\n"
    });
    for path in [
        "/api/v1/namespaces/default/services/web/proxy/index.html",
        "/api/v1/namespaces/default/services/http:web:80/proxy/",
    ] {
        assert_eq!(
            plinth.kubectl(&["get", "--raw", path]).trim(),
            "web-1",
            "{path}"
        );
    }
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Service\nmetadata: {name: empty}\nspec:\n  selector: {app: nothing}\n  ports: [{port: 80}]\n",
    );
    let none = plinth.kubectl_fails(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/services/empty/proxy/",
    ]);
    assert!(
        none.contains(r#"no endpoints available for service \"empty\""#)
            || none.contains(r#"no endpoints available for service "empty""#),
        "{none}"
    );
    let closed = plinth.kubectl_fails(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods/web-1:9/proxy/",
    ]);
    assert!(
        closed.contains("ServiceUnavailable") || closed.contains("error trying to reach service"),
        "{closed}"
    );
    let missing = plinth.kubectl_fails(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods/nobody:80/proxy/",
    ]);
    assert!(missing.contains(r#"pods "nobody" not found"#), "{missing}");
    plinth.kubectl(&["delete", "pod", "web-1", "--wait=false"]);
}

/// `kubectl debug` into a running pod: the ephemeral container is added through
/// `pods/<name>/ephemeralcontainers`, the agent starts it in the pod, reports it in
/// `ephemeralContainerStatuses`, attaches to it (`-i`) and keeps its logs; existing ephemeral
/// containers cannot be changed or removed, and none can be set on create — kube's 422s.
#[test]
fn kubectl_debug_runs_an_ephemeral_container_in_a_running_pod() {
    let plinth = with_node("node-d");
    plinth.kubectl_with(&["apply", "-f", "-"], &web_pod("web-1"));
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/web-1",
        "--timeout=120s",
    ]);
    let attached = plinth.kubectl_stdin(
        &[
            "debug",
            "-i",
            "web-1",
            "--image=busybox:1.36",
            "--container=probe",
            "--target=web",
            "--",
            "sh",
            "-c",
            "read line; echo got $line",
        ],
        "hello\n",
    );
    let stdout = String::from_utf8_lossy(&attached.stdout);
    assert!(
        attached.status.success() && stdout.contains("got hello"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&attached.stderr)
    );
    plinth.eventually("the ephemeral container to finish", || {
        let pod = plinth.json(&["get", "pod", "web-1", "-o", "json"]);
        pod["status"]["ephemeralContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    });
    let pod = plinth.json(&["get", "pod", "web-1", "-o", "json"]);
    assert_eq!(
        pod["spec"]["ephemeralContainers"][0]["name"], "probe",
        "{pod}"
    );
    assert_eq!(
        pod["spec"]["ephemeralContainers"][0]["targetContainerName"],
        "web"
    );
    assert_eq!(
        pod["status"]["containerStatuses"][0]["ready"], true,
        "the pod stays ready: {pod}"
    );
    let logs = plinth.kubectl(&["logs", "web-1", "-c", "probe"]);
    assert!(logs.contains("got hello"), "{logs}");
    // A second, detached debugger joins the first.
    plinth.kubectl(&[
        "debug",
        "web-1",
        "--image=busybox:1.36",
        "--container=second",
        "--",
        "true",
    ]);
    plinth.eventually("both ephemeral containers to be reported", || {
        let pod = plinth.json(&["get", "pod", "web-1", "-o", "json"]);
        pod["status"]["ephemeralContainerStatuses"]
            .as_array()
            .is_some_and(|s| s.len() == 2)
    });

    // Bad input: kube's 422s, nothing changed.
    let replace = |pod: &Value| {
        plinth.kubectl_stdin(
            &[
                "replace",
                "--raw",
                "/api/v1/namespaces/default/pods/web-1/ephemeralcontainers",
                "-f",
                "-",
            ],
            &pod.to_string(),
        )
    };
    let mut changed = plinth.json(&["get", "pod", "web-1", "-o", "json"]);
    changed["spec"]["ephemeralContainers"][0]["image"] = "busybox:other".into();
    let out = replace(&changed);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"existing ephemeral containers \"probe\" may not be changed"#)
            || stderr.contains(r#"existing ephemeral containers "probe" may not be changed"#),
        "{stderr}"
    );
    let mut removed = plinth.json(&["get", "pod", "web-1", "-o", "json"]);
    removed["spec"]["ephemeralContainers"] = serde_json::json!([]);
    let out = replace(&removed);
    assert!(String::from_utf8_lossy(&out.stderr).contains("may not be removed"));
    let mut ported = plinth.json(&["get", "pod", "web-1", "-o", "json"]);
    ported["spec"]["ephemeralContainers"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "third", "image": "busybox:1.36", "ports": [{"containerPort": 9}], "targetContainerName": "nowhere"}));
    let out = replace(&ported);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "spec.ephemeralContainers[2].ports: Forbidden: cannot be set for an Ephemeral Container"
        ) && (stderr.contains(
            r#"spec.ephemeralContainers[2].targetContainerName: Not found: \"nowhere\""#
        ) || stderr
            .contains(r#"spec.ephemeralContainers[2].targetContainerName: Not found: "nowhere""#)),
        "{stderr}"
    );
    let pod = plinth.json(&["get", "pod", "web-1", "-o", "json"]);
    assert_eq!(
        pod["spec"]["ephemeralContainers"].as_array().unwrap().len(),
        2
    );
    let created = plinth.kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: early}\nspec:\n  containers: [{name: c, image: busybox:1.36}]\n  ephemeralContainers: [{name: e, image: busybox:1.36}]\n",
    );
    assert!(
        String::from_utf8_lossy(&created.stderr)
            .contains("spec.ephemeralContainers: Forbidden: cannot be set on create")
    );
    plinth.kubectl(&["delete", "pod", "web-1", "--wait=false"]);
}

/// The agent's server as a kubelet's: the port the Node advertises, callers authenticated by
/// the API server (a TokenReview of their bearer token) and authorized for
/// `nodes/<node>/proxy` (a SubjectAccessReview) — 401 without credentials, 403 for a user
/// without the right, in the kubelet's words.
#[test]
fn the_agent_authenticates_and_authorizes_callers_as_a_kubelet() {
    let plinth = with_node("node-k");
    let node = plinth.json(&["get", "node", "node-k", "-o", "json"]);
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_i64()
        .unwrap();
    let get = |token: Option<&str>| {
        let mut curl = std::process::Command::new("curl");
        curl.args([
            "-sk",
            "-w",
            "\n%{http_code}",
            &format!("https://127.0.0.1:{port}/pods"),
        ]);
        if let Some(token) = token {
            curl.args(["-H", &format!("Authorization: Bearer {token}")]);
        }
        let out = curl.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap();
        (code.to_owned(), body.to_owned())
    };
    assert_eq!(get(None), ("401".to_owned(), "Unauthorized".to_owned()));
    plinth.kubectl(&["create", "serviceaccount", "nosy"]);
    let nosy = plinth.kubectl(&["create", "token", "nosy"]);
    assert_eq!(
        get(Some(nosy.trim())),
        (
            "403".to_owned(),
            "Forbidden (user=system:serviceaccount:default:nosy, verb=get, resource=nodes, subresource=proxy)".to_owned()
        )
    );
    plinth.kubectl(&[
        "create",
        "clusterrole",
        "node-reader",
        "--verb=get",
        "--resource=nodes/proxy",
    ]);
    plinth.kubectl(&[
        "create",
        "clusterrolebinding",
        "nosy-nodes",
        "--clusterrole=node-reader",
        "--serviceaccount=default:nosy",
    ]);
    plinth.eventually("the bound account to read the node's pods", || {
        let (code, body) = get(Some(nosy.trim()));
        code == "200" && body.contains("\"kind\":\"PodList\"")
    });
}

#[test]
fn security_contexts_termination_messages_and_sysctls_apply_as_the_kubelets_do() {
    let plinth = with_node("node-sec");
    let host_shm = std::fs::read_to_string("/proc/sys/kernel/shm_rmid_forced").unwrap();
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"apiVersion: v1
kind: Pod
metadata: {name: user}
spec:
  restartPolicy: Never
  securityContext: {runAsUser: 1000, runAsGroup: 3000, supplementalGroups: [4000]}
  containers:
  - name: main
    image: busybox:1.36
    command: [sh, -c, "echo uid=$(id -u) gid=$(id -g) groups=$(id -G); grep -E 'CapBnd|NoNewPrivs' /proc/self/status"]
    securityContext: {runAsUser: 65534, allowPrivilegeEscalation: false}
---
apiVersion: v1
kind: Pod
metadata: {name: unprivileged}
spec:
  restartPolicy: Never
  containers:
  - {name: main, image: busybox:1.36, command: [sh, -c, "ip link add dummy0 type dummy || true; grep CapBnd /proc/self/status"]}
---
apiVersion: v1
kind: Pod
metadata: {name: read-only}
spec:
  restartPolicy: Never
  volumes: [{name: scratch, emptyDir: {}}]
  containers:
  - name: main
    image: busybox:1.36
    command: [sh, -c, "echo x > /file; echo x > /tmp/file; echo x > /usr/file; for d in /scratch /tmp/certs /usr/local/plinth-scratch; do echo y > $d/file && echo $d written; done"]
    securityContext: {readOnlyRootFilesystem: true}
    # Mount points under the container's /tmp and a machine directory are made before the
    # root is sealed (a kubebuilder manager mounts its certificates under /tmp).
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
    - {name: scratch, mountPath: /tmp/certs, subPath: certs}
    - {name: scratch, mountPath: /usr/local/plinth-scratch, subPath: usr}
---
apiVersion: v1
kind: Pod
metadata: {name: message-file}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox:1.36
    command: [sh, -c, "echo -n DONE > /dev/termination-custom-log"]
    terminationMessagePath: /dev/termination-custom-log
    securityContext: {runAsUser: 1000}
---
apiVersion: v1
kind: Pod
metadata: {name: message-log}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox:1.36
    command: [sh, -c, "echo first; echo -n DONE; false"]
    terminationMessagePolicy: FallbackToLogsOnError
---
apiVersion: v1
kind: Pod
metadata: {name: sysctl}
spec:
  restartPolicy: Never
  securityContext:
    sysctls: [{name: kernel.shm_rmid_forced, value: "1"}]
  containers:
  - {name: main, image: busybox:1.36, command: [sh, -c, "cat /proc/sys/kernel/shm_rmid_forced"]}
---
apiVersion: v1
kind: Pod
metadata: {name: unsafe-sysctl}
spec:
  securityContext:
    sysctls: [{name: kernel.msgmax, value: "10000000000"}]
  containers:
  - {name: main, image: busybox:1.36, command: [sleep, "3600"]}
"#,
    );
    // A sysctl outside the safe set: the node rejects the pod (the kubelet's admission).
    plinth.eventually("pod unsafe-sysctl rejected", || {
        pod(&plinth, "unsafe-sysctl")["status"]["phase"] == "Failed"
    });
    let rejected = pod(&plinth, "unsafe-sysctl")["status"].clone();
    assert_eq!(rejected["reason"], "SysctlForbidden", "{rejected}");
    assert_eq!(
        rejected["message"],
        r#"Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted"#
    );
    assert!(rejected["containerStatuses"].is_null(), "{rejected}");
    for name in [
        "user",
        "unprivileged",
        "read-only",
        "message-file",
        "sysctl",
    ] {
        plinth.eventually(&format!("pod {name} Succeeded"), || {
            pod(&plinth, name)["status"]["phase"] == "Succeeded"
        });
    }
    plinth.eventually("pod message-log Failed", || {
        pod(&plinth, "message-log")["status"]["phase"] == "Failed"
    });

    // The container's user wins over the pod's; the pod's group and supplementary groups
    // apply; no_new_privs; the runtimes' default capability set bounds it.
    let user = logs(&plinth, &["user"]);
    assert!(
        user.contains("uid=65534 gid=3000 groups=3000 4000"),
        "{user}"
    );
    assert!(user.contains("NoNewPrivs:\t1"), "{user}");
    assert!(user.contains("CapBnd:\t00000000a80425fb"), "{user}");
    // Without privileged (or NET_ADMIN), root in the container cannot change the network.
    let unprivileged = logs(&plinth, &["unprivileged"]);
    assert!(
        unprivileged.contains("Operation not permitted"),
        "{unprivileged}"
    );
    assert!(
        unprivileged.contains("CapBnd:\t00000000a80425fb"),
        "{unprivileged}"
    );
    let read_only = logs(&plinth, &["read-only"]);
    assert_eq!(
        read_only.matches("Read-only file system").count(),
        3,
        "/file, /tmp/file and /usr/file are refused: {read_only}"
    );
    for dir in ["/scratch", "/tmp/certs", "/usr/local/plinth-scratch"] {
        assert!(read_only.contains(&format!("{dir} written")), "{read_only}");
    }
    assert!(!std::path::Path::new("/file").exists());

    // Termination messages: from the file (written by a non-root user at a custom path),
    // else from the failed container's log.
    let terminated = |name: &str| container_status(&plinth, name)["state"]["terminated"].clone();
    assert_eq!(terminated("message-file")["message"], "DONE");
    assert_eq!(terminated("message-log")["message"], "first\nDONE");
    assert_eq!(terminated("user").get("message"), None);

    // The pod's sysctl is its own: set inside, the machine's unchanged.
    assert_eq!(logs(&plinth, &["sysctl"]).trim(), "1");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/shm_rmid_forced").unwrap(),
        host_shm
    );
    delete_all_pods(&plinth);
}

/// A pod's log over a WebSocket (`binary.k8s.io`, `base64.binary.k8s.io`) as the e2e suite
/// reads it, through the Python client's `websocket` package.
const LOG_OVER_WEBSOCKET: &str = r#"
import base64, os, ssl, sys, tempfile, yaml, websocket
cfg = yaml.safe_load(open(sys.argv[1]))
cluster, user = cfg["clusters"][0]["cluster"], cfg["users"][0]["user"]
def temp(data):
    f = tempfile.NamedTemporaryFile(delete=False); f.write(base64.b64decode(data)); f.close(); return f.name
sslopt = {"cert_reqs": ssl.CERT_NONE}
headers = []
if "token" in user:
    headers.append("Authorization: Bearer " + user["token"])
else:
    sslopt.update({"certfile": temp(user["client-certificate-data"]), "keyfile": temp(user["client-key-data"])})
url = cluster["server"].replace("https", "wss") + "/api/v1/namespaces/default/pods/talker/log?container=main"
for protocol in ["binary.k8s.io", "base64.binary.k8s.io"]:
    ws = websocket.create_connection(url, sslopt=sslopt, header=headers, subprotocols=[protocol])
    got = []
    while True:
        try:
            message = ws.recv()
        except websocket.WebSocketConnectionClosedException:
            break
        if not message:
            break
        got.append(message if isinstance(message, bytes) else message.encode())
    print(protocol, repr(b"".join(got)))
exec_url = cluster["server"].replace("https", "wss") + "/api/v1/namespaces/default/pods/talker/exec?command=echo&command=remote+execution+test&container=main&stderr=1&stdout=1"
ws = websocket.create_connection(exec_url, sslopt=sslopt, header=headers, subprotocols=["channel.k8s.io"])
out = b""
while True:
    try:
        message = ws.recv()
    except websocket.WebSocketConnectionClosedException:
        break
    if not message:
        break
    if message[0] == 1:
        out += message[1:]
print("exec", repr(out))
"#;

#[test]
fn exec_over_spdy_and_logs_over_websockets_as_older_clients_and_the_e2e_suite_use_them() {
    let plinth = with_node("node-streams");
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"apiVersion: v1
kind: Pod
metadata: {name: talker}
spec:
  containers:
  - {name: main, image: busybox:1.36, command: [sh, -c, "echo container is alive; sleep 3600"]}
"#,
    );
    plinth.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/talker",
        "--timeout=120s",
    ]);
    // kubectl speaks SPDY (remotecommand v4) when told not to use WebSockets.
    let spdy = |args: &[&str], input: &str| {
        let mut command = plinth.kubectl_command();
        command
            .args(args)
            .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = command.spawn().unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = spdy(
        &[
            "exec",
            "talker",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("err\n"), "{stderr}");
    assert!(
        stderr.contains("command terminated with exit code 3"),
        "{stderr}"
    );
    let echoed = spdy(
        &["exec", "-i", "talker", "--", "cat"],
        "through spdy stdin\n",
    );
    assert_eq!(
        String::from_utf8_lossy(&echoed.stdout),
        "through spdy stdin\n"
    );
    assert!(echoed.status.success());

    let out = std::process::Command::new("python3")
        .args(["-c", LOG_OVER_WEBSOCKET])
        .arg(&plinth.kubeconfig)
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.contains("binary.k8s.io b'container is alive\\n'"),
        "{printed}"
    );
    assert!(
        printed.contains("base64.binary.k8s.io b'Y29udGFpbmVyIGlzIGFsaXZlCg=='"),
        "{printed}"
    );
    // An exec over the first WebSocket channel protocol (`channel.k8s.io`).
    assert!(
        printed.contains("exec b'remote execution test\\n'"),
        "{printed}"
    );
    delete_all_pods(&plinth);
}

#[test]
fn sub_path_expressions_expand_the_containers_variables_and_refuse_escapes() {
    let plinth = with_node("node-subpath");
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"apiVersion: v1
kind: Pod
metadata: {name: expanded}
spec:
  restartPolicy: Never
  volumes: [{name: work, emptyDir: {}}]
  containers:
  - name: main
    image: busybox:1.36
    command: [sh, -c, "echo here > /logs/file; test -f /all/expanded/file && echo found"]
    env: [{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
    volumeMounts:
    - {name: work, mountPath: /logs, subPathExpr: $(POD_NAME)}
    - {name: work, mountPath: /all}
---
apiVersion: v1
kind: Pod
metadata: {name: escaping}
spec:
  restartPolicy: Never
  volumes: [{name: work, emptyDir: {}}]
  containers:
  - name: main
    image: busybox:1.36
    command: [sh, -c, "true"]
    env: [{name: WHERE, value: ".."}]
    volumeMounts: [{name: work, mountPath: /logs, subPathExpr: $(WHERE)}]
"#,
    );
    plinth.eventually("the expanded sub path is used", || {
        pod(&plinth, "expanded")["status"]["phase"] == "Succeeded"
    });
    assert!(logs(&plinth, &["expanded"]).contains("found"));
    plinth.eventually("an escaping sub path is a config error", || {
        container_status(&plinth, "escaping")["state"]["waiting"]["reason"]
            == "CreateContainerConfigError"
    });
    let waiting = container_status(&plinth, "escaping")["state"]["waiting"].clone();
    assert_eq!(
        waiting["message"],
        "error SubPath `..` must not contain '..'"
    );
    delete_all_pods(&plinth);
}

#[test]
fn memory_empty_dirs_are_tmpfs_writable_by_any_user_and_unmounted_with_their_pod() {
    let plinth = with_node("node-memory");
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"apiVersion: v1
kind: Pod
metadata: {name: memory}
spec:
  securityContext: {runAsUser: 1001, fsGroup: 2000}
  volumes:
  - {name: cache, emptyDir: {medium: Memory, sizeLimit: 16Mi}}
  - {name: disk, emptyDir: {}}
  containers:
  - name: main
    image: busybox:1.36
    command: [sh, -c, "stat -f -c %T /cache; stat -c '%a %g' /cache /disk; echo x > /cache/f && echo x > /disk/f && echo written; sleep 3600"]
    volumeMounts: [{name: cache, mountPath: /cache}, {name: disk, mountPath: /disk}]
"#,
    );
    plinth.eventually("the pod wrote to both volumes", || {
        logs(&plinth, &["memory"]).contains("written")
    });
    let out = logs(&plinth, &["memory"]);
    assert!(out.starts_with("tmpfs\n"), "{out}");
    // Anyone may write an emptyDir; with an fsGroup it is that group's (set-group-ID).
    assert!(out.contains("2777 2000\n2777 2000\n"), "{out}");
    let uid = pod(&plinth, "memory")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let mounted = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| l.contains(&uid))
    };
    assert!(mounted(), "the memory volume is a mount of the agent's");
    delete_all_pods(&plinth);
    plinth.eventually("the pod's tmpfs is unmounted", || !mounted());
}

/// A deleted pod ends in a terminal phase before it goes, as the kubelet's (kube 1.27 on)
/// does, so a Job's pod failure policy can see why it ended: `Failed` when a container was
/// killed, `Succeeded` when each ended with 0 on `SIGTERM`. A finalizer keeps the pods for
/// the test to read once the agent has stopped them.
#[test]
fn a_deleted_pod_ends_in_a_terminal_phase_as_the_kubelets_do() {
    let plinth = with_node("node-term");
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"apiVersion: v1
kind: Pod
metadata: {name: killed, finalizers: [example.com/keep]}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{name: main, image: busybox:1.36, command: [sleep, '3600']}]
---
apiVersion: v1
kind: Pod
metadata: {name: graceful, finalizers: [example.com/keep]}
spec:
  containers:
  - name: main
    image: busybox:1.36
    command: [sh, -c, 'trap "exit 0" TERM; echo up; while true; do sleep 0.2; done']
"#,
    );
    for pod in ["killed", "graceful"] {
        plinth.kubectl(&[
            "wait",
            "--for=condition=Ready",
            &format!("pod/{pod}"),
            "--timeout=120s",
        ]);
    }
    plinth.eventually("graceful's trap is set", || {
        plinth.kubectl(&["logs", "graceful"]).contains("up")
    });
    plinth.kubectl(&["delete", "pod", "killed", "graceful", "--wait=false"]);
    for (pod, phase) in [("killed", "Failed"), ("graceful", "Succeeded")] {
        plinth.eventually(&format!("{pod} {phase}"), || {
            plinth.kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.phase}"]) == phase
        });
        plinth.kubectl(&[
            "patch",
            "pod",
            pod,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ]);
    }
}
