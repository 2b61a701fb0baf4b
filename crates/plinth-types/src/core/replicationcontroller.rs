//! core/v1 ReplicationController: the ReplicaSet's predecessor, whose selector is a plain map
//! of labels. Defaults, validation, columns, `/status` and `/scale` as kube's; the
//! ReplicationManager (in `plinth-controllers`, sharing the ReplicaSet controller's pass)
//! keeps its pods.

use plinth_core::Cause;
use plinth_core::selector::LabelSelector;
use serde_json::{Value, json};

use crate::apps::{
    TEMPLATE_LISTS, age_column, conditions, default_template, int_cell, labels_at, nonnegative,
    set_default, validate_template, wide_columns,
};
use crate::core::podspec::pod_template_spec;
use plinth_registry::resources::{ResourceDef, Scale, ScaleSelector, column};
use plinth_registry::schema::{Schema, obj, strings, top};
use plinth_registry::strategy::{FieldPath, ListMerge, Strategy};

/// The `replicationcontrollers` resource.
pub fn resource() -> ResourceDef {
    let mut columns = vec![
        column(
            "Desired",
            "integer",
            "Replicas is the number of desired replicas. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller",
            0,
            int_cell("/spec/replicas"),
        ),
        column(
            "Current",
            "integer",
            "Replicas is the most recently observed number of replicas. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller",
            0,
            int_cell("/status/replicas"),
        ),
        column(
            "Ready",
            "integer",
            "The number of ready replicas for this replication controller.",
            0,
            int_cell("/status/readyReplicas"),
        ),
        age_column(),
    ];
    columns.extend(wide_columns(false));
    columns.push(column(
        "Selector",
        "string",
        "Selector is a label query over pods that should match the Replicas count. If Selector is empty, it is defaulted to the labels present on the Pod template. Label keys and values that must match in order to be controlled by this replication controller, if empty defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors",
        1,
        |o, _| json!(selector_text(&o["spec"]["selector"])),
    ));
    let fields = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let mut def = ResourceDef::new("", "v1", "ReplicationController", "replicationcontrollers")
        .short_names(&["rc"])
        .categories(&["all"])
        .with_status()
        .selectable(&["status.replicas"])
        .absent_as(&[("status.replicas", "0")])
        .columns(columns)
        .no_age_column()
        .schema(top(vec![
            (
                "spec",
                obj(vec![
                    ("replicas", Schema::Int),
                    ("minReadySeconds", Schema::Int),
                    ("selector", strings()),
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
                    ("observedGeneration", Schema::Int),
                    ("conditions", conditions()),
                ]),
            ),
        ]))
        .strategy(ReplicationControllers);
    def.generation = true;
    def.scale = Some(Scale {
        spec_replicas: fields(&["spec", "replicas"]),
        status_replicas: fields(&["status", "replicas"]),
        label_selector: Some(ScaleSelector::Map(fields(&["spec", "selector"]))),
    });
    def
}

/// A map selector in the label selector syntax (`a=b,c=d`), `<none>` when empty.
fn selector_text(selector: &Value) -> String {
    let labels = selector.as_object().filter(|m| !m.is_empty());
    match labels.and_then(|m| LabelSelector::from_object(&json!({"matchLabels": m})).ok()) {
        Some(s) => s.to_string(),
        None => "<none>".into(),
    }
}

#[derive(Debug)]
struct ReplicationControllers;

impl Strategy for ReplicationControllers {
    /// kube's status strategy: the request's status and metadata, the stored spec.
    fn merge_status(&self, current: &Value, new: &Value) -> Option<Value> {
        Some(plinth_registry::strategy::with_stored_spec(current, new))
    }

    fn prepare_create(&self, object: &mut Value) {
        default_template(object);
        let template_labels = object
            .pointer("/spec/template/metadata/labels")
            .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
            .cloned();
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            set_default(spec, "replicas", json!(1));
            let empty = spec
                .get("selector")
                .and_then(Value::as_object)
                .is_none_or(|m| m.is_empty());
            if empty && let Some(labels) = &template_labels {
                spec.insert("selector".into(), labels.clone());
            }
        }
        if let (Some(labels), Some(meta)) = (
            template_labels,
            object.get_mut("metadata").and_then(Value::as_object_mut),
        ) {
            let empty = meta
                .get("labels")
                .and_then(Value::as_object)
                .is_none_or(|m| m.is_empty());
            if empty {
                meta.insert("labels".into(), labels);
            }
        }
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        self.prepare_create(object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let spec = &object["spec"];
        let mut causes = nonnegative(spec, "replicas", "spec");
        causes.extend(nonnegative(spec, "minReadySeconds", "spec"));
        let selector = spec["selector"].as_object().filter(|m| !m.is_empty());
        match selector {
            None => causes.push(Cause::required("spec.selector", "")),
            Some(map) => causes.extend(plinth_core::validation::labels(map, "spec.selector")),
        }
        // The map selects by equality, valid or not (kube's `SelectorFromSet`).
        let template = &spec["template"];
        let have = labels_at(template, "/metadata/labels");
        let selected = selector.is_none_or(|map| {
            map.iter()
                .all(|(k, v)| have.get(k).map(String::as_str) == v.as_str())
        });
        causes.extend(validate_template(
            template,
            selected,
            "ReplicationController",
        ));
        causes
    }

    fn lists(&self) -> &[(FieldPath, ListMerge)] {
        TEMPLATE_LISTS
    }
}
