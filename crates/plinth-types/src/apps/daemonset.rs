//! apps/v1 DaemonSet: kube's defaults (a rolling update of one pod at a time), validation,
//! `/status` and columns.

use plinth_core::Cause;
use serde_json::{Value, json};

use super::{
    TEMPLATE_LISTS, age_column, conditions, default_template, go_invalid, int_cell, int_or_percent,
    int_or_string_go, label_selector, nonnegative, scaled, selector_immutable, set_default,
    surge_strategy, validate_workload, wide_columns, workload,
};
use crate::core::podspec::pod_template_spec;
use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::{Schema, obj, top};
use plinth_registry::strategy::{FieldPath, ListMerge, Strategy};

/// The `daemonsets` resource.
pub fn resource() -> ResourceDef {
    let mut columns = vec![
        column(
            "Desired",
            "integer",
            "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).",
            0,
            int_cell("/status/desiredNumberScheduled"),
        ),
        column(
            "Current",
            "integer",
            "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
            0,
            int_cell("/status/currentNumberScheduled"),
        ),
        column(
            "Ready",
            "integer",
            "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
            0,
            int_cell("/status/numberReady"),
        ),
        column(
            "Up-to-date",
            "integer",
            "The total number of nodes that are running updated daemon pod",
            0,
            int_cell("/status/updatedNumberScheduled"),
        ),
        column(
            "Available",
            "integer",
            "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
            0,
            int_cell("/status/numberAvailable"),
        ),
        column(
            "Node Selector",
            "string",
            "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node.",
            0,
            |o, _| json!(node_selector(o)),
        ),
        age_column(),
    ];
    columns.extend(wide_columns(true));
    workload("DaemonSet", "daemonsets", "ds", columns, false)
        .schema(top(vec![
            (
                "spec",
                obj(vec![
                    ("selector", label_selector()),
                    ("template", pod_template_spec()),
                    ("updateStrategy", surge_strategy()),
                    ("minReadySeconds", Schema::Int),
                    ("revisionHistoryLimit", Schema::Int),
                ]),
            ),
            (
                "status",
                obj(vec![
                    ("currentNumberScheduled", Schema::Int),
                    ("numberMisscheduled", Schema::Int),
                    ("desiredNumberScheduled", Schema::Int),
                    ("numberReady", Schema::Int),
                    ("observedGeneration", Schema::Int),
                    ("updatedNumberScheduled", Schema::Int),
                    ("numberAvailable", Schema::Int),
                    ("numberUnavailable", Schema::Int),
                    ("collisionCount", Schema::Int),
                    ("conditions", conditions()),
                ]),
            ),
        ]))
        .strategy(DaemonSets)
}

/// `labels.FormatLabels` of the template's node selector.
fn node_selector(object: &Value) -> String {
    crate::core::podtemplate::format_labels(object.pointer("/spec/template/spec/nodeSelector"))
}

#[derive(Debug)]
struct DaemonSets;

impl Strategy for DaemonSets {
    fn prepare_create(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "updateStrategy", json!({}));
            if let Some(strategy) = spec["updateStrategy"].as_object_mut() {
                set_default(strategy, "type", json!("RollingUpdate"));
                if strategy["type"] == "RollingUpdate" {
                    set_default(strategy, "rollingUpdate", json!({}));
                    if let Some(rolling) = strategy["rollingUpdate"].as_object_mut() {
                        set_default(rolling, "maxUnavailable", json!(1));
                        set_default(rolling, "maxSurge", json!(0));
                    }
                }
            }
        }
        default_template(object);
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        self.prepare_create(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let spec = &object["spec"];
        let mut causes = validate_workload(object, "daemonset", false);
        causes.extend(nonnegative(spec, "revisionHistoryLimit", "spec"));
        let strategy = &spec["updateStrategy"];
        match strategy["type"].as_str().unwrap_or("RollingUpdate") {
            "RollingUpdate" => {
                let rolling = &strategy["rollingUpdate"];
                let path = "spec.updateStrategy.rollingUpdate";
                causes.extend(int_or_percent(
                    &rolling["maxUnavailable"],
                    &format!("{path}.maxUnavailable"),
                    true,
                ));
                causes.extend(int_or_percent(
                    &rolling["maxSurge"],
                    &format!("{path}.maxSurge"),
                    true,
                ));
                let zero = |v: &Value| scaled(v, 100, false) == Some(0);
                if zero(&rolling["maxUnavailable"]) && zero(&rolling["maxSurge"]) {
                    causes.push(go_invalid(
                        &format!("{path}.maxUnavailable"),
                        &int_or_string_go(&rolling["maxUnavailable"]),
                        "may not be 0 when `maxSurge` is 0",
                    ));
                }
            }
            "OnDelete" => {}
            other => causes.push(Cause::not_supported(
                "spec.updateStrategy.type",
                &json!(other),
                &["OnDelete", "RollingUpdate"],
            )),
        }
        causes.extend(selector_immutable(object, old));
        causes
    }

    fn lists(&self) -> &[(FieldPath, ListMerge)] {
        TEMPLATE_LISTS
    }
}
