//! Object metadata on objects held as JSON, and the time formats of the API.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::frozen::Tree;

/// `metadata` of an object, if it is an object.
pub fn metadata(object: &Value) -> Option<&Map<String, Value>> {
    object.get("metadata")?.as_object()
}

/// `metadata`, created if missing (replacing a non-object); `None` if `object` is not a JSON
/// object.
pub fn metadata_mut(object: &mut Value) -> Option<&mut Map<String, Value>> {
    let entry = object
        .as_object_mut()?
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut()
}

/// A string field of `metadata` (of a `Value` or a [`crate::Frozen`]).
pub fn meta_str<'a, T: Tree + ?Sized>(object: &'a T, field: &str) -> Option<&'a str> {
    object.field("metadata")?.field(field)?.text()
}

/// `metadata.name`.
pub fn name<T: Tree + ?Sized>(object: &T) -> Option<&str> {
    meta_str(object, "name")
}

/// `metadata.namespace`.
pub fn namespace<T: Tree + ?Sized>(object: &T) -> Option<&str> {
    meta_str(object, "namespace")
}

/// `metadata.labels` as a map (non-string values are skipped).
pub fn labels<T: Tree + ?Sized>(object: &T) -> BTreeMap<String, String> {
    string_map(object, "labels")
}

/// A string map of `metadata` (`labels`, `annotations`).
pub fn string_map<T: Tree + ?Sized>(object: &T, field: &str) -> BTreeMap<String, String> {
    object
        .field("metadata")
        .and_then(|m| m.field(field))
        .map(|m| {
            m.entries()
                .into_iter()
                .filter_map(|(k, v)| Some((k.to_owned(), v.text()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.finalizers`.
pub fn finalizers<T: Tree + ?Sized>(object: &T) -> Vec<String> {
    object
        .field("metadata")
        .and_then(|m| m.field("finalizers"))
        .map(|f| {
            f.elements()
                .into_iter()
                .filter_map(|v| v.text().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The value at a dotted path (`status.phase`), if every step is an object field.
pub fn at_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(object, |v, step| v.get(step))
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `2006-01-02T15:04:05Z` for a Unix time in seconds (the API's `metav1.Time`).
pub fn format_time(unix_seconds: i64) -> String {
    let (days, secs) = (
        unix_seconds.div_euclid(86_400),
        unix_seconds.rem_euclid(86_400),
    );
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Go's `time.ParseDuration` (`1h30m`, `90s`, `1.5h`), in whole seconds; `None` if it is not
/// one, or longer than Go's durations reach.
pub fn go_duration_seconds(text: &str) -> Option<i64> {
    let mut total = 0f64;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    // Go's durations are nanoseconds in an int64: about 2,562,047 hours at most; past that
    // time.ParseDuration refuses ("invalid duration").
    if !total.is_finite() || total * 1e9 > i64::MAX as f64 {
        return None;
    }
    Some(total as i64)
}

/// `2006-01-02T15:04:05.000000Z` (`metav1.MicroTime`) for a Unix time in microseconds.
pub fn format_micro_time(unix_micros: i64) -> String {
    let seconds = unix_micros.div_euclid(1_000_000);
    let base = format_time(seconds);
    format!(
        "{}.{:06}Z",
        &base[..base.len() - 1],
        unix_micros.rem_euclid(1_000_000)
    )
}

/// Parses an RFC 3339 time (`Z` or `±hh:mm` offset, optional fraction) into Unix seconds.
pub fn parse_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut rest = &s[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &fraction[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6
            && matches!(rest.as_bytes()[0], b'+' | b'-')
            && rest.as_bytes()[3] == b':' =>
        {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (rest.get(1..3)?.parse::<i64>().ok()? * 3600
                + rest.get(4..6)?.parse::<i64>().ok()? * 60)
        }
        _ => return None,
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset)
}

/// A duration as kubectl prints ages: `45s`, `5m10s`, `3h`, `2d5h`, `1y30d`
/// (apimachinery's `duration.HumanDuration`).
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_round_trip() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_time(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(parse_time("2023-11-14T22:13:20Z"), Some(1_700_000_000));
        assert_eq!(
            parse_time("2023-11-14T23:13:20.123+01:00"),
            Some(1_700_000_000)
        );
        assert_eq!(
            format_micro_time(1_700_000_000_000_042),
            "2023-11-14T22:13:20.000042Z"
        );
        assert_eq!(
            parse_time("2024-02-29T00:00:00Z")
                .map(format_time)
                .as_deref(),
            Some("2024-02-29T00:00:00Z")
        );
        for bad in [
            "",
            "2023-11-14",
            "2023-13-01T00:00:00Z",
            "2023-11-14T22:13:20",
            "2023-11-14T22:13:20.Z",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn ages_print_like_kubectl() {
        let cases = [
            (-5, "<invalid>"),
            (5, "5s"),
            (119, "119s"),
            (130, "2m10s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (10 * 3600, "10h"),
            (3 * 86400 + 3600, "3d1h"),
            (30 * 86400, "30d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (seconds, expected) in cases {
            assert_eq!(human_duration(seconds), expected, "{seconds}");
        }
    }

    #[test]
    fn metadata_access() {
        let mut object = json!({"metadata": {"name": "a", "labels": {"x": "1", "n": 2}, "finalizers": ["f"]}, "status": {"phase": "Active"}});
        assert_eq!(name(&object), Some("a"));
        assert_eq!(labels(&object).len(), 1);
        assert_eq!(finalizers(&object), ["f"]);
        assert_eq!(at_path(&object, "status.phase"), Some(&json!("Active")));
        metadata_mut(&mut object)
            .unwrap()
            .insert("namespace".into(), json!("ns"));
        assert_eq!(namespace(&object), Some("ns"));
        let mut bare = json!({"metadata": 3});
        metadata_mut(&mut bare)
            .unwrap()
            .insert("name".into(), json!("b"));
        assert_eq!(name(&bare), Some("b"));
        assert!(metadata_mut(&mut json!([1])).is_none());
    }
}
