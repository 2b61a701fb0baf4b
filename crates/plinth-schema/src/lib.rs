//! Structural OpenAPI v3 schemas of CustomResourceDefinitions: compiled once per CRD version,
//! then used to prune unknown fields, apply defaults and validate custom resources with the
//! messages apiextensions-apiserver gives (`spec.replicas: Invalid value: -1: spec.replicas in
//! body should be greater than or equal to 0`).
//!
//! This crate does no I/O. Causes are returned as [`plinth_core::Cause`]s for the API server to
//! put in a 422 `Status`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub(crate) mod cel;
mod cel_lib;
mod format;
mod stack;
mod structural;

pub use cel::{Evaluated, Expression};
pub use structural::structural_errors;

use std::collections::BTreeMap;
use std::sync::Arc;

use plinth_core::Cause;
use plinth_core::status::render_value;
use serde_json::{Map, Value};

/// A JSON type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Type {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "object" => Self::Object,
            "array" => Self::Array,
            "string" => Self::String,
            "integer" => Self::Integer,
            "number" => Self::Number,
            "boolean" => Self::Boolean,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::Object => "object",
            Self::Array => "array",
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
        }
    }

    fn matches(self, value: &Value) -> bool {
        match self {
            Self::Object => value.is_object(),
            Self::Array => value.is_array(),
            Self::String => value.is_string(),
            Self::Integer => {
                value.as_i64().is_some()
                    || value.as_u64().is_some()
                    || value.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            Self::Number => value.is_number(),
            Self::Boolean => value.is_boolean(),
        }
    }
}

/// `additionalProperties`.
#[derive(Clone, Debug)]
enum Additional {
    Allowed(bool),
    Schema(Box<Node>),
}

/// `x-kubernetes-list-type`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ListType {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// One compiled schema node.
#[derive(Clone, Debug, Default)]
struct Node {
    kind: Option<Type>,
    nullable: bool,
    format: Option<String>,
    enumeration: Vec<Value>,
    pattern: Option<(String, regex::Regex)>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    exclusive_minimum: bool,
    exclusive_maximum: bool,
    multiple_of: Option<f64>,
    min_length: Option<usize>,
    max_length: Option<usize>,
    min_items: Option<usize>,
    max_items: Option<usize>,
    unique_items: bool,
    min_properties: Option<usize>,
    max_properties: Option<usize>,
    required: Vec<String>,
    properties: BTreeMap<String, Node>,
    additional: Option<Box<Additional>>,
    items: Option<Box<Node>>,
    all_of: Vec<Node>,
    any_of: Vec<Node>,
    one_of: Vec<Node>,
    not: Option<Box<Node>>,
    int_or_string: bool,
    preserve_unknown: bool,
    embedded_resource: bool,
    list_type: Option<ListType>,
    /// `x-kubernetes-map-type: atomic`.
    map_atomic: bool,
    default: Option<Value>,
    /// `x-kubernetes-validations`.
    rules: Vec<Arc<cel::Rule>>,
}

/// A schema that cannot be compiled (the CRD is refused with it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct SchemaError {
    /// Where in the schema.
    pub path: String,
    /// What is wrong.
    pub reason: String,
    /// Which kind of field error kube reports.
    pub kind: SchemaErrorKind,
}

/// The field error a [`SchemaError`] becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchemaErrorKind {
    /// `Invalid value: "": <reason>`.
    Invalid,
    /// `Invalid value: <this text, as Go prints the value>: <reason>`.
    InvalidValue(String),
    /// `Forbidden: <reason>`.
    Forbidden,
    /// `Required value`.
    Required,
    /// `Unsupported value: "<reason>": supported values: ...` (the reason is the value).
    NotSupported(Vec<String>),
}

impl SchemaError {
    /// The cause kube-apiserver reports, under `prefix` (e.g. `spec.validation`).
    pub fn cause(&self, prefix: &str) -> Cause {
        let field = format!("{prefix}.{}", self.path);
        match &self.kind {
            SchemaErrorKind::Invalid => {
                Cause::invalid(field, &Value::String(String::new()), &self.reason)
            }
            SchemaErrorKind::InvalidValue(shown) => Cause::new(
                "FieldValueInvalid",
                field,
                format!("Invalid value: {shown}: {}", self.reason),
            ),
            SchemaErrorKind::Forbidden => Cause::forbidden(field, &self.reason),
            SchemaErrorKind::Required => Cause::required(field, &self.reason),
            SchemaErrorKind::NotSupported(supported) => Cause::new(
                "FieldValueNotSupported",
                field,
                format!(
                    "Unsupported value: {:?}: supported values: {}",
                    self.reason,
                    supported
                        .iter()
                        .map(|s| format!("{s:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
        }
    }
}

fn number(v: &Value, key: &str) -> Option<f64> {
    v.get(key)?.as_f64()
}

fn count(v: &Value, key: &str) -> Option<usize> {
    v.get(key)?.as_u64().map(|n| n as usize)
}

fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Compiles one schema node; `cardinality` is how many times it may occur in an object, when
/// every list and map around it declares its maximum (`None` when one does not).
fn compile_node(v: &Value, path: &str, cardinality: Option<f64>) -> Result<Node, SchemaError> {
    let fail = |reason: String| SchemaError {
        path: path.to_owned(),
        reason,
        kind: SchemaErrorKind::Invalid,
    };
    let Some(map) = v.as_object() else {
        return Err(fail("must be an object".into()));
    };
    let kind = match map.get("type").and_then(Value::as_str) {
        None | Some("") => None,
        Some(t) => {
            Some(Type::parse(t).ok_or_else(|| fail(format!("type: Unsupported value: {t:?}")))?)
        }
    };
    let pattern = match map.get("pattern").and_then(Value::as_str) {
        None => None,
        Some(p) => Some((
            p.to_owned(),
            regex::Regex::new(p)
                .map_err(|e| fail(format!("pattern: Invalid value: {p:?}: {e}")))?,
        )),
    };
    let sub = |key: &str| -> Result<Vec<Node>, SchemaError> {
        map.get(key)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .enumerate()
                    .map(|(i, s)| compile_node(s, &format!("{path}.{key}[{i}]"), cardinality))
                    .collect()
            })
            .unwrap_or_else(|| Ok(Vec::new()))
    };
    let mut properties = BTreeMap::new();
    if let Some(Value::Object(props)) = map.get("properties") {
        for (name, schema) in props {
            properties.insert(
                name.clone(),
                compile_node(schema, &format!("{path}.properties[{name}]"), cardinality)?,
            );
        }
    }
    let additional = match map.get("additionalProperties") {
        None => None,
        Some(Value::Bool(b)) => Some(Box::new(Additional::Allowed(*b))),
        Some(schema) => Some(Box::new(Additional::Schema(Box::new(compile_node(
            schema,
            &format!("{path}.additionalProperties"),
            cardinality
                .zip(count(v, "maxProperties"))
                .map(|(c, n)| c * n as f64),
        )?)))),
    };
    let list_type = match map.get("x-kubernetes-list-type").and_then(Value::as_str) {
        None => None,
        Some("atomic") => Some(ListType::Atomic),
        Some("set") => Some(ListType::Set),
        Some("map") => Some(ListType::Map(
            map.get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| {
                    k.iter()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        )),
        Some(other) => {
            return Err(fail(format!(
                "x-kubernetes-list-type: Unsupported value: {other:?}"
            )));
        }
    };
    let mut node = Node {
        kind,
        nullable: flag(v, "nullable"),
        format: map.get("format").and_then(Value::as_str).map(str::to_owned),
        enumeration: map
            .get("enum")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        pattern,
        minimum: number(v, "minimum"),
        maximum: number(v, "maximum"),
        exclusive_minimum: flag(v, "exclusiveMinimum"),
        exclusive_maximum: flag(v, "exclusiveMaximum"),
        multiple_of: number(v, "multipleOf"),
        min_length: count(v, "minLength"),
        max_length: count(v, "maxLength"),
        min_items: count(v, "minItems"),
        max_items: count(v, "maxItems"),
        unique_items: flag(v, "uniqueItems"),
        min_properties: count(v, "minProperties"),
        max_properties: count(v, "maxProperties"),
        required: map
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        properties,
        additional,
        items: match map.get("items") {
            Some(items) => Some(Box::new(compile_node(
                items,
                &format!("{path}.items"),
                cardinality
                    .zip(count(v, "maxItems"))
                    .map(|(c, n)| c * n as f64),
            )?)),
            None => None,
        },
        all_of: sub("allOf")?,
        any_of: sub("anyOf")?,
        one_of: sub("oneOf")?,
        not: match map.get("not") {
            Some(n) => Some(Box::new(compile_node(
                n,
                &format!("{path}.not"),
                cardinality,
            )?)),
            None => None,
        },
        int_or_string: flag(v, "x-kubernetes-int-or-string"),
        preserve_unknown: flag(v, "x-kubernetes-preserve-unknown-fields"),
        embedded_resource: flag(v, "x-kubernetes-embedded-resource"),
        list_type,
        map_atomic: map.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic"),
        default: map.get("default").cloned(),
        rules: Vec::new(),
    };
    let runs = cardinality.unwrap_or_else(|| unbounded_cardinality(v));
    node.rules = cel::compile_rules(map.get("x-kubernetes-validations"), &node, path, runs)?;
    Ok(node)
}

/// How many times data of this schema can occur in one request when some list or map around it
/// is unbounded: as many as fit, at its smallest JSON size plus a comma (kube's estimate).
fn unbounded_cardinality(v: &Value) -> f64 {
    3_145_728.0 / (min_json_size(v) + 1.0)
}

/// The smallest JSON a value of this schema can be (required properties included).
fn min_json_size(v: &Value) -> f64 {
    match v.get("type").and_then(Value::as_str) {
        Some("boolean") => 4.0,
        Some("number" | "integer") => 1.0,
        Some("string") => 2.0 + count(v, "minLength").unwrap_or(0) as f64,
        Some("object") => {
            let required = v.get("required").and_then(Value::as_array);
            2.0 + required
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter_map(|name| {
                    let prop = v.pointer(&format!("/properties/{name}"))?;
                    Some(name.len() as f64 + min_json_size(prop) + 4.0)
                })
                .sum::<f64>()
        }
        _ => 2.0,
    }
}

/// A compiled CRD version schema.
#[derive(Clone, Debug)]
pub struct Schema {
    root: Node,
    /// Whether any node has `x-kubernetes-validations` (then kube runs its CEL validator).
    has_rules: bool,
}

/// What validation found: schema errors, and the CEL rules' (kept apart, as kube evaluates
/// the rules only when the schema errors do not block them).
#[derive(Default)]
struct Found {
    schema: Vec<Cause>,
    rules: Vec<Cause>,
}

impl Found {
    fn push(&mut self, cause: Cause) {
        self.schema.push(cause);
    }
}

/// Schema errors after which kube does not evaluate CEL rules (apiextensions'
/// `hasBlockingErr`): the object does not have the shape the rules were written for.
fn blocking(cause: &Cause) -> bool {
    matches!(
        cause.reason.as_str(),
        "FieldValueNotSupported"
            | "FieldValueRequired"
            | "FieldValueTooLong"
            | "FieldValueTooMany"
            | "FieldValueTypeInvalid"
    )
}

/// Whether `node` or anything below it has CEL rules.
fn any_rules(node: &Node) -> bool {
    !node.rules.is_empty()
        || node.properties.values().any(any_rules)
        || node.items.as_deref().is_some_and(any_rules)
        || matches!(node.additional.as_deref(), Some(Additional::Schema(sub)) if any_rules(sub))
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

impl Schema {
    /// The node at `path` (field names; `[]` for a list's items), if the schema declares it.
    fn node_at(&self, path: &[&str]) -> Option<&Node> {
        path.iter().try_fold(&self.root, |node, step| {
            if *step == "[]" {
                return node.items.as_deref();
            }
            match node.properties.get(*step) {
                Some(child) => Some(child),
                None => match node.additional.as_deref() {
                    Some(Additional::Schema(child)) => Some(child),
                    _ => None,
                },
            }
        })
    }

    /// How the list at `path` merges in server-side apply (`x-kubernetes-list-type`; atomic
    /// when unset, as in kube-apiserver).
    pub fn list_type_at(&self, path: &[&str]) -> plinth_core::managed::ListType {
        use plinth_core::managed::ListType as L;
        match self.node_at(path).and_then(|n| n.list_type.as_ref()) {
            Some(ListType::Set) => L::Set,
            Some(ListType::Map(keys)) => L::Map(keys.clone()),
            Some(ListType::Atomic) | None => L::Atomic,
        }
    }

    /// How the object at `path` merges in server-side apply: atomic
    /// (`x-kubernetes-map-type: atomic`), a granular map (`additionalProperties`), or a struct.
    pub fn map_type_at(&self, path: &[&str]) -> plinth_core::managed::MapType {
        use plinth_core::managed::MapType as M;
        match self.node_at(path) {
            Some(node) if node.map_atomic => M::Atomic,
            Some(node)
                if node.properties.is_empty()
                    && matches!(node.additional.as_deref(), Some(Additional::Schema(_))) =>
            {
                M::Granular
            }
            _ => M::Struct,
        }
    }

    /// Compiles an `openAPIV3Schema`.
    ///
    /// # Errors
    /// A [`SchemaError`] naming the place in the schema that cannot be used.
    pub fn compile(openapi_v3_schema: &Value) -> Result<Self, SchemaError> {
        // CEL parsing recurses as deep as a rule's text nests: see `stack`.
        let root = stack::on_stack(stack::COMPILE_STACK, || {
            compile_node(openapi_v3_schema, "openAPIV3Schema", Some(1.0))
        })
        .ok_or_else(|| SchemaError {
            path: "openAPIV3Schema".into(),
            reason: "the schema could not be compiled: no thread could be started".into(),
            kind: SchemaErrorKind::Forbidden,
        })??;
        Ok(Self {
            has_rules: any_rules(&root),
            root,
        })
    }

    /// Removes fields the schema does not declare (unless preserved), returning their paths
    /// (`spec.foo`). `apiVersion`, `kind` and `metadata` at the root are always kept.
    pub fn prune(&self, object: &mut Value) -> Vec<String> {
        let mut pruned = Vec::new();
        if let Value::Object(map) = object {
            for (key, value) in map.iter_mut() {
                if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(node) = self.root.properties.get(key) {
                    prune_node(node, value, key, &mut pruned);
                }
            }
            if !self.root.preserve_unknown {
                map.retain(|k, _| {
                    let keep = matches!(k.as_str(), "apiVersion" | "kind" | "metadata")
                        || self.root.properties.contains_key(k);
                    if !keep {
                        pruned.push(k.clone());
                    }
                    keep
                });
            }
        }
        pruned
    }

    /// Fills in defaults (`default` of absent fields, in objects, list items and map values).
    pub fn apply_defaults(&self, object: &mut Value) {
        default_node(&self.root, object);
    }

    /// Every cause that makes `object` invalid, with apiextensions' field paths and messages.
    pub fn validate(&self, object: &Value) -> Vec<Cause> {
        self.validate_update(object, None)
    }

    /// Validates an update: as [`Schema::validate`], plus the transition rules
    /// (`x-kubernetes-validations` using `oldSelf`) against the stored version `old`.
    pub fn validate_update(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Found::default();
        if let Value::Object(map) = object {
            for (key, node) in &self.root.properties {
                if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(value) = map.get(key) {
                    let before = old.and_then(|o| o.get(key));
                    validate_node(node, value, before, key, &mut causes);
                }
            }
            for rule in &self.root.rules {
                rule.check(&self.root, object, old, "", &mut causes.rules);
            }
            for required in &self.root.required {
                if !map.contains_key(required)
                    && !matches!(required.as_str(), "apiVersion" | "kind" | "metadata")
                {
                    causes.push(Cause::required(required.clone(), ""));
                }
            }
        }
        let Found {
            schema: mut all,
            rules,
        } = causes;
        if self.has_rules && all.iter().any(blocking) {
            // kube's message, on a nil field path.
            all.push(Cause::invalid(
                "<nil>",
                &Value::String("null".into()),
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            ));
        } else {
            all.extend(rules);
        }
        all
    }
}

fn prune_node(node: &Node, value: &mut Value, path: &str, pruned: &mut Vec<String>) {
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
const OBJECT_META_FIELDS: [&str; 15] = [
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
fn prune_object_meta(value: &mut Value, path: &str, pruned: &mut Vec<String>) {
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

fn default_node(node: &Node, value: &mut Value) {
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

fn invalid(path: &str, value: &Value, detail: String) -> Cause {
    Cause::invalid(path, value, &format!("{path} in body {detail}"))
}

/// A value of the wrong type: kube's `field.TypeInvalid` (worded as an invalid value).
fn type_invalid(path: &str, value: &Value, detail: String) -> Cause {
    let mut cause = invalid(path, value, detail);
    cause.reason = "FieldValueTypeInvalid".into();
    cause
}

fn validate_node(node: &Node, value: &Value, old: Option<&Value>, path: &str, causes: &mut Found) {
    if value.is_null() {
        if !node.nullable && node.kind.is_some() {
            causes.push(type_invalid(
                path,
                value,
                format!(
                    "must be of type {}: \"null\"",
                    node.kind.map_or("", Type::name)
                ),
            ));
        }
        return;
    }
    if node.int_or_string {
        if !(value.is_string() || Type::Integer.matches(value)) {
            let mut cause = Cause::invalid(
                path,
                value,
                &format!(
                    "{path} in body must be of type integer-or-string: {}",
                    json_type(value)
                ),
            );
            cause.reason = "FieldValueTypeInvalid".into();
            causes.push(cause);
            return;
        }
    } else if let Some(kind) = node.kind
        && !kind.matches(value)
    {
        causes.push(type_invalid(
            path,
            value,
            format!("must be of type {}: \"{}\"", kind.name(), json_type(value)),
        ));
        return;
    }
    if !node.enumeration.is_empty() && !node.enumeration.contains(value) {
        let supported: Vec<String> = node.enumeration.iter().map(render_value).collect();
        causes.push(Cause::new(
            "FieldValueNotSupported",
            path,
            format!(
                "Unsupported value: {}: supported values: {}",
                render_value(value),
                supported.join(", ")
            ),
        ));
    }
    match value {
        Value::String(s) => validate_string(node, s, value, path, &mut causes.schema),
        Value::Number(_) => validate_number(node, value, path, &mut causes.schema),
        Value::Array(items) => validate_array(node, items, old, value, path, causes),
        Value::Object(map) => validate_object(node, map, old, value, path, causes),
        _ => {}
    }
    for sub in &node.all_of {
        validate_node(sub, value, None, path, causes);
    }
    if !node.any_of.is_empty() && !node.any_of.iter().any(|sub| passes(sub, value, path)) {
        causes.push(Cause::invalid(
            path,
            value,
            &format!("{path} in body must match at least one schema in anyOf"),
        ));
    }
    if !node.one_of.is_empty() {
        let matching = node
            .one_of
            .iter()
            .filter(|sub| passes(sub, value, path))
            .count();
        if matching != 1 {
            causes.push(Cause::invalid(
                path,
                value,
                &format!("{path} in body must validate one and only one schema (oneOf)"),
            ));
        }
    }
    if let Some(not) = &node.not
        && passes(not, value, path)
    {
        causes.push(Cause::invalid(
            path,
            value,
            &format!("{path} in body must not validate the schema (not)"),
        ));
    }
    for rule in &node.rules {
        rule.check(node, value, old, path, &mut causes.rules);
    }
}

fn passes(node: &Node, value: &Value, path: &str) -> bool {
    let mut causes = Found::default();
    validate_node(node, value, None, path, &mut causes);
    causes.schema.is_empty() && causes.rules.is_empty()
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn validate_string(node: &Node, s: &str, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    let length = s.chars().count();
    if let Some(min) = node.min_length
        && length < min
    {
        causes.push(invalid(
            path,
            value,
            format!("should be at least {min} chars long"),
        ));
    }
    if let Some(max) = node.max_length
        && length > max
    {
        causes.push(Cause::new(
            "FieldValueTooLong",
            path,
            format!("Too long: may not be more than {max} bytes"),
        ));
    }
    if let Some((source, pattern)) = &node.pattern
        && !pattern.is_match(s)
    {
        causes.push(invalid(path, value, format!("should match '{source}'")));
    }
    if let Some(format) = &node.format
        && !format::valid(format, s)
    {
        causes.push(type_invalid(
            path,
            value,
            format!("must be of type {format}: {}", render_value(value)),
        ));
    }
}

fn validate_number(node: &Node, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(n) = value.as_f64() else { return };
    let show = |f: f64| {
        if f.fract() == 0.0 {
            format!("{}", f as i64)
        } else {
            f.to_string()
        }
    };
    if let Some(min) = node.minimum {
        if node.exclusive_minimum && n <= min {
            causes.push(invalid(
                path,
                value,
                format!("should be greater than {}", show(min)),
            ));
        } else if n < min {
            causes.push(invalid(
                path,
                value,
                format!("should be greater than or equal to {}", show(min)),
            ));
        }
    }
    if let Some(max) = node.maximum {
        if node.exclusive_maximum && n >= max {
            causes.push(invalid(
                path,
                value,
                format!("should be less than {}", show(max)),
            ));
        } else if n > max {
            causes.push(invalid(
                path,
                value,
                format!("should be less than or equal to {}", show(max)),
            ));
        }
    }
    if let Some(m) = node.multiple_of
        && m != 0.0
        && (n / m).fract().abs() > 1e-9
    {
        causes.push(invalid(
            path,
            value,
            format!("should be a multiple of {}", show(m)),
        ));
    }
    if let Some(format) = node.format.as_deref() {
        let fits = match format {
            "int32" => n.fract() == 0.0 && n >= f64::from(i32::MIN) && n <= f64::from(i32::MAX),
            "int64" => n.fract() == 0.0,
            _ => true,
        };
        if !fits {
            causes.push(type_invalid(
                path,
                value,
                format!("must be of type {format}: {}", render_value(value)),
            ));
        }
    }
}

fn validate_array(
    node: &Node,
    items: &[Value],
    old: Option<&Value>,
    value: &Value,
    path: &str,
    causes: &mut Found,
) {
    if let Some(min) = node.min_items
        && items.len() < min
    {
        causes.push(invalid(
            path,
            &Value::from(items.len()),
            format!("should have at least {min} items"),
        ));
    }
    if let Some(max) = node.max_items
        && items.len() > max
    {
        causes.push(Cause::new(
            "FieldValueTooMany",
            path,
            format!("Too many: {}: must have at most {max} items", items.len()),
        ));
    }
    if let Some(sub) = &node.items {
        // Items correlate with the old list's by key, for map lists only (as in kube).
        let old_items = old.and_then(Value::as_array);
        for (i, item) in items.iter().enumerate() {
            let before = match (&node.list_type, old_items) {
                (Some(ListType::Map(keys)), Some(old_items)) => old_items
                    .iter()
                    .find(|o| keys.iter().all(|k| o.get(k) == item.get(k))),
                _ => None,
            };
            validate_node(sub, item, before, &format!("{path}[{i}]"), causes);
        }
    }
    let duplicate = |i: usize, shown: &Value| {
        Cause::new(
            "FieldValueDuplicate",
            format!("{path}[{i}]"),
            format!("Duplicate value: {}", render_value(shown)),
        )
    };
    match &node.list_type {
        Some(ListType::Set) => {
            for (i, item) in items.iter().enumerate() {
                if items[..i].contains(item) {
                    causes.push(duplicate(i, item));
                }
            }
        }
        Some(ListType::Map(keys)) => {
            let key_of = |item: &Value| -> Value {
                Value::Object(
                    keys.iter()
                        .filter_map(|k| Some((k.clone(), item.get(k)?.clone())))
                        .collect(),
                )
            };
            for (i, item) in items.iter().enumerate() {
                let key = key_of(item);
                if items[..i].iter().any(|earlier| key_of(earlier) == key) {
                    causes.push(duplicate(i, &key));
                }
            }
        }
        _ => {
            if node.unique_items {
                for (i, item) in items.iter().enumerate() {
                    if items[..i].contains(item) {
                        causes.push(invalid(
                            path,
                            value,
                            "shouldn't contain duplicates".to_owned(),
                        ));
                        break;
                    }
                }
            }
        }
    }
}

fn validate_object(
    node: &Node,
    map: &Map<String, Value>,
    old: Option<&Value>,
    value: &Value,
    path: &str,
    causes: &mut Found,
) {
    if let Some(min) = node.min_properties
        && map.len() < min
    {
        causes.push(invalid(
            path,
            value,
            format!("should have at least {min} properties"),
        ));
    }
    if let Some(max) = node.max_properties
        && map.len() > max
    {
        causes.push(Cause::new(
            "FieldValueTooMany",
            path,
            format!("Too many: {}: must have at most {max} items", map.len()),
        ));
    }
    for required in &node.required {
        if !map.contains_key(required) {
            causes.push(Cause::required(join(path, required), ""));
        }
    }
    for (key, child) in map {
        let child_path = join(path, key);
        let before = old.and_then(|o| o.get(key));
        if let Some(sub) = node.properties.get(key) {
            validate_node(sub, child, before, &child_path, causes);
        } else {
            match node.additional.as_deref() {
                Some(Additional::Schema(sub)) => {
                    validate_node(sub, child, before, &child_path, causes)
                }
                Some(Additional::Allowed(false))
                    if !node.properties.is_empty() || !node.preserve_unknown =>
                {
                    causes.push(Cause::forbidden(
                        &child_path,
                        "additional properties are not allowed",
                    ));
                }
                _ => {}
            }
        }
    }
    if node.embedded_resource {
        validate_embedded_resource(map, path, &mut causes.schema);
    }
}

/// An embedded object (`x-kubernetes-embedded-resource`) is held to what every object is:
/// apiVersion and kind, and valid metadata (as apiextensions-apiserver's
/// `validateEmbeddedResource`).
fn validate_embedded_resource(map: &Map<String, Value>, path: &str, causes: &mut Vec<Cause>) {
    for field in ["apiVersion", "kind"] {
        let at = join(path, field);
        match map.get(field) {
            None => causes.push(Cause::required(at, "must not be empty")),
            Some(Value::String(s)) if s.is_empty() => {
                causes.push(Cause::invalid(
                    at,
                    &Value::String(String::new()),
                    "must not be empty",
                ));
            }
            Some(Value::String(s)) => {
                if field == "apiVersion" && s.matches('/').count() > 1 {
                    causes.push(Cause::invalid(
                        at,
                        &Value::String(s.clone()),
                        &format!("unexpected GroupVersion string: {s}"),
                    ));
                } else if field == "kind" {
                    let errors = plinth_core::validation::dns1035_label(&s.to_lowercase());
                    if !errors.is_empty() {
                        causes.push(Cause::invalid(
                            at,
                            &Value::String(s.clone()),
                            &format!(
                                "may have mixed case, but should otherwise match: {}",
                                errors.join(",")
                            ),
                        ));
                    }
                }
            }
            Some(other) => causes.push(Cause::invalid(at, other, "must be a string")),
        }
    }
    let Some(meta) = map.get("metadata") else {
        return;
    };
    let meta_path = join(path, "metadata");
    let Some(meta) = meta.as_object() else {
        causes.push(Cause::invalid(meta_path, meta, "must be an object"));
        return;
    };
    if let Some(name) = meta
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        for message in plinth_core::validation::path_segment_name(name) {
            causes.push(Cause::invalid(
                join(&meta_path, "name"),
                &Value::String(name.to_owned()),
                &message,
            ));
        }
    }
    if let Some(labels) = meta.get("labels").and_then(Value::as_object) {
        causes.extend(plinth_core::validation::labels(
            labels,
            &join(&meta_path, "labels"),
        ));
    }
    if let Some(annotations) = meta.get("annotations").and_then(Value::as_object) {
        causes.extend(plinth_core::validation::annotations(
            annotations,
            &join(&meta_path, "annotations"),
        ));
    }
}

#[cfg(test)]
mod tests;
