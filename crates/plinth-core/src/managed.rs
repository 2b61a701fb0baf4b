//! Field ownership and server-side apply (structured-merge-diff, as kube-apiserver runs it):
//! field sets and their `FieldsV1` encoding, `managedFields` entries, the apply merge with its
//! conflicts, and the ownership an ordinary write (create, update, patch) records.
//!
//! # Model
//! An object is a tree; a *path* names one node: a field (`f:name`), a list item of an
//! associative list by its keys (`k:{"name":"web"}`), or an item of a set list by its value
//! (`v:"a"`). A *field set* is a set of paths. Each manager (`fieldManager` plus operation,
//! API version and subresource) owns a field set.
//!
//! - **Apply** makes the applier own exactly the fields of its configuration. A field another
//!   manager owns whose value the apply would change is a *conflict* (409) unless forced, which
//!   moves it to the applier. Fields the applier owned before, dropped from its configuration
//!   and owned by nobody else, are removed from the object.
//! - **Update** (any other write) gives the writer the fields it added or changed, taking them
//!   from other managers; fields it removed leave every set.
//!
//! How lists and maps merge comes from the type, through [`Shape`]: lists are atomic (replaced
//! whole), sets, or maps keyed by some of their items' fields; objects are structs, granular
//! maps, or atomic.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Element {
    /// A field of an object.
    Field(String),
    /// An item of an associative list, by the canonical JSON of its key fields.
    Key(String),
    /// An item of a set list, by the canonical JSON of its value.
    Value(String),
}

impl Element {
    fn encode(&self) -> String {
        match self {
            Self::Field(name) => format!("f:{name}"),
            Self::Key(key) => format!("k:{key}"),
            Self::Value(value) => format!("v:{value}"),
        }
    }

    fn decode(text: &str) -> Option<Self> {
        let (kind, rest) = text.split_at_checked(2)?;
        match kind {
            "f:" => Some(Self::Field(rest.to_owned())),
            // Re-encoded so that equal keys compare equal however they were written.
            "k:" => Some(Self::Key(
                serde_json::from_str::<Value>(rest).ok()?.to_string(),
            )),
            "v:" => Some(Self::Value(
                serde_json::from_str::<Value>(rest).ok()?.to_string(),
            )),
            _ => None,
        }
    }
}

/// A path from the object's root.
pub type Path = Vec<Element>;

/// A set of paths.
pub type FieldSet = BTreeSet<Path>;

/// How the items of a list merge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    /// Replaced whole; owned as one field.
    Atomic,
    /// Scalars, merged as a set.
    Set,
    /// Objects identified by these fields.
    Map(Vec<String>),
}

/// How the fields of an object merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapType {
    /// Fixed, declared fields (a struct): each owned separately.
    Struct,
    /// Arbitrary keys (labels, `data`, `additionalProperties`): each owned separately, and the
    /// map itself too when a write creates it.
    Granular,
    /// Replaced whole; owned as one field.
    Atomic,
}

/// What a type says of the lists and objects at a path (list items appear in the path as
/// [`Element::Key`] or [`Element::Value`]; implementations look only at field names).
pub trait Shape {
    /// The list type of the list at `path`.
    fn list_type(&self, path: &[Element]) -> ListType;
    /// The map type of the object at `path`.
    fn map_type(&self, path: &[Element]) -> MapType;
}

/// The field names along `path`, list items as `[]` (what a [`Shape`] usually keys on).
pub fn field_names(path: &[Element]) -> Vec<&str> {
    path.iter()
        .map(|e| match e {
            Element::Field(name) => name.as_str(),
            Element::Key(_) | Element::Value(_) => "[]",
        })
        .collect()
}

/// Paths that are never owned: identity and server-managed metadata.
fn ignored(path: &[Element]) -> bool {
    match path {
        [Element::Field(f)] => matches!(f.as_str(), "apiVersion" | "kind"),
        [Element::Field(m), Element::Field(f)] if m == "metadata" => matches!(
            f.as_str(),
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "generation"
                | "creationTimestamp"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
                | "managedFields"
                | "selfLink"
        ),
        _ => false,
    }
}

/// The key of an associative list item: its key fields as canonical JSON.
fn item_key(item: &Value, keys: &[String]) -> Option<String> {
    let object = item.as_object()?;
    let mut key = Map::new();
    for name in keys {
        if let Some(v) = object.get(name) {
            key.insert(name.clone(), v.clone());
        }
    }
    if key.is_empty() {
        return None;
    }
    Some(Value::Object(key).to_string())
}

fn list_item_element(item: &Value, list: &ListType) -> Option<Element> {
    match list {
        ListType::Atomic => None,
        ListType::Set => Some(Element::Value(item.to_string())),
        ListType::Map(keys) => item_key(item, keys).map(Element::Key),
    }
}

/// Walks `value` at `path`, inserting what it owns: leaves, atomic lists and maps, list items,
/// empty objects — and, with `nodes`, every granular map too (what a write that creates a map
/// is recorded as owning).
fn collect(value: &Value, shape: &dyn Shape, path: &mut Path, nodes: bool, out: &mut FieldSet) {
    if ignored(path) {
        return;
    }
    match value {
        Value::Object(map) => {
            let kind = shape.map_type(path);
            if kind == MapType::Atomic {
                out.insert(path.clone());
                return;
            }
            if map.is_empty() || (nodes && kind == MapType::Granular && !path.is_empty()) {
                out.insert(path.clone());
            }
            for (key, child) in map {
                path.push(Element::Field(key.clone()));
                collect(child, shape, path, nodes, out);
                path.pop();
            }
        }
        Value::Array(items) => {
            let list = shape.list_type(path);
            if list == ListType::Atomic {
                out.insert(path.clone());
                return;
            }
            for item in items {
                match list_item_element(item, &list) {
                    Some(element) => {
                        path.push(element);
                        out.insert(path.clone());
                        if matches!(list, ListType::Map(_)) {
                            collect(item, shape, path, nodes, out);
                        }
                        path.pop();
                    }
                    // An item without its keys cannot be owned apart: the list is.
                    None => {
                        out.insert(path.clone());
                    }
                }
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

/// The fields `value` sets (what an apply configuration claims).
pub fn field_set(value: &Value, shape: &dyn Shape) -> FieldSet {
    let mut out = FieldSet::new();
    collect(value, shape, &mut Vec::new(), false, &mut out);
    out.remove(&Vec::new());
    out
}

fn node_set(value: &Value, shape: &dyn Shape) -> FieldSet {
    let mut out = FieldSet::new();
    collect(value, shape, &mut Vec::new(), true, &mut out);
    out.remove(&Vec::new());
    out
}

/// The node at `path` in `value`.
pub fn lookup<'a>(value: &'a Value, path: &[Element]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, element| match element {
        Element::Field(name) => v.as_object()?.get(name),
        Element::Key(key) => {
            let key: Map<String, Value> = serde_json::from_str(key).ok()?;
            v.as_array()?.iter().find(|item| {
                item.as_object()
                    .is_some_and(|o| key.iter().all(|(k, kv)| o.get(k) == Some(kv)))
            })
        }
        Element::Value(text) => {
            let wanted: Value = serde_json::from_str(text).ok()?;
            v.as_array()?.iter().find(|item| **item == wanted)
        }
    })
}

/// Whether `path` names a node whose value is compared as a whole (a scalar, or an atomic list
/// or map) rather than through its children.
fn is_leaf(value: &Value) -> bool {
    !matches!(value, Value::Object(m) if !m.is_empty())
}

/// What changed between two versions of an object, as kube's field manager sees it.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Present only in the new version.
    pub added: FieldSet,
    /// Present in both, with another value.
    pub modified: FieldSet,
    /// Present only in the old version.
    pub removed: FieldSet,
}

/// Compares two versions of an object.
pub fn compare(old: Option<&Value>, new: &Value, shape: &dyn Shape) -> Comparison {
    let new_nodes = node_set(new, shape);
    let old_nodes = old.map(|o| node_set(o, shape)).unwrap_or_default();
    let mut comparison = Comparison {
        added: new_nodes.difference(&old_nodes).cloned().collect(),
        removed: old_nodes.difference(&new_nodes).cloned().collect(),
        modified: FieldSet::new(),
    };
    if let Some(old) = old {
        for path in new_nodes.intersection(&old_nodes) {
            let (a, b) = (lookup(old, path), lookup(new, path));
            if let (Some(a), Some(b)) = (a, b)
                && a != b
                && (is_leaf(a) || is_leaf(b) || is_atomic(path, b, shape))
            {
                comparison.modified.insert(path.clone());
            }
        }
    }
    comparison
}

fn is_atomic(path: &[Element], value: &Value, shape: &dyn Shape) -> bool {
    match value {
        Value::Array(_) => shape.list_type(path) == ListType::Atomic,
        Value::Object(_) => shape.map_type(path) == MapType::Atomic,
        _ => true,
    }
}

/// Encodes a field set as `FieldsV1`.
pub fn encode(set: &FieldSet) -> Value {
    #[derive(Default)]
    struct Node {
        member: bool,
        children: BTreeMap<String, Node>,
    }
    fn to_json(node: &Node) -> Value {
        let mut map = Map::new();
        if node.member && !node.children.is_empty() {
            map.insert(".".into(), json!({}));
        }
        for (key, child) in &node.children {
            map.insert(key.clone(), to_json(child));
        }
        Value::Object(map)
    }
    let mut root = Node::default();
    for path in set {
        let mut node = &mut root;
        for element in path {
            node = node.children.entry(element.encode()).or_default();
        }
        node.member = true;
    }
    to_json(&root)
}

/// Decodes `FieldsV1`.
///
/// # Errors
/// A message if it is not a tree of objects keyed `f:`, `k:`, `v:` or `.`.
pub fn decode(fields: &Value) -> Result<FieldSet, String> {
    fn walk(value: &Value, path: &mut Path, out: &mut FieldSet) -> Result<(), String> {
        let map = value
            .as_object()
            .ok_or_else(|| "fieldsV1 must be a tree of objects".to_owned())?;
        if map.is_empty() && !path.is_empty() {
            out.insert(path.clone());
        }
        for (key, child) in map {
            if key == "." {
                if !path.is_empty() {
                    out.insert(path.clone());
                }
                continue;
            }
            let element =
                Element::decode(key).ok_or_else(|| format!("unknown path element {key:?}"))?;
            path.push(element);
            walk(child, path, out)?;
            path.pop();
        }
        Ok(())
    }
    let mut out = FieldSet::new();
    walk(fields, &mut Vec::new(), &mut out)?;
    Ok(out)
}

/// Prints a path as kube does in conflicts: `.spec.containers[name="web"].image`.
pub fn path_string(path: &[Element]) -> String {
    let mut out = String::new();
    for element in path {
        match element {
            Element::Field(name) => {
                out.push('.');
                out.push_str(name);
            }
            Element::Key(key) => {
                let fields: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
                let parts: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
            Element::Value(value) => out.push_str(&format!("[={value}]")),
        }
    }
    out
}

/// Apply or Update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Any other write.
    Update,
}

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// `manager`.
    pub manager: String,
    /// `operation`.
    pub operation: Operation,
    /// `apiVersion` the write used.
    pub api_version: String,
    /// `subresource` (`status`, `scale`) or empty.
    pub subresource: String,
    /// `time`.
    pub time: Option<String>,
    /// `fieldsV1`.
    pub fields: FieldSet,
}

impl Entry {
    /// Whether this entry is the one `me` writes to (appliers are one manager whatever the
    /// API version they used).
    fn is(&self, me: &Manager) -> bool {
        self.manager == me.name
            && self.operation == me.operation
            && self.subresource == me.subresource
            && (me.operation == Operation::Apply || self.api_version == me.api_version)
    }

    /// How kube names this manager in a conflict: `"kubectl-edit" using v1`.
    fn describe(&self) -> String {
        let mut text = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            text.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            text.push_str(&format!(" using {}", self.api_version));
        }
        text
    }
}

/// Who is writing.
#[derive(Clone, Debug)]
pub struct Manager {
    /// `fieldManager`.
    pub name: String,
    /// Apply or Update.
    pub operation: Operation,
    /// The API version of the request.
    pub api_version: String,
    /// The subresource written, or empty.
    pub subresource: String,
    /// The time to record.
    pub time: String,
}

/// Reads `metadata.managedFields`.
///
/// # Errors
/// A message naming what is malformed.
pub fn read_entries(object: &Value) -> Result<Vec<Entry>, String> {
    let Some(list) = object.pointer("/metadata/managedFields") else {
        return Ok(Vec::new());
    };
    let Some(list) = list.as_array() else {
        return Ok(Vec::new());
    };
    let mut entries = Vec::new();
    for item in list {
        let text = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let operation = match text("operation").as_str() {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            other => return Err(format!("unknown operation {other:?}")),
        };
        let fields = match item.get("fieldsV1") {
            Some(f) => decode(f)?,
            None => FieldSet::new(),
        };
        entries.push(Entry {
            manager: text("manager"),
            operation,
            api_version: text("apiVersion"),
            subresource: text("subresource"),
            time: item.get("time").and_then(Value::as_str).map(str::to_owned),
            fields,
        });
    }
    Ok(entries)
}

/// Writes `entries` (those with fields) as `metadata.managedFields`, in kube's order.
pub fn write_entries(object: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| {
        (
            a.operation,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
        return;
    }
    let list: Vec<Value> = entries
        .into_iter()
        .map(|e| {
            let mut item = Map::new();
            item.insert("manager".into(), json!(e.manager));
            item.insert(
                "operation".into(),
                json!(match e.operation {
                    Operation::Apply => "Apply",
                    Operation::Update => "Update",
                }),
            );
            item.insert("apiVersion".into(), json!(e.api_version));
            if let Some(time) = e.time {
                item.insert("time".into(), json!(time));
            }
            item.insert("fieldsType".into(), json!("FieldsV1"));
            item.insert("fieldsV1".into(), encode(&e.fields));
            if !e.subresource.is_empty() {
                item.insert("subresource".into(), json!(e.subresource));
            }
            Value::Object(item)
        })
        .collect();
    meta.insert("managedFields".into(), Value::Array(list));
}

/// Keeps only the paths that exist in `object`.
fn existing(set: &FieldSet, object: &Value) -> FieldSet {
    set.iter()
        .filter(|p| lookup(object, p).is_some())
        .cloned()
        .collect()
}

/// Sets `me`'s entry to `fields`, keeping its time when nothing changed.
fn set_entry(entries: &mut Vec<Entry>, me: &Manager, fields: FieldSet) {
    match entries.iter_mut().find(|e| e.is(me)) {
        Some(entry) => {
            if entry.fields != fields {
                entry.fields = fields;
                entry.time = Some(me.time.clone());
            }
            entry.api_version = me.api_version.clone();
        }
        None => entries.push(Entry {
            manager: me.name.clone(),
            operation: me.operation,
            api_version: me.api_version.clone(),
            subresource: me.subresource.clone(),
            time: Some(me.time.clone()),
            fields,
        }),
    }
}

/// Records an ordinary write of `new` over `old` (`None`: a create) by `me`: it owns what it
/// added or changed, which other managers lose; what it removed leaves every set.
pub fn record_update(
    entries: &mut Vec<Entry>,
    old: Option<&Value>,
    new: &Value,
    shape: &dyn Shape,
    me: &Manager,
) {
    let changes = compare(old, new, shape);
    let taken: FieldSet = changes.added.union(&changes.modified).cloned().collect();
    for entry in entries.iter_mut().filter(|e| !e.is(me)) {
        entry.fields = entry
            .fields
            .difference(&taken)
            .filter(|p| !changes.removed.contains(*p))
            .cloned()
            .collect();
    }
    let mine = entries
        .iter()
        .find(|e| e.is(me))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let mine: FieldSet = mine
        .union(&taken)
        .filter(|p| !changes.removed.contains(*p))
        .cloned()
        .collect();
    if !mine.is_empty() || entries.iter().any(|e| e.is(me)) {
        set_entry(entries, me, existing(&mine, new));
    }
    for entry in entries.iter_mut() {
        entry.fields = existing(&entry.fields, new);
    }
    entries.retain(|e| !e.fields.is_empty());
}

/// A field another manager owns that an apply would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// How kube names the manager: `"kubectl-edit" using v1`.
    pub manager: String,
    /// The field, as kube prints it: `.data.color`.
    pub field: String,
}

/// kube's message for a failed apply.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [one] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            one.manager, one.field
        );
    }
    let mut by_manager: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for c in conflicts {
        by_manager.entry(&c.manager).or_default().push(&c.field);
    }
    let mut lines = Vec::new();
    for (manager, fields) in by_manager {
        lines.push(format!("conflicts with {manager}:"));
        lines.extend(fields.iter().map(|f| format!("- {f}")));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// Merges `config` into `live` (`config` wins; lists and maps by their type).
pub fn merge(live: &Value, config: &Value, shape: &dyn Shape) -> Value {
    fn go(live: &Value, config: &Value, shape: &dyn Shape, path: &mut Path) -> Value {
        match (live, config) {
            (Value::Object(l), Value::Object(c)) if shape.map_type(path) != MapType::Atomic => {
                let mut out = l.clone();
                for (key, value) in c {
                    path.push(Element::Field(key.clone()));
                    let merged = match l.get(key) {
                        Some(old) => go(old, value, shape, path),
                        None => value.clone(),
                    };
                    path.pop();
                    out.insert(key.clone(), merged);
                }
                Value::Object(out)
            }
            (Value::Array(l), Value::Array(c)) => {
                let list = shape.list_type(path);
                if list == ListType::Atomic {
                    return config.clone();
                }
                let mut out = l.clone();
                for item in c {
                    let Some(element) = list_item_element(item, &list) else {
                        return config.clone();
                    };
                    let position = l
                        .iter()
                        .position(|i| list_item_element(i, &list).as_ref() == Some(&element));
                    match position {
                        Some(at) => {
                            path.push(element);
                            out[at] = go(&l[at], item, shape, path);
                            path.pop();
                        }
                        None => out.push(item.clone()),
                    }
                }
                Value::Array(out)
            }
            _ => config.clone(),
        }
    }
    go(live, config, shape, &mut Vec::new())
}

/// Removes the node at `path` from `value`.
fn remove(value: &mut Value, path: &[Element]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut node = value;
    for element in parent {
        let next = match element {
            Element::Field(name) => node.as_object_mut().and_then(|m| m.get_mut(name)),
            other => {
                let wanted = other.clone();
                node.as_array_mut()
                    .and_then(|items| items.iter_mut().find(|i| matches_element(i, &wanted)))
            }
        };
        match next {
            Some(next) => node = next,
            None => return,
        }
    }
    match last {
        Element::Field(name) => {
            if let Some(map) = node.as_object_mut() {
                map.remove(name);
            }
        }
        other => {
            if let Some(items) = node.as_array_mut() {
                items.retain(|i| !matches_element(i, other));
            }
        }
    }
}

fn matches_element(item: &Value, element: &Element) -> bool {
    lookup(&json!([item]), std::slice::from_ref(element)).is_some()
}

/// Server-side apply of `config` by `me` onto `live` (`None`: the object does not exist yet).
/// Returns the new object, its entries updated.
///
/// # Errors
/// The conflicts, unless `force`.
pub fn apply(
    entries: &mut Vec<Entry>,
    live: Option<&Value>,
    config: &Value,
    shape: &dyn Shape,
    me: &Manager,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let applied = field_set(config, shape);
    let mut merged = match live {
        Some(live) => merge(live, config, shape),
        None => config.clone(),
    };
    let changes = compare(live, &merged, shape);
    let changed: FieldSet = changes.added.union(&changes.modified).cloned().collect();
    let mut conflicts = Vec::new();
    for entry in entries.iter_mut().filter(|e| !e.is(me)) {
        let clashing: FieldSet = entry.fields.intersection(&changed).cloned().collect();
        if clashing.is_empty() {
            continue;
        }
        if force {
            entry.fields = entry.fields.difference(&clashing).cloned().collect();
        } else {
            let manager = entry.describe();
            conflicts.extend(clashing.iter().map(|p| Conflict {
                manager: manager.clone(),
                field: path_string(p),
            }));
        }
    }
    if !conflicts.is_empty() {
        return Err(conflicts);
    }
    // Fields this applier set before, left out now and owned by nobody else, go.
    let before = entries
        .iter()
        .find(|e| e.is(me))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others: FieldSet = entries
        .iter()
        .filter(|e| !e.is(me))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    let kept_by_others = |path: &Path| {
        others
            .iter()
            .any(|o| o.len() >= path.len() && o[..path.len()] == path[..])
    };
    for path in before.difference(&applied) {
        if !kept_by_others(path) && !applied.iter().any(|a| a.starts_with(path)) {
            remove(&mut merged, path);
        }
    }
    set_entry(entries, me, applied);
    for entry in entries.iter_mut() {
        entry.fields = existing(&entry.fields, &merged);
    }
    entries.retain(|e| !e.fields.is_empty());
    Ok(merged)
}

#[cfg(test)]
mod tests;
