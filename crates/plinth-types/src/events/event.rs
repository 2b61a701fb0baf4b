//! events.k8s.io/v1 Event: the core/v1 Events seen in the newer form. Both resources share one
//! storage (the core form, under `/events/`); this strategy renames the fields on the way in
//! and out.

use serde_json::Value;

use crate::core::event::{SELECTABLE, columns, series, source};
use plinth_registry::resources::ResourceDef;
use plinth_registry::schema::{Schema, object_reference, top};
use plinth_registry::strategy::Strategy;

/// The `events` resource of `events.k8s.io`.
pub fn resource() -> ResourceDef {
    let mut def = ResourceDef::new("events.k8s.io", "v1", "Event", "events")
        .short_names(&["ev"])
        // The shared cache extracts the core form's fields; this resource's labels read its
        // own form, as kube's conversion maps them onto the same fields.
        .selectable(&SELECTABLE)
        .field_labels(&[
            ("reason", "reason"),
            ("regarding.kind", "regarding.kind"),
            ("regarding.namespace", "regarding.namespace"),
            ("regarding.name", "regarding.name"),
            ("regarding.uid", "regarding.uid"),
            ("regarding.apiVersion", "regarding.apiVersion"),
            ("regarding.resourceVersion", "regarding.resourceVersion"),
            ("regarding.fieldPath", "regarding.fieldPath"),
            ("reportingController", "reportingController"),
            ("type", "type"),
            ("metadata.namespace", "metadata.namespace"),
            ("metadata.name", "metadata.name"),
        ])
        .columns(columns())
        .schema(schema())
        .strategy(EventsV1);
    def.stored_as = Some("/events/".to_owned());
    // As kube-apiserver: no watch cache for Events (many, short-lived, rarely listed).
    def.watch_cached = false;
    def.age_column = false;
    def
}

/// The shape of an events.k8s.io/v1 Event.
pub fn schema() -> Schema {
    top(vec![
        ("eventTime", Schema::String),
        ("series", series()),
        ("reportingController", Schema::String),
        ("reportingInstance", Schema::String),
        ("action", Schema::String),
        ("reason", Schema::String),
        ("regarding", object_reference()),
        ("related", object_reference()),
        ("note", Schema::String),
        ("type", Schema::String),
        ("deprecatedSource", source()),
        ("deprecatedFirstTimestamp", Schema::String),
        ("deprecatedLastTimestamp", Schema::String),
        ("deprecatedCount", Schema::Int),
    ])
}

/// events.k8s.io/v1 field names and their core/v1 counterparts.
const RENAMED: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

fn rename(mut object: Value, to_core: bool) -> Value {
    if let Some(map) = object.as_object_mut() {
        for (events, core) in RENAMED {
            let (from, to) = if to_core {
                (events, core)
            } else {
                (core, events)
            };
            if let Some(value) = map.remove(from) {
                map.insert(to.to_owned(), value);
            }
        }
    }
    object
}

#[derive(Debug)]
struct EventsV1;

impl Strategy for EventsV1 {
    fn to_storage(&self, object: Value) -> Value {
        rename(object, true)
    }

    fn to_view(&self, object: Value) -> Value {
        rename(object, false)
    }

    fn serves_stored_form(&self) -> bool {
        false
    }
}
