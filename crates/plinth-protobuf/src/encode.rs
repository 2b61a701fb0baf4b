//! Responses in Kubernetes' protobuf encoding, which client-go's typed clients ask for first:
//! the JSON form of an object written as the message upstream's `generated.proto` declares
//! (the same field numbers), inside the `k8s\0` + `runtime.Unknown` envelope; lists as the
//! kind's `…List` message; watch events as length-prefixed `metav1.WatchEvent` frames.
//!
//! A message is described by a table of its fields (JSON name, field number, shape) and one
//! encoder walks any of them, so a type is one table. Fields are written in field-number
//! order, as Go's generated marshallers write them. A JSON field the table does not declare
//! makes the encoding fail ([`Unmapped`]) rather than drop data: the caller answers in JSON,
//! which these clients accept too.

use base64::Engine;
use prost::encoding::{WireType, encode_key, encode_varint};
use serde_json::{Map, Value};

/// The shape of one field.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Shape {
    /// A string.
    Str,
    /// A 64-bit integer (varint).
    I64,
    /// A 32-bit integer (varint).
    I32,
    /// A boolean.
    Bool,
    /// A double (fixed 64-bit).
    Double,
    /// Bytes, base64 in JSON.
    Bytes,
    /// `map<string, V>`: each value written as `shape` says (as field 2 of the entry).
    Map(&'static Shape),
    /// `JSONSchemaPropsOrBool`: a JSON boolean (`allows`, 1) or a schema (2, `allows` true).
    OrBool(&'static [Field]),
    /// `JSONSchemaPropsOrArray`: a JSON schema (1) or an array of them (2).
    OrArray(&'static [Field]),
    /// `JSONSchemaPropsOrStringArray`: a JSON schema (1) or an array of strings (2).
    OrStringArray(&'static [Field]),
    /// A nested message.
    Message(&'static [Field]),
    /// `map<string, string>`.
    StringMap,
    /// `map<string, bytes>`, base64 values in JSON.
    BytesMap,
    /// `metav1.Time`: an RFC 3339 string in JSON (whole seconds), seconds and nanos.
    Time,
    /// `metav1.MicroTime`: the same with microseconds in JSON.
    MicroTime,
    /// A message whose field 1 is a repeated string, a JSON array of strings (`ExtraValue`).
    Strings,
    /// A message whose field 1 holds the JSON of the value as bytes (`metav1.FieldsV1`,
    /// `runtime.RawExtension`).
    RawJson,
    /// `resource.Quantity`: a string in JSON, its field 1 in protobuf.
    Quantity,
    /// `intstr.IntOrString`: a number or a string in JSON; `type` (1: 0 int, 1 string),
    /// `intVal` (2), `strVal` (3) in protobuf.
    IntOrString,
    /// An embedded Go struct (`json:",inline"`): a nested message in protobuf whose fields
    /// are the parent's own in JSON (a probe's handler, a volume's source).
    Inline(&'static [Field]),
}

/// One field of a message.
#[derive(Debug)]
pub(crate) struct Field {
    /// Its JSON name.
    pub(crate) json: &'static str,
    /// Its field number.
    pub(crate) tag: u32,
    /// Its shape.
    pub(crate) shape: Shape,
    /// A repeated field (a JSON array).
    pub(crate) repeated: bool,
    /// What a zero value read from the wire becomes.
    pub(crate) zero: Zero,
}

/// What decoding makes of a scalar's zero value (Go writes non-pointer fields even when
/// zero; its JSON leaves them out only with `omitempty`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Zero {
    /// Empty strings and zero numbers left out, `false` kept (the hand-written tables).
    Usual,
    /// Kept: a pointer field that was set, or one without `omitempty`.
    Keep,
    /// Left out: a non-pointer `omitempty` field.
    Drop,
}

/// A field (`repeated: false`).
pub(crate) const fn one(json: &'static str, tag: u32, shape: Shape) -> Field {
    Field {
        json,
        tag,
        shape,
        repeated: false,
        zero: Zero::Usual,
    }
}

/// A scalar field whose zero value is kept (a Go pointer, or no `omitempty`).
pub(crate) const fn kept(json: &'static str, tag: u32, shape: Shape) -> Field {
    Field {
        zero: Zero::Keep,
        ..one(json, tag, shape)
    }
}

/// A scalar field whose zero value is left out (a Go value with `omitempty`).
pub(crate) const fn dropped(json: &'static str, tag: u32, shape: Shape) -> Field {
    Field {
        zero: Zero::Drop,
        ..one(json, tag, shape)
    }
}

/// A repeated field.
pub(crate) const fn many(json: &'static str, tag: u32, shape: Shape) -> Field {
    Field {
        json,
        tag,
        shape,
        repeated: true,
        zero: Zero::Usual,
    }
}

/// A JSON value the tables cannot express: the path of the first such field.
#[derive(Debug, PartialEq, Eq)]
pub struct Unmapped(pub String);

/// Writes `value` (a JSON object) as the message `fields` describe.
///
/// # Errors
/// [`Unmapped`] naming the first field the message does not declare or whose value does not
/// fit its shape.
pub(crate) fn message(fields: &[Field], value: &Value, path: &str) -> Result<Vec<u8>, Unmapped> {
    let object = value.as_object().ok_or_else(|| Unmapped(path.to_owned()))?;
    // At the top (`path` empty), `apiVersion` and `kind` go in the envelope.
    let type_meta = |k: &str| path.is_empty() && matches!(k, "apiVersion" | "kind");
    if let Some(unknown) = object
        .keys()
        .find(|k| !type_meta(k) && !declares(fields, k))
    {
        return Err(Unmapped(
            format!("{path}.{unknown}")
                .trim_start_matches('.')
                .to_owned(),
        ));
    }
    fields_of(fields, object, path)
}

/// Whether the message (with its inlined ones) has a field called `json`.
fn declares(fields: &[Field], json: &str) -> bool {
    fields.iter().any(|f| match f.shape {
        Shape::Inline(inner) => declares(inner, json),
        _ => f.json == json,
    })
}

/// The fields of `object` that `fields` declares, written in field-number order.
fn fields_of(
    fields: &[Field],
    object: &Map<String, Value>,
    path: &str,
) -> Result<Vec<u8>, Unmapped> {
    let mut ordered: Vec<&Field> = fields.iter().collect();
    ordered.sort_by_key(|f| f.tag);
    let mut out = Vec::new();
    for field in ordered {
        if let Shape::Inline(inner) = field.shape {
            length_delimited(field.tag, &fields_of(inner, object, path)?, &mut out);
            continue;
        }
        let Some(v) = object.get(field.json) else {
            continue;
        };
        let at = if path.is_empty() {
            field.json.to_owned()
        } else {
            format!("{path}.{}", field.json)
        };
        match (field.repeated, v) {
            (_, Value::Null) => {}
            (true, Value::Array(items)) => {
                for item in items {
                    one_value(field, item, &at, &mut out)?;
                }
            }
            (true, _) => return Err(Unmapped(at)),
            (false, v) => one_value(field, v, &at, &mut out)?,
        }
    }
    Ok(out)
}

fn length_delimited(tag: u32, bytes: &[u8], out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

fn varint(tag: u32, n: u64, out: &mut Vec<u8>) {
    encode_key(tag, WireType::Varint, out);
    encode_varint(n, out);
}

fn base64_bytes(v: &Value, at: &str) -> Result<Vec<u8>, Unmapped> {
    v.as_str()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .ok_or_else(|| Unmapped(at.to_owned()))
}

/// Seconds and nanoseconds of an RFC 3339 time.
fn time(text: &str) -> Option<(i64, i32)> {
    let seconds = plinth_core::meta::parse_time(text)?;
    let nanos = match text.get(19..).and_then(|r| r.strip_prefix('.')) {
        Some(fraction) => {
            let digits: String = fraction
                .chars()
                .take_while(char::is_ascii_digit)
                .take(9)
                .collect();
            format!("{digits:0<9}").parse().ok()?
        }
        None => 0,
    };
    Some((seconds, nanos))
}

fn one_value(field: &Field, v: &Value, at: &str, out: &mut Vec<u8>) -> Result<(), Unmapped> {
    let bad = || Unmapped(at.to_owned());
    let tag = field.tag;
    match field.shape {
        Shape::Str => length_delimited(tag, v.as_str().ok_or_else(bad)?.as_bytes(), out),
        // Negative values are ten-byte varints (two's complement), as protobuf writes them.
        Shape::I64 => varint(tag, v.as_i64().ok_or_else(bad)? as u64, out),
        Shape::I32 => {
            let n = i32::try_from(v.as_i64().ok_or_else(bad)?).map_err(|_| bad())?;
            varint(tag, i64::from(n) as u64, out);
        }
        Shape::Bool => varint(tag, u64::from(v.as_bool().ok_or_else(bad)?), out),
        Shape::Double => {
            encode_key(tag, WireType::SixtyFourBit, out);
            out.extend_from_slice(&v.as_f64().ok_or_else(bad)?.to_le_bytes());
        }
        Shape::Bytes => length_delimited(tag, &base64_bytes(v, at)?, out),
        Shape::Map(shape) => {
            for (key, value) in v.as_object().ok_or_else(bad)? {
                let mut entry = Vec::new();
                length_delimited(1, key.as_bytes(), &mut entry);
                let value_field = one("", 2, *shape);
                one_value(&value_field, value, &format!("{at}[{key}]"), &mut entry)?;
                length_delimited(tag, &entry, out);
            }
        }
        Shape::OrBool(fields) => {
            let mut m = Vec::new();
            match v {
                Value::Bool(allows) => varint(1, u64::from(*allows), &mut m),
                schema => {
                    varint(1, 1, &mut m);
                    length_delimited(2, &message(fields, schema, at)?, &mut m);
                }
            }
            length_delimited(tag, &m, out);
        }
        Shape::OrArray(fields) | Shape::OrStringArray(fields) => {
            let mut m = Vec::new();
            match (v, field.shape) {
                (Value::Array(items), Shape::OrStringArray(_)) => {
                    for item in items {
                        length_delimited(2, item.as_str().ok_or_else(bad)?.as_bytes(), &mut m);
                    }
                }
                (Value::Array(items), _) => {
                    for item in items {
                        length_delimited(2, &message(fields, item, at)?, &mut m);
                    }
                }
                (schema, _) => length_delimited(1, &message(fields, schema, at)?, &mut m),
            }
            length_delimited(tag, &m, out);
        }
        Shape::Message(fields) => length_delimited(tag, &message(fields, v, at)?, out),
        Shape::StringMap | Shape::BytesMap => {
            let map: &Map<String, Value> = v.as_object().ok_or_else(bad)?;
            for (key, value) in map {
                let mut entry = Vec::new();
                length_delimited(1, key.as_bytes(), &mut entry);
                match field.shape {
                    Shape::BytesMap => length_delimited(2, &base64_bytes(value, at)?, &mut entry),
                    _ => {
                        length_delimited(2, value.as_str().ok_or_else(bad)?.as_bytes(), &mut entry)
                    }
                }
                length_delimited(tag, &entry, out);
            }
        }
        Shape::Time | Shape::MicroTime => {
            let (seconds, nanos) = time(v.as_str().ok_or_else(bad)?).ok_or_else(bad)?;
            let mut t = Vec::new();
            varint(1, seconds as u64, &mut t);
            if nanos != 0 {
                varint(2, i64::from(nanos) as u64, &mut t);
            }
            length_delimited(tag, &t, out);
        }
        Shape::Strings => {
            let mut m = Vec::new();
            for item in v.as_array().ok_or_else(bad)? {
                length_delimited(1, item.as_str().ok_or_else(bad)?.as_bytes(), &mut m);
            }
            length_delimited(tag, &m, out);
        }
        Shape::Quantity => {
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err(bad()),
            };
            let mut m = Vec::new();
            length_delimited(1, text.as_bytes(), &mut m);
            length_delimited(tag, &m, out);
        }
        Shape::IntOrString => {
            let mut m = Vec::new();
            match v {
                Value::String(s) => {
                    varint(1, 1, &mut m);
                    varint(2, 0, &mut m);
                    length_delimited(3, s.as_bytes(), &mut m);
                }
                other => {
                    let n = i32::try_from(other.as_i64().ok_or_else(bad)?).map_err(|_| bad())?;
                    varint(1, 0, &mut m);
                    varint(2, i64::from(n) as u64, &mut m);
                    length_delimited(3, b"", &mut m);
                }
            }
            length_delimited(tag, &m, out);
        }
        Shape::Inline(_) => return Err(bad()),
        Shape::RawJson => {
            let raw = serde_json::to_vec(v).map_err(|_| bad())?;
            let mut m = Vec::new();
            length_delimited(1, &raw, &mut m);
            length_delimited(tag, &m, out);
        }
    }
    Ok(())
}

/// `k8s\0` and a `runtime.Unknown` holding `raw`, of `apiVersion`/`kind`.
pub(crate) fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut type_meta = Vec::new();
    length_delimited(1, api_version.as_bytes(), &mut type_meta);
    length_delimited(2, kind.as_bytes(), &mut type_meta);
    let mut out = b"k8s\0".to_vec();
    length_delimited(1, &type_meta, &mut out);
    length_delimited(2, raw, &mut out);
    out
}

/// `metav1.ListMeta` of a list.
pub(crate) const LIST_META: &[Field] = &[
    one("selfLink", 1, Shape::Str),
    one("resourceVersion", 2, Shape::Str),
    one("continue", 3, Shape::Str),
    one("remainingItemCount", 4, Shape::I64),
];

/// A list's message: its `ListMeta` (1) and items (2), each item already encoded.
pub(crate) fn list<T: AsRef<[u8]>>(metadata: &Value, items: &[T]) -> Result<Vec<u8>, Unmapped> {
    let size: usize = items.iter().map(|i| i.as_ref().len() + 6).sum();
    let mut out = Vec::with_capacity(size + 64);
    length_delimited(1, &message(LIST_META, metadata, "metadata")?, &mut out);
    for item in items {
        length_delimited(2, item.as_ref(), &mut out);
    }
    Ok(out)
}

/// What [`envelope`] of [`list`] writes before the first item, for items of `item_lengths`
/// that follow, each after [`list_item_prefix`]: a list streamed item by item whose bytes are
/// the buffered list's.
pub(crate) fn list_head(
    api_version: &str,
    kind: &str,
    metadata: &Value,
    item_lengths: impl IntoIterator<Item = usize>,
) -> Result<Vec<u8>, Unmapped> {
    let mut meta = Vec::new();
    length_delimited(1, &message(LIST_META, metadata, "metadata")?, &mut meta);
    let items: usize = item_lengths
        .into_iter()
        .map(|len| 1 + prost::encoding::encoded_len_varint(len as u64) + len)
        .sum();
    let mut type_meta = Vec::new();
    length_delimited(1, api_version.as_bytes(), &mut type_meta);
    length_delimited(2, kind.as_bytes(), &mut type_meta);
    let mut out = b"k8s\0".to_vec();
    length_delimited(1, &type_meta, &mut out);
    encode_key(2, WireType::LengthDelimited, &mut out);
    encode_varint((meta.len() + items) as u64, &mut out);
    out.extend_from_slice(&meta);
    Ok(out)
}

/// What comes before an item of `len` bytes in a list's message.
pub(crate) fn list_item_prefix(len: usize, out: &mut Vec<u8>) {
    encode_key(2, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
}

/// A `metav1.WatchEvent` frame: a four-byte big-endian length, then the event's message
/// as it is — no magic number, no `Unknown` envelope (kube's stream serializer is the *raw*
/// protobuf serializer) — whose object (`RawExtension`) holds the object's own enveloped
/// encoding.
pub(crate) fn watch_frame(event_type: &str, object: &[u8]) -> Vec<u8> {
    let mut event = Vec::new();
    length_delimited(1, event_type.as_bytes(), &mut event);
    let mut raw = Vec::new();
    length_delimited(1, object, &mut raw);
    length_delimited(2, &raw, &mut event);
    let mut out = u32::try_from(event.len())
        .unwrap_or(u32::MAX)
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(&event);
    out
}
