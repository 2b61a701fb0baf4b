//! `meta.k8s.io/v1` Table output (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`),
//! which `kubectl get` asks for.

use plinth_core::meta::metadata;
use serde_json::{Value, json};

use crate::now;
use crate::resources::{ResourceDef, age_cell};

/// What each row carries besides its cells (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// Nothing.
    None,
    /// `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses the query parameter.
    pub fn parse(value: Option<&str>) -> Self {
        match value {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

fn definitions(def: &ResourceDef) -> Vec<Value> {
    let mut columns = vec![json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
    })];
    for column in &def.columns {
        columns.push(json!({
            "name": column.name, "type": column.kind, "format": column.format,
            "description": column.description, "priority": column.priority,
        }));
    }
    if def.age_column {
        columns.push(json!({
            "name": "Age", "type": "string", "format": "", "priority": 0,
            "description": "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
        }));
    }
    columns
}

fn row(def: &ResourceDef, object: &Value, include: IncludeObject, now: i64) -> Value {
    let mut cells = vec![json!(plinth_core::meta::name(object).unwrap_or(""))];
    for column in &def.columns {
        cells.push((column.cell)(object, now));
    }
    if def.age_column {
        cells.push(age_cell(object, "metadata.creationTimestamp", now));
    }
    let mut row = json!({"cells": cells});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            row["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": metadata(object).cloned().unwrap_or_default(),
            });
        }
        IncludeObject::Object => row["object"] = object.clone(),
    }
    row
}

/// A Table of a list.
pub fn of_list(def: &ResourceDef, list: &Value, include: IncludeObject) -> Value {
    let now = now();
    let rows: Vec<Value> = list["items"]
        .as_array()
        .map(|items| items.iter().map(|o| row(def, o, include, now)).collect())
        .unwrap_or_default();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list.get("metadata").cloned().unwrap_or(json!({})),
        "columnDefinitions": definitions(def),
        "rows": rows,
    })
}

/// A Table of one object; `headers: false` leaves out the column definitions (watch events after
/// the first).
pub fn of_object(
    def: &ResourceDef,
    object: &Value,
    include: IncludeObject,
    headers: bool,
) -> Value {
    let rv = object
        .pointer("/metadata/resourceVersion")
        .cloned()
        .unwrap_or(json!(""));
    let mut table = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "rows": [row(def, object, include, now())],
    });
    table["columnDefinitions"] = if headers {
        Value::Array(definitions(def))
    } else {
        Value::Null
    };
    if !headers && let Some(map) = table.as_object_mut() {
        map.remove("columnDefinitions");
    }
    table
}
