//! storage.k8s.io.

pub mod storageclass;
