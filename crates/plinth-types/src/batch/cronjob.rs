//! batch/v1 CronJob: a schedule (five cron fields or a descriptor, in `timeZone`), a job
//! template, kube's defaults (Allow, three successful and one failed Job kept), validation,
//! `/status` and columns.

use plinth_core::Cause;
use serde_json::{Value, json};

use super::job::{default_job_spec, job_spec, validate_job_spec};
use crate::apps::{age_column, nonnegative, set_default};
use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::{Schema, array, obj, object_meta, object_reference, top};
use plinth_registry::strategy::Strategy;

/// The longest CronJob name (its Jobs add an 11-character suffix).
const MAX_NAME: usize = 52;

/// The `cronjobs` resource.
pub fn resource() -> ResourceDef {
    let mut columns = vec![
        column(
            "Schedule",
            "string",
            "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.",
            0,
            |o, _| {
                json!(
                    o.pointer("/spec/schedule")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                )
            },
        ),
        column(
            "Timezone",
            "string",
            "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
            0,
            |o, _| {
                json!(
                    o.pointer("/spec/timeZone")
                        .and_then(Value::as_str)
                        .unwrap_or("<none>")
                )
            },
        ),
        column(
            "Suspend",
            "boolean",
            "This flag tells the controller to suspend subsequent executions.",
            0,
            |o, _| {
                json!(if o.pointer("/spec/suspend") == Some(&json!(true)) {
                    "True"
                } else {
                    "False"
                })
            },
        ),
        column(
            "Active",
            "integer",
            "A list of pointers to currently running jobs.",
            0,
            |o, _| {
                json!(
                    o.pointer("/status/active")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len)
                )
            },
        ),
        column(
            "Last Schedule",
            "date",
            "Information when was the last time the job was successfully scheduled.",
            0,
            |o, now| match o
                .pointer("/status/lastScheduleTime")
                .and_then(Value::as_str)
                .and_then(plinth_core::meta::parse_time)
            {
                Some(t) => json!(plinth_core::meta::human_duration(now - t)),
                None => json!("<none>"),
            },
        ),
        age_column(),
    ];
    columns.push(column(
        "Containers",
        "string",
        "Names of each container in the template.",
        1,
        |o, _| {
            json!(crate::core::podtemplate::container_list(
                &o["spec"]["jobTemplate"]["spec"]["template"],
                "name"
            ))
        },
    ));
    columns.push(column(
        "Images",
        "string",
        "Images referenced by each container in the template.",
        1,
        |o, _| {
            json!(crate::core::podtemplate::container_list(
                &o["spec"]["jobTemplate"]["spec"]["template"],
                "image"
            ))
        },
    ));
    columns.push(column(
        "Selector",
        "string",
        "Selector is a label query over pods that should match the pod count.",
        1,
        |o, _| {
            json!(crate::apps::selector_cell(
                &o["spec"]["jobTemplate"]["spec"]["selector"]
            ))
        },
    ));
    let mut def = ResourceDef::new("batch", "v1", "CronJob", "cronjobs")
        .short_names(&["cj"])
        .categories(&["all"])
        .with_status()
        .columns(columns)
        .no_age_column()
        .schema(top(vec![
            (
                "spec",
                obj(vec![
                    ("schedule", Schema::String),
                    ("timeZone", Schema::String),
                    ("startingDeadlineSeconds", Schema::Int),
                    ("concurrencyPolicy", Schema::String),
                    ("suspend", Schema::Bool),
                    (
                        "jobTemplate",
                        obj(vec![("metadata", object_meta()), ("spec", job_spec())]),
                    ),
                    ("successfulJobsHistoryLimit", Schema::Int),
                    ("failedJobsHistoryLimit", Schema::Int),
                ]),
            ),
            (
                "status",
                obj(vec![
                    ("active", array(object_reference())),
                    ("lastScheduleTime", Schema::String),
                    ("lastSuccessfulTime", Schema::String),
                ]),
            ),
        ]))
        .strategy(CronJobs);
    def.generation = true;
    def
}

#[derive(Debug)]
struct CronJobs;

impl Strategy for CronJobs {
    /// kube's status strategy: the request's status and metadata, the stored spec.
    fn merge_status(&self, current: &Value, new: &Value) -> Option<Value> {
        Some(plinth_registry::strategy::with_stored_spec(current, new))
    }

    fn prepare_create(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            set_default(spec, "concurrencyPolicy", json!("Allow"));
            set_default(spec, "suspend", json!(false));
            set_default(spec, "successfulJobsHistoryLimit", json!(3));
            set_default(spec, "failedJobsHistoryLimit", json!(1));
            if let Some(job) = spec
                .get_mut("jobTemplate")
                .and_then(|t| t.get_mut("spec"))
                .and_then(Value::as_object_mut)
            {
                default_job_spec(job);
            }
        }
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        self.prepare_create(object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let spec = &object["spec"];
        let mut causes = Vec::new();
        let name = plinth_core::meta::name(object).unwrap_or("");
        if name.len() > MAX_NAME {
            causes.push(Cause::invalid(
                "metadata.name",
                &json!(name),
                &format!("must be no more than {MAX_NAME} characters"),
            ));
        }
        match spec["schedule"].as_str().unwrap_or("") {
            "" => causes.push(Cause::required("spec.schedule", "")),
            schedule if schedule.contains("TZ") => causes.push(Cause::invalid(
                "spec.schedule",
                &json!(schedule),
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            )),
            schedule => {
                if let Err(e) = plinth_core::cron::Schedule::parse(schedule) {
                    causes.push(Cause::invalid("spec.schedule", &json!(schedule), &e.0));
                }
            }
        }
        if let Some(zone) = spec["timeZone"].as_str()
            && let Err(e) = plinth_core::cron::zone(zone)
        {
            causes.push(Cause::invalid("spec.timeZone", &json!(zone), &e.0));
        }
        let policy = spec["concurrencyPolicy"].as_str().unwrap_or("Allow");
        if !["Allow", "Forbid", "Replace"].contains(&policy) {
            causes.push(Cause::not_supported(
                "spec.concurrencyPolicy",
                &json!(policy),
                &["Allow", "Forbid", "Replace"],
            ));
        }
        for field in [
            "startingDeadlineSeconds",
            "successfulJobsHistoryLimit",
            "failedJobsHistoryLimit",
        ] {
            causes.extend(nonnegative(spec, field, "spec"));
        }
        causes.extend(validate_job_spec(
            &spec["jobTemplate"]["spec"],
            "spec.jobTemplate.spec",
            false,
        ));
        causes
    }
}
