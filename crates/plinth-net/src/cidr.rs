//! IPv4 ranges (`10.244.0.0/16`), and the default pod and Service ranges chosen so that they
//! overlap nothing this machine routes or resolves through.

use std::fmt;
use std::net::Ipv4Addr;

/// An IPv4 range: a network address and a prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    base: u32,
    bits: u8,
}

impl Cidr {
    /// The range of `address` (its host bits cleared) with prefix `bits` (0 to 32).
    pub fn new(address: Ipv4Addr, bits: u8) -> Option<Self> {
        (bits <= 32).then(|| Self {
            base: u32::from(address) & mask(bits),
            bits,
        })
    }

    /// The range of `octets` with prefix `bits` (at most 32; host bits cleared), for constants.
    pub const fn v4(octets: [u8; 4], bits: u8) -> Self {
        let bits = if bits > 32 { 32 } else { bits };
        let mask = if bits == 0 {
            0
        } else {
            u32::MAX << (32 - bits as u32)
        };
        Self {
            base: u32::from_be_bytes(octets) & mask,
            bits,
        }
    }

    /// Parses `A.B.C.D/N`; the address must be the network's own (no host bits set).
    pub fn parse(text: &str) -> Option<Self> {
        let (address, bits) = text.split_once('/')?;
        let address: Ipv4Addr = address.parse().ok()?;
        let bits: u8 = bits.parse().ok()?;
        let cidr = Self::new(address, bits)?;
        (cidr.base == u32::from(address)).then_some(cidr)
    }

    /// The network address.
    pub fn network(self) -> Ipv4Addr {
        Ipv4Addr::from(self.base)
    }

    /// The prefix length.
    pub fn bits(self) -> u8 {
        self.bits
    }

    /// How many addresses it holds.
    pub fn size(self) -> u64 {
        1u64 << (32 - u32::from(self.bits))
    }

    /// Its `n`th address (`0` is the network's), if it has one.
    pub fn nth(self, n: u64) -> Option<Ipv4Addr> {
        (n < self.size()).then(|| Ipv4Addr::from(self.base.wrapping_add(n as u32)))
    }

    /// Where `address` is in it (`None`: outside).
    pub fn index_of(self, address: Ipv4Addr) -> Option<u64> {
        self.contains(address)
            .then(|| u64::from(u32::from(address) - self.base))
    }

    /// Whether `address` is in it.
    pub fn contains(self, address: Ipv4Addr) -> bool {
        u32::from(address) & mask(self.bits) == self.base
    }

    /// Whether it shares an address with `other`.
    pub fn overlaps(self, other: Cidr) -> bool {
        let bits = self.bits.min(other.bits);
        self.base & mask(bits) == other.base & mask(bits)
    }

    /// Whether it lies in `127.0.0.0/8` (pods and Services sharing the machine's network).
    pub fn is_loopback(self) -> bool {
        self.network().is_loopback() && self.bits >= 8
    }

    /// Its `n`th sub-range of prefix `bits` (`10.244.0.0/16` → `10.244.n.0/24`).
    pub fn subnet(self, bits: u8, n: u64) -> Option<Cidr> {
        if bits < self.bits || bits > 32 {
            return None;
        }
        let count = 1u64 << (bits - self.bits);
        (n < count).then(|| Cidr {
            base: self.base + ((n as u32) << (32 - u32::from(bits))),
            bits,
        })
    }

    /// How many sub-ranges of prefix `bits` it holds.
    pub fn subnets(self, bits: u8) -> u64 {
        if bits < self.bits || bits > 32 {
            0
        } else {
            1u64 << (bits - self.bits)
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network(), self.bits)
    }
}

fn mask(bits: u8) -> u32 {
    if bits == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(bits))
    }
}

/// What this machine reaches without its default route: every network of its routing table
/// (`/proc/net/route`, the one default route left out) and every nameserver of
/// `/etc/resolv.conf` (as a `/32`). A range overlapping one of them would hide it.
pub fn machine_networks() -> Vec<Cidr> {
    let mut found = Vec::new();
    if let Ok(table) = std::fs::read_to_string("/proc/net/route") {
        for line in table.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(dest), Some(gateway), Some(mask_hex)) =
                (fields.get(1), fields.get(2), fields.get(7))
            else {
                continue;
            };
            // The kernel prints each address as the number its bytes make in the
            // machine's order.
            let parse = |hex: &str| {
                u32::from_str_radix(hex, 16)
                    .ok()
                    .map(|n| Ipv4Addr::from(n.to_ne_bytes()))
            };
            let (Some(dest), Some(gateway), Some(route_mask)) =
                (parse(dest), parse(gateway), parse(mask_hex))
            else {
                continue;
            };
            let bits = u32::from(route_mask).leading_ones() as u8;
            let gateway = u32::from(gateway);
            if bits > 0
                && let Some(cidr) = Cidr::new(dest, bits)
            {
                found.push(cidr);
            }
            if gateway != 0
                && let Some(cidr) = Cidr::new(Ipv4Addr::from(gateway), 32)
            {
                found.push(cidr);
            }
        }
    }
    if let Ok(resolv) = std::fs::read_to_string("/etc/resolv.conf") {
        for line in resolv.lines() {
            if let Some(server) = line.strip_prefix("nameserver")
                && let Ok(address) = server.trim().parse::<Ipv4Addr>()
                && let Some(cidr) = Cidr::new(address, 32)
            {
                found.push(cidr);
            }
        }
    }
    found
}

/// The pod and Service ranges tried, in order: kube's usual ones first (`10.244.0.0/16`,
/// `10.96.0.0/12`), then others of the private ranges.
const CANDIDATES: &[(&str, &str)] = &[
    ("10.244.0.0/16", "10.96.0.0/12"),
    ("172.30.0.0/16", "172.31.0.0/16"),
    ("10.200.0.0/16", "10.201.0.0/16"),
    ("192.168.224.0/20", "192.168.240.0/20"),
];

/// The first pair of candidate ranges (pods, Services) overlapping none of `taken`.
pub fn choose(taken: &[Cidr]) -> Option<(Cidr, Cidr)> {
    CANDIDATES.iter().find_map(|(pods, services)| {
        let pods = Cidr::parse(pods)?;
        let services = Cidr::parse(services)?;
        let free = |range: Cidr| !taken.iter().any(|t| t.overlaps(range));
        (free(pods) && free(services)).then_some((pods, services))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_split() {
        let pods = Cidr::parse("10.244.0.0/16").unwrap();
        assert_eq!(pods.subnet(24, 3).unwrap().to_string(), "10.244.3.0/24");
        assert_eq!(pods.subnets(24), 256);
        assert_eq!(pods.nth(258), Some(Ipv4Addr::new(10, 244, 1, 2)));
        assert!(Cidr::parse("10.244.0.1/16").is_none(), "host bits set");
        assert!(Cidr::parse("10.244.0.0/33").is_none());
        assert!(Cidr::parse("127.64.0.0/10").unwrap().is_loopback());
        assert!(pods.overlaps(Cidr::parse("10.0.0.0/8").unwrap()));
        assert!(!pods.overlaps(Cidr::parse("10.96.0.0/12").unwrap()));
        assert_eq!(pods.index_of(Ipv4Addr::new(10, 244, 0, 10)), Some(10));
    }

    #[test]
    fn defaults_step_around_the_machines_networks() {
        let ours = choose(&[Cidr::parse("192.0.2.0/24").unwrap()]).unwrap();
        assert_eq!(ours.0.to_string(), "10.244.0.0/16");
        let taken = [Cidr::parse("10.0.0.0/8").unwrap()];
        let other = choose(&taken).unwrap();
        assert_eq!(other.0.to_string(), "172.30.0.0/16");
        assert_eq!(other.1.to_string(), "172.31.0.0/16");
    }

    #[test]
    fn the_route_table_is_read() {
        // Whatever this machine has, nothing read is the default route.
        assert!(machine_networks().iter().all(|c| c.bits() > 0));
    }
}
