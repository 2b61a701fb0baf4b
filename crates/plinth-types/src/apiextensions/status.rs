//! The status a CRD's controller maintains.

use serde_json::{Value, json};

/// The status the CRD controller maintains: names accepted, established, stored versions.
pub fn desired_status(crd: &Value, now: &str) -> Value {
    let mut status = crd
        .get("status")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut set = |kind: &str, value: &str, reason: &str, message: &str| {
        match conditions.iter_mut().find(|c| c["type"] == kind) {
            Some(existing) if existing["status"] == value => {}
            Some(existing) => *existing = json!({"type": kind, "status": value, "lastTransitionTime": now, "reason": reason, "message": message}),
            None => conditions.push(json!({"type": kind, "status": value, "lastTransitionTime": now, "reason": reason, "message": message})),
        }
    };
    set("NamesAccepted", "True", "NoConflicts", "no conflicts found");
    set(
        "Established",
        "True",
        "InitialNamesAccepted",
        "the initial names have been accepted",
    );
    // A stored CRD whose schema is not structural (one written before these rules, or through
    // storage directly) says so, as kube-apiserver does.
    let violations: Vec<String> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, v)| Some((i, v.pointer("/schema/openAPIV3Schema")?)))
        .flat_map(|(i, schema)| {
            plinth_schema::structural_errors(schema)
                .into_iter()
                .map(move |e| e.cause(&format!("spec.versions[{i}].schema")).line())
        })
        .collect();
    let non_structural = match violations.as_slice() {
        [] => None,
        [one] => Some(one.clone()),
        many => Some(format!("[{}]", many.join(", "))),
    };
    if let Some(message) = &non_structural {
        set("NonStructuralSchema", "True", "Violations", message);
    }
    if crd
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        set(
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        );
    }
    if non_structural.is_none() {
        conditions.retain(|c| c["type"] != "NonStructuralSchema");
    }
    status["conditions"] = Value::Array(conditions);
    status["acceptedNames"] = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let storage = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| vs.iter().find(|v| v.get("storage") == Some(&json!(true))))
        .and_then(|v| v.get("name"))
        .cloned();
    let mut stored: Vec<Value> = status
        .get("storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(storage) = storage
        && !stored.contains(&storage)
    {
        stored.push(storage);
    }
    status["storedVersions"] = Value::Array(stored);
    status
}
