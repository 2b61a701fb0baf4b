//! Leader election against an in-process Plinth: one leader at a time; a clean stop hands over
//! at once; a leader that dies is replaced once its lease expires.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use plinth_runtime::{LeaderElector, Leadership, Timings};
use plinth_testenv::TestEnv;

fn timings() -> Timings {
    Timings {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(100),
    }
}

async fn until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
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

    // A clean stop releases the lease: b leads well within one lease duration.
    stop_a.send(()).unwrap();
    assert_eq!(run_a.await.unwrap(), Leadership::Released);
    let handover = until("b to lead", Duration::from_secs(5), || b.is_leader()).await;
    assert!(
        handover < Duration::from_secs(1),
        "handover took {handover:?}"
    );

    // b dies without releasing: c takes over once the lease has expired.
    run_b.abort();
    let died = Instant::now();
    let c = candidate("c");
    let run_c = {
        let c = c.clone();
        tokio::spawn(async move { c.run(std::future::pending(), std::future::pending()).await })
    };
    until("c to lead", Duration::from_secs(6), || c.is_leader()).await;
    let takeover = died.elapsed();
    assert!(
        takeover >= Duration::from_millis(1500) && takeover < Duration::from_secs(4),
        "takeover after {takeover:?}"
    );
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(env.client(), "default");
    let lease = leases.get("tenant-operator").await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity.as_deref(), Some("c"));
    assert_eq!(lease.lease_transitions, Some(2));
    run_c.abort();
    env.stop().await;
}
