//! The Job controller (kube-controller-manager's `job`) and the TTL-after-finished
//! controller. A Job keeps up to `parallelism` pods running until `completions` have
//! succeeded (any one, without `completions`; one per index in Indexed mode), replacing
//! failed pods after kube's back-off (10 s doubling, at most 6 min) until more than
//! `backoffLimit` have failed (with `restartPolicy: OnFailure`, container restarts count);
//! `activeDeadlineSeconds`, `suspend`, a `podFailurePolicy` (FailJob, Ignore, Count on exit
//! codes or pod conditions) and `ttlSecondsAfterFinished` behave as kube's. Finished pods
//! are counted once, as kube counts them: each pod carries the
//! `batch.kubernetes.io/job-tracking` finalizer; a finished pod's uid goes into
//! `status.uncountedTerminatedPods`, then its finalizer is removed, then it moves into
//! `succeeded`/`failed` — so a pod deleted after it finished is neither lost nor counted
//! twice.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use plinth_core::At as _;
use plinth_core::{Frozen, Tree};
use plinth_registry::{Client, DeleteOptions, Part, Propagation, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

mod outcome;
mod pods;

use crate::informer::{Failed, Informer, Next, Queue, SharedInformers, enqueue, key_of};
use crate::workload::{
    claim, controller_of, controller_ref, deleting, enqueue_owner, ready, seen, uid, write_status,
};
use outcome::finished_at;

const MANAGER: &str = "job-controller";
/// The finalizer that keeps a Job's pod until the Job has counted it.
pub const TRACKING: &str = "batch.kubernetes.io/job-tracking";
const INDEX: &str = "batch.kubernetes.io/job-completion-index";
const BACKOFF_BASE: i64 = 10;
const BACKOFF_MAX: i64 = 360;

/// Starts the controller; it ends when `stopping` becomes true.
pub fn spawn_job_controller(
    registry: Client,
    informers: &SharedInformers,
    stopping: watch::Receiver<bool>,
) {
    let queue = Queue::default();
    let jobs = informers.start(("batch", "jobs"), enqueue(&queue));
    let pods = {
        let owner = enqueue_owner(&queue, "Job", None);
        let queue = queue.clone();
        informers.start(("", "pods"), move |c| {
            owner(c);
            // A tracked pod whose Job is gone is freed by name.
            for pod in [c.new, c.old].into_iter().flatten() {
                let of_a_job =
                    controller_of(pod).is_some_and(|o| o["kind"] == "Job" && o["name"].is_string());
                if of_a_job && has_finalizer(pod) {
                    queue.add(format!("pod:{}", key_of(pod)));
                }
            }
        })
    };
    tokio::spawn(async move {
        let mut stopping = stopping;
        jobs.synced().await;
        pods.synced().await;
        while let Some(key) = queue.next(&mut stopping).await {
            if let Some(pod_key) = key.strip_prefix("pod:") {
                free_orphan(&registry, &jobs, &pods, pod_key).await;
                continue;
            }
            let Some(job) = jobs.get(&key) else { continue };
            let pass = Pass {
                registry: &registry,
                jobs: &jobs,
                pods: &pods,
                job: &job,
                failed: Failed::default(),
            };
            let wait = pass.sync().await;
            match pass.failed.next(wait) {
                Next::Idle => queue.forget(&key),
                Next::After(wait) => {
                    queue.forget(&key);
                    queue.add_after(key, wait);
                }
                Next::Retry => queue.retry(key),
            }
        }
    });
}

fn has_finalizer(pod: &Frozen) -> bool {
    plinth_core::meta::finalizers(pod)
        .iter()
        .any(|f| f == TRACKING)
}

fn phase(pod: &Frozen) -> &str {
    pod.at("/status/phase")
        .and_then(Frozen::as_str)
        .unwrap_or("")
}

/// kube's view of a finished pod: succeeded, or failed (a pod being deleted that did not
/// succeed counts as failed).
fn outcome(pod: &Frozen) -> Option<bool> {
    match phase(pod) {
        "Succeeded" => Some(true),
        "Failed" => Some(false),
        _ if deleting(pod) => Some(false),
        _ => None,
    }
}

fn int(object: &Value, pointer: &str) -> i64 {
    object.at(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn name_of(object: &(impl Tree + ?Sized)) -> &str {
    plinth_core::meta::name(object).unwrap_or("")
}

fn index_of(pod: &Frozen) -> Option<i64> {
    pod.at("/metadata/annotations")
        .and_then(|a| a.get(INDEX))
        .and_then(Frozen::as_str)
        .and_then(|i| i.parse().ok())
}

/// `1,3-5` style interval lists (`completedIndexes`), parsed and written.
fn parse_indexes(text: &str) -> BTreeSet<i64> {
    let mut set = BTreeSet::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i64>(), b.parse::<i64>()) {
                    set.extend(a..=b);
                }
            }
            None => {
                if let Ok(n) = part.parse() {
                    set.insert(n);
                }
            }
        }
    }
    set
}

fn format_indexes(set: &BTreeSet<i64>) -> String {
    let mut parts = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// Removes the tracking finalizer from a pod whose Job no longer exists.
async fn free_orphan(registry: &Client, jobs: &Informer, pods: &Informer, key: &str) {
    let Some(pod) = pods.get(key) else { return };
    let namespace = plinth_core::meta::namespace(&pod).unwrap_or("default");
    let owner = controller_of(&pod)
        .and_then(|o| o["name"].as_str())
        .unwrap_or("");
    let owner_uid = controller_of(&pod)
        .and_then(|o| o["uid"].as_str())
        .unwrap_or("");
    let alive = jobs
        .get(&format!("{namespace}/{owner}"))
        .is_some_and(|j| uid(&j) == owner_uid && !deleting(&j));
    if !alive {
        remove_finalizer(registry, &pod).await;
    }
}

async fn remove_finalizer(registry: &Client, pod: &Frozen) {
    let Some(def) = registry.resources.get("", "v1", "pods") else {
        return;
    };
    let _ = registry
        .modify(
            &def,
            plinth_core::meta::namespace(pod),
            name_of(pod),
            Part::Main,
            &WriteOptions::internal(MANAGER),
            |p| {
                let kept: Vec<Value> = plinth_core::meta::finalizers(p)
                    .into_iter()
                    .filter(|f| f != TRACKING)
                    .map(Value::from)
                    .collect();
                if kept.len() == plinth_core::meta::finalizers(p).len() {
                    return Ok(false);
                }
                p["metadata"]["finalizers"] = json!(kept);
                Ok(true)
            },
        )
        .await;
}

struct Pass<'a> {
    registry: &'a Client,
    jobs: &'a Informer,
    pods: &'a Informer,
    job: &'a Frozen,
    /// Whether a write of this pass failed (the key is retried after its backoff).
    failed: Failed,
}

/// What the pass decided about the Job's end.
enum End {
    Running,
    Succeeded,
    Failed(&'static str, String),
}

fn condition_true(job: &Frozen, kind: &str) -> bool {
    job.at("/status/conditions")
        .and_then(Frozen::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

impl Pass<'_> {
    fn spec(&self, pointer: &str) -> Option<&Frozen> {
        self.job.at(pointer)
    }

    fn namespace(&self) -> &str {
        plinth_core::meta::namespace(self.job).unwrap_or("default")
    }

    fn finished(&self) -> bool {
        condition_true(self.job, "Complete") || condition_true(self.job, "Failed")
    }

    async fn sync(&self) -> Option<Duration> {
        let controller = controller_ref(self.job, "batch/v1", "Job");
        let pods = claim(
            self.registry,
            self.pods,
            ("", "pods"),
            self.job,
            &controller,
            MANAGER,
        )
        .await;
        let now = plinth_registry::now();
        let mut status = self
            .job
            .get("status")
            .map_or_else(|| json!({}), Frozen::to_value);
        // Counting: finished pods not yet counted go into uncountedTerminatedPods, then lose
        // their finalizer, then move into the counts.
        let finished = self.finished();
        if finished || deleting(self.job) {
            // A finished (or deleted) Job's pods are no longer counted: the running ones
            // go, the finished ones are let go.
            for pod in pods.iter().filter(|p| has_finalizer(p)) {
                if outcome(pod).is_none() {
                    self.delete_pod(pod).await;
                } else {
                    remove_finalizer(self.registry, pod).await;
                }
            }
            return if finished { self.ttl(now).await } else { None };
        }
        self.count(&pods, &mut status).await;
        let active: Vec<&Arc<Frozen>> = pods.iter().filter(|p| outcome(p).is_none()).collect();
        let succeeded = int(&status, "/succeeded")
            + status["uncountedTerminatedPods"]["succeeded"]
                .as_array()
                .map_or(0, |a| a.len() as i64);
        let failed = int(&status, "/failed")
            + status["uncountedTerminatedPods"]["failed"]
                .as_array()
                .map_or(0, |a| a.len() as i64);
        let suspended = self.spec("/spec/suspend").is_some_and(|s| *s == true);
        let indexed = self.spec("/spec/completionMode").and_then(Frozen::as_str) == Some("Indexed");
        let completions = self.spec("/spec/completions").and_then(Frozen::as_i64);
        let parallelism = self
            .spec("/spec/parallelism")
            .and_then(Frozen::as_i64)
            .unwrap_or(1);
        let done_indexes = parse_indexes(status["completedIndexes"].as_str().unwrap_or(""));
        let nowtext = plinth_core::meta::format_time(now);
        if suspended {
            for pod in &active {
                self.delete_pod(pod).await;
            }
            set_condition(
                &mut status,
                "Suspended",
                "True",
                "JobSuspended",
                "Job suspended",
                &nowtext,
            );
            if let Some(map) = status.as_object_mut() {
                map.remove("startTime");
            }
            self.fill_counts(&mut status, &pods);
            self.write(status).await;
            return None;
        }
        if condition_true(self.job, "Suspended") {
            set_condition(
                &mut status,
                "Suspended",
                "False",
                "JobResumed",
                "Job resumed",
                &nowtext,
            );
        }
        if status["startTime"].is_null() {
            status["startTime"] = json!(nowtext);
        }
        let start = status["startTime"]
            .as_str()
            .and_then(plinth_core::meta::parse_time)
            .unwrap_or(now);
        let end = self.end(&pods, succeeded, failed, &done_indexes, start, now);
        let mut wait = None;
        match end {
            End::Succeeded => {
                set_condition(
                    &mut status,
                    "SuccessCriteriaMet",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    &nowtext,
                );
                for pod in &active {
                    self.delete_pod(pod).await;
                }
                if active.is_empty() {
                    set_condition(
                        &mut status,
                        "Complete",
                        "True",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                        &nowtext,
                    );
                    status["completionTime"] = json!(nowtext);
                    self.event("Normal", "Completed", "Job completed").await;
                }
            }
            End::Failed(reason, message) => {
                set_condition(
                    &mut status,
                    "FailureTarget",
                    "True",
                    reason,
                    &message,
                    &nowtext,
                );
                for pod in &active {
                    self.delete_pod(pod).await;
                }
                if active.is_empty() {
                    set_condition(&mut status, "Failed", "True", reason, &message, &nowtext);
                    self.event("Warning", reason, &message).await;
                }
            }
            End::Running => {
                wait = self
                    .start_pods(
                        &pods,
                        &active,
                        succeeded,
                        failed,
                        completions,
                        parallelism,
                        indexed,
                        &done_indexes,
                        &controller,
                        now,
                    )
                    .await;
                if let Some(deadline) = self
                    .spec("/spec/activeDeadlineSeconds")
                    .and_then(Frozen::as_i64)
                {
                    let left = start + deadline - now;
                    wait = Some(wait.map_or(left.max(1), |w: i64| w.min(left.max(1))));
                }
            }
        }
        self.fill_counts(&mut status, &pods);
        self.write(status).await;
        // Until the pods are gone and counted, look again soon.
        if !matches!(
            self.end(&pods, succeeded, failed, &done_indexes, start, now),
            End::Running
        ) {
            return Some(Duration::from_secs(1));
        }
        wait.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(1)))
    }

    /// active, ready and terminating from the pods now.
    fn fill_counts(&self, status: &mut Value, pods: &[Arc<Frozen>]) {
        let active = pods.iter().filter(|p| outcome(p).is_none()).count();
        let ready_count = pods
            .iter()
            .filter(|p| outcome(p).is_none() && ready(p))
            .count();
        let terminating = pods
            .iter()
            .filter(|p| deleting(p) && !matches!(phase(p), "Succeeded" | "Failed"))
            .count();
        status["active"] = json!(active);
        status["ready"] = json!(ready_count);
        status["terminating"] = json!(terminating);
        if let Some(map) = status.as_object_mut() {
            for key in ["active", "succeeded", "failed", "terminating"] {
                if map.get(key) == Some(&json!(0)) {
                    map.remove(key);
                }
            }
        }
    }

    async fn write(&self, status: Value) {
        let revision =
            write_status(self.registry, ("batch", "jobs"), self.job, status, MANAGER).await;
        seen(self.jobs, self.job, revision).await;
    }

    async fn event(&self, kind: &str, reason: &str, message: &str) {
        crate::events::record(self.registry, self.job, kind, reason, message, MANAGER).await;
    }

    /// ttlSecondsAfterFinished: deletes the finished Job (its pods with it) when due;
    /// when to look again otherwise.
    async fn ttl(&self, now: i64) -> Option<Duration> {
        let ttl = self
            .spec("/spec/ttlSecondsAfterFinished")
            .and_then(Frozen::as_i64)?;
        let finished_at = self
            .job
            .at("/status/conditions")
            .and_then(Frozen::as_array)?
            .iter()
            .filter(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
            .filter_map(|c| {
                c["lastTransitionTime"]
                    .as_str()
                    .and_then(plinth_core::meta::parse_time)
            })
            .max()?;
        if finished_at + ttl > now {
            return Some(Duration::from_secs(
                u64::try_from(finished_at + ttl - now).unwrap_or(1),
            ));
        }
        let def = self.registry.resources.get("batch", "v1", "jobs")?;
        let options = DeleteOptions {
            propagation: Some(Propagation::Foreground),
            uid: Some(uid(self.job).to_owned()),
            ..DeleteOptions::default()
        };
        let _ = self
            .registry
            .delete(&def, Some(self.namespace()), name_of(self.job), &options)
            .await;
        None
    }
}

/// Sets a Job condition (`lastTransitionTime` and `lastProbeTime` when it changes).
fn set_condition(
    status: &mut Value,
    kind: &str,
    value: &str,
    reason: &str,
    message: &str,
    now: &str,
) {
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let Some(conditions) = status["conditions"].as_array_mut() else {
        return;
    };
    match conditions.iter_mut().find(|c| c["type"] == kind) {
        Some(c) if c["status"] == value && c["reason"] == reason => {}
        Some(c) => {
            *c = json!({"type": kind, "status": value, "reason": reason, "message": message,
                "lastProbeTime": now, "lastTransitionTime": now});
        }
        None => conditions.push(json!({"type": kind, "status": value, "reason": reason,
            "message": message, "lastProbeTime": now, "lastTransitionTime": now})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_lists_read_and_write_as_kubes() {
        let set = parse_indexes("0-2,4,6-7");
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), [0, 1, 2, 4, 6, 7]);
        assert_eq!(format_indexes(&set), "0-2,4,6-7");
        assert_eq!(format_indexes(&BTreeSet::new()), "");
    }
}
