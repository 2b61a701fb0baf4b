//! The Kubernetes CEL libraries CRDs use beyond cel's own extensions: regex (`find`,
//! `findAll`), URLs (`isURL`, `url`, `getScheme`, `getHost`, `getHostname`, `getPort`,
//! `getEscapedPath`, `getQuery`) and quantities (`isQuantity`, `quantity`, `compareTo`,
//! `isLessThan`, `isGreaterThan`, `asInteger`, `asApproximateFloat`, `sign`, `isInteger`).
//!
//! URLs and quantities are carried as their (validated) strings; the member functions parse
//! them again, which keeps them plain values for equality and printing.

use cel::common::types::{CelBool, CelDouble, CelInt, CelList, CelString};
use cel::{DeclarationError, Env, ExecutionError};

/// Registers the library on `env`.
pub(crate) fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_member_overload!(env, fn find: (CelString, CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn find_all: (CelString, CelString) -> Result<CelList>)?;
    cel::add_member_overload!(env, fn find_all_n: (CelString, CelString, CelInt) -> Result<CelList>,
        name = "findAll")?;
    cel::add_overload!(env, fn is_url: (CelString) -> CelBool, name = "isURL")?;
    cel::add_overload!(env, fn url: (CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn get_scheme: (CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn get_host: (CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn get_hostname: (CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn get_port: (CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn get_escaped_path: (CelString) -> Result<CelString>)?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool)?;
    cel::add_overload!(env, fn quantity: (CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn compare_to: (CelString, CelString) -> Result<CelInt>)?;
    cel::add_member_overload!(env, fn is_less_than: (CelString, CelString) -> Result<CelBool>)?;
    cel::add_member_overload!(env, fn is_greater_than: (CelString, CelString) -> Result<CelBool>)?;
    cel::add_member_overload!(env, fn as_integer: (CelString) -> Result<CelInt>)?;
    cel::add_member_overload!(env, fn as_approximate_float: (CelString) -> Result<CelDouble>)?;
    cel::add_member_overload!(env, fn sign: (CelString) -> Result<CelInt>)?;
    cel::add_member_overload!(env, fn is_integer: (CelString) -> Result<CelBool>)?;
    Ok(())
}

fn regex(function: &str, pattern: &str) -> Result<regex::Regex, ExecutionError> {
    regex::Regex::new(pattern).map_err(|e| ExecutionError::function_error(function, e.to_string()))
}

fn find(
    this: &CelString<'_>,
    pattern: &CelString<'_>,
) -> Result<CelString<'static>, ExecutionError> {
    let re = regex("find", pattern)?;
    Ok(re
        .find(this)
        .map(|m| m.as_str().to_owned())
        .unwrap_or_default()
        .into())
}

fn find_all(
    this: &CelString<'_>,
    pattern: &CelString<'_>,
) -> Result<CelList<'static>, ExecutionError> {
    find_all_n(this, pattern, &CelInt::from(-1))
}

fn find_all_n(
    this: &CelString<'_>,
    pattern: &CelString<'_>,
    n: &CelInt,
) -> Result<CelList<'static>, ExecutionError> {
    let re = regex("findAll", pattern)?;
    let limit = usize::try_from(*n.inner()).unwrap_or(usize::MAX);
    let found: Vec<Box<dyn cel::common::value::Val + 'static>> = re
        .find_iter(this)
        .take(limit)
        .map(|m| {
            Box::new(CelString::from(m.as_str().to_owned())) as Box<dyn cel::common::value::Val>
        })
        .collect();
    Ok(CelList::from(found))
}

/// A URL split into its parts (RFC 3986), as Go's `url.ParseRequestURI` accepts them: an
/// absolute URL with a scheme, or an absolute path.
struct Url<'a> {
    scheme: &'a str,
    host: &'a str,
    path: &'a str,
}

fn parse_url(text: &str) -> Option<Url<'_>> {
    if text.is_empty() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    let without_fragment = text.split('#').next().unwrap_or("");
    let before_query = without_fragment.split('?').next().unwrap_or("");
    if before_query.starts_with('/') {
        return Some(Url {
            scheme: "",
            host: "",
            path: before_query,
        });
    }
    let (scheme, rest) = before_query.split_once(':')?;
    let valid_scheme = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !valid_scheme {
        return None;
    }
    match rest.strip_prefix("//") {
        Some(authority_and_path) => {
            let (authority, path) = match authority_and_path.find('/') {
                Some(i) => authority_and_path.split_at(i),
                None => (authority_and_path, ""),
            };
            let host = authority.rsplit('@').next().unwrap_or("");
            Some(Url { scheme, host, path })
        }
        None if rest.starts_with('/') => Some(Url {
            scheme,
            host: "",
            path: rest,
        }),
        None => None,
    }
}

fn url_error(text: &str) -> ExecutionError {
    ExecutionError::function_error(
        "url",
        format!(
            "URL parse error during conversion from string: parse {text:?}: invalid URI for request"
        ),
    )
}

fn is_url(text: &CelString<'_>) -> CelBool {
    parse_url(text).is_some().into()
}

fn url(text: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    parse_url(text).ok_or_else(|| url_error(text))?;
    Ok(text.to_string().into())
}

fn parts(text: &str) -> Result<Url<'_>, ExecutionError> {
    parse_url(text).ok_or_else(|| url_error(text))
}

fn get_scheme(this: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    Ok(parts(this)?.scheme.to_owned().into())
}

fn get_host(this: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    Ok(parts(this)?.host.to_owned().into())
}

/// The host without its port (and an IPv6 literal without brackets).
fn hostname(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    host.split(':').next().unwrap_or("")
}

fn get_hostname(this: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    Ok(hostname(parts(this)?.host).to_owned().into())
}

fn get_port(this: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    let host = parts(this)?.host;
    let after = match host.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or("", |(_, p)| p),
        None => host,
    };
    Ok(after
        .rsplit_once(':')
        .map_or("", |(_, p)| p)
        .to_owned()
        .into())
}

fn get_escaped_path(this: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    Ok(parts(this)?.path.to_owned().into())
}

/// A Kubernetes quantity's value (`1Gi`, `500m`, `1e3`), as a float.
fn parse_quantity(text: &str) -> Option<f64> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    if number.is_empty() || number == "+" || number == "-" || number.matches('.').count() > 1 {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    let scale = match suffix {
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
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent => {
            let digits = exponent
                .strip_prefix('e')
                .or_else(|| exponent.strip_prefix('E'))?;
            let power: i32 = digits.parse().ok()?;
            10f64.powi(power)
        }
    };
    Some(value * scale)
}

fn quantity_value(text: &str) -> Result<f64, ExecutionError> {
    parse_quantity(text).ok_or_else(|| {
        ExecutionError::function_error("quantity", format!("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text:?}"))
    })
}

fn is_quantity(text: &CelString<'_>) -> CelBool {
    parse_quantity(text).is_some().into()
}

fn quantity(text: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    quantity_value(text)?;
    Ok(text.to_string().into())
}

fn compare(a: &str, b: &str) -> Result<std::cmp::Ordering, ExecutionError> {
    let (a, b) = (quantity_value(a)?, quantity_value(b)?);
    Ok(a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal))
}

fn compare_to(this: &CelString<'_>, other: &CelString<'_>) -> Result<CelInt, ExecutionError> {
    Ok(CelInt::from(compare(this, other)? as i64))
}

fn is_less_than(this: &CelString<'_>, other: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    Ok((compare(this, other)? == std::cmp::Ordering::Less).into())
}

fn is_greater_than(this: &CelString<'_>, other: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    Ok((compare(this, other)? == std::cmp::Ordering::Greater).into())
}

fn as_integer(this: &CelString<'_>) -> Result<CelInt, ExecutionError> {
    let value = quantity_value(this)?;
    if value.fract() != 0.0 || value.abs() > i64::MAX as f64 {
        return Err(ExecutionError::function_error(
            "asInteger",
            "cannot convert value to integer",
        ));
    }
    Ok(CelInt::from(value as i64))
}

fn as_approximate_float(this: &CelString<'_>) -> Result<CelDouble, ExecutionError> {
    Ok(CelDouble::from(quantity_value(this)?))
}

fn sign(this: &CelString<'_>) -> Result<CelInt, ExecutionError> {
    let value = quantity_value(this)?;
    Ok(CelInt::from(if value > 0.0 {
        1
    } else if value < 0.0 {
        -1
    } else {
        0
    }))
}

fn is_integer(this: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let value = quantity_value(this)?;
    Ok((value.fract() == 0.0 && value.abs() <= i64::MAX as f64).into())
}
