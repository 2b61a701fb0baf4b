//! Fields a JSON document gives twice in one object (`{"replicas": 2, "replicas": 3}`), which
//! a parse into a map silently resolves (the last wins) and kube's strict decoder reports as
//! `duplicate field "spec.replicas"`; and keys a YAML document gives twice in one mapping, as
//! go-yaml reports them (by line).

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The paths of the fields given twice in `json` (`spec.replicas`, `items[0].name`), in the
/// order they are met; empty for a document that does not parse (its parse error is answered
/// elsewhere).
pub fn duplicate_fields(json: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let walk = Walk {
        path: String::new(),
        found: &mut found,
    };
    if walk.deserialize(&mut deserializer).is_err() {
        return Vec::new();
    }
    found
}

/// Keys a block-style YAML document gives twice in one mapping, as `(line, key)` with the
/// line (1-based) of the repeated key — go-yaml's `line 9: key "foo" already set in map`.
/// Flow collections (`{a: 1}`) and the insides of block scalars (`|`, `>`) are not looked
/// into.
pub fn yaml_duplicate_keys(text: &str) -> Vec<(usize, String)> {
    // Open mappings, innermost last: (indent of their keys, keys seen).
    let mut open: Vec<(usize, HashSet<String>)> = Vec::new();
    let mut found = Vec::new();
    let mut scalar_above: Option<usize> = None;
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        let mut indent = raw.len() - trimmed.len();
        if let Some(limit) = scalar_above {
            if trimmed.is_empty() || indent > limit {
                continue;
            }
            scalar_above = None;
        }
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with("---") {
            if trimmed.starts_with("---") {
                open.clear();
            }
            continue;
        }
        let mut rest = trimmed;
        // Each `- ` opens a sequence item: a new mapping further in.
        while let Some(after) = rest
            .strip_prefix("- ")
            .or_else(|| (rest == "-").then_some(""))
        {
            open.retain(|(at, _)| *at < indent + 1);
            let inner = after.trim_start();
            indent += 2 + (after.len() - inner.len());
            open.push((indent, HashSet::new()));
            rest = inner;
        }
        let Some(key) = yaml_key(rest) else {
            continue;
        };
        open.retain(|(at, _)| *at <= indent);
        if open.last().is_none_or(|(at, _)| *at < indent) {
            open.push((indent, HashSet::new()));
        }
        if let Some((_, keys)) = open.last_mut()
            && !keys.insert(key.clone())
        {
            found.push((i + 1, key));
        }
        let value = rest.split_once(':').map_or("", |(_, v)| v.trim());
        if value.starts_with('|') || value.starts_with('>') {
            scalar_above = Some(indent);
        }
    }
    found
}

/// The key of a `key: value` (or `key:`) line, unquoted.
fn yaml_key(line: &str) -> Option<String> {
    let (key, _) = if let Some(quoted) = line.strip_prefix('"') {
        let end = quoted.find('"')?;
        let after = &quoted[end + 1..];
        (after.starts_with(':')).then_some((quoted[..end].to_owned(), ()))?
    } else if let Some(quoted) = line.strip_prefix('\'') {
        let end = quoted.find('\'')?;
        let after = &quoted[end + 1..];
        (after.starts_with(':')).then_some((quoted[..end].to_owned(), ()))?
    } else {
        let at = line
            .find(": ")
            .or_else(|| line.ends_with(':').then(|| line.len() - 1))?;
        let key = &line[..at];
        if key.is_empty() || key.starts_with(['{', '[', '&', '*', '!', '|', '>']) {
            return None;
        }
        (key.trim_end().to_owned(), ())
    };
    Some(key)
}

/// One value at `path`, walked for duplicate fields.
struct Walk<'a> {
    path: String,
    found: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            let item = Walk {
                path: format!("{}[{i}]", self.path),
                found: &mut *self.found,
            };
            if seq.next_element_seed(item)?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if !seen.insert(key) && !self.found.contains(&path) {
                self.found.push(path.clone());
            }
            map.next_value_seed(Walk {
                path,
                found: &mut *self.found,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::duplicate_fields;

    #[test]
    fn yaml_keys_given_twice_are_named_by_line() {
        let body = "\napiVersion: v1\nkind: X\nmetadata:\n  name: a\nspec:\n  unknown: uk1\n  foo: foo1\n  foo: foo2\n  ports:\n  - name: x\n    port: 1\n  - name: y\n    name: z\n  text: |\n    foo: 1\n    foo: 2\n  \"quoted\": 1\n  quoted: 2\n";
        assert_eq!(
            super::yaml_duplicate_keys(body),
            [
                (9, "foo".to_owned()),
                (14, "name".to_owned()),
                (19, "quoted".to_owned())
            ]
        );
        assert!(super::yaml_duplicate_keys("a: 1\nb:\n  a: 2\n---\na: 3\n").is_empty());
    }

    #[test]
    fn fields_given_twice_are_named_by_path() {
        let body = br#"{"spec": {"unknown": 1, "replicas": 2, "replicas": 3,
            "containers": [{"name": "a", "name": "b"}, {"name": "c"}]},
            "kind": "X", "kind": "X", "kind": "Y"}"#;
        assert_eq!(
            duplicate_fields(body),
            ["spec.replicas", "spec.containers[0].name", "kind"]
        );
        assert!(duplicate_fields(br#"{"a": {"b": 1}, "c": {"b": 2}}"#).is_empty());
        assert!(duplicate_fields(b"{not json").is_empty());
    }
}
