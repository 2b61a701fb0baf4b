//! Pod addresses of this node, handed out from its `spec.podCIDR`.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// Pod addresses of this node: its /24 and the hosts in use.
#[derive(Debug, Default)]
pub(crate) struct Addresses {
    base: Option<[u8; 3]>,
    used: BTreeSet<u8>,
}

impl Addresses {
    /// Hands out addresses of `base.0/24` from now on.
    pub(crate) fn set_base(&mut self, base: [u8; 3]) {
        self.base = Some(base);
    }

    /// An address not in use (`.2` to `.254`; `.1` is the node's gateway in kube's layout).
    pub(crate) fn allocate(&mut self) -> Option<Ipv4Addr> {
        let base = self.base?;
        let host = (2..=254u8).find(|h| !self.used.contains(h))?;
        self.used.insert(host);
        Some(Ipv4Addr::new(base[0], base[1], base[2], host))
    }

    /// Marks `ip` in use (a pod already running there).
    pub(crate) fn claim(&mut self, ip: Ipv4Addr) {
        let o = ip.octets();
        if self.base == Some([o[0], o[1], o[2]]) {
            self.used.insert(o[3]);
        }
    }

    /// Gives `ip` back.
    pub(crate) fn release(&mut self, ip: Ipv4Addr) {
        let o = ip.octets();
        if self.base == Some([o[0], o[1], o[2]]) {
            self.used.remove(&o[3]);
        }
    }
}
