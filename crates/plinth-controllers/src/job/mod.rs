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

use plinth_registry::{DeleteOptions, Part, Propagation, Registry, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::informer::{Informer, Queue, SharedInformers, enqueue, key_of};
use crate::workload::{
    EXPECTATION_TIMEOUT, PodName, claim, controller_of, controller_ref, delete_pod, deleting,
    enqueue_owner, pod_from_template, ready, seen, uid, write_status,
};

const MANAGER: &str = "job-controller";
/// The finalizer that keeps a Job's pod until the Job has counted it.
pub const TRACKING: &str = "batch.kubernetes.io/job-tracking";
const INDEX: &str = "batch.kubernetes.io/job-completion-index";
const BACKOFF_BASE: i64 = 10;
const BACKOFF_MAX: i64 = 360;

/// Starts the controller; it ends when `stopping` becomes true.
pub fn spawn_job_controller(
    registry: Registry,
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
            };
            if let Some(wait) = pass.sync().await {
                queue.add_after(key, wait);
            }
        }
    });
}

fn has_finalizer(pod: &Value) -> bool {
    plinth_core::meta::finalizers(pod)
        .iter()
        .any(|f| f == TRACKING)
}

fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// kube's view of a finished pod: succeeded, or failed (a pod being deleted that did not
/// succeed counts as failed).
fn outcome(pod: &Value) -> Option<bool> {
    match phase(pod) {
        "Succeeded" => Some(true),
        "Failed" => Some(false),
        _ if deleting(pod) => Some(false),
        _ => None,
    }
}

fn int(object: &Value, pointer: &str) -> i64 {
    object.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn name_of(object: &Value) -> &str {
    plinth_core::meta::name(object).unwrap_or("")
}

fn index_of(pod: &Value) -> Option<i64> {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(INDEX))
        .and_then(Value::as_str)
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
async fn free_orphan(registry: &Registry, jobs: &Informer, pods: &Informer, key: &str) {
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

async fn remove_finalizer(registry: &Registry, pod: &Value) {
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
    registry: &'a Registry,
    jobs: &'a Informer,
    pods: &'a Informer,
    job: &'a Value,
}

/// What the pass decided about the Job's end.
enum End {
    Running,
    Succeeded,
    Failed(&'static str, String),
}

fn condition_true(job: &Value, kind: &str) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

impl Pass<'_> {
    fn spec(&self, pointer: &str) -> Option<&Value> {
        self.job.pointer(pointer)
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
        let mut status = self.job.get("status").cloned().unwrap_or_else(|| json!({}));
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
        let active: Vec<&Arc<Value>> = pods.iter().filter(|p| outcome(p).is_none()).collect();
        let succeeded = int(&status, "/succeeded")
            + status["uncountedTerminatedPods"]["succeeded"]
                .as_array()
                .map_or(0, |a| a.len() as i64);
        let failed = int(&status, "/failed")
            + status["uncountedTerminatedPods"]["failed"]
                .as_array()
                .map_or(0, |a| a.len() as i64);
        let suspended = self.spec("/spec/suspend") == Some(&json!(true));
        let indexed = self.spec("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
        let completions = self.spec("/spec/completions").and_then(Value::as_i64);
        let parallelism = self
            .spec("/spec/parallelism")
            .and_then(Value::as_i64)
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
                    .and_then(Value::as_i64)
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

    /// Moves finished pods through the counting protocol, until the Job's end is decided
    /// (pods that end after that, as the ones it deletes, are not counted).
    async fn count(&self, pods: &[Arc<Value>], status: &mut Value) {
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
        let waiting: Vec<&Arc<Value>> = pods
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
        let keys: Vec<String> = waiting.iter().map(|p| key_of(p)).collect();
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
    fn end(
        &self,
        pods: &[Arc<Value>],
        succeeded: i64,
        failed: i64,
        indexes: &BTreeSet<i64>,
        start: i64,
        now: i64,
    ) -> End {
        let completions = self.spec("/spec/completions").and_then(Value::as_i64);
        let indexed = self.spec("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
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
            .and_then(Value::as_i64)
            .unwrap_or(6);
        let ignored = self.ignored(pods);
        // With OnFailure, the restarts of the running pods' containers are the failures
        // (kube's pastBackoffLimitOnFailure).
        let on_failure = self
            .spec("/spec/template/spec/restartPolicy")
            .and_then(Value::as_str)
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
        if failed - ignored > limit || restarted_out {
            return End::Failed(
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit".into(),
            );
        }
        if let Some(deadline) = self
            .spec("/spec/activeDeadlineSeconds")
            .and_then(Value::as_i64)
            && now - start >= deadline
        {
            return End::Failed(
                "DeadlineExceeded",
                "Job was active longer than specified deadline".into(),
            );
        }
        End::Running
    }

    /// The failed pods a `podFailurePolicy` rule says to `Ignore` (not counted against the
    /// back-off limit).
    fn ignored(&self, pods: &[Arc<Value>]) -> i64 {
        let count = pods
            .iter()
            .filter(|p| outcome(p) == Some(false))
            .filter(|p| self.policy_action(p) == Some("Ignore"))
            .count();
        i64::try_from(count).unwrap_or(0)
    }

    /// A `FailJob` rule's message, if a failed pod matches one.
    fn policy_fails(&self, pods: &[Arc<Value>]) -> Option<String> {
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

    fn matching_rule(&self, pod: &Value) -> Option<usize> {
        let rules = self.spec("/spec/podFailurePolicy/rules")?.as_array()?;
        rules.iter().position(|rule| rule_matches(rule, pod))
    }

    fn policy_action(&self, pod: &Value) -> Option<&str> {
        let rules = self.spec("/spec/podFailurePolicy/rules")?.as_array()?;
        rules
            .iter()
            .find(|rule| rule_matches(rule, pod))
            .and_then(|r| r["action"].as_str())
    }

    /// Creates the pods missing for `parallelism`, after the back-off of recent failures;
    /// seconds until the back-off ends, when it holds them back.
    #[allow(clippy::too_many_arguments)]
    async fn start_pods(
        &self,
        pods: &[Arc<Value>],
        active: &[&Arc<Value>],
        succeeded: i64,
        failed: i64,
        completions: Option<i64>,
        parallelism: i64,
        indexed: bool,
        done_indexes: &BTreeSet<i64>,
        controller: &Value,
        now: i64,
    ) -> Option<i64> {
        let active_count = i64::try_from(active.len()).unwrap_or(0);
        let wanted = match completions {
            Some(n) if indexed => {
                parallelism.min(n - i64::try_from(done_indexes.len()).unwrap_or(0))
            }
            Some(n) => parallelism.min(n - succeeded),
            None if succeeded > 0 => 0,
            None => parallelism,
        };
        let missing = wanted - active_count;
        if missing <= 0 {
            return None;
        }
        // kube's back-off: after the n-th failure, 10 s · 2^(n-1), at most 6 min, from
        // when the last failed pod finished.
        let recent_failures = failed - self.ignored(pods);
        if recent_failures > 0 {
            let last = pods
                .iter()
                .filter(|p| outcome(p) == Some(false))
                .filter_map(|p| finished_at(p))
                .max()
                .unwrap_or(0);
            let shift = u32::try_from((recent_failures - 1).min(10)).unwrap_or(10);
            let backoff = (BACKOFF_BASE << shift).min(BACKOFF_MAX);
            if last > 0 && last + backoff > now {
                return Some(last + backoff - now);
            }
        }
        let def = self.registry.resources.get("", "v1", "pods")?;
        let template = self.spec("/spec/template").cloned().unwrap_or(json!({}));
        let running_indexes: BTreeSet<i64> = active.iter().filter_map(|p| index_of(p)).collect();
        let mut free = (0..completions.unwrap_or(0))
            .filter(|i| !done_indexes.contains(i) && !running_indexes.contains(i));
        let mut created = Vec::new();
        for _ in 0..missing {
            let mut template = template.clone();
            let prefix = match indexed {
                true => {
                    let Some(index) = free.next() else { break };
                    index_template(&mut template, name_of(self.job), index);
                    format!("{}-{index}-", name_of(self.job))
                }
                false => format!("{}-", name_of(self.job)),
            };
            let mut pod =
                pod_from_template(&template, self.job, controller, PodName::Generated(&prefix));
            pod["metadata"]["finalizers"] = json!([TRACKING]);
            match self
                .registry
                .create(
                    &def,
                    Some(self.namespace()),
                    pod,
                    &WriteOptions::internal(MANAGER),
                )
                .await
            {
                Ok(written) => {
                    self.event(
                        "Normal",
                        "SuccessfulCreate",
                        &format!("Created pod: {}", name_of(&written.object)),
                    )
                    .await;
                    created.push(key_of(&written.object));
                }
                Err(e) => {
                    self.event(
                        "Warning",
                        "FailedCreate",
                        &format!("Error creating: {}", e.message),
                    )
                    .await;
                    break;
                }
            }
        }
        self.pods
            .wait_until(EXPECTATION_TIMEOUT, |p| {
                created.iter().all(|k| p.get(k).is_some())
            })
            .await;
        None
    }

    async fn delete_pod(&self, pod: &Value) {
        let message = format!("Deleted pod: {}", name_of(pod));
        delete_pod(self.registry, self.pods, self.job, pod, &message, MANAGER).await;
    }

    /// active, ready and terminating from the pods now.
    fn fill_counts(&self, status: &mut Value, pods: &[Arc<Value>]) {
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
            .and_then(Value::as_i64)?;
        let finished_at = self
            .job
            .pointer("/status/conditions")
            .and_then(Value::as_array)?
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

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

fn restart_count(pod: &Value) -> i64 {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c["restartCount"].as_i64())
        .sum()
}

/// When the pod's last container finished.
fn finished_at(pod: &Value) -> Option<i64> {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(|c| {
            c.pointer("/state/terminated/finishedAt")
                .and_then(Value::as_str)
        })
        .filter_map(plinth_core::meta::parse_time)
        .max()
        .or_else(|| {
            plinth_core::meta::meta_str(pod, "deletionTimestamp")
                .and_then(plinth_core::meta::parse_time)
        })
}

/// The first container that failed, and its exit code.
fn exit_of(pod: &Value) -> Option<(String, i64)> {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)?
        .iter()
        .find_map(|c| {
            let code = c
                .pointer("/state/terminated/exitCode")
                .and_then(Value::as_i64)?;
            (code != 0).then(|| (c["name"].as_str().unwrap_or("").to_owned(), code))
        })
}

/// Whether a `podFailurePolicy` rule matches a failed pod (by exit codes or conditions).
fn rule_matches(rule: &Value, pod: &Value) -> bool {
    if let Some(codes) = rule.get("onExitCodes").filter(|c| !c.is_null()) {
        let values: Vec<i64> = codes["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_i64)
            .collect();
        let only = codes["containerName"].as_str();
        let operator = codes["operator"].as_str().unwrap_or("In");
        return pod
            .pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|c| only.is_none_or(|n| c["name"] == n))
            .filter_map(|c| {
                c.pointer("/state/terminated/exitCode")
                    .and_then(Value::as_i64)
            })
            .filter(|code| *code != 0)
            .any(|code| (operator == "In") == values.contains(&code));
    }
    if let Some(patterns) = rule["onPodConditions"].as_array() {
        let conditions = pod.pointer("/status/conditions").and_then(Value::as_array);
        return patterns.iter().any(|pattern| {
            conditions.into_iter().flatten().any(|c| {
                c["type"] == pattern["type"]
                    && c["status"] == pattern["status"].as_str().unwrap_or("True")
            })
        });
    }
    false
}

/// An Indexed Job's pod template for `index`: the index annotation and label, its host
/// name, `JOB_COMPLETION_INDEX` in every container.
fn index_template(template: &mut Value, job: &str, index: i64) {
    let text = index.to_string();
    for field in ["annotations", "labels"] {
        if !template["metadata"][field].is_object() {
            template["metadata"][field] = json!({});
        }
        template["metadata"][field][INDEX] = json!(text);
    }
    template["spec"]["hostname"] = json!(format!("{job}-{index}"));
    let env = json!({
        "name": "JOB_COMPLETION_INDEX",
        "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.annotations['{INDEX}']")}},
    });
    for list in ["containers", "initContainers"] {
        if let Some(containers) = template["spec"][list].as_array_mut() {
            for container in containers {
                let mut vars = container["env"].as_array().cloned().unwrap_or_default();
                vars.retain(|v| v["name"] != "JOB_COMPLETION_INDEX");
                vars.push(env.clone());
                container["env"] = json!(vars);
            }
        }
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
