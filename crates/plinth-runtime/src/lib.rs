//! plinth-runtime: what controller-runtime is to Go, for Rust operators on the `kube` crate.
//!
//! This first piece is the [`workqueue`]: keys de-duplicated while they wait, never handed to
//! two workers at once, retried with per-key exponential backoff under an overall token
//! bucket (client-go's default rate limiter), delayed adds, and a shutdown that drains work in
//! flight. Informers, the reconciler, the controller builder and the manager build on it.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod workqueue;

pub use workqueue::{RateLimiter, WorkQueue};
