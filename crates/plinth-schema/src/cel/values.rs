//! JSON values as CEL sees them, under a schema.

use std::sync::Arc;

use cel::Program;
use cel::common::ast::Expr;
use cel::objects::Key;
use serde_json::Value;

use crate::node::{Additional, Node};

use super::names::{escape, unescape};

/// The fields of `self` and `oldSelf` that the rule (and its message expression) select, or
/// `None` if either is used whole.
pub(crate) fn read_fields(
    program: &Program,
    message: Option<&Program>,
) -> Option<std::collections::BTreeSet<String>> {
    fn walk(expr: &Expr, fields: &mut std::collections::BTreeSet<String>) -> bool {
        match expr {
            Expr::Select(select) => match &select.operand.expr {
                Expr::Ident(name) if name == "self" || name == "oldSelf" => {
                    fields.insert(select.field.clone());
                    true
                }
                other => walk(other, fields),
            },
            Expr::Ident(name) => name != "self" && name != "oldSelf",
            Expr::Call(call) => {
                call.target.as_ref().is_none_or(|t| walk(&t.expr, fields))
                    && call.args.iter().all(|a| walk(&a.expr, fields))
            }
            Expr::Comprehension(c) => [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ]
            .iter()
            .all(|e| walk(&e.expr, fields)),
            Expr::List(list) => list.elements.iter().all(|e| walk(&e.expr, fields)),
            Expr::Map(map) => map.entries.iter().all(|entry| match &entry.expr {
                cel::common::ast::EntryExpr::MapEntry(e) => {
                    walk(&e.key.expr, fields) && walk(&e.value.expr, fields)
                }
                cel::common::ast::EntryExpr::StructField(_) => false,
            }),
            Expr::Literal(_) => true,
            _ => false,
        }
    }
    let mut fields = std::collections::BTreeSet::new();
    let whole = !walk(&program.expression().expr, &mut fields)
        || message.is_some_and(|m| !walk(&m.expression().expr, &mut fields));
    (!whole).then_some(fields)
}

/// `value` for CEL as `node` describes it; of an object, only `fields` (escaped names) when
/// given.
pub(crate) fn to_cel_fields(
    value: &Value,
    node: &Node,
    fields: Option<&std::collections::BTreeSet<String>>,
) -> cel::Value {
    match (value, fields) {
        (Value::Object(map), Some(fields)) if !node.properties.is_empty() => {
            let entries: std::collections::HashMap<Key, cel::Value> = fields
                .iter()
                .filter_map(|f| {
                    let name = unescape(f);
                    let child = map.get(&name)?;
                    Some((
                        Key::String(Arc::new(f.clone())),
                        to_cel(child, node.properties.get(&name)),
                    ))
                })
                .collect();
            cel::Value::Map(cel::objects::Map {
                map: Arc::new(entries),
            })
        }
        _ => to_cel(value, Some(node)),
    }
}

/// A string as CEL sees it under its schema's `format`, as kube types it: `duration` a
/// duration, `date` and `date-time` a timestamp, `byte` bytes (a value that does not parse
/// stays a string).
fn typed_string(s: &str, format: Option<&str>) -> cel::Value {
    let typed = match format {
        Some("duration") => crate::format::parse_duration(s).and_then(|nanos| {
            let nanos = i64::try_from(nanos).ok()?;
            Some(cel::Value::Duration(chrono::Duration::nanoseconds(nanos)))
        }),
        Some("date-time") => chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .map(cel::Value::Timestamp),
        Some("date") => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .ok()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|t| cel::Value::Timestamp(t.and_utc().fixed_offset())),
        Some("byte") => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .ok()
                .map(|b| cel::Value::Bytes(Arc::new(b)))
        }
        _ => None,
    };
    typed.unwrap_or_else(|| cel::Value::String(Arc::new(s.to_owned())))
}

/// JSON as CEL sees it: integers as `int`, other numbers as `double`; the fields of an object
/// with declared properties under their escaped names (kube's property-name escaping: a field
/// CEL cannot name is left out), a map's keys as they are.
pub(crate) fn to_cel(value: &Value, node: Option<&Node>) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => cel::Value::Int(i),
            None => match n.as_u64() {
                Some(u) => cel::Value::UInt(u),
                None => cel::Value::Float(n.as_f64().unwrap_or_default()),
            },
        },
        Value::String(s) => typed_string(s, node.and_then(|n| n.format.as_deref())),
        Value::Array(items) => {
            let item = node.and_then(|n| n.items.as_deref());
            cel::Value::List(Arc::new(items.iter().map(|v| to_cel(v, item)).collect()))
        }
        Value::Object(map) => {
            let entries: std::collections::HashMap<Key, cel::Value> = match node {
                Some(node) if !node.properties.is_empty() => map
                    .iter()
                    .filter_map(|(k, v)| {
                        let child = node.properties.get(k).or(match node.additional.as_deref() {
                            Some(Additional::Schema(s)) => Some(&**s),
                            _ => None,
                        });
                        Some((Key::String(Arc::new(escape(k)?)), to_cel(v, child)))
                    })
                    .collect(),
                _ => {
                    let child = node.and_then(|n| match n.additional.as_deref() {
                        Some(Additional::Schema(s)) => Some(&**s),
                        _ => None,
                    });
                    map.iter()
                        .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v, child)))
                        .collect()
                }
            };
            cel::Value::Map(cel::objects::Map {
                map: Arc::new(entries),
            })
        }
    }
}
