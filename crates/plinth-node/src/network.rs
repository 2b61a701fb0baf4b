//! How this node's pods are networked, decided once its `podCIDR` is known: sharing the
//! machine's network (a loopback range: each pod binds its own `127.x` address), or each pod
//! in a network namespace of its own on the agent's bridge (see [`plinth_net::host`]), its
//! Services translated by nftables rules and its names answered by the agent's DNS.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use plinth_net::Cidr;
use plinth_net::host::{self, Names};

/// The cluster's ranges and DNS domain, as `plinth serve` chose them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ranges {
    /// Every pod's range (`--cluster-cidr`).
    pub pods: Cidr,
    /// The Services' (`--service-cluster-ip-range`).
    pub services: Cidr,
}

/// The cluster's DNS domain (the kubelet's `--cluster-domain` default).
pub(crate) const DOMAIN: &str = "cluster.local";

/// A node whose pods have namespaces of their own.
#[derive(Debug)]
pub(crate) struct Private {
    pub(crate) names: Names,
    /// The node's `/24`.
    pub(crate) subnet: Cidr,
    /// Its `.1`, on the bridge: the pods' default route, and where the node's DNS answers.
    pub(crate) gateway: Ipv4Addr,
    pub(crate) ranges: Ranges,
}

/// How this node's pods are networked.
#[derive(Debug)]
pub(crate) enum Mode {
    /// Pods share the machine's network, each at a loopback address of its own.
    Shared,
    /// Each pod has its own namespace.
    Private(std::sync::Arc<Private>),
}

impl Mode {
    /// The node condition's reason and message (`NetworkUnavailable=False`).
    pub(crate) fn condition(&self) -> (&'static str, String) {
        match self {
            Mode::Shared => (
                "SharedNetwork",
                "pods share the machine's network, each at a loopback address of its own".into(),
            ),
            Mode::Private(private) => (
                "PodNetworkNamespaces",
                format!(
                    "each pod has its own network namespace on bridge {} ({})",
                    private.names.bridge(),
                    private.subnet
                ),
            ),
        }
    }

    /// The private network, if pods have one.
    pub(crate) fn private(&self) -> Option<&std::sync::Arc<Private>> {
        match self {
            Mode::Private(p) => Some(p),
            Mode::Shared => None,
        }
    }
}

/// Decides the mode for `pod_cidr` and sets the node's network up: a loopback range shares
/// the machine's; any other needs namespaces (removing first whatever an earlier agent of
/// these `names` left).
///
/// # Errors
/// A private range where namespaces, devices or rules cannot be made.
pub(crate) async fn start(
    names: Names,
    pod_cidr: &str,
    ranges: Option<&Ranges>,
) -> Result<Mode, String> {
    let subnet = Cidr::parse(pod_cidr)
        .ok_or_else(|| format!("podCIDR {pod_cidr:?} is not an IPv4 range"))?;
    if subnet.is_loopback() {
        return Ok(Mode::Shared);
    }
    let ranges = ranges
        .cloned()
        .ok_or("the cluster's ranges are unknown (--cluster-cidr, --service-cluster-ip-range)")?;
    host::available()
        .await
        .map_err(|e| format!("pod network namespaces cannot be made here: {e}"))?;
    host::sweep_orphans().await;
    host::take_over(&names).await;
    let gateway = host::bridge_up(&names, subnet).await?;
    host::route_services(&names, ranges.services).await;
    Ok(Mode::Private(std::sync::Arc::new(Private {
        names,
        subnet,
        gateway,
        ranges,
    })))
}

impl Private {
    /// Pod `uid`'s namespace at `address`; its file.
    pub(crate) async fn pod_up(&self, uid: &str, address: Ipv4Addr) -> Result<PathBuf, String> {
        host::pod_up(&self.names, uid, address, self.gateway).await
    }

    /// Where pod `uid`'s namespace is (or will be).
    pub(crate) fn namespace_path(&self, uid: &str) -> PathBuf {
        self.names.namespace_path(uid)
    }

    /// Removes pod `uid`'s namespace.
    pub(crate) async fn pod_down(&self, uid: &str) {
        host::pod_down(&self.names, uid).await;
    }

    /// Removes everything the node's network made.
    pub(crate) async fn stop(&self) {
        host::sweep(&self.names).await;
        host::release(&self.names);
    }

    /// What the rules need to know of the network.
    pub(crate) fn rules(&self) -> plinth_net::rules::Network {
        plinth_net::rules::Network {
            table: self.names.table(),
            bridge: self.names.bridge(),
            pods: self.ranges.pods,
            services: self.ranges.services,
        }
    }
}
