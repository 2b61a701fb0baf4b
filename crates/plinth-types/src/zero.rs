//! The zero values kube's Go structs always write — fields without `omitempty`, and structs,
//! which `omitempty` cannot leave out — added where a stored object lacks them, so that a
//! client reading it finds what kube-apiserver would have written (a new Deployment's
//! `status: {}`, a Node's `status.nodeInfo`).

use serde_json::Value;

/// Adds to `object` every key of `zero` it lacks (recursively, through objects).
pub(crate) fn fill(object: &mut Value, zero: &Value) {
    let (Some(target), Some(zero)) = (object.as_object_mut(), zero.as_object()) else {
        return;
    };
    for (key, value) in zero {
        match target.get_mut(key) {
            Some(existing) if existing.is_null() => *existing = value.clone(),
            Some(existing) => fill(existing, value),
            None => {
                target.insert(key.clone(), value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fill;
    use serde_json::json;

    #[test]
    fn missing_keys_are_added_and_present_ones_kept() {
        let mut object = json!({"status": {"nodeInfo": {"machineID": "m"}}, "spec": null});
        fill(
            &mut object,
            &json!({"spec": {}, "status": {"nodeInfo": {"machineID": "", "bootID": ""}}}),
        );
        assert_eq!(
            object,
            json!({"spec": {}, "status": {"nodeInfo": {"machineID": "m", "bootID": ""}}})
        );
    }
}
