//! Label selectors (`app=web,tier in (a,b),!canary`) and field selectors
//! (`metadata.name=x,status.phase!=Active`), parsed and matched as apimachinery does.

use std::collections::BTreeMap;

use crate::frozen::Tree;

/// The operator of one label requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `key=v`, `key==v`, `key in (v,...)`.
    In(Vec<String>),
    /// `key!=v`, `key notin (v,...)`: also true when the key is absent.
    NotIn(Vec<String>),
    /// `key`.
    Exists,
    /// `!key`.
    DoesNotExist,
    /// `key>n`.
    GreaterThan(i64),
    /// `key<n`.
    LessThan(i64),
}

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// What the label's value must satisfy.
    pub op: Op,
}

/// Labels a selector can read: a map, or a compact form that looks values up by key.
pub trait LabelSet {
    /// The value of label `key`, if the set has it.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelSet for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// Labels as one boxed slice of `(key, value)` pairs sorted by key: two small strings per label
/// and one allocation for the set, where a map takes a node of room for eleven (a watch
/// cache keeps one per object).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SortedLabels(Box<[(Box<str>, Box<str>)]>);

impl SortedLabels {
    /// The labels in `pairs`, sorted by key (a key given twice keeps its last value).
    pub fn new<K: Into<Box<str>>, V: Into<Box<str>>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let mut pairs: Vec<(Box<str>, Box<str>)> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        // Stable: of equal keys the last given comes last, and is the one kept.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut kept: Vec<(Box<str>, Box<str>)> = Vec::with_capacity(pairs.len());
        for pair in pairs {
            match kept.last_mut() {
                Some(last) if last.0 == pair.0 => *last = pair,
                _ => kept.push(pair),
            }
        }
        Self(kept.into_boxed_slice())
    }

    /// Whether there are no labels.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The labels in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }
}

impl LabelSet for SortedLabels {
    fn label(&self, key: &str) -> Option<&str> {
        let at = self.0.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        self.0.get(at).map(|(_, v)| &**v)
    }
}

impl Requirement {
    fn matches<L: LabelSet + ?Sized>(&self, labels: &L) -> bool {
        let value = labels.label(&self.key);
        let listed = |values: &[String], v: &str| values.iter().any(|x| x == v);
        match (&self.op, value) {
            (Op::Exists, v) => v.is_some(),
            (Op::DoesNotExist, v) => v.is_none(),
            (Op::In(values), Some(v)) => listed(values, v),
            (Op::In(_), None) => false,
            (Op::NotIn(values), Some(v)) => !listed(values, v),
            (Op::NotIn(_), None) => true,
            (Op::GreaterThan(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v > *n),
            (Op::LessThan(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v < *n),
            (Op::GreaterThan(_) | Op::LessThan(_), None) => false,
        }
    }
}

/// A label selector: every requirement must hold. Empty selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// The requirements.
    pub requirements: Vec<Requirement>,
}

/// The selector in the query syntax, as `labels.Selector.String()` writes it: requirements
/// sorted by key, a single-valued `In` as `key=v`, `NotIn` as `key!=v` or `key notin (…)`,
/// values sorted; empty for an empty selector.
impl std::fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sorted: Vec<&Requirement> = self.requirements.iter().collect();
        sorted.sort_by(|a, b| a.key.cmp(&b.key));
        let set = |values: &[String]| {
            let mut values = values.to_vec();
            values.sort();
            values.join(",")
        };
        let terms: Vec<String> = sorted
            .iter()
            .map(|r| match &r.op {
                Op::In(v) if v.len() == 1 => format!("{}={}", r.key, v[0]),
                Op::In(v) => format!("{} in ({})", r.key, set(v)),
                Op::NotIn(v) if v.len() == 1 => format!("{}!={}", r.key, v[0]),
                Op::NotIn(v) => format!("{} notin ({})", r.key, set(v)),
                Op::Exists => r.key.clone(),
                Op::DoesNotExist => format!("!{}", r.key),
                Op::GreaterThan(n) => format!("{}>{n}", r.key),
                Op::LessThan(n) => format!("{}<{n}", r.key),
            })
            .collect();
        f.write_str(&terms.join(","))
    }
}

/// A selector that could not be parsed; the message is the one kube-apiserver gives.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    Comma,
    Open,
    Close,
    Eq,
    DoubleEq,
    NotEq,
    Not,
    Gt,
    Lt,
}

fn describe(token: &Token) -> String {
    match token {
        Token::Ident(s) => s.clone(),
        Token::Comma => ",".into(),
        Token::Open => "(".into(),
        Token::Close => ")".into(),
        Token::Eq => "=".into(),
        Token::DoubleEq => "==".into(),
        Token::NotEq => "!=".into(),
        Token::Not => "!".into(),
        Token::Gt => ">".into(),
        Token::Lt => "<".into(),
    }
}

fn lex(input: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = input.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            ' ' | '\t' | '\n' | '\r' => {
                chars.next();
            }
            ',' => {
                chars.next();
                tokens.push(Token::Comma);
            }
            '(' => {
                chars.next();
                tokens.push(Token::Open);
            }
            ')' => {
                chars.next();
                tokens.push(Token::Close);
            }
            '>' => {
                chars.next();
                tokens.push(Token::Gt);
            }
            '<' => {
                chars.next();
                tokens.push(Token::Lt);
            }
            '=' => {
                chars.next();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    tokens.push(Token::DoubleEq);
                } else {
                    tokens.push(Token::Eq);
                }
            }
            '!' => {
                chars.next();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    tokens.push(Token::NotEq);
                } else {
                    tokens.push(Token::Not);
                }
            }
            _ => {
                let mut ident = String::new();
                while let Some(&c) = chars.peek() {
                    if matches!(
                        c,
                        ' ' | '\t' | '\n' | '\r' | ',' | '(' | ')' | '=' | '!' | '<' | '>'
                    ) {
                        break;
                    }
                    ident.push(c);
                    chars.next();
                }
                tokens.push(Token::Ident(ident));
            }
        }
    }
    tokens
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        token
    }

    fn fail(found: Option<&Token>, expected: &str) -> SelectorError {
        let found = found.map_or_else(|| "EOS".to_owned(), describe);
        SelectorError(format!(
            "unable to parse requirement: found '{found}', expected: {expected}"
        ))
    }

    fn value_set(&mut self) -> Result<Vec<String>, SelectorError> {
        match self.next() {
            Some(Token::Open) => {}
            other => return Err(Self::fail(other.as_ref(), "'('")),
        }
        let mut values = Vec::new();
        loop {
            match self.next() {
                Some(Token::Ident(v)) => {
                    values.push(v);
                    match self.next() {
                        Some(Token::Comma) => continue,
                        Some(Token::Close) => return Ok(values),
                        other => return Err(Self::fail(other.as_ref(), "',' or ')'")),
                    }
                }
                Some(Token::Comma) => values.push(String::new()),
                Some(Token::Close) => {
                    values.push(String::new());
                    return Ok(values);
                }
                other => return Err(Self::fail(other.as_ref(), "',', ')' or identifier")),
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let negated = self.peek() == Some(&Token::Not);
        if negated {
            self.pos += 1;
        }
        let key = match self.next() {
            Some(Token::Ident(key)) => key,
            other => return Err(Self::fail(other.as_ref(), "identifier")),
        };
        check_key(&key)?;
        if negated {
            return Ok(Requirement {
                key,
                op: Op::DoesNotExist,
            });
        }
        let op = match self.peek() {
            None | Some(Token::Comma) => {
                return Ok(Requirement {
                    key,
                    op: Op::Exists,
                });
            }
            Some(_) => self.next(),
        };
        let op = match op {
            Some(Token::Eq | Token::DoubleEq) => Op::In(vec![self.single_value()?]),
            Some(Token::NotEq) => Op::NotIn(vec![self.single_value()?]),
            Some(Token::Gt | Token::Lt) => {
                let greater = matches!(self.tokens.get(self.pos - 1), Some(Token::Gt));
                let value = self.single_value()?;
                let n: i64 = value.parse().map_err(|_| {
                    SelectorError("unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer".to_owned())
                })?;
                if greater {
                    Op::GreaterThan(n)
                } else {
                    Op::LessThan(n)
                }
            }
            Some(Token::Ident(word)) if word == "in" => Op::In(self.value_set()?),
            Some(Token::Ident(word)) if word == "notin" => Op::NotIn(self.value_set()?),
            other => return Err(Self::fail(other.as_ref(), "'=', '!=', '==', 'in', notin'")),
        };
        let values = match &op {
            Op::In(v) | Op::NotIn(v) => v.clone(),
            _ => Vec::new(),
        };
        for value in values {
            if let Some(message) = crate::validation::label_value(&value).into_iter().next() {
                return Err(SelectorError(format!(
                    "values[0][{key}]: Invalid value: {value:?}: {message}"
                )));
            }
        }
        Ok(Requirement { key, op })
    }

    fn single_value(&mut self) -> Result<String, SelectorError> {
        match self.peek() {
            Some(Token::Ident(_)) => match self.next() {
                Some(Token::Ident(v)) => Ok(v),
                other => Err(Self::fail(other.as_ref(), "identifier")),
            },
            // `key=` selects the empty value.
            None | Some(Token::Comma) => Ok(String::new()),
            other => Err(Self::fail(other, "identifier")),
        }
    }
}

fn check_key(key: &str) -> Result<(), SelectorError> {
    match crate::validation::qualified_name(key).into_iter().next() {
        None => Ok(()),
        Some(message) => Err(SelectorError(format!(
            "key: Invalid value: {key:?}: {message}"
        ))),
    }
}

impl LabelSelector {
    /// Parses a selector in the `labelSelector` query syntax.
    ///
    /// # Errors
    /// A [`SelectorError`] with kube-apiserver's message.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser {
            tokens: lex(input),
            pos: 0,
        };
        let mut requirements = Vec::new();
        if parser.tokens.is_empty() {
            return Ok(Self::default());
        }
        loop {
            requirements.push(parser.requirement()?);
            match parser.next() {
                None => break,
                Some(Token::Comma) => continue,
                other => return Err(Parser::fail(other.as_ref(), "','")),
            }
        }
        Ok(Self { requirements })
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches<L: LabelSet + ?Sized>(&self, labels: &L) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// A `metav1.LabelSelector` object (`matchLabels`, `matchExpressions` with `In`,
    /// `NotIn`, `Exists`, `DoesNotExist`), as `LabelSelectorAsSelector` converts it; `{}`
    /// selects everything.
    ///
    /// # Errors
    /// A [`SelectorError`] for an unknown operator or an `In`/`NotIn` without values.
    pub fn from_object<T: Tree + ?Sized>(selector: &T) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        if let Some(labels) = selector.field("matchLabels") {
            for (key, value) in labels.entries() {
                let value = value.text().unwrap_or("").to_owned();
                requirements.push(Requirement {
                    key: key.to_owned(),
                    op: Op::In(vec![value]),
                });
            }
        }
        let expressions = selector
            .field("matchExpressions")
            .map(Tree::elements)
            .unwrap_or_default();
        for expression in expressions {
            let key = expression
                .field("key")
                .and_then(Tree::text)
                .unwrap_or("")
                .to_owned();
            let values: Vec<String> = expression
                .field("values")
                .map(|v| {
                    v.elements()
                        .into_iter()
                        .filter_map(|s| s.text().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let operator = expression
                .field("operator")
                .and_then(Tree::text)
                .unwrap_or("");
            let op = match operator {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(SelectorError(format!(
                        "for '{operator}', 'NotIn' operators, values set can't be empty"
                    )));
                }
                "In" => Op::In(values),
                "NotIn" => Op::NotIn(values),
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                other => {
                    return Err(SelectorError(format!(
                        "{other:?} is not a valid label selector operator"
                    )));
                }
            };
            requirements.push(Requirement { key, op });
        }
        Ok(Self { requirements })
    }
}

/// One term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldTerm {
    /// The field path, e.g. `metadata.name`.
    pub field: String,
    /// The value compared with.
    pub value: String,
    /// `!=` rather than `=`.
    pub negated: bool,
}

/// A field selector: every term must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// The terms.
    pub terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// Parses a selector in the `fieldSelector` query syntax (`\` escapes `,`, `=`, `!`).
    ///
    /// # Errors
    /// A [`SelectorError`] with kube-apiserver's message.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        for raw in split_unescaped(input, ',') {
            if raw.is_empty() {
                continue;
            }
            let (field, value, negated) = if let Some(i) = find_unescaped(&raw, "!=") {
                (&raw[..i], &raw[i + 2..], true)
            } else if let Some(i) = find_unescaped(&raw, "==") {
                (&raw[..i], &raw[i + 2..], false)
            } else if let Some(i) = find_unescaped(&raw, "=") {
                (&raw[..i], &raw[i + 1..], false)
            } else {
                return Err(SelectorError(format!(
                    "invalid selector: '{input}'; can't understand '{raw}'"
                )));
            };
            terms.push(FieldTerm {
                field: unescape(field),
                value: unescape(value),
                negated,
            });
        }
        Ok(Self { terms })
    }

    /// Whether `field` gives values that satisfy every term (`field` returns `None` for an
    /// unknown field, which never matches `=` and always matches `!=`).
    pub fn matches(&self, field: impl Fn(&str) -> Option<String>) -> bool {
        self.terms.iter().all(|t| {
            let value = field(&t.field);
            (value.as_deref() == Some(t.value.as_str())) != t.negated
        })
    }
}

fn split_unescaped(input: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in input.chars() {
        if escaped {
            if let Some(last) = parts.last_mut() {
                last.push('\\');
                last.push(c);
            }
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(String::new());
        } else if let Some(last) = parts.last_mut() {
            last.push(c);
        }
    }
    parts
}

fn find_unescaped(s: &str, needle: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if s[i..].starts_with(needle) {
            return Some(i);
        }
    }
    None
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut escaped = false;
    for c in s.chars() {
        if escaped || c != '\\' {
            out.push(c);
            escaped = false;
        } else {
            escaped = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selectors_parse_and_match() {
        let s = LabelSelector::parse("app=web, tier in (a, b),!canary,env!=prod,version").unwrap();
        assert_eq!(s.requirements.len(), 5);
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "b"), ("version", "1")])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("tier", "b"),
            ("version", "1"),
            ("canary", "")
        ])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "c"), ("version", "1")])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("tier", "a"),
            ("version", "1"),
            ("env", "prod")
        ])));
        let notin = LabelSelector::parse("env notin (prod,staging)").unwrap();
        assert!(notin.matches(&labels(&[])), "notin matches an absent key");
        let gt = LabelSelector::parse("n>3").unwrap();
        assert!(gt.matches(&labels(&[("n", "4")])) && !gt.matches(&labels(&[("n", "3")])));
        assert!(
            LabelSelector::parse("app==web")
                .unwrap()
                .matches(&labels(&[("app", "web")]))
        );
        assert!(LabelSelector::parse("").unwrap().is_empty());
        assert_eq!(
            LabelSelector::parse("a in b").unwrap_err().0,
            "unable to parse requirement: found 'b', expected: '('"
        );
        assert!(LabelSelector::parse("a=b c").is_err());
        assert!(LabelSelector::parse("bad key!=x").is_err());
        assert!(LabelSelector::parse("a=bad value").is_err());
    }

    #[test]
    fn field_selectors_parse_and_match() {
        let s = FieldSelector::parse("metadata.name=a\\,b,status.phase!=Active").unwrap();
        assert_eq!(
            s.terms[0],
            FieldTerm {
                field: "metadata.name".into(),
                value: "a,b".into(),
                negated: false
            }
        );
        let object = |f: &str| match f {
            "metadata.name" => Some("a,b".to_owned()),
            "status.phase" => Some("Terminating".to_owned()),
            _ => None,
        };
        assert!(s.matches(object));
        assert!(
            !FieldSelector::parse("metadata.name==c")
                .unwrap()
                .matches(object)
        );
        assert!(FieldSelector::parse("nonsense").is_err());
        assert!(FieldSelector::parse("").unwrap().terms.is_empty());
        // Escapes before multi-byte characters, and other odd input, never panic.
        for odd in [
            "metadata.name=\\é",
            "\\é=x",
            "a=b\\",
            "é=ü,!=",
            "=",
            "\\",
            "a\\=b=c",
        ] {
            let _ = FieldSelector::parse(odd);
            let _ = LabelSelector::parse(odd);
        }
        assert_eq!(
            FieldSelector::parse("metadata.name=\\é").unwrap().terms[0].value,
            "é"
        );
    }

    #[test]
    fn selector_objects_convert_as_apimachinery_does() {
        let labels: BTreeMap<String, String> =
            [("app".into(), "web".into()), ("tier".into(), "a".into())].into();
        let select =
            |v: serde_json::Value| LabelSelector::from_object(&v).unwrap().matches(&labels);
        assert!(select(serde_json::json!({})));
        assert!(select(serde_json::json!({"matchLabels": {"app": "web"}})));
        assert!(!select(serde_json::json!({"matchLabels": {"app": "db"}})));
        let written = LabelSelector::from_object(&serde_json::json!({
            "matchLabels": {"tier": "web", "app": "a"},
            "matchExpressions": [{"key": "env", "operator": "In", "values": ["b", "a"]},
                                 {"key": "old", "operator": "DoesNotExist"}]}))
        .unwrap();
        assert_eq!(written.to_string(), "app=a,env in (a,b),!old,tier=web");
        assert_eq!(
            LabelSelector::parse(&written.to_string())
                .unwrap()
                .to_string(),
            written.to_string()
        );
        assert!(select(serde_json::json!({"matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "canary", "operator": "DoesNotExist"}]})));
        assert!(!select(serde_json::json!({"matchExpressions": [
            {"key": "tier", "operator": "NotIn", "values": ["a"]}]})));
        assert!(
            LabelSelector::from_object(&serde_json::json!({"matchExpressions": [
            {"key": "x", "operator": "Near"}]}))
            .is_err()
        );
    }
}
