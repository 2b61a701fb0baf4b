//! `x-kubernetes-validations`: CEL rules on schema nodes, compiled once with the schema (on the
//! `cel` crate, with its string, list and math extensions, as Kubernetes enables cel-go's, and
//! Kubernetes' regex, URL and quantity libraries from `cel_lib`), a
//! static cost estimate that refuses rules too expensive for the declared sizes, and evaluation
//! with `self` (and `oldSelf` for transition rules) with apiextensions-apiserver's messages.

use std::sync::{Arc, OnceLock};

use cel::common::ast::Expr;
use cel::common::types::CelOptional;
use cel::{Context, Env, Program};
use plinth_core::Cause;
use serde_json::Value;

use crate::error::{SchemaError, SchemaErrorKind};
use crate::node::{Node, Rule};

mod check;
mod cost;
mod expression;
pub(crate) mod names;
mod values;

use check::Checker;
use cost::{RULE_COST_LIMIT, cost_message, estimate};
pub use expression::{Evaluated, Expression};
use names::{KNOWN_FUNCTIONS, type_name};
use values::{read_fields, to_cel_fields};

/// The environment every rule compiles and runs in, and the extensions that failed to load
/// (none, unless the `cel` crate changes under us: a test checks).
fn environment() -> &'static (Arc<Env>, Vec<String>) {
    static ENV: OnceLock<(Arc<Env>, Vec<String>)> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        let mut failed = Vec::new();
        for (name, extension) in [
            (
                "strings",
                cel::extensions::strings as fn(&mut Env) -> Result<(), cel::DeclarationError>,
            ),
            ("lists", cel::extensions::lists),
            ("math", cel::extensions::math),
            ("kubernetes", crate::cel_lib::extension),
        ] {
            if let Err(e) = env.add_extension(extension) {
                failed.push(format!("{name}: {e}"));
            }
        }
        (Arc::new(env), failed)
    })
}

fn env() -> Arc<Env> {
    environment().0.clone()
}

/// The CEL extensions that failed to load.
#[cfg(test)]
pub(crate) fn extension_failures() -> &'static [String] {
    &environment().1
}

/// How Go prints the rule in a CRD error (`apiextensions.ValidationRule{...}`).
fn go_rule(v: &Value) -> String {
    let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let reason = match v.get("reason").and_then(Value::as_str) {
        Some(r) => format!("\"{r}\""),
        None => "(*apiextensions.FieldValueErrorReason)(nil)".into(),
    };
    let optional = match v.get("optionalOldSelf").and_then(Value::as_bool) {
        Some(b) => format!("{b}"),
        None => "(*bool)(nil)".into(),
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{:?}, Message:{:?}, MessageExpression:{:?}, Reason:{reason}, FieldPath:{:?}, OptionalOldSelf:{optional}}}",
        text("rule"),
        text("message"),
        text("messageExpression"),
        text("fieldPath")
    )
}

/// Names an expression may use besides `self`/`oldSelf`: its comprehension variables.
fn bound_names(expr: &Expr, out: &mut Vec<String>) {
    match expr {
        Expr::Comprehension(c) => {
            out.push(c.iter_var.clone());
            out.extend(c.iter_var2.clone());
            out.push(c.accu_var.clone());
            for e in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                bound_names(&e.expr, out);
            }
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                bound_names(&target.expr, out);
            }
            for arg in &call.args {
                bound_names(&arg.expr, out);
            }
        }
        Expr::Select(select) => bound_names(&select.operand.expr, out),
        Expr::List(list) => {
            for e in &list.elements {
                bound_names(&e.expr, out);
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                if let cel::common::ast::EntryExpr::MapEntry(e) = &entry.expr {
                    bound_names(&e.key.expr, out);
                    bound_names(&e.value.expr, out);
                }
            }
        }
        _ => {}
    }
}

/// The longest expression cel-go parses, in code points (its `expressionSizeCodePointLimit`).
const MAX_SOURCE_CODE_POINTS: usize = 100_000;
/// How deep an expression's tree may be. The parser bounds nesting (brackets, calls, ternaries)
/// at 96 levels; a chain of binary operators or selections nests without bound, and the `cel`
/// crate evaluates and drops a tree recursively, so trees deeper than this are refused (see
/// `stack`). cel-go has no such limit; a rule needs a 1,000-term chain to meet it.
pub(crate) const MAX_DEPTH: usize = 1_000;

/// The children of an expression node.
fn children(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::Comprehension(c) => vec![
            &c.iter_range.expr,
            &c.accu_init.expr,
            &c.loop_cond.expr,
            &c.loop_step.expr,
            &c.result.expr,
        ],
        Expr::Call(call) => call
            .target
            .iter()
            .map(|t| &t.expr)
            .chain(call.args.iter().map(|a| &a.expr))
            .collect(),
        Expr::Select(select) => vec![&select.operand.expr],
        Expr::List(list) => list.elements.iter().map(|e| &e.expr).collect(),
        Expr::Map(map) => map
            .entries
            .iter()
            .filter_map(|entry| match &entry.expr {
                cel::common::ast::EntryExpr::MapEntry(e) => Some([&e.key.expr, &e.value.expr]),
                cel::common::ast::EntryExpr::StructField(_) => None,
            })
            .flatten()
            .collect(),
        _ => Vec::new(),
    }
}

/// The depth of an expression's tree, counted without recursion (the tree may be deep).
fn depth(root: &Expr) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(root, 1)];
    while let Some((expr, level)) = pending.pop() {
        deepest = deepest.max(level);
        pending.extend(children(expr).into_iter().map(|c| (c, level + 1)));
    }
    deepest
}

/// A parse failure in cel-go's words: `ERROR: <input>:L:C: message`, then the line and a caret
/// under the column. Formatted here rather than by the `cel` crate, whose `Display` panics on a
/// column past 65,535 and prints its recursion error's debug form.
fn parse_error(source: &str, e: &cel::ParseErrors) -> String {
    const RECURSION: &str = "Recursion limit of ";
    let mut out = String::from("compilation failed: ");
    for (i, error) in e.errors.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let (line, column) = error.pos;
        let message = match error.msg.find(RECURSION) {
            Some(at) => {
                let limit: String = error.msg[at + RECURSION.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                format!("expression recursion limit exceeded: {limit}")
            }
            None => error.msg.clone(),
        };
        out.push_str(&format!("ERROR: <input>:{line}:{column}: {message}"));
        let text = usize::try_from(line - 1)
            .ok()
            .and_then(|l| source.lines().nth(l));
        if let (Some(text), Ok(column)) = (text, usize::try_from(column - 1)) {
            out.push_str(&format!("\n | {text}\n | {}^", ".".repeat(column)));
        }
    }
    out
}

/// Compiles `source`, refusing references other than `self`, `oldSelf` and comprehension
/// variables (as cel-go's checker does). Runs on the large stack `Schema::compile` provides.
fn compile(source: &str, node: Option<&Node>) -> Result<Program, String> {
    compile_with(source, node, &[])
}

/// [`compile`], with `variables` declared besides `self` and `oldSelf`.
fn compile_with(source: &str, node: Option<&Node>, variables: &[&str]) -> Result<Program, String> {
    let size = source.chars().count();
    if size > MAX_SOURCE_CODE_POINTS {
        return Err(format!(
            "compilation failed: expression code point size exceeds limit: size: {size}, limit {MAX_SOURCE_CODE_POINTS}"
        ));
    }
    let program = env().compile(source).map_err(|e| parse_error(source, &e))?;
    let deep = depth(&program.expression().expr);
    if deep > MAX_DEPTH {
        return Err(format!(
            "compilation failed: ERROR: <input>:1:1: expression nesting exceeds the limit: depth {deep}, limit {MAX_DEPTH}"
        ));
    }
    let mut bound = Vec::new();
    bound_names(&program.expression().expr, &mut bound);
    if let Some(root) = node {
        let checker = Checker {
            root,
            source,
            info: program.source_info(),
        };
        checker.check(program.expression(), &[])?;
    }
    let references = program.references();
    if let Some(unknown) = references.variables().into_iter().find(|v| {
        // Function namespaces (`format.dns1123Label()`, `math.abs()`) are not variables.
        !matches!(
            *v,
            "self"
                | "oldSelf"
                | "format"
                | "lists"
                | "math"
                | "strings"
                | "optional"
                | "base64"
                | "ip"
        ) && !bound.iter().any(|b| b == v)
            && !variables.contains(v)
    }) {
        return Err(format!(
            "compilation failed: ERROR: <input>:1:1: undeclared reference to '{unknown}' (in container '')"
        ));
    }
    if let Some(unknown) = references
        .functions()
        .into_iter()
        .find(|f| !f.starts_with(['_', '@', '!', '-']) && !KNOWN_FUNCTIONS.contains(f))
    {
        return Err(format!(
            "compilation failed: ERROR: <input>:1:1: undeclared reference to '{unknown}' (in container '')"
        ));
    }
    Ok(program)
}

/// Compiles a node's `x-kubernetes-validations`, checking each rule's estimated cost against
/// the budget given how many times it may run (`cardinality`).
pub(crate) fn compile_rules(
    rules: Option<&Value>,
    node: &Node,
    path: &str,
    cardinality: f64,
) -> Result<Vec<Arc<Rule>>, SchemaError> {
    let Some(rules) = rules.and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    let mut compiled = Vec::new();
    for (i, v) in rules.iter().enumerate() {
        let at = format!("{path}.x-kubernetes-validations[{i}]");
        let invalid = |field: &str, reason: String| SchemaError {
            path: format!("{at}.{field}"),
            reason,
            kind: SchemaErrorKind::InvalidValue(go_rule(v)),
        };
        let source = v.get("rule").and_then(Value::as_str).unwrap_or("").trim();
        if source.is_empty() {
            return Err(SchemaError {
                path: format!("{at}.rule"),
                reason: String::new(),
                kind: SchemaErrorKind::Required,
            });
        }
        let program = compile(source, Some(node)).map_err(|e| invalid("rule", e))?;
        const REASONS: [&str; 4] = [
            "FieldValueDuplicate",
            "FieldValueForbidden",
            "FieldValueInvalid",
            "FieldValueRequired",
        ];
        if let Some(reason) = v.get("reason").and_then(Value::as_str)
            && !REASONS.contains(&reason)
        {
            return Err(SchemaError {
                path: format!("{at}.reason"),
                reason: reason.to_owned(),
                kind: SchemaErrorKind::NotSupported(
                    REASONS.iter().map(|r| (*r).to_owned()).collect(),
                ),
            });
        }
        let message_expression = match v.get("messageExpression").and_then(Value::as_str) {
            Some(m) if !m.trim().is_empty() => {
                Some(compile(m, Some(node)).map_err(|e| invalid("messageExpression", e))?)
            }
            _ => None,
        };
        let transition = program.references().has_variable("oldSelf");
        let optional_old_self = v.get("optionalOldSelf").and_then(Value::as_bool) == Some(true);
        if optional_old_self && !transition {
            return Err(SchemaError {
                path: format!("{at}.optionalOldSelf"),
                reason: "may not be set if oldSelf is not used in rule".into(),
                kind: SchemaErrorKind::Forbidden,
            });
        }
        let cost = estimate(&program.expression().expr, node, &[]) * cardinality;
        if cost > RULE_COST_LIMIT {
            return Err(SchemaError {
                path: format!("{at}.rule"),
                reason: cost_message(cost),
                kind: SchemaErrorKind::Forbidden,
            });
        }
        let fields = read_fields(&program, message_expression.as_ref());
        let depth = std::iter::once(&program)
            .chain(message_expression.as_ref())
            .map(|p| depth(&p.expression().expr))
            .max()
            .unwrap_or(0);
        compiled.push(Arc::new(Rule {
            depth,
            source: source.to_owned(),
            program,
            message: v
                .get("message")
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
                .map(str::to_owned),
            message_expression,
            reason: v.get("reason").and_then(Value::as_str).map(str::to_owned),
            field_path: v
                .get("fieldPath")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
                .map(str::to_owned),
            optional_old_self,
            transition,
            fields,
        }));
    }
    Ok(compiled)
}

impl Rule {
    /// Evaluates the rule on `value` (and `old`, for a transition rule), adding the cause kube
    /// gives when it fails.
    pub(crate) fn check(
        &self,
        node: &Node,
        value: &Value,
        old: Option<&Value>,
        path: &str,
        causes: &mut Vec<Cause>,
    ) {
        if self.depth <= crate::stack::INLINE_DEPTH {
            return self.evaluate(node, value, old, path, causes);
        }
        let outcome = crate::stack::on_stack(crate::stack::EVALUATE_STACK, || {
            let mut found = Vec::new();
            self.evaluate(node, value, old, path, &mut found);
            found
        });
        match outcome {
            Some(found) => causes.extend(found),
            None => causes.push(Cause::invalid(
                path,
                &Value::String(type_name(node).to_owned()),
                &format!(
                    "the rule could not be evaluated: no thread could be started, evaluating rule: {}",
                    self.source
                ),
            )),
        }
    }

    /// [`Rule::check`] on the current thread's stack.
    fn evaluate(
        &self,
        node: &Node,
        value: &Value,
        old: Option<&Value>,
        path: &str,
        causes: &mut Vec<Cause>,
    ) {
        if self.transition && old.is_none() && !self.optional_old_self {
            return;
        }
        let boxed = |v: &Value| -> Option<Box<dyn cel::common::value::Val>> {
            to_cel_fields(v, node, self.fields.as_ref()).try_into().ok()
        };
        let mut context = Context::with_env(env());
        if let Some(value) = boxed(value) {
            context.add_variable_as_val("self", value);
        }
        if self.transition {
            if self.optional_old_self {
                let old = match old.and_then(boxed) {
                    Some(old) => CelOptional::of(old),
                    None => CelOptional::none(),
                };
                context.add_variable_as_val("oldSelf", Box::new(old));
            } else if let Some(old) = old.and_then(boxed) {
                context.add_variable_as_val("oldSelf", old);
            }
        }
        let field = match &self.field_path {
            Some(extra) => format!(
                "{path}{}",
                if extra.starts_with('.') || extra.starts_with('[') {
                    extra.clone()
                } else {
                    format!(".{extra}")
                }
            ),
            None => path.to_owned(),
        };
        let shown = Value::String(type_name(node).to_owned());
        match self.program.execute(&context) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                let detail = self.message(&context);
                causes.push(match self.reason.as_deref() {
                    Some("FieldValueForbidden") => Cause::forbidden(field, &detail),
                    Some("FieldValueRequired") => Cause::required(field, &detail),
                    Some("FieldValueDuplicate") => Cause::new(
                        "FieldValueDuplicate",
                        field,
                        format!(
                            "Duplicate value: {}",
                            plinth_core::status::render_value(&shown)
                        ),
                    ),
                    _ => Cause::invalid(field, &shown, &detail),
                });
            }
            Ok(other) => causes.push(Cause::invalid(
                field,
                &shown,
                &format!(
                    "rule did not evaluate to a bool (got {other:?}) evaluating rule: {}",
                    self.source
                ),
            )),
            Err(e) => {
                // cel-go's wording for the common runtime errors.
                let error = match &e {
                    cel::ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
                    other => other.to_string(),
                };
                causes.push(Cause::invalid(
                    field,
                    &shown,
                    &format!("{error} evaluating rule: {}", self.source),
                ));
            }
        }
    }

    fn message(&self, context: &Context) -> String {
        if let Some(expression) = &self.message_expression
            && let Ok(cel::Value::String(text)) = expression.execute(context)
            && !text.trim().is_empty()
        {
            return text.to_string();
        }
        match &self.message {
            Some(m) => m.clone(),
            None => format!("failed rule: {}", self.source),
        }
    }
}
