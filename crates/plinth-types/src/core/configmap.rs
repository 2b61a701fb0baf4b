//! core/v1 ConfigMap: keys checked, at most 1 MiB, frozen once `immutable`.

use serde_json::Value;

use plinth_registry::resources::{ResourceDef, column, count};
use plinth_registry::schema::{Schema, strings, top};
use plinth_registry::strategy::Strategy;

/// The `configmaps` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("", "v1", "ConfigMap", "configmaps")
        .short_names(&["cm"])
        .columns(vec![column(
            "Data",
            "integer",
            "Number of keys",
            0,
            |o, _| count(o, &["data", "binaryData"]),
        )])
        .schema(schema())
        .strategy(ConfigMaps)
}

/// The shape of a ConfigMap.
pub fn schema() -> Schema {
    top(vec![
        ("data", strings()),
        ("binaryData", Schema::Map(Box::new(Schema::Bytes))),
        ("immutable", Schema::Bool),
    ])
}

#[derive(Debug)]
struct ConfigMaps;

impl Strategy for ConfigMaps {
    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<plinth_core::Cause> {
        super::validate_data(object, old, &["data", "binaryData"])
    }
}
