//! The `apiextensions.k8s.io` API group: CustomResourceDefinitions and the custom resources
//! they serve.

pub mod crd;
pub mod custom;
pub mod status;

pub use crd::CLEANUP_FINALIZER;
pub use custom::served_defs;
pub use status::desired_status;
