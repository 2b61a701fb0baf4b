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
