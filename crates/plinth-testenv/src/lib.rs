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
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

use std::path::Path;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// What can go wrong starting or using the test server.
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
    /// A CRD was not established in time.
    #[error("the CRD {0} was not established within 10 s")]
    NotEstablished(String),
}

/// A running in-process API server; dropping it stops the server.
pub struct TestEnv {
    server: Option<plinth_apiserver::RunningServer>,
    store: std::sync::Arc<dyn plinth_store::Store>,
    client: kube::Client,
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
    pub async fn start() -> Result<Self, Error> {
        let dir = tempfile::tempdir().map_err(Error::TempDir)?;
        let config = plinth_apiserver::ServerConfig {
            data_dir: dir.path().to_owned(),
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            compaction_interval: Duration::from_secs(300),
            bookmark_interval: Duration::from_secs(60),

            token_auth_file: None,
            anonymous_auth: false,
            max_requests_inflight: 0,
            max_mutating_requests_inflight: 0,
            audit: None,
        };
        let store: std::sync::Arc<dyn plinth_store::Store> = std::sync::Arc::new(
            plinth_store_embedded::EmbeddedStore::open(dir.path().join("store"))
                .map_err(|e| Error::Storage(e.to_string()))?,
        );
        let server = plinth_apiserver::start(config, store.clone())
            .await
            .map_err(Error::Start)?;
        plinth_controllers::spawn_all(
            server.registry.clone(),
            server.stopping(),
            &plinth_controllers::ClusterCa {
                pem: server.ca_pem.clone(),
                signer: server.signer.clone(),
            },
            &plinth_controllers::Settings {
                node_proxy: Some(server.nodes.clone()),
                ..plinth_controllers::Settings::default()
            },
        );
        let client = client_for(&server.kubeconfig).await?;
        Ok(Self {
            store,
            server: Some(server),
            client,
            _dir: dir,
        })
    }

    /// A client for the server (clones share one connection pool).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The kubeconfig file the server wrote (for processes under test).
    pub fn kubeconfig(&self) -> &Path {
        self.server
            .as_ref()
            .map_or(Path::new(""), |s| &s.kubeconfig)
    }

    /// Creates `crd` and waits until it is established (its endpoints are served).
    ///
    /// # Errors
    /// If the CRD is refused, or not established within 10 s.
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
        let config = plinth_apiserver::ServerConfig {
            data_dir: self._dir.path().to_owned(),
            listen: addr,
            compaction_interval: Duration::from_secs(300),
            bookmark_interval: Duration::from_secs(60),

            token_auth_file: None,
            anonymous_auth: false,
            max_requests_inflight: 0,
            max_mutating_requests_inflight: 0,
            audit: None,
        };
        let server = plinth_apiserver::start(config, self.store.clone())
            .await
            .map_err(Error::Start)?;
        plinth_controllers::spawn_all(
            server.registry.clone(),
            server.stopping(),
            &plinth_controllers::ClusterCa {
                pem: server.ca_pem.clone(),
                signer: server.signer.clone(),
            },
            &plinth_controllers::Settings {
                node_proxy: Some(server.nodes.clone()),
                ..plinth_controllers::Settings::default()
            },
        );
        self.server = Some(server);
        Ok(())
    }

    /// Stops the server: in-flight requests finish, watches end.
    pub async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown().await;
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if let Some(server) = &self.server {
            let _ = server.stopper().send(true);
        }
    }
}

async fn client_for(kubeconfig: &Path) -> Result<kube::Client, Error> {
    let loaded = Kubeconfig::read_from(kubeconfig).map_err(|e| Error::Client(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(loaded, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Client(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| Error::Client(e.to_string()))
}

/// How long a test waits for a condition before it gives up: a hang guard far above any wait
/// a test expects, even on a loaded machine — not a measurement (no test asserts a duration;
/// figures live in the benchmarks).
pub const HANG_GUARD: Duration = Duration::from_secs(120);

/// Polls `check` until it holds. Fails the test, naming `what`, only if it never does (the
/// [`HANG_GUARD`] ends the wait).
///
/// # Panics
/// When `check` still does not hold after [`HANG_GUARD`].
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
