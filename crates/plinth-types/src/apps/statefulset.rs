//! apps/v1 StatefulSet: kube's defaults (OrderedReady, a rolling update from partition 0,
//! claims retained), validation (which fields may change), `/status`, `/scale` and columns.

use plinth_core::Cause;
use serde_json::{Value, json};

use super::{
    TEMPLATE_LISTS, age_column, conditions, default_template, int_or_percent, label_selector,
    nonnegative, ready_column, set_default, validate_workload, wide_columns, workload,
};
use crate::core::podspec::pod_template_spec;
use plinth_registry::resources::ResourceDef;
use plinth_registry::schema::{Schema, array, obj, object_meta, top};
use plinth_registry::strategy::{FieldPath, ListMerge, Strategy};

/// The `statefulsets` resource.
pub fn resource() -> ResourceDef {
    let mut columns = vec![ready_column(), age_column()];
    columns.extend(wide_columns(false));
    workload("StatefulSet", "statefulsets", "sts", columns, true)
        .schema(schema())
        .strategy(StatefulSets)
}

fn schema() -> Schema {
    let claim = obj(vec![
        ("apiVersion", Schema::String),
        ("kind", Schema::String),
        ("metadata", object_meta()),
        ("spec", Schema::Any),
        ("status", Schema::Any),
    ]);
    top(vec![
        (
            "spec",
            obj(vec![
                ("replicas", Schema::Int),
                ("selector", label_selector()),
                ("template", pod_template_spec()),
                ("volumeClaimTemplates", array(claim)),
                ("serviceName", Schema::String),
                ("podManagementPolicy", Schema::String),
                (
                    "updateStrategy",
                    obj(vec![
                        ("type", Schema::String),
                        (
                            "rollingUpdate",
                            obj(vec![
                                ("partition", Schema::Int),
                                ("maxUnavailable", Schema::IntOrString),
                            ]),
                        ),
                    ]),
                ),
                ("revisionHistoryLimit", Schema::Int),
                ("minReadySeconds", Schema::Int),
                (
                    "persistentVolumeClaimRetentionPolicy",
                    obj(vec![
                        ("whenDeleted", Schema::String),
                        ("whenScaled", Schema::String),
                    ]),
                ),
                ("ordinals", obj(vec![("start", Schema::Int)])),
            ]),
        ),
        (
            "status",
            obj(vec![
                ("observedGeneration", Schema::Int),
                ("replicas", Schema::Int),
                ("readyReplicas", Schema::Int),
                ("currentReplicas", Schema::Int),
                ("updatedReplicas", Schema::Int),
                ("currentRevision", Schema::String),
                ("updateRevision", Schema::String),
                ("collisionCount", Schema::Int),
                ("conditions", conditions()),
                ("availableReplicas", Schema::Int),
            ]),
        ),
    ])
}

/// The spec fields an update may change.
const MUTABLE: &[&str] = &[
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

#[derive(Debug)]
struct StatefulSets;

impl Strategy for StatefulSets {
    fn prepare_create(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            set_default(spec, "replicas", json!(1));
            set_default(spec, "podManagementPolicy", json!("OrderedReady"));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(
                spec,
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            );
            if let Some(strategy) = spec["updateStrategy"].as_object_mut() {
                set_default(strategy, "type", json!("RollingUpdate"));
                if strategy["type"] == "RollingUpdate" {
                    set_default(strategy, "rollingUpdate", json!({}));
                    if let Some(rolling) = strategy["rollingUpdate"].as_object_mut() {
                        set_default(rolling, "partition", json!(0));
                    }
                }
            }
            set_default(spec, "persistentVolumeClaimRetentionPolicy", json!({}));
            if let Some(policy) = spec["persistentVolumeClaimRetentionPolicy"].as_object_mut() {
                set_default(policy, "whenDeleted", json!("Retain"));
                set_default(policy, "whenScaled", json!("Retain"));
            }
            for claim in spec
                .get_mut("volumeClaimTemplates")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(claim) = claim.as_object_mut() {
                    set_default(claim, "apiVersion", json!("v1"));
                    set_default(claim, "kind", json!("PersistentVolumeClaim"));
                    set_default(claim, "status", json!({"phase": "Pending"}));
                    if let Some(spec) = claim.get_mut("spec").and_then(Value::as_object_mut) {
                        set_default(spec, "volumeMode", json!("Filesystem"));
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
        // The template's mounts may name the claim templates (kube leaves the pod spec
        // unchecked for that reason; it is checked here with the claims as volumes).
        let mut with_claims = object.clone();
        let claims: Vec<Value> = spec["volumeClaimTemplates"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.pointer("/metadata/name").cloned())
            .map(|name| json!({"name": name, "persistentVolumeClaim": {"claimName": name}}))
            .collect();
        if let Some(pod) = with_claims.pointer_mut("/spec/template/spec")
            && !claims.is_empty()
        {
            let mut volumes = pod["volumes"].as_array().cloned().unwrap_or_default();
            volumes.extend(claims);
            pod["volumes"] = json!(volumes);
        }
        let mut causes = validate_workload(&with_claims, "statefulset", true);
        causes.extend(nonnegative(spec, "revisionHistoryLimit", "spec"));
        let policy = spec["podManagementPolicy"]
            .as_str()
            .unwrap_or("OrderedReady");
        if !["OrderedReady", "Parallel"].contains(&policy) {
            causes.push(Cause::not_supported(
                "spec.podManagementPolicy",
                &json!(policy),
                &["OrderedReady", "Parallel"],
            ));
        }
        let strategy = &spec["updateStrategy"];
        match strategy["type"].as_str().unwrap_or("RollingUpdate") {
            "RollingUpdate" => {
                let rolling = &strategy["rollingUpdate"];
                causes.extend(nonnegative(
                    rolling,
                    "partition",
                    "spec.updateStrategy.rollingUpdate",
                ));
                causes.extend(int_or_percent(
                    &rolling["maxUnavailable"],
                    "spec.updateStrategy.rollingUpdate.maxUnavailable",
                    true,
                ));
            }
            "OnDelete" if !strategy["rollingUpdate"].is_null() => {
                causes.push(Cause::invalid(
                    "spec.updateStrategy.rollingUpdate",
                    &strategy["rollingUpdate"],
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
            "OnDelete" => {}
            other => causes.push(Cause::not_supported(
                "spec.updateStrategy.type",
                &json!(other),
                &["OnDelete", "RollingUpdate"],
            )),
        }
        let retention = &spec["persistentVolumeClaimRetentionPolicy"];
        for field in ["whenDeleted", "whenScaled"] {
            if let Some(value) = retention[field].as_str()
                && !["Retain", "Delete"].contains(&value)
            {
                causes.push(Cause::not_supported(
                    format!("spec.persistentVolumeClaimRetentionPolicy.{field}"),
                    &json!(value),
                    &["Retain", "Delete"],
                ));
            }
        }
        causes.extend(nonnegative(&spec["ordinals"], "start", "spec.ordinals"));
        if let Some(old) = old {
            let changed = spec
                .as_object()
                .into_iter()
                .flatten()
                .chain(old["spec"].as_object().into_iter().flatten())
                .any(|(k, _)| !MUTABLE.contains(&k.as_str()) && spec[k] != old["spec"][k]);
            if changed {
                causes.push(Cause::forbidden(
                    "spec",
                    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
                ));
            }
        }
        causes
    }

    fn lists(&self) -> &[(FieldPath, ListMerge)] {
        TEMPLATE_LISTS
    }
}
