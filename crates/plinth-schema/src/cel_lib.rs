//! The Kubernetes CEL libraries CRDs use beyond cel's own extensions: lists (`isSorted`, `sum`,
//! `min`, `max`, `indexOf`, `lastIndexOf`), regex (`find`, `findAll`), URLs (`isURL`, `url`,
//! `getScheme`, `getHost`, `getHostname`, `getPort`, `getEscapedPath`), quantities
//! (`isQuantity`, `quantity`, `compareTo`, `isLessThan`, `isGreaterThan`, `asInteger`,
//! `asApproximateFloat`, `sign`, `isInteger`) and formats (`format.dns1123Label()` and the
//! others, `.validate(value)` giving `optional.none()` or the errors).
//!
//! IP addresses and CIDRs (`isIP`, `ip`, `cidr`, `containsIP` and the rest) likewise.
//!
//! URLs, quantities, IPs and CIDRs are carried as their (validated) strings; the member functions parse
//! them again, which keeps them plain values for equality and printing.

use std::cmp::Ordering;
use std::sync::Arc;

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelOptional, CelString, DYN_TYPE, LIST_TYPE,
};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError, Value};

/// Registers the library on `env`.
pub(crate) fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("isSorted", "list.isSorted()", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list.sum()", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list.min()", LIST_TYPE, vec![], list_min)?;
    env.add_member_overload("max", "list.max()", LIST_TYPE, vec![], list_max)?;
    env.add_member_overload(
        "indexOf",
        "list.indexOf(dyn)",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list.lastIndexOf(dyn)",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )?;
    for (name, constructor) in FORMATS.iter().zip(FORMAT_CONSTRUCTORS) {
        env.add_overload(
            &format!("format.{name}"),
            &format!("format.{name}()"),
            vec![],
            constructor,
        )?;
    }
    cel::add_member_overload!(env, fn validate: (CelString, CelString) -> CelOptional)?;
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
    ip_library(env)
}

/// Kubernetes' IP and CIDR libraries (`isIP`, `ip`, `ip.isCanonical`, `family`,
/// `isUnspecified`, `isLoopback`, `isLinkLocalMulticast`, `isLinkLocalUnicast`,
/// `isGlobalUnicast`; `isCIDR`, `cidr`, `containsIP`, `containsCIDR`, `ip`, `masked`,
/// `prefixLength`), addresses and prefixes carried as their strings.
fn ip_library(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn is_ip: (CelString) -> CelBool, name = "isIP")?;
    cel::add_overload!(env, fn ip: (CelString) -> Result<CelString>)?;
    cel::add_overload!(env, fn is_canonical: (CelString) -> Result<CelBool>,
        name = "ip.isCanonical")?;
    cel::add_member_overload!(env, fn family: (CelString) -> Result<CelInt>)?;
    cel::add_member_overload!(env, fn is_unspecified: (CelString) -> Result<CelBool>)?;
    cel::add_member_overload!(env, fn is_loopback: (CelString) -> Result<CelBool>)?;
    cel::add_member_overload!(env, fn is_link_local_multicast: (CelString) -> Result<CelBool>)?;
    cel::add_member_overload!(env, fn is_link_local_unicast: (CelString) -> Result<CelBool>)?;
    cel::add_member_overload!(env, fn is_global_unicast: (CelString) -> Result<CelBool>)?;
    cel::add_overload!(env, fn is_cidr: (CelString) -> CelBool, name = "isCIDR")?;
    cel::add_overload!(env, fn cidr: (CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn contains_ip: (CelString, CelString) -> Result<CelBool>,
        name = "containsIP")?;
    cel::add_member_overload!(env, fn contains_cidr: (CelString, CelString) -> Result<CelBool>,
        name = "containsCIDR")?;
    cel::add_member_overload!(env, fn cidr_ip: (CelString) -> Result<CelString>, name = "ip")?;
    cel::add_member_overload!(env, fn masked: (CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn prefix_length: (CelString) -> Result<CelInt>)?;
    Ok(())
}

/// An IP address as kube's library accepts it: no zone, no IPv4-mapped IPv6 form.
fn parse_ip(text: &str) -> Option<std::net::IpAddr> {
    let ip: std::net::IpAddr = text.parse().ok()?;
    match ip {
        std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => None,
        ip => Some(ip),
    }
}

fn ip_error(text: &str) -> ExecutionError {
    ExecutionError::function_error(
        "ip",
        format!(
            "IP Address {text:?} parse error during conversion from string: ParseAddr({text:?}): unable to parse IP"
        ),
    )
}

fn the_ip(text: &str) -> Result<std::net::IpAddr, ExecutionError> {
    parse_ip(text).ok_or_else(|| ip_error(text))
}

fn is_ip(text: &CelString<'_>) -> CelBool {
    parse_ip(text).is_some().into()
}

fn ip(text: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    the_ip(text)?;
    Ok(text.to_string().into())
}

fn is_canonical(text: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    Ok((the_ip(text)?.to_string() == **text).into())
}

fn family(this: &CelString<'_>) -> Result<CelInt, ExecutionError> {
    Ok(CelInt::from(if the_ip(this)?.is_ipv4() { 4 } else { 6 }))
}

fn is_unspecified(this: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    Ok(the_ip(this)?.is_unspecified().into())
}

fn is_loopback(this: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    Ok(the_ip(this)?.is_loopback().into())
}

fn is_link_local_multicast(this: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    Ok(match the_ip(this)? {
        std::net::IpAddr::V4(v4) => v4.octets()[..3] == [224, 0, 0],
        std::net::IpAddr::V6(v6) => v6.segments()[0] & 0xff0f == 0xff02,
    }
    .into())
}

fn link_local_unicast(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_link_local(),
        std::net::IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn is_link_local_unicast(this: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    Ok(link_local_unicast(the_ip(this)?).into())
}

/// Go's `IsGlobalUnicast`: not unspecified, loopback, multicast, link-local or broadcast.
fn is_global_unicast(this: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let ip = the_ip(this)?;
    let broadcast = matches!(ip, std::net::IpAddr::V4(v4) if v4.is_broadcast());
    Ok((!ip.is_unspecified()
        && !ip.is_loopback()
        && !ip.is_multicast()
        && !link_local_unicast(ip)
        && !broadcast)
        .into())
}

/// A CIDR as kube's library accepts it: an address (as [`parse_ip`]) and a prefix length.
fn parse_cidr(text: &str) -> Option<(std::net::IpAddr, u8)> {
    let (address, length) = text.split_once('/')?;
    let ip = parse_ip(address)?;
    if length.is_empty() || length.starts_with('+') || (length.len() > 1 && length.starts_with('0'))
    {
        return None;
    }
    let length: u8 = length.parse().ok()?;
    let bits = if ip.is_ipv4() { 32 } else { 128 };
    (length <= bits).then_some((ip, length))
}

fn the_cidr(text: &str) -> Result<(std::net::IpAddr, u8), ExecutionError> {
    parse_cidr(text).ok_or_else(|| {
        ExecutionError::function_error(
            "cidr",
            format!("network address parse error during conversion from string: netip.ParsePrefix({text:?}): bad prefix"),
        )
    })
}

/// The address's bits with all but the first `length` cleared.
fn mask(ip: std::net::IpAddr, length: u8) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let kept = if length == 0 {
                0
            } else {
                bits & (u32::MAX << (32 - u32::from(length)))
            };
            std::net::IpAddr::V4(kept.into())
        }
        std::net::IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let kept = if length == 0 {
                0
            } else {
                bits & (u128::MAX << (128 - u32::from(length)))
            };
            std::net::IpAddr::V6(kept.into())
        }
    }
}

fn is_cidr(text: &CelString<'_>) -> CelBool {
    parse_cidr(text).is_some().into()
}

fn cidr(text: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    the_cidr(text)?;
    Ok(text.to_string().into())
}

fn contains_ip(this: &CelString<'_>, other: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let (network, length) = the_cidr(this)?;
    let ip = the_ip(other)?;
    Ok((ip.is_ipv4() == network.is_ipv4() && mask(ip, length) == mask(network, length)).into())
}

fn contains_cidr(this: &CelString<'_>, other: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let (network, length) = the_cidr(this)?;
    let (inner, inner_length) = the_cidr(other)?;
    Ok((inner.is_ipv4() == network.is_ipv4()
        && inner_length >= length
        && mask(inner, length) == mask(network, length))
    .into())
}

fn cidr_ip(this: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    Ok(the_cidr(this)?.0.to_string().into())
}

fn masked(this: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    let (ip, length) = the_cidr(this)?;
    Ok(format!("{}/{length}", mask(ip, length)).into())
}

fn prefix_length(this: &CelString<'_>) -> Result<CelInt, ExecutionError> {
    Ok(CelInt::from(i64::from(the_cidr(this)?.1)))
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

fn quantity_value(text: &str) -> Result<f64, ExecutionError> {
    plinth_core::quantity::parse(text).ok_or_else(|| {
        ExecutionError::function_error("quantity", format!("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text:?}"))
    })
}

fn is_quantity(text: &CelString<'_>) -> CelBool {
    plinth_core::quantity::parse(text).is_some().into()
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

/// The elements of a list argument.
fn elements(list: &CowVal<'_, '_>) -> Result<Arc<Vec<Value>>, ExecutionError> {
    match Value::try_from(list.as_ref())? {
        Value::List(items) => Ok(items),
        _ => Err(ExecutionError::function_error("list", "expected a list")),
    }
}

fn owned<'b, 'v>(value: Value) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let boxed: Box<dyn Val> = value.try_into()?;
    Ok(CowVal::Owned(boxed))
}

fn order(a: &Value, b: &Value, function: &str) -> Result<Ordering, ExecutionError> {
    a.partial_cmp(b)
        .ok_or_else(|| ExecutionError::function_error(function, "list elements must be comparable"))
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = elements(
        args.first()
            .ok_or_else(|| ExecutionError::invalid_argument_count(1, 0))?,
    )?;
    for pair in items.windows(2) {
        if order(&pair[0], &pair[1], "isSorted")? == Ordering::Greater {
            return owned(Value::Bool(false));
        }
    }
    owned(Value::Bool(true))
}

fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = elements(
        args.first()
            .ok_or_else(|| ExecutionError::invalid_argument_count(1, 0))?,
    )?;
    let mut int = 0i64;
    let mut double = 0f64;
    let mut any_double = false;
    for item in items.iter() {
        match item {
            Value::Int(i) => {
                int = int
                    .checked_add(*i)
                    .ok_or_else(|| ExecutionError::function_error("sum", "integer overflow"))?;
            }
            Value::UInt(u) => int = int.saturating_add(i64::try_from(*u).unwrap_or(i64::MAX)),
            Value::Float(f) => {
                double += f;
                any_double = true;
            }
            _ => {
                return Err(ExecutionError::function_error(
                    "sum",
                    "list elements must be numbers",
                ));
            }
        }
    }
    owned(if any_double {
        Value::Float(double + int as f64)
    } else {
        Value::Int(int)
    })
}

fn extreme<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    function: &str,
    wanted: Ordering,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = elements(
        args.first()
            .ok_or_else(|| ExecutionError::invalid_argument_count(1, 0))?,
    )?;
    let mut best: Option<&Value> = None;
    for item in items.iter() {
        best = match best {
            Some(b) if order(item, b, function)? != wanted => Some(b),
            _ => Some(item),
        };
    }
    match best {
        Some(b) => owned(b.clone()),
        None => Err(ExecutionError::function_error(function, "list is empty")),
    }
}

fn list_min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "min", Ordering::Less)
}

fn list_max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "max", Ordering::Greater)
}

fn position<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    last: bool,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list, wanted] = <[CowVal; 2]>::try_from(args)
        .map_err(|a: Vec<_>| ExecutionError::invalid_argument_count(2, a.len()))?;
    let items = elements(&list)?;
    let wanted = Value::try_from(wanted.as_ref())?;
    let found = if last {
        items.iter().rposition(|i| *i == wanted)
    } else {
        items.iter().position(|i| *i == wanted)
    };
    owned(Value::Int(found.map_or(-1, |i| i as i64)))
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position(args, false)
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position(args, true)
}

/// The formats of Kubernetes' `format` library, by the name its constructor has.
const FORMATS: [&str; 9] = [
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "labelValue",
    "uri",
    "uuid",
    "date",
    "datetime",
];

macro_rules! format_constructor {
    ($name:ident, $text:literal) => {
        fn $name<'b, 'v>(_: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
            owned(Value::String(Arc::new($text.to_owned())))
        }
    };
}
format_constructor!(format_dns1123_label, "dns1123Label");
format_constructor!(format_dns1123_subdomain, "dns1123Subdomain");
format_constructor!(format_dns1035_label, "dns1035Label");
format_constructor!(format_qualified_name, "qualifiedName");
format_constructor!(format_label_value, "labelValue");
format_constructor!(format_uri, "uri");
format_constructor!(format_uuid, "uuid");
format_constructor!(format_date, "date");
format_constructor!(format_datetime, "datetime");

const FORMAT_CONSTRUCTORS: [cel::common::functions::Function; 9] = [
    format_dns1123_label,
    format_dns1123_subdomain,
    format_dns1035_label,
    format_qualified_name,
    format_label_value,
    format_uri,
    format_uuid,
    format_date,
    format_datetime,
];

/// `format.<name>().validate(value)`: `optional.none()` when valid, else the errors.
fn validate(format: &CelString<'_>, value: &CelString<'_>) -> CelOptional<'static> {
    use plinth_core::validation as v;
    let errors: Vec<String> = match &**format {
        "dns1123Label" => v::dns1123_label(value),
        "dns1123Subdomain" => v::dns1123_subdomain(value),
        "dns1035Label" => v::dns1035_label(value),
        "qualifiedName" => v::qualified_name(value),
        "labelValue" => v::label_value(value),
        "uri" => (!crate::format::valid("uri", value))
            .then(|| "invalid URI".to_owned())
            .into_iter()
            .collect(),
        "uuid" => (!crate::format::valid("uuid", value))
            .then(|| "invalid UUID".to_owned())
            .into_iter()
            .collect(),
        "date" => (!crate::format::valid("date", value))
            .then(|| "invalid date".to_owned())
            .into_iter()
            .collect(),
        "datetime" => (!crate::format::valid("date-time", value))
            .then(|| "invalid datetime".to_owned())
            .into_iter()
            .collect(),
        other => vec![format!("unknown format {other}")],
    };
    if errors.is_empty() {
        return CelOptional::none();
    }
    let list: Vec<Box<dyn Val + 'static>> = errors
        .into_iter()
        .map(|e| Box::new(CelString::from(e)) as Box<dyn Val>)
        .collect();
    CelOptional::of(Box::new(CelList::from(list)))
}
