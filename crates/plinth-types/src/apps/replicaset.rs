//! apps/v1 ReplicaSet: one replica by default, kube's validation, `/status`, `/scale` and
//! columns.

use plinth_core::Cause;
use serde_json::{Value, json};

use super::{
    TEMPLATE_LISTS, age_column, conditions, default_template, int_cell, label_selector,
    selector_immutable, set_default, validate_workload, wide_columns, workload,
};
use crate::core::podspec::pod_template_spec;
use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::{Schema, obj, top};
use plinth_registry::strategy::{FieldPath, ListMerge, Strategy};

/// The `replicasets` resource.
pub fn resource() -> ResourceDef {
    let mut columns = vec![
        column(
            "Desired",
            "integer",
            "Number of desired pods.",
            0,
            int_cell("/spec/replicas"),
        ),
        column(
            "Current",
            "integer",
            "Number of actual replicas.",
            0,
            int_cell("/status/replicas"),
        ),
        column(
            "Ready",
            "integer",
            "Number of ready replicas.",
            0,
            int_cell("/status/readyReplicas"),
        ),
        age_column(),
    ];
    columns.extend(wide_columns(true));
    workload("ReplicaSet", "replicasets", "rs", columns, true)
        .schema(top(vec![
            (
                "spec",
                obj(vec![
                    ("replicas", Schema::Int),
                    ("minReadySeconds", Schema::Int),
                    ("selector", label_selector()),
                    ("template", pod_template_spec()),
                ]),
            ),
            (
                "status",
                obj(vec![
                    ("replicas", Schema::Int),
                    ("fullyLabeledReplicas", Schema::Int),
                    ("readyReplicas", Schema::Int),
                    ("availableReplicas", Schema::Int),
                    ("terminatingReplicas", Schema::Int),
                    ("observedGeneration", Schema::Int),
                    ("conditions", conditions()),
                ]),
            ),
        ]))
        .strategy(ReplicaSets)
}

#[derive(Debug)]
struct ReplicaSets;

impl Strategy for ReplicaSets {
    fn prepare_create(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            set_default(spec, "replicas", json!(1));
        }
        default_template(object);
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        self.prepare_create(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        // kube's ReplicaSet validation says "empty selector is invalid for deployment" too.
        let mut causes = validate_workload(object, "deployment", true);
        causes.extend(selector_immutable(object, old));
        causes
    }

    fn lists(&self) -> &[(FieldPath, ListMerge)] {
        TEMPLATE_LISTS
    }
}
