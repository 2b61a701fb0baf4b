//! apps/v1 ControllerRevision: an immutable snapshot of a workload's template (`data`) at a
//! `revision`, as StatefulSets and DaemonSets record their history.

use plinth_core::Cause;
use serde_json::{Value, json};

use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::{Schema, top};
use plinth_registry::strategy::Strategy;

/// The `controllerrevisions` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("apps", "v1", "ControllerRevision", "controllerrevisions")
        .columns(vec![
            column(
                "Controller",
                "string",
                "Controller of the object",
                0,
                |o, _| json!(controller(o)),
            ),
            column(
                "Revision",
                "integer",
                "Revision of the ControllerRevision",
                0,
                super::int_cell("/revision"),
            ),
        ])
        .schema(top(vec![("data", Schema::Any), ("revision", Schema::Int)]))
        .strategy(Revisions)
}

/// `statefulset.apps/web`: the controlling owner, as kubectl names it.
fn controller(object: &Value) -> String {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|o| o["controller"] == true)
        .map_or_else(
            || "<none>".to_owned(),
            |o| {
                let group = o["apiVersion"]
                    .as_str()
                    .and_then(|v| v.split_once('/'))
                    .map(|(g, _)| g)
                    .unwrap_or("");
                let kind = o["kind"].as_str().unwrap_or("").to_lowercase();
                let name = o["name"].as_str().unwrap_or("");
                if group.is_empty() {
                    format!("{kind}/{name}")
                } else {
                    format!("{kind}.{group}/{name}")
                }
            },
        )
}

#[derive(Debug)]
struct Revisions;

impl Strategy for Revisions {
    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        if object["data"].is_null() {
            causes.push(Cause::required("data", "data is mandatory"));
        }
        causes.extend(super::nonnegative(object, "revision", ""));
        if let Some(old) = old
            && old["data"] != object["data"]
        {
            causes.push(Cause::immutable("data", &object["data"]));
        }
        causes
    }
}
