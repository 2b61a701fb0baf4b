//! `x-kubernetes-validations`: CEL rules on schema nodes, compiled once with the schema (on the
//! `cel` crate, with its string, list and math extensions, as Kubernetes enables cel-go's, and
//! Kubernetes' regex, URL and quantity libraries from `cel_lib`), a
//! static cost estimate that refuses rules too expensive for the declared sizes, and evaluation
//! with `self` (and `oldSelf` for transition rules) with apiextensions-apiserver's messages.

use std::sync::{Arc, OnceLock};

use cel::common::ast::Expr;
use cel::common::types::CelOptional;
use cel::objects::Key;
use cel::{Context, Env, Program};
use plinth_core::Cause;
use serde_json::Value;

use crate::{Additional, Node, SchemaError, SchemaErrorKind, Type};

/// The largest estimated cost of one rule, counting how often it may run (kube's
/// `StaticEstimatedCostLimit`).
const RULE_COST_LIMIT: f64 = 10_000_000.0;
/// The request size bound kube assumes for unbounded lists, maps and strings.
const MAX_REQUEST_BYTES: f64 = 3_145_728.0;

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

/// One compiled `x-kubernetes-validations` entry.
pub(crate) struct Rule {
    source: String,
    program: Program,
    message: Option<String>,
    message_expression: Option<Program>,
    reason: Option<String>,
    field_path: Option<String>,
    optional_old_self: bool,
    transition: bool,
    /// The depth of the deeper of the rule's and its message expression's trees: a deep rule
    /// is evaluated on a large stack (see `stack`).
    depth: usize,
    /// The fields of `self`/`oldSelf` the rule reads, when it reads them only as `self.<field>`:
    /// only those are converted for CEL (a large object's other fields are not copied).
    fields: Option<std::collections::BTreeSet<String>>,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule").field("rule", &self.source).finish()
    }
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

/// The functions kube's CEL environment for CRD validation declares: cel-go's standard
/// library, its strings, lists, math, optional and encoders extensions, and Kubernetes' list,
/// regex, URL, quantity, IP, CIDR, semver and format libraries. A rule calling anything else is
/// refused when the CRD is written, as cel-go's checker refuses it.
const KNOWN_FUNCTIONS: &[&str] = &[
    // Standard library.
    "size",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "type",
    "dyn",
    "duration",
    "timestamp",
    "matches",
    "contains",
    "startsWith",
    "endsWith",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getFullYear",
    "getHours",
    "getMilliseconds",
    "getMinutes",
    "getMonth",
    "getSeconds",
    "has",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
    // Optional values.
    "optional.of",
    "optional.none",
    "optional.ofNonZeroValue",
    "hasValue",
    "value",
    "orValue",
    "or",
    // Strings.
    "charAt",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "replace",
    "split",
    "substring",
    "trim",
    "join",
    "format",
    "reverse",
    "strings.quote",
    // Lists (cel-go's and Kubernetes').
    "isSorted",
    "sum",
    "min",
    "max",
    "slice",
    "flatten",
    "sort",
    "sortBy",
    "distinct",
    "lists.range",
    // Math.
    "math.greatest",
    "math.least",
    "math.ceil",
    "math.floor",
    "math.round",
    "math.trunc",
    "math.abs",
    "math.sign",
    "math.isNaN",
    "math.isInf",
    "math.isFinite",
    "math.bitAnd",
    "math.bitOr",
    "math.bitXor",
    "math.bitNot",
    "math.bitShiftLeft",
    "math.bitShiftRight",
    "math.sqrt",
    // Encoders.
    "base64.encode",
    "base64.decode",
    // Regex, URLs, quantities.
    "find",
    "findAll",
    "isURL",
    "url",
    "getScheme",
    "getHost",
    "getHostname",
    "getPort",
    "getEscapedPath",
    "getQuery",
    "isQuantity",
    "quantity",
    "compareTo",
    "isLessThan",
    "isGreaterThan",
    "asInteger",
    "asApproximateFloat",
    "sign",
    "isInteger",
    "add",
    "sub",
    // IPs and CIDRs.
    "isIP",
    "ip",
    "ip.isCanonical",
    "family",
    "isUnspecified",
    "isLoopback",
    "isLinkLocalMulticast",
    "isLinkLocalUnicast",
    "isGlobalUnicast",
    "isCIDR",
    "cidr",
    "containsIP",
    "containsCIDR",
    "masked",
    "prefixLength",
    // Semantic versions.
    "isSemver",
    "semver",
    "major",
    "minor",
    "patch",
    // Formats.
    "validate",
    "format.dns1123Label",
    "format.dns1123Subdomain",
    "format.dns1035Label",
    "format.qualifiedName",
    "format.dns1123LabelPrefix",
    "format.dns1123SubdomainPrefix",
    "format.dns1035LabelPrefix",
    "format.labelValue",
    "format.uri",
    "format.uuid",
    "format.byte",
    "format.date",
    "format.datetime",
    "format.named",
    // The same called through their namespace (`format.uri()` is a member call on `format`).
    "of",
    "none",
    "ofNonZeroValue",
    "quote",
    "range",
    "greatest",
    "least",
    "ceil",
    "floor",
    "round",
    "trunc",
    "abs",
    "isNaN",
    "isInf",
    "isFinite",
    "bitAnd",
    "bitOr",
    "bitXor",
    "bitNot",
    "bitShiftLeft",
    "bitShiftRight",
    "sqrt",
    "encode",
    "decode",
    "isCanonical",
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
    "named",
];

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

fn cost_message(cost: f64) -> String {
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
fn size_bound(node: Option<&Node>) -> f64 {
    let Some(node) = node else {
        return MAX_REQUEST_BYTES;
    };
    match node.kind {
        Some(Type::String) => node.max_length.map_or(MAX_REQUEST_BYTES, |n| n as f64),
        Some(Type::Array) => node.max_items.map_or_else(
            || MAX_REQUEST_BYTES / (min_size(node.items.as_deref()) + 1.0),
            |n| n as f64,
        ),
        Some(Type::Object) => node.max_properties.map_or_else(
            || {
                let value = match node.additional.as_deref() {
                    Some(Additional::Schema(s)) => min_size(Some(s)),
                    _ => 1.0,
                };
                MAX_REQUEST_BYTES / (value + 4.0)
            },
            |n| n as f64,
        ),
        _ => 1.0,
    }
}

/// The smallest serialized size of a value of `node` (kube's `estimateMinSizeJSON`, which
/// bounds unbounded lists and maps): an object counts its required fields without a default.
fn min_size(node: Option<&Node>) -> f64 {
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
fn node_of<'a>(
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
fn element_of(node: Option<&Node>) -> Option<&Node> {
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
fn estimate<'a>(expr: &Expr, root: &'a Node, vars: &[(String, Option<&'a Node>)]) -> f64 {
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
        Expr::Select(select) => 1.0 + estimate(&select.operand.expr, root, vars),
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
fn range_size<'a>(expr: &Expr, root: &'a Node, vars: &[(String, Option<&'a Node>)]) -> f64 {
    match expr {
        Expr::List(list) => list.elements.len() as f64,
        Expr::Comprehension(c) => range_size(&c.iter_range.expr, root, vars),
        other => size_bound(node_of(other, root, vars)),
    }
}

/// The longest a string expression can be: a literal's length, a schema string's bound (its
/// `maxLength`, its longest `enum` value, else what fits in a request); `None` if not a string.
fn string_length<'a>(
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

/// The fields of `self` and `oldSelf` that the rule (and its message expression) select, or
/// `None` if either is used whole.
fn read_fields(
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
fn to_cel_fields(
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

/// JSON as CEL sees it: integers as `int`, other numbers as `double`; the fields of an object
/// with declared properties under their escaped names (kube's property-name escaping: a field
/// CEL cannot name is left out), a map's keys as they are.
fn to_cel(value: &Value, node: Option<&Node>) -> cel::Value {
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
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
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

/// CEL's reserved words, which a property name is escaped from as `__{word}__`.
const RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The name a property has in CEL (apiextensions' escaping: `__` → `__underscores__`, `.` →
/// `__dot__`, `-` → `__dash__`, `/` → `__slash__`, a reserved word `w` → `__w__`), or `None` if
/// CEL cannot name it.
pub(crate) fn escape(name: &str) -> Option<String> {
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '_' if chars.peek() == Some(&'_') => {
                chars.next();
                out.push_str("__underscores__");
            }
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
    }
    Some(out)
}

/// The property name an escaped CEL name stands for.
pub(crate) fn unescape(escaped: &str) -> String {
    if let Some(inner) = escaped
        .strip_prefix("__")
        .and_then(|r| r.strip_suffix("__"))
        && RESERVED.contains(&inner)
    {
        return inner.to_owned();
    }
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    'outer: while !rest.is_empty() {
        for (token, plain) in [
            ("__underscores__", "__"),
            ("__dot__", "."),
            ("__dash__", "-"),
            ("__slash__", "/"),
        ] {
            if let Some(after) = rest.strip_prefix(token) {
                out.push_str(plain);
                rest = after;
                continue 'outer;
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out
}

/// The property of `node` that CEL names `field`.
fn property<'a>(node: &'a Node, field: &str) -> Option<&'a Node> {
    node.properties
        .get(&unescape(field))
        .filter(|_| escape(&unescape(field)).as_deref() == Some(field))
}

/// The type kube names in a rule's error (`Invalid value: "object"`).
fn type_name(node: &Node) -> &'static str {
    node.kind.map_or("", Type::name)
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

/// A CEL type as far as the schema tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CelType {
    Int,
    Double,
    String,
    Bool,
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
            Some(Type::String) => Self::String,
            Some(Type::Boolean) => Self::Bool,
            Some(Type::Array) => Self::List,
            Some(Type::Object) => Self::Map,
            None => Self::Dyn,
        }
    }
}

/// A small part of cel-go's type checker, enough for the mistakes CRD authors make: a field the
/// schema does not declare, and operators applied to types they have no overload for.
struct Checker<'a> {
    root: &'a Node,
    source: &'a str,
    info: &'a cel::common::ast::SourceInfo,
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
    fn check(
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
                cel::common::ast::LiteralValue::Bytes(_) => CelType::Dyn,
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
        use CelType::{Bool, Double, Dyn, Int, List, Map, Null, String as Str};
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
                let comparable = |t: CelType| matches!(t, Int | Double | Str | Bool | Dyn);
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
                if a != b || !matches!(a, Int | Double | Str | List) {
                    return mismatch();
                }
                Ok(*a)
            }
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

fn to_json(value: &cel::Value) -> Value {
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
        let mut context = Context::with_env(env());
        for (name, value) in bindings {
            let converted: Result<Box<dyn cel::common::value::Val>, _> =
                to_cel(value, None).try_into();
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
