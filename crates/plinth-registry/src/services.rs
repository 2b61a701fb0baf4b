//! Where a Service's port is served, as kube-apiserver's endpoint resolver finds it for the
//! webhooks, conversion webhooks and APIServices that name a Service: the trait the callers
//! take, why a Service may have nothing to call, and kube's `ResolveEndpoint` on a Service and
//! its Endpoints.

use std::net::SocketAddr;

use serde_json::Value;

/// Finds where a Service's port is served (kube-apiserver's service resolver).
#[async_trait::async_trait]
pub trait ServiceResolver: Send + Sync {
    /// An address serving `port` of Service `namespace/name`.
    ///
    /// # Errors
    /// Why there is none.
    async fn resolve(
        &self,
        namespace: &str,
        name: &str,
        port: u16,
    ) -> Result<SocketAddr, Unresolved>;
}

/// Why a Service's port has no address to call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unresolved {
    /// The Service does not exist.
    NotFound(String),
    /// Its type has no endpoints (`ExternalName`).
    UnsupportedType(String),
    /// It has no such port (the Service, the port).
    NoPort(String, u16),
    /// It has no Endpoints object.
    EndpointsNotFound(String),
    /// No ready address serves the port (the Service, the port's name).
    NoEndpoints(String, String),
}

impl std::fmt::Display for Unresolved {
    /// kube's `ResolveEndpoint` messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotFound(name) => write!(f, "service {name:?} not found"),
            Self::UnsupportedType(kind) => write!(f, "unsupported service type {kind:?}"),
            Self::NoPort(name, port) => {
                write!(f, "no service port {port} found for service {name:?}")
            }
            Self::EndpointsNotFound(name) => write!(f, "endpoints {name:?} not found"),
            Self::NoEndpoints(name, _) => write!(f, "no endpoints available for service {name:?}"),
        }
    }
}

/// kube's `ResolveEndpoint`: of Service `name` (`service`; absent: not found) and its
/// `endpoints`, the port named as the Service port `port` is, at one of the ready addresses
/// (chosen at random).
///
/// # Errors
/// Why there is none.
pub fn endpoint_of(
    name: &str,
    service: Option<&Value>,
    endpoints: Option<&Value>,
    port: u16,
) -> Result<SocketAddr, Unresolved> {
    let service = service.ok_or_else(|| Unresolved::NotFound(name.to_owned()))?;
    let kind = service
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    if !matches!(kind, "ClusterIP" | "NodePort" | "LoadBalancer") {
        return Err(Unresolved::UnsupportedType(kind.to_owned()));
    }
    let port_name = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(port)))
        .map(|p| p.get("name").and_then(Value::as_str).unwrap_or(""))
        .ok_or_else(|| Unresolved::NoPort(name.to_owned(), port))?;
    let endpoints = endpoints.ok_or_else(|| Unresolved::EndpointsNotFound(name.to_owned()))?;
    let unavailable = || Unresolved::NoEndpoints(name.to_owned(), port_name.to_owned());
    let subsets: Vec<&Value> = endpoints
        .get("subsets")
        .and_then(Value::as_array)
        .map(|s| s.iter().collect())
        .unwrap_or_default();
    if subsets.is_empty() {
        return Err(unavailable());
    }
    let seed = random_below(subsets.len());
    for i in 0..subsets.len() {
        let subset = subsets[(seed + i) % subsets.len()];
        let addresses: Vec<std::net::IpAddr> = subset
            .get("addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|a| a.get("ip").and_then(Value::as_str)?.parse().ok())
            .collect();
        if addresses.is_empty() {
            continue;
        }
        let target = subset
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
            .and_then(|p| p.get("port").and_then(Value::as_u64))
            .and_then(|p| u16::try_from(p).ok());
        if let Some(target) = target {
            let ip = addresses[random_below(addresses.len())];
            return Ok(SocketAddr::new(ip, target));
        }
    }
    Err(unavailable())
}

/// A number below `n` (at least 1), at random.
fn random_below(n: usize) -> usize {
    let mut bytes = [0u8; 8];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    usize::try_from(u64::from_le_bytes(bytes) % n.max(1) as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn endpoints_are_found_by_the_service_ports_name() {
        let service =
            json!({"spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]}});
        let endpoints = json!({"subsets": [
            {"notReadyAddresses": [{"ip": "10.0.0.9"}], "ports": [{"name": "https", "port": 8443}]},
            {"addresses": [{"ip": "10.0.0.2"}], "ports": [{"name": "https", "port": 8443}]},
        ]});
        assert_eq!(
            endpoint_of("api", Some(&service), Some(&endpoints), 443),
            Ok("10.0.0.2:8443".parse().unwrap_or_else(|_| unreachable!()))
        );
        let missing = |service: Option<&Value>, endpoints: Option<&Value>, port| {
            endpoint_of("api", service, endpoints, port)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert_eq!(missing(None, None, 443), r#"service "api" not found"#);
        assert_eq!(
            missing(Some(&service), Some(&endpoints), 80),
            r#"no service port 80 found for service "api""#
        );
        assert_eq!(
            missing(Some(&service), None, 443),
            r#"endpoints "api" not found"#
        );
        assert_eq!(
            missing(Some(&service), Some(&json!({})), 443),
            r#"no endpoints available for service "api""#
        );
        let external = json!({"spec": {"type": "ExternalName"}});
        assert_eq!(
            missing(Some(&external), None, 443),
            r#"unsupported service type "ExternalName""#
        );
    }
}
