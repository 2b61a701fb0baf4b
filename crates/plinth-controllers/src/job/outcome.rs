//! A Job's outcome: finished pods counted (with their finalizers), the pod failure policy,
//! the end decided.

use std::collections::BTreeSet;
use std::sync::Arc;

use plinth_core::{Frozen, Tree};
use serde_json::{Value, json};

use crate::informer::key_of;
use crate::workload::{EXPECTATION_TIMEOUT, uid};

use super::*;

impl Pass<'_> {
    /// Moves finished pods through the counting protocol, until the Job's end is decided
    /// (pods that end after that, as the ones it deletes, are not counted).
    pub(super) async fn count(&self, pods: &[Arc<Frozen>], status: &mut Value) {
        let decided = condition_true(self.job, "SuccessCriteriaMet")
            || condition_true(self.job, "FailureTarget");
        let mut uncounted_ok: Vec<String> =
            strings(&status["uncountedTerminatedPods"]["succeeded"]);
        let mut uncounted_failed: Vec<String> =
            strings(&status["uncountedTerminatedPods"]["failed"]);
        let mut newly = false;
        let mut indexes = parse_indexes(status["completedIndexes"].as_str().unwrap_or(""));
        for pod in pods.iter().filter(|p| has_finalizer(p)) {
            let pod_uid = uid(pod).to_owned();
            let Some(success) = outcome(pod) else {
                continue;
            };
            if decided {
                remove_finalizer(self.registry, pod).await;
                continue;
            }
            if uncounted_ok.contains(&pod_uid) || uncounted_failed.contains(&pod_uid) {
                continue;
            }
            if success {
                if let Some(index) = index_of(pod) {
                    indexes.insert(index);
                }
                uncounted_ok.push(pod_uid);
            } else if self.policy_action(pod) == Some("Ignore") {
                // kube's `Ignore`: the failure is not counted at all (its index, if any, is
                // run again); the pod just goes.
                remove_finalizer(self.registry, pod).await;
                continue;
            } else {
                uncounted_failed.push(pod_uid);
            }
            newly = true;
        }
        status["uncountedTerminatedPods"] = json!({});
        if !uncounted_ok.is_empty() {
            status["uncountedTerminatedPods"]["succeeded"] = json!(uncounted_ok);
        }
        if !uncounted_failed.is_empty() {
            status["uncountedTerminatedPods"]["failed"] = json!(uncounted_failed);
        }
        if !indexes.is_empty() {
            status["completedIndexes"] = json!(format_indexes(&indexes));
        }
        if newly {
            // First the uids are recorded…
            self.write(status.clone()).await;
        }
        // …then the finalizers go…
        let waiting: Vec<&Arc<Frozen>> = pods
            .iter()
            .filter(|p| has_finalizer(p))
            .filter(|p| {
                let u = uid(p).to_owned();
                uncounted_ok.contains(&u) || uncounted_failed.contains(&u)
            })
            .collect();
        for pod in &waiting {
            remove_finalizer(self.registry, pod).await;
        }
        let keys: Vec<String> = waiting.iter().map(key_of).collect();
        self.pods
            .wait_until(EXPECTATION_TIMEOUT, |cache| {
                keys.iter()
                    .all(|k| cache.get(k).is_none_or(|p| !has_finalizer(&p)))
            })
            .await;
        // …then they are counted.
        status["succeeded"] = json!(int(status, "/succeeded") + uncounted_ok.len() as i64);
        status["failed"] = json!(int(status, "/failed") + uncounted_failed.len() as i64);
        status["uncountedTerminatedPods"] = json!({});
    }

    /// Whether the Job has met its end: enough successes, too many failures, its deadline,
    /// a failure policy's FailJob.
    pub(super) fn end(
        &self,
        pods: &[Arc<Frozen>],
        succeeded: i64,
        failed: i64,
        indexes: &BTreeSet<i64>,
        start: i64,
        now: i64,
    ) -> End {
        let completions = self.spec("/spec/completions").and_then(Frozen::as_i64);
        let indexed = self.spec("/spec/completionMode").and_then(Frozen::as_str) == Some("Indexed");
        let active = pods.iter().filter(|p| outcome(p).is_none()).count();
        let done = match (completions, indexed) {
            (Some(n), true) => i64::try_from(indexes.len()).unwrap_or(0) >= n,
            (Some(n), false) => succeeded >= n,
            (None, _) => succeeded >= 1 && active == 0,
        };
        if done {
            return End::Succeeded;
        }
        if let Some(message) = self.policy_fails(pods) {
            return End::Failed("PodFailurePolicy", message);
        }
        let limit = self
            .spec("/spec/backoffLimit")
            .and_then(Frozen::as_i64)
            .unwrap_or(6);
        // With OnFailure, the restarts of the running pods' containers are the failures
        // (kube's pastBackoffLimitOnFailure).
        let on_failure = self
            .spec("/spec/template/spec/restartPolicy")
            .and_then(Frozen::as_str)
            == Some("OnFailure");
        let restarts: i64 = pods
            .iter()
            .filter(|p| outcome(p).is_none())
            .map(|p| restart_count(p))
            .sum();
        let restarted_out = on_failure
            && if limit == 0 {
                restarts > 0
            } else {
                restarts >= limit
            };
        if failed > limit || restarted_out {
            return End::Failed(
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit".into(),
            );
        }
        if let Some(deadline) = self
            .spec("/spec/activeDeadlineSeconds")
            .and_then(Frozen::as_i64)
            && now - start >= deadline
        {
            return End::Failed(
                "DeadlineExceeded",
                "Job was active longer than specified deadline".into(),
            );
        }
        End::Running
    }

    /// A `FailJob` rule's message, if a failed pod matches one.
    pub(super) fn policy_fails(&self, pods: &[Arc<Frozen>]) -> Option<String> {
        pods.iter()
            .filter(|p| outcome(p) == Some(false))
            .find(|p| self.policy_action(p) == Some("FailJob"))
            .map(|p| {
                let (container, code) = exit_of(p).unwrap_or_default();
                format!(
                    "Container {container} for pod {}/{} failed with exit code {code} matching FailJob rule at index {}",
                    self.namespace(),
                    name_of(p),
                    self.matching_rule(p).unwrap_or(0)
                )
            })
    }

    pub(super) fn matching_rule(&self, pod: &Frozen) -> Option<usize> {
        let rules = self.spec("/spec/podFailurePolicy/rules")?.as_array()?;
        rules.iter().position(|rule| rule_matches(rule, pod))
    }

    pub(super) fn policy_action(&self, pod: &Frozen) -> Option<&str> {
        let rules = self.spec("/spec/podFailurePolicy/rules")?.as_array()?;
        rules
            .iter()
            .find(|rule| rule_matches(rule, pod))
            .and_then(|r| r["action"].as_str())
    }
}

pub(super) fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

pub(super) fn restart_count(pod: &Frozen) -> i64 {
    pod.at("/status/containerStatuses")
        .and_then(Frozen::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c["restartCount"].as_i64())
        .sum()
}

/// When the pod's last container finished.
pub(super) fn finished_at(pod: &Frozen) -> Option<i64> {
    pod.at("/status/containerStatuses")
        .and_then(Frozen::as_array)?
        .iter()
        .filter_map(|c| {
            c.at("/state/terminated/finishedAt")
                .and_then(Frozen::as_str)
        })
        .filter_map(plinth_core::meta::parse_time)
        .max()
        .or_else(|| {
            plinth_core::meta::meta_str(pod, "deletionTimestamp")
                .and_then(plinth_core::meta::parse_time)
        })
}

/// The first container that failed, and its exit code.
pub(super) fn exit_of(pod: &Frozen) -> Option<(String, i64)> {
    pod.at("/status/containerStatuses")
        .and_then(Frozen::as_array)?
        .iter()
        .find_map(|c| {
            let code = c
                .at("/state/terminated/exitCode")
                .and_then(Frozen::as_i64)?;
            (code != 0).then(|| (c["name"].as_str().unwrap_or("").to_owned(), code))
        })
}

/// Whether a `podFailurePolicy` rule matches a failed pod (by exit codes or conditions).
pub(super) fn rule_matches(rule: &Frozen, pod: &Frozen) -> bool {
    if let Some(codes) = rule.get("onExitCodes").filter(|c| !c.is_null()) {
        let values: Vec<i64> = codes["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Frozen::as_i64)
            .collect();
        let only = codes["containerName"].as_str();
        let operator = codes["operator"].as_str().unwrap_or("In");
        return pod
            .at("/status/containerStatuses")
            .and_then(Frozen::as_array)
            .into_iter()
            .flatten()
            .filter(|c| only.is_none_or(|n| c["name"] == n))
            .filter_map(|c| c.at("/state/terminated/exitCode").and_then(Frozen::as_i64))
            .filter(|code| *code != 0)
            .any(|code| (operator == "In") == values.contains(&code));
    }
    if let Some(patterns) = rule["onPodConditions"].as_array() {
        let conditions = pod.at("/status/conditions").and_then(Frozen::as_array);
        return patterns.iter().any(|pattern| {
            conditions.into_iter().flatten().any(|c| {
                c["type"] == pattern["type"]
                    && c["status"] == pattern["status"].as_str().unwrap_or("True")
            })
        });
    }
    false
}
