//! core/v1 PersistentVolume and PersistentVolumeClaim: kube's shapes, defaults, validation
//! and columns; binding and provisioning are the volume controller's
//! (`plinth-controllers::volumes`). A claim with no class gets the default StorageClass when
//! created, as kube's DefaultStorageClass admission plugin gives it.

use futures::future::BoxFuture;
use plinth_core::{ApiError, Cause};
use serde_json::{Value, json};

use plinth_registry::ListOptions;
use plinth_registry::resources::{ResourceDef, age_cell, column};
use plinth_registry::schema::{Schema, array, obj, object_reference, strings, top};
use plinth_registry::strategy::Strategy;

const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
const RECLAIM: &[&str] = &["Delete", "Recycle", "Retain"];
/// The annotation that makes a StorageClass the default.
pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

fn text(o: &Value, pointer: &str) -> String {
    o.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// kubectl's access modes: `RWO,ROX,…`.
fn modes_cell(modes: Option<&Value>) -> String {
    modes
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|m| match m {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn or_unset(s: String) -> Value {
    json!(if s.is_empty() {
        "<unset>".to_owned()
    } else {
        s
    })
}

/// The `persistentvolumes` resource.
pub fn volumes() -> ResourceDef {
    ResourceDef::new("", "v1", "PersistentVolume", "persistentvolumes")
        .cluster_scoped()
        .short_names(&["pv"])
        .with_status()
        .columns(vec![
            column("Capacity", "string", "Capacity of the volume", 0, |o, _| json!(text(o, "/spec/capacity/storage"))),
            column("Access Modes", "string", "Access modes of the volume", 0, |o, _| json!(modes_cell(o.pointer("/spec/accessModes")))),
            column("Reclaim Policy", "string", "What happens to the volume when its claim is deleted", 0, |o, _| json!(text(o, "/spec/persistentVolumeReclaimPolicy"))),
            column("Status", "string", "Phase of the volume", 0, |o, _| json!(text(o, "/status/phase"))),
            column("Claim", "string", "The claim bound to the volume", 0, |o, _| {
                let ns = text(o, "/spec/claimRef/namespace");
                let name = text(o, "/spec/claimRef/name");
                json!(if name.is_empty() { String::new() } else { format!("{ns}/{name}") })
            }),
            column("StorageClass", "string", "The volume's storage class", 0, |o, _| json!(text(o, "/spec/storageClassName"))),
            column("VolumeAttributesClass", "string", "The volume's attributes class", 0, |o, _| or_unset(text(o, "/spec/volumeAttributesClassName"))),
            column("Reason", "string", "Why the volume is in its phase", 0, |o, _| json!(text(o, "/status/reason"))),
            column("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0, |o, now| age_cell(o, "metadata.creationTimestamp", now)),
        ])
        .no_age_column()
        .schema(top(vec![
            (
                "spec",
                obj(vec![
                    ("capacity", Schema::Map(Box::new(Schema::Quantity))),
                    ("accessModes", array(Schema::String)),
                    ("claimRef", object_reference()),
                    ("persistentVolumeReclaimPolicy", Schema::String),
                    ("storageClassName", Schema::String),
                    ("mountOptions", array(Schema::String)),
                    ("volumeMode", Schema::String),
                    ("nodeAffinity", Schema::Any),
                    ("volumeAttributesClassName", Schema::String),
                    ("hostPath", obj(vec![("path", Schema::String), ("type", Schema::String)])),
                    ("local", obj(vec![("path", Schema::String), ("fsType", Schema::String)])),
                    ("csi", Schema::Any),
                    ("nfs", Schema::Any),
                    ("iscsi", Schema::Any),
                    ("fc", Schema::Any),
                ]),
            ),
            (
                "status",
                obj(vec![
                    ("phase", Schema::String),
                    ("message", Schema::String),
                    ("reason", Schema::String),
                    ("lastPhaseTransitionTime", Schema::String),
                ]),
            ),
        ]))
        .strategy(Volumes)
}

/// The `persistentvolumeclaims` resource.
pub fn claims() -> ResourceDef {
    let mut def = ResourceDef::new("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims")
        .short_names(&["pvc"])
        .with_status()
        .columns(vec![
            column("Status", "string", "Phase of the claim", 0, |o, _| json!(text(o, "/status/phase"))),
            column("Volume", "string", "The volume bound to the claim", 0, |o, _| json!(text(o, "/spec/volumeName"))),
            column("Capacity", "string", "Capacity of the bound volume", 0, |o, _| json!(text(o, "/status/capacity/storage"))),
            column("Access Modes", "string", "Access modes of the bound volume", 0, |o, _| json!(modes_cell(o.pointer("/status/accessModes")))),
            column("StorageClass", "string", "The claim's storage class", 0, |o, _| json!(text(o, "/spec/storageClassName"))),
            column("VolumeAttributesClass", "string", "The claim's attributes class", 0, |o, _| or_unset(text(o, "/spec/volumeAttributesClassName"))),
            column("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0, |o, now| age_cell(o, "metadata.creationTimestamp", now)),
        ])
        .no_age_column()
        .schema(top(vec![
            (
                "spec",
                obj(vec![
                    ("accessModes", array(Schema::String)),
                    ("selector", Schema::Any),
                    (
                        "resources",
                        obj(vec![
                            ("limits", Schema::Map(Box::new(Schema::Quantity))),
                            ("requests", Schema::Map(Box::new(Schema::Quantity))),
                        ]),
                    ),
                    ("volumeName", Schema::String),
                    ("storageClassName", Schema::String),
                    ("volumeMode", Schema::String),
                    ("dataSource", Schema::Any),
                    ("dataSourceRef", Schema::Any),
                    ("volumeAttributesClassName", Schema::String),
                ]),
            ),
            (
                "status",
                obj(vec![
                    ("phase", Schema::String),
                    ("accessModes", array(Schema::String)),
                    ("capacity", Schema::Map(Box::new(Schema::Quantity))),
                    ("conditions", array(Schema::Any)),
                    ("allocatedResources", Schema::Map(Box::new(Schema::Quantity))),
                    ("allocatedResourceStatuses", strings()),
                    ("currentVolumeAttributesClassName", Schema::String),
                    ("modifyVolumeStatus", Schema::Any),
                ]),
            ),
        ]))
        .strategy(Claims);
    def.allocate = Some(default_class);
    def
}

fn access_mode_causes(spec: &Value, path: &str) -> Vec<Cause> {
    let modes = spec["accessModes"].as_array().cloned().unwrap_or_default();
    let mut causes = Vec::new();
    if modes.is_empty() {
        causes.push(Cause::required(format!("{path}.accessModes"), ""));
    }
    for mode in &modes {
        let mode = mode.as_str().unwrap_or("");
        if !ACCESS_MODES.contains(&mode) {
            causes.push(Cause::not_supported(
                format!("{path}.accessModes"),
                &json!(mode),
                ACCESS_MODES,
            ));
        }
    }
    causes
}

#[derive(Debug)]
struct Volumes;

impl Strategy for Volumes {
    /// kube's status strategy: the request's status and metadata, the stored spec.
    fn merge_status(&self, current: &Value, new: &Value) -> Option<Value> {
        Some(plinth_registry::strategy::with_stored_spec(current, new))
    }

    fn prepare_create(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            spec.entry("persistentVolumeReclaimPolicy")
                .or_insert_with(|| json!("Retain"));
            spec.entry("volumeMode")
                .or_insert_with(|| json!("Filesystem"));
        }
        object["status"] = json!({"phase": "Pending"});
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let spec = object.get("spec").unwrap_or(&Value::Null);
        let mut causes = access_mode_causes(spec, "spec");
        match spec.pointer("/capacity/storage") {
            None | Some(Value::Null) => causes.push(Cause::required("spec.capacity", "")),
            Some(q) if plinth_core::quantity::of(q).is_none() => {
                causes.push(Cause::invalid(
                    "spec.capacity[storage]",
                    q,
                    "must be a valid quantity",
                ));
            }
            _ => {}
        }
        let policy = spec["persistentVolumeReclaimPolicy"]
            .as_str()
            .unwrap_or("Retain");
        if !RECLAIM.contains(&policy) {
            causes.push(Cause::not_supported(
                "spec.persistentVolumeReclaimPolicy",
                &json!(policy),
                RECLAIM,
            ));
        }
        let sources = ["hostPath", "local", "csi", "nfs", "iscsi", "fc"]
            .iter()
            .filter(|k| spec.get(**k).is_some_and(|v| !v.is_null()))
            .count();
        if sources == 0 {
            causes.push(Cause::required("spec", "must specify a volume type"));
        }
        causes
    }
}

#[derive(Debug)]
struct Claims;

impl Strategy for Claims {
    /// kube's status strategy: the request's status and metadata, the stored spec.
    fn merge_status(&self, current: &Value, new: &Value) -> Option<Value> {
        Some(plinth_registry::strategy::with_stored_spec(current, new))
    }

    fn prepare_create(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            spec.entry("volumeMode")
                .or_insert_with(|| json!("Filesystem"));
        }
        object["status"] = json!({"phase": "Pending"});
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let spec = object.get("spec").unwrap_or(&Value::Null);
        let mut causes = access_mode_causes(spec, "spec");
        match spec.pointer("/resources/requests/storage") {
            None | Some(Value::Null) => causes.push(Cause::required("spec.resources[storage]", "")),
            Some(q) if plinth_core::quantity::of(q).is_none_or(|v| v <= 0.0) => {
                causes.push(Cause::invalid(
                    "spec.resources.requests[storage]",
                    q,
                    "must be greater than zero",
                ));
            }
            _ => {}
        }
        if let Some(old) = old {
            let comparable = |claim: &Value, unset_volume: bool| {
                let mut spec = claim.get("spec").cloned().unwrap_or(Value::Null);
                if let Some(s) = spec.as_object_mut() {
                    s.remove("resources");
                    s.remove("volumeAttributesClassName");
                    if unset_volume {
                        s.remove("volumeName");
                    }
                }
                spec
            };
            // Binding sets the volume once (the volume controller's write).
            let unbound = old
                .pointer("/spec/volumeName")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty);
            if comparable(old, unbound) != comparable(object, unbound) {
                causes.push(Cause::forbidden(
                    "spec",
                    "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
                ));
            }
        }
        causes
    }
}

/// The DefaultStorageClass plugin: a claim that names no class gets the default one.
fn default_class<'a>(
    objects: &'a dyn plinth_registry::resources::Objects,
    claim: &'a mut Value,
) -> BoxFuture<'a, Result<(), ApiError>> {
    Box::pin(async move {
        if claim
            .pointer("/spec/storageClassName")
            .is_some_and(|c| !c.is_null())
        {
            return Ok(());
        }
        let Some(def) = objects.resource("storage.k8s.io", "v1", "storageclasses") else {
            return Ok(());
        };
        let classes = objects.list(&def, None, &ListOptions::default()).await?;
        let default = classes["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| {
                c.pointer("/metadata/annotations")
                    .and_then(|a| a.get(DEFAULT_CLASS))
                    == Some(&json!("true"))
            })
            .filter_map(|c| plinth_core::meta::name(c).map(str::to_owned))
            .max();
        if let Some(name) = default {
            claim["spec"]["storageClassName"] = json!(name);
        }
        Ok(())
    })
}
