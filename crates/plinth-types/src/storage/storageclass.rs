//! storage.k8s.io/v1 StorageClass: how claims of a class get volumes. The server starts with
//! `standard`, the default, provisioned by Plinth's volume controller
//! ([`LOCAL_PROVISIONER`]: a directory per volume).

use plinth_core::Cause;
use serde_json::{Value, json};

use plinth_registry::resources::{ResourceDef, age_cell, column};
use plinth_registry::schema::{Schema, array, strings, top};
use plinth_registry::strategy::Strategy;

/// The provisioner Plinth's volume controller serves.
pub const LOCAL_PROVISIONER: &str = "plinth.dev/local";

/// The `storageclasses` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("storage.k8s.io", "v1", "StorageClass", "storageclasses")
        .cluster_scoped()
        .short_names(&["sc"])
        .columns(vec![
            column("Provisioner", "string", "The provisioner of the class", 0, |o, _| o["provisioner"].clone()),
            column("ReclaimPolicy", "string", "What happens to a volume when its claim is deleted", 0, |o, _| o["reclaimPolicy"].clone()),
            column("VolumeBindingMode", "string", "When volumes are bound", 0, |o, _| o["volumeBindingMode"].clone()),
            column("AllowVolumeExpansion", "string", "Whether claims may grow", 0, |o, _| json!(o["allowVolumeExpansion"] == true)),
            column("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0, |o, now| age_cell(o, "metadata.creationTimestamp", now)),
        ])
        .no_age_column()
        .schema(top(vec![
            ("provisioner", Schema::String),
            ("parameters", strings()),
            ("reclaimPolicy", Schema::String),
            ("mountOptions", array(Schema::String)),
            ("allowVolumeExpansion", Schema::Bool),
            ("volumeBindingMode", Schema::String),
            ("allowedTopologies", array(Schema::Any)),
        ]))
        .strategy(StorageClasses)
}

/// The class the server starts with.
pub fn standard() -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "standard", "annotations": {(super::super::core::persistentvolume::DEFAULT_CLASS): "true"}},
        "provisioner": LOCAL_PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"})
}

#[derive(Debug)]
struct StorageClasses;

impl Strategy for StorageClasses {
    fn prepare_create(&self, object: &mut Value) {
        if let Some(o) = object.as_object_mut() {
            o.entry("reclaimPolicy").or_insert_with(|| json!("Delete"));
            o.entry("volumeBindingMode")
                .or_insert_with(|| json!("Immediate"));
        }
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        if object["provisioner"].as_str().is_none_or(str::is_empty) {
            causes.push(Cause::required("provisioner", ""));
        }
        let mode = object["volumeBindingMode"].as_str().unwrap_or("Immediate");
        if !["Immediate", "WaitForFirstConsumer"].contains(&mode) {
            causes.push(Cause::not_supported(
                "volumeBindingMode",
                &json!(mode),
                &["Immediate", "WaitForFirstConsumer"],
            ));
        }
        let policy = object["reclaimPolicy"].as_str().unwrap_or("Delete");
        if !["Delete", "Retain"].contains(&policy) {
            causes.push(Cause::not_supported(
                "reclaimPolicy",
                &json!(policy),
                &["Delete", "Retain"],
            ));
        }
        if let Some(old) = old {
            for field in [
                "provisioner",
                "parameters",
                "reclaimPolicy",
                "volumeBindingMode",
            ] {
                if old.get(field) != object.get(field) {
                    causes.push(Cause::forbidden(
                        field,
                        "updates to provisioner are forbidden.",
                    ));
                }
            }
        }
        causes
    }
}
