//! The pod's status as kube reports it, written whenever it changes.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::state::{ContainerState, Kind, Status, Terminal, now_text};
use super::worker::Worker;

impl Worker {
    /// Writes the pod's status whenever it changes.
    pub(super) async fn write_status(self: Arc<Self>) {
        loop {
            let notified = self.changed.notified();
            if let Err(e) = self.write_once().await {
                tracing::debug!(error = %e, "pod status not written; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            let _ = tokio::time::timeout(Duration::from_secs(10), notified).await;
        }
    }

    /// Writes the pod's status if it differs from the one last read or written. One write
    /// at a time, each computed once the one before it is done: the writer task's and the
    /// pod's last write (as it goes) could otherwise both be in flight, and the older status
    /// (a container ended, the phase not yet terminal) land last and stay.
    pub(super) async fn write_once(&self) -> Result<(), kube::Error> {
        let _one = self.writing.lock().await;
        let pod = self.current();
        let status = self.status_json();
        let api: Api<Pod> = Api::namespaced(
            self.agent.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let current = serde_json::to_value(pod.status.as_ref()).unwrap_or(Value::Null);
        if same_status(&current, &status) {
            return Ok(());
        }
        let written = api
            .patch_status(
                pod.metadata.name.as_deref().unwrap_or(""),
                &PatchParams::default(),
                // Strategic: conditions merge by type, so one another writer added since
                // this copy was read (an eviction's `DisruptionTarget`) stays.
                &Patch::Strategic(json!({"status": with_cleared_fields(&status)})),
            )
            .await?;
        if let Ok(mut p) = self.pod.lock()
            && p.metadata.uid == written.metadata.uid
        {
            p.status = written.status;
        }
        Ok(())
    }

    pub(super) fn status_json(&self) -> Value {
        let Ok(mut state) = self.state.lock() else {
            return Value::Null;
        };
        let pod = self.current();
        let gates: Vec<String> = pod
            .spec
            .as_ref()
            .and_then(|s| s.readiness_gates.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|g| g.condition_type)
            .collect();
        let regular: Vec<&Status> = state
            .statuses
            .iter()
            .filter(|s| s.kind == Kind::Regular)
            .collect();
        let sidecars_ready = state
            .statuses
            .iter()
            .filter(|s| s.kind == Kind::Sidecar)
            .all(|s| s.ready);
        let containers_ready =
            !regular.is_empty() && regular.iter().all(|s| s.ready) && sidecars_ready;
        let existing: Vec<Value> = pod
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(&s.conditions).ok())
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default();
        let gates_met = gates.iter().all(|g| {
            existing
                .iter()
                .any(|c| c["type"] == g.as_str() && c["status"] == "True")
        });
        let terminal = state.terminal;
        let phase = match terminal {
            Some(Terminal::Succeeded) => "Succeeded",
            Some(Terminal::Failed) => "Failed",
            // The kubelet fails the pod at once; its containers stop after.
            _ if state.deadline_exceeded => "Failed",
            _ if state.initialized
                && regular.iter().any(|s| {
                    s.state.is_running() || s.restart_count > 0 || s.state.is_terminated()
                }) =>
            {
                "Running"
            }
            _ => "Pending",
        };
        let done = matches!(phase, "Succeeded" | "Failed");
        let truth = |b: bool| if b { "True" } else { "False" };
        let wanted = [
            (
                "PodReadyToStartContainers",
                truth(!done || terminal.is_some()),
                "",
            ),
            (
                "Initialized",
                truth(state.initialized),
                if state.initialized {
                    ""
                } else {
                    "ContainersNotInitialized"
                },
            ),
            (
                "Ready",
                truth(containers_ready && gates_met && !done),
                if containers_ready && !done {
                    ""
                } else if done {
                    "PodCompleted"
                } else {
                    "ContainersNotReady"
                },
            ),
            (
                "ContainersReady",
                truth(containers_ready && !done),
                if containers_ready && !done {
                    ""
                } else if done {
                    "PodCompleted"
                } else {
                    "ContainersNotReady"
                },
            ),
            ("PodScheduled", "True", ""),
        ];
        let not_ready: Vec<String> = regular
            .iter()
            .filter(|s| !s.ready)
            .map(|s| s.name.clone())
            .collect();
        let mut conditions = Vec::new();
        for (kind, status, reason) in wanted {
            let now = now_text();
            let entry = state
                .conditions
                .entry(kind.to_owned())
                .or_insert_with(|| (status.to_owned(), now.clone()));
            if entry.0 != status {
                *entry = (status.to_owned(), now);
            }
            let mut condition = json!({"type": kind, "status": status, "lastProbeTime": null,
                "lastTransitionTime": entry.1});
            if !reason.is_empty() {
                condition["reason"] = json!(reason);
                if reason == "ContainersNotReady" {
                    condition["message"] = json!(format!(
                        "containers with unready status: [{}]",
                        not_ready.join(" ")
                    ));
                } else if reason == "ContainersNotInitialized" {
                    let pending: Vec<String> = state
                        .statuses
                        .iter()
                        // Incomplete: not ended with 0 (a failed one too), or a sidecar
                        // not started.
                        .filter(|s| match s.kind {
                            Kind::Init => !matches!(
                                &s.state,
                                ContainerState::Terminated(t) if t.exit_code == 0
                            ),
                            Kind::Sidecar => !s.started && !s.state.is_terminated(),
                            _ => false,
                        })
                        .map(|s| s.name.clone())
                        .collect();
                    condition["message"] = json!(format!(
                        "containers with incomplete status: [{}]",
                        pending.join(" ")
                    ));
                }
            }
            conditions.push(condition);
        }
        // Conditions other agents set (readiness gates) stay.
        for c in existing {
            if !conditions.iter().any(|w| w["type"] == c["type"]) {
                conditions.push(c);
            }
        }
        let init: Vec<Value> = state
            .statuses
            .iter()
            .filter(|s| matches!(s.kind, Kind::Init | Kind::Sidecar))
            .map(Status::to_json)
            .collect();
        let ephemeral: Vec<Value> = state
            .statuses
            .iter()
            .filter(|s| s.kind == Kind::Ephemeral)
            .map(Status::to_json)
            .collect();
        let main: Vec<Value> = state
            .statuses
            .iter()
            .filter(|s| s.kind == Kind::Regular)
            .map(Status::to_json)
            .collect();
        let mut status = json!({
            "phase": phase,
            "conditions": conditions,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "startTime": self.started_at,
            "containerStatuses": main,
        });
        if state.deadline_exceeded {
            status["reason"] = json!("DeadlineExceeded");
            status["message"] = json!(super::worker::DEADLINE_MESSAGE);
        }
        if !init.is_empty() {
            status["initContainerStatuses"] = json!(init);
        }
        if !ephemeral.is_empty() {
            status["ephemeralContainerStatuses"] = json!(ephemeral);
        }
        status
    }
}

/// `status` for a strategic merge patch: a condition without a reason or message says so
/// with `null` (merged by type, the stored condition's old reason would stay otherwise).
fn with_cleared_fields(status: &Value) -> Value {
    let mut status = status.clone();
    for condition in status
        .get_mut("conditions")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        for key in ["reason", "message"] {
            condition.entry(key).or_insert(Value::Null);
        }
    }
    status
}

/// Whether the stored status already says what `wanted` does (ignoring what only the server
/// adds).
pub(super) fn same_status(current: &Value, wanted: &Value) -> bool {
    wanted
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| current.get(k) == Some(v))
}
