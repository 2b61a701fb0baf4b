//! `meta.k8s.io/v1` Table output (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`),
//! which `kubectl get` asks for.

use plinth_core::meta::metadata;
use serde_json::{Value, json};

use crate::EncodedList;
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

/// A Table of a list whose items are JSON bytes, in pieces of about `chunk` bytes, each made
/// when asked for: byte for byte what [`plinth_protobuf::to_json`] writes of [`of_list`] of
/// the list's value, holding one piece and one decoded item beside the list (a Table of ten
/// thousand objects is rows of ten thousand cells, not ten thousand objects decoded at once).
pub fn list_chunks(
    def: ResourceDef,
    list: std::sync::Arc<EncodedList>,
    include: IncludeObject,
    chunk: usize,
) -> impl Iterator<Item = bytes::Bytes> {
    let now = now();
    // A table's JSON; with its metadata and column definitions when given them.
    let table = |rows: Vec<Value>, head: Option<(&ResourceDef, Value)>| {
        let mut table = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "rows": rows});
        if let Some((def, metadata)) = head {
            table["metadata"] = metadata;
            table["columnDefinitions"] = Value::Array(definitions(def));
        }
        plinth_protobuf::to_json(&table)
    };
    // `rows` is the last field in Go's order and in sorted order alike: the head is the
    // empty table less its closing `]}`, and each row is written as a one-row table writes it.
    let mut head = table(Vec::new(), Some((&def, list.metadata())));
    let ends_empty = head.ends_with(b"[]}");
    head.truncate(head.len().saturating_sub(2));
    let row_prefix = {
        let mut empty = table(Vec::new(), None);
        empty.truncate(empty.len().saturating_sub(2));
        empty.len()
    };
    let mut head = Some(bytes::Bytes::from(head));
    let (mut at, mut done, mut wrote_a_row) = (0usize, false, false);
    std::iter::from_fn(move || {
        if !ends_empty {
            // Not the shape this relies on: the whole Table at once.
            return (!std::mem::replace(&mut done, true)).then(|| {
                plinth_protobuf::to_json(&of_list(&def, &list.to_value(), include)).into()
            });
        }
        if let Some(head) = head.take() {
            return Some(head);
        }
        if done {
            return None;
        }
        let mut out = Vec::new();
        while at < list.items.len() && (out.is_empty() || out.len() < chunk) {
            let item = &list.items[at];
            at += 1;
            let Ok(object) = serde_json::from_slice::<Value>(item.json()) else {
                continue;
            };
            let one = table(vec![row(&def, &object, include, now)], None);
            if let Some(row) = one.get(row_prefix..one.len().saturating_sub(2)) {
                if std::mem::replace(&mut wrote_a_row, true) {
                    out.push(b',');
                }
                out.extend_from_slice(row);
            }
        }
        if at >= list.items.len() {
            out.extend_from_slice(b"]}");
            done = true;
        }
        Some(bytes::Bytes::from(out))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ListItem;

    /// The streamed Table is the buffered one, whatever the piece size, rows included as
    /// metadata, whole objects or nothing; an item that does not decode is left out of both.
    #[test]
    fn a_streamed_table_is_the_buffered_one() {
        use crate::resources::{column, path_cell};
        let def = ResourceDef::new("", "v1", "Pod", "pods").columns(vec![
            column(
                "Status",
                "string",
                "The phase.",
                0,
                path_cell("status.phase"),
            ),
            column(
                "IP",
                "string",
                "The pod's address.",
                1,
                path_cell("status.podIP"),
            ),
            column("Restarts", "integer", "Restarts.", 0, |o, _| {
                o["status"]["containerStatuses"][0]["restartCount"].clone()
            }),
        ]);
        let pod = |n: usize| {
            json!({
                "kind": "Pod", "apiVersion": "v1",
                "metadata": {"name": format!("p{n}"), "namespace": "default",
                    "creationTimestamp": "2026-12-01T00:00:00Z", "labels": {"n": n.to_string()}},
                "spec": {"containers": [{"name": "c", "image": "x"}], "nodeName": "n"},
                "status": {"phase": "Running", "podIP": format!("10.0.0.{n}"),
                    "containerStatuses": [{"name": "c", "ready": n.is_multiple_of(2), "restartCount": n}]},
            })
        };
        for count in [0, 1, 2, 7] {
            let mut items: Vec<ListItem> = (0..count)
                .map(|n| ListItem::Encoded(serde_json::to_vec(&pod(n)).unwrap().into()))
                .collect();
            if count > 2 {
                items.insert(
                    1,
                    ListItem::Encoded(bytes::Bytes::from_static(b"{not json")),
                );
            }
            let list = std::sync::Arc::new(EncodedList {
                kind: "PodList".into(),
                api_version: "v1".into(),
                revision: 42,
                continue_token: (count == 7).then(|| "next".into()),
                remaining: (count == 7).then_some(3),
                items,
            });
            for include in [
                IncludeObject::None,
                IncludeObject::Metadata,
                IncludeObject::Object,
            ] {
                let buffered = plinth_protobuf::to_json(&of_list(&def, &list.to_value(), include));
                for chunk in [1, 300, 1 << 20] {
                    let pieces: Vec<bytes::Bytes> =
                        list_chunks(def.clone(), list.clone(), include, chunk).collect();
                    if chunk == 1 {
                        // Streamed indeed: the head, then a piece per row (the last with the tail).
                        assert_eq!(pieces.len(), 1 + count.max(1), "{count} items");
                    }
                    let streamed: Vec<u8> = pieces.concat();
                    assert_eq!(
                        String::from_utf8_lossy(&streamed),
                        String::from_utf8_lossy(&buffered),
                        "{count} items, {include:?}, pieces of {chunk}"
                    );
                }
            }
        }
    }
}
