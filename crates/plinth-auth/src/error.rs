//! Why a credential could not be made or read.

/// A credential (a key, a certificate, a kubeconfig) could not be created, loaded or used.
#[derive(Debug, thiserror::Error)]
#[error("cannot {step}: {reason}")]
pub struct CredentialsError {
    /// The step that failed.
    pub step: &'static str,
    /// What went wrong.
    pub reason: String,
}
