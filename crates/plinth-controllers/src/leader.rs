//! Leader election of the built-in controllers, as kube-controller-manager's: one Lease,
//! `kube-system/kube-controller-manager`, held by one server at a time. A holder renews it
//! every 2 s and gives up if it could not for 10 s; another takes it over once the record has
//! not changed for the lease's 15 s — timed by the local clock from when the record was
//! observed (client-go's rule, so clock skew between servers cannot steal a live lease). A
//! server that stops releases the lease, so the next takes over at once.

use std::time::Duration;

use plinth_core::StatusReason;
use plinth_registry::{Client, Part, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

/// The Lease's name (in `kube-system`).
pub const LEASE: &str = "kube-controller-manager";
const NAMESPACE: &str = "kube-system";
const LEASE_SECONDS: i64 = 15;
const RENEW_DEADLINE: Duration = Duration::from_secs(10);
const RETRY: Duration = Duration::from_secs(2);
const MANAGER: &str = "kube-controller-manager";

/// An identity for the Lease: the host and a random part.
pub fn identity() -> String {
    format!("{}_{}", host(), uuid::Uuid::new_v4())
}

fn host() -> String {
    plinth_core::host_name()
}

fn now_micro() -> String {
    plinth_registry::now_micro_time()
}

/// The identity of the server keeping its data in `dir`: the host and the directory, the
/// same after a restart.
pub fn identity_of(dir: &std::path::Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    format!("{}_{}", host(), dir.display())
}

/// What is compared to tell a record changed (client-go compares the whole record).
fn record(lease: &Value) -> Value {
    lease.get("spec").cloned().unwrap_or(Value::Null)
}

/// Runs `lead` whenever this process holds the Lease: it gets a receiver that turns true
/// when leadership ends (lost, or the server stopping). Ends when `stopping` turns true.
pub fn run_while_leading(
    registry: Client,
    identity: String,
    stopping: watch::Receiver<bool>,
    lead: impl Fn(watch::Receiver<bool>) + Send + 'static,
) {
    tokio::spawn(async move {
        let mut observed: Option<(Value, Instant)> = None;
        loop {
            if *stopping.borrow() {
                return;
            }
            if try_acquire(&registry, &identity, &mut observed).await {
                tracing::info!(%identity, "acquired the controllers' lease");
                let (ended_tx, ended_rx) = watch::channel(false);
                lead(ended_rx);
                let stopped = keep(&registry, &identity, &stopping).await;
                let _ = ended_tx.send(true);
                if stopped {
                    release(&registry, &identity).await;
                    return;
                }
                tracing::warn!(%identity, "lost the controllers' lease");
                observed = None;
            }
            let mut stop = stopping.clone();
            tokio::select! {
                () = tokio::time::sleep(RETRY) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    });
}

/// One attempt to become the holder.
async fn try_acquire(
    registry: &Client,
    identity: &str,
    observed: &mut Option<(Value, Instant)>,
) -> bool {
    let Some(def) = registry
        .resources
        .get("coordination.k8s.io", "v1", "leases")
    else {
        return false;
    };
    let options = WriteOptions::internal(MANAGER);
    let now = now_micro();
    match registry.get(&def, Some(NAMESPACE), LEASE).await {
        Err(e) if e.reason == StatusReason::NotFound => {
            let lease = json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": LEASE, "namespace": NAMESPACE},
                "spec": {
                    "holderIdentity": identity,
                    "leaseDurationSeconds": LEASE_SECONDS,
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": 0,
                },
            });
            let created = registry
                .create(&def, Some(NAMESPACE), lease, &options)
                .await;
            if let Ok(written) = &created {
                became_leader(registry, &written.object, identity).await;
            }
            created.is_ok()
        }
        Err(_) => false,
        Ok(lease) => {
            let current = record(&lease);
            let seen_at = match observed {
                Some((record, at)) if *record == current => *at,
                _ => {
                    let at = Instant::now();
                    *observed = Some((current.clone(), at));
                    at
                }
            };
            let holder = current["holderIdentity"].as_str().unwrap_or("");
            let duration = current["leaseDurationSeconds"]
                .as_i64()
                .unwrap_or(LEASE_SECONDS);
            let live = !holder.is_empty()
                && holder != identity
                && seen_at.elapsed() < Duration::from_secs(u64::try_from(duration).unwrap_or(15));
            if live {
                return false;
            }
            let taken = registry
                .modify(
                    &def,
                    Some(NAMESPACE),
                    LEASE,
                    Part::Main,
                    &options,
                    |lease| {
                        if record(lease) != current {
                            // Someone else wrote it since: look again next time.
                            return Err(plinth_core::ApiError::new(
                                StatusReason::Conflict,
                                "the lease changed",
                            ));
                        }
                        let spec = &mut lease["spec"];
                        let transitions = spec["leaseTransitions"].as_i64().unwrap_or(0);
                        if spec["holderIdentity"].as_str() != Some(identity) {
                            spec["leaseTransitions"] = json!(transitions + 1);
                            spec["acquireTime"] = json!(now);
                        }
                        spec["holderIdentity"] = json!(identity);
                        spec["leaseDurationSeconds"] = json!(LEASE_SECONDS);
                        spec["renewTime"] = json!(now);
                        Ok(true)
                    },
                )
                .await;
            if let Ok(Some(written)) = &taken {
                became_leader(registry, &written.object, identity).await;
            }
            matches!(taken, Ok(Some(_)))
        }
    }
}

async fn became_leader(registry: &Client, lease: &Value, identity: &str) {
    crate::events::record(
        registry,
        lease,
        "Normal",
        "LeaderElection",
        &format!("{identity} became leader"),
        MANAGER,
    )
    .await;
}

/// Renews until leadership is lost (false) or the server stops (true).
async fn keep(registry: &Client, identity: &str, stopping: &watch::Receiver<bool>) -> bool {
    let Some(def) = registry
        .resources
        .get("coordination.k8s.io", "v1", "leases")
    else {
        return false;
    };
    let mut last_renewed = Instant::now();
    let mut stop = stopping.clone();
    loop {
        tokio::select! {
            () = tokio::time::sleep(RETRY) => {}
            _ = stop.wait_for(|s| *s) => return true,
        }
        let now = now_micro();
        let renewed = registry
            .modify(
                &def,
                Some(NAMESPACE),
                LEASE,
                Part::Main,
                &WriteOptions::internal(MANAGER),
                |lease| {
                    if lease["spec"]["holderIdentity"].as_str() != Some(identity) {
                        return Err(plinth_core::ApiError::new(
                            StatusReason::Conflict,
                            "the lease has another holder",
                        ));
                    }
                    lease["spec"]["renewTime"] = json!(now);
                    Ok(true)
                },
            )
            .await;
        match renewed {
            Ok(_) => last_renewed = Instant::now(),
            Err(e) if e.reason == StatusReason::Conflict || e.reason == StatusReason::NotFound => {
                return false;
            }
            Err(_) if last_renewed.elapsed() > RENEW_DEADLINE => return false,
            Err(_) => {}
        }
    }
}

/// Hands the lease back (client-go's `ReleaseOnCancel`): no holder, a one-second duration.
async fn release(registry: &Client, identity: &str) {
    let Some(def) = registry
        .resources
        .get("coordination.k8s.io", "v1", "leases")
    else {
        return;
    };
    let now = now_micro();
    let _ = registry
        .modify(
            &def,
            Some(NAMESPACE),
            LEASE,
            Part::Main,
            &WriteOptions::internal(MANAGER),
            |lease| {
                if lease["spec"]["holderIdentity"].as_str() != Some(identity) {
                    return Ok(false);
                }
                lease["spec"]["holderIdentity"] = json!("");
                lease["spec"]["leaseDurationSeconds"] = json!(1);
                lease["spec"]["renewTime"] = json!(now);
                lease["spec"]["acquireTime"] = json!(now);
                Ok(true)
            },
        )
        .await;
}
