//! Leader election against an in-process Plinth: one leader at a time; a clean stop hands over
//! at once; a leader that dies is replaced once its lease expires.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use plinth_runtime::{LeaderElector, Leadership, Manager, Runs, Timings};
use plinth_testenv::TestEnv;

mod common;
use common::{eventually, get};

fn timings() -> Timings {
    Timings {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(100),
    }
}

/// Waits for `check` with a generous deadline (a hang guard, not a measurement).
async fn until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_clean_handover_and_takeover_after_expiry() {
    let env = TestEnv::start().await.unwrap();
    let candidate = |id: &str| {
        LeaderElector::new(env.client(), "default", "tenant-operator", id).with_timings(timings())
    };
    let (a, b) = (candidate("a"), candidate("b"));
    let (stop_a, stop_a_rx) = tokio::sync::oneshot::channel::<()>();
    let run_a = {
        let a = a.clone();
        tokio::spawn(async move {
            a.run(std::future::pending(), async {
                let _ = stop_a_rx.await;
            })
            .await
        })
    };
    until("a to lead", Duration::from_secs(5), || a.is_leader()).await;
    let run_b = {
        let b = b.clone();
        tokio::spawn(async move { b.run(std::future::pending(), std::future::pending()).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(a.is_leader() && !b.is_leader(), "exactly one leader");

    // A clean stop releases the lease (no holder left in it), and b leads.
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(env.client(), "default");
    stop_a.send(()).unwrap();
    assert_eq!(run_a.await.unwrap(), Leadership::Released);
    let released = leases.get("tenant-operator").await.unwrap().spec.unwrap();
    assert!(
        released.holder_identity.as_deref() != Some("a"),
        "a released the lease: {released:?}"
    );
    until("b to lead", Duration::from_secs(5), || b.is_leader()).await;

    // b dies without releasing: c takes over only once b's lease has expired — its acquire
    // time is at least one lease duration after b's last renewal.
    run_b.abort();
    let c = candidate("c");
    let run_c = {
        let c = c.clone();
        tokio::spawn(async move { c.run(std::future::pending(), std::future::pending()).await })
    };
    let last_renewal = leases
        .get("tenant-operator")
        .await
        .unwrap()
        .spec
        .unwrap()
        .renew_time
        .unwrap()
        .0;
    until("c to lead", Duration::from_secs(30), || c.is_leader()).await;
    let lease = leases.get("tenant-operator").await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity.as_deref(), Some("c"));
    let acquired = lease.acquire_time.unwrap().0;
    assert!(
        acquired.duration_since(last_renewal).as_millis()
            >= timings().lease_duration.as_millis() as i128,
        "c acquired at {acquired:?}, b last renewed at {last_renewal:?}"
    );
    assert_eq!(lease.lease_transitions, Some(2));
    run_c.abort();
    env.stop().await;
}

/// The manager: leader-only controllers run under the lease; `/metrics` carries
/// controller-runtime's metric names; the probes answer; a stop releases the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_serves_metrics_and_probes_and_releases_on_stop() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use plinth_runtime::{Action, Controller};

    let env = TestEnv::start().await.unwrap();
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(env.client(), "default");
    let elector =
        LeaderElector::new(env.client(), "default", "manager-test", "m1").with_timings(timings());
    let mut manager = Manager::new().leader_election(elector.clone());
    // One informer per resource, however many controllers ask; two resources of one Rust
    // type (DynamicObject) are two informers.
    let informer = manager.informer(|| api.clone());
    let again = manager.informer(|| api.clone());
    assert!(std::sync::Arc::ptr_eq(&informer, &again));
    let dynamic = |plural: &str, kind: &str| {
        let resource = kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("", "v1", kind),
            plural,
        );
        kube::Api::<kube::core::DynamicObject>::namespaced_with(env.client(), "default", &resource)
    };
    let configmaps = manager.informer(|| dynamic("configmaps", "ConfigMap"));
    let secrets = manager.informer(|| dynamic("secrets", "Secret"));
    assert!(
        !std::sync::Arc::ptr_eq(&configmaps, &secrets),
        "Secrets are not served from the ConfigMap informer"
    );
    assert!(std::sync::Arc::ptr_eq(
        &configmaps,
        &manager.informer(|| dynamic("configmaps", "ConfigMap"))
    ));
    let metrics_addr = manager
        .bind_metrics(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let health_addr = manager
        .bind_health_probes(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let controller = Controller::new(&informer)
        .metrics("configmap", &manager.metrics())
        .unwrap();
    // A second controller of that name is refused (its metrics would overwrite the first's).
    let duplicate = Controller::new(&informer).metrics("configmap", &manager.metrics());
    assert_eq!(
        duplicate.unwrap_err().to_string(),
        "controller with name configmap already exists; controller names must be unique"
    );
    let manager = manager.add(Runs::LeaderOnly, move |shutdown| async move {
        controller
            .run(
                |_key| Box::pin(async { Ok(Action::Done) }) as plinth_runtime::ReconcileFuture,
                shutdown.wait(),
            )
            .await
            .map_err(plinth_runtime::RunError::from)
    });
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(manager.run(async {
        let _ = stop_rx.await;
    }));
    until("leadership", Duration::from_secs(5), || elector.is_leader()).await;
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("counted".into());
    api.create(&kube::api::PostParams::default(), &cm)
        .await
        .unwrap();
    eventually("a reconcile counted in /metrics", || async {
        get(metrics_addr, "/metrics").await.contains(
            "controller_runtime_reconcile_total{controller=\"configmap\",result=\"success\"}",
        )
    })
    .await;
    let text = get(metrics_addr, "/metrics").await;
    for name in [
        "controller_runtime_reconcile_errors_total{controller=\"configmap\"} 0",
        "controller_runtime_reconcile_time_seconds_bucket{controller=\"configmap\",le=\"+Inf\"}",
        "workqueue_depth{controller=\"configmap\",name=\"configmap\"}",
        "workqueue_adds_total{controller=\"configmap\",name=\"configmap\"}",
        "workqueue_retries_total{controller=\"configmap\",name=\"configmap\"} 0",
        "workqueue_queue_duration_seconds_count{controller=\"configmap\",name=\"configmap\"}",
        "workqueue_work_duration_seconds_count{controller=\"configmap\",name=\"configmap\"}",
        "workqueue_work_duration_seconds_bucket{controller=\"configmap\",name=\"configmap\",le=\"+Inf\"}",
        "workqueue_queue_duration_seconds_bucket{controller=\"configmap\",name=\"configmap\",le=\"10\"}",
        "# TYPE workqueue_queue_duration_seconds histogram",
        "controller_runtime_reconcile_panics_total{controller=\"configmap\"} 0",
        "leader_election_master_status{name=\"manager-test\"} 1",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    assert!(
        get(health_addr, "/healthz")
            .await
            .starts_with("HTTP/1.1 200 OK")
    );
    eventually("readiness once the caches synced", || async {
        get(health_addr, "/readyz")
            .await
            .starts_with("HTTP/1.1 200 OK")
    })
    .await;
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(env.client(), "default");
    let lease = leases.get("manager-test").await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity, None, "released on stop");
    env.stop().await;
}

/// A lease another process renews is never taken, however old its timestamps look on this
/// process's clock (clock skew): expiry is judged by how long the record stays unchanged here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_lease_with_skewed_timestamps_is_not_stolen() {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let env = TestEnv::start().await.unwrap();
    let leases: kube::Api<Lease> = kube::Api::namespaced(env.client(), "default");
    // The holder's clock is an hour behind ours.
    let skewed = |n: i64| {
        MicroTime(
            k8s_openapi::jiff::Timestamp::now()
                - k8s_openapi::jiff::SignedDuration::from_secs(3600 - n),
        )
    };
    let mut lease = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some("skewed".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("far-away".into()),
            lease_duration_seconds: Some(2),
            renew_time: Some(skewed(0)),
            acquire_time: Some(skewed(0)),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    };
    lease = leases
        .create(&kube::api::PostParams::default(), &lease)
        .await
        .unwrap();
    let candidate =
        LeaderElector::new(env.client(), "default", "skewed", "here").with_timings(timings());
    let running = {
        let candidate = candidate.clone();
        tokio::spawn(async move {
            candidate
                .run(std::future::pending(), std::future::pending())
                .await
        })
    };
    // The holder keeps renewing (its renewTime moves on, an hour behind) for three lease
    // durations: the candidate must not take over meanwhile.
    for n in 1..=20 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !candidate.is_leader(),
            "took a lease that was being renewed"
        );
        let spec = lease.spec.as_mut().unwrap();
        spec.renew_time = Some(skewed(n));
        lease = leases
            .replace("skewed", &kube::api::PostParams::default(), &lease)
            .await
            .unwrap();
    }
    // The holder stops renewing: the candidate takes over once the lease has expired.
    until("the candidate to lead", Duration::from_secs(30), || {
        candidate.is_leader()
    })
    .await;
    running.abort();
    env.stop().await;
}

/// When another process takes the lease, the leader-only work is stopped before the manager's
/// `run` returns `LostLeadership`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_leadership_stops_leader_work_before_run_returns() {
    use k8s_openapi::api::coordination::v1::Lease;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let env = TestEnv::start().await.unwrap();
    let elector =
        LeaderElector::new(env.client(), "default", "stolen", "victim").with_timings(timings());
    let stopped = Arc::new(AtomicBool::new(false));
    let manager = Manager::new()
        .leader_election(elector.clone())
        .add(Runs::LeaderOnly, {
            let stopped = stopped.clone();
            move |shutdown| async move {
                // Work that is cut off when leadership is lost (it never gets to finish).
                let _finished = Finished(stopped);
                shutdown.wait().await;
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    let running = tokio::spawn(manager.run(std::future::pending()));
    until("leadership", Duration::from_secs(10), || {
        elector.is_leader()
    })
    .await;
    // Another process takes the lease over.
    let leases: kube::Api<Lease> = kube::Api::namespaced(env.client(), "default");
    let mut lease = leases.get("stolen").await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some("thief".into());
    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    leases
        .replace("stolen", &kube::api::PostParams::default(), &lease)
        .await
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("run returns after leadership is lost")
        .unwrap();
    assert!(
        matches!(result, Err(plinth_runtime::ManagerError::LostLeadership)),
        "{result:?}"
    );
    assert!(
        stopped.load(Ordering::SeqCst),
        "the leader-only work had been stopped (dropped) when run returned"
    );
    env.stop().await;
}

/// Sets its flag when dropped (a task's future is dropped when the task is aborted).
struct Finished(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for Finished {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `/readyz` says ready only once the caches the manager handed out have synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_waits_for_the_caches() {
    use k8s_openapi::api::networking::v1beta1::IPAddress;
    let env = TestEnv::start().await.unwrap();
    let mut manager = Manager::new();
    // networking.k8s.io/v1beta1 IPAddresses are not served (kube 1.32 serves them only with
    // the beta API enabled): this cache never syncs.
    let _unsynced = manager.informer(|| kube::Api::<IPAddress>::all(env.client()));
    let health = manager
        .bind_health_probes(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(manager.run(async {
        let _ = stop_rx.await;
    }));
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(get(health, "/healthz").await.starts_with("HTTP/1.1 200 OK"));
        let ready = get(health, "/readyz").await;
        assert!(
            !ready.starts_with("HTTP/1.1 200 OK"),
            "ready without a synced cache: {ready}"
        );
    }
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    env.stop().await;
}

/// A TCP relay to `target` that can be frozen: from then on it forwards nothing and closes
/// nothing, so requests through it hang (an API server that no longer answers).
async fn freezable_relay(
    target: std::net::SocketAddr,
) -> (std::net::SocketAddr, tokio::sync::watch::Sender<bool>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (freeze, frozen) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let mut frozen = frozen.clone();
            tokio::spawn(async move {
                let Ok(outbound) = tokio::net::TcpStream::connect(target).await else {
                    return;
                };
                let (mut in_read, mut in_write) = inbound.into_split();
                let (mut out_read, mut out_write) = outbound.into_split();
                let mut up = [0u8; 16384];
                let mut down = [0u8; 16384];
                loop {
                    if *frozen.borrow() {
                        // Hold both sockets open and silent for good.
                        std::future::pending::<()>().await;
                    }
                    tokio::select! {
                        _ = frozen.changed() => {}
                        read = in_read.read(&mut up) => match read {
                            Ok(n) if n > 0 && !*frozen.borrow() => {
                                if out_write.write_all(&up[..n]).await.is_err() { return; }
                            }
                            Ok(n) if n > 0 => {}
                            _ => return,
                        },
                        read = out_read.read(&mut down) => match read {
                            Ok(n) if n > 0 && !*frozen.borrow() => {
                                if in_write.write_all(&down[..n]).await.is_err() { return; }
                            }
                            Ok(n) if n > 0 => {}
                            _ => return,
                        },
                    }
                }
            });
        }
    });
    (address, freeze)
}

/// A stop returns although the API server stopped answering before the lease could be
/// released: the release is bounded by the renew deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_returns_when_the_release_cannot_reach_the_server() {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let env = TestEnv::start().await.unwrap();
    let loaded = Kubeconfig::read_from(env.kubeconfig()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(loaded, &KubeConfigOptions::default())
        .await
        .unwrap();
    let server = config.cluster_url.authority().unwrap().to_string();
    let target: std::net::SocketAddr = server.parse().unwrap();
    let (relay, freeze) = freezable_relay(target).await;
    config.cluster_url = format!("https://{relay}").parse().unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let elector =
        LeaderElector::new(client, "default", "frozen-release", "a").with_timings(timings());
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = {
        let elector = elector.clone();
        tokio::spawn(async move {
            elector
                .run(std::future::pending(), async {
                    let _ = stop_rx.await;
                })
                .await
        })
    };
    eventually("a to lead", || async { elector.is_leader() }).await;
    freeze.send_replace(true);
    stop.send(()).unwrap();
    // A hang guard far above the renew deadline (1.5 s), not a measurement; without the
    // bound the release waits for the client's own timeouts (minutes).
    let outcome = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("run returns although the release hangs")
        .unwrap();
    assert_eq!(outcome, Leadership::Released);
    assert!(!elector.is_leader());
    env.stop().await;
}
