//! The few rtnetlink requests a pod's sandbox needs (a veth pair, addresses, a route, links
//! up and on the bridge), sent on a netlink socket of the calling thread's namespace: no `ip`
//! process per step.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    self, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};

const NLMSG_ERROR: u16 = 2;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;

const IFLA_IFNAME: u16 = 3;
const IFLA_MASTER: u16 = 10;
const IFLA_LINKINFO: u16 = 18;
const IFLA_NET_NS_FD: u16 = 28;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const VETH_INFO_PEER: u16 = 1;
const IFF_UP: u32 = 0x1;

const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const AF_INET: u8 = 2;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_BOOT: u8 = 3;
const RTN_UNICAST: u8 = 1;
const RTNH_F_ONLINK: u32 = 0x4;

/// A netlink route socket, of the namespace the thread that opened it was in.
pub(crate) struct Socket {
    fd: OwnedFd,
    seq: u32,
}

/// A message being written: fixed header bytes, then attributes (each 4-byte aligned).
#[derive(Default)]
struct Message {
    bytes: Vec<u8>,
}

impl Message {
    fn raw(&mut self, data: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(data);
        self
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }

    fn attr(&mut self, kind: u16, data: &[u8]) -> &mut Self {
        self.pad();
        let len = u16::try_from(4 + data.len()).unwrap_or(u16::MAX);
        self.bytes.extend_from_slice(&len.to_ne_bytes());
        self.bytes.extend_from_slice(&kind.to_ne_bytes());
        self.bytes.extend_from_slice(data);
        self.pad();
        self
    }

    fn name(&mut self, kind: u16, text: &str) -> &mut Self {
        let mut data = text.as_bytes().to_vec();
        data.push(0);
        self.attr(kind, &data)
    }

    /// An attribute holding what `fill` writes.
    fn nested(&mut self, kind: u16, fill: impl FnOnce(&mut Message)) -> &mut Self {
        let mut inner = Message::default();
        fill(&mut inner);
        self.attr(kind, &inner.bytes)
    }
}

/// `struct ifinfomsg` for link `index` (0: a new one) with `flags` changed to `flags`.
fn ifinfo(index: u32, flags: u32) -> Message {
    let mut m = Message::default();
    m.raw(&[0, 0, 0, 0])
        .raw(&index.to_ne_bytes())
        .raw(&flags.to_ne_bytes())
        .raw(&flags.to_ne_bytes());
    m
}

impl Socket {
    /// A socket in the calling thread's network namespace.
    pub(crate) fn open() -> Result<Self, String> {
        let fd = socket::socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )
        .map_err(|e| format!("netlink socket: {e}"))?;
        Ok(Socket { fd, seq: 0 })
    }

    /// Sends request `kind` with `body`, waiting for the kernel's answer.
    fn request(&mut self, kind: u16, flags: u16, body: &Message, what: &str) -> Result<(), String> {
        self.seq = self.seq.wrapping_add(1);
        let len = u32::try_from(16 + body.bytes.len()).map_err(|_| format!("{what}: too long"))?;
        let mut bytes = Vec::with_capacity(16 + body.bytes.len());
        bytes.extend_from_slice(&len.to_ne_bytes());
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(&(flags | NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
        bytes.extend_from_slice(&self.seq.to_ne_bytes());
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        bytes.extend_from_slice(&body.bytes);
        let fd: RawFd = self.fd.as_raw_fd();
        socket::sendto(fd, &bytes, &NetlinkAddr::new(0, 0), MsgFlags::empty())
            .map_err(|e| format!("{what}: {e}"))?;
        let mut answer = vec![0u8; 8192];
        loop {
            let n = socket::recv(fd, &mut answer, MsgFlags::empty())
                .map_err(|e| format!("{what}: {e}"))?;
            let mut at = 0;
            while at + 20 <= n {
                let word = |i: usize| -> [u8; 4] {
                    let mut w = [0u8; 4];
                    w.copy_from_slice(&answer[i..i + 4]);
                    w
                };
                let msg_len = u32::from_ne_bytes(word(at)) as usize;
                let msg_type = u16::from_ne_bytes([answer[at + 4], answer[at + 5]]);
                let seq = u32::from_ne_bytes(word(at + 8));
                if msg_type == NLMSG_ERROR && seq == self.seq {
                    let errno = i32::from_ne_bytes(word(at + 16));
                    return if errno == 0 {
                        Ok(())
                    } else {
                        Err(format!(
                            "{what}: {} ({errno})",
                            nix::errno::Errno::from_raw(-errno).desc()
                        ))
                    };
                }
                if msg_len < 16 {
                    break;
                }
                at += msg_len.next_multiple_of(4);
            }
        }
    }

    /// A veth pair: `name` here, its peer `peer` in the namespace of `peer_namespace` (both
    /// down: a veth cannot be up before its peer exists).
    pub(crate) fn add_veth(
        &mut self,
        name: &str,
        peer: &str,
        peer_namespace: RawFd,
    ) -> Result<(), String> {
        let mut m = ifinfo(0, 0);
        m.name(IFLA_IFNAME, name).nested(IFLA_LINKINFO, |info| {
            info.name(IFLA_INFO_KIND, "veth")
                .nested(IFLA_INFO_DATA, |data| {
                    data.nested(VETH_INFO_PEER, |p| {
                        p.raw(&ifinfo(0, 0).bytes)
                            .name(IFLA_IFNAME, peer)
                            .attr(IFLA_NET_NS_FD, &peer_namespace.to_ne_bytes());
                    });
                });
        });
        self.request(
            RTM_NEWLINK,
            NLM_F_CREATE | NLM_F_EXCL,
            &m,
            &format!("add veth {name}"),
        )
    }

    /// Link `index` up.
    pub(crate) fn link_up(&mut self, index: u32) -> Result<(), String> {
        self.request(
            RTM_NEWLINK,
            0,
            &ifinfo(index, IFF_UP),
            &format!("set link {index} up"),
        )
    }

    /// Link `name` up on the bridge of index `master`.
    pub(crate) fn link_up_on(&mut self, name: &str, master: u32) -> Result<(), String> {
        let mut m = ifinfo(0, IFF_UP);
        m.name(IFLA_IFNAME, name)
            .attr(IFLA_MASTER, &master.to_ne_bytes());
        self.request(RTM_NEWLINK, 0, &m, &format!("set link {name} up"))
    }

    /// Removes link `name` (with a veth, its peer too).
    pub(crate) fn delete_link(&mut self, name: &str) -> Result<(), String> {
        let mut m = ifinfo(0, 0);
        m.name(IFLA_IFNAME, name);
        self.request(RTM_DELLINK, 0, &m, &format!("delete link {name}"))
    }

    /// `address/32` on link `index`.
    pub(crate) fn add_address(
        &mut self,
        index: u32,
        address: std::net::Ipv4Addr,
    ) -> Result<(), String> {
        let mut m = Message::default();
        m.raw(&[AF_INET, 32, 0, 0]).raw(&index.to_ne_bytes());
        m.attr(IFA_LOCAL, &address.octets())
            .attr(IFA_ADDRESS, &address.octets());
        self.request(
            RTM_NEWADDR,
            NLM_F_CREATE | NLM_F_EXCL,
            &m,
            &format!("add address {address}"),
        )
    }

    /// The default route through `gateway` on link `index`, the gateway taken as on-link.
    pub(crate) fn add_default_route(
        &mut self,
        index: u32,
        gateway: std::net::Ipv4Addr,
    ) -> Result<(), String> {
        let mut m = Message::default();
        m.raw(&[AF_INET, 0, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, 0, RTN_UNICAST])
            .raw(&RTNH_F_ONLINK.to_ne_bytes());
        m.attr(RTA_GATEWAY, &gateway.octets())
            .attr(RTA_OIF, &index.to_ne_bytes());
        self.request(
            RTM_NEWROUTE,
            NLM_F_CREATE | NLM_F_EXCL,
            &m,
            &format!("add default route via {gateway}"),
        )
    }
}

/// The index of link `name` in the calling thread's namespace.
pub(crate) fn index(name: &str) -> Result<u32, String> {
    nix::net::if_::if_nametoindex(name).map_err(|e| format!("link {name}: {e}"))
}
