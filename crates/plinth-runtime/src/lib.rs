//! plinth-runtime: what controller-runtime is to Go, for Rust operators on the `kube` crate.
//!
//! - [`workqueue`]: keys de-duplicated while they wait, never handed to two workers at once,
//!   retried with per-key exponential backoff under an overall token bucket (client-go's
//!   default rate limiter), delayed adds, a shutdown that drains work in flight.
//! - [`informer`]: one watch per resource type feeding a cache of shared objects with indexes.
//! - [`controller`]: primary, owned and mapped resources feed a queue; workers call a
//!   reconciler that takes only a key.
//!
//! - [`builder`]: `manager.controller(api).owns(..).watches(..).run(reconcile, context)` —
//!   the way to write a controller; informers shared through the manager.
//! - [`failover`]: one client over several API servers, the next tried when one does not
//!   answer (opt-in).
//! - [`client`]: the split client — reads from the cache, writes to the server — and
//!   [`ObjectClient`], whose writes take the namespace from the object.
//! - [`leader`]: Lease leader election with client-go's timings.
//! - [`fence`]: a client whose writes are refused while this process does not lead.
//! - [`manager`]: runs controllers (some only while leading), serves `/metrics` with
//!   controller-runtime's metric names and the health probes, stops gracefully.
//!
//! - [`health`]: `/healthz` and `/readyz` checks registered on the manager.
//! - [`helpers`]: the finalizer flow, controller references, conditions, events, conflict
//!   retries.
//! - [`webhook`]: admission webhooks over TLS — typed validators and defaulters, certificates
//!   rotated from files or a Secret, the CA written into the configurations that call them.
//!
//! A whole controller — every ConfigMap gets the label `seen=yes`, and gets it back when
//! someone removes it:
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::ResourceExt;
//! use kube::api::{Api, Patch, PatchParams};
//! use plinth_runtime::{Action, Manager, ReconcileError};
//!
//! /// Level-triggered: whatever changed, make the label right.
//! async fn reconcile(config: Arc<ConfigMap>, client: Arc<kube::Client>) -> Result<Action, ReconcileError> {
//!     let namespace = config.namespace().unwrap_or_default();
//!     let api: Api<ConfigMap> = Api::namespaced((*client).clone(), &namespace);
//!     let labels = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
//!                                     "metadata": {"labels": {"seen": "yes"}}});
//!     api.patch(&config.name_any(), &PatchParams::apply("labeler"), &Patch::Apply(labels))
//!         .await?;
//!     Ok(Action::Done)
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let mut manager = Manager::new();
//! manager
//!     .controller(Api::<ConfigMap>::all(client.clone()))
//!     .named("labeler")
//!     .run(reconcile, Arc::new(client))?;
//! manager.run(std::future::pending()).await?; // or a shutdown signal
//! # Ok(()) }
//! ```
//!
//! The crate README walks from `cargo new` to a tested operator; the book's chapter "Writing
//! an operator" walks through the tenant operator.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod builder;
pub mod client;
pub mod controller;
pub mod failover;
pub mod fence;
pub mod health;
pub mod helpers;
pub mod informer;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod webhook;
/// The work queue (from `plinth-workqueue`, which the built-in controllers share).
pub mod workqueue {
    pub use plinth_workqueue::*;
}

pub use builder::{BuildError, ControllerBuilder};
pub use client::{ObjectClient, SplitClient};
pub use controller::{
    Action, Controller, ControllerError, Predicate, ReconcileError, ReconcileFuture, Stopping,
};
pub use informer::{Cache, Change, Informer, InformerOptions, ObjectKey};
pub use leader::{LeaderElector, Leadership, LeaseGate, Timings};
pub use manager::{
    InformerConflict, Manager, ManagerError, RunError, Runs, Shutdown, shutdown_signal,
};
pub use metrics::Metrics;
pub use workqueue::{RateLimiter, WorkQueue};
