//! admissionregistration.k8s.io/v1: the webhook configurations (which writes go to which
//! admission webhooks), defaulted and validated as kube does. The chain that calls them is
//! [`crate::admission`].

pub mod policy;
pub mod webhookconfiguration;

const GROUP: &str = "admissionregistration.k8s.io";
