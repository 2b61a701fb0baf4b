//! Kubernetes API machinery without I/O: group/version/kind and resource names, `Status`
//! errors, name and label validation with apimachinery's exact messages, label and field
//! selectors, and helpers for object metadata held as JSON.
//!
//! This crate does no I/O and knows nothing of storage or HTTP.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod at;
pub mod cron;
pub mod diff;
pub mod duplicates;
pub mod frozen;
pub mod gvk;
pub mod jsonpath;
pub mod managed;
pub mod meta;
pub mod quantity;
pub mod selector;
pub mod smp;
pub mod status;
pub mod validation;

pub use gvk::{GroupResource, GroupVersion, GroupVersionKind};
pub use status::{ApiError, Cause, Details, StatusReason};

/// The host's name (`/etc/hostname`), or `plinth`.
pub fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "plinth".to_owned())
}

pub use at::At;
pub use frozen::{Frozen, Tree};
