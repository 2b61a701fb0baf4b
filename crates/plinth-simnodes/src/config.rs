//! How the simulated nodes behave, and the parsing their flags and annotations share.

use std::time::Duration;

/// How the simulated nodes behave.
#[derive(Clone, Debug)]
pub struct Config {
    /// How many nodes.
    pub count: usize,
    /// Their names' prefix: nodes are `PREFIX-0` … `PREFIX-(count-1)`.
    pub prefix: String,
    /// What each node offers: `cpu`, `memory`, `pods` (and any other resource).
    pub capacity: Vec<(String, String)>,
    /// Taints the nodes register with (`key=value:Effect`).
    pub taints: Vec<String>,
    /// How long a pod takes from bound to running.
    pub start_delay: Duration,
    /// How long a pod whose `restartPolicy` is not `Always` runs before it exits.
    pub run_for: Duration,
    /// The share of runs (0 to 1) that exit with code 1.
    pub failure_rate: f64,
    /// How often the nodes' Leases are renewed.
    pub heartbeat: Duration,
    /// How many writes the simulator keeps in flight at once.
    pub concurrency: usize,
}

impl Config {
    /// `count` nodes named `prefix-N`, with kwok's default capacity (32 CPUs, 256 GiB, 110
    /// pods), pods running at once and jobs' pods finishing after a second, no failures, a
    /// 10 s heartbeat.
    pub fn new(count: usize, prefix: impl Into<String>) -> Self {
        Self {
            count,
            prefix: prefix.into(),
            capacity: vec![
                ("cpu".into(), "32".into()),
                ("memory".into(), "256Gi".into()),
                ("pods".into(), "110".into()),
                ("ephemeral-storage".into(), "100Gi".into()),
            ],
            taints: Vec::new(),
            start_delay: Duration::ZERO,
            run_for: Duration::from_secs(1),
            failure_rate: 0.0,
            heartbeat: Duration::from_secs(10),
            concurrency: 32,
        }
    }

    /// Node `index`'s name.
    pub fn node_name(&self, index: usize) -> String {
        format!("{}-{index}", self.prefix)
    }
}

/// The label every simulated node carries (`true`), so that workloads can be steered to or
/// from them.
pub const LABEL: &str = "node.plinth.dev/simulated";

/// Parses a duration as the simulator's flags and annotations take it: `250ms`, `2s`,
/// `1.5s`, `3m`, `1h`, or a bare number of seconds.
///
/// # Errors
/// Anything else.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: expected e.g. 500ms, 2s, 1m"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration {text:?}: the unit must be ms, s, m or h"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

/// Resolves once `stopping` is true (or its sender is gone); holds no borrow of the value.
pub(crate) async fn stopped(stopping: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stopping.wait_for(|s| *s).await;
}
