//! Pruning unknown fields and applying defaults, as apiextensions does.

use serde_json::Value;

use crate::node::{Additional, Node, join};

pub(crate) fn prune_node(node: &Node, value: &mut Value, path: &str, pruned: &mut Vec<String>) {
    if node.preserve_unknown
        && node.properties.is_empty()
        && node.items.is_none()
        && node.additional.is_none()
    {
        return;
    }
    match value {
        Value::Object(map) => {
            let additional = node.additional.as_deref();
            // Kept without a schema: fields an open object allows, and an embedded object's
            // apiVersion, kind and metadata.
            let kept = |key: &str| {
                matches!(additional, Some(Additional::Allowed(true)))
                    || node.preserve_unknown
                    || (node.embedded_resource && matches!(key, "apiVersion" | "kind" | "metadata"))
            };
            let mut remove = Vec::new();
            for (key, child) in map.iter_mut() {
                let child_path = join(path, key);
                if node.embedded_resource && key == "metadata" {
                    // An embedded object's metadata is an ObjectMeta, whatever the schema says
                    // of it (kube coerces it through the type).
                    prune_object_meta(child, &child_path, pruned);
                } else if let Some(sub) = node.properties.get(key) {
                    prune_node(sub, child, &child_path, pruned);
                } else if let Some(Additional::Schema(sub)) = additional {
                    prune_node(sub, child, &child_path, pruned);
                } else if !kept(key) {
                    remove.push(key.clone());
                }
            }
            for key in remove {
                map.remove(&key);
                pruned.push(join(path, &key));
            }
        }
        Value::Array(items) => {
            if let Some(sub) = &node.items {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_node(sub, item, &format!("{path}[{i}]"), pruned);
                }
            }
        }
        _ => {}
    }
}

/// The fields of `metav1.ObjectMeta`.
pub(crate) const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Drops what `metav1.ObjectMeta` does not have from an embedded object's metadata.
pub(crate) fn prune_object_meta(value: &mut Value, path: &str, pruned: &mut Vec<String>) {
    if let Value::Object(map) = value {
        map.retain(|key, _| {
            let keep = OBJECT_META_FIELDS.contains(&key.as_str());
            if !keep {
                pruned.push(join(path, key));
            }
            keep
        });
    }
}

pub(crate) fn default_node(node: &Node, value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, sub) in &node.properties {
                if !map.contains_key(key)
                    && let Some(default) = &sub.default
                {
                    map.insert(key.clone(), default.clone());
                }
                if let Some(child) = map.get_mut(key) {
                    default_node(sub, child);
                }
            }
            if let Some(Additional::Schema(sub)) = node.additional.as_deref() {
                for (key, child) in map.iter_mut() {
                    if !node.properties.contains_key(key) {
                        default_node(sub, child);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = &node.items {
                for item in items {
                    default_node(sub, item);
                }
            }
        }
        _ => {}
    }
}
