//! The compiled schema tree: each node's type and constraints, and the keywords read from JSON.

use std::collections::BTreeMap;
use std::sync::Arc;

use cel::Program;
use serde_json::Value;

/// A JSON type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Type {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Type {
    pub(crate) fn parse(s: &str) -> Option<Self> {
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

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Object => "object",
            Self::Array => "array",
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
        }
    }

    pub(crate) fn matches(self, value: &Value) -> bool {
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
pub(crate) enum Additional {
    Allowed(bool),
    Schema(Box<Node>),
}

/// `x-kubernetes-list-type`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListType {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// One compiled schema node.
#[derive(Clone, Debug, Default)]
pub(crate) struct Node {
    pub(crate) kind: Option<Type>,
    pub(crate) nullable: bool,
    pub(crate) format: Option<String>,
    pub(crate) enumeration: Vec<Value>,
    pub(crate) pattern: Option<(String, regex::Regex)>,
    pub(crate) minimum: Option<f64>,
    pub(crate) maximum: Option<f64>,
    pub(crate) exclusive_minimum: bool,
    pub(crate) exclusive_maximum: bool,
    pub(crate) multiple_of: Option<f64>,
    pub(crate) min_length: Option<usize>,
    pub(crate) max_length: Option<usize>,
    pub(crate) min_items: Option<usize>,
    pub(crate) max_items: Option<usize>,
    pub(crate) unique_items: bool,
    pub(crate) min_properties: Option<usize>,
    pub(crate) max_properties: Option<usize>,
    pub(crate) required: Vec<String>,
    pub(crate) properties: BTreeMap<String, Node>,
    pub(crate) additional: Option<Box<Additional>>,
    pub(crate) items: Option<Box<Node>>,
    pub(crate) all_of: Vec<Node>,
    pub(crate) any_of: Vec<Node>,
    pub(crate) one_of: Vec<Node>,
    pub(crate) not: Option<Box<Node>>,
    pub(crate) int_or_string: bool,
    pub(crate) preserve_unknown: bool,
    pub(crate) embedded_resource: bool,
    pub(crate) list_type: Option<ListType>,
    /// `x-kubernetes-map-type: atomic`.
    pub(crate) map_atomic: bool,
    pub(crate) default: Option<Value>,
    /// `x-kubernetes-validations`.
    pub(crate) rules: Vec<Arc<Rule>>,
}

pub(crate) fn number(v: &Value, key: &str) -> Option<f64> {
    v.get(key)?.as_f64()
}

pub(crate) fn count(v: &Value, key: &str) -> Option<usize> {
    v.get(key)?.as_u64().map(|n| n as usize)
}

pub(crate) fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

pub(crate) fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

/// One compiled `x-kubernetes-validations` entry.
pub(crate) struct Rule {
    pub(crate) source: String,
    pub(crate) program: Program,
    pub(crate) message: Option<String>,
    pub(crate) message_expression: Option<Program>,
    pub(crate) reason: Option<String>,
    pub(crate) field_path: Option<String>,
    pub(crate) optional_old_self: bool,
    pub(crate) transition: bool,
    /// The depth of the deeper of the rule's and its message expression's trees: a deep rule
    /// is evaluated on a large stack (see `stack`).
    pub(crate) depth: usize,
    /// The fields of `self`/`oldSelf` the rule reads, when it reads them only as `self.<field>`:
    /// only those are converted for CEL (a large object's other fields are not copied).
    pub(crate) fields: Option<std::collections::BTreeSet<String>>,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule").field("rule", &self.source).finish()
    }
}
