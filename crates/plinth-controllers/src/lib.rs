//! Plinth's built-in controllers, run in the server process on its registry: the garbage
//! collector and the namespace lifecycle.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod gc;
pub mod namespace;

pub use gc::spawn_garbage_collector;
pub use namespace::spawn_namespace_controller;

/// Starts every built-in controller on `registry`; they stop when `stopping` becomes true.
pub fn spawn_all(
    registry: plinth_apiserver::registry::Registry,
    stopping: tokio::sync::watch::Receiver<bool>,
) {
    spawn_namespace_controller(registry.clone(), stopping.clone());
    spawn_garbage_collector(registry, stopping);
}
