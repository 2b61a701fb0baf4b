//! plinth-runtime: what controller-runtime is to Go, for Rust operators on the `kube` crate.
//!
//! - [`workqueue`]: keys de-duplicated while they wait, never handed to two workers at once,
//!   retried with per-key exponential backoff under an overall token bucket (client-go's
//!   default rate limiter), delayed adds, a shutdown that drains work in flight.
//! - [`informer`]: one watch per resource type feeding a cache of shared objects with indexes.
//! - [`controller`]: primary, owned and mapped resources feed a queue; workers call a
//!   reconciler that takes only a key.
//!
//! Still to come (issue #6): the manager with leader election, metrics and health endpoints,
//! and the split client.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod controller;
pub mod informer;
pub mod leader;
pub mod workqueue;

pub use controller::{Action, Controller, ReconcileError, ReconcileFuture};
pub use informer::{Cache, Change, Informer, ObjectKey};
pub use leader::{LeaderElector, Leadership, Timings};
pub use workqueue::{RateLimiter, WorkQueue};
