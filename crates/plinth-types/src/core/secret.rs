//! core/v1 Secret: `type` defaults to `Opaque` and never changes, `stringData` is written into
//! `data`, and the ConfigMap rules for keys, size and `immutable`.

use base64::Engine;
use plinth_core::Cause;
use serde_json::{Value, json};

use plinth_registry::resources::{ResourceDef, column, count, path_cell};
use plinth_registry::schema::{Schema, strings, top};
use plinth_registry::strategy::Strategy;

/// The `secrets` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("", "v1", "Secret", "secrets")
        .selectable(&["type"])
        .columns(vec![
            column(
                "Type",
                "string",
                "The type of the secret",
                0,
                path_cell("type"),
            ),
            column("Data", "integer", "Number of keys", 0, |o, _| {
                count(o, &["data"])
            }),
        ])
        .schema(schema())
        .strategy(Secrets)
}

/// The shape of a Secret.
pub fn schema() -> Schema {
    top(vec![
        ("data", Schema::Map(Box::new(Schema::Bytes))),
        ("stringData", strings()),
        ("type", Schema::String),
        ("immutable", Schema::Bool),
    ])
}

#[derive(Debug)]
struct Secrets;

impl Strategy for Secrets {
    fn prepare_create(&self, object: &mut Value) {
        default_secret(object);
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        default_secret(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = super::validate_data(object, old, &["data"]);
        if let Some(old) = old
            && object.get("type") != old.get("type")
        {
            causes.push(Cause::immutable(
                "type",
                object.get("type").unwrap_or(&Value::Null),
            ));
        }
        causes
    }
}

/// `type: Opaque` when unset; `stringData` base64-encoded into `data`.
fn default_secret(object: &mut Value) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    if map
        .get("type")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        map.insert("type".into(), json!("Opaque"));
    }
    if let Some(Value::Object(string_data)) = map.remove("stringData") {
        let data = map.entry("data").or_insert_with(|| json!({}));
        if !data.is_object() {
            *data = json!({});
        }
        if let Some(data) = data.as_object_mut() {
            for (k, v) in string_data {
                let encoded = base64::engine::general_purpose::STANDARD
                    .encode(v.as_str().unwrap_or("").as_bytes());
                data.insert(k, json!(encoded));
            }
        }
    }
}
