//! The Service range (kube-apiserver's `--service-cluster-ip-range`), which both the Service
//! allocator (`types::core::service`) and the serving certificate (`pki`) need; depends on
//! nothing else in the crate.

use std::net::Ipv4Addr;

/// The service range, a `/16` of `127.0.0.0/8` (its first two octets); its `.0.1` is the
/// `kubernetes` Service's.
static RANGE: std::sync::RwLock<[u8; 2]> = std::sync::RwLock::new([127, 32]);

/// Sets the service range (kube-apiserver's `--service-cluster-ip-range`): a `/16` in
/// `127.0.0.0/8`, as `127.N.0.0/16`.
///
/// # Errors
/// Any other range.
pub fn set_service_range(cidr: &str) -> Result<(), String> {
    let bad = || {
        format!(
            "--service-cluster-ip-range {cidr:?}: a /16 in 127.0.0.0/8 is needed (e.g. 127.32.0.0/16)"
        )
    };
    let (ip, bits) = cidr.split_once('/').ok_or_else(bad)?;
    let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
    let o = ip.octets();
    if bits != "16" || o[0] != 127 || o[2] != 0 || o[3] != 0 {
        return Err(bad());
    }
    if let Ok(mut range) = RANGE.write() {
        *range = [o[0], o[1]];
    }
    Ok(())
}

/// The range's first two octets.
pub fn range_base() -> [u8; 2] {
    RANGE.read().map_or([127, 32], |r| *r)
}

/// The `kubernetes` Service's ClusterIP: the service range's first address.
pub fn kubernetes_ip() -> String {
    let [a, b] = range_base();
    format!("{a}.{b}.0.1")
}
