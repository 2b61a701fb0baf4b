//! The core API group (`v1`).

pub mod componentstatus;
pub mod configmap;
pub mod endpoints;
pub mod event;
pub mod limitrange;
pub mod namespace;
pub mod node;
pub mod persistentvolume;
pub mod pod;
pub mod podspec;
pub mod podtemplate;
mod proxy;
mod proxy_rewrite;
pub mod quota_usage;
pub mod replicationcontroller;
pub mod resourcequota;
pub mod secret;
pub mod service;
pub mod serviceaccount;

use plinth_core::Cause;
use serde_json::{Value, json};

/// A query value, form-encoded (for paths handed on to a node agent).
pub(crate) fn urlencode(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// A proxy's path: its tail after `/`, and its query, form-encoded.
pub(crate) fn proxied_path(request: &plinth_registry::resources::ConnectRequest<'_>) -> String {
    let path = format!("/{}", request.tail);
    if request.query.is_empty() {
        return path;
    }
    let query: Vec<String> = request
        .query
        .iter()
        .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
        .collect();
    format!("{path}?{}", query.join("&"))
}

/// The largest total size of a ConfigMap's or Secret's data.
const MAX_DATA_BYTES: usize = 1024 * 1024;

/// The checks ConfigMaps and Secrets share: valid keys in `fields`, at most 1 MiB in total,
/// and nothing changed once `immutable` is set.
fn validate_data(object: &Value, old: Option<&Value>, fields: &[&str]) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut total = 0usize;
    for field in fields {
        let Some(Value::Object(map)) = object.get(*field) else {
            continue;
        };
        for (key, value) in map {
            total += key.len() + value.as_str().map_or(0, str::len);
            if !config_key_ok(key) {
                causes.push(Cause::invalid(*field, &json!(key), "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"));
            }
        }
    }
    if total > MAX_DATA_BYTES {
        causes.push(Cause::new(
            "FieldValueTooLong",
            "",
            format!("Too long: must have at most {MAX_DATA_BYTES} bytes"),
        ));
    }
    if let Some(old) = old.filter(|o| o.get("immutable") == Some(&json!(true))) {
        for field in fields {
            if object.get(*field) != old.get(*field) {
                causes.push(Cause::forbidden(
                    *field,
                    "field is immutable when `immutable` is set",
                ));
            }
        }
        if object.get("immutable") != Some(&json!(true)) {
            causes.push(Cause::forbidden(
                "immutable",
                "field is immutable when `immutable` is set",
            ));
        }
    }
    causes
}

/// apimachinery's `IsConfigMapKey`.
fn config_key_ok(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && key != "."
        && key != ".."
        && !key.starts_with("..")
}
