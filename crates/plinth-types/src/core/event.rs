//! core/v1 Event. A PUT of a missing Event creates it (kube's `AllowCreateOnUpdate`).

use plinth_core::meta::at_path;
use serde_json::{Value, json};

use plinth_registry::resources::{Column, ResourceDef, age_cell, column, path_cell};
use plinth_registry::schema::{Schema, obj, object_reference, top};

/// The fields of an Event that field selectors read (both Event resources share one storage,
/// and so one watch cache, which extracts these).
pub(crate) const SELECTABLE: [&str; 11] = [
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    SOURCE,
    "type",
];

/// What the `source` field label reads (kube's: the source's component, else the reporting
/// component).
const SOURCE: &str = "source.component|reportingComponent";

/// The `events` resource of the core group.
pub fn resource() -> ResourceDef {
    let mut def = ResourceDef::new("", "v1", "Event", "events")
        .short_names(&["ev"])
        .selectable(&SELECTABLE)
        .field_labels(&[
            ("metadata.name", "metadata.name"),
            ("metadata.namespace", "metadata.namespace"),
            ("involvedObject.kind", "involvedObject.kind"),
            ("involvedObject.namespace", "involvedObject.namespace"),
            ("involvedObject.name", "involvedObject.name"),
            ("involvedObject.uid", "involvedObject.uid"),
            ("involvedObject.apiVersion", "involvedObject.apiVersion"),
            (
                "involvedObject.resourceVersion",
                "involvedObject.resourceVersion",
            ),
            ("involvedObject.fieldPath", "involvedObject.fieldPath"),
            ("reason", "reason"),
            ("reportingComponent", "reportingComponent"),
            ("source", SOURCE),
            ("type", "type"),
        ])
        .columns(columns())
        .schema(schema());
    def.allow_create_on_update = true;
    // As kube-apiserver: no watch cache for Events (many, short-lived, rarely listed).
    def.watch_cached = false;
    def.age_column = false;
    def
}

/// The shape of a core/v1 Event.
pub fn schema() -> Schema {
    top(vec![
        ("involvedObject", object_reference()),
        ("reason", Schema::String),
        ("message", Schema::String),
        ("source", source()),
        ("firstTimestamp", Schema::String),
        ("lastTimestamp", Schema::String),
        ("count", Schema::Int),
        ("type", Schema::String),
        ("eventTime", Schema::String),
        ("series", series()),
        ("action", Schema::String),
        ("related", object_reference()),
        ("reportingComponent", Schema::String),
        ("reportingInstance", Schema::String),
    ])
}

/// `EventSource`.
pub(crate) fn source() -> Schema {
    obj(vec![
        ("component", Schema::String),
        ("host", Schema::String),
    ])
}

/// `EventSeries`.
pub(crate) fn series() -> Schema {
    obj(vec![
        ("count", Schema::Int),
        ("lastObservedTime", Schema::String),
    ])
}

/// The columns `kubectl get events` shows, for both Event resources.
pub(crate) fn columns() -> Vec<Column> {
    let last_seen = |o: &Value, now: i64| {
        for path in [
            "lastTimestamp",
            "deprecatedLastTimestamp",
            "series.lastObservedTime",
            "eventTime",
            "metadata.creationTimestamp",
        ] {
            if at_path(o, path)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
            {
                return age_cell(o, path, now);
            }
        }
        json!("<unknown>")
    };
    let object = |o: &Value, _: i64| {
        let reference = o.get("involvedObject").or_else(|| o.get("regarding"));
        let kind = reference
            .and_then(|r| r.get("kind"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let name = reference
            .and_then(|r| r.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        json!(format!("{}/{name}", kind.to_lowercase()))
    };
    let message = |o: &Value, _: i64| {
        o.get("message")
            .or_else(|| o.get("note"))
            .cloned()
            .unwrap_or(json!(""))
    };
    vec![
        column(
            "Last Seen",
            "string",
            "Time since the event was last seen",
            0,
            last_seen,
        ),
        column(
            "Type",
            "string",
            "The type of the event",
            0,
            path_cell("type"),
        ),
        column(
            "Reason",
            "string",
            "Why the event happened",
            0,
            path_cell("reason"),
        ),
        column(
            "Object",
            "string",
            "The object the event is about",
            0,
            object,
        ),
        column(
            "Message",
            "string",
            "A human-readable description",
            0,
            message,
        ),
    ]
}
