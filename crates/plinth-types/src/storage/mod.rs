//! storage.k8s.io.

pub mod csi;
pub mod storageclass;
