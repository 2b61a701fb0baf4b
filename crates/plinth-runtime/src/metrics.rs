//! Prometheus metrics with controller-runtime's names, and the small HTTP server a manager
//! exposes them on (`/metrics`), with its health probes (`/healthz`, `/readyz`).
//!
//! ```
//! let metrics = plinth_runtime::Metrics::default();
//! let backups = metrics.counter("backups_total", "Backups taken");
//! backups.inc();
//! assert!(metrics.render().contains("# TYPE backups_total counter\nbackups_total 1"));
//! ```

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::informer::ObjectKey;
use crate::workqueue::{QUEUE_BUCKETS, WorkQueue};

/// controller-runtime's buckets for `controller_runtime_reconcile_time_seconds`.
const BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// A Prometheus histogram over `N` fixed bounds.
struct Histogram<const N: usize> {
    bounds: [f64; N],
    counts: [u64; N],
    sum: f64,
    count: u64,
}

impl<const N: usize> Histogram<N> {
    fn new(bounds: [f64; N]) -> Self {
        Self {
            bounds,
            counts: [0; N],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, seconds: f64) {
        for (count, bound) in self.counts.iter_mut().zip(self.bounds) {
            if seconds <= bound {
                *count += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }

    /// Writes the histogram's series (`_bucket`, `_sum`, `_count`) with `labels`.
    fn render(&self, out: &mut String, metric: &str, labels: &str) {
        write_histogram(
            out,
            metric,
            labels,
            &self.bounds,
            &self.counts,
            self.sum,
            self.count,
        );
    }
}

/// Writes a histogram's series from its cumulative bucket counts.
fn write_histogram(
    out: &mut String,
    metric: &str,
    labels: &str,
    bounds: &[f64],
    counts: &[u64],
    sum: f64,
    count: u64,
) {
    for (bound, n) in bounds.iter().zip(counts) {
        let _ = writeln!(out, "{metric}_bucket{{{labels},le=\"{bound}\"}} {n}");
    }
    let _ = writeln!(out, "{metric}_bucket{{{labels},le=\"+Inf\"}} {count}");
    let _ = writeln!(out, "{metric}_sum{{{labels}}} {sum}");
    let _ = writeln!(out, "{metric}_count{{{labels}}} {count}");
}

#[derive(Default)]
struct State {
    /// (controller, result) → count.
    reconciles: BTreeMap<(String, &'static str), u64>,
    errors: BTreeMap<String, u64>,
    panics: BTreeMap<String, u64>,
    reconcile_time: BTreeMap<String, Histogram<{ BUCKETS.len() }>>,
    work_time: BTreeMap<String, Histogram<{ QUEUE_BUCKETS.len() }>>,
    queues: BTreeMap<String, WorkQueue<ObjectKey>>,
    leader: Option<(String, bool)>,
    /// The operator's own metrics, rendered after controller-runtime's.
    user: BTreeMap<String, UserMetric>,
}

/// A metric an operator registers: its help, type and a value per label set (`""` for the
/// series without labels).
struct UserMetric {
    help: String,
    kind: &'static str,
    series: BTreeMap<String, Arc<std::sync::atomic::AtomicI64>>,
}

/// `{a="x",b="y"}` (values escaped as the exposition format asks), or nothing.
fn label_text(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let pairs: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    format!("{{{}}}", pairs.join(","))
}

/// A counter registered with [`Metrics::counter`]; clones share it.
///
/// # Example
///
/// ```
/// let metrics = plinth_runtime::Metrics::default();
/// let taken = metrics.counter("backups_total", "Backups taken");
/// taken.clone().inc();
/// assert_eq!(taken.get(), 1);
/// ```
#[derive(Clone, Debug)]
pub struct Counter(Arc<std::sync::atomic::AtomicI64>);

impl Counter {
    /// Adds one.
    ///
    /// # Example
    ///
    /// ```
    /// let metrics = plinth_runtime::Metrics::default();
    /// let failures = metrics.counter("failovers_total", "Failovers performed");
    /// failures.inc();
    /// failures.inc();
    /// assert!(metrics.render().contains("failovers_total 2"));
    /// ```
    pub fn inc(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The count.
    ///
    /// # Example
    ///
    /// ```
    /// let metrics = plinth_runtime::Metrics::default();
    /// let taken = metrics.counter("backups_total", "Backups taken");
    /// assert_eq!(taken.get(), 0);
    /// taken.inc();
    /// assert_eq!(taken.get(), 1);
    /// ```
    pub fn get(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A gauge registered with [`Metrics::gauge`]; clones share it.
///
/// # Example
///
/// ```
/// let metrics = plinth_runtime::Metrics::default();
/// let nodes = metrics.gauge("cluster_nodes", "Nodes of the managed cluster");
/// nodes.set(6);
/// assert!(metrics.render().contains("# TYPE cluster_nodes gauge\ncluster_nodes 6"));
/// ```
#[derive(Clone, Debug)]
pub struct Gauge(Arc<std::sync::atomic::AtomicI64>);

impl Gauge {
    /// Sets the value.
    ///
    /// # Example
    ///
    /// ```
    /// let metrics = plinth_runtime::Metrics::default();
    /// let lag = metrics.gauge("replication_lag_bytes", "Bytes a replica is behind");
    /// lag.set(4096);
    /// lag.set(0);
    /// assert_eq!(lag.get(), 0);
    /// ```
    pub fn set(&self, value: i64) {
        self.0.store(value, std::sync::atomic::Ordering::Relaxed);
    }

    /// The value.
    ///
    /// # Example
    ///
    /// ```
    /// let metrics = plinth_runtime::Metrics::default();
    /// let nodes = metrics.gauge("cluster_nodes", "Nodes");
    /// nodes.set(-1);
    /// assert_eq!(nodes.get(), -1);
    /// ```
    pub fn get(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A manager's metrics; clones share them.
///
/// # Example
///
/// ```
/// use plinth_runtime::metrics::Outcome;
/// let metrics = plinth_runtime::Metrics::default();
/// metrics.reconciled("tenant", Outcome::Success, std::time::Duration::from_millis(3));
/// let text = metrics.render();
/// assert!(text.contains(r#"controller_runtime_reconcile_total{controller="tenant",result="success"} 1"#));
/// assert!(text.contains("controller_runtime_reconcile_time_seconds_count{controller=\"tenant\"} 1"));
/// ```
#[derive(Clone, Default)]
pub struct Metrics {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// A controller name used twice on one manager's metrics.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() {
/// use plinth_runtime::{Metrics, WorkQueue};
/// let metrics = Metrics::default();
/// metrics.register_queue("tenant", WorkQueue::new()).unwrap();
/// let twice = metrics.register_queue("tenant", WorkQueue::new()).unwrap_err();
/// assert_eq!(twice.0, "tenant");
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("controller with name {0} already exists; controller names must be unique")]
pub struct DuplicateController(pub String);

/// How a reconcile ended, as controller-runtime labels it.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() {
/// use plinth_runtime::metrics::Outcome;
/// let metrics = plinth_runtime::Metrics::default();
/// // (Error and panic counts are shown, from 0, for the controllers whose queue it reports.)
/// metrics.register_queue("tenant", plinth_runtime::WorkQueue::new()).unwrap();
/// let second = std::time::Duration::from_secs(1);
/// metrics.reconciled("tenant", Outcome::RequeueAfter, second);
/// metrics.reconciled("tenant", Outcome::Error, second);
/// let text = metrics.render();
/// assert!(text.contains(r#"controller_runtime_reconcile_total{controller="tenant",result="requeue_after"} 1"#));
/// assert!(text.contains(r#"controller_runtime_reconcile_errors_total{controller="tenant"} 1"#));
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `success`.
    Success,
    /// `requeue_after`.
    RequeueAfter,
    /// `error`.
    Error,
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reports `queue` as controller `name`'s work queue.
    ///
    /// # Errors
    /// [`DuplicateController`] if a controller of that name is registered already (its
    /// metrics would be overwritten).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() {
    /// use plinth_runtime::{Metrics, WorkQueue};
    /// use plinth_runtime::informer::ObjectKey;
    /// let metrics = Metrics::default();
    /// let queue: WorkQueue<ObjectKey> = WorkQueue::new();
    /// metrics.register_queue("tenant", queue.clone()).unwrap();
    /// queue.add(ObjectKey { namespace: Some("default".into()), name: "a".into() });
    /// assert!(metrics.render().contains(r#"workqueue_depth{controller="tenant",name="tenant"} 1"#));
    /// # }
    /// ```
    pub fn register_queue(
        &self,
        name: &str,
        queue: WorkQueue<ObjectKey>,
    ) -> Result<(), DuplicateController> {
        let mut state = self.lock();
        if state.queues.contains_key(name) {
            return Err(DuplicateController(name.to_owned()));
        }
        state.queues.insert(name.to_owned(), queue);
        Ok(())
    }

    /// Records one reconcile of controller `name`.
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::metrics::Outcome;
    /// let metrics = plinth_runtime::Metrics::default();
    /// metrics.reconciled("tenant", Outcome::Success, std::time::Duration::from_millis(7));
    /// // 7 ms falls in the 0.01 s bucket.
    /// assert!(metrics.render().contains(
    ///     r#"controller_runtime_reconcile_time_seconds_bucket{controller="tenant",le="0.01"} 1"#
    /// ));
    /// ```
    pub fn reconciled(&self, name: &str, outcome: Outcome, took: Duration) {
        let mut state = self.lock();
        let result = match outcome {
            Outcome::Success => "success",
            Outcome::RequeueAfter => "requeue_after",
            Outcome::Error => "error",
        };
        *state
            .reconciles
            .entry((name.to_owned(), result))
            .or_default() += 1;
        if outcome == Outcome::Error {
            *state.errors.entry(name.to_owned()).or_default() += 1;
        }
        let seconds = took.as_secs_f64();
        state
            .reconcile_time
            .entry(name.to_owned())
            .or_insert_with(|| Histogram::new(BUCKETS))
            .observe(seconds);
        state
            .work_time
            .entry(name.to_owned())
            .or_insert_with(|| Histogram::new(QUEUE_BUCKETS))
            .observe(seconds);
    }

    /// Records a reconcile that panicked (`controller_runtime_reconcile_panics_total`; it also
    /// counts as an error).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() {
    /// let metrics = plinth_runtime::Metrics::default();
    /// metrics.register_queue("tenant", plinth_runtime::WorkQueue::new()).unwrap();
    /// metrics.panicked("tenant");
    /// assert!(metrics.render().contains(r#"controller_runtime_reconcile_panics_total{controller="tenant"} 1"#));
    /// # }
    /// ```
    pub fn panicked(&self, name: &str) {
        *self.lock().panics.entry(name.to_owned()).or_default() += 1;
    }

    /// Records whether this process leads (`leader_election_master_status`).
    ///
    /// # Example
    ///
    /// ```
    /// let metrics = plinth_runtime::Metrics::default();
    /// metrics.set_leader("tenant-operator", true);
    /// assert!(metrics.render().contains(r#"leader_election_master_status{name="tenant-operator"} 1"#));
    /// ```
    pub fn set_leader(&self, lease: &str, leading: bool) {
        self.lock().leader = Some((lease.to_owned(), leading));
    }

    /// Registers (or finds again) the operator's counter `name`, served on `/metrics` with the
    /// controller metrics.
    ///
    /// # Example
    ///
    /// ```
    /// let metrics = plinth_runtime::Metrics::default();
    /// // Found again by name: both handles count the same series.
    /// metrics.counter("backups_total", "Backups taken").inc();
    /// metrics.counter("backups_total", "Backups taken").inc();
    /// assert!(metrics.render().contains("# HELP backups_total Backups taken\n"));
    /// assert_eq!(metrics.counter("backups_total", "Backups taken").get(), 2);
    /// ```
    pub fn counter(&self, name: &str, help: &str) -> Counter {
        Counter(self.user(name, help, "counter", &[]))
    }

    /// Registers (or finds again) the operator's gauge `name`.
    ///
    /// # Example
    ///
    /// ```
    /// let metrics = plinth_runtime::Metrics::default();
    /// metrics.gauge("tenants", "Tenants managed").set(12);
    /// assert!(metrics.render().contains("tenants 12"));
    /// ```
    pub fn gauge(&self, name: &str, help: &str) -> Gauge {
        Gauge(self.user(name, help, "gauge", &[]))
    }

    /// The series of counter `name` with `labels` (`[("cluster", "shop/cache")]`).
    ///
    /// # Example
    ///
    /// ```
    /// let metrics = plinth_runtime::Metrics::default();
    /// metrics.counter_with("failovers_total", "Failovers", &[("cluster", "shop/cache")]).inc();
    /// assert!(metrics.render().contains(r#"failovers_total{cluster="shop/cache"} 1"#));
    /// ```
    pub fn counter_with(&self, name: &str, help: &str, labels: &[(&str, &str)]) -> Counter {
        Counter(self.user(name, help, "counter", labels))
    }

    /// The series of gauge `name` with `labels`.
    ///
    /// # Example
    ///
    /// ```
    /// let metrics = plinth_runtime::Metrics::default();
    /// metrics.gauge_with("cluster_nodes", "Nodes", &[("cluster", "shop/cache")]).set(6);
    /// metrics.gauge_with("cluster_nodes", "Nodes", &[("cluster", "shop/sessions")]).set(3);
    /// let text = metrics.render();
    /// assert!(text.contains(r#"cluster_nodes{cluster="shop/cache"} 6"#));
    /// assert!(text.contains(r#"cluster_nodes{cluster="shop/sessions"} 3"#));
    /// ```
    pub fn gauge_with(&self, name: &str, help: &str, labels: &[(&str, &str)]) -> Gauge {
        Gauge(self.user(name, help, "gauge", labels))
    }

    /// Drops the series of metric `name` with `labels` (a deleted object's gauge).
    ///
    /// # Example
    ///
    /// ```
    /// let metrics = plinth_runtime::Metrics::default();
    /// metrics.gauge_with("cluster_nodes", "Nodes", &[("cluster", "shop/cache")]).set(6);
    /// // The RedisCluster was deleted: its series goes.
    /// metrics.forget("cluster_nodes", &[("cluster", "shop/cache")]);
    /// assert!(!metrics.render().contains("shop/cache"));
    /// ```
    pub fn forget(&self, name: &str, labels: &[(&str, &str)]) {
        if let Some(metric) = self.lock().user.get_mut(name) {
            metric.series.remove(&label_text(labels));
        }
    }

    fn user(
        &self,
        name: &str,
        help: &str,
        kind: &'static str,
        labels: &[(&str, &str)],
    ) -> Arc<std::sync::atomic::AtomicI64> {
        self.lock()
            .user
            .entry(name.to_owned())
            .or_insert_with(|| UserMetric {
                help: help.to_owned(),
                kind,
                series: BTreeMap::new(),
            })
            .series
            .entry(label_text(labels))
            .or_default()
            .clone()
    }

    /// The Prometheus text exposition.
    ///
    /// # Example
    ///
    /// ```
    /// let text = plinth_runtime::Metrics::default().render();
    /// // controller-runtime's families are always there, empty or not.
    /// assert!(text.contains("# TYPE controller_runtime_reconcile_total counter"));
    /// ```
    pub fn render(&self) -> String {
        let state = self.lock();
        let mut out = String::new();
        out.push_str("# HELP controller_runtime_reconcile_total Total number of reconciliations per controller\n# TYPE controller_runtime_reconcile_total counter\n");
        for ((controller, result), n) in &state.reconciles {
            let _ = writeln!(
                out,
                "controller_runtime_reconcile_total{{controller=\"{controller}\",result=\"{result}\"}} {n}"
            );
        }
        out.push_str("# HELP controller_runtime_reconcile_errors_total Total number of reconciliation errors per controller\n# TYPE controller_runtime_reconcile_errors_total counter\n");
        for controller in state.queues.keys() {
            let n = state.errors.get(controller).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "controller_runtime_reconcile_errors_total{{controller=\"{controller}\"}} {n}"
            );
        }
        out.push_str("# HELP controller_runtime_reconcile_panics_total Total number of reconciliation panics per controller\n# TYPE controller_runtime_reconcile_panics_total counter\n");
        for controller in state.queues.keys() {
            let n = state.panics.get(controller).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "controller_runtime_reconcile_panics_total{{controller=\"{controller}\"}} {n}"
            );
        }
        out.push_str("# HELP controller_runtime_reconcile_time_seconds Length of time per reconciliation per controller\n# TYPE controller_runtime_reconcile_time_seconds histogram\n");
        for (controller, h) in &state.reconcile_time {
            h.render(
                &mut out,
                "controller_runtime_reconcile_time_seconds",
                &format!("controller=\"{controller}\""),
            );
        }
        let queues: Vec<(String, crate::workqueue::Metrics)> = state
            .queues
            .iter()
            .map(|(name, queue)| (name.clone(), queue.metrics()))
            .collect();
        for (metric, kind, help) in [
            ("workqueue_depth", "gauge", "Current depth of workqueue"),
            (
                "workqueue_adds_total",
                "counter",
                "Total number of adds handled by workqueue",
            ),
            (
                "workqueue_retries_total",
                "counter",
                "Total number of retries handled by workqueue",
            ),
        ] {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} {kind}");
            for (name, m) in &queues {
                let value = match metric {
                    "workqueue_depth" => m.depth as u64,
                    "workqueue_adds_total" => m.adds,
                    _ => m.retries,
                };
                let _ = writeln!(
                    out,
                    "{metric}{{controller=\"{name}\",name=\"{name}\"}} {value}"
                );
            }
        }
        out.push_str("# HELP workqueue_queue_duration_seconds How long in seconds an item stays in workqueue before being requested\n# TYPE workqueue_queue_duration_seconds histogram\n");
        for (name, m) in &queues {
            write_histogram(
                &mut out,
                "workqueue_queue_duration_seconds",
                &format!("controller=\"{name}\",name=\"{name}\""),
                &QUEUE_BUCKETS,
                &m.queue_buckets,
                m.queue_seconds.0,
                m.queue_seconds.1,
            );
        }
        out.push_str("# HELP workqueue_work_duration_seconds How long in seconds processing an item from workqueue takes\n# TYPE workqueue_work_duration_seconds histogram\n");
        for (name, h) in &state.work_time {
            h.render(
                &mut out,
                "workqueue_work_duration_seconds",
                &format!("controller=\"{name}\",name=\"{name}\""),
            );
        }
        if let Some((lease, leading)) = &state.leader {
            out.push_str("# HELP leader_election_master_status Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master.\n# TYPE leader_election_master_status gauge\n");
            let _ = writeln!(
                out,
                "leader_election_master_status{{name=\"{lease}\"}} {}",
                u8::from(*leading)
            );
        }
        for (name, metric) in &state.user {
            let _ = writeln!(
                out,
                "# HELP {name} {}\n# TYPE {name} {}",
                metric.help, metric.kind
            );
            for (labels, value) in &metric.series {
                let value = value.load(std::sync::atomic::Ordering::Relaxed);
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        }
        out
    }
}

/// Serves `/metrics` (from `metrics`), `/healthz` and `/readyz` (from `checks`) on `listener`
/// until the task is dropped. `ready` says whether the manager's caches have synced.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> std::io::Result<()> {
/// use plinth_runtime::{health::Checks, metrics, Metrics};
/// let listener = metrics::bind("127.0.0.1:0".parse().unwrap()).await?;
/// let port = listener.local_addr()?.port();
/// let (_synced, ready) = tokio::sync::watch::channel(false);
/// let server = tokio::spawn(metrics::serve(listener, Metrics::default(), Checks::default(), ready));
/// let answer = plinth_testenv::scrape(port, "/readyz").await;
/// // Not ready before the caches have synced.
/// assert!(answer.starts_with("HTTP/1.1 500"));
/// assert!(plinth_testenv::scrape(port, "/healthz").await.ends_with("\r\n\r\nok"));
/// server.abort();
/// # Ok(()) }
/// ```
pub async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    checks: crate::health::Checks,
    ready: tokio::sync::watch::Receiver<bool>,
) {
    use crate::health::Probe;
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let (metrics, checks, ready) = (metrics.clone(), checks.clone(), ready.clone());
        tokio::spawn(async move {
            let mut request = Vec::new();
            let mut buffer = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
            let line = String::from_utf8_lossy(&request);
            let target = line.split_whitespace().nth(1).unwrap_or("/");
            let path = target.split('?').next().unwrap_or(target);
            let probe = |probe: Probe| {
                let (code, body) = checks.answer(probe, *ready.borrow());
                let status = if code == 200 {
                    "200 OK"
                } else {
                    "500 Internal Server Error"
                };
                (status, body, "text/plain; charset=utf-8")
            };
            let (status, body, kind) = match path {
                "/metrics" => ("200 OK", metrics.render(), "text/plain; version=0.0.4"),
                "/healthz" | "/livez" => probe(Probe::Health),
                "/readyz" => probe(Probe::Ready),
                _ => ("404 Not Found", "not found".to_owned(), "text/plain"),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

/// Binds `addr` for [`serve`].
///
/// # Errors
/// If the address cannot be bound.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> std::io::Result<()> {
/// let listener = plinth_runtime::metrics::bind("127.0.0.1:0".parse().unwrap()).await?;
/// assert!(listener.local_addr()?.port() > 0);
/// # Ok(()) }
/// ```
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labelled_series_share_one_family_and_can_be_forgotten() {
        let metrics = Metrics::default();
        let help = "Servers ready, per cluster";
        metrics
            .gauge_with("ready", help, &[("cluster", "a/one")])
            .set(3);
        metrics
            .gauge_with("ready", help, &[("cluster", "b/\"two\"")])
            .set(1);
        metrics.counter("plain", "No labels").inc();
        let text = metrics.render();
        assert_eq!(text.matches("# TYPE ready gauge").count(), 1, "{text}");
        assert!(text.contains("ready{cluster=\"a/one\"} 3\n"), "{text}");
        assert!(
            text.contains("ready{cluster=\"b/\\\"two\\\"\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("plain 1\n"), "{text}");
        metrics.forget("ready", &[("cluster", "a/one")]);
        let text = metrics.render();
        assert!(!text.contains("a/one"), "{text}");
        assert!(text.contains("b/"), "{text}");
    }
}
