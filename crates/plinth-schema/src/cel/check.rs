//! A small part of cel-go's type checker.

use cel::common::ast::Expr;

use crate::node::{Node, Type};

use super::cost::{element_of, node_of};
use super::names::property;

/// A CEL type as far as the schema tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CelType {
    Int,
    Double,
    String,
    Bool,
    Bytes,
    /// `format: duration` strings.
    Duration,
    /// `format: date` and `format: date-time` strings.
    Timestamp,
    List,
    Map,
    Null,
    /// Unknown (int-or-string, preserved fields, anything the checker does not follow).
    Dyn,
}

impl CelType {
    fn name(self) -> &'static str {
        match self {
            Self::Int => "int",
            Self::Double => "double",
            Self::String => "string",
            Self::Bool => "bool",
            Self::Bytes => "bytes",
            Self::Duration => "google.protobuf.Duration",
            Self::Timestamp => "google.protobuf.Timestamp",
            Self::List => "list(dyn)",
            Self::Map => "map(string, dyn)",
            Self::Null => "null_type",
            Self::Dyn => "dyn",
        }
    }

    fn of(node: Option<&Node>) -> Self {
        let Some(node) = node else { return Self::Dyn };
        if node.int_or_string {
            return Self::Dyn;
        }
        match node.kind {
            Some(Type::Integer) => Self::Int,
            Some(Type::Number) => Self::Double,
            Some(Type::String) => match node.format.as_deref() {
                Some("duration") => Self::Duration,
                Some("date" | "date-time") => Self::Timestamp,
                Some("byte") => Self::Bytes,
                _ => Self::String,
            },
            Some(Type::Boolean) => Self::Bool,
            Some(Type::Array) => Self::List,
            Some(Type::Object) => Self::Map,
            None => Self::Dyn,
        }
    }
}

/// A small part of cel-go's type checker, enough for the mistakes CRD authors make: a field the
/// schema does not declare, and operators applied to types they have no overload for.
pub(crate) struct Checker<'a> {
    pub(crate) root: &'a Node,
    pub(crate) source: &'a str,
    pub(crate) info: &'a cel::common::ast::SourceInfo,
}

impl<'a> Checker<'a> {
    fn error(&self, id: u64, message: &str) -> String {
        let offset = self
            .info
            .offset_for(id)
            .map_or(0, |(start, _)| start as usize);
        let column = self.source[..offset.min(self.source.len())].chars().count();
        format!(
            "compilation failed: ERROR: <input>:1:{}: {message}\n | {}\n | {}^",
            column + 1,
            self.source,
            ".".repeat(column)
        )
    }

    /// The schema node an expression denotes, when the checker can follow it.
    fn node(&self, expr: &Expr, vars: &[(String, Option<&'a Node>)]) -> Option<&'a Node> {
        node_of(expr, self.root, vars)
    }

    /// Checks `expr` and returns its type.
    pub(crate) fn check(
        &self,
        expr: &cel::IdedExpr,
        vars: &[(String, Option<&'a Node>)],
    ) -> Result<CelType, String> {
        match &expr.expr {
            Expr::Literal(literal) => Ok(match literal {
                cel::common::ast::LiteralValue::Boolean(_) => CelType::Bool,
                cel::common::ast::LiteralValue::Int(_)
                | cel::common::ast::LiteralValue::UInt(_) => CelType::Int,
                cel::common::ast::LiteralValue::Double(_) => CelType::Double,
                cel::common::ast::LiteralValue::String(_) => CelType::String,
                cel::common::ast::LiteralValue::Null => CelType::Null,
                cel::common::ast::LiteralValue::Bytes(_) => CelType::Bytes,
            }),
            Expr::Ident(_) => Ok(CelType::of(self.node(&expr.expr, vars))),
            Expr::Select(select) => {
                self.check(&select.operand, vars)?;
                if select.test {
                    return Ok(CelType::Bool);
                }
                if let Some(parent) = self.node(&select.operand.expr, vars)
                    && parent.kind == Some(Type::Object)
                    && !parent.preserve_unknown
                    && parent.additional.is_none()
                    && !parent.embedded_resource
                    && !parent.properties.is_empty()
                    && property(parent, &select.field).is_none()
                {
                    return Err(self.error(expr.id, &format!("undefined field '{}'", select.field)));
                }
                Ok(CelType::of(self.node(&expr.expr, vars)))
            }
            Expr::Comprehension(c) => {
                self.check(&c.iter_range, vars)?;
                let range = self.node(&c.iter_range.expr, vars);
                // Over a list the variable is an element; over a map, a key (not followed).
                let element = match range {
                    Some(n) if n.kind == Some(Type::Object) => None,
                    other => element_of(other),
                };
                let mut inner = vars.to_vec();
                inner.push((c.iter_var.clone(), element));
                self.check(&c.loop_step, &inner)?;
                self.check(&c.result, &inner)?;
                Ok(CelType::Dyn)
            }
            Expr::Call(call) => {
                if let Some(target) = &call.target {
                    self.check(target, vars)?;
                }
                let mut types = Vec::with_capacity(call.args.len());
                for arg in &call.args {
                    types.push(self.check(arg, vars)?);
                }
                self.call_type(expr.id, &call.func_name, &types)
            }
            Expr::List(list) => {
                for e in &list.elements {
                    self.check(e, vars)?;
                }
                Ok(CelType::List)
            }
            Expr::Map(_) => Ok(CelType::Map),
            _ => Ok(CelType::Dyn),
        }
    }

    fn call_type(&self, id: u64, function: &str, args: &[CelType]) -> Result<CelType, String> {
        use CelType::{
            Bool, Bytes, Double, Duration, Dyn, Int, List, Map, Null, String as Str, Timestamp,
        };
        let numeric = |t: CelType| matches!(t, Int | Double);
        let mismatch = || {
            let names: Vec<&str> = args.iter().map(|t| t.name()).collect();
            Err(self.error(
                id,
                &format!(
                    "found no matching overload for '{function}' applied to '({})'",
                    names.join(", ")
                ),
            ))
        };
        match (function, args) {
            ("_==_" | "_!=_", [a, b]) => {
                if *a != Dyn
                    && *b != Dyn
                    && a != b
                    && *a != Null
                    && *b != Null
                    && !(numeric(*a) && numeric(*b))
                {
                    return mismatch();
                }
                Ok(Bool)
            }
            ("_<_" | "_<=_" | "_>_" | "_>=_", [a, b]) => {
                let comparable = |t: CelType| {
                    matches!(
                        t,
                        Int | Double | Str | Bool | Bytes | Duration | Timestamp | Dyn
                    )
                };
                let same = a == b || *a == Dyn || *b == Dyn || (numeric(*a) && numeric(*b));
                if !(comparable(*a) && comparable(*b) && same) {
                    return mismatch();
                }
                Ok(Bool)
            }
            ("_+_", [a, b]) => {
                if *a == Dyn || *b == Dyn {
                    return Ok(Dyn);
                }
                match (a, b) {
                    (Duration, Duration) => return Ok(Duration),
                    (Timestamp, Duration) | (Duration, Timestamp) => return Ok(Timestamp),
                    _ => {}
                }
                if a != b || !matches!(a, Int | Double | Str | Bytes | List) {
                    return mismatch();
                }
                Ok(*a)
            }
            ("_-_", [a @ (Duration | Timestamp), b]) => match (a, b) {
                (_, Dyn) => Ok(Dyn),
                (Duration, Duration) => Ok(Duration),
                (Timestamp, Duration) => Ok(Timestamp),
                (Timestamp, Timestamp) => Ok(Duration),
                _ => mismatch(),
            },
            ("duration", [Str | Dyn]) => Ok(Duration),
            ("timestamp", [Str | Dyn]) => Ok(Timestamp),
            (
                "getHours" | "getMinutes" | "getSeconds" | "getMilliseconds" | "getFullYear"
                | "getMonth" | "getDate" | "getDayOfMonth" | "getDayOfWeek" | "getDayOfYear",
                _,
            ) => Ok(Int),
            ("_-_" | "_*_" | "_/_" | "_%_", [a, b]) => {
                if *a == Dyn || *b == Dyn {
                    return Ok(Dyn);
                }
                if a != b || !numeric(*a) || (function == "_%_" && *a == Double) {
                    return mismatch();
                }
                Ok(*a)
            }
            ("_&&_" | "_||_", [a, b]) => {
                if [*a, *b].iter().any(|t| !matches!(t, Bool | Dyn)) {
                    return mismatch();
                }
                Ok(Bool)
            }
            ("!_", [a]) => {
                if !matches!(a, Bool | Dyn) {
                    return mismatch();
                }
                Ok(Bool)
            }
            ("size", _) => Ok(Int),
            ("_in_" | "has" | "matches" | "startsWith" | "endsWith" | "contains", _) => Ok(Bool),
            ("_?_:_", [_, a, b]) => Ok(if a == b { *a } else { Dyn }),
            ("_[_]", [container, _]) => Ok(match container {
                Map | List => Dyn,
                _ => Dyn,
            }),
            _ => Ok(Dyn),
        }
    }
}
