//! discovery.k8s.io.

pub mod endpointslice;
