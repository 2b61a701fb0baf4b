//! The operator deployed as users deploy it: `deploy/crd.yaml` and
//! `deploy/redis-operator.yaml` applied with kubectl to `plinth serve`, whose node agent runs
//! the operator's two replicas as pods (the image mapped to this build's binary; in-cluster
//! configuration through the `kubernetes` Service) and the cluster's `redis-server` pods.
//! Both replicas serve the admission webhooks behind the webhook Service (the API server
//! calls one of its endpoints, TLS name `redis-operator-webhook.redis-system.svc`, the
//! certificate from `redis-operator webhook-secret`). One replica leads; SIGKILLed
//! mid-failover (a hung primary's clock running), a successor takes the Lease and finishes
//! the failover: one promotion, the data there, every server following the promoted one.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use plinth_testenv::Served;

fn lease_holder(server: &Served) -> Option<String> {
    let out = server.kubectl(&[
        "-n",
        "redis-system",
        "get",
        "lease",
        "redis-operator",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    let holder = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !holder.is_empty()).then_some(holder)
}

fn cluster_status(server: &Served) -> serde_json::Value {
    server.json(&["get", "redis", "cache"])["status"].clone()
}

#[test]
fn the_shipped_manifests_run_the_operator_in_two_pods_that_hand_over() {
    let server = Served::start(
        plinth_testenv::plinth_binary(env!("CARGO_BIN_EXE_redis-operator"), env!("CARGO")),
        "redis-deployed",
        &[(
            "example.com/redis-operator:*",
            env!("CARGO_BIN_EXE_redis-operator"),
        )],
        true,
    );
    plinth_testenv::eventually_blocking("the node is Ready", || {
        let out = server.kubectl(&["get", "node", "redis-deployed", "--no-headers"]);
        String::from_utf8_lossy(&out.stdout).contains(" Ready ")
    });
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    // The webhook certificate first (as cert-manager's would be), then the shipped files.
    server.ok(&["create", "namespace", "redis-system"]);
    let secret = Command::new(env!("CARGO_BIN_EXE_redis-operator"))
        .args(["webhook-secret", "--namespace", "redis-system"])
        .output()
        .unwrap();
    assert!(secret.status.success());
    let secret_file = server.dir.join("webhook-secret.yaml");
    std::fs::write(&secret_file, &secret.stdout).unwrap();
    server.ok(&["apply", "-f", secret_file.to_str().unwrap()]);
    for file in ["crd.yaml", "redis-operator.yaml"] {
        server.ok(&["apply", "-f", deploy.join(file).to_str().unwrap()]);
    }
    server.ok(&[
        "-n",
        "redis-system",
        "rollout",
        "status",
        "deployment/redis-operator",
        "--timeout=180s",
    ]);
    let pods = server.json(&[
        "-n",
        "redis-system",
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=redis-operator",
    ]);
    let names: Vec<String> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    plinth_testenv::eventually_blocking("one replica leads", || lease_holder(&server).is_some());
    let holder = lease_holder(&server).unwrap();
    let leader = names
        .iter()
        .find(|n| holder.starts_with(&format!("{n}_")))
        .unwrap_or_else(|| panic!("the holder {holder} is one of {names:?}"))
        .clone();

    // The webhooks answer through their Service: the CA the servers wrote in, a bad cluster
    // refused with the validating webhook's message.
    plinth_testenv::eventually_blocking("the webhooks' CA written in", || {
        let config = server.json(&["get", "validatingwebhookconfiguration", "redis-operator"]);
        config["webhooks"][0]["clientConfig"]["caBundle"]
            .as_str()
            .is_some_and(|b| !b.is_empty())
            && config["webhooks"][0]["clientConfig"]["service"]["name"] == "redis-operator-webhook"
    });
    let bad = server.dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: database.example.com/v1alpha1\nkind: RedisCluster\nmetadata: {name: bad}\nspec: {replicas: 1, storage: {size: 1GB}}\n",
    )
    .unwrap();
    let refused = server.kubectl(&["apply", "-f", bad.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&refused.stderr);
    assert!(
        text.contains(
            r#"admission webhook "validate.redisclusters.database.example.com" denied the request"#
        ) && text.contains(r#"spec.storage.size: Invalid value: "1GB""#),
        "{text}"
    );

    // The leader runs a cluster of three real redis-server pods.
    let cluster = "apiVersion: database.example.com/v1alpha1\nkind: RedisCluster\nmetadata: {name: cache}\nspec: {replicas: 3, enableAutoFailover: true}\n";
    let manifest = server.dir.join("cluster.yaml");
    std::fs::write(&manifest, cluster).unwrap();
    server.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    plinth_testenv::eventually_blocking("three servers run", || {
        let status = cluster_status(&server);
        status["phase"] == "Running" && status["readyReplicas"] == 3
    });
    let status = cluster_status(&server);
    let primary = status["currentMaster"].as_str().unwrap().to_owned();
    let password = password_of(&server);
    let ip = |pod: &str| -> String {
        server
            .ok(&["get", "pod", pod, "-o", "jsonpath={.status.podIP}"])
            .trim()
            .to_owned()
    };
    let primary_ip = ip(&primary);
    assert_eq!(
        redis(&primary_ip, &password, &["set", "greeting", "hello"]),
        "OK"
    );
    assert_eq!(redis(&primary_ip, &password, &["wait", "2", "10000"]), "2");

    // Mid-failover the leader dies: the primary hangs, the leader starts the failover's
    // clock (status.masterUnreachableSince) and is SIGKILLed before the threshold passes.
    let server_pid = server_pid(&primary_ip).unwrap();
    assert!(
        Command::new("kill")
            .args(["-STOP", &server_pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let resume = Resume(server_pid);
    plinth_testenv::eventually_blocking("the leader sees the primary unreachable", || {
        cluster_status(&server)["masterUnreachableSince"].is_string()
    });
    let since = cluster_status(&server)["masterUnreachableSince"].clone();
    let leader_pids = plinth_testenv::processes(|p| {
        p.args
            .first()
            .is_some_and(|a| a.ends_with("redis-operator"))
            && p.args.get(1).is_some_and(|a| a == "run")
            && p.has_env("POD_NAME", &leader)
    });
    assert_eq!(
        leader_pids.len(),
        1,
        "the leader's process: {leader_pids:?}"
    );
    // Paused (SIGSTOP: a stalled process, alive, that will wake) rather than killed.
    assert!(
        Command::new("kill")
            .args(["-STOP", &leader_pids[0].to_string()])
            .status()
            .unwrap()
            .success()
    );
    let paused = Resume(leader_pids[0]);

    // The successor (the other replica) takes the Lease once it expires and finishes the
    // failover on the same clock: one promotion, one FailedOver event.
    plinth_testenv::eventually_blocking("a replica is promoted", || {
        let status = cluster_status(&server);
        let clock = &status["masterUnreachableSince"];
        assert!(
            clock.is_null() || *clock == since,
            "the clock started again: {clock} after {since}"
        );
        status["currentMaster"]
            .as_str()
            .is_some_and(|m| m != primary)
    });
    let successor = lease_holder(&server);
    assert_ne!(successor.as_ref(), Some(&holder), "a successor leads");
    // From here on (the successor is seen leading, so it took over before) the old leader
    // must write nothing: it wakes with overdue work, its lease long unrenewed; it exits on
    // learning that it lost leadership (its container restarts with a new identity).
    let taken_over = utc_now();
    drop(paused);
    plinth_testenv::eventually_blocking("the woken leader exits", || {
        !Path::new(&format!("/proc/{}", leader_pids[0])).exists()
            || std::fs::read_to_string(format!("/proc/{}/stat", leader_pids[0]))
                .is_ok_and(|stat| stat.contains(") Z "))
    });
    let agent = format!("redis-operator/{holder}");
    let events = server.audit_events();
    assert!(
        events.iter().any(|e| e["userAgent"] == agent.as_str()),
        "the old leader's requests are in the audit log under its identity"
    );
    let late_writes: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["userAgent"] == agent.as_str())
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete" | "deletecollection")
            )
        })
        .filter(|e| {
            e["requestReceivedTimestamp"]
                .as_str()
                .is_some_and(|t| t > taken_over.as_str())
        })
        .collect();
    assert!(
        late_writes.is_empty(),
        "the old leader wrote after the takeover: {late_writes:#?}"
    );
    eprintln!(
        "{holder} killed with {primary} unreachable since {since}; {successor:?} promoted {:?}",
        cluster_status(&server)["currentMaster"]
    );
    let promoted = cluster_status(&server)["currentMaster"]
        .as_str()
        .unwrap()
        .to_owned();
    let promoted_ip = ip(&promoted);
    assert!(
        redis(&promoted_ip, &password, &["info", "replication"]).contains("role:master"),
        "{promoted} takes writes"
    );
    assert_eq!(
        redis(&promoted_ip, &password, &["get", "greeting"]),
        "hello"
    );
    drop(resume);
    plinth_testenv::eventually_blocking("all three follow the promoted server", || {
        ["cache-0", "cache-1", "cache-2"]
            .iter()
            .filter(|pod| **pod != promoted)
            .all(|pod| {
                let info = redis(&ip(pod), &password, &["info", "replication"]);
                info.contains("role:slave")
                    // By the promoted server's stable name, not its address: the operator
                    // runs in a pod, where the cluster's names resolve.
                    && info.contains(&format!(
                        "master_host:{promoted}.cache-headless.default.svc.cluster.local\r\n"
                    ))
                    && info.contains("master_link_status:up")
            })
            && cluster_status(&server)["phase"] == "Running"
    });
    assert_eq!(
        failovers(&server),
        1,
        "the successor finished the failover, it did not fail over again"
    );
    server.ok(&["delete", "redis", "cache", "--timeout=120s"]);
}

/// `redis-cli -h ip -a password args…`'s output.
fn redis(ip: &str, password: &str, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", ip, "--no-auth-warning", "-a", password])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The password the operator generated into `cache-auth`.
fn password_of(server: &Served) -> String {
    let encoded = server.ok(&[
        "get",
        "secret",
        "cache-auth",
        "-o",
        "jsonpath={.data.password}",
    ]);
    let decoded =
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded.trim()).unwrap();
    String::from_utf8(decoded).unwrap()
}

/// The PID of the `redis-server` serving `ip` (it titles itself `redis-server <ip>:6379`).
fn server_pid(ip: &str) -> Option<u32> {
    plinth_testenv::titled("redis-server", &format!("{ip}:6379"))
}

/// How many times the cluster failed over, by its `FailedOver` events (a repeated event
/// counts its series).
fn failovers(server: &Served) -> u64 {
    let events = server.json(&["get", "events.events.k8s.io"]);
    events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["name"] == "cache" && e["reason"] == "FailedOver")
        .map(|e| e["series"]["count"].as_u64().unwrap_or(1))
        .sum()
}

/// Resumes a stopped process when dropped (a failing test leaves nothing stopped).
/// Now as RFC 3339 with microseconds in UTC, as audit timestamps are written (comparable as
/// strings).
fn utc_now() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.%6NZ"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}
