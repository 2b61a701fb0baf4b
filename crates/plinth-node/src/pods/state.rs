//! A pod's state as its worker keeps it: each container's status, typed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// What kind of container a supervisor runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Init,
    Sidecar,
    Regular,
    /// Added to a running pod (`kubectl debug`); never restarted, never counted for
    /// readiness.
    Ephemeral,
}

/// A container's state (kube's `ContainerState`): one of waiting, running, terminated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ContainerState {
    /// Not running yet, or between runs (`ContainerCreating`, `CrashLoopBackOff`…).
    Waiting {
        /// Why.
        reason: String,
        /// More of why; empty for none.
        message: String,
    },
    /// Its process runs.
    Running {
        /// When it started (RFC 3339).
        started_at: String,
    },
    /// It ran and ended.
    Terminated(Terminated),
}

/// How a container's run ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Terminated {
    /// Its exit code (137 for one killed).
    pub(super) exit_code: i64,
    /// `Completed`, `Error`, `OOMKilled`.
    pub(super) reason: String,
    /// More of why; empty for none.
    pub(super) message: String,
    /// When it started, if it did.
    pub(super) started_at: Option<String>,
    /// When it ended.
    pub(super) finished_at: String,
    /// The run's container ID, if it had one.
    pub(super) container_id: Option<String>,
}

impl ContainerState {
    /// Waiting for `reason` (with `message`, if not empty).
    pub(super) fn waiting(reason: &str, message: &str) -> Self {
        Self::Waiting {
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }

    /// Whether its process runs.
    pub(super) fn is_running(&self) -> bool {
        matches!(self, Self::Running { .. })
    }

    /// Whether it ran and ended.
    pub(super) fn is_terminated(&self) -> bool {
        matches!(self, Self::Terminated(_))
    }

    /// As kube writes it.
    pub(super) fn to_json(&self) -> Value {
        match self {
            Self::Waiting { reason, message } if message.is_empty() => {
                json!({"waiting": {"reason": reason}})
            }
            Self::Waiting { reason, message } => {
                json!({"waiting": {"reason": reason, "message": message}})
            }
            Self::Running { started_at } => json!({"running": {"startedAt": started_at}}),
            Self::Terminated(t) => {
                let mut terminated = json!({
                    "exitCode": t.exit_code,
                    "reason": t.reason,
                    "finishedAt": t.finished_at,
                });
                for (field, value) in [
                    ("message", Some(&t.message).filter(|m| !m.is_empty())),
                    ("startedAt", t.started_at.as_ref()),
                    ("containerID", t.container_id.as_ref()),
                ] {
                    if let Some(value) = value {
                        terminated[field] = json!(value);
                    }
                }
                json!({ "terminated": terminated })
            }
        }
    }

    /// From what kube wrote (a status of an earlier agent); `None` for an empty state.
    pub(super) fn from_json(state: &Value) -> Option<Self> {
        let text = |v: &Value, field: &str| v[field].as_str().unwrap_or("").to_owned();
        if let Some(w) = state.get("waiting") {
            return Some(Self::waiting(&text(w, "reason"), &text(w, "message")));
        }
        if let Some(r) = state.get("running") {
            return Some(Self::Running {
                started_at: text(r, "startedAt"),
            });
        }
        let t = state.get("terminated")?;
        let optional = |field: &str| t[field].as_str().map(str::to_owned);
        Some(Self::Terminated(Terminated {
            exit_code: t["exitCode"].as_i64().unwrap_or(0),
            reason: text(t, "reason"),
            message: text(t, "message"),
            started_at: optional("startedAt"),
            finished_at: text(t, "finishedAt"),
            container_id: optional("containerID"),
        }))
    }
}

/// A container's status as the pod reports it.
#[derive(Clone, Debug)]
pub(super) struct Status {
    pub(super) name: String,
    pub(super) image: String,
    pub(super) kind: Kind,
    pub(super) state: ContainerState,
    /// The previous run's end (kube's `lastState`), if there was one.
    pub(super) last_state: Option<ContainerState>,
    pub(super) ready: bool,
    pub(super) started: bool,
    pub(super) restart_count: i64,
    pub(super) container_id: String,
}

impl Status {
    pub(super) fn to_json(&self) -> Value {
        let mut status = json!({
            "name": self.name,
            "image": self.image,
            "imageID": self.image,
            "state": self.state.to_json(),
            "lastState": self.last_state.as_ref().map_or_else(|| json!({}), ContainerState::to_json),
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.started,
        });
        if !self.container_id.is_empty() {
            status["containerID"] = json!(self.container_id);
        }
        status
    }
}

/// How a pod's worker ended the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Terminal {
    /// Every container ended with 0 (phase `Succeeded`).
    Succeeded,
    /// A container failed for good (phase `Failed`).
    Failed,
    /// Stopped because the pod is deleted (the phase stays what it was).
    Stopped,
}

/// What the parts of one pod's worker share.
pub(super) struct PodState {
    pub(super) statuses: Vec<Status>,
    /// Whether the init containers are done (sidecars started).
    pub(super) initialized: bool,
    /// How the pod ended, once it has.
    pub(super) terminal: Option<Terminal>,
    /// Each condition's status and last transition time.
    pub(super) conditions: BTreeMap<String, (String, String)>,
    /// Whether the pod outlived its `activeDeadlineSeconds` (it fails, `DeadlineExceeded`).
    pub(super) deadline_exceeded: bool,
}

pub(super) fn now_text() -> String {
    plinth_core::meta::format_time(crate::clock::now())
}

/// Whether the pod has init containers.
pub(super) fn has_init(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// The pod's containers as JSON with their kinds, init containers first.
pub(super) fn containers(pod: &Pod) -> Vec<(Kind, Value)> {
    let spec = serde_json::to_value(pod.spec.as_ref()).unwrap_or(Value::Null);
    let mut all = Vec::new();
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        let kind = if c["restartPolicy"] == "Always" {
            Kind::Sidecar
        } else {
            Kind::Init
        };
        all.push((kind, c.clone()));
    }
    for c in spec["containers"].as_array().into_iter().flatten() {
        all.push((Kind::Regular, c.clone()));
    }
    all
}

/// A pod's ephemeral containers.
pub(super) fn ephemeral(pod: &Pod) -> Vec<Value> {
    let spec = serde_json::to_value(pod.spec.as_ref()).unwrap_or(Value::Null);
    spec["ephemeralContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_states_read_back_what_they_write() {
        let states = [
            ContainerState::waiting("ContainerCreating", ""),
            ContainerState::waiting(
                "CrashLoopBackOff",
                "back-off 10s restarting failed container",
            ),
            ContainerState::Running {
                started_at: "2026-12-03T10:00:00Z".into(),
            },
            ContainerState::Terminated(Terminated {
                exit_code: 137,
                reason: "Error".into(),
                message: "the node agent restarted".into(),
                started_at: Some("2026-12-03T10:00:00Z".into()),
                finished_at: "2026-12-03T10:01:00Z".into(),
                container_id: Some("plinth://uid-c-0".into()),
            }),
            ContainerState::Terminated(Terminated {
                exit_code: 0,
                reason: "Completed".into(),
                finished_at: "2026-12-03T10:01:00Z".into(),
                ..Terminated::default()
            }),
        ];
        for state in states {
            let json = state.to_json();
            assert_eq!(ContainerState::from_json(&json), Some(state), "{json}");
        }
        assert_eq!(ContainerState::from_json(&json!({})), None);
    }

    #[test]
    fn states_are_written_as_kube_writes_them() {
        assert_eq!(
            ContainerState::waiting("PodInitializing", "").to_json(),
            json!({"waiting": {"reason": "PodInitializing"}})
        );
        let killed = ContainerState::Terminated(Terminated {
            exit_code: 137,
            reason: "Error".into(),
            finished_at: "t".into(),
            ..Terminated::default()
        });
        assert_eq!(
            killed.to_json(),
            json!({"terminated": {"exitCode": 137, "reason": "Error", "finishedAt": "t"}})
        );
        assert!(killed.is_terminated() && !killed.is_running());
        let status = Status {
            name: "c".into(),
            image: "busybox".into(),
            kind: Kind::Regular,
            state: ContainerState::Running {
                started_at: "t".into(),
            },
            last_state: None,
            ready: true,
            started: true,
            restart_count: 0,
            container_id: String::new(),
        };
        assert_eq!(status.to_json()["lastState"], json!({}));
        assert_eq!(
            status.to_json()["state"],
            json!({"running": {"startedAt": "t"}})
        );
    }
}
