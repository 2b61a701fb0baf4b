//! `plinth node` and the agent `plinth serve` runs: a [`plinth_node`] agent from the command
//! line's settings, with a kube client from a kubeconfig, and `plinth sandbox` (the agent's
//! container sandbox, run by the agent itself).

use std::path::{Path, PathBuf};

/// The node agent's settings, shared by `plinth serve` and `plinth node`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct NodeArgs {
    /// The Node's name (default: this machine's host name).
    #[arg(long = "node-name", visible_alias = "name")]
    pub(crate) name: Option<String>,
    /// The image map: YAML, image patterns to local executables (`redis:*:
    /// /usr/bin/redis-server`), before the built-in ones.
    #[arg(long)]
    pub(crate) images: Option<PathBuf>,
    /// Run containers as plain processes, without their own mount and PID namespaces.
    #[arg(long, default_value_t = false)]
    pub(crate) no_sandbox: bool,
    /// How often the Node's status and Lease are renewed.
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    pub(crate) node_status_update_frequency: std::time::Duration,
    /// Simulated nodes.
    #[command(flatten)]
    pub(crate) simulated: SimArgs,
}

/// Simulated nodes' settings (see [`plinth_simnodes`]).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct SimArgs {
    /// Runs N simulated nodes: their pods move through their phases without processes (as
    /// kwok's do), each at a loopback address; with `plinth node`, instead of a real agent.
    #[arg(long = "simulate-nodes", visible_alias = "simulate", value_name = "N")]
    pub(crate) count: Option<usize>,
    /// Their names' prefix (nodes PREFIX-0 … PREFIX-(N-1)).
    #[arg(long = "simulate-prefix", default_value = "sim", value_name = "PREFIX")]
    prefix: String,
    /// How long a simulated pod takes from bound to running (`500ms`, `2s`; per pod:
    /// annotation `sim.plinth.dev/start-delay`).
    #[arg(long = "simulate-start-delay", default_value = "0s", value_parser = plinth_simnodes::parse_duration)]
    start_delay: std::time::Duration,
    /// How long a simulated pod whose restartPolicy is not Always runs before it exits (per
    /// pod: `sim.plinth.dev/run-for`, which also makes an Always pod's containers exit and
    /// restart).
    #[arg(long = "simulate-run-for", default_value = "1s", value_parser = plinth_simnodes::parse_duration)]
    run_for: std::time::Duration,
    /// The share of simulated runs (0 to 1) that exit with code 1 (per pod:
    /// `sim.plinth.dev/exit-code`).
    #[arg(long = "simulate-failure-rate", default_value_t = 0.0, value_parser = rate)]
    failure_rate: f64,
    /// What each simulated node offers, over the defaults cpu=32,memory=256Gi,pods=110.
    #[arg(long = "simulate-capacity", value_name = "RESOURCE=QUANTITY,...")]
    capacity: Option<String>,
    /// Taints simulated nodes register with (`key=value:Effect`, comma-separated), e.g. to
    /// keep workloads that do not tolerate them off.
    #[arg(long = "simulate-taints", value_delimiter = ',', value_name = "TAINT")]
    taints: Vec<String>,
}

fn rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("{text:?}: a share from 0 to 1 is needed")),
    }
}

/// The simulated nodes `args` ask for, if any; `heartbeat` their Leases' renewal.
pub(crate) fn simulated(
    args: &SimArgs,
    heartbeat: std::time::Duration,
) -> Result<Option<plinth_simnodes::Config>, String> {
    let Some(count) = args.count else {
        return Ok(None);
    };
    let mut config = plinth_simnodes::Config::new(count, args.prefix.clone());
    if let Some(text) = &args.capacity {
        plinth_simnodes::parse_capacity(&mut config.capacity, text)
            .map_err(|e| format!("--simulate-capacity: {e}"))?;
    }
    plinth_simnodes::check_taints(&args.taints).map_err(|e| format!("--simulate-taints: {e}"))?;
    config.taints.clone_from(&args.taints);
    config.start_delay = args.start_delay;
    config.run_for = args.run_for;
    config.failure_rate = args.failure_rate;
    config.heartbeat = heartbeat;
    Ok(Some(config))
}

/// Runs simulated nodes with `config` against the server of `kubeconfig` until `stopping`.
pub(crate) async fn run_simulated(
    config: plinth_simnodes::Config,
    kubeconfig: &Path,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let client =
        kube::Client::try_from(client_config(kubeconfig).await?).map_err(|e| e.to_string())?;
    plinth_simnodes::run(config, client, stopping).await
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_lowercase())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "plinth-node".into())
}

/// The agent's configuration from `args`, its files under `data_dir`.
pub(crate) fn config(args: &NodeArgs, data_dir: &Path) -> Result<plinth_node::Config, String> {
    let name = args.name.clone().unwrap_or_else(host_name);
    let mut config = plinth_node::Config::new(name, data_dir);
    if let Some(path) = &args.images {
        config.images = plinth_node::ImageMap::load(path).map_err(|e| e.to_string())?;
    }
    config.heartbeat = args.node_status_update_frequency;
    if !args.no_sandbox {
        let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
        if plinth_node::sandbox::available(&exe) {
            config.sandbox = Some(exe);
        } else {
            tracing::warn!(
                "containers cannot have their own namespaces here: they run as plain processes"
            );
        }
    }
    Ok(config)
}

/// The client configuration of `kubeconfig`.
async fn client_config(kubeconfig: &Path) -> Result<kube::Config, String> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)
        .map_err(|e| format!("kubeconfig {}: {e}", kubeconfig.display()))?;
    kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| format!("kubeconfig {}: {e}", kubeconfig.display()))
}

/// Runs an agent with `config` against the server of `kubeconfig` until `stopping`; its
/// NetworkPolicy rules follow the cluster as `policy_kubeconfig`'s identity when given.
pub(crate) async fn run(
    mut config: plinth_node::Config,
    kubeconfig: &Path,
    policy_kubeconfig: Option<&Path>,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let main = client_config(kubeconfig).await?;
    let roots = main.root_cert.clone().unwrap_or_default();
    let client = kube::Client::try_from(main).map_err(|e| e.to_string())?;
    if let Some(path) = policy_kubeconfig {
        let policy =
            kube::Client::try_from(client_config(path).await?).map_err(|e| e.to_string())?;
        config.policy_client = Some(plinth_node::PolicyClient(policy));
    }
    plinth_node::run(config, client, roots, stopping)
        .await
        .map_err(|e| e.to_string())
}
