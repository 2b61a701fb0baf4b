//! JSON Pointer lookups without allocating: [`At::at`] reads what `Value::pointer` reads
//! (RFC 6901: `~1` is `/`, `~0` is `~`; array indices without sign or leading zeros), but
//! unescapes only the tokens that hold a `~` — serde_json's allocates two strings per token,
//! which made the controllers' scans of every pod spend most of their time in the allocator.

use serde_json::Value;

/// A JSON Pointer lookup (see the module's text).
pub trait At {
    /// The value `pointer` names (`""`: the whole), as `Value::pointer` finds it.
    fn at(&self, pointer: &str) -> Option<&Value>;
}

/// An array index of a JSON Pointer token (no sign, no leading zero).
pub(crate) fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() > 1) {
        return None;
    }
    token.parse().ok()
}

impl At for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        walk(self, pointer, |target, token| match target {
            Value::Object(map) => map.get(token),
            Value::Array(list) => list.get(array_index(token)?),
            _ => None,
        })
    }
}

/// Follows `pointer` from `root`, `step` taking one unescaped token at a time (shared by
/// `Value` and [`crate::Frozen`]).
pub(crate) fn walk<'a, T: ?Sized>(
    root: &'a T,
    pointer: &str,
    step: impl Fn(&'a T, &str) -> Option<&'a T>,
) -> Option<&'a T> {
    if pointer.is_empty() {
        return Some(root);
    }
    let rest = pointer.strip_prefix('/')?;
    let mut target = root;
    for token in rest.split('/') {
        let unescaped;
        let token = if token.contains('~') {
            unescaped = token.replace("~1", "/").replace("~0", "~");
            unescaped.as_str()
        } else {
            token
        };
        target = step(target, token)?;
    }
    Some(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_what_pointer_finds() {
        let doc = json!({
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n"},
            "a/b": {"m~n": 1}, "": {"": 2}, "list": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        });
        for pointer in [
            "",
            "/spec",
            "/spec/nodeName",
            "/spec/containers/1/name",
            "/spec/containers/2",
            "/spec/containers/01",
            "/spec/containers/+1",
            "/spec/containers/-",
            "/a~1b/m~0n",
            "/a~1b/m~n",
            "/",
            "//",
            "spec",
            "/list/10",
            "/list/010",
            "/missing/deeper",
            "/spec/nodeName/x",
            "/list/1x",
        ] {
            assert_eq!(doc.at(pointer), doc.pointer(pointer), "{pointer:?}");
        }
    }
}
