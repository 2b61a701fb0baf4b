//! Plinth's built-in controllers, run in the server process on its registry: the garbage
//! collector. (The namespace lifecycle loops still live in `plinth-apiserver` and move here
//! with the rest of issue #5.)

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod gc;

pub use gc::spawn_garbage_collector;
