//! The cluster's pod and Service ranges, chosen once per data directory and kept in
//! `network.json` there: given on the command line, else what the directory says, else —
//! where this machine lets the agent make network namespaces (root with `ip` and `nft`) —
//! the first of kube's usual ranges overlapping nothing the machine routes to or resolves
//! through (each pod then gets a namespace of its own), else loopback ranges (pods share the
//! machine's network).

use std::path::Path;

use plinth_net::Cidr;
use serde_json::{Value, json};

/// How pods are to be networked (`--pod-network`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PodNetwork {
    /// Namespaces where the machine allows, else shared.
    Auto,
    /// Pods share the machine's network (loopback ranges).
    Shared,
    /// Each pod in a namespace of its own (fails where that cannot be done).
    Namespaces,
}

/// The loopback ranges of the shared mode.
const SHARED: (Cidr, Cidr) = (Cidr::v4([127, 64, 0, 0], 10), Cidr::v4([127, 32, 0, 0], 16));

const FILE: &str = "network.json";

/// The ranges: pods', Services'.
pub(crate) type Ranges = (Cidr, Cidr);

fn parse(flag: &str, text: &str) -> Result<Cidr, String> {
    Cidr::parse(text).ok_or_else(|| format!("--{flag} {text:?}: not an IPv4 range (A.B.C.D/N)"))
}

/// The ranges recorded in `data_dir`, if any.
pub(crate) fn recorded(data_dir: &Path) -> Option<Ranges> {
    let text = std::fs::read_to_string(data_dir.join(FILE)).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    let pods = Cidr::parse(value["clusterCIDR"].as_str()?)?;
    let services = Cidr::parse(value["serviceClusterIPRange"].as_str()?)?;
    Some((pods, services))
}

/// Decides the ranges (see the module's text) and records them in `data_dir`.
pub(crate) async fn resolve(
    data_dir: &Path,
    pods: Option<&str>,
    services: Option<&str>,
    mode: PodNetwork,
) -> Result<Ranges, String> {
    let pods = pods.map(|p| parse("cluster-cidr", p)).transpose()?;
    let services = services
        .map(|s| parse("service-cluster-ip-range", s))
        .transpose()?;
    let chosen = match (pods, services) {
        (Some(pods), Some(services)) => (pods, services),
        _ => {
            let base = match (recorded(data_dir), mode) {
                (Some(ranges), PodNetwork::Auto) => ranges,
                (Some(ranges), PodNetwork::Shared) if ranges.0.is_loopback() => ranges,
                (Some(ranges), PodNetwork::Namespaces) if !ranges.0.is_loopback() => ranges,
                (_, PodNetwork::Shared) => SHARED,
                (_, wanted) => match plinth_net::host::available().await {
                    Ok(()) => plinth_net::cidr::choose(&plinth_net::cidr::machine_networks())
                        .ok_or("no candidate range misses this machine's networks: give --cluster-cidr and --service-cluster-ip-range")?,
                    Err(e) if wanted == PodNetwork::Namespaces => {
                        return Err(format!("--pod-network=namespaces: {e}"));
                    }
                    Err(_) => SHARED,
                },
            };
            (pods.unwrap_or(base.0), services.unwrap_or(base.1))
        }
    };
    if chosen.0.overlaps(chosen.1) {
        return Err(format!(
            "the pod range {} and the Service range {} overlap",
            chosen.0, chosen.1
        ));
    }
    // The data directory is its owner's alone (the server makes it so too).
    let _ =
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(data_dir);
    let record =
        json!({"clusterCIDR": chosen.0.to_string(), "serviceClusterIPRange": chosen.1.to_string()});
    let path = data_dir.join(FILE);
    std::fs::write(&path, format!("{record:#}\n"))
        .and_then(|()| {
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        })
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(chosen)
}
