//! Strategic merge patch (`application/strategic-merge-patch+json`) for the built-in types:
//! a JSON merge patch whose lists merge by their declared strategy, with the `$patch`,
//! `$retainKeys`, `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>` directives.

use serde_json::{Map, Value};

/// How a list at some field path merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListMerge {
    /// Elements are scalars; the patch's are added (a set union, `patchStrategy:"merge"`).
    Primitive,
    /// Elements are objects matched by this key (`patchMergeKey`).
    Keyed(&'static str),
}

/// The list strategies of the fields a type declares, by dotted path from the object root.
pub type Strategies = [(&'static str, ListMerge)];

/// The strategies every type shares through ObjectMeta.
pub const OBJECT_META: [(&str, ListMerge); 2] = [
    ("metadata.finalizers", ListMerge::Primitive),
    ("metadata.ownerReferences", ListMerge::Keyed("uid")),
];

/// A patch that cannot be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PatchError(pub String);

/// Applies `patch` to `target`.
///
/// # Errors
/// A [`PatchError`] for a patch that is not an object or uses a directive wrongly.
pub fn apply(target: &mut Value, patch: &Value, strategies: &Strategies) -> Result<(), PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError(
            "a strategic merge patch must be a JSON object".into(),
        ));
    };
    merge_object(target, patch, strategies, "")
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn strip(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
        other => other.clone(),
    }
}

fn merge_object(
    target: &mut Value,
    patch: &Map<String, Value>,
    strategies: &Strategies,
    path: &str,
) -> Result<(), PatchError> {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = strip(&Value::Object(patch.clone()));
        return Ok(());
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(map) = target.as_object_mut() else {
        return Ok(());
    };
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let Value::Array(remove) = value else {
                return Err(PatchError(format!("{key} must be a list")));
            };
            if let Some(Value::Array(items)) = map.get_mut(field) {
                items.retain(|item| !remove.contains(item));
            }
            continue;
        }
        if key.starts_with('$') {
            continue; // $patch handled above; $setElementOrder and $retainKeys below or ignored
        }
        let field_path = join(path, key);
        match value {
            Value::Null => {
                map.remove(key);
            }
            Value::Object(inner)
                if inner.get("$patch").and_then(Value::as_str) == Some("delete") =>
            {
                map.remove(key);
            }
            Value::Object(inner) => {
                let slot = map.entry(key.clone()).or_insert(Value::Null);
                merge_object(slot, inner, strategies, &field_path)?;
            }
            Value::Array(items) => {
                let strategy = strategies
                    .iter()
                    .find(|(p, _)| *p == field_path)
                    .map(|(_, s)| *s);
                let current = map.remove(key);
                map.insert(
                    key.clone(),
                    merge_list(current, items, strategy, strategies, &field_path)?,
                );
            }
            scalar => {
                map.insert(key.clone(), scalar.clone());
            }
        }
    }
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        map.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(())
}

fn merge_list(
    current: Option<Value>,
    patch: &[Value],
    strategy: Option<ListMerge>,
    strategies: &Strategies,
    path: &str,
) -> Result<Value, PatchError> {
    let replace = patch
        .iter()
        .any(|item| item.get("$patch").and_then(Value::as_str) == Some("replace"));
    let mut items = match current {
        Some(Value::Array(items)) if !replace => items,
        _ => Vec::new(),
    };
    let patch: Vec<&Value> = patch
        .iter()
        .filter(|item| item.get("$patch").and_then(Value::as_str) != Some("replace"))
        .collect();
    match strategy {
        _ if replace => items = patch.into_iter().map(strip).collect(),
        None => items = patch.into_iter().map(strip).collect(),
        Some(ListMerge::Primitive) => {
            for item in patch {
                if !items.contains(item) {
                    items.push(item.clone());
                }
            }
        }
        Some(ListMerge::Keyed(merge_key)) => {
            for item in patch {
                let Some(key) = item.get(merge_key) else {
                    return Err(PatchError(format!(
                        "map: {item} does not contain declared merge key: {merge_key}"
                    )));
                };
                let position = items
                    .iter()
                    .position(|existing| existing.get(merge_key) == Some(key));
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (position, delete) {
                    (Some(i), true) => {
                        items.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => {
                        if let Value::Object(inner) = item {
                            merge_object(&mut items[i], inner, strategies, path)?;
                        }
                    }
                    (None, false) => items.push(strip(item)),
                }
            }
        }
    }
    Ok(Value::Array(items))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SA: [(&str, ListMerge); 4] = [
        ("metadata.finalizers", ListMerge::Primitive),
        ("metadata.ownerReferences", ListMerge::Keyed("uid")),
        ("secrets", ListMerge::Keyed("name")),
        ("imagePullSecrets", ListMerge::Keyed("name")),
    ];

    #[test]
    fn maps_merge_and_null_deletes() {
        let mut target = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "data": {"x": "1"}});
        apply(
            &mut target,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}}, "data": {"y": "2"}}),
            &SA,
        )
        .unwrap();
        assert_eq!(
            target,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "data": {"x": "1", "y": "2"}})
        );
    }

    #[test]
    fn primitive_lists_union_and_delete_from_primitive_list() {
        let mut target = json!({"metadata": {"finalizers": ["a", "b"]}});
        apply(
            &mut target,
            &json!({"metadata": {"finalizers": ["b", "c"]}}),
            &SA,
        )
        .unwrap();
        assert_eq!(target["metadata"]["finalizers"], json!(["a", "b", "c"]));
        apply(&mut target, &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "$setElementOrder/finalizers": ["b", "c"]}}), &SA).unwrap();
        assert_eq!(target["metadata"]["finalizers"], json!(["b", "c"]));
    }

    #[test]
    fn keyed_lists_merge_by_key() {
        let mut target = json!({"secrets": [{"name": "a", "x": 1}, {"name": "b"}]});
        apply(&mut target, &json!({"secrets": [{"name": "a", "y": 2}, {"name": "c"}, {"name": "b", "$patch": "delete"}]}), &SA).unwrap();
        assert_eq!(
            target["secrets"],
            json!([{"name": "a", "x": 1, "y": 2}, {"name": "c"}])
        );
        apply(
            &mut target,
            &json!({"secrets": [{"$patch": "replace"}, {"name": "z"}]}),
            &SA,
        )
        .unwrap();
        assert_eq!(target["secrets"], json!([{"name": "z"}]));
        assert!(apply(&mut target, &json!({"secrets": [{"nokey": 1}]}), &SA).is_err());
    }

    #[test]
    fn lists_without_a_strategy_are_replaced_and_directives_work() {
        let mut target =
            json!({"spec": {"finalizers": ["kubernetes"]}, "data": {"a": "1", "b": "2"}});
        apply(&mut target, &json!({"spec": {"finalizers": []}}), &SA).unwrap();
        assert_eq!(target["spec"]["finalizers"], json!([]));
        apply(
            &mut target,
            &json!({"data": {"$patch": "replace", "c": "3"}}),
            &SA,
        )
        .unwrap();
        assert_eq!(target["data"], json!({"c": "3"}));
        apply(
            &mut target,
            &json!({"data": {"$retainKeys": ["c"], "d": "4"}}),
            &SA,
        )
        .unwrap();
        assert_eq!(target["data"], json!({"c": "3"}));
        apply(&mut target, &json!({"data": {"$patch": "delete"}}), &SA).unwrap();
        assert!(target.get("data").is_none());
        assert!(apply(&mut target, &json!([1]), &SA).is_err());
    }
}
