//! The `certificates.k8s.io` API group.

pub mod csr;
