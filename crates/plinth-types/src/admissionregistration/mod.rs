//! admissionregistration.k8s.io/v1: the webhook configurations (which writes go to which
//! admission webhooks), defaulted and validated as kube does. The chain that calls them is
//! [`plinth_admission`].

pub mod policy;
pub mod webhookconfiguration;

const GROUP: &str = "admissionregistration.k8s.io";

/// The variables a webhook's match condition may name (kube's, but `authorizer`, which is not
/// built).
pub const MATCH_VARIABLES: [&str; 3] = ["object", "oldObject", "request"];
