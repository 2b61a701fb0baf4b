//! Request bodies in Kubernetes' protobuf encoding, read with the same field tables the
//! encoder writes from (`types`): one description of each message for both directions.
//!
//! Go's generated marshallers write every non-pointer field, set or not; Go's JSON leaves the
//! unset ones out (`omitempty`). So empty strings and zero integers read here are left out of
//! the JSON form; booleans are kept (a `false` `*bool` is meaningful). Fields the table does
//! not know are skipped, as Go's unmarshallers skip them.

use base64::Engine;
use plinth_core::meta::{format_micro_time, format_time};
use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};
use serde_json::{Map, Value, json};

use super::encode::{Field, Shape, Zero};

/// What is wrong with a message.
pub(crate) type Malformed = String;

fn length_delimited<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], Malformed> {
    let len = usize::try_from(decode_varint(buf).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    if len > buf.len() {
        return Err(format!("a field of {len} bytes where {} remain", buf.len()));
    }
    let (head, rest) = buf.split_at(len);
    *buf = rest;
    Ok(head)
}

fn expect(wire: WireType, wanted: WireType, field: &Field) -> Result<(), Malformed> {
    if wire == wanted {
        Ok(())
    } else {
        Err(format!(
            "field {} ({}) has wire type {wire:?}, not {wanted:?}",
            field.tag, field.json
        ))
    }
}

fn text(bytes: &[u8]) -> Result<String, Malformed> {
    String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string())
}

/// The message `fields` describe, from `buf`, as a JSON object.
pub(crate) fn message(fields: &[Field], mut buf: &[u8]) -> Result<Map<String, Value>, Malformed> {
    let mut out = Map::new();
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).map_err(|e| e.to_string())?;
        let Some(field) = fields.iter().find(|f| f.tag == tag) else {
            skip_field(wire, tag, &mut buf, DecodeContext::default()).map_err(|e| e.to_string())?;
            continue;
        };
        if let Shape::Inline(inner) = field.shape {
            expect(wire, WireType::LengthDelimited, field)?;
            out.extend(message(inner, length_delimited(&mut buf)?)?);
            continue;
        }
        if let Shape::StringMap | Shape::BytesMap | Shape::Map(_) = field.shape {
            expect(wire, WireType::LengthDelimited, field)?;
            let (key, value) = entry(field, length_delimited(&mut buf)?)?;
            let map = out
                .entry(field.json)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(map) = map {
                map.insert(key, value);
            }
            continue;
        }
        let value = one_value(field, wire, &mut buf)?;
        if field.repeated {
            let items = out.entry(field.json).or_insert_with(|| json!([]));
            if let Value::Array(items) = items {
                items.push(value.unwrap_or(Value::Null));
            }
        } else if let Some(value) = value {
            out.insert(field.json.to_owned(), value);
        }
    }
    Ok(out)
}

/// A map entry: key (1) and value (2).
fn entry(field: &Field, mut buf: &[u8]) -> Result<(String, Value), Malformed> {
    let (mut key, mut value) = (String::new(), None);
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).map_err(|e| e.to_string())?;
        match tag {
            1 => {
                expect(wire, WireType::LengthDelimited, field)?;
                key = text(length_delimited(&mut buf)?)?;
            }
            2 => {
                expect(wire, WireType::LengthDelimited, field)?;
                let bytes = length_delimited(&mut buf)?;
                value = Some(match field.shape {
                    Shape::BytesMap => {
                        json!(base64::engine::general_purpose::STANDARD.encode(bytes))
                    }
                    Shape::Map(Shape::Message(fields)) => Value::Object(message(fields, bytes)?),
                    Shape::Map(Shape::Strings) => strings(bytes)?,
                    Shape::Map(Shape::Quantity) => json!(first_string(bytes)?),
                    Shape::Map(Shape::Time) => match time(bytes)? {
                        (0, 0) => Value::Null,
                        (seconds, _) => json!(format_time(seconds)),
                    },
                    Shape::Map(_) => {
                        return Err(format!("field {} has an unreadable map value", field.json));
                    }
                    _ => json!(text(bytes)?),
                });
            }
            _ => skip_field(wire, tag, &mut buf, DecodeContext::default())
                .map_err(|e| e.to_string())?,
        }
    }
    let value = value.unwrap_or_else(|| match field.shape {
        Shape::Map(_) => json!({}),
        _ => json!(""),
    });
    Ok((key, value))
}

/// One occurrence of `field`; `None` for what Go's JSON would leave out (an empty string, a
/// zero number).
fn one_value(field: &Field, wire: WireType, buf: &mut &[u8]) -> Result<Option<Value>, Malformed> {
    let varint = |buf: &mut &[u8]| decode_varint(buf).map_err(|e| e.to_string());
    Ok(match field.shape {
        Shape::Str => {
            expect(wire, WireType::LengthDelimited, field)?;
            let s = text(length_delimited(buf)?)?;
            (!s.is_empty() || field.repeated || field.zero == Zero::Keep).then(|| json!(s))
        }
        Shape::I64 | Shape::I32 => {
            expect(wire, WireType::Varint, field)?;
            // Two's complement: a negative number is a ten-byte varint.
            let n = varint(buf)? as i64;
            let n = if let Shape::I32 = field.shape {
                i64::from(n as i32)
            } else {
                n
            };
            (n != 0 || field.repeated || field.zero == Zero::Keep).then(|| json!(n))
        }
        Shape::Bool => {
            expect(wire, WireType::Varint, field)?;
            let b = varint(buf)? != 0;
            (b || field.zero != Zero::Drop).then(|| json!(b))
        }
        Shape::Double => {
            expect(wire, WireType::SixtyFourBit, field)?;
            let bytes: [u8; 8] = buf
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .ok_or("a truncated double")?;
            *buf = &buf[8..];
            Some(json!(f64::from_le_bytes(bytes)))
        }
        Shape::Bytes => {
            expect(wire, WireType::LengthDelimited, field)?;
            Some(json!(
                base64::engine::general_purpose::STANDARD.encode(length_delimited(buf)?)
            ))
        }
        Shape::Message(fields) => {
            expect(wire, WireType::LengthDelimited, field)?;
            Some(Value::Object(message(fields, length_delimited(buf)?)?))
        }
        Shape::Time | Shape::MicroTime => {
            expect(wire, WireType::LengthDelimited, field)?;
            let (seconds, nanos) = time(length_delimited(buf)?)?;
            // Go's zero time (an empty message) is JSON's null.
            if (seconds, nanos) == (0, 0) {
                return Ok(Some(Value::Null));
            }
            Some(json!(match field.shape {
                Shape::MicroTime => format_micro_time(seconds * 1_000_000 + nanos / 1000),
                _ => format_time(seconds),
            }))
        }
        Shape::Strings => {
            expect(wire, WireType::LengthDelimited, field)?;
            Some(strings(length_delimited(buf)?)?)
        }
        Shape::Quantity => {
            expect(wire, WireType::LengthDelimited, field)?;
            Some(json!(first_string(length_delimited(buf)?)?))
        }
        Shape::IntOrString => {
            expect(wire, WireType::LengthDelimited, field)?;
            Some(int_or_string(length_delimited(buf)?)?)
        }
        Shape::Inline(_) => return Err(format!("field {} read as a value", field.json)),
        Shape::RawJson => {
            expect(wire, WireType::LengthDelimited, field)?;
            let mut inner = length_delimited(buf)?;
            let mut raw: &[u8] = &[];
            while !inner.is_empty() {
                let (tag, wire) = decode_key(&mut inner).map_err(|e| e.to_string())?;
                if tag == 1 && wire == WireType::LengthDelimited {
                    raw = length_delimited(&mut inner)?;
                } else {
                    skip_field(wire, tag, &mut inner, DecodeContext::default())
                        .map_err(|e| e.to_string())?;
                }
            }
            Some(serde_json::from_slice(raw).map_err(|e| e.to_string())?)
        }
        Shape::OrBool(fields) | Shape::OrArray(fields) | Shape::OrStringArray(fields) => {
            expect(wire, WireType::LengthDelimited, field)?;
            Some(either(field.shape, fields, length_delimited(buf)?)?)
        }
        Shape::StringMap | Shape::BytesMap | Shape::Map(_) => {
            return Err(format!("field {} read as a map entry", field.json));
        }
    })
}

/// Field 1 of a message, a string (`resource.Quantity`).
fn first_string(mut buf: &[u8]) -> Result<String, Malformed> {
    let mut found = String::new();
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).map_err(|e| e.to_string())?;
        if tag == 1 && wire == WireType::LengthDelimited {
            found = text(length_delimited(&mut buf)?)?;
        } else {
            skip_field(wire, tag, &mut buf, DecodeContext::default()).map_err(|e| e.to_string())?;
        }
    }
    Ok(found)
}

/// `intstr.IntOrString`: a number (`type` 0, `intVal`) or a string (`type` 1, `strVal`).
fn int_or_string(mut buf: &[u8]) -> Result<Value, Malformed> {
    let (mut kind, mut number, mut string) = (0, 0i64, String::new());
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).map_err(|e| e.to_string())?;
        match (tag, wire) {
            (1, WireType::Varint) => kind = decode_varint(&mut buf).map_err(|e| e.to_string())?,
            (2, WireType::Varint) => {
                number = i64::from(decode_varint(&mut buf).map_err(|e| e.to_string())? as i32);
            }
            (3, WireType::LengthDelimited) => string = text(length_delimited(&mut buf)?)?,
            _ => skip_field(wire, tag, &mut buf, DecodeContext::default())
                .map_err(|e| e.to_string())?,
        }
    }
    Ok(if kind == 1 {
        json!(string)
    } else {
        json!(number)
    })
}

/// A message of repeated strings (field 1) as a JSON array.
fn strings(mut buf: &[u8]) -> Result<Value, Malformed> {
    let mut items = Vec::new();
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).map_err(|e| e.to_string())?;
        if tag == 1 && wire == WireType::LengthDelimited {
            items.push(json!(text(length_delimited(&mut buf)?)?));
        } else {
            skip_field(wire, tag, &mut buf, DecodeContext::default()).map_err(|e| e.to_string())?;
        }
    }
    Ok(Value::Array(items))
}

/// `metav1.Time`'s seconds (1) and nanos (2).
fn time(mut buf: &[u8]) -> Result<(i64, i64), Malformed> {
    let (mut seconds, mut nanos) = (0, 0);
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).map_err(|e| e.to_string())?;
        match (tag, wire) {
            (1, WireType::Varint) => {
                seconds = decode_varint(&mut buf).map_err(|e| e.to_string())? as i64
            }
            (2, WireType::Varint) => {
                nanos = i64::from(decode_varint(&mut buf).map_err(|e| e.to_string())? as i32);
            }
            _ => skip_field(wire, tag, &mut buf, DecodeContext::default())
                .map_err(|e| e.to_string())?,
        }
    }
    Ok((seconds, nanos))
}

/// The `JSONSchemaPropsOr…` messages: a schema, or a boolean / an array of schemas / of
/// strings.
fn either(shape: Shape, fields: &[Field], mut buf: &[u8]) -> Result<Value, Malformed> {
    let (mut allows, mut schema, mut items) = (false, None, Vec::new());
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).map_err(|e| e.to_string())?;
        match (shape, tag, wire) {
            (Shape::OrBool(_), 1, WireType::Varint) => {
                allows = decode_varint(&mut buf).map_err(|e| e.to_string())? != 0;
            }
            (Shape::OrBool(_), 2, WireType::LengthDelimited)
            | (Shape::OrArray(_) | Shape::OrStringArray(_), 1, WireType::LengthDelimited) => {
                schema = Some(Value::Object(message(fields, length_delimited(&mut buf)?)?));
            }
            (Shape::OrArray(_), 2, WireType::LengthDelimited) => {
                items.push(Value::Object(message(fields, length_delimited(&mut buf)?)?));
            }
            (Shape::OrStringArray(_), 2, WireType::LengthDelimited) => {
                items.push(json!(text(length_delimited(&mut buf)?)?));
            }
            _ => skip_field(wire, tag, &mut buf, DecodeContext::default())
                .map_err(|e| e.to_string())?,
        }
    }
    Ok(match (shape, schema) {
        (Shape::OrBool(_), Some(schema)) => schema,
        (Shape::OrBool(_), None) => json!(allows),
        (_, Some(schema)) if items.is_empty() => schema,
        _ => Value::Array(items),
    })
}
