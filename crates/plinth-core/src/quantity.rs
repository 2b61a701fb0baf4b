//! `resource.Quantity`: `500m`, `2Gi`, `1.5`, `1e3` — parsed to a number, for scheduling by
//! requests, limits on processes and quota arithmetic.

use crate::frozen::Tree;

/// apimachinery's message for text that is not a quantity.
pub const INVALID: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// The value of a quantity written as `text`, or `None` when it is not one.
pub fn parse(text: &str) -> Option<f64> {
    let text = text.trim();
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    if !number.chars().any(|c| c.is_ascii_digit()) || number.matches('.').count() > 1 {
        return None;
    }
    let base: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0_f64.powi(4),
        "Pi" => 1024.0_f64.powi(5),
        "Ei" => 1024.0_f64.powi(6),
        exponent if exponent.starts_with(['e', 'E']) => {
            10f64.powi(exponent[1..].parse::<i32>().ok()?)
        }
        _ => return None,
    };
    Some(base * factor)
}

/// The value of a quantity held as JSON (a string or a bare number).
pub fn of<T: Tree + ?Sized>(value: &T) -> Option<f64> {
    match (value.text(), value.number()) {
        (Some(s), _) => parse(s),
        (_, Some(n)) => n.as_f64(),
        _ => None,
    }
}

/// A CPU quantity in millicores, rounded up as the kubelet rounds.
pub fn millis<T: Tree + ?Sized>(value: &T) -> Option<i64> {
    #[allow(clippy::cast_possible_truncation)]
    of(value).map(|v| (v * 1000.0).ceil() as i64)
}

/// A quantity of bytes as a whole number.
pub fn bytes<T: Tree + ?Sized>(value: &T) -> Option<i64> {
    #[allow(clippy::cast_possible_truncation)]
    of(value).map(|v| v.ceil() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_kube_reads_them() {
        assert_eq!(parse("500m"), Some(0.5));
        assert_eq!(parse("2Gi"), Some(2.0 * 1024.0 * 1024.0 * 1024.0));
        assert_eq!(parse("1e3"), Some(1000.0));
        assert_eq!(parse("1.5"), Some(1.5));
        assert_eq!(parse("12Mi"), Some(12.0 * 1024.0 * 1024.0));
        assert_eq!(parse("x"), None);
        assert_eq!(parse("1Zi"), None);
        assert_eq!(millis(&serde_json::json!(2)), Some(2000));
        assert_eq!(millis(&serde_json::json!("100m")), Some(100));
    }
}
