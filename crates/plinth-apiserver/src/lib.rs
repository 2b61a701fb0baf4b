//! Plinth's Kubernetes-compatible API server, the composition root: HTTP over rustls,
//! discovery, OpenAPI, the aggregator, audit, encryption at rest and the node proxy, wiring
//! [`plinth_registry`], [`plinth_auth`], [`plinth_types`] and [`plinth_admission`] over an
//! `Arc<dyn` [`plinth_store::Store`]`>` — which backend is the caller's choice; this crate
//! depends on none.
//!
//! Requests flow `http` (routing, negotiation, query and body decoding, authentication and
//! authorization, errors → `Status`) → [`plinth_registry::Registry`] (the order of steps,
//! optimistic concurrency) calling the resource's strategy (one module per type in
//! [`plinth_types`]) and admission ([`plinth_admission`], through the registry's `Admit`
//! trait) → the store. Storage errors become API errors in `plinth_registry::store_error`;
//! API errors become responses in `http` — each in one place.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod admission_config;
pub mod aggregator;
pub mod audit;
mod controllers;
pub mod discovery;
pub mod encryption;
mod http;
mod kubernetes_service;
pub mod metrics;
pub mod nodes;
pub mod openapi;
pub mod openapi_v2_proto;
mod server;

use std::net::SocketAddr;
use std::path::PathBuf;

pub use plinth_auth::pki::ServingFiles;
pub use server::{
    AuditConfig, RunningServer, SYSTEM_NAMESPACES, ServerConfig, create_private_dir, start,
};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The data directory could not be created.
    #[error("cannot use data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Storage could not be opened.
    #[error("cannot open storage: {0}")]
    Storage(#[source] Box<plinth_store::StoreError>),
    /// The system namespaces could not be created.
    #[error("cannot create the cluster's default objects: {0}")]
    Bootstrap(String),
    /// Credentials could not be created or loaded.
    #[error("cannot {step}: {reason}")]
    Credentials {
        /// The step.
        step: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// The audit policy or log cannot be used.
    #[error(transparent)]
    Audit(#[from] audit::AuditError),
    /// The encryption configuration cannot be used.
    #[error(transparent)]
    Encryption(#[from] encryption::ConfigError),
    /// The token file cannot be used.
    #[error(transparent)]
    TokenFile(#[from] plinth_auth::TokenFileError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl From<plinth_auth::CredentialsError> for ServeError {
    fn from(e: plinth_auth::CredentialsError) -> Self {
        Self::Credentials {
            step: e.step,
            reason: e.reason,
        }
    }
}
