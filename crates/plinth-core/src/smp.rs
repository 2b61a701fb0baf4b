//! Strategic merge patch (`application/strategic-merge-patch+json`), as kube-apiserver applies
//! it: a JSON merge patch whose lists merge by the type's patch metadata (`patchStrategy:"merge"`
//! with a `patchMergeKey`, else replaced), with the directives `$patch: replace|delete|merge`,
//! `$retainKeys`, `$deleteFromPrimitiveList/<list>` and `$setElementOrder/<list>`, and
//! apimachinery's errors.
//!
//! Patch metadata is given as a table of field paths: names joined by `.`, list items as `[]`
//! (`spec.containers` merges by `name`, `spec.containers[].ports` by `containerPort`).

use serde_json::{Map, Value};

/// How a list at some field path merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListMerge {
    /// Scalars merged as a set (`patchStrategy:"merge"` on a list of scalars).
    Set,
    /// Objects matched by this key (`patchStrategy:"merge"`, `patchMergeKey`).
    Keyed(&'static str),
}

/// The list metadata of a type, by field path.
pub type Strategies = [(&'static str, ListMerge)];

/// The lists every type shares through ObjectMeta.
pub const OBJECT_META: [(&str, ListMerge); 2] = [
    ("metadata.finalizers", ListMerge::Set),
    ("metadata.ownerReferences", ListMerge::Keyed("uid")),
];

/// A patch that cannot be applied, as kube-apiserver answers it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// 400: a malformed patch or directive.
    #[error("{0}")]
    BadRequest(String),
    /// 422: a well-formed patch that cannot apply (lists of lists, content outside
    /// `$retainKeys`).
    #[error("{0}")]
    Invalid(String),
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

fn bad(message: impl Into<String>) -> PatchError {
    PatchError::BadRequest(message.into())
}

/// Applies `patch` to `target`.
///
/// # Errors
/// A [`PatchError`] with apimachinery's message for a patch that is not an object, a directive
/// used wrongly, or list items without their merge key.
pub fn apply(target: &mut Value, patch: &Value, strategies: &Strategies) -> Result<(), PatchError> {
    let Value::Object(patch) = patch else {
        return Err(bad("invalid JSON document"));
    };
    let original = match std::mem::take(target) {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    *target = match merge_map(original, patch.clone(), strategies, "")? {
        Some(map) => Value::Object(map),
        None => Value::Object(Map::new()),
    };
    Ok(())
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn lookup(strategies: &Strategies, path: &str) -> Option<ListMerge> {
    strategies
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, merge)| *merge)
}

fn go_value(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}:{}", go_value(v)))
                .collect();
            format!("map[{}]", inner.join(" "))
        }
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(go_value).collect();
            format!("[{}]", inner.join(" "))
        }
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".into(),
        other => other.to_string(),
    }
}

fn no_merge_key(item: &Map<String, Value>, key: &str) -> PatchError {
    bad(format!(
        "map: {} does not contain declared merge key: {key}",
        go_value(&Value::Object(item.clone()))
    ))
}

fn bad_patch_type(directive: &Value, map: &Map<String, Value>) -> PatchError {
    bad(format!(
        "unknown patch type: {} in map: {}",
        go_value(directive),
        go_value(&Value::Object(map.clone()))
    ))
}

/// Removes directives from a value taken whole from the patch; `None`: the value itself is a
/// directive (`{"$patch": ...}`) and is dropped.
fn remove_directives(value: Value) -> Option<Value> {
    match value {
        Value::Object(map) => {
            if map.contains_key(DIRECTIVE) {
                return None;
            }
            let cleaned = map
                .into_iter()
                .filter(|(k, _)| !is_directive_key(k))
                .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                .collect();
            Some(Value::Object(cleaned))
        }
        Value::Array(items) => Some(Value::Array(
            items.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

fn is_directive_key(key: &str) -> bool {
    key == DIRECTIVE
        || key == RETAIN_KEYS
        || key.starts_with(&format!("{DELETE_FROM_PRIMITIVE_LIST}/"))
        || key.starts_with(&format!("{SET_ELEMENT_ORDER}/"))
}

/// Null-valued fields of a value taken whole from the patch set nothing.
fn discard_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(discard_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(discard_nulls),
        _ => {}
    }
}

fn take_whole(mut value: Value) -> Option<Value> {
    discard_nulls(&mut value);
    remove_directives(value)
}

/// Merges `patch` into `original`; `None` when the map is deleted (`$patch: delete`).
fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    strategies: &Strategies,
    path: &str,
) -> Result<Option<Map<String, Value>>, PatchError> {
    if let Some(directive) = patch.get(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => {
                patch.remove(DIRECTIVE);
                Ok(take_whole(Value::Object(patch)).and_then(|v| match v {
                    Value::Object(map) => Some(map),
                    _ => None,
                }))
            }
            Some("delete") => Ok(None),
            _ => Err(bad_patch_type(directive, &patch)),
        };
    }
    apply_retain_keys(&mut original, &mut patch)?;
    merge_ordered_lists(&mut original, &mut patch, strategies, path)?;
    for (key, value) in patch {
        let (field, delete_list) = match key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            Some(rest) => match rest.strip_prefix('/') {
                Some(field) if !field.is_empty() => (field.to_owned(), true),
                _ => return Err(bad("invalid patch format of primitive list")),
            },
            None => (key, false),
        };
        if value.is_null() {
            original.remove(&field);
            continue;
        }
        let Some(current) = original.remove(&field) else {
            if !delete_list && let Some(v) = take_whole(value) {
                original.insert(field, v);
            }
            continue;
        };
        let merged = match (current, value) {
            (Value::Object(current), Value::Object(value)) => {
                merge_map(current, value, strategies, &join(path, &field))?.map(Value::Object)
            }
            (Value::Array(current), Value::Array(value)) => {
                let list_path = join(path, &field);
                let strategy = lookup(strategies, &list_path);
                if delete_list || strategy.is_some() {
                    Some(Value::Array(merge_list(
                        current,
                        value,
                        strategy,
                        strategies,
                        &list_path,
                        delete_list,
                    )?))
                } else {
                    take_whole(Value::Array(value))
                }
            }
            (current, _) if delete_list => Some(current),
            (_, value) => take_whole(value),
        };
        if let Some(merged) = merged {
            original.insert(field, merged);
        }
    }
    Ok(Some(original))
}

/// `$retainKeys`: fields of `original` not listed are cleared; every field the patch sets must
/// be listed.
fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), PatchError> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(bad("invalid patch format of retainKeys"));
    };
    let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
    for (key, value) in patch.iter() {
        if value.is_null() || is_directive_key(key) {
            continue;
        }
        if !keep.contains(&key.as_str()) {
            return Err(bad("invalid patch format of retainKeys"));
        }
    }
    original.retain(|k, _| keep.contains(&k.as_str()));
    Ok(())
}

/// `$setElementOrder/<list>`: merges the list with its patch (if any) and puts the items in
/// the order given, server-only items keeping their place relative to the others.
fn merge_ordered_lists(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    strategies: &Strategies,
    path: &str,
) -> Result<(), PatchError> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for key in keys {
        let Some(order) = patch.remove(&key) else {
            continue;
        };
        let field = match key
            .strip_prefix(SET_ELEMENT_ORDER)
            .and_then(|r| r.strip_prefix('/'))
        {
            Some(field) if !field.is_empty() => field.to_owned(),
            _ => return Err(bad("invalid patch format of setElementOrder list")),
        };
        let Value::Array(order) = order else {
            return Err(bad("invalid patch format of setElementOrder list"));
        };
        let list_path = join(path, &field);
        let strategy = lookup(strategies, &list_path);
        let merge_key = match strategy {
            Some(ListMerge::Keyed(k)) => Some(k),
            _ => None,
        };
        let patch_list = match patch.remove(&field) {
            Some(Value::Array(items)) => Some(items),
            Some(Value::Null) | None => None,
            Some(_) => return Err(bad("invalid patch format of setElementOrder list")),
        };
        if let Some(items) = &patch_list {
            check_order(items, &order, merge_key)?;
        }
        let current = match original.remove(&field) {
            Some(Value::Array(items)) => Some(items),
            Some(other) => {
                original.insert(field.clone(), other);
                None
            }
            None => None,
        };
        let server_order = current.clone().unwrap_or_default();
        let merged = match (current, patch_list) {
            (Some(current), None) => current,
            (None, Some(items)) => match take_whole(Value::Array(items)) {
                Some(Value::Array(items)) => items,
                _ => continue,
            },
            (Some(current), Some(items)) => {
                merge_list(current, items, strategy, strategies, &list_path, false)?
            }
            (None, None) => continue,
        };
        let (in_order, server_only): (Vec<Value>, Vec<Value>) = merged
            .into_iter()
            .partition(|item| position(&order, item, merge_key).is_some());
        let sorted = normalize_order(in_order, server_only, &order, &server_order, merge_key);
        original.insert(field, Value::Array(sorted));
    }
    Ok(())
}

/// The items of the patch list must appear in the `$setElementOrder` list, in its order.
fn check_order(
    items: &[Value],
    order: &[Value],
    merge_key: Option<&str>,
) -> Result<(), PatchError> {
    let items: Vec<&Value> = items
        .iter()
        .filter(|item| item.get(DIRECTIVE).is_none())
        .collect();
    let (mut i, mut j) = (0, 0);
    while i < items.len() && j < order.len() {
        if same_item(items[i], &order[j], merge_key) {
            i += 1;
        }
        j += 1;
    }
    if i < items.len() {
        return Err(bad(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
            go_value(&Value::Array(items.into_iter().cloned().collect())),
            go_value(&Value::Array(order.to_vec()))
        )));
    }
    Ok(())
}

fn same_item(a: &Value, b: &Value, merge_key: Option<&str>) -> bool {
    match merge_key {
        Some(key) => a.get(key).is_some() && a.get(key) == b.get(key),
        None => a == b,
    }
}

fn position(list: &[Value], item: &Value, merge_key: Option<&str>) -> Option<usize> {
    list.iter().position(|x| same_item(x, item, merge_key))
}

/// Sorts `patched` by `patch_order` and `server_only` by `server_order`, then merges the two,
/// keeping each one's order (apimachinery's `normalizeElementOrder`).
fn normalize_order(
    mut patched: Vec<Value>,
    mut server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: Option<&str>,
) -> Vec<Value> {
    let rank =
        |order: &[Value], item: &Value| position(order, item, merge_key).unwrap_or(usize::MAX);
    patched.sort_by_key(|item| rank(patch_order, item));
    server_only.sort_by_key(|item| rank(server_order, item));
    let mut merged = Vec::with_capacity(patched.len() + server_only.len());
    let (mut left, mut right) = (
        server_only.into_iter().peekable(),
        patched.into_iter().peekable(),
    );
    loop {
        match (left.peek(), right.peek()) {
            (Some(l), Some(r)) => {
                let (li, ri) = (
                    position(server_order, l, merge_key),
                    position(server_order, r, merge_key),
                );
                let take_left = matches!((li, ri), (Some(a), Some(b)) if a < b);
                let next = if take_left { left.next() } else { right.next() };
                merged.extend(next);
            }
            (Some(_), None) => merged.extend(left.next()),
            (None, Some(_)) => merged.extend(right.next()),
            (None, None) => break,
        }
    }
    merged
}

fn check_element_types(a: &[Value], b: &[Value]) -> Result<Option<bool>, PatchError> {
    let mut objects: Option<bool> = None;
    for item in a.iter().chain(b) {
        if item.is_array() {
            return Err(PatchError::Invalid(
                "lists of lists are not supported".into(),
            ));
        }
        let is_object = item.is_object();
        match objects {
            None => objects = Some(is_object),
            Some(o) if o != is_object => {
                return Err(bad(format!(
                    "list element types are not identical: [{} {}]",
                    go_value(&Value::Array(a.to_vec())),
                    go_value(&Value::Array(b.to_vec()))
                )));
            }
            Some(_) => {}
        }
    }
    Ok(objects)
}

/// What a keyed list's patch items with a `$patch` directive leave to do.
enum Directives {
    /// `$patch: replace`: the list is these items.
    Replace(Vec<Value>),
    /// The list (items deleted by `$patch: delete` gone) and the plain items to merge into it.
    Merge(Vec<Value>, Vec<Map<String, Value>>),
}

/// Applies the items of a keyed list's patch that carry a directive: delete by merge key, or
/// replace the whole list; the other items are returned to be merged.
fn list_directives(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
) -> Result<Directives, PatchError> {
    let mut plain = Vec::new();
    let mut replace = false;
    for item in patch {
        let Value::Object(map) = item else {
            continue;
        };
        match map.get(DIRECTIVE) {
            None => plain.push(map),
            Some(directive) => match directive.as_str() {
                Some("delete") => {
                    let Some(value) = map.get(merge_key) else {
                        return Err(no_merge_key(&map, merge_key));
                    };
                    original.retain(|o| o.get(merge_key) != Some(value));
                }
                Some("replace") => replace = true,
                Some("merge") => {
                    return Err(bad("merging lists cannot yet be specified in the patch"));
                }
                _ => return Err(bad_patch_type(directive, &map)),
            },
        }
    }
    if replace {
        return Ok(Directives::Replace(
            plain
                .into_iter()
                .filter_map(|m| take_whole(Value::Object(m)))
                .collect(),
        ));
    }
    Ok(Directives::Merge(original, plain))
}

/// Merges a list by its strategy (or deletes from a primitive list).
fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    strategy: Option<ListMerge>,
    strategies: &Strategies,
    path: &str,
    delete_list: bool,
) -> Result<Vec<Value>, PatchError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let objects = check_element_types(&original, &patch)?.unwrap_or(false);
    if !objects {
        if delete_list {
            return Ok(original
                .into_iter()
                .filter(|v| !patch.contains(v))
                .collect());
        }
        let server_order = original.clone();
        let mut merged = original;
        for item in &patch {
            if !merged.contains(item) {
                merged.push(item.clone());
            }
        }
        let (in_patch, server_only): (Vec<Value>, Vec<Value>) =
            merged.into_iter().partition(|v| patch.contains(v));
        return Ok(normalize_order(
            in_patch,
            server_only,
            &patch,
            &server_order,
            None,
        ));
    }
    let merge_key = match strategy {
        Some(ListMerge::Keyed(key)) => key,
        _ => {
            return Err(bad(format!(
                "cannot merge lists without merge key for {path}"
            )));
        }
    };
    let (mut original, plain) = match list_directives(original, patch, merge_key)? {
        Directives::Replace(items) => return Ok(items),
        Directives::Merge(original, plain) => (original, plain),
    };
    let server_order = original.clone();
    let item_path = format!("{path}[]");
    let patch_order: Vec<Value> = plain.iter().cloned().map(Value::Object).collect();
    for item in plain {
        let Some(value) = item.get(merge_key).cloned() else {
            return Err(no_merge_key(&item, merge_key));
        };
        match original
            .iter()
            .position(|o| o.get(merge_key) == Some(&value))
        {
            Some(i) => {
                let current = match std::mem::take(&mut original[i]) {
                    Value::Object(map) => map,
                    _ => Map::new(),
                };
                match merge_map(current, item, strategies, &item_path)? {
                    Some(merged) => original[i] = Value::Object(merged),
                    None => {
                        original.remove(i);
                    }
                }
            }
            None => original.extend(take_whole(Value::Object(item))),
        }
    }
    let key = Some(merge_key);
    let (in_patch, server_only): (Vec<Value>, Vec<Value>) = original
        .into_iter()
        .partition(|v| position(&patch_order, v, key).is_some());
    Ok(normalize_order(
        in_patch,
        server_only,
        &patch_order,
        &server_order,
        key,
    ))
}

#[cfg(test)]
mod tests;
