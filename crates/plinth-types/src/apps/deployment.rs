//! apps/v1 Deployment: kube's defaults (one replica, a 25 %/25 % rolling update, ten
//! revisions kept, a 600 s progress deadline), validation, `/status`, `/scale` and columns.

use plinth_core::Cause;
use serde_json::{Value, json};

use super::{
    TEMPLATE_LISTS, age_column, conditions, default_template, go_invalid, int_cell, int_or_percent,
    label_selector, nonnegative, ready_column, selector_immutable, set_default, surge_strategy,
    validate_workload, wide_columns, workload,
};
use crate::core::podspec::pod_template_spec;
use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::{Schema, obj, top};
use plinth_registry::strategy::{FieldPath, ListMerge, Strategy};

/// The `deployments` resource.
pub fn resource() -> ResourceDef {
    let mut columns = vec![
        ready_column(),
        column(
            "Up-to-date",
            "integer",
            "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
            0,
            int_cell("/status/updatedReplicas"),
        ),
        column(
            "Available",
            "integer",
            "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
            0,
            int_cell("/status/availableReplicas"),
        ),
        age_column(),
    ];
    columns.extend(wide_columns(true));
    workload("Deployment", "deployments", "deploy", columns, true)
        .schema(schema())
        .strategy(Deployments)
}

fn schema() -> Schema {
    top(vec![
        (
            "spec",
            obj(vec![
                ("replicas", Schema::Int),
                ("selector", label_selector()),
                ("template", pod_template_spec()),
                ("strategy", surge_strategy()),
                ("minReadySeconds", Schema::Int),
                ("revisionHistoryLimit", Schema::Int),
                ("paused", Schema::Bool),
                ("progressDeadlineSeconds", Schema::Int),
            ]),
        ),
        (
            "status",
            obj(vec![
                ("observedGeneration", Schema::Int),
                ("replicas", Schema::Int),
                ("updatedReplicas", Schema::Int),
                ("readyReplicas", Schema::Int),
                ("availableReplicas", Schema::Int),
                ("unavailableReplicas", Schema::Int),
                ("terminatingReplicas", Schema::Int),
                ("conditions", conditions()),
                ("collisionCount", Schema::Int),
            ]),
        ),
    ])
}

#[derive(Debug)]
struct Deployments;

impl Strategy for Deployments {
    fn prepare_create(&self, object: &mut Value) {
        // DeploymentStatus is a struct: kube writes `status: {}` before any controller does.
        crate::zero::fill(object, &json!({"status": {}}));
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            set_default(spec, "replicas", json!(1));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "progressDeadlineSeconds", json!(600));
            let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
            if strategy.is_null() {
                *strategy = json!({});
            }
            if let Some(strategy) = strategy.as_object_mut() {
                set_default(strategy, "type", json!("RollingUpdate"));
                if strategy["type"] == "RollingUpdate" {
                    let rolling = strategy.entry("rollingUpdate").or_insert_with(|| json!({}));
                    if let Some(rolling) = rolling.as_object_mut() {
                        set_default(rolling, "maxUnavailable", json!("25%"));
                        set_default(rolling, "maxSurge", json!("25%"));
                    }
                }
            }
        }
        default_template(object);
    }

    /// kube's Deployment status strategy: the request's status and metadata, the stored
    /// spec and labels.
    fn merge_status(&self, current: &Value, new: &Value) -> Option<Value> {
        let mut merged = new.clone();
        match current.get("spec") {
            Some(spec) => merged["spec"] = spec.clone(),
            None => {
                if let Some(map) = merged.as_object_mut() {
                    map.remove("spec");
                }
            }
        }
        if let Some(meta) = merged.get_mut("metadata").and_then(Value::as_object_mut) {
            match current.pointer("/metadata/labels") {
                Some(labels) => {
                    meta.insert("labels".into(), labels.clone());
                }
                None => {
                    meta.remove("labels");
                }
            }
        }
        if merged.get("status").is_some_and(Value::is_null)
            && let Some(map) = merged.as_object_mut()
        {
            map.remove("status");
        }
        Some(merged)
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        self.prepare_create(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let spec = &object["spec"];
        let mut causes = validate_workload(object, "deployment", true);
        causes.extend(strategy_causes(&spec["strategy"]));
        causes.extend(nonnegative(spec, "revisionHistoryLimit", "spec"));
        causes.extend(nonnegative(spec, "progressDeadlineSeconds", "spec"));
        if let Some(deadline) = spec["progressDeadlineSeconds"].as_i64()
            && deadline <= spec["minReadySeconds"].as_i64().unwrap_or(0)
        {
            causes.push(Cause::invalid(
                "spec.progressDeadlineSeconds",
                &json!(deadline),
                "must be greater than minReadySeconds",
            ));
        }
        causes.extend(selector_immutable(object, old));
        causes
    }

    fn lists(&self) -> &[(FieldPath, ListMerge)] {
        TEMPLATE_LISTS
    }
}

/// `ValidateDeploymentStrategy`.
fn strategy_causes(strategy: &Value) -> Vec<Cause> {
    let path = "spec.strategy";
    match strategy["type"].as_str().unwrap_or("") {
        "Recreate" if !strategy["rollingUpdate"].is_null() => vec![Cause::forbidden(
            format!("{path}.rollingUpdate"),
            "may not be specified when strategy `type` is 'Recreate'",
        )],
        "Recreate" => Vec::new(),
        "RollingUpdate" => {
            let rolling = &strategy["rollingUpdate"];
            let mut causes = int_or_percent(
                &rolling["maxUnavailable"],
                &format!("{path}.rollingUpdate.maxUnavailable"),
                true,
            );
            causes.extend(int_or_percent(
                &rolling["maxSurge"],
                &format!("{path}.rollingUpdate.maxSurge"),
                false,
            ));
            let zero = |v: &Value| super::scaled(v, 100, false) == Some(0);
            if zero(&rolling["maxUnavailable"]) && zero(&rolling["maxSurge"]) {
                causes.push(go_invalid(
                    &format!("{path}.rollingUpdate.maxUnavailable"),
                    &super::int_or_string_go(&rolling["maxUnavailable"]),
                    "may not be 0 when `maxSurge` is 0",
                ));
            }
            causes
        }
        other => vec![Cause::not_supported(
            format!("{path}.type"),
            &json!(other),
            &["Recreate", "RollingUpdate"],
        )],
    }
}
