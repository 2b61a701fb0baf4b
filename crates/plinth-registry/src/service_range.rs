//! The Service range (kube-apiserver's `--service-cluster-ip-range`), which both the Service
//! allocator (`types::core::service`) and the serving certificate (`pki`) need; depends on
//! nothing else in the crate.

use plinth_net::Cidr;

/// The range a server starts with when told nothing: in the machine's loopback network,
/// where pods sharing the machine's network can reach it.
const LOOPBACK: Cidr = Cidr::v4([127, 32, 0, 0], 16);

static RANGE: std::sync::RwLock<Option<Cidr>> = std::sync::RwLock::new(None);

/// Sets the service range (kube-apiserver's `--service-cluster-ip-range`): an IPv4 range from
/// `/12` (kube's largest) to `/28`.
///
/// # Errors
/// Any other range.
pub fn set_service_range(cidr: &str) -> Result<(), String> {
    let range = Cidr::parse(cidr)
        .filter(|r| (12..=28).contains(&r.bits()))
        .ok_or_else(|| {
            format!(
                "--service-cluster-ip-range {cidr:?}: an IPv4 range from /12 to /28 is needed (e.g. 10.96.0.0/12)"
            )
        })?;
    if let Ok(mut current) = RANGE.write() {
        *current = Some(range);
    }
    Ok(())
}

/// The range.
pub fn range() -> Cidr {
    RANGE.read().ok().and_then(|r| *r).unwrap_or(LOOPBACK)
}

/// The `kubernetes` Service's ClusterIP: the service range's first address.
pub fn kubernetes_ip() -> String {
    range().nth(1).map(|ip| ip.to_string()).unwrap_or_default()
}

/// The cluster DNS Service's ClusterIP (`kube-system/kube-dns`): the range's tenth address,
/// as kubeadm gives it.
pub fn dns_ip() -> String {
    range().nth(10).map(|ip| ip.to_string()).unwrap_or_default()
}
