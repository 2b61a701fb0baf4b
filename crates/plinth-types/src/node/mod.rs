//! node.k8s.io/v1: RuntimeClasses.

pub mod runtimeclass;
