//! An in-process Plinth API server for tests — what `envtest` is to Go, without binaries to
//! download: a real API server (the same crate `plinth serve` runs, with its garbage collector
//! and namespace controller) on embedded storage in a temporary directory, listening on a free
//! loopback port, and a `kube::Client` for it. It starts in milliseconds.
//!
//! ```no_run
//! # async fn demo() -> Result<(), plinth_testenv::Error> {
//! let env = plinth_testenv::TestEnv::start().await?;
//! let pods: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
//!     kube::Api::namespaced(env.client(), "default");
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod faults;
mod served;

/// The README's example, compiled as a doc test so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

pub use served::Served;

/// What can go wrong starting or using the test server.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() {
/// // Every failure names its step; a CRD the server refuses is `InstallCrd`.
/// let env = plinth_testenv::TestEnv::start().await.expect("a test server");
/// let nameless = Default::default();
/// match env.install_crd(&nameless).await {
///     Err(plinth_testenv::Error::InstallCrd { source, .. }) => println!("refused: {source}"),
///     other => panic!("{other:?}"),
/// }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The temporary directory could not be made.
    #[error("create the temporary data directory: {0}")]
    TempDir(#[source] std::io::Error),
    /// The API server did not start.
    #[error("start the API server: {0}")]
    Start(#[source] plinth_apiserver::ServeError),
    /// The kubeconfig it wrote could not be used.
    #[error("build a client from the kubeconfig: {0}")]
    Client(String),
    /// A CRD could not be created.
    #[error("install the CRD {name}: {source}")]
    InstallCrd {
        /// The CRD.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The storage could not be changed while the server was down.
    #[error("change the storage: {0}")]
    Storage(String),
    /// A test slot's address ranges were refused.
    #[error("address ranges: {0}")]
    Ranges(String),
    /// A CRD was not established in time.
    #[error("the CRD {0} was not established within 10 s")]
    NotEstablished(String),
}

/// A node agent's task.
type AgentTask = tokio::task::JoinHandle<Result<(), plinth_node::AgentError>>;

/// A running in-process API server; dropping it stops the server.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// let env = plinth_testenv::TestEnv::start().await?;
/// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(env.client(), "default");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("settings".into());
/// configmaps.create(&Default::default(), &cm).await?;
/// assert!(configmaps.get_opt("settings").await?.is_some());
/// env.stop().await;
/// # Ok(()) }
/// ```
pub struct TestEnv {
    server: Option<plinth_apiserver::RunningServer>,
    store: std::sync::Arc<dyn plinth_store::Store>,
    client: kube::Client,
    settings: plinth_controllers::Settings,
    /// The node agent, when there is one: its stop signal and its task.
    agent: Option<(tokio::sync::watch::Sender<bool>, AgentTask)>,
    _slot: Option<Slot>,
    // Kept for the server's lifetime; removed on drop.
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv").finish_non_exhaustive()
    }
}

impl TestEnv {
    /// Starts a server with the built-in controllers, and a client for it.
    ///
    /// # Errors
    /// If the server cannot start or its kubeconfig cannot be read.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), plinth_testenv::Error> {
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// assert!(env.kubeconfig().exists());
    /// # Ok(()) }
    /// ```
    pub async fn start() -> Result<Self, Error> {
        Self::start_with(plinth_controllers::Settings::default(), None).await
    }

    /// Starts a server with the built-in controllers and a node agent named `node` that runs
    /// pods as processes on this machine (no sandbox: plain child processes, killed with
    /// the agent), on address ranges no other test server holds ([`Slot`]).
    ///
    /// # Errors
    /// If the server or the agent cannot start.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::Pod;
    /// // Pods scheduled to `node-a` run as processes of this machine.
    /// let env = plinth_testenv::TestEnv::start_with_node("node-a").await?;
    /// let pods: kube::Api<Pod> = kube::Api::namespaced(env.client(), "default");
    /// let pod: Pod = serde_json::from_value(serde_json::json!({
    ///     "metadata": {"name": "sleeper"},
    ///     "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "60"]}]}
    /// }))?;
    /// pods.create(&Default::default(), &pod).await?;
    /// # Ok(()) }
    /// ```
    pub async fn start_with_node(node: &str) -> Result<Self, Error> {
        let slot = Slot::take();
        plinth_types::core::service::set_service_range(&slot.service_range())
            .map_err(Error::Ranges)?;
        let cluster_cidr = plinth_controllers::nodeipam::ClusterCidr::parse(&slot.pod_range())
            .map_err(Error::Ranges)?;
        let mut env = Self::start_with(
            plinth_controllers::Settings {
                cluster_cidr,
                ..plinth_controllers::Settings::default()
            },
            Some(slot),
        )
        .await?;
        let config = plinth_node::Config::new(node, env._dir.path().join(format!("node-{node}")));
        let roots = client_config(env.kubeconfig())
            .await?
            .root_cert
            .unwrap_or_default();
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(plinth_node::run(config, env.client(), roots, stopping));
        env.agent = Some((stop, task));
        Ok(env)
    }

    async fn start_with(
        settings: plinth_controllers::Settings,
        slot: Option<Slot>,
    ) -> Result<Self, Error> {
        let dir = tempfile::tempdir().map_err(Error::TempDir)?;
        let store: std::sync::Arc<dyn plinth_store::Store> = std::sync::Arc::new(
            plinth_store_embedded::EmbeddedStore::open(dir.path().join("store"))
                .map_err(|e| Error::Storage(e.to_string()))?,
        );
        let settings = plinth_controllers::Settings {
            volumes_dir: dir.path().join("volumes"),
            ..settings
        };
        let listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        let server = boot(dir.path(), listen, store.clone(), &settings).await?;
        let client = client_for(&server.kubeconfig).await?;
        Ok(Self {
            store,
            server: Some(server),
            client,
            settings,
            agent: None,
            _slot: slot,
            _dir: dir,
        })
    }

    /// A client for the server (clones share one connection pool).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let version = env.client().apiserver_version().await?;
    /// assert_eq!(version.major, "1");
    /// # Ok(()) }
    /// ```
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Takes the Lease `namespace/name` for `identity`, as another replica that judged it
    /// expired would: the holder, acquire and renew times and the transition count change, so
    /// the elector holding it loses leadership at its next renewal.
    ///
    /// # Errors
    /// If the Lease cannot be read or written (a conflict with the holder's renewal is tried
    /// again, up to ten times).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::coordination::v1::Lease;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let leases: kube::Api<Lease> = kube::Api::namespaced(env.client(), "default");
    /// let mut lease = Lease::default();
    /// lease.metadata.name = Some("my-operator".into());
    /// leases.create(&Default::default(), &lease).await?;
    /// // Another replica takes over: the elector under test must notice at its next renewal.
    /// env.take_lease("default", "my-operator", "the-other-replica").await?;
    /// let taken = leases.get("my-operator").await?;
    /// assert_eq!(taken.spec.unwrap().holder_identity.as_deref(), Some("the-other-replica"));
    /// # Ok(()) }
    /// ```
    pub async fn take_lease(
        &self,
        namespace: &str,
        name: &str,
        identity: &str,
    ) -> Result<(), kube::Error> {
        use k8s_openapi::api::coordination::v1::Lease;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let leases: Api<Lease> = Api::namespaced(self.client(), namespace);
        let mut attempts = 0;
        loop {
            let mut lease = leases.get(name).await?;
            let spec = lease.spec.get_or_insert_with(Default::default);
            let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
            spec.holder_identity = Some(identity.to_owned());
            spec.acquire_time = Some(now.clone());
            spec.renew_time = Some(now);
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            match leases.replace(name, &PostParams::default(), &lease).await {
                Err(kube::Error::Api(e)) if e.code == 409 && attempts < 10 => attempts += 1,
                other => return other.map(|_| ()),
            }
        }
    }

    /// The kubeconfig file the server wrote (for processes under test).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), plinth_testenv::Error> {
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// // An operator under test, started as a process, reads the server's address from it.
    /// let mut operator = std::process::Command::new("true");
    /// operator.env("KUBECONFIG", env.kubeconfig());
    /// assert!(operator.status().expect("run").success());
    /// # Ok(()) }
    /// ```
    pub fn kubeconfig(&self) -> &Path {
        self.server
            .as_ref()
            .map_or(Path::new(""), |s| &s.kubeconfig)
    }

    /// Creates `crd` and waits until it is established (its endpoints are served).
    ///
    /// # Errors
    /// If the CRD is refused, or not established within 10 s.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
    ///     "metadata": {"name": "widgets.example.com"},
    ///     "spec": {
    ///         "group": "example.com",
    ///         "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
    ///         "scope": "Namespaced",
    ///         "versions": [{"name": "v1", "served": true, "storage": true,
    ///             "schema": {"openAPIV3Schema": {"type": "object",
    ///                 "x-kubernetes-preserve-unknown-fields": true}}}]
    ///     }
    /// }))?;
    /// env.install_crd(&crd).await?;
    /// // Served at once: a dynamic client lists widgets.
    /// let gvk = kube::api::GroupVersionKind::gvk("example.com", "v1", "Widget");
    /// let widgets = kube::api::ApiResource::from_gvk_with_plural(&gvk, "widgets");
    /// let api: kube::Api<kube::api::DynamicObject> =
    ///     kube::Api::namespaced_with(env.client(), "default", &widgets);
    /// assert!(api.list(&Default::default()).await?.items.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn install_crd(&self, crd: &CustomResourceDefinition) -> Result<(), Error> {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let crds: Api<CustomResourceDefinition> = Api::all(self.client());
        crds.create(&PostParams::default(), crd)
            .await
            .map_err(|source| Error::InstallCrd {
                name: name.clone(),
                source,
            })?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while tokio::time::Instant::now() < deadline {
            if let Ok(current) = crds.get(&name).await {
                let established = current
                    .status
                    .and_then(|s| s.conditions)
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                if established {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Err(Error::NotEstablished(name))
    }

    /// Stops the server, writes `objects` (storage key → object) straight into its storage and
    /// compacts away all history, then starts it again on the same address: clients' watches
    /// end, and resuming them from any earlier resourceVersion gets 410 Gone — what a client's
    /// relist logic must survive.
    ///
    /// # Errors
    /// If the storage cannot be opened or written, or the server cannot start again.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let mut env = plinth_testenv::TestEnv::start().await?;
    /// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(env.client(), "default");
    /// let before = configmaps.list(&Default::default()).await?.metadata.resource_version;
    /// // Written behind the server's back, history compacted: an informer must relist to see it.
    /// let object = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
    ///     "metadata": {"name": "sneaked", "namespace": "default",
    ///                  "uid": "8e1b6c1e-0000-4000-8000-000000000001",
    ///                  "creationTimestamp": "2026-01-01T00:00:00Z"}});
    /// env.restart_with_compaction(&[("/configmaps/default/sneaked", object)]).await?;
    /// use futures::TryStreamExt;
    /// let params = kube::api::WatchParams::default();
    /// let mut events = Box::pin(configmaps.watch(&params, &before.unwrap()).await?);
    /// match events.try_next().await? {
    ///     Some(kube::api::WatchEvent::Error(gone)) => assert_eq!(gone.code, 410),
    ///     other => panic!("{other:?}"),
    /// }
    /// assert!(configmaps.get_opt("sneaked").await?.is_some());
    /// # Ok(()) }
    /// ```
    pub async fn restart_with_compaction(
        &mut self,
        objects: &[(&str, serde_json::Value)],
    ) -> Result<(), Error> {
        let Some(server) = self.server.take() else {
            return Ok(());
        };
        let addr = server.local_addr;
        server.shutdown().await;
        let storage = |e: plinth_store::StoreError| Error::Storage(e.to_string());
        for (key, object) in objects {
            let value = bytes::Bytes::from(object.to_string());
            self.store.create(key, value).await.map_err(storage)?;
        }
        let revision = self.store.current_revision().await.map_err(storage)?;
        self.store.compact(revision).await.map_err(storage)?;
        let server = boot(self._dir.path(), addr, self.store.clone(), &self.settings).await?;
        self.server = Some(server);
        Ok(())
    }

    /// Stops the node agent (its pods' processes first) and the server: in-flight requests
    /// finish, watches end.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), plinth_testenv::Error> {
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let client = env.client();
    /// env.stop().await;
    /// // Nothing answers any more.
    /// assert!(client.apiserver_version().await.is_err());
    /// # Ok(()) }
    /// ```
    pub async fn stop(mut self) {
        if let Some((stop, task)) = self.agent.take() {
            let _ = stop.send(true);
            let _ = task.await;
        }
        if let Some(server) = self.server.take() {
            server.shutdown().await;
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        // The agent's containers are killed when its task is dropped with the runtime.
        if let Some((stop, _)) = &self.agent {
            let _ = stop.send(true);
        }
        if let Some(server) = &self.server {
            let _ = server.stopper().send(true);
        }
    }
}

/// Starts the API server on `dir` and `store` at `listen`, with the built-in controllers.
async fn boot(
    dir: &Path,
    listen: std::net::SocketAddr,
    store: std::sync::Arc<dyn plinth_store::Store>,
    settings: &plinth_controllers::Settings,
) -> Result<plinth_apiserver::RunningServer, Error> {
    let config = plinth_apiserver::ServerConfig {
        data_dir: dir.to_owned(),
        listen,
        compaction_interval: Duration::from_secs(300),
        history_retention: Duration::ZERO,
        bookmark_interval: Duration::from_secs(60),
        watch_replay_limit: None,
        token_auth_file: None,
        anonymous_auth: false,
        max_requests_inflight: 0,
        max_mutating_requests_inflight: 0,
        audit: None,
        pod_security: plinth_apiserver::admission_config::PodSecurity::default(),
        serving: plinth_apiserver::ServingFiles::default(),
        cluster_dns: true,
    };
    let server = plinth_apiserver::start(config, store)
        .await
        .map_err(Error::Start)?;
    plinth_controllers::spawn_all(
        server.client.clone(),
        server.stopping(),
        &plinth_controllers::ClusterCa {
            pem: server.ca_pem.clone(),
            signer: server.signer.clone(),
        },
        &plinth_controllers::Settings {
            node_proxy: Some(server.nodes.clone()),
            quota_ledger: server.quota_ledger.clone(),
            metrics: server.metric_sources.clone(),
            ..settings.clone()
        },
    );
    Ok(server)
}

async fn client_config(kubeconfig: &Path) -> Result<kube::Config, Error> {
    let loaded = Kubeconfig::read_from(kubeconfig).map_err(|e| Error::Client(e.to_string()))?;
    kube::Config::from_custom_kubeconfig(loaded, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Client(e.to_string()))
}

async fn client_for(kubeconfig: &Path) -> Result<kube::Client, Error> {
    let config = client_config(kubeconfig).await?;
    kube::Client::try_from(config).map_err(|e| Error::Client(e.to_string()))
}

/// How long a test waits for a condition before it gives up: a hang guard far above any wait
/// a test expects, even on a loaded machine — not a measurement (no test asserts a duration;
/// figures live in the benchmarks).
///
/// # Example
///
/// ```
/// // Longer than any wait a test expects — a guard against hanging, not a measurement.
/// assert!(plinth_testenv::HANG_GUARD >= std::time::Duration::from_secs(60));
/// ```
pub const HANG_GUARD: Duration = Duration::from_secs(120);

/// Polls `check` until it holds. Fails the test, naming `what`, only if it never does (the
/// [`HANG_GUARD`] ends the wait).
///
/// # Panics
/// When `check` still does not hold after [`HANG_GUARD`].
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() {
/// use std::sync::atomic::{AtomicU32, Ordering};
/// let polls = AtomicU32::new(0);
/// // Polled every 50 ms until it holds (here on the third poll).
/// plinth_testenv::eventually("the third poll", || async {
///     polls.fetch_add(1, Ordering::SeqCst) >= 2
/// })
/// .await;
/// assert_eq!(polls.load(Ordering::SeqCst), 3);
/// # }
/// ```
pub async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let polled = tokio::time::timeout(HANG_GUARD, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(polled.is_ok(), "{what} never happened (hang guard)");
}

/// [`eventually`] for a test that blocks (a `kubectl` or `curl` per check).
///
/// # Panics
/// When `check` still does not hold after [`HANG_GUARD`].
///
/// # Example
///
/// ```
/// let file = std::env::temp_dir().join(format!("eventually-{}", std::process::id()));
/// let writer = {
///     let file = file.clone();
///     std::thread::spawn(move || std::fs::write(file, "done"))
/// };
/// plinth_testenv::eventually_blocking("the file is written", || file.exists());
/// writer.join().expect("writer").expect("write");
/// std::fs::remove_file(&file).expect("remove");
/// ```
pub fn eventually_blocking(what: &str, mut check: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !check() {
        assert!(
            started.elapsed() < HANG_GUARD,
            "{what} never happened (hang guard)"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A number no other test server on the machine holds while this one lives: its pods and
/// Services get address ranges of their own (two clusters' agents on one range would
/// answer each other's ClusterIPs).
///
/// # Example
///
/// ```
/// let slot = plinth_testenv::Slot::take();
/// // Its own loopback ranges, for `plinth serve`:
/// let args = slot.args();
/// assert_eq!(args[0], "--service-cluster-ip-range");
/// // ... start `plinth serve` with `args`; the number is free again when `slot` drops.
/// ```
pub struct Slot {
    /// The number (0–63): pods get `127.(64+N).0.0/16`, Services `127.(128+N).0.0/16`.
    pub number: u8,
    file: PathBuf,
}

impl Slot {
    /// Takes a free number, waiting while all are held.
    ///
    /// # Panics
    /// When the slots' directory cannot be made, or no number frees up for a minute.
    ///
    /// # Example
    ///
    /// ```
    /// let (a, b) = (plinth_testenv::Slot::take(), plinth_testenv::Slot::take());
    /// assert_ne!(a.number, b.number);
    /// ```
    pub fn take() -> Self {
        let dir = std::env::temp_dir().join("plinth-test-slots");
        if std::fs::create_dir_all(&dir).is_err() {
            panic!("cannot make {}", dir.display());
        }
        for round in 0..600 {
            for number in 0..64u8 {
                let file = dir.join(number.to_string());
                // A slot whose holder is gone is free again.
                if let Ok(holder) = std::fs::read_to_string(&file)
                    && !Path::new(&format!("/proc/{}", holder.trim())).exists()
                {
                    let _ = std::fs::remove_file(&file);
                }
                if let Ok(mut f) = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&file)
                {
                    use std::io::Write;
                    let _ = write!(f, "{}", std::process::id());
                    return Self { number, file };
                }
            }
            assert!(round < 599, "no free test slot");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("no free test slot")
    }

    /// The Services' range (`--service-cluster-ip-range`).
    ///
    /// # Example
    ///
    /// ```
    /// let slot = plinth_testenv::Slot::take();
    /// assert_eq!(slot.service_range(), format!("127.{}.0.0/16", 128 + u16::from(slot.number)));
    /// ```
    pub fn service_range(&self) -> String {
        format!("127.{}.0.0/16", 128 + u16::from(self.number))
    }

    /// The pods' range (`--cluster-cidr`).
    ///
    /// # Example
    ///
    /// ```
    /// let slot = plinth_testenv::Slot::take();
    /// assert_eq!(slot.pod_range(), format!("127.{}.0.0/16", 64 + u16::from(slot.number)));
    /// ```
    pub fn pod_range(&self) -> String {
        format!("127.{}.0.0/16", 64 + u16::from(self.number))
    }

    /// `plinth serve` arguments giving ranges outside loopback (a `/20` of `172.20.0.0/14`
    /// for pods, of `172.24.0.0/14` for Services): each pod in a network namespace of its own.
    ///
    /// # Example
    ///
    /// ```
    /// let slot = plinth_testenv::Slot::take();
    /// let args = slot.private_args();
    /// assert_eq!(args[0], "--service-cluster-ip-range");
    /// assert!(args[1].starts_with("172.") && args[1].ends_with("/20"));
    /// ```
    pub fn private_args(&self) -> Vec<String> {
        let (high, low) = (
            u16::from(self.number) / 16,
            (u16::from(self.number) % 16) * 16,
        );
        vec![
            "--service-cluster-ip-range".into(),
            format!("172.{}.{low}.0/20", 24 + high),
            "--cluster-cidr".into(),
            format!("172.{}.{low}.0/20", 20 + high),
        ]
    }

    /// `plinth serve` arguments giving the ranges.
    ///
    /// # Example
    ///
    /// ```
    /// let slot = plinth_testenv::Slot::take();
    /// assert_eq!(
    ///     slot.args(),
    ///     ["--service-cluster-ip-range".to_owned(), slot.service_range(),
    ///      "--cluster-cidr".to_owned(), slot.pod_range()]
    /// );
    /// ```
    pub fn args(&self) -> Vec<String> {
        vec![
            "--service-cluster-ip-range".into(),
            self.service_range(),
            "--cluster-cidr".into(),
            self.pod_range(),
        ]
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// A loopback port free now (for a process under test to listen on), chosen at random
/// below Linux's ephemeral range (32768–60999): the kernel hands those to every `bind(0)`
/// and outgoing connection, so a port picked there is soon taken by another test.
///
/// # Panics
/// When no port can be bound.
///
/// # Example
///
/// ```
/// let port = plinth_testenv::free_port();
/// assert!((20_000..32_000).contains(&port));
/// // Free now: a process under test is told to listen there.
/// std::net::TcpListener::bind(("127.0.0.1", port)).expect("free");
/// ```
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    for _ in 0..1000 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        let port = 20_000 + u16::try_from(hasher.finish() % 12_000).unwrap_or(0);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between 20000 and 32000")
}

/// The body of `GET path` from `127.0.0.1:port` over plain HTTP (a manager's `/metrics`),
/// headers included; empty when nothing answers.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() {
/// // A manager's metrics endpoint, say; nothing listens here, so the answer is empty.
/// let port = plinth_testenv::free_port();
/// assert_eq!(plinth_testenv::scrape(port, "/metrics").await, "");
/// # }
/// ```
pub async fn scrape(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return String::new();
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let _ = stream.write_all(request.as_bytes()).await;
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text).await;
    text
}

/// The `plinth` binary next to `exe` (a test's `env!("CARGO_BIN_EXE_…")`), built with
/// `cargo` first if a lone `cargo test -p <operator>` did not build it.
///
/// # Panics
/// When the build fails.
///
/// # Example
///
/// ```no_run
/// // In an operator's integration test, with `env!("CARGO_BIN_EXE_my-operator")` and
/// // `env!("CARGO")`:
/// let plinth = plinth_testenv::plinth_binary("target/debug/my-operator", "cargo");
/// let served = plinth_testenv::Served::start(plinth, "node-a", &[], false);
/// ```
pub fn plinth_binary(exe: &str, cargo: &str) -> PathBuf {
    let binary = Path::new(exe).with_file_name("plinth");
    if !binary.exists() {
        let built = std::process::Command::new(cargo)
            .args(["build", "-p", "plinth", "--bin", "plinth"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(built, "building plinth");
    }
    binary
}

/// A process on this machine as `/proc` shows it.
///
/// # Example
///
/// ```
/// let me = plinth_testenv::processes(|p| p.pid == std::process::id());
/// assert_eq!(me, [std::process::id()]);
/// ```
#[derive(Clone, Debug)]
pub struct Process {
    /// Its PID (in this PID namespace).
    pub pid: u32,
    /// Its command line, word by word.
    pub args: Vec<String>,
    /// Its environment, `NAME=value` each (empty when it may not be read).
    pub env: Vec<String>,
}

impl Process {
    /// Whether its environment holds `NAME=value` exactly.
    ///
    /// # Example
    ///
    /// ```
    /// let process = plinth_testenv::Process {
    ///     pid: 1,
    ///     args: vec!["redis-server".into()],
    ///     env: vec!["POD_NAME=redis-0".into()],
    /// };
    /// assert!(process.has_env("POD_NAME", "redis-0"));
    /// assert!(!process.has_env("POD_NAME", "redis"));
    /// ```
    #[must_use]
    pub fn has_env(&self, name: &str, value: &str) -> bool {
        let wanted = format!("{name}={value}");
        self.env.contains(&wanted)
    }
}

/// The PIDs of the processes running now that `pick` accepts (to signal one a test started
/// indirectly, say a pod's, by its PID — never by name).
///
/// # Example
///
/// ```
/// let mut child = std::process::Command::new("sleep")
///     .arg("30")
///     .env("MARK", "processes-example")
///     .spawn()
///     .expect("sleep");
/// // (Until it has started, the child shows its parent's environment.)
/// plinth_testenv::eventually_blocking("the child runs", || {
///     plinth_testenv::processes(|p| p.has_env("MARK", "processes-example")) == [child.id()]
/// });
/// // Stopped by its PID, never by name.
/// child.kill().expect("kill");
/// child.wait().expect("wait");
/// ```
#[must_use]
pub fn processes(pick: impl Fn(&Process) -> bool) -> Vec<u32> {
    let words = |path: PathBuf| -> Vec<String> {
        std::fs::read(path)
            .map(|bytes| {
                bytes
                    .split(|b| *b == 0)
                    .filter(|w| !w.is_empty())
                    .map(|w| String::from_utf8_lossy(w).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let process = Process {
                pid,
                args: words(entry.path().join("cmdline")),
                env: words(entry.path().join("environ")),
            };
            pick(&process).then_some(pid)
        })
        .collect()
}

/// The PID of the process whose command line, as it titles itself, starts with `program`
/// and names `word` among its words (`redis-server` retitles itself `redis-server <ip>:6379`).
///
/// # Example
///
/// ```
/// let mut child = std::process::Command::new("sleep")
///     .arg("31.5")
///     .spawn()
///     .expect("sleep");
/// plinth_testenv::eventually_blocking("sleep titles itself", || {
///     plinth_testenv::titled("sleep", "31.5") == Some(child.id())
/// });
/// child.kill().expect("kill");
/// child.wait().expect("wait");
/// ```
#[must_use]
pub fn titled(program: &str, word: &str) -> Option<u32> {
    processes(|p| {
        let line = p.args.join(" ");
        let mut words = line.split_whitespace();
        words.next().is_some_and(|w| w.ends_with(program)) && words.any(|w| w == word)
    })
    .first()
    .copied()
}
