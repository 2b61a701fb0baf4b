//! Pod networking on one machine: address ranges that miss the machine's own, a network
//! namespace per pod on a bridge of its node, the Service rules a kube-proxy writes, NetworkPolicy's per-pod rules, and
//! cluster DNS with the pods' `resolv.conf` and `hosts` files.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod cidr;
pub mod dns;
pub mod host;
mod netlink;
pub mod podfiles;
pub mod policy;
pub mod rules;
pub mod spdy;

pub use cidr::Cidr;
