//! A Deployment's status: counts, the `Available` and `Progressing` conditions, events.

use std::sync::Arc;
use std::time::Duration;

use plinth_core::Frozen;
use plinth_registry::{Part, WriteOptions};
use serde_json::{Value, json};

use crate::workload::{uid, write_status};

use super::*;

impl Context<'_> {
    pub(super) async fn event(&self, message: &str) {
        crate::events::record(
            self.registry,
            self.deployment,
            "Normal",
            "ScalingReplicaSet",
            message,
            MANAGER,
        )
        .await;
    }

    /// Sets the `Progressing` condition (true) with `reason` and `message` right away.
    pub(super) async fn set_progressing(&self, reason: &str, message: &str) {
        let mut status = self
            .deployment
            .get("status")
            .map_or(json!({}), Frozen::to_value);
        let now = plinth_core::meta::format_time(plinth_registry::now());
        set_condition(
            &mut status,
            "Progressing",
            "True",
            reason,
            message,
            &now,
            false,
        );
        let Some(def) = self.registry.resources.get("apps", "v1", "deployments") else {
            return;
        };
        let _ = self
            .registry
            .modify(
                &def,
                plinth_core::meta::namespace(self.deployment),
                name_of(self.deployment),
                Part::Status,
                &WriteOptions::internal(MANAGER),
                |d| {
                    let mut current = d.get("status").cloned().unwrap_or(json!({}));
                    current["conditions"] = status["conditions"].clone();
                    if d.get("status") == Some(&current) {
                        return Ok(false);
                    }
                    d["status"] = current;
                    Ok(true)
                },
            )
            .await;
    }

    /// Counts, conditions and observedGeneration; when to look again (a progress deadline
    /// or a paused check).
    pub(super) async fn update_status(
        &self,
        sets: &[Arc<Frozen>],
        new: Option<&Frozen>,
    ) -> Option<Duration> {
        let sum = |pointer: &str| -> i64 { sets.iter().map(|s| int(s, pointer)).sum() };
        let replicas = sum("/status/replicas");
        let available = sum("/status/availableReplicas");
        let updated = new.map_or(0, |n| int(n, "/status/replicas"));
        let desired = self.replicas();
        let (_, max_unavailable) = self.fenceposts();
        let mut status = self
            .deployment
            .get("status")
            .map_or(json!({}), Frozen::to_value);
        let old = status.clone();
        status["observedGeneration"] = self
            .spec("/metadata/generation")
            .map_or(json!(1), Frozen::to_value);
        status["replicas"] = json!(replicas);
        status["updatedReplicas"] = json!(updated);
        status["readyReplicas"] = json!(sum("/status/readyReplicas"));
        status["availableReplicas"] = json!(available);
        let total: i64 = sets.iter().map(|s| replicas_of(s)).sum();
        status["unavailableReplicas"] = json!((total - available).max(0));
        for field in [
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
            "unavailableReplicas",
        ] {
            if status[field] == 0
                && let Some(map) = status.as_object_mut()
            {
                map.remove(field);
            }
        }
        let now_secs = plinth_registry::now();
        let now = plinth_core::meta::format_time(now_secs);
        if available >= desired - max_unavailable {
            set_condition(
                &mut status,
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
                &now,
                false,
            );
        } else {
            set_condition(
                &mut status,
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
                &now,
                false,
            );
        }
        let new_name = new.map(name_of).unwrap_or("");
        let paused = self.spec("/spec/paused").is_some_and(|p| *p == true);
        let deadline = self
            .spec("/spec/progressDeadlineSeconds")
            .and_then(Frozen::as_i64);
        let mut wait = None;
        let progressing = condition(&status, "Progressing");
        let reason = progressing.and_then(|c| c["reason"].as_str()).unwrap_or("");
        if paused {
            if reason != "DeploymentPaused" {
                set_condition(
                    &mut status,
                    "Progressing",
                    "Unknown",
                    "DeploymentPaused",
                    "Deployment is paused",
                    &now,
                    false,
                );
            }
        } else if reason == "DeploymentPaused" {
            set_condition(
                &mut status,
                "Progressing",
                "Unknown",
                "DeploymentResumed",
                "Deployment is resumed",
                &now,
                false,
            );
        } else if new.is_some() {
            let complete = updated == desired
                && replicas == desired
                && available == desired
                && new.is_some_and(|n| int(n, "/status/replicas") == desired);
            if complete {
                set_condition(
                    &mut status,
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    &format!("ReplicaSet \"{new_name}\" has successfully progressed."),
                    &now,
                    false,
                );
            } else {
                let moved = ["updatedReplicas", "readyReplicas", "availableReplicas"]
                    .iter()
                    .any(|f| status[*f].as_i64().unwrap_or(0) > old[*f].as_i64().unwrap_or(0))
                    || status["replicas"].as_i64().unwrap_or(0)
                        < old["replicas"].as_i64().unwrap_or(0);
                if moved || reason.is_empty() || reason == "NewReplicaSetAvailable" {
                    set_condition(
                        &mut status,
                        "Progressing",
                        "True",
                        "ReplicaSetUpdated",
                        &format!("ReplicaSet \"{new_name}\" is progressing."),
                        &now,
                        true,
                    );
                } else if let Some(deadline) = deadline
                    && reason != "ProgressDeadlineExceeded"
                {
                    let since = condition(&status, "Progressing")
                        .and_then(|c| c["lastUpdateTime"].as_str())
                        .and_then(plinth_core::meta::parse_time)
                        .unwrap_or(now_secs);
                    if since + deadline <= now_secs {
                        set_condition(
                            &mut status,
                            "Progressing",
                            "False",
                            "ProgressDeadlineExceeded",
                            &format!("ReplicaSet \"{new_name}\" has timed out progressing."),
                            &now,
                            true,
                        );
                    } else {
                        wait = Some(Duration::from_secs(
                            u64::try_from(since + deadline - now_secs).unwrap_or(1) + 1,
                        ));
                    }
                }
            }
        }
        write_status(
            self.registry,
            ("apps", "deployments"),
            self.deployment,
            status,
            MANAGER,
        )
        .await;
        wait
    }
}

/// Whether `new` is the only ReplicaSet with replicas or pods (a scale of a settled
/// Deployment whose sets are all at zero).
pub(super) fn new_only(sets: &[Arc<Frozen>], new: &Frozen) -> bool {
    sets.iter()
        .all(|s| uid(s) == uid(new) || (replicas_of(s) == 0 && int(s, "/status/replicas") == 0))
}

pub(super) fn condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Sets a Deployment condition: `lastTransitionTime` changes only with the status,
/// `lastUpdateTime` with any change — and, when `touch`, even without one (progress made).
pub(super) fn set_condition(
    status: &mut Value,
    kind: &str,
    value: &str,
    reason: &str,
    message: &str,
    now: &str,
    touch: bool,
) {
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let Some(conditions) = status["conditions"].as_array_mut() else {
        return;
    };
    match conditions.iter_mut().find(|c| c["type"] == kind) {
        Some(c) => {
            let same = c["status"] == value && c["reason"] == reason && c["message"] == message;
            if same && !touch {
                return;
            }
            if c["status"] != value {
                c["lastTransitionTime"] = json!(now);
            }
            c["status"] = json!(value);
            c["reason"] = json!(reason);
            c["message"] = json!(message);
            c["lastUpdateTime"] = json!(now);
        }
        None => conditions.push(json!({
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastUpdateTime": now,
            "lastTransitionTime": now,
        })),
    }
}
