//! A running container's probes, in a loop.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::worker::Worker;
use crate::probes;

impl Worker {
    /// Runs one of a container's probes every `periodSeconds` while the container runs:
    /// the startup probe until it passes (then the others start), readiness marking the
    /// container ready or not by its thresholds, liveness (and a startup probe that fails
    /// for good) asking through `kill` for a restart.
    pub(super) async fn probe_loop(
        self: Arc<Self>,
        which: &'static str,
        container: Value,
        sandbox_pid: Option<u32>,
        env: Vec<(String, String)>,
        kill: tokio::sync::mpsc::Sender<String>,
    ) {
        let probe = container[which].clone();
        let name = container["name"].as_str().unwrap_or("").to_owned();
        let seconds = |key: &str, default: u64| probe[key].as_u64().unwrap_or(default);
        let period = Duration::from_secs(seconds("periodSeconds", 10).max(1));
        let success_threshold = seconds("successThreshold", 1).max(1);
        let failure_threshold = seconds("failureThreshold", 3).max(1);
        let clients = self.clients(&container, &env);
        if which != "startupProbe" {
            // Readiness and liveness wait for the startup probe.
            loop {
                let started = self
                    .state
                    .lock()
                    .is_ok_and(|s| s.statuses.iter().any(|c| c.name == name && c.started));
                if started {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(seconds("initialDelaySeconds", 0))).await;
        let (mut successes, mut failures) = (0u64, 0u64);
        let security = self.security(&container);
        loop {
            let target = probes::Target {
                pod_ip: &self.ip,
                container: &container,
                sandbox_pid,
                env: &env,
                clients: &clients,
                security: Some(&security),
            };
            let outcome = probes::run(&probe, &target).await;
            match outcome {
                Ok(()) => {
                    successes += 1;
                    failures = 0;
                    match which {
                        "startupProbe" => {
                            self.update(&name, |s| {
                                s.started = true;
                                if container.get("readinessProbe").is_none_or(Value::is_null) {
                                    s.ready = true;
                                }
                            });
                            return;
                        }
                        "readinessProbe" if successes >= success_threshold => {
                            let changed = self.state.lock().is_ok_and(|s| {
                                s.statuses.iter().any(|c| c.name == name && !c.ready)
                            });
                            if changed {
                                self.update(&name, |s| s.ready = true);
                            }
                        }
                        _ => {}
                    }
                }
                Err(message) => {
                    failures += 1;
                    successes = 0;
                    tracing::debug!(container = %name, probe = which, %message, "probe failed");
                    let kind = match which {
                        "readinessProbe" => "Readiness",
                        "livenessProbe" => "Liveness",
                        _ => "Startup",
                    };
                    self.event(
                        Some(&name),
                        true,
                        "Unhealthy",
                        &format!("{kind} probe failed: {message}"),
                    )
                    .await;
                    if failures >= failure_threshold {
                        match which {
                            "readinessProbe" => {
                                let changed = self.state.lock().is_ok_and(|s| {
                                    s.statuses.iter().any(|c| c.name == name && c.ready)
                                });
                                if changed {
                                    self.update(&name, |s| s.ready = false);
                                }
                            }
                            _ => {
                                let _ = kill.send(message).await;
                                return;
                            }
                        }
                    }
                }
            }
            tokio::time::sleep(period).await;
        }
    }
}
