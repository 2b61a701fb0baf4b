//! apiregistration.k8s.io/v1: APIServices — which server serves a group/version: this one
//! (`Local`, one for every built-in group/version) or an extension API server the requests
//! are proxied to ([`crate::aggregator`]).

pub mod apiservice;
