//! Simulated nodes: Nodes whose pods move through their phases without processes (what kwok
//! does for kube) — registered, heartbeating and tainted like real agents' nodes, so that
//! controllers can be tried against thousands of pods on one machine.
//!
//! A simulated node's pods are given a loopback address of the node's own `/24` in
//! `127.128.0.0/9` (outside the ranges `plinth serve` uses), so that nothing sent to one can
//! leave the machine. A pod bound to a simulated node starts after the start delay (every
//! container `running`, `Ready` unless told otherwise or its readiness gates are not met);
//! a pod whose `restartPolicy` is not `Always` finishes after its run time, with exit code 0,
//! or 1 for the configured share of runs (`OnFailure` restarts it, `Never` fails the pod); a
//! pod being deleted is removed at once (as a kubelet does once its containers stopped).
//! Annotations on a pod override the settings for it:
//! `sim.plinth.dev/start-delay` and `sim.plinth.dev/run-for` (durations: `500ms`, `2s`, `1m`),
//! `sim.plinth.dev/exit-code` (a number), `sim.plinth.dev/ready` (`false`: never ready).

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod config;
mod nodes;
mod pods;

pub use config::{Config, LABEL, parse_duration};

/// Parses `cpu=32,memory=256Gi,pods=110` (resources not named keep their defaults).
///
/// # Errors
/// A part without `=` or a value that is not a quantity.
pub fn parse_capacity(base: &mut Vec<(String, String)>, text: &str) -> Result<(), String> {
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (name, value) = part
            .split_once('=')
            .ok_or_else(|| format!("capacity {part:?}: expected RESOURCE=QUANTITY"))?;
        if plinth_core::quantity::parse(value).is_none() {
            return Err(format!("capacity {part:?}: {value:?} is not a quantity"));
        }
        match base.iter_mut().find(|(n, _)| n == name) {
            Some(entry) => entry.1 = value.to_owned(),
            None => base.push((name.to_owned(), value.to_owned())),
        }
    }
    Ok(())
}

/// Checks taints as the nodes take them (`key=value:Effect`, `key:Effect`).
///
/// # Errors
/// The first that is not one.
pub fn check_taints(taints: &[String]) -> Result<(), String> {
    taints.iter().try_for_each(|t| nodes::taint(t).map(drop))
}

/// Runs the nodes until `stopping` becomes true: registers them, renews their Leases and
/// moves their pods. Their Nodes stay (as a stopped kubelet's do); the node lifecycle
/// controller marks them unreachable.
///
/// # Errors
/// A node that cannot be registered.
pub async fn run(
    config: Config,
    client: kube::Client,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let config = std::sync::Arc::new(config);
    nodes::register_all(&config, &client).await?;
    let beating = tokio::spawn(nodes::heartbeat(
        config.clone(),
        client.clone(),
        stopping.clone(),
    ));
    pods::run(config, client, stopping).await;
    let _ = beating.await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_parse_as_flags_write_them() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("3m"), Ok(Duration::from_secs(180)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn capacity_overrides_and_extends() {
        let mut capacity = Config::new(1, "sim").capacity;
        parse_capacity(&mut capacity, "cpu=4,nvidia.com/gpu=2").unwrap();
        assert!(capacity.contains(&("cpu".into(), "4".into())));
        assert!(capacity.contains(&("nvidia.com/gpu".into(), "2".into())));
        assert!(capacity.contains(&("pods".into(), "110".into())));
        assert!(parse_capacity(&mut capacity, "cpu").is_err());
        assert!(parse_capacity(&mut capacity, "cpu=lots").is_err());
    }
}
