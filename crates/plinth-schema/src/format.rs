//! The string formats CRD schemas use, checked as kube-openapi's format registry does.
//! Unknown formats are accepted, as upstream does.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Whether `s` is a valid `format`.
pub(crate) fn valid(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => plinth_core::meta::parse_time(s).is_some(),
        "date" => {
            plinth_core::meta::parse_time(&format!("{s}T00:00:00Z")).is_some() && s.len() == 10
        }
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        "uuid" | "uuid3" | "uuid4" | "uuid5" => uuid(s),
        "email" => email(s),
        "hostname" => hostname(s),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => cidr(s),
        "uri" | "url" => uri(s),
        "duration" => duration(s),
        _ => true,
    }
}

fn uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && [8, 4, 4, 4, 12]
            .iter()
            .zip(&parts)
            .all(|(n, p)| p.len() == *n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn email(s: &str) -> bool {
    match s.rsplit_once('@') {
        Some((local, domain)) => {
            !local.is_empty() && !local.contains(' ') && hostname(domain) && domain.contains('.')
        }
        None => false,
    }
}

fn hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.trim_end_matches('.').split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    (ip.parse::<Ipv4Addr>().is_ok() && bits <= 32)
        || (ip.parse::<Ipv6Addr>().is_ok() && bits <= 128)
}

fn uri(s: &str) -> bool {
    match s.split_once(':') {
        Some((scheme, rest)) => {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
                && !rest.is_empty()
                && !s.contains(' ')
        }
        None => false,
    }
}

/// Go's `time.ParseDuration` syntax: `1h30m`, `250ms`, `-1.5s`.
fn duration(s: &str) -> bool {
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    if body == "0" {
        return true;
    }
    let mut rest = body;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 || rest[..digits].parse::<f64>().is_err() {
            return false;
        }
        rest = &rest[digits..];
        let unit = ["ns", "us", "µs", "ms", "s", "m", "h"]
            .iter()
            .find(|u| rest.starts_with(*u));
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}
