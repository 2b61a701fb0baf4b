//! core/v1 Namespace: names are DNS labels; `spec.finalizers` defaults to `kubernetes` and
//! holds a deleted namespace (phase `Terminating`) until the namespace controller has emptied
//! it. Every namespace carries the label `kubernetes.io/metadata.name` with its name (kube's
//! defaulting, kept in step on every write), so selectors can pick namespaces by name.

use serde_json::{Value, json};

use plinth_registry::resources::{NameRule, ResourceDef, column, path_cell};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::strategy::Strategy;

/// The `namespaces` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("", "v1", "Namespace", "namespaces")
        .cluster_scoped()
        .short_names(&["ns"])
        .name_rule(NameRule::Label)
        .with_status()
        .field_subresource("finalize", "/spec/finalizers", &["update"])
        .selectable(&["status.phase"])
        .field_labels(&[
            ("status.phase", "status.phase"),
            ("metadata.name", "metadata.name"),
        ])
        .columns(vec![column(
            "Status",
            "string",
            "The phase of the namespace",
            0,
            path_cell("status.phase"),
        )])
        .schema(schema())
        .strategy(Namespaces)
}

/// The shape of a Namespace.
pub fn schema() -> Schema {
    let condition = obj(vec![
        ("type", Schema::String),
        ("status", Schema::String),
        ("lastTransitionTime", Schema::String),
        ("reason", Schema::String),
        ("message", Schema::String),
    ]);
    top(vec![
        ("spec", obj(vec![("finalizers", array(Schema::String))])),
        (
            "status",
            obj(vec![
                ("phase", Schema::String),
                ("conditions", array(condition)),
            ]),
        ),
    ])
}

#[derive(Debug)]
struct Namespaces;

/// The label naming a namespace (`v1.LabelMetadataName`).
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Sets the name label to the name, as kube's defaulting and `Canonicalize` do.
fn label_name(object: &mut Value) {
    let Some(name) = plinth_core::meta::name(object).map(str::to_owned) else {
        return;
    };
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    labels[NAME_LABEL] = json!(name);
}

impl Strategy for Namespaces {
    fn prepare_create(&self, object: &mut Value) {
        label_name(object);
        let spec = object
            .as_object_mut()
            .map(|o| o.entry("spec").or_insert_with(|| json!({})));
        if let Some(spec) = spec.and_then(Value::as_object_mut)
            && !spec.contains_key("finalizers")
        {
            spec.insert("finalizers".into(), json!(["kubernetes"]));
        }
        object["status"] = json!({"phase": "Active"});
    }

    /// kube's namespace status strategy: the request's metadata and status, the stored spec.
    fn merge_status(&self, current: &Value, new: &Value) -> Option<Value> {
        let mut merged = new.clone();
        merged["spec"] = current.get("spec").cloned().unwrap_or_else(|| json!({}));
        label_name(&mut merged);
        Some(merged)
    }

    fn prepare_update(&self, object: &mut Value, old: &Value) {
        label_name(object);
        if object.get("status").is_none() {
            object["status"] = old
                .get("status")
                .cloned()
                .unwrap_or(json!({"phase": "Active"}));
        }
    }

    fn deletion_pending(&self, object: &Value) -> bool {
        object
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty())
    }

    fn mark_deleting(&self, object: &mut Value) {
        object["status"]["phase"] = json!("Terminating");
    }
}
