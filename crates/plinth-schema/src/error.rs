//! What is wrong with a schema, as kube reports it.

use plinth_core::Cause;
use serde_json::Value;

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
