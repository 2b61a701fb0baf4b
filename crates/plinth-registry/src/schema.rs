//! The shapes of the built-in types, for what kube-apiserver's typed decoding gives for free:
//! wrong JSON types are a 400 ("cannot unmarshal number into Go struct field ConfigMap.data of
//! type string"), and unknown fields are reported per `fieldValidation` (Strict: 400; Warn: a
//! `Warning` header; Ignore: dropped).

use serde_json::{Map, Value};

/// The shape of a value.
#[derive(Clone, Debug)]
pub enum Schema {
    /// Anything, kept as is.
    Any,
    /// A number or a string (Go's `intstr.IntOrString`: ports, `maxUnavailable`), kept as is.
    IntOrString,
    /// A quantity (`500m`, `1Gi`, or a number), kept as is.
    Quantity,
    /// A string (Go `string`).
    String,
    /// An integer (Go `int32`/`int64`).
    Int,
    /// A boolean.
    Bool,
    /// A base64 string (Go `[]byte`).
    Bytes,
    /// An object with exactly these fields.
    Object(Vec<(&'static str, Schema)>),
    /// `map[string]T`.
    Map(Box<Schema>),
    /// `[]T`.
    Array(Box<Schema>),
}

/// What checking found.
#[derive(Debug, Default)]
pub struct Findings {
    /// The first type error, as Go's decoder words it (without the kind prefix).
    pub type_error: Option<String>,
    /// Paths of fields the schema does not declare (`spec.foo`, `items[0].x`).
    pub unknown: Vec<String>,
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn go_type(schema: &Schema) -> String {
    match schema {
        Schema::Any => "interface {}".into(),
        Schema::IntOrString => "intstr.IntOrString".into(),
        Schema::Quantity => "resource.Quantity".into(),
        Schema::String => "string".into(),
        Schema::Int => "int64".into(),
        Schema::Bool => "bool".into(),
        Schema::Bytes => "[]uint8".into(),
        Schema::Object(_) => "struct".into(),
        Schema::Map(inner) => format!("map[string]{}", go_type(inner)),
        Schema::Array(inner) => format!("[]{}", go_type(inner)),
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

/// Checks `value` against `schema`; `kind` names the Go struct in type errors.
pub fn check(value: &Value, schema: &Schema, kind: &str) -> Findings {
    let mut findings = Findings::default();
    walk(value, schema, "", kind, &mut findings);
    findings
}

fn walk(value: &Value, schema: &Schema, path: &str, kind: &str, findings: &mut Findings) {
    let mismatch = |findings: &mut Findings| {
        if findings.type_error.is_none() {
            let field = if path.is_empty() {
                kind.to_owned()
            } else {
                format!("{kind}.{path}")
            };
            findings.type_error = Some(format!(
                "json: cannot unmarshal {} into Go struct field {field} of type {}",
                json_type(value),
                go_type(schema)
            ));
        }
    };
    if value.is_null() {
        return; // null is the zero value of every Go type
    }
    match schema {
        Schema::Any | Schema::IntOrString | Schema::Quantity => {}
        Schema::String if value.is_string() => {}
        Schema::Int if value.as_i64().is_some() => {}
        Schema::Bool if value.is_boolean() => {}
        Schema::Bytes => match value.as_str() {
            Some(s) if base64_ok(s) => {}
            Some(_) if findings.type_error.is_none() => {
                findings.type_error = Some(format!(
                    "illegal base64 data at input byte 0 (in field {kind}.{path})"
                ));
            }
            Some(_) => {}
            None => mismatch(findings),
        },
        Schema::Object(fields) => match value.as_object() {
            Some(map) => check_object(map, fields, path, kind, findings),
            None => mismatch(findings),
        },
        Schema::Map(inner) => match value.as_object() {
            Some(map) => {
                for (k, v) in map {
                    walk(v, inner, &format!("{path}[{k}]"), kind, findings);
                }
            }
            None => mismatch(findings),
        },
        Schema::Array(inner) => match value.as_array() {
            Some(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, inner, &format!("{path}[{i}]"), kind, findings);
                }
            }
            None => mismatch(findings),
        },
        _ => mismatch(findings),
    }
}

fn check_object(
    map: &Map<String, Value>,
    fields: &[(&'static str, Schema)],
    path: &str,
    kind: &str,
    findings: &mut Findings,
) {
    for (k, v) in map {
        match fields.iter().find(|(name, _)| name == k) {
            Some((_, schema)) => walk(v, schema, &join(path, k), kind, findings),
            None => findings.unknown.push(join(path, k)),
        }
    }
}

fn base64_ok(s: &str) -> bool {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).is_ok()
}

/// Removes the fields at `paths` (as [`Findings::unknown`] reports them) from `value`.
pub fn prune(value: &mut Value, schema: &Schema) {
    match (schema, value) {
        (Schema::Object(fields), Value::Object(map)) => {
            map.retain(|k, _| fields.iter().any(|(name, _)| name == k));
            for (name, field_schema) in fields {
                if let Some(v) = map.get_mut(*name) {
                    prune(v, field_schema);
                }
            }
        }
        (Schema::Map(inner), Value::Object(map)) => map.values_mut().for_each(|v| prune(v, inner)),
        (Schema::Array(inner), Value::Array(items)) => {
            items.iter_mut().for_each(|v| prune(v, inner))
        }
        _ => {}
    }
}

/// A struct with exactly these fields.
pub fn obj(fields: Vec<(&'static str, Schema)>) -> Schema {
    Schema::Object(fields)
}

/// `map[string]string`.
pub fn strings() -> Schema {
    Schema::Map(Box::new(Schema::String))
}

/// `[]T`.
pub fn array(of: Schema) -> Schema {
    Schema::Array(Box::new(of))
}

fn owner_reference() -> Schema {
    obj(vec![
        ("apiVersion", Schema::String),
        ("kind", Schema::String),
        ("name", Schema::String),
        ("uid", Schema::String),
        ("controller", Schema::Bool),
        ("blockOwnerDeletion", Schema::Bool),
    ])
}

/// `metav1.ObjectMeta`.
pub fn object_meta() -> Schema {
    obj(vec![
        ("name", Schema::String),
        ("generateName", Schema::String),
        ("namespace", Schema::String),
        ("selfLink", Schema::String),
        ("uid", Schema::String),
        ("resourceVersion", Schema::String),
        ("generation", Schema::Int),
        ("creationTimestamp", Schema::String),
        ("deletionTimestamp", Schema::String),
        ("deletionGracePeriodSeconds", Schema::Int),
        ("labels", strings()),
        ("annotations", strings()),
        ("ownerReferences", array(owner_reference())),
        ("finalizers", array(Schema::String)),
        ("managedFields", array(Schema::Any)),
    ])
}

/// `corev1.ObjectReference`.
pub fn object_reference() -> Schema {
    obj(vec![
        ("kind", Schema::String),
        ("namespace", Schema::String),
        ("name", Schema::String),
        ("uid", Schema::String),
        ("apiVersion", Schema::String),
        ("resourceVersion", Schema::String),
        ("fieldPath", Schema::String),
    ])
}

/// A top-level type: `apiVersion`, `kind`, `metadata`, then `fields`.
pub fn top(mut fields: Vec<(&'static str, Schema)>) -> Schema {
    fields.splice(
        0..0,
        [
            ("apiVersion", Schema::String),
            ("kind", Schema::String),
            ("metadata", object_meta()),
        ],
    );
    obj(fields)
}
