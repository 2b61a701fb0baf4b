//! The JSONPath subset that CRD printer columns and scale paths use: `.a.b`, `['a.b']`,
//! `[0]`, `[*]`, and filters `[?(@.type=="Ready")]`.

use serde_json::Value;

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    Filter {
        path: Vec<String>,
        value: String,
        negated: bool,
    },
}

/// A parsed path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

/// A path that could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSONPath {path:?}: {reason}")]
pub struct JsonPathError {
    /// The path.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

impl JsonPath {
    /// Parses a path such as `.status.conditions[?(@.type=="Ready")].status`; a surrounding
    /// `{...}` is allowed.
    ///
    /// # Errors
    /// A [`JsonPathError`] for syntax this subset does not take.
    pub fn parse(input: &str) -> Result<Self, JsonPathError> {
        let fail = |reason: &str| JsonPathError {
            path: input.to_owned(),
            reason: reason.to_owned(),
        };
        let trimmed = input.trim();
        let body = trimmed
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .unwrap_or(trimmed);
        let body = body.strip_prefix('$').unwrap_or(body);
        let chars: Vec<char> = body.chars().collect();
        let mut steps = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '.' => {
                    let start = i + 1;
                    let mut end = start;
                    while end < chars.len() && chars[end] != '.' && chars[end] != '[' {
                        end += 1;
                    }
                    if end == start {
                        return Err(fail("empty field name"));
                    }
                    steps.push(Step::Field(chars[start..end].iter().collect()));
                    i = end;
                }
                '[' => {
                    let close = find_close(&chars, i).ok_or_else(|| fail("unclosed '['"))?;
                    let inner: String = chars[i + 1..close].iter().collect();
                    steps.push(
                        parse_bracket(inner.trim())
                            .ok_or_else(|| fail("unsupported bracket expression"))?,
                    );
                    i = close + 1;
                }
                c if c.is_whitespace() => i += 1,
                _ => return Err(fail("expected '.' or '['")),
            }
        }
        if steps.is_empty() {
            return Err(fail("empty path"));
        }
        Ok(Self { steps })
    }

    /// Every value the path selects in `root`, in document order.
    pub fn select<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        let mut current = vec![root];
        for step in &self.steps {
            let mut next = Vec::new();
            for value in current {
                match step {
                    Step::Field(name) => next.extend(value.get(name.as_str())),
                    Step::Index(i) => next.extend(value.get(*i)),
                    Step::All => match value {
                        Value::Array(items) => next.extend(items.iter()),
                        Value::Object(map) => next.extend(map.values()),
                        _ => {}
                    },
                    Step::Filter {
                        path,
                        value: wanted,
                        negated,
                    } => {
                        if let Value::Array(items) = value {
                            next.extend(items.iter().filter(|item| {
                                let found = path.iter().try_fold(*item, |v, p| v.get(p.as_str()));
                                let matches = found.is_some_and(|f| match f {
                                    Value::String(s) => s == wanted,
                                    other => serde_json::from_str::<Value>(wanted)
                                        .is_ok_and(|w| &w == other),
                                });
                                matches != *negated
                            }));
                        }
                    }
                }
            }
            current = next;
        }
        current
    }

    /// The path as dotted field names, if it is only fields (`.spec.replicas` → `["spec",
    /// "replicas"]`), as scale subresource paths must be.
    pub fn fields(&self) -> Option<Vec<String>> {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Field(f) => Some(f.clone()),
                _ => None,
            })
            .collect()
    }
}

fn find_close(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for (i, c) in chars.iter().enumerate().skip(open) {
        match (quote, c) {
            (Some(q), c) if *c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(*c),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

fn unquote(s: &str) -> Option<&str> {
    let s = s.trim();
    s.strip_prefix('\'')
        .and_then(|r| r.strip_suffix('\''))
        .or_else(|| s.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
}

fn parse_bracket(inner: &str) -> Option<Step> {
    if inner == "*" {
        return Some(Step::All);
    }
    if let Ok(i) = inner.parse::<usize>() {
        return Some(Step::Index(i));
    }
    if let Some(name) = unquote(inner) {
        return Some(Step::Field(name.to_owned()));
    }
    let filter = inner.strip_prefix("?(")?.strip_suffix(')')?.trim();
    let (lhs, rhs, negated) = match filter.split_once("!=") {
        Some((l, r)) => (l, r, true),
        None => {
            let (l, r) = filter.split_once("==")?;
            (l, r, false)
        }
    };
    let path: Vec<String> = lhs
        .trim()
        .strip_prefix("@.")?
        .split('.')
        .map(str::to_owned)
        .collect();
    let rhs = rhs.trim();
    let value = unquote(rhs)
        .map(str::to_owned)
        .unwrap_or_else(|| rhs.to_owned());
    Some(Step::Filter {
        path,
        value,
        negated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn printer_column_paths() {
        let object = json!({
            "spec": {"replicas": 3, "items": [{"name": "a"}, {"name": "b"}], "a.b": "dotted"},
            "status": {"conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]},
        });
        let select = |p: &str| {
            JsonPath::parse(p)
                .unwrap()
                .select(&object)
                .into_iter()
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(select(".spec.replicas"), [json!(3)]);
        assert_eq!(select("{.spec.replicas}"), [json!(3)]);
        assert_eq!(
            select(".status.conditions[?(@.type==\"Ready\")].status"),
            [json!("True")]
        );
        assert_eq!(
            select(".status.conditions[?(@.type=='Ready')].status"),
            [json!("True")]
        );
        assert_eq!(
            select(".status.conditions[?(@.type!=\"Ready\")].type"),
            [json!("Synced")]
        );
        assert_eq!(select(".spec.items[*].name"), [json!("a"), json!("b")]);
        assert_eq!(select(".spec.items[1].name"), [json!("b")]);
        assert_eq!(select(".spec['a.b']"), [json!("dotted")]);
        assert!(select(".spec.missing").is_empty());
        assert_eq!(
            JsonPath::parse(".spec.replicas").unwrap().fields().unwrap(),
            ["spec", "replicas"]
        );
        assert!(
            JsonPath::parse(".spec.items[0]")
                .unwrap()
                .fields()
                .is_none()
        );
        for bad in ["", "spec", ".spec[", ".spec[?(x)]", ".."] {
            assert!(JsonPath::parse(bad).is_err(), "{bad}");
        }
    }
}
