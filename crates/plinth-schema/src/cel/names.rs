//! The names a rule may call (kube's CEL environment for CRDs), and property names escaped for CEL.

use crate::node::{Node, Type};

/// The functions kube's CEL environment for CRD validation declares: cel-go's standard
/// library, its strings, lists, math, optional and encoders extensions, and Kubernetes' list,
/// regex, URL, quantity, IP, CIDR, semver and format libraries. A rule calling anything else is
/// refused when the CRD is written, as cel-go's checker refuses it.
pub(crate) const KNOWN_FUNCTIONS: &[&str] = &[
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

/// CEL's reserved words, which a property name is escaped from as `__{word}__`.
pub(crate) const RESERVED: [&str; 21] = [
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
pub(crate) fn property<'a>(node: &'a Node, field: &str) -> Option<&'a Node> {
    node.properties
        .get(&unescape(field))
        .filter(|_| escape(&unescape(field)).as_deref() == Some(field))
}

/// The type kube names in a rule's error (`Invalid value: "object"`).
pub(crate) fn type_name(node: &Node) -> &'static str {
    node.kind.map_or("", Type::name)
}
