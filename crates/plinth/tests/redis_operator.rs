//! The RedisCluster operator (`operators/redis-operator`) end to end on `plinth serve` with
//! its node agent: real `redis-server` processes in a StatefulSet's pods, replication checked
//! with `redis-cli`, a hung primary replaced by a replica and rejoining as one, scaling
//! through `/scale` with a switch-over before the primary's pod goes, a backup Job on
//! request, the CRD's CEL rules, the operator's metrics and events, and a final snapshot
//! before a deleted cluster goes.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Backend, Plinth};
use serde_json::Value;

/// `redis-cli -h ip -a password args…`'s output.
fn redis(ip: &str, password: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-h", ip, "--no-auth-warning", "-a", password])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Waits for `check`, as `Plinth::eventually` does; if it never holds, prints what the
/// clusters, pods and events were first (a failure in CI explains itself).
fn wait(plinth: &Plinth, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + plinth_testenv::HANG_GUARD;
    while std::time::Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for args in [
        &["get", "redis", "-o", "yaml"][..],
        &["get", "pods,statefulsets,jobs", "-o", "wide"][..],
        &["get", "events", "--sort-by=.metadata.creationTimestamp"][..],
    ] {
        let out = plinth.kubectl_output(args);
        eprintln!(
            "kubectl {args:?}:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    panic!("{what} never happened (hang guard)");
}

fn status(plinth: &Plinth) -> Value {
    plinth.json(&["get", "redis", "cache"])["status"].clone()
}

/// The cluster's status, checked to name a primary (scaling never leaves it without one).
fn status_with_primary(plinth: &Plinth) -> Value {
    let status = status(plinth);
    assert!(
        status["currentMaster"].is_string(),
        "never without a primary"
    );
    status
}

fn pod_ip(plinth: &Plinth, pod: &str) -> String {
    plinth
        .kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.podIP}"])
        .trim()
        .to_owned()
}

/// The PID of the `redis-server` listening on `ip` (it titles itself
/// `redis-server <ip>:6379`).
fn server_pid(ip: &str) -> Option<u32> {
    plinth_testenv::titled("redis-server", &format!("{ip}:6379"))
}

/// Resumes a stopped process when dropped (so a failing test leaves nothing stopped).
struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

/// Where claim `name`'s volume lives on this machine.
fn volume_dir(plinth: &Plinth, claim: &str) -> std::path::PathBuf {
    let volume = plinth
        .kubectl(&["get", "pvc", claim, "-o", "jsonpath={.spec.volumeName}"])
        .trim()
        .to_owned();
    let pv = plinth.json(&["get", "pv", &volume]);
    let path = pv["spec"]["hostPath"]["path"]
        .as_str()
        .or_else(|| pv["spec"]["local"]["path"].as_str())
        .unwrap();
    std::path::PathBuf::from(path)
}

/// Whether `file` is an RDB snapshot `redis-check-rdb` accepts.
fn is_snapshot(file: &std::path::Path) -> bool {
    let checked = std::process::Command::new("redis-check-rdb")
        .arg(file)
        .output()
        .unwrap();
    checked.status.success() && String::from_utf8_lossy(&checked.stdout).contains("RDB looks OK")
}

/// The password in Secret `name` (the operator's generated one).
fn password_of(plinth: &Plinth, name: &str) -> String {
    let encoded = plinth.kubectl(&["get", "secret", name, "-o", "jsonpath={.data.password}"]);
    let decoded =
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded.trim()).unwrap();
    String::from_utf8(decoded).unwrap()
}

impl Operated {
    /// The in-process operator's `/metrics`.
    fn metrics(&self) -> String {
        let port = self.metrics_address.port();
        self.runtime
            .as_ref()
            .unwrap()
            .block_on(plinth_testenv::scrape(port, "/metrics"))
    }
}

/// The value of the series `series` (`name{labels}`) in a metrics text.
fn metric(text: &str, series: &str) -> Option<i64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// Writes `chaos:<n>` = n through one address, each followed by `WAIT 1` (one replica has
/// it); the numbers acknowledged are kept. Reconnects whenever a write fails.
struct Writer {
    acknowledged: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(ip: &str, password: &str) -> Self {
        use redis::IntoConnectionInfo;
        let info = redis::ConnectionAddr::Tcp(ip.to_owned(), 6379)
            .into_connection_info()
            .unwrap()
            .set_redis_settings(redis::RedisConnectionInfo::default().set_password(password));
        let client = redis::Client::open(info).unwrap();
        let acknowledged = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (acked, stopping) = (acknowledged.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let timeout = std::time::Duration::from_secs(2);
            let mut connection: Option<redis::Connection> = None;
            let mut n = 0u64;
            while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
                let Some(open) = connection.as_mut() else {
                    connection = client.get_connection_with_timeout(timeout).ok();
                    if let Some(open) = connection.as_mut() {
                        let _ = open.set_read_timeout(Some(timeout));
                    } else {
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                    continue;
                };
                n += 1;
                let set: redis::RedisResult<()> = redis::cmd("SET")
                    .arg(format!("chaos:{n}"))
                    .arg(n)
                    .query(open);
                let waited: redis::RedisResult<i64> =
                    set.and_then(|()| redis::cmd("WAIT").arg(1).arg(1000).query(open));
                match waited {
                    Ok(replicas) if replicas >= 1 => acked.lock().unwrap().push(n),
                    Ok(_) => {}
                    Err(_) => {
                        connection = None;
                        std::thread::sleep(std::time::Duration::from_millis(50));
                    }
                }
            }
        });
        Self {
            acknowledged,
            stop,
            thread: Some(thread),
        }
    }

    /// Waits until `more` writes beyond those acknowledged now are acknowledged.
    fn wait_for_more_acknowledged(&self, more: usize) {
        let now = self.acknowledged.lock().unwrap().len();
        plinth_testenv::eventually_blocking("the writer's writes are acknowledged", || {
            self.acknowledged.lock().unwrap().len() >= now + more
        });
    }

    fn stop(mut self) -> Vec<u64> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
        self.acknowledged.lock().unwrap().clone()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

const CLUSTER: &str = r#"apiVersion: database.example.com/v1alpha1
kind: RedisCluster
metadata: {name: cache}
spec:
  replicas: 3
  enableAutoFailover: true
  storage: {size: 1Gi}
  backup: {retain: 2, schedule: "* * * * *"}
"#;

/// `plinth serve` with a node, the CRD, the operator in-process (failover threshold 3 s)
/// and a three-server cluster `cache` (from `manifest`) running: checked for one primary,
/// two replicas in sync, the columns and the password.
struct Operated {
    plinth: Plinth,
    runtime: Option<tokio::runtime::Runtime>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    metrics_address: std::net::SocketAddr,
    password: String,
}

impl Drop for Operated {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(std::time::Duration::from_secs(10));
        }
    }
}

fn operated(node: &str, manifest: &str) -> Operated {
    let plinth = Plinth::start_with(Backend::Embedded, &["--node-name", node]);
    wait(&plinth, "the node is Ready", || {
        let out = plinth.kubectl_output(&["get", "node", node, "--no-headers"]);
        String::from_utf8_lossy(&out.stdout).contains(" Ready ")
    });
    let crd = serde_norway::to_string(&redis_operator::types::crd()).unwrap();
    plinth.kubectl_with(&["apply", "-f", "-"], &crd);
    plinth.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/redisclusters.database.example.com",
        "--timeout=60s",
    ]);

    // The operator, in-process on the manager, with a short failover threshold.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let metrics_address = runtime.block_on(async {
        let client = plinth.kube_client().await;
        let mut manager = plinth_runtime::Manager::new();
        let address = manager
            .bind_metrics(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let mut context = redis_operator::Context::new(client, "test", manager.metrics());
        context.failover_after = std::time::Duration::from_secs(3);
        redis_operator::register(&mut manager, context).unwrap();
        tokio::spawn(manager.run(async {
            let _ = stopped.await;
        }));
        address
    });

    // Three servers: one primary, two replicas linked to it.
    plinth.kubectl_with(&["apply", "-f", "-"], manifest);
    wait(&plinth, "the cluster runs with three servers", || {
        let status = status(&plinth);
        status["phase"] == "Running" && status["readyReplicas"] == 3
    });
    let table = plinth.kubectl(&["get", "redis"]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "REPLICAS", "READY", "PHASE", "MASTER", "AGE"]
    );
    let first = status(&plinth)["currentMaster"]
        .as_str()
        .unwrap()
        .to_owned();
    // The pods start in parallel: the first to answer may lead (any of the three).
    assert!(
        ["cache-0", "cache-1", "cache-2"].contains(&first.as_str()),
        "{first}"
    );
    let password = password_of(&plinth, "cache-auth");
    assert!(password.len() >= 24, "a generated password");
    // No process shows it in its arguments (world-readable in /proc): the servers read it
    // from standard input.
    let showing = plinth_testenv::processes(|p| p.args.iter().any(|a| a.contains(&password)));
    assert!(
        showing.is_empty(),
        "the password is in the arguments of {showing:?}"
    );
    let first_ip = pod_ip(&plinth, &first);
    let info = redis(&first_ip, &password, &["info", "replication"]);
    assert!(info.contains("role:master"), "{info}");
    // Both other pods are online replicas of it (a scheduled backup's `redis-cli --rdb` may
    // be connected too, as a replica of its own).
    for pod in ["cache-0", "cache-1", "cache-2"]
        .iter()
        .filter(|p| **p != first)
    {
        let online = format!("ip={},port=6379,state=online", pod_ip(&plinth, pod));
        assert!(info.contains(&online), "{pod} follows: {info}");
    }
    assert!(
        !redis(&first_ip, "wrong", &["ping"]).contains("PONG"),
        "the password is required"
    );
    assert_eq!(
        redis(&first_ip, &password, &["set", "greeting", "hello"]),
        "OK"
    );
    assert_eq!(redis(&first_ip, &password, &["wait", "2", "10000"]), "2");
    let replica = if first == "cache-0" {
        "cache-1"
    } else {
        "cache-0"
    };
    let replica_ip = pod_ip(&plinth, replica);
    assert_eq!(redis(&replica_ip, &password, &["get", "greeting"]), "hello");
    let labels = plinth.kubectl(&[
        "get",
        "pods",
        "-l",
        "database.example.com/role=primary",
        "-o",
        "name",
    ]);
    assert_eq!(
        labels.trim(),
        format!("pod/{first}"),
        "the -primary Service's pod"
    );
    Operated {
        plinth,
        runtime: Some(runtime),
        stop: Some(stop),
        metrics_address,
        password,
    }
}

#[test]
fn a_redis_cluster_survives_a_hung_primary_and_killed_ones_without_losing_a_write() {
    let operated = operated("redis-chaos", CLUSTER);
    let (plinth, password) = (&operated.plinth, operated.password.as_str());
    let first = status(plinth)["currentMaster"].as_str().unwrap().to_owned();
    let first_ip = pod_ip(plinth, &first);
    // A hung primary (stopped, its port still accepting): a replica takes over after the
    // threshold; resumed, the old primary rejoins as a replica of the new one.
    let pid = server_pid(&first_ip).unwrap();
    std::process::Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status()
        .unwrap();
    let resume = Resume(pid);
    wait(plinth, "a replica is promoted", || {
        status(plinth)["currentMaster"]
            .as_str()
            .is_some_and(|m| m != first)
    });
    let second = status(plinth)["currentMaster"].as_str().unwrap().to_owned();
    let second_ip = pod_ip(plinth, &second);
    assert!(
        redis(&second_ip, password, &["info", "replication"]).contains("role:master"),
        "{second} takes writes"
    );
    assert_eq!(redis(&second_ip, password, &["get", "greeting"]), "hello");
    drop(resume);
    wait(plinth, "the old primary follows the new one", || {
        let info = redis(&first_ip, password, &["info", "replication"]);
        info.contains("role:slave")
            && info.contains(&format!("master_host:{second_ip}"))
            && info.contains("master_link_status:up")
    });
    wait(plinth, "all three serve again", || {
        let status = status(plinth);
        status["phase"] == "Running"
            && status["readyReplicas"] == 3
            && status.get("masterUnreachableSince").is_none()
    });
    let primary = plinth.kubectl(&[
        "get",
        "pods",
        "-l",
        "database.example.com/role=primary",
        "-o",
        "name",
    ]);
    assert_eq!(primary.trim(), format!("pod/{second}"), "the Service moved");

    // Chaos: a writer SETs and WAITs for one replica through the -primary Service while the
    // primary's process is SIGKILLed, five times. Each time a replica takes over (the killed
    // server restarts as a replica of nobody, so it takes no writes), the writer carries on
    // through the Service, and the killed server rejoins as a replica; no acknowledged write
    // is lost.
    let service_ip = plinth
        .kubectl(&[
            "get",
            "svc",
            "cache-primary",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ])
        .trim()
        .to_owned();
    let writer = Writer::start(&service_ip, password);
    for round in 0..5 {
        let before = status(plinth)["currentMaster"].as_str().unwrap().to_owned();
        let before_ip = pod_ip(plinth, &before);
        writer.wait_for_more_acknowledged(10);
        let pid = server_pid(&before_ip).unwrap();
        std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        wait(plinth, "a replica is promoted", || {
            status(plinth)["currentMaster"]
                .as_str()
                .is_some_and(|m| m != before)
        });
        let after = status(plinth)["currentMaster"].as_str().unwrap().to_owned();
        let after_ip = pod_ip(plinth, &after);
        wait(plinth, "the killed server rejoins as a replica", || {
            let info = redis(&before_ip, password, &["info", "replication"]);
            info.contains("role:slave")
                && info.contains(&format!("master_host:{after_ip}"))
                && info.contains("master_link_status:up")
        });
        writer.wait_for_more_acknowledged(10);
        eprintln!("chaos round {round}: {before} -> {after}");
    }
    let acknowledged = writer.stop();
    assert!(acknowledged.len() >= 100, "{} writes", acknowledged.len());
    let primary_ip = pod_ip(plinth, status(plinth)["currentMaster"].as_str().unwrap());
    let mut missing = Vec::new();
    for chunk in acknowledged.chunks(500) {
        let keys: Vec<String> = chunk.iter().map(|i| format!("chaos:{i}")).collect();
        let mut args = vec!["mget"];
        args.extend(keys.iter().map(String::as_str));
        let values = redis(&primary_ip, password, &args);
        let values: Vec<&str> = values.lines().collect();
        missing.extend(
            chunk
                .iter()
                .zip(values.iter().chain(std::iter::repeat(&"")))
                .filter(|(i, v)| **v != i.to_string())
                .map(|(i, _)| *i),
        );
    }
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
    wait(plinth, "all three serve after the chaos", || {
        let status = status(plinth);
        status["phase"] == "Running" && status["readyReplicas"] == 3
    });

    let text = operated.metrics();
    assert!(
        metric(
            &text,
            r#"redis_operator_failovers_total{cluster="default/cache"}"#
        ) >= Some(6),
        "a hung primary, five killed ones: {text}"
    );
    let reasons = event_reasons(plinth);
    for reason in ["PrimaryElected", "FailedOver"] {
        assert!(
            reasons.contains(&reason.to_owned()),
            "{reason} in {reasons:?}"
        );
    }
}

#[test]
fn a_redis_cluster_scales_backs_up_restores_and_snapshots_when_deleted() {
    let operated = operated("redis-ops", CLUSTER);
    let (plinth, password) = (&operated.plinth, operated.password.as_str());
    let primary_ip = pod_ip(plinth, status(plinth)["currentMaster"].as_str().unwrap());
    assert_eq!(
        redis(&primary_ip, password, &["set", "greeting", "hello"]),
        "OK"
    );
    assert_eq!(redis(&primary_ip, password, &["wait", "2", "10000"]), "2");
    // The CRD's rules refuse what breaks the invariants, and change nothing.
    let generation = plinth.json(&["get", "redis", "cache"])["metadata"]["generation"].clone();
    let refused = plinth.kubectl_fails(&[
        "patch",
        "redis",
        "cache",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":0}}"#,
    ]);
    assert!(
        refused.contains("replicas may not drop below 1"),
        "{refused}"
    );
    let refused = plinth.kubectl_fails(&[
        "patch",
        "redis",
        "cache",
        "--type=merge",
        "-p",
        r#"{"spec":{"storage":{"size":"2Gi"}}}"#,
    ]);
    assert!(refused.contains("storage.size is immutable"), "{refused}");
    assert_eq!(
        plinth.json(&["get", "redis", "cache"])["metadata"]["generation"],
        generation
    );

    // Scaling through /scale: up to four, then down to one — the primary is never removed
    // (a switch-over first when it is beyond the new size).
    plinth.kubectl(&["scale", "redis", "cache", "--replicas=5"]);
    wait(plinth, "five servers", || {
        let status = status_with_primary(plinth);
        status["readyReplicas"] == 5
    });
    let scale = plinth.kubectl(&[
        "get",
        "--raw",
        "/apis/database.example.com/v1alpha1/namespaces/default/redisclusters/cache/scale",
    ]);
    let scale: Value = serde_json::from_str(&scale).unwrap();
    assert_eq!(scale["status"]["replicas"], 5);
    assert_eq!(
        scale["status"]["selector"],
        "app.kubernetes.io/name=redis,app.kubernetes.io/instance=cache"
    );
    // A primary beyond the new size is switched over first (which pod leads after the chaos
    // is the replication's choice: the switch-over is expected only when it is beyond).
    let ordinal = |pod: &str| -> i32 { pod.rsplit('-').next().unwrap().parse().unwrap() };
    let switches = i32::from(ordinal(status(plinth)["currentMaster"].as_str().unwrap()) >= 2);
    plinth.kubectl(&["scale", "redis", "cache", "--replicas=2"]);
    wait(plinth, "two servers, a primary among them", || {
        let status = status_with_primary(plinth);
        status["readyReplicas"] == 2
            && status["currentMaster"]
                .as_str()
                .is_some_and(|m| m == "cache-0" || m == "cache-1")
            && plinth
                .kubectl(&["get", "pods", "-o", "name"])
                .lines()
                .filter(|l| l.starts_with("pod/cache-") && !l.contains("backup"))
                .count()
                == 2
    });
    let primary_ip = pod_ip(plinth, status(plinth)["currentMaster"].as_str().unwrap());
    assert_eq!(redis(&primary_ip, password, &["get", "greeting"]), "hello");

    // A backup on request: a Job writes a snapshot to the backup volume.
    plinth.kubectl(&[
        "annotate",
        "redis",
        "cache",
        "database.example.com/backup-request=first",
    ]);
    let succeeded = |job: &str| {
        plinth
            .kubectl_output(&["get", "job", job, "-o", "jsonpath={.status.succeeded}"])
            .stdout
            == b"1"
    };
    wait(plinth, "the backup completes", || {
        succeeded("cache-backup-first")
    });
    wait(plinth, "its status says so", || {
        status(plinth)["lastBackup"]["file"]
            .as_str()
            .is_some_and(|f| f.starts_with("/backup/cache-"))
    });
    let backups = volume_dir(plinth, "cache-backup");
    assert!(is_snapshot(&backups.join("cache-backup-first.rdb")));
    // Two more: only the newest `retain` (2) snapshots stay.
    for token in ["second", "third"] {
        plinth.kubectl(&[
            "annotate",
            "--overwrite",
            "redis",
            "cache",
            &format!("database.example.com/backup-request={token}"),
        ]);
        wait(plinth, "the backup completes", || {
            succeeded(&format!("cache-backup-{token}"))
        });
    }
    let kept = |dir: &std::path::Path| {
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".rdb"))
            .collect();
        files.sort();
        files
    };
    let files = kept(&backups);
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(
        files.contains(&"cache-backup-third.rdb".to_owned()),
        "{files:?}"
    );
    // The schedule's CronJob takes one every minute.
    let cron = plinth.json(&["get", "cronjob", "cache-backup"]);
    assert_eq!(cron["spec"]["schedule"], "* * * * *");
    wait(plinth, "a scheduled backup completes", || {
        let jobs = plinth.json(&["get", "jobs", "-l", "database.example.com/backup=cache"]);
        jobs["items"].as_array().unwrap().iter().any(|j| {
            j["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
                && j["status"]["succeeded"] == 1
        })
    });

    let cluster = r#"{cluster="default/cache"}"#;
    // The operator counts a backup when it next reconciles after the Job completed.
    wait(plinth, "the scheduled backup counted", || {
        metric(
            &operated.metrics(),
            &format!("redis_operator_backups_total{cluster}"),
        ) >= Some(4)
    });
    let text = operated.metrics();
    assert!(
        metric(&text, &format!("redis_operator_failovers_total{cluster}")).unwrap_or(0)
            >= i64::from(switches),
        "{text}"
    );
    assert_eq!(
        metric(&text, &format!("redis_operator_ready_replicas{cluster}")),
        Some(2)
    );
    assert!(
        metric(&text, &format!("redis_operator_backups_total{cluster}")) >= Some(4),
        "three on request, one scheduled: {text}"
    );

    // Deletion: the finalizer's final snapshot, then the garbage collector takes the rest;
    // the backup volume stays.
    plinth.kubectl(&["delete", "redis", "cache", "--wait=false"]);
    wait(plinth, "the cluster is gone", || {
        !plinth
            .kubectl_output(&["get", "redis", "cache"])
            .status
            .success()
    });
    assert!(is_snapshot(&backups.join("cache-final-backup.rdb")));
    wait(plinth, "its StatefulSet and pods go", || {
        plinth
            .kubectl(&["get", "statefulsets,pods", "-o", "name"])
            .lines()
            .all(|l| !l.contains("cache-") || l.contains("backup"))
    });
    wait(plinth, "every object it owned goes", || {
        plinth
            .kubectl(&[
                "get",
                "statefulsets,services,configmaps,secrets,cronjobs,jobs,pvc",
                "-l",
                "app.kubernetes.io/instance=cache",
                "-o",
                "name",
            ])
            .lines()
            .all(|l| l == "persistentvolumeclaim/cache-backup")
    });
    assert!(
        plinth
            .kubectl_output(&["get", "pvc", "cache-backup"])
            .status
            .success(),
        "the backup volume stays"
    );

    // A new cluster restored from the final snapshot has the data.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: database.example.com/v1alpha1\nkind: RedisCluster\nmetadata: {name: restored}\nspec:\n  replicas: 2\n  restoreFrom: {claimName: cache-backup, file: cache-final-backup.rdb}\n",
    );
    wait(plinth, "the restored cluster runs", || {
        let status = plinth.json(&["get", "redis", "restored"])["status"].clone();
        status["phase"] == "Running" && status["readyReplicas"] == 2
    });
    let restored = plinth.json(&["get", "redis", "restored"])["status"]["currentMaster"]
        .as_str()
        .unwrap()
        .to_owned();
    let restored_password = password_of(plinth, "restored-auth");
    let restored_ip = pod_ip(plinth, &restored);
    assert_eq!(
        redis(&restored_ip, &restored_password, &["get", "greeting"]),
        "hello"
    );
    plinth.kubectl(&["delete", "redis", "restored", "--timeout=120s"]);
    let reasons = event_reasons(plinth);
    if switches > 0 {
        assert!(reasons.contains(&"SwitchedOver".to_owned()), "{reasons:?}");
    }
    for reason in [
        "PrimaryElected",
        "BackupStarted",
        "BackupCompleted",
        "FinalBackupStarted",
        "FinalBackupCompleted",
    ] {
        assert!(
            reasons.contains(&reason.to_owned()),
            "{reason} in {reasons:?}"
        );
    }
}

/// The reasons of the events about RedisClusters.
fn event_reasons(plinth: &Plinth) -> Vec<String> {
    let events = plinth.json(&["get", "events.events.k8s.io"]);
    events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["kind"] == "RedisCluster")
        .filter_map(|e| e["reason"].as_str().map(str::to_owned))
        .collect()
}
