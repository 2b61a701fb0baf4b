//! A rule's estimated cost, as cel-go's estimator bounds it, against kube's budget.

use cel::common::ast::Expr;
use serde_json::Value;

use crate::node::{Additional, Node, Type};

use super::names::property;

/// The largest estimated cost of one rule, counting how often it may run (kube's
/// `StaticEstimatedCostLimit`).
pub(crate) const RULE_COST_LIMIT: f64 = 10_000_000.0;

/// The request size bound kube assumes for unbounded lists, maps and strings.
pub(crate) const MAX_REQUEST_BYTES: f64 = 3_145_728.0;

pub(crate) fn cost_message(cost: f64) -> String {
    let factor = cost / RULE_COST_LIMIT;
    let factor = if factor > 100.0 {
        "more than 100x".to_owned()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "estimated rule cost exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// How many items a list, map or string at `node` may hold: its declared maximum, else what
/// fits in a request (as kube estimates).
pub(crate) fn size_bound(node: Option<&Node>) -> f64 {
    let Some(node) = node else {
        return MAX_REQUEST_BYTES;
    };
    match node.kind {
        // kube's estimates: the request less its `""`, `[]` or `{}`; a list item takes its
        // smallest size and a comma, a map entry that and a key (`"":` and a comma).
        Some(Type::String) => node
            .max_length
            .map_or(MAX_REQUEST_BYTES - 2.0, |n| n as f64),
        Some(Type::Array) => node.max_items.map_or_else(
            || ((MAX_REQUEST_BYTES - 2.0) / (min_size(node.items.as_deref()) + 1.0)).floor(),
            |n| n as f64,
        ),
        Some(Type::Object) => node.max_properties.map_or_else(
            || {
                let value = match node.additional.as_deref() {
                    Some(Additional::Schema(s)) => min_size(Some(s)),
                    _ => 1.0,
                };
                ((MAX_REQUEST_BYTES - 2.0) / (value + 6.0)).floor()
            },
            |n| n as f64,
        ),
        _ => 1.0,
    }
}

/// The smallest serialized size of a value of `node` (kube's `estimateMinSizeJSON`, which
/// bounds unbounded lists and maps): an object counts its required fields without a default.
pub(crate) fn min_size(node: Option<&Node>) -> f64 {
    let Some(node) = node else {
        return 1.0;
    };
    match node.kind {
        Some(Type::String | Type::Array) => 2.0,
        Some(Type::Boolean) => 4.0,
        Some(Type::Object) => {
            2.0 + node
                .required
                .iter()
                .filter_map(|name| Some((name, node.properties.get(name)?)))
                .filter(|(_, prop)| prop.default.is_none())
                .map(|(name, prop)| name.len() as f64 + min_size(Some(prop)) + 4.0)
                .sum::<f64>()
        }
        _ => 1.0,
    }
}

/// The schema node an expression denotes, if it is a path from `self` or a comprehension
/// variable (`vars`: name → the node it ranges over).
pub(crate) fn node_of<'a>(
    expr: &Expr,
    root: &'a Node,
    vars: &[(String, Option<&'a Node>)],
) -> Option<&'a Node> {
    match expr {
        Expr::Ident(name) if name == "self" || name == "oldSelf" => Some(root),
        Expr::Ident(name) => vars.iter().rev().find(|(v, _)| v == name)?.1,
        // `has(x.f)` is a bool, whatever `f` is.
        Expr::Select(select) if select.test => None,
        Expr::Select(select) => {
            let parent = node_of(&select.operand.expr, root, vars)?;
            property(parent, &select.field).or(match parent.additional.as_deref() {
                Some(Additional::Schema(s)) => Some(s),
                _ => None,
            })
        }
        _ => None,
    }
}

/// The elements a collection node iterates over.
pub(crate) fn element_of(node: Option<&Node>) -> Option<&Node> {
    let node = node?;
    match node.kind {
        Some(Type::Array) => node.items.as_deref(),
        Some(Type::Object) => match node.additional.as_deref() {
            Some(Additional::Schema(s)) => Some(s),
            _ => None,
        },
        _ => None,
    }
}

/// A rough static cost of one evaluation, in the spirit of cel-go's estimator: one per node,
/// comprehensions times the size of what they range over, string scans by the string's length.
pub(crate) fn estimate<'a>(
    expr: &Expr,
    root: &'a Node,
    vars: &[(String, Option<&'a Node>)],
) -> f64 {
    match expr {
        Expr::Comprehension(c) => {
            let range = node_of(&c.iter_range.expr, root, vars);
            let size = range_size(&c.iter_range.expr, root, vars);
            let mut inner = vars.to_vec();
            inner.push((c.iter_var.clone(), element_of(range)));
            let body = estimate(&c.loop_cond.expr, root, &inner)
                + estimate(&c.loop_step.expr, root, &inner);
            estimate(&c.iter_range.expr, root, vars)
                + estimate(&c.accu_init.expr, root, vars)
                + size * body
                + estimate(&c.result.expr, root, &inner)
        }
        // Logical operators and the conditional cost what their operands cost (cel-go's
        // estimator adds nothing for them; a conditional takes its dearer branch).
        Expr::Call(call) if matches!(call.func_name.as_str(), "_&&_" | "_||_") => call
            .args
            .iter()
            .map(|a| estimate(&a.expr, root, vars))
            .sum(),
        Expr::Call(call) if call.func_name == "_?_:_" => match call.args.as_slice() {
            [condition, yes, no] => {
                estimate(&condition.expr, root, vars)
                    + estimate(&yes.expr, root, vars).max(estimate(&no.expr, root, vars))
            }
            _ => 1.0,
        },
        Expr::Call(call) => {
            let args: f64 = call
                .args
                .iter()
                .map(|a| estimate(&a.expr, root, vars))
                .sum();
            let target = call
                .target
                .as_ref()
                .map_or(0.0, |t| estimate(&t.expr, root, vars));
            let length = |e: &cel::IdedExpr| string_length(&e.expr, root, vars);
            let scanned = match call.func_name.as_str() {
                // Comparisons stop at the shorter operand (a literal keeps them cheap).
                "_==_" | "_!=_" => match call.args.as_slice() {
                    [a, b] => match (length(a), length(b)) {
                        (Some(x), Some(y)) => x.min(y) * 0.1,
                        (Some(x), None) | (None, Some(x)) => x * 0.1,
                        (None, None) => 0.0,
                    },
                    _ => 0.0,
                },
                "matches" | "contains" | "startsWith" | "endsWith" | "lowerAscii"
                | "upperAscii" | "replace" | "split" | "indexOf" | "lastIndexOf" | "trim"
                | "substring" => call
                    .target
                    .as_deref()
                    .or(call.args.first())
                    .and_then(length)
                    .map_or(0.0, |n| n * 0.1),
                _ => 0.0,
            };
            1.0 + args + target + scanned
        }
        // `has(x.f)` costs what `x` costs: kube's environments set cel-go's
        // `PresenceTestHasCost(false)`.
        Expr::Select(select) if select.test => estimate(&select.operand.expr, root, vars),
        Expr::Select(select) => 1.0 + estimate(&select.operand.expr, root, vars),
        // Constants cost nothing.
        Expr::Literal(_) => 0.0,
        Expr::List(list) => {
            1.0 + list
                .elements
                .iter()
                .map(|e| estimate(&e.expr, root, vars))
                .sum::<f64>()
        }
        _ => 1.0,
    }
}

/// How many elements a comprehension's range may have: a list literal's count, a schema
/// collection's bound, a filtered or mapped range's own range, else what fits in a request.
pub(crate) fn range_size<'a>(
    expr: &Expr,
    root: &'a Node,
    vars: &[(String, Option<&'a Node>)],
) -> f64 {
    match expr {
        Expr::List(list) => list.elements.len() as f64,
        Expr::Comprehension(c) => range_size(&c.iter_range.expr, root, vars),
        other => size_bound(node_of(other, root, vars)),
    }
}

/// The longest a string expression can be: a literal's length, a schema string's bound (its
/// `maxLength`, its longest `enum` value, else what fits in a request); `None` if not a string.
pub(crate) fn string_length<'a>(
    expr: &Expr,
    root: &'a Node,
    vars: &[(String, Option<&'a Node>)],
) -> Option<f64> {
    if let Expr::Literal(cel::common::ast::LiteralValue::String(s)) = expr {
        return Some(s.inner().len() as f64);
    }
    let node = node_of(expr, root, vars).filter(|n| matches!(n.kind, Some(Type::String)))?;
    let longest_enum = node
        .enumeration
        .iter()
        .filter_map(Value::as_str)
        .map(str::len)
        .max();
    Some(match longest_enum {
        Some(n) => n as f64,
        None => size_bound(Some(node)),
    })
}
