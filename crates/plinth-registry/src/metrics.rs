//! Metrics of others in the server's process (the built-in controllers' informers), gathered
//! by name for the server's `/metrics`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Renders metrics of the Prometheus text format.
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// Metrics of others in the server's process (the built-in controllers' informers), by name;
/// `/metrics` shows them after the server's own.
#[derive(Default)]
pub struct MetricSources {
    sources: Mutex<BTreeMap<String, RenderMetrics>>,
}

impl std::fmt::Debug for MetricSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricSources").finish_non_exhaustive()
    }
}

impl MetricSources {
    /// Shows what `render` gives under `name`, in place of an earlier source of that name.
    pub fn set(&self, name: &str, render: RenderMetrics) {
        self.sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), render);
    }

    /// Stops showing `name`.
    pub fn remove(&self, name: &str) {
        self.sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }

    /// Every source's metrics.
    pub fn render(&self) -> String {
        let sources: Vec<RenderMetrics> = self
            .sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        sources.iter().map(|render| render()).collect()
    }
}
