//! The CronJob controller (kube-controller-manager's `cronjob`, v2): at each scheduled time
//! (in `timeZone`) a Job from `jobTemplate`, named `<cronjob>-<minutes since the epoch>` so a
//! time is never run twice; `concurrencyPolicy` Allow, Forbid (skip while one runs) or
//! Replace (delete the running one first); `suspend`; `startingDeadlineSeconds` (a time
//! missed by more is skipped); the finished Jobs beyond `successfulJobsHistoryLimit` and
//! `failedJobsHistoryLimit` deleted; `status.active`, `lastScheduleTime` and
//! `lastSuccessfulTime` kept.

use plinth_core::At as _;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use plinth_core::cron::Schedule;
use plinth_core::{Frozen, Tree};
use plinth_registry::{Client, DeleteOptions, Propagation, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::informer::{Failed, Informer, Queue, SharedInformers, enqueue, key_of, run_workers};
use crate::workload::{
    controller_of, controller_ref, deleting, enqueue_owner, seen, uid, write_status,
};

const MANAGER: &str = "cronjob-controller";
const SCHEDULED: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// At most this many missed times are looked at (kube's limit before it gives up).
const MISSED_LIMIT: usize = 100;

/// Starts the controller; it ends when `stopping` becomes true.
pub fn spawn_cronjob_controller(
    registry: Client,
    informers: &SharedInformers,
    stopping: watch::Receiver<bool>,
) {
    let queue = Queue::default();
    let cronjobs = informers.start(("batch", "cronjobs"), enqueue(&queue));
    let jobs = informers.start(("batch", "jobs"), enqueue_owner(&queue, "CronJob", None));
    tokio::spawn(async move {
        let (registry, all_cronjobs, owned_jobs) = (&registry, &cronjobs, &jobs);
        run_workers(
            queue,
            stopping,
            &[&cronjobs, &jobs],
            &cronjobs,
            move |cronjob| async move {
                let pass = Pass {
                    registry,
                    cronjobs: all_cronjobs,
                    jobs: owned_jobs,
                    cronjob: &cronjob,
                    failed: Failed::default(),
                };
                let wait = pass.sync().await;
                pass.failed.next(wait)
            },
        )
        .await;
    });
}

struct Pass<'a> {
    registry: &'a Client,
    cronjobs: &'a Informer,
    jobs: &'a Informer,
    cronjob: &'a Frozen,
    /// Whether a write of this pass failed (the key is retried after its backoff).
    failed: Failed,
}

fn name_of(object: &(impl Tree + ?Sized)) -> &str {
    plinth_core::meta::name(object).unwrap_or("")
}

fn finished(job: &Frozen) -> Option<(bool, i64)> {
    job.at("/status/conditions")
        .and_then(Frozen::as_array)?
        .iter()
        .find(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
        .map(|c| {
            (
                c["type"] == "Complete",
                c["lastTransitionTime"]
                    .as_str()
                    .and_then(plinth_core::meta::parse_time)
                    .unwrap_or(0),
            )
        })
}

fn time_of(text: Option<&str>) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

impl Pass<'_> {
    fn namespace(&self) -> &str {
        plinth_core::meta::namespace(self.cronjob).unwrap_or("default")
    }

    fn spec(&self, pointer: &str) -> Option<&Frozen> {
        self.cronjob.at(pointer)
    }

    async fn sync(&self) -> Option<Duration> {
        let owner = uid(self.cronjob);
        let mut jobs: Vec<Arc<Frozen>> = self
            .jobs
            .in_namespace(self.namespace())
            .into_iter()
            .filter(|j| controller_of(j).is_some_and(|c| c["uid"] == owner))
            .collect();
        jobs.sort_by_key(|j| {
            plinth_core::meta::meta_str(j, "creationTimestamp").map(str::to_owned)
        });
        let mut status = self
            .cronjob
            .get("status")
            .map_or_else(|| json!({}), Frozen::to_value);
        // The Jobs listed as active last time that have finished since.
        for listed in status["active"].as_array().cloned().unwrap_or_default() {
            if let Some(job) = jobs.iter().find(|j| uid(j) == listed["uid"])
                && let Some((ok, _)) = finished(job)
            {
                let condition = if ok { "Complete" } else { "Failed" };
                self.event(
                    "Normal",
                    "SawCompletedJob",
                    &format!(
                        "Saw completed job: {}, condition: {condition}",
                        name_of(job)
                    ),
                )
                .await;
            }
        }
        let active: Vec<&Arc<Frozen>> = jobs
            .iter()
            .filter(|j| finished(j).is_none() && !deleting(j))
            .collect();
        status["active"] = json!(active.iter().map(reference).collect::<Vec<_>>());
        if active.is_empty()
            && let Some(map) = status.as_object_mut()
        {
            map.remove("active");
        }
        if let Some(last) = jobs
            .iter()
            .filter_map(|j| finished(j).filter(|(ok, _)| *ok).map(|(_, at)| at))
            .max()
        {
            status["lastSuccessfulTime"] = json!(plinth_core::meta::format_time(last));
        }
        self.cleanup(&jobs).await;
        if deleting(self.cronjob) {
            self.write(status).await;
            return None;
        }
        let schedule = Schedule::parse(
            self.spec("/spec/schedule")
                .and_then(Frozen::as_str)
                .unwrap_or(""),
        )
        .ok()?;
        let zone = match self.spec("/spec/timeZone").and_then(Frozen::as_str) {
            Some(name) => plinth_core::cron::zone(name).ok()?,
            None => chrono_tz::UTC,
        };
        let now = Utc::now();
        let since = time_of(status["lastScheduleTime"].as_str())
            .or_else(|| {
                time_of(plinth_core::meta::meta_str(
                    self.cronjob,
                    "creationTimestamp",
                ))
            })
            .unwrap_or(now);
        // The latest scheduled time since the last one run, and the next one.
        let mut due = None;
        let mut cursor = since;
        let mut missed = 0;
        while let Some(t) = schedule.next_after(cursor, &zone) {
            if t > now {
                break;
            }
            due = Some(t);
            cursor = t;
            missed += 1;
            if missed > MISSED_LIMIT {
                break;
            }
        }
        let next = schedule.next_after(now, &zone);
        let suspended = self.spec("/spec/suspend").is_some_and(|s| *s == true);
        if let Some(at) = due
            && !suspended
        {
            let deadline = self
                .spec("/spec/startingDeadlineSeconds")
                .and_then(Frozen::as_i64);
            let too_late = deadline.is_some_and(|d| (now - at).num_seconds() > d);
            if too_late {
                self.event(
                    "Warning",
                    "MissSchedule",
                    &format!(
                        "Missed scheduled time to start a job: {}",
                        at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    ),
                )
                .await;
                status["lastScheduleTime"] = json!(plinth_core::meta::format_time(at.timestamp()));
            } else {
                match self
                    .spec("/spec/concurrencyPolicy")
                    .and_then(Frozen::as_str)
                    .unwrap_or("Allow")
                {
                    "Forbid" if !active.is_empty() => {
                        // Looked at again when the running one finishes.
                        self.event(
                            "Normal",
                            "JobAlreadyActive",
                            "Not starting job because prior execution is running and concurrency policy is Forbid",
                        )
                        .await;
                        self.write(status).await;
                        return next.map(|n| wait_until(now, n));
                    }
                    "Replace" => {
                        for job in &active {
                            self.delete_job(job).await;
                        }
                    }
                    _ => {}
                }
                if let Some(job) = self.create_job(at, &zone).await {
                    let mut active_refs = status["active"].as_array().cloned().unwrap_or_default();
                    active_refs.push(reference(&job));
                    status["active"] = json!(active_refs);
                }
                status["lastScheduleTime"] = json!(plinth_core::meta::format_time(at.timestamp()));
            }
        }
        self.write(status).await;
        next.map(|n| wait_until(now, n))
    }

    /// The Job of the time `at`; `None` if it could not be made (or exists already).
    async fn create_job<Z: TimeZone>(&self, at: DateTime<Utc>, zone: &Z) -> Option<Value> {
        let def = self.registry.resources.get("batch", "v1", "jobs")?;
        let name = format!("{}-{}", name_of(self.cronjob), at.timestamp() / 60);
        let template = self
            .spec("/spec/jobTemplate")
            .map_or(json!({}), Frozen::to_value);
        let mut metadata = json!({
            "name": name,
            "namespace": self.namespace(),
            "labels": template.at("/metadata/labels").cloned().unwrap_or(json!({})),
            "annotations": template.at("/metadata/annotations").cloned().unwrap_or(json!({})),
            "ownerReferences": [controller_ref(self.cronjob, "batch/v1", "CronJob")],
        });
        let local = at.with_timezone(zone).fixed_offset();
        metadata["annotations"][SCHEDULED] =
            json!(local.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        let job = json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata,
            "spec": template.get("spec").cloned().unwrap_or(json!({})),
        });
        match self
            .registry
            .create(
                &def,
                Some(self.namespace()),
                job,
                &WriteOptions::internal(MANAGER),
            )
            .await
        {
            Ok(written) => {
                self.event("Normal", "SuccessfulCreate", &format!("Created job {name}"))
                    .await;
                let key = key_of(&written.object);
                self.jobs
                    .wait_until(crate::workload::EXPECTATION_TIMEOUT, |j| {
                        j.get(&key).is_some()
                    })
                    .await;
                Some(written.object)
            }
            Err(e) if e.reason == plinth_core::StatusReason::AlreadyExists => None,
            Err(e) => {
                self.failed.mark();
                self.event(
                    "Warning",
                    "FailedCreate",
                    &format!("Error creating job: {}", e.message),
                )
                .await;
                None
            }
        }
    }

    async fn delete_job(&self, job: &Frozen) {
        let Some(def) = self.registry.resources.get("batch", "v1", "jobs") else {
            return;
        };
        let options = DeleteOptions {
            propagation: Some(Propagation::Background),
            ..DeleteOptions::default()
        };
        if self
            .registry
            .delete(&def, Some(self.namespace()), name_of(job), &options)
            .await
            .is_ok()
        {
            self.event(
                "Normal",
                "SuccessfulDelete",
                &format!("Deleted job {}", name_of(job)),
            )
            .await;
        }
    }

    /// Deletes the oldest finished Jobs beyond the history limits.
    async fn cleanup(&self, jobs: &[Arc<Frozen>]) {
        let limit = |field: &str, default: i64| {
            self.spec(&format!("/spec/{field}"))
                .and_then(Frozen::as_i64)
                .unwrap_or(default)
        };
        for (succeeded, keep) in [
            (true, limit("successfulJobsHistoryLimit", 3)),
            (false, limit("failedJobsHistoryLimit", 1)),
        ] {
            let mut done: Vec<(&Arc<Frozen>, i64)> = jobs
                .iter()
                .filter(|j| !deleting(j))
                .filter_map(|j| {
                    finished(j)
                        .filter(|(ok, _)| *ok == succeeded)
                        .map(|(_, at)| (j, at))
                })
                .collect();
            done.sort_by_key(|(_, at)| *at);
            let excess = done
                .len()
                .saturating_sub(usize::try_from(keep).unwrap_or(0));
            for (job, _) in done.into_iter().take(excess) {
                self.delete_job(job).await;
            }
        }
    }

    async fn event(&self, kind: &str, reason: &str, message: &str) {
        crate::events::record(self.registry, self.cronjob, kind, reason, message, MANAGER).await;
    }

    async fn write(&self, status: Value) {
        let revision = write_status(
            self.registry,
            ("batch", "cronjobs"),
            self.cronjob,
            status,
            MANAGER,
        )
        .await;
        seen(self.cronjobs, self.cronjob, revision).await;
    }
}

/// An `ObjectReference` to a Job, as `status.active` lists them.
fn reference(job: &(impl Tree + ?Sized)) -> Value {
    json!({
        "kind": "Job",
        "namespace": plinth_core::meta::namespace(job),
        "name": name_of(job),
        "uid": uid(job),
        "apiVersion": "batch/v1",
        "resourceVersion": plinth_core::meta::meta_str(job, "resourceVersion"),
    })
}

/// How long from `now` until `then` (at least a second; a little after, so the time has
/// come when the queue delivers it).
fn wait_until(now: DateTime<Utc>, then: DateTime<Utc>) -> Duration {
    let millis = (then - now).num_milliseconds().max(0);
    Duration::from_millis(u64::try_from(millis).unwrap_or(0) + 200).max(Duration::from_secs(1))
}
