//! Resource usage, as the kubelet's summary API gives it to metrics-server: each running
//! container's CPU (the rate over the last sampling window, from the processes it started)
//! and memory (their resident set), and the node's, sampled every few seconds from `/proc`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How often usage is sampled (metrics-server's window).
pub(crate) const WINDOW: Duration = Duration::from_secs(5);

/// CPU time and memory of one thing, at one moment.
#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Instant,
    cpu_ns: u64,
    memory: u64,
}

/// The latest sample and the one before it.
type Samples = (Sample, Option<Sample>);

/// The last two samples of every container and of the node.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    containers: Mutex<HashMap<(String, String, String), Samples>>,
    node: Mutex<Option<Samples>>,
    taken: Mutex<Option<String>>,
}

fn ticks_per_second() -> u64 {
    100
}

/// Each process's parent, CPU ticks (user + system) and resident pages.
fn processes() -> HashMap<u32, (u32, u64, u64)> {
    let mut all = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return all;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command is in parentheses and may hold spaces: fields follow its last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let number = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        // After the command: state(0) ppid(1) … utime(11) stime(12) … rss(21).
        let ppid = u32::try_from(number(1)).unwrap_or(0);
        all.insert(pid, (ppid, number(11) + number(12), number(21)));
    }
    all
}

/// CPU nanoseconds and resident bytes of `root`'s descendants (and of `root` itself unless
/// it is the sandbox's init, which is the agent's, not the container's).
fn tree_usage(
    root: u32,
    skip_root: bool,
    all: &HashMap<u32, (u32, u64, u64)>,
    children: &HashMap<u32, Vec<u32>>,
) -> (u64, u64) {
    let page = 4096;
    let mut stack = if skip_root {
        children.get(&root).cloned().unwrap_or_default()
    } else {
        vec![root]
    };
    let (mut ticks, mut pages) = (0, 0);
    while let Some(pid) = stack.pop() {
        if let Some((_, t, p)) = all.get(&pid) {
            ticks += t;
            pages += p;
        }
        if let Some(kids) = children.get(&pid) {
            stack.extend(kids);
        }
    }
    (ticks * (1_000_000_000 / ticks_per_second()), pages * page)
}

fn node_usage() -> (u64, u64) {
    let cpu = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines().next().map(|l| {
                let f: Vec<u64> = l
                    .split_whitespace()
                    .skip(1)
                    .filter_map(|n| n.parse().ok())
                    .collect();
                // user nice system (idle iowait excluded) irq softirq steal
                f.iter()
                    .enumerate()
                    .filter(|(i, _)| *i != 3 && *i != 4)
                    .map(|(_, v)| v)
                    .sum::<u64>()
            })
        })
        .unwrap_or(0);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        meminfo
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let used = field("MemTotal:").saturating_sub(field("MemAvailable:")) * 1024;
    (cpu * (1_000_000_000 / ticks_per_second()), used)
}

fn rate(latest: Sample, previous: Option<Sample>) -> u64 {
    let Some(previous) = previous else { return 0 };
    let elapsed = latest.at.duration_since(previous.at).as_nanos();
    if elapsed == 0 {
        return 0;
    }
    let used = u128::from(latest.cpu_ns.saturating_sub(previous.cpu_ns));
    u64::try_from(used * 1_000_000_000 / elapsed).unwrap_or(u64::MAX)
}

impl Stats {
    /// Takes a sample of the node and of `running` (what [`crate::pods::Registry::processes`]
    /// lists).
    pub(crate) fn sample(&self, running: Vec<((String, String, String), u32, bool)>) {
        let now = Instant::now();
        let all = processes();
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for (pid, (ppid, _, _)) in &all {
            children.entry(*ppid).or_default().push(*pid);
        }
        if let Ok(mut containers) = self.containers.lock() {
            containers.retain(|k, _| running.iter().any(|(r, _, _)| r == k));
            for (key, pid, sandboxed) in running {
                let (cpu_ns, memory) = tree_usage(pid, sandboxed, &all, &children);
                let sample = Sample {
                    at: now,
                    cpu_ns,
                    memory,
                };
                let previous = containers.get(&key).map(|(latest, _)| *latest);
                containers.insert(key, (sample, previous));
            }
        }
        let (cpu_ns, memory) = node_usage();
        if let Ok(mut node) = self.node.lock() {
            let previous = node.map(|(latest, _)| latest);
            *node = Some((
                Sample {
                    at: now,
                    cpu_ns,
                    memory,
                },
                previous,
            ));
        }
        if let Ok(mut taken) = self.taken.lock() {
            *taken = Some(plinth_core::meta::format_time(crate::clock::now()));
        }
    }

    /// The summary: the node's usage and each pod's containers'.
    pub(crate) fn summary(&self, node: &str) -> Value {
        let timestamp = self
            .taken
            .lock()
            .ok()
            .and_then(|t| t.clone())
            .unwrap_or_default();
        let window = format!("{}s", WINDOW.as_secs());
        let usage = |nanocores: u64, bytes: u64| {
            (
                json!({"time": timestamp, "usageNanoCores": nanocores}),
                json!({"time": timestamp, "workingSetBytes": bytes, "usageBytes": bytes}),
            )
        };
        let mut pods: HashMap<(String, String), Vec<ContainerUsage>> = HashMap::new();
        if let Ok(containers) = self.containers.lock() {
            for ((namespace, pod, container), (latest, previous)) in containers.iter() {
                pods.entry((namespace.clone(), pod.clone()))
                    .or_default()
                    .push((container.clone(), rate(*latest, *previous), latest.memory));
            }
        }
        let mut node_entry = json!({"nodeName": node});
        if let Some((latest, previous)) = self.node.lock().ok().and_then(|n| *n) {
            let (cpu, memory) = usage(rate(latest, previous), latest.memory);
            node_entry["cpu"] = cpu;
            node_entry["memory"] = memory;
        }
        let pods: Vec<Value> = pods
            .into_iter()
            .map(|((namespace, name), containers)| {
                let (cpu_total, memory_total) = containers
                    .iter()
                    .fold((0, 0), |(c, m), (_, cpu, memory)| (c + cpu, m + memory));
                let (cpu, memory) = usage(cpu_total, memory_total);
                let containers: Vec<Value> = containers
                    .iter()
                    .map(|(container, cpu, memory)| {
                        let (cpu, memory) = usage(*cpu, *memory);
                        json!({"name": container, "cpu": cpu, "memory": memory})
                    })
                    .collect();
                json!({"podRef": {"name": name, "namespace": namespace},
                    "containers": containers, "cpu": cpu, "memory": memory})
            })
            .collect();
        // The kubelet's Summary API; `window` (how long each rate is averaged over) is the
        // agent's own addition.
        json!({"node": node_entry, "pods": pods, "window": window})
    }
}

/// A container's name, CPU (nanocores) and memory (bytes).
type ContainerUsage = (String, u64, u64);

/// Calls `sample` (on a blocking thread: it reads `/proc`) every window until `stopping`.
pub(crate) async fn run(
    sample: Arc<dyn Fn() + Send + Sync>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(WINDOW);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        let sample = sample.clone();
        let _ = tokio::task::spawn_blocking(move || sample()).await;
    }
}
