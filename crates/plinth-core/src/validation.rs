//! Name, label and annotation validation with the messages of apimachinery's
//! `util/validation` package, so that errors read exactly as kube-apiserver's.

use serde_json::{Map, Value};

use crate::Cause;

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
const QUALIFIED_NAME_MAX: usize = 63;
const LABEL_VALUE_MAX: usize = 63;
/// Most bytes all annotations of one object may hold together.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn is_dns1123_label_shape(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && lower_alnum(b[0])
        && lower_alnum(b[b.len() - 1])
        && b.iter().all(|c| lower_alnum(*c) || *c == b'-')
}

/// Messages for a value that is not an RFC 1123 label (empty if it is one).
pub fn dns1123_label(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errors.push(format!(
            "must be no more than {DNS1123_LABEL_MAX} characters"
        ));
    }
    if !is_dns1123_label_shape(value) {
        errors.push(DNS1123_LABEL_MSG.to_owned());
    }
    errors
}

/// Messages for a value that is not an RFC 1035 label (empty if it is one): what kinds and
/// service names must be.
pub fn dns1035_label(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errors.push(format!(
            "must be no more than {DNS1123_LABEL_MAX} characters"
        ));
    }
    let b = value.as_bytes();
    let shaped = b.first().is_some_and(u8::is_ascii_lowercase) && is_dns1123_label_shape(value);
    if !shaped {
        errors.push("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".to_owned());
    }
    errors
}

/// Messages for a value that is not an RFC 1123 subdomain (empty if it is one).
pub fn dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errors.push(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
        ));
    }
    if value.is_empty() || !value.split('.').all(is_dns1123_label_shape) {
        errors.push(DNS1123_SUBDOMAIN_MSG.to_owned());
    }
    errors
}

/// Messages for a name that cannot be a URL path segment: `.`, `..`, or with `/` or `%`.
pub fn path_segment_name(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|bad| name.contains(**bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_alphanumeric();
    !b.is_empty()
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter()
            .all(|c| alnum(*c) || matches!(c, b'-' | b'_' | b'.'))
}

fn qualified_name_msg(what: &str) -> String {
    format!(
        "{what} must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{QUALIFIED_NAME_FMT}')"
    )
}

/// Messages for a value that is not a qualified name (`[prefix/]name`), as label and
/// annotation keys must be.
pub fn qualified_name(value: &str) -> Vec<String> {
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                return vec!["prefix part must be non-empty".to_owned()];
            }
            let prefix_errors = dns1123_subdomain(prefix);
            if !prefix_errors.is_empty() {
                return prefix_errors
                    .into_iter()
                    .map(|m| format!("prefix part {m}"))
                    .collect();
            }
            name
        }
        _ => {
            return vec![format!(
                "{} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                qualified_name_msg("a qualified name")
            )];
        }
    };
    let mut errors = Vec::new();
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errors.push(format!(
            "name part must be no more than {QUALIFIED_NAME_MAX} characters"
        ));
    }
    if !name.is_empty() && !is_qualified_name_part(name) {
        errors.push(qualified_name_msg("name part"));
    }
    errors
}

/// Messages for a value that is not a valid label value.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        errors.push(format!("must be no more than {LABEL_VALUE_MAX} characters"));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errors.push(LABEL_VALUE_MSG.to_owned());
    }
    errors
}

/// Causes for invalid labels at `path` (`metadata.labels`).
pub fn labels(labels: &Map<String, Value>, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (key, value) in labels {
        for message in qualified_name(key) {
            causes.push(Cause::invalid(path, &Value::String(key.clone()), &message));
        }
        match value {
            Value::String(v) => {
                for message in label_value(v) {
                    causes.push(Cause::invalid(path, value, &message));
                }
            }
            other => causes.push(Cause::invalid(
                format!("{path}[{key}]"),
                other,
                "label values must be strings",
            )),
        }
    }
    causes
}

/// Causes for invalid annotations at `path` (`metadata.annotations`).
pub fn annotations(annotations: &Map<String, Value>, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut total = 0;
    for (key, value) in annotations {
        for message in qualified_name(&key.to_lowercase()) {
            causes.push(Cause::invalid(path, &Value::String(key.clone()), &message));
        }
        match value {
            Value::String(v) => total += key.len() + v.len(),
            other => causes.push(Cause::invalid(
                format!("{path}[{key}]"),
                other,
                "annotation values must be strings",
            )),
        }
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        causes.push(Cause::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
    causes
}

const WILDCARD_DNS1123_SUBDOMAIN_MSG: &str = "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// Messages for a value that is not a wildcard RFC 1123 subdomain (`*.example.com`).
pub fn wildcard_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errors.push(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
        ));
    }
    let shaped = value
        .strip_prefix("*.")
        .is_some_and(|rest| !rest.is_empty() && rest.split('.').all(is_dns1123_label_shape));
    if !shaped {
        errors.push(WILDCARD_DNS1123_SUBDOMAIN_MSG.to_owned());
    }
    errors
}

/// Messages for a port number outside 1–65535.
pub fn port_number(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) {
        Vec::new()
    } else {
        vec!["must be between 1 and 65535, inclusive".to_owned()]
    }
}

/// Messages for a value that is not an IANA service (port) name.
pub fn port_name(port: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if port.len() > 15 {
        errors.push("must be no more than 15 characters".to_owned());
    }
    if port.is_empty()
        || !port
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        errors.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_owned(),
        );
    }
    if !port.bytes().any(|b| b.is_ascii_lowercase()) {
        errors.push("must contain at least one letter (a-z)".to_owned());
    }
    if port.contains("--") {
        errors.push("must not contain consecutive hyphens".to_owned());
    }
    if port.starts_with('-') || port.ends_with('-') {
        errors.push("must not begin or end with a hyphen".to_owned());
    }
    errors
}

/// An IP address as Go's `ParseIP` reads it (IPv4 dotted quads, IPv6).
pub fn parse_ip(value: &str) -> Option<std::net::IpAddr> {
    value.parse().ok()
}

/// A CIDR (`10.0.0.0/8`, `2001:db8::/64`): its address and prefix length.
pub fn parse_cidr(value: &str) -> Option<(std::net::IpAddr, u8)> {
    let (ip, bits) = value.split_once('/')?;
    let ip = parse_ip(ip)?;
    let bits: u8 = bits.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((ip, bits))
}

/// Whether CIDR `inner` lies strictly inside CIDR `outer` (a longer prefix, within it).
pub fn cidr_strictly_within(outer: (std::net::IpAddr, u8), inner: (std::net::IpAddr, u8)) -> bool {
    use std::net::IpAddr;
    let (o, ob) = outer;
    let (i, ib) = inner;
    if ib <= ob {
        return false;
    }
    match (o, i) {
        (IpAddr::V4(o), IpAddr::V4(i)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(ob)).unwrap_or(0);
            u32::from(o) & mask == u32::from(i) & mask
        }
        (IpAddr::V6(o), IpAddr::V6(i)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(ob)).unwrap_or(0);
            u128::from(o) & mask == u128::from(i) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(dns1123_subdomain("example.com").is_empty());
        assert!(dns1123_subdomain("a-b.c1").is_empty());
        assert_eq!(dns1123_subdomain("Bad"), [DNS1123_SUBDOMAIN_MSG]);
        assert_eq!(dns1123_subdomain("a..b"), [DNS1123_SUBDOMAIN_MSG]);
        assert_eq!(dns1123_subdomain(&"a".repeat(254)).len(), 1);
        assert!(dns1123_label("my-ns").is_empty());
        assert_eq!(dns1123_label("my.ns"), [DNS1123_LABEL_MSG]);
        assert_eq!(
            dns1123_label(&"a".repeat(64)),
            ["must be no more than 63 characters"]
        );
        assert_eq!(path_segment_name(".."), ["may not be '..'"]);
        assert_eq!(
            path_segment_name("a/b%"),
            ["may not contain '/'", "may not contain '%'"]
        );
    }

    #[test]
    fn label_keys_and_values() {
        assert!(qualified_name("app").is_empty());
        assert!(qualified_name("example.com/App_1").is_empty());
        assert_eq!(qualified_name("/x"), ["prefix part must be non-empty"]);
        assert_eq!(qualified_name("a/b/c").len(), 1);
        assert!(
            qualified_name("Bad_/x")[0].starts_with("prefix part a lowercase RFC 1123 subdomain")
        );
        assert!(
            qualified_name("-x")[0]
                .starts_with("name part must consist of alphanumeric characters")
        );
        assert!(label_value("").is_empty());
        assert!(label_value("v1.2_x").is_empty());
        assert_eq!(label_value("bad value"), [LABEL_VALUE_MSG]);
        let causes = labels(
            serde_json::json!({"ok": "yes", "bad key!": "v", "k": "bad value"})
                .as_object()
                .unwrap(),
            "metadata.labels",
        );
        assert_eq!(causes.len(), 2);
        assert!(causes.iter().all(|c| c.field == "metadata.labels"));
        assert!(
            causes[0]
                .message
                .starts_with("Invalid value: \"bad key!\": name part must consist")
        );
    }

    #[test]
    fn ports_cidrs_and_wildcards_read_as_apimachinery_reads_them() {
        assert!(port_name("http").is_empty());
        assert_eq!(
            port_name("8080"),
            ["must contain at least one letter (a-z)"]
        );
        assert_eq!(
            port_name("-a--b"),
            [
                "must not contain consecutive hyphens",
                "must not begin or end with a hyphen"
            ]
        );
        assert_eq!(port_name("a-very-long-port-name").len(), 1);
        assert!(port_number(443).is_empty() && !port_number(0).is_empty());
        assert!(wildcard_dns1123_subdomain("*.example.com").is_empty());
        assert_eq!(wildcard_dns1123_subdomain("a.*.example.com").len(), 1);
        let outer = parse_cidr("10.0.0.0/8").unwrap();
        assert!(cidr_strictly_within(
            outer,
            parse_cidr("10.1.0.0/16").unwrap()
        ));
        assert!(!cidr_strictly_within(
            outer,
            parse_cidr("11.0.0.0/16").unwrap()
        ));
        assert!(!cidr_strictly_within(
            outer,
            parse_cidr("10.0.0.0/8").unwrap()
        ));
        assert!(parse_cidr("10.0.0.0/33").is_none() && parse_cidr("nope/8").is_none());
        assert!(cidr_strictly_within(
            parse_cidr("2001:db8::/32").unwrap(),
            parse_cidr("2001:db8:1::/48").unwrap()
        ));
    }
}
