//! CEL expressions over JSON bound to names, for admission policies and match conditions.

use cel::common::ast::Expr;
use cel::objects::Key;
use cel::{Context, Program};
use serde_json::Value;

use super::values::to_cel;
use super::{children, compile_with, env};

/// A CEL expression over JSON values bound to names (admission's `object`, `oldObject`,
/// `request`, `params`…), compiled once in the environment CRD rules use.
pub struct Expression {
    source: String,
    program: Program,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expression")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// What an expression evaluated to, as far as admission cares.
#[derive(Clone, Debug, PartialEq)]
pub enum Evaluated {
    /// A bool.
    Bool(bool),
    /// A string.
    String(String),
    /// Anything else, as JSON where it converts (null for what does not).
    Other(Value),
}

pub(crate) fn to_json(value: &cel::Value) -> Value {
    match value {
        cel::Value::Null => Value::Null,
        cel::Value::Bool(b) => Value::Bool(*b),
        cel::Value::Int(i) => Value::from(*i),
        cel::Value::UInt(u) => Value::from(*u),
        cel::Value::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        cel::Value::String(s) => Value::String(s.to_string()),
        cel::Value::List(items) => Value::Array(items.iter().map(to_json).collect()),
        cel::Value::Map(map) => Value::Object(
            map.map
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        Key::String(s) => s.to_string(),
                        other => format!("{other:?}"),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        _ => Value::Null,
    }
}

impl Expression {
    /// Compiles `source`, which may name `variables` (and nothing else but comprehension
    /// variables and the library's functions).
    ///
    /// # Errors
    /// cel-go's `compilation failed: ERROR: <input>:…` message.
    pub fn compile(source: &str, variables: &[&str]) -> Result<Self, String> {
        let program = crate::stack::on_stack(crate::stack::EVALUATE_STACK, || {
            compile_with(source, None, variables)
        })
        .unwrap_or_else(|| Err("compilation failed: no thread could be started".to_owned()))?;
        Ok(Self {
            source: source.to_owned(),
            program,
        })
    }

    /// The expression's text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The field paths the expression selects from each of `roots` (`object.spec.replicas` →
    /// (`object`, [`spec`, `replicas`])), each path once, `has()` tests included.
    pub fn selections(&self, roots: &[&str]) -> Vec<(String, Vec<String>)> {
        fn chain<'e>(expr: &'e Expr, roots: &[&str]) -> Option<(&'e str, Vec<&'e str>)> {
            match expr {
                Expr::Ident(name) if roots.contains(&name.as_str()) => {
                    Some((name.as_str(), Vec::new()))
                }
                Expr::Select(select) => {
                    let (root, mut path) = chain(&select.operand.expr, roots)?;
                    path.push(select.field.as_str());
                    Some((root, path))
                }
                _ => None,
            }
        }
        let mut found: Vec<(String, Vec<String>)> = Vec::new();
        let mut pending = vec![&self.program.expression().expr];
        while let Some(expr) = pending.pop() {
            if let Some((root, path)) = chain(expr, roots).filter(|(_, p)| !p.is_empty()) {
                let entry = (
                    root.to_owned(),
                    path.iter().map(|s| (*s).to_owned()).collect(),
                );
                if !found.contains(&entry) {
                    found.push(entry);
                }
            }
            pending.extend(children(expr));
        }
        found
    }

    /// Evaluates it with each name bound to its JSON value.
    ///
    /// # Errors
    /// cel-go's runtime error (`no such key: x`).
    pub fn evaluate(&self, bindings: &[(&str, &Value)]) -> Result<Evaluated, String> {
        let typed: Vec<(&str, &Value, Option<&crate::Schema>)> =
            bindings.iter().map(|(n, v)| (*n, *v, None)).collect();
        self.evaluate_typed(&typed)
    }

    /// Evaluates it with each name bound to its JSON value, typed by its schema when given
    /// (a custom resource's: `format: duration` strings are durations, `date-time` ones
    /// timestamps, fields named as kube escapes them).
    ///
    /// # Errors
    /// cel-go's runtime error (`no such key: x`).
    pub fn evaluate_typed(
        &self,
        bindings: &[(&str, &Value, Option<&crate::Schema>)],
    ) -> Result<Evaluated, String> {
        let mut context = Context::with_env(env());
        for (name, value, schema) in bindings {
            let converted: Result<Box<dyn cel::common::value::Val>, _> =
                to_cel(value, schema.map(crate::Schema::root)).try_into();
            if let Ok(converted) = converted {
                context.add_variable_as_val(*name, converted);
            }
        }
        match self.program.execute(&context) {
            Ok(cel::Value::Bool(b)) => Ok(Evaluated::Bool(b)),
            Ok(cel::Value::String(s)) => Ok(Evaluated::String(s.to_string())),
            Ok(other) => Ok(Evaluated::Other(to_json(&other))),
            Err(cel::ExecutionError::NoSuchKey(key)) => Err(format!("no such key: {key}")),
            Err(e) => Err(e.to_string()),
        }
    }
}
