//! `/metrics` in the Prometheus text format, with kube-apiserver's metric names:
//! `apiserver_request_total` and `apiserver_request_duration_seconds` by verb, group, version,
//! resource, subresource, scope and code.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// kube-apiserver's buckets for `apiserver_request_duration_seconds`.
const BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// What a request is, for its labels.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestLabels {
    /// `GET`, `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`, `APPLY`, `DELETE`, `DELETECOLLECTION`.
    pub verb: String,
    /// API group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (plural).
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// `resource`, `namespace` or `cluster`.
    pub scope: String,
}

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

pub use plinth_registry::metrics::{MetricSources, RenderMetrics};

/// The server's request metrics.
#[derive(Default)]
pub struct Metrics {
    totals: Mutex<BTreeMap<(RequestLabels, u16), u64>>,
    durations: Mutex<BTreeMap<RequestLabels, Histogram>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn label_text(labels: &RequestLabels) -> String {
    format!(
        "component=\"apiserver\",group=\"{}\",resource=\"{}\",scope=\"{}\",subresource=\"{}\",verb=\"{}\",version=\"{}\"",
        escape(&labels.group),
        escape(&labels.resource),
        escape(&labels.scope),
        escape(&labels.subresource),
        escape(&labels.verb),
        escape(&labels.version)
    )
}

impl Metrics {
    /// Records one finished request (watches count but are not timed).
    pub fn record(&self, labels: RequestLabels, code: u16, elapsed: Duration) {
        *self
            .totals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((labels.clone(), code))
            .or_default() += 1;
        if labels.verb == "WATCH" {
            return;
        }
        let seconds = elapsed.as_secs_f64();
        let mut durations = self
            .durations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let histogram = durations.entry(labels).or_default();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                histogram.counts[i] += 1;
            }
        }
        histogram.sum += seconds;
        histogram.count += 1;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.\n");
        out.push_str("# TYPE apiserver_request_total counter\n");
        for ((labels, code), n) in self
            .totals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = writeln!(
                out,
                "apiserver_request_total{{code=\"{code}\",{}}} {n}",
                label_text(labels)
            );
        }
        out.push_str("# HELP apiserver_request_duration_seconds Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.\n");
        out.push_str("# TYPE apiserver_request_duration_seconds histogram\n");
        for (labels, h) in self
            .durations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let text = label_text(labels);
            for (bound, n) in BUCKETS.iter().zip(h.counts) {
                let _ = writeln!(
                    out,
                    "apiserver_request_duration_seconds_bucket{{{text},le=\"{bound}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "apiserver_request_duration_seconds_bucket{{{text},le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "apiserver_request_duration_seconds_sum{{{text}}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "apiserver_request_duration_seconds_count{{{text}}} {}",
                h.count
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let metrics = Metrics::default();
        let labels = RequestLabels {
            verb: "LIST".into(),
            version: "v1".into(),
            resource: "configmaps".into(),
            scope: "namespace".into(),
            ..Default::default()
        };
        metrics.record(labels.clone(), 200, Duration::from_millis(30));
        metrics.record(labels, 200, Duration::from_millis(3));
        let text = metrics.render();
        assert!(text.contains("apiserver_request_total{code=\"200\",component=\"apiserver\",group=\"\",resource=\"configmaps\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 2"), "{text}");
        assert!(text.contains("le=\"0.005\"} 1"), "{text}");
        assert!(text.contains("le=\"0.05\"} 2"), "{text}");
        assert!(text.contains("apiserver_request_duration_seconds_count{component=\"apiserver\",group=\"\",resource=\"configmaps\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 2"));
    }
}
