//! The audit annotations admission adds to the request being served.

use std::sync::PoisonError;

tokio::task_local! {
    /// The audit annotations admission adds to the request being served (the HTTP layer
    /// scopes one per request and writes them into its audit event).
    pub static AUDIT_ANNOTATIONS: std::sync::Mutex<Vec<(String, String)>>;
}

/// Adds an annotation to the current request's audit event (nothing outside a request).
pub fn annotate(key: String, value: String) {
    let _ = AUDIT_ANNOTATIONS.try_with(|annotations| {
        annotations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((key, value));
    });
}
