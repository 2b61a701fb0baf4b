//! batch/v1 Job: kube's defaults (one completion, one at a time, six retries, a selector and
//! pod labels generated from the Job's uid), validation, `/status` and columns.

use plinth_core::Cause;
use plinth_core::selector::LabelSelector;
use serde_json::{Map, Value, json};

use crate::apps::{
    TEMPLATE_LISTS, age_column, go_invalid, label_selector, labels_at, nonnegative, selector_go,
    set_default, wide_columns,
};
use crate::core::podspec::{default_pod_spec, pod_template_spec, validate_pod_spec};
use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::strategy::{FieldPath, ListMerge, Strategy};

/// The label (and selector) naming the Job that made a pod.
pub const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
/// The label with the Job's name.
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";

/// The `jobs` resource.
pub fn resource() -> ResourceDef {
    let mut columns = vec![
        column("Status", "string", "Status of the job.", 0, |o, _| {
            json!(status_cell(o))
        }),
        column(
            "Completions",
            "string",
            "The desired number of successfully finished pods the job should be run with.",
            0,
            |o, _| json!(completions_cell(o)),
        ),
        column(
            "Duration",
            "string",
            "Time required to complete the job.",
            0,
            |o, now| json!(duration_cell(o, now)),
        ),
        age_column(),
    ];
    columns.extend(wide_columns(true));
    let mut def = ResourceDef::new("batch", "v1", "Job", "jobs")
        .categories(&["all"])
        .with_status()
        .selectable(&["status.succeeded"])
        .field_labels(&[
            ("metadata.name", "metadata.name"),
            ("metadata.namespace", "metadata.namespace"),
            ("status.successful", "status.succeeded"),
        ])
        .absent_as(&[("status.succeeded", "0")])
        .columns(columns)
        .no_age_column()
        .schema(top(vec![("spec", job_spec()), ("status", job_status())]))
        .strategy(Jobs);
    def.generation = true;
    def.unsupported_field = |label| format!("field label {label:?} not supported for Job");
    def
}

/// `batchv1.JobSpec`.
pub(crate) fn job_spec() -> Schema {
    obj(vec![
        ("parallelism", Schema::Int),
        ("completions", Schema::Int),
        ("activeDeadlineSeconds", Schema::Int),
        ("podFailurePolicy", Schema::Any),
        ("successPolicy", Schema::Any),
        ("backoffLimit", Schema::Int),
        ("backoffLimitPerIndex", Schema::Int),
        ("maxFailedIndexes", Schema::Int),
        ("selector", label_selector()),
        ("manualSelector", Schema::Bool),
        ("template", pod_template_spec()),
        ("ttlSecondsAfterFinished", Schema::Int),
        ("completionMode", Schema::String),
        ("suspend", Schema::Bool),
        ("podReplacementPolicy", Schema::String),
        ("managedBy", Schema::String),
    ])
}

fn job_status() -> Schema {
    obj(vec![
        (
            "conditions",
            array(obj(vec![
                ("type", Schema::String),
                ("status", Schema::String),
                ("lastProbeTime", Schema::String),
                ("lastTransitionTime", Schema::String),
                ("reason", Schema::String),
                ("message", Schema::String),
            ])),
        ),
        ("startTime", Schema::String),
        ("completionTime", Schema::String),
        ("active", Schema::Int),
        ("succeeded", Schema::Int),
        ("failed", Schema::Int),
        ("terminating", Schema::Int),
        ("completedIndexes", Schema::String),
        ("failedIndexes", Schema::String),
        (
            "uncountedTerminatedPods",
            obj(vec![
                ("succeeded", array(Schema::String)),
                ("failed", array(Schema::String)),
            ]),
        ),
        ("ready", Schema::Int),
    ])
}

fn has_condition(job: &Value, kind: &str) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// kubectl's `STATUS` of a Job.
fn status_cell(job: &Value) -> &'static str {
    if has_condition(job, "Complete") {
        "Complete"
    } else if has_condition(job, "Failed") {
        "Failed"
    } else if job
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        "Terminating"
    } else if has_condition(job, "Suspended") {
        "Suspended"
    } else if has_condition(job, "FailureTarget") {
        "FailureTarget"
    } else if has_condition(job, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    }
}

fn completions_cell(job: &Value) -> String {
    let succeeded = job
        .pointer("/status/succeeded")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    match job.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(n) => format!("{succeeded}/{n}"),
        None => match job.pointer("/spec/parallelism").and_then(Value::as_i64) {
            Some(p) if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    }
}

fn duration_cell(job: &Value, now: i64) -> String {
    let time = |p: &str| {
        job.pointer(p)
            .and_then(Value::as_str)
            .and_then(plinth_core::meta::parse_time)
    };
    match (time("/status/startTime"), time("/status/completionTime")) {
        (Some(start), Some(end)) => plinth_core::meta::human_duration(end - start),
        (Some(start), None) => plinth_core::meta::human_duration(now - start),
        _ => String::new(),
    }
}

/// The defaults of a Job spec (also a CronJob's job template's).
pub(crate) fn default_job_spec(spec: &mut Map<String, Value>) {
    if spec.get("completions").is_none_or(Value::is_null)
        && spec.get("parallelism").is_none_or(Value::is_null)
    {
        spec.insert("completions".into(), json!(1));
    }
    set_default(spec, "parallelism", json!(1));
    let per_index = spec
        .get("backoffLimitPerIndex")
        .is_some_and(|v| !v.is_null());
    set_default(
        spec,
        "backoffLimit",
        json!(if per_index { i64::from(i32::MAX) } else { 6 }),
    );
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    let replacement = if spec.get("podFailurePolicy").is_some_and(|v| !v.is_null()) {
        "Failed"
    } else {
        "TerminatingOrFailed"
    };
    set_default(spec, "podReplacementPolicy", json!(replacement));
    if let Some(pod) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
        // As kube defaults it: a template without a restart policy gets `Always`, which
        // validation then refuses for a Job.
        default_pod_spec(pod);
    }
}

/// `ValidateJobSpec` at `path` (`spec`, `spec.jobTemplate.spec`); `selector_required` for a
/// Job (a CronJob's template gets its selector with each Job).
pub(crate) fn validate_job_spec(spec: &Value, path: &str, selector_required: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    for field in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    ] {
        causes.extend(nonnegative(spec, field, path));
    }
    let template = &spec["template"];
    let selector = &spec["selector"];
    if selector.is_null() {
        if selector_required {
            causes.push(Cause::required(format!("{path}.selector"), ""));
        }
    } else {
        match LabelSelector::from_object(selector) {
            Ok(parsed) if !parsed.is_empty() => {
                if !parsed.matches(&labels_at(template, "/metadata/labels")) {
                    causes.push(go_invalid(
                        &format!("{path}.template.metadata.labels"),
                        &crate::apps::labels_go(&template["metadata"]["labels"]),
                        "`selector` does not match template `labels`",
                    ));
                }
            }
            Ok(_) => {}
            Err(e) => causes.push(go_invalid(
                &format!("{path}.selector"),
                &selector_go(selector),
                &format!("invalid label selector: {e}"),
            )),
        }
    }
    let mode = spec["completionMode"].as_str().unwrap_or("NonIndexed");
    match mode {
        "NonIndexed" => {}
        "Indexed" if spec["completions"].is_null() => causes.push(Cause::required(
            format!("{path}.completions"),
            "when completion mode is Indexed",
        )),
        "Indexed" => {}
        other => causes.push(Cause::not_supported(
            format!("{path}.completionMode"),
            &json!(other),
            &["NonIndexed", "Indexed"],
        )),
    }
    if template.is_null() {
        causes.push(Cause::required(format!("{path}.template"), ""));
        return causes;
    }
    if let Some(map) = template["metadata"]["labels"].as_object() {
        causes.extend(plinth_core::validation::labels(
            map,
            &format!("{path}.template.metadata.labels"),
        ));
    }
    let pod = &template["spec"];
    causes.extend(validate_pod_spec(pod, &format!("{path}.template.spec")));
    let restart_path = format!("{path}.template.spec.restartPolicy");
    match pod["restartPolicy"].as_str().unwrap_or("") {
        "" => causes.push(Cause::required(
            restart_path,
            "valid values: \"OnFailure\", \"Never\"",
        )),
        "OnFailure" if !spec["podFailurePolicy"].is_null() => causes.push(Cause::invalid(
            restart_path,
            &json!("OnFailure"),
            "only \"Never\" is supported when podFailurePolicy is specified",
        )),
        "OnFailure" | "Never" => {}
        other => causes.push(Cause::not_supported(
            restart_path,
            &json!(other),
            &["OnFailure", "Never"],
        )),
    }
    causes
}

#[derive(Debug)]
struct Jobs;

impl Strategy for Jobs {
    /// kube's status strategy: the request's status and metadata, the stored spec.
    fn merge_status(&self, current: &Value, new: &Value) -> Option<Value> {
        Some(plinth_registry::strategy::with_stored_spec(current, new))
    }

    fn prepare_create(&self, object: &mut Value) {
        let uid = plinth_core::meta::meta_str(object, "uid")
            .unwrap_or("")
            .to_owned();
        let name = plinth_core::meta::name(object).unwrap_or("").to_owned();
        let manual = object.pointer("/spec/manualSelector") == Some(&json!(true));
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            default_job_spec(spec);
            if !manual {
                // kube's generateSelector: the pods carry the Job's uid and name, and the
                // selector selects the uid.
                let template = spec.entry("template").or_insert_with(|| json!({}));
                if !template["metadata"]["labels"].is_object() {
                    template["metadata"]["labels"] = json!({});
                }
                if let Some(labels) = template["metadata"]["labels"].as_object_mut() {
                    for (key, value) in [
                        (CONTROLLER_UID, &uid),
                        (JOB_NAME, &name),
                        ("controller-uid", &uid),
                        ("job-name", &name),
                    ] {
                        labels.entry(key).or_insert_with(|| json!(value));
                    }
                }
                let selector = spec.entry("selector").or_insert_with(|| json!({}));
                if !selector["matchLabels"].is_object() {
                    selector["matchLabels"] = json!({});
                }
                if let Some(labels) = selector["matchLabels"].as_object_mut() {
                    labels.entry(CONTROLLER_UID).or_insert_with(|| json!(uid));
                }
            }
        }
        // The Job's own labels default to its pods'.
        let template_labels = object.pointer("/spec/template/metadata/labels").cloned();
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
            && meta
                .get("labels")
                .is_none_or(|l| l.as_object().is_none_or(Map::is_empty))
            && let Some(labels) = template_labels
        {
            meta.insert("labels".into(), labels);
        }
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            default_job_spec(spec);
        }
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let spec = &object["spec"];
        let mut causes = validate_job_spec(spec, "spec", true);
        if let Some(old) = old {
            let before = &old["spec"];
            for field in ["selector", "completionMode"] {
                if spec[field] != before[field] {
                    causes.push(match field {
                        "selector" => go_invalid(
                            "spec.selector",
                            &selector_go(&spec["selector"]),
                            "field is immutable",
                        ),
                        _ => Cause::immutable(format!("spec.{field}"), &spec[field]),
                    });
                }
            }
            // The template may change only while the Job is suspended.
            let suspended = before["suspend"] == true;
            if spec["template"] != before["template"] && !suspended {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    "spec.template",
                    "Invalid value: core.PodTemplateSpec{...}: field is immutable",
                ));
            }
        }
        causes
    }

    fn lists(&self) -> &[(FieldPath, ListMerge)] {
        TEMPLATE_LISTS
    }
}
