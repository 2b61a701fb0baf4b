//! core/v1 PodTemplate: a named `PodTemplateSpec`, defaulted and validated as a pod's.

use plinth_core::Cause;
use serde_json::{Value, json};

use super::podspec::{default_pod_spec, pod_template_spec, validate_pod_spec};
use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::top;
use plinth_registry::strategy::Strategy;

/// The `podtemplates` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("", "v1", "PodTemplate", "podtemplates")
        .columns(vec![
            column(
                "Containers",
                "string",
                "Names of each container in the template.",
                0,
                |o, _| json!(names(o, "name")),
            ),
            column(
                "Images",
                "string",
                "Images referenced by each container in the template.",
                0,
                |o, _| json!(names(o, "image")),
            ),
            column(
                "Pod Labels",
                "string",
                "The labels for the pod template.",
                0,
                |o, _| json!(labels(o)),
            ),
        ])
        .schema(top(vec![("template", pod_template_spec())]))
        .strategy(PodTemplates)
}

fn names(object: &Value, key: &str) -> String {
    container_list(&object["template"], key)
}

fn labels(object: &Value) -> String {
    format_labels(object.pointer("/template/metadata/labels"))
}

/// The `key` (`name`, `image`) of each container of a pod template, comma-separated.
pub(crate) fn container_list(template: &Value, key: &str) -> String {
    template
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c[key].as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// `labels.FormatLabels`: `k=v,…`, `<none>` when there are none.
pub(crate) fn format_labels(labels: Option<&Value>) -> String {
    let shown: Vec<String> = labels
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    if shown.is_empty() {
        "<none>".into()
    } else {
        shown.join(",")
    }
}

#[derive(Debug)]
struct PodTemplates;

impl Strategy for PodTemplates {
    fn prepare_create(&self, object: &mut Value) {
        if let Some(spec) = object.pointer_mut("/template/spec") {
            default_pod_spec(spec);
        }
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        self.prepare_create(object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        validate_pod_spec(
            object.pointer("/template/spec").unwrap_or(&Value::Null),
            "template.spec",
        )
    }
}
