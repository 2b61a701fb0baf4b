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

/// Whether `s` is a duration (see [`parse_duration`]).
fn duration(s: &str) -> bool {
    parse_duration(s).is_some()
}

/// A duration, in nanoseconds, as kube-openapi's `strfmt.ParseDuration` reads one: Go's
/// `time.ParseDuration` syntax (`1h30m`, `250ms`, `-1.5s`), else whole numbers with units,
/// spaces allowed and days and weeks known (`3d`, `2 weeks`, `1 hour 30 minutes`).
pub(crate) fn parse_duration(s: &str) -> Option<i128> {
    go_duration(s).or_else(|| word_duration(s))
}

fn go_duration(s: &str) -> Option<i128> {
    let (negative, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if body == "0" {
        return Some(0);
    }
    let mut rest = body;
    if rest.is_empty() {
        return None;
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok().filter(|_| digits > 0)?;
        rest = &rest[digits..];
        let (unit, nanos) = [
            ("ns", 1.0),
            ("us", 1e3),
            ("µs", 1e3),
            ("ms", 1e6),
            ("s", 1e9),
            ("m", 60e9),
            ("h", 3600e9),
        ]
        .into_iter()
        .find(|(u, _)| rest.starts_with(u))?; // `ms` is tried before `m`
        rest = &rest[unit.len()..];
        total += number * nanos;
    }
    let total = total.round() as i128;
    Some(if negative { -total } else { total })
}

fn word_duration(s: &str) -> Option<i128> {
    const UNITS: [(&[&str], i128); 8] = [
        (&["ns", "nanosecond", "nanoseconds"], 1),
        (&["us", "µs", "microsecond", "microseconds"], 1_000),
        (&["ms", "millisecond", "milliseconds"], 1_000_000),
        (&["s", "sec", "secs", "second", "seconds"], 1_000_000_000),
        (&["m", "min", "mins", "minute", "minutes"], 60_000_000_000),
        (&["h", "hr", "hrs", "hour", "hours"], 3_600_000_000_000),
        (&["d", "day", "days"], 86_400_000_000_000),
        (&["w", "wk", "wks", "week", "weeks"], 604_800_000_000_000),
    ];
    let mut rest = s.trim();
    let mut total: i128 = 0;
    let mut any = false;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let number: i128 = rest[..digits].parse().ok()?;
        rest = rest[digits..].trim_start();
        let letters = rest
            .find(|c: char| !c.is_alphabetic())
            .unwrap_or(rest.len());
        let word = &rest[..letters];
        let nanos = UNITS
            .iter()
            .find(|(names, _)| names.contains(&word))
            .map(|(_, n)| *n)?;
        total += number * nanos;
        any = true;
        rest = rest[letters..].trim_start();
    }
    any.then_some(total)
}
