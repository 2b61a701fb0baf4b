//! Plinth's built-in controllers, run in the server process on its registry: the garbage
//! collector, the namespace lifecycle, the root CA publisher, the client-certificate signer,
//! the resource quota controller, the node IPAM and lifecycle controllers, the scheduler, the
//! endpoints and volume controllers and the workload controllers (ReplicaSets, Deployments,
//! StatefulSets, DaemonSets, Jobs, CronJobs, disruption budgets, autoscalers).

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod cronjob;
pub mod csrsigning;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod events;
pub mod gc;
mod history;
pub mod informer;
pub mod job;
pub mod leader;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod podautoscaler;
pub mod quota;
pub mod replicaset;
pub mod rootca;
pub mod scheduler;
pub mod statefulset;
pub mod volumes;
mod workload;

pub use gc::spawn_garbage_collector;
pub use namespace::spawn_namespace_controller;
pub use quota::spawn_quota_controller;
pub use rootca::spawn_root_ca_publisher;

/// The cluster's CA, as the controllers that need it see it.
#[derive(Clone, Debug)]
pub struct ClusterCa {
    /// Its certificate (PEM), published in every namespace.
    pub pem: String,
    /// Its key, signing approved client certificate requests.
    pub signer: std::sync::Arc<plinth_auth::pki::ClusterSigner>,
}

/// How the controllers that have settings run (kube-controller-manager's flags).
#[derive(Clone, Debug)]
pub struct Settings {
    /// The node lifecycle controller's periods.
    pub node_lifecycle: nodelifecycle::NodeLifecycle,
    /// The pods' addresses.
    pub cluster_cidr: nodeipam::ClusterCidr,
    /// Where provisioned volumes live.
    pub volumes_dir: std::path::PathBuf,
    /// The way to the node agents (for the autoscaler's resource metrics).
    pub node_proxy: Option<std::sync::Arc<dyn plinth_registry::resources::NodeDialer>>,
    /// This server's identity in the controllers' Lease; one that stays across restarts (of
    /// one data directory) takes its own lease back at once. `None`: a new one.
    pub identity: Option<String>,
    /// The creates this server's quota admission has just counted (`RunningServer`'s), so that
    /// the quota controller does not lower a count whose object is not stored yet.
    pub quota_ledger: std::sync::Arc<plinth_admission::quota::Ledger>,
    /// Where the controllers show their metrics (`RunningServer`'s, so that `/metrics` has
    /// them): `plinth_informers{resource}`, `plinth_informer_handlers{resource}`.
    pub metrics: std::sync::Arc<plinth_registry::metrics::MetricSources>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            node_lifecycle: nodelifecycle::NodeLifecycle::default(),
            cluster_cidr: nodeipam::ClusterCidr::default(),
            volumes_dir: std::env::temp_dir().join("plinth-volumes"),
            node_proxy: None,
            identity: None,
            quota_ledger: std::sync::Arc::default(),
            metrics: std::sync::Arc::default(),
        }
    }
}

/// Starts every built-in controller on `registry` while this server holds the
/// controllers' Lease (see [`leader`]); they stop when it is lost or `stopping` becomes true.
pub fn spawn_all(
    registry: plinth_registry::Client,
    stopping: tokio::sync::watch::Receiver<bool>,
    ca: &ClusterCa,
    settings: &Settings,
) {
    let (ca, settings) = (ca.clone(), settings.clone());
    let lead_registry = registry.clone();
    let identity = settings.identity.clone().unwrap_or_else(leader::identity);
    leader::run_while_leading(registry, identity, stopping, move |ended| {
        spawn_controllers(lead_registry.clone(), ended, &ca, &settings);
    });
}

/// The name the controllers' metrics are shown under.
const METRICS_SOURCE: &str = "controllers";

/// The controllers themselves, until `stopping` becomes true.
fn spawn_controllers(
    registry: plinth_registry::Client,
    stopping: tokio::sync::watch::Receiver<bool>,
    ca: &ClusterCa,
    settings: &Settings,
) {
    let ca_pem = &ca.pem;
    // One informer per resource for every workload controller of this term.
    let informers = informer::SharedInformers::new(registry.clone(), stopping.clone());
    {
        let shown = informers.clone();
        settings.metrics.set(
            METRICS_SOURCE,
            std::sync::Arc::new(move || shown.render_metrics()),
        );
        let (metrics, mut ended) = (settings.metrics.clone(), stopping.clone());
        tokio::spawn(async move {
            let _ = ended.wait_for(|s| *s).await;
            metrics.remove(METRICS_SOURCE);
        });
    }
    csrsigning::spawn_csr_signer(
        registry.acting_as("certificate-controller"),
        ca.signer.clone(),
        stopping.clone(),
    );
    spawn_namespace_controller(
        registry.acting_as("namespace-controller"),
        &informers,
        stopping.clone(),
    );
    spawn_quota_controller(
        registry.acting_as("resourcequota-controller"),
        &informers,
        settings.quota_ledger.clone(),
        stopping.clone(),
    );
    nodeipam::spawn_node_ipam(
        registry.acting_as("node-controller"),
        settings.cluster_cidr,
        stopping.clone(),
    );
    endpoints::spawn_endpoints(
        registry.acting_as("endpoint-controller"),
        &informers,
        stopping.clone(),
    );
    volumes::spawn_volume_controller(
        registry.acting_as("persistent-volume-binder"),
        &informers,
        settings.volumes_dir.clone(),
        stopping.clone(),
    );
    nodelifecycle::spawn_node_lifecycle(
        registry.acting_as("node-controller"),
        &informers,
        settings.node_lifecycle,
        stopping.clone(),
    );
    scheduler::spawn_scheduler(
        registry.acting_as("system:kube-scheduler"),
        &informers,
        stopping.clone(),
    );
    replicaset::spawn_replicaset_controller(
        registry.acting_as("replicaset-controller"),
        &informers,
        stopping.clone(),
    );
    replicaset::spawn_replication_manager(
        registry.acting_as("replication-controller"),
        &informers,
        stopping.clone(),
    );
    deployment::spawn_deployment_controller(
        registry.acting_as("deployment-controller"),
        &informers,
        stopping.clone(),
    );
    statefulset::spawn_statefulset_controller(
        registry.acting_as("statefulset-controller"),
        &informers,
        stopping.clone(),
    );
    job::spawn_job_controller(
        registry.acting_as("job-controller"),
        &informers,
        stopping.clone(),
    );
    cronjob::spawn_cronjob_controller(
        registry.acting_as("cronjob-controller"),
        &informers,
        stopping.clone(),
    );
    daemonset::spawn_daemonset_controller(
        registry.acting_as("daemon-set-controller"),
        &informers,
        stopping.clone(),
    );
    disruption::spawn_disruption_controller(
        registry.acting_as("disruption-controller"),
        &informers,
        stopping.clone(),
    );
    podautoscaler::spawn_hpa_controller(
        registry.acting_as("horizontal-pod-autoscaler"),
        &informers,
        settings.node_proxy.clone(),
        stopping.clone(),
    );
    spawn_root_ca_publisher(
        registry.acting_as("root-ca-cert-publisher"),
        ca_pem.to_owned(),
        stopping.clone(),
    );
    spawn_garbage_collector(
        registry.acting_as("generic-garbage-collector"),
        &informers,
        stopping,
    );
}
