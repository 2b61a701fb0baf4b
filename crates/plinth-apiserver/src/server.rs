//! Starting and stopping the server: storage, bootstrap objects, credentials, the TLS listener,
//! graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use plinth_store::Store;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::http::{AppState, router};
use crate::{ServeError, controllers};
use plinth_auth::pki;
use plinth_registry::resources::Resources;
use plinth_registry::{Client, Part, Registry, WriteOptions};

/// How to run the server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Credentials and the kubeconfig live here (created 0700; files 0600).
    pub data_dir: PathBuf,
    /// Address to listen on (port 0 picks a free port).
    pub listen: SocketAddr,
    /// How often history is compacted: each time, everything older than the revision seen at
    /// the previous tick goes (kube-apiserver's `--etcd-compaction-interval`, default 5 min).
    pub compaction_interval: Duration,
    /// How long past revisions of every object are kept for the history API, whatever the
    /// compaction interval (`--history-retention`; zero: as long as compaction keeps them).
    pub history_retention: Duration,
    /// How often watchers that allow bookmarks get one (kube-apiserver: about a minute).
    pub bookmark_interval: Duration,
    /// How many revisions before the watch cache's window a watch is still served by
    /// replaying storage (older: 410 Expired, as kube-apiserver answers all of them); `None`:
    /// any the store still has.
    pub watch_replay_limit: Option<u64>,
    /// kube's static token file (`--token-auth-file`), if any.
    pub token_auth_file: Option<PathBuf>,
    /// Requests without credentials act as `system:anonymous` (`--anonymous-auth`); off,
    /// they get 401 everywhere but the health, version and OIDC documents.
    pub anonymous_auth: bool,
    /// Read requests served at once before the next gets 429 (0: no limit).
    pub max_requests_inflight: usize,
    /// Writes served at once before the next gets 429 (0: no limit).
    pub max_mutating_requests_inflight: usize,
    /// The audit log, if any: the policy file, the log file, its size in megabytes before it
    /// rotates (0: never), and how many rotated files are kept (0: all).
    pub audit: Option<AuditConfig>,
    /// The PodSecurity admission plugin's configuration (`--admission-control-config-file`).
    pub pod_security: plinth_admission::podsecurity::Config,
    /// A serving certificate and client CA given from outside (kube-apiserver's flags).
    pub serving: pki::ServingFiles,
    /// Whether the cluster DNS Service (`kube-system/kube-dns`, answered by the node
    /// agents) is kept; off, the cluster has no DNS add-on (as envtest's).
    pub cluster_dns: bool,
}

/// Where the audit log goes and what it holds.
#[derive(Clone, Debug)]
pub struct AuditConfig {
    /// The policy (`--audit-policy-file`).
    pub policy: PathBuf,
    /// The log (`--audit-log-path`).
    pub log: PathBuf,
    /// `--audit-log-maxsize`, megabytes.
    pub max_size_mb: u64,
    /// `--audit-log-maxbackup`.
    pub max_backups: usize,
}

/// A running server.
#[derive(Debug)]
pub struct RunningServer {
    /// The kubeconfig written for it.
    pub kubeconfig: PathBuf,
    /// The address it listens on.
    pub local_addr: SocketAddr,
    /// `https://host:port`.
    pub url: String,
    /// The admin token.
    pub token: String,
    /// The CA certificate (PEM).
    pub ca_pem: String,
    /// The CA as a signer of client certificates.
    pub signer: Arc<pki::ClusterSigner>,
    /// The in-process client (the registry with the server's admission), for in-process
    /// controllers.
    pub client: Client,
    /// The way to node agents, for in-process controllers (the autoscaler's metrics).
    pub nodes: Arc<dyn plinth_registry::resources::NodeDialer>,
    /// The creates quota admission has just counted, for the quota controller.
    pub quota_ledger: Arc<plinth_admission::quota::Ledger>,
    /// Where in-process controllers show their metrics on `/metrics`.
    pub metric_sources: Arc<crate::metrics::MetricSources>,
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<()>,
}

impl RunningServer {
    /// Stops accepting, lets in-flight requests finish, ends open watches, and returns when
    /// every connection is closed.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.done.await;
    }

    /// Waits until the server stops (after [`RunningServer::stopper`] is used).
    pub async fn wait(self) {
        let _ = self.done.await;
    }

    /// Becomes `true` when the server begins to stop.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// A handle that stops the server when sent `true`.
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }
}

/// The namespaces every cluster has.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

async fn bootstrap(registry: &Client) -> Result<(), ServeError> {
    let Some(namespaces) = registry.resources.get("", "v1", "namespaces") else {
        return Ok(());
    };
    for name in SYSTEM_NAMESPACES {
        let object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        match registry
            .create(
                &namespaces,
                None,
                object,
                &WriteOptions::internal("kube-apiserver"),
            )
            .await
        {
            Ok(_) => tracing::info!(namespace = name, "created"),
            Err(e) if e.reason == plinth_core::StatusReason::AlreadyExists => {}
            Err(e) => return Err(ServeError::Bootstrap(e.message)),
        }
    }
    // The default StorageClass (Plinth's own provisioner), the system PriorityClasses.
    for (group, version, plural, object) in plinth_types::bootstrap_objects() {
        let Some(def) = registry.resources.get(group, version, plural) else {
            continue;
        };
        let options = WriteOptions::internal("kube-apiserver");
        match registry.create(&def, None, object, &options).await {
            Ok(_) => {}
            Err(e) if e.reason == plinth_core::StatusReason::AlreadyExists => {}
            Err(e) => return Err(ServeError::Bootstrap(e.message)),
        }
    }
    // The flow-control objects describing the server's fair queuing; a status given is
    // written through `/status` once the object is created.
    for (plural, object) in plinth_types::flowcontrol::defaults() {
        let Some(def) = registry
            .resources
            .get("flowcontrol.apiserver.k8s.io", "v1", plural)
        else {
            continue;
        };
        let status = object.get("status").cloned();
        let options = WriteOptions::internal("api-priority-and-fairness-config-producer-v1");
        let name = plinth_core::meta::name(&object).unwrap_or("").to_owned();
        match registry.create(&def, None, object, &options).await {
            Ok(_) => {}
            Err(e) if e.reason == plinth_core::StatusReason::AlreadyExists => continue,
            Err(e) => return Err(ServeError::Bootstrap(e.message)),
        }
        if let Some(status) = status {
            registry
                .modify(&def, None, &name, Part::Status, &options, |current| {
                    current["status"] = status.clone();
                    Ok(true)
                })
                .await
                .map_err(|e| ServeError::Bootstrap(e.message))?;
        }
    }
    Ok(())
}

/// Starts a server over `store` (which backend is the caller's choice: `plinth serve` and
/// `plinth-testenv` open one); returns once it accepts connections.
///
/// # Errors
/// A [`ServeError`] naming the step that failed: the data directory, credentials, binding the
/// address.
pub async fn start(
    config: ServerConfig,
    store: Arc<dyn Store>,
) -> Result<RunningServer, ServeError> {
    create_private_dir(&config.data_dir)?;
    let admission = Arc::new(plinth_admission::Admission::with_pod_security(
        config.pod_security.clone(),
    ));
    let registry = Registry {
        caches: Arc::new({
            let caches = plinth_watchcache::Caches::new(store.clone(), config.bookmark_interval);
            match config.watch_replay_limit {
                Some(limit) => caches.with_replay_limit(limit),
                None => caches,
            }
        }),
        store,
        resources: Arc::new(Resources::with(plinth_types::builtin())),
    };
    let client = Client::new(registry, admission.clone());
    bootstrap(&client).await?;
    let served = controllers::ServedCrds::default();
    controllers::register_existing_crds(&client, &served).await;

    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| ServeError::Bind {
            addr: config.listen,
            source: e,
        })?;
    let local_addr = listener.local_addr().map_err(|e| ServeError::Bind {
        addr: config.listen,
        source: e,
    })?;
    let credentials = pki::load_or_create(&config.data_dir, local_addr, &config.serving)?;
    let signer = Arc::new(pki::ClusterSigner::load(&config.data_dir)?);
    let url = pki::server_url(local_addr);
    let kubeconfig = pki::write_kubeconfig(&config.data_dir, &url, &credentials)?;

    // The OIDC discovery document's keys are fetched where pods reach the server (kube's
    // external address): the `kubernetes` Service, whose address the serving certificate names.
    let in_cluster = format!(
        "https://{}:443",
        plinth_registry::service_range::kubernetes_ip()
    );
    let service_accounts = Arc::new(plinth_auth::serviceaccount::Tokens::load_or_create(
        &config.data_dir,
        &in_cluster,
    )?);
    let authenticator = plinth_auth::Authenticator::new(
        &credentials.token,
        config.token_auth_file.as_deref(),
        service_accounts,
    )?
    .with_anonymous(config.anonymous_auth);
    let rbac = Arc::new(plinth_auth::rbac::Rbac::default());
    let audit = match &config.audit {
        Some(a) => Some(crate::audit::Audit::open(
            &a.policy,
            &a.log,
            a.max_size_mb,
            a.max_backups,
        )?),
        None => None,
    };
    plinth_auth::controller::start(&client, &rbac)
        .await
        .map_err(|e| ServeError::Bootstrap(e.message))?;
    let (stop, stopping) = watch::channel(false);
    plinth_admission::controller::start(&client, &admission, &stopping)
        .await
        .map_err(|e| ServeError::Bootstrap(e.message))?;
    crate::aggregator::bootstrap(&client, &credentials.ca_pem)
        .await
        .map_err(|e| ServeError::Bootstrap(e.message))?;
    let aggregator = Arc::new(crate::aggregator::Aggregator::default());
    let proxy_identity = signer
        .client_identity(crate::aggregator::PROXY_CLIENT, 365 * 24 * 3600)
        .map_err(|reason| ServeError::Credentials {
            step: "make the proxy client certificate",
            reason,
        })?;
    crate::aggregator::spawn(
        client.clone(),
        aggregator.clone(),
        proxy_identity,
        stopping.clone(),
    );
    let node_identity = signer
        .client_identity(crate::nodes::NODE_CLIENT, 365 * 24 * 3600)
        .map_err(|reason| ServeError::Credentials {
            step: "make the node client certificate",
            reason,
        })?;
    let nodes = Arc::new(
        crate::nodes::NodeProxy::new(&node_identity).map_err(|reason| ServeError::Credentials {
            step: "use the node client certificate",
            reason,
        })?,
    );
    let node_proxy = nodes.clone();
    let metric_sources = Arc::new(crate::metrics::MetricSources::default());
    let state = Arc::new(AppState {
        registry: client.registry().clone(),
        admission: admission.clone(),
        authenticator,
        rbac: rbac.clone(),
        server_address: url.trim_start_matches("https://").to_owned(),
        shutdown: stopping.clone(),
        metrics: crate::metrics::Metrics::default(),
        metric_sources: metric_sources.clone(),
        openapi: crate::openapi::Cache::default(),
        inflight: crate::http::Inflight::new(
            config.max_requests_inflight,
            config.max_mutating_requests_inflight,
        ),
        audit,
        aggregator,
        nodes,
    });
    tokio::spawn(compactor(
        client.registry().clone(),
        config.compaction_interval,
        config.history_retention,
        metric_sources.clone(),
        stopping.clone(),
    ));
    let client_handle = client.clone();
    plinth_auth::controller::spawn(client.clone(), rbac, stopping.clone());
    let bootstrap = crate::kubernetes_service::start(
        client.clone(),
        &config.data_dir,
        local_addr.port(),
        config.cluster_dns,
        stopping.clone(),
    )
    .await;
    controllers::spawn(client, stopping.clone(), served);
    let app = router(state);
    let acceptor = tokio_rustls::TlsAcceptor::from(credentials.tls.clone());
    let done = tokio::spawn(async move {
        serve(listener, acceptor, app, stopping).await;
        let _ = bootstrap.await;
    });
    tracing::info!(%url, kubeconfig = %kubeconfig.display(), "serving");
    Ok(RunningServer {
        kubeconfig,
        local_addr,
        url,
        token: credentials.token,
        ca_pem: credentials.ca_pem,
        signer,
        client: client_handle,
        nodes: node_proxy,
        quota_ledger: admission.quota_ledger.clone(),
        metric_sources,
        stop,
        done,
    })
}

/// Compacts history every `interval` up to the revision seen one interval earlier — or, with
/// a `retention`, up to the newest revision seen at least that long ago — so that watches and
/// lists may resume from anything younger than one interval and the history API reads back
/// as far as the retention. After a restart nothing is compacted until a whole retention has
/// passed (the revisions seen before it are not known): history is kept longer, never shorter.
async fn compactor(
    registry: Registry,
    interval: Duration,
    retention: Duration,
    metrics: Arc<crate::metrics::MetricSources>,
    mut stopping: watch::Receiver<bool>,
) {
    let store = registry.store.clone();
    if interval.is_zero() {
        return;
    }
    // Compactions done, the last one's revision and how long it took.
    let done = Arc::new(std::sync::Mutex::new((0_u64, 0_i64, 0.0_f64)));
    let shown = done.clone();
    metrics.set(
        "compactor",
        Arc::new(move || {
            let (count, revision, seconds) = *shown
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            format!(
                "# HELP plinth_storage_compactions_total Compactions of the storage's history.\n\
                 # TYPE plinth_storage_compactions_total counter\n\
                 plinth_storage_compactions_total {count}\n\
                 # HELP plinth_storage_compacted_revision The revision the last compaction reached.\n\
                 # TYPE plinth_storage_compacted_revision gauge\n\
                 plinth_storage_compacted_revision {revision}\n\
                 # HELP plinth_storage_last_compaction_seconds How long the last compaction took.\n\
                 # TYPE plinth_storage_last_compaction_seconds gauge\n\
                 plinth_storage_last_compaction_seconds {seconds}\n"
            )
        }),
    );
    // The revisions seen at each tick, oldest first.
    let mut seen: std::collections::VecDeque<(tokio::time::Instant, i64)> =
        std::collections::VecDeque::new();
    let keep = retention.max(interval);
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        let current = match store.current_revision().await {
            Ok(current) => current,
            Err(e) => {
                tracing::warn!(error = %e, "compactor: cannot read the revision");
                continue;
            }
        };
        let now = tokio::time::Instant::now();
        // The newest revision seen `keep` ago or earlier; older ones are no longer needed.
        let mut target = None;
        while let Some((at, revision)) = seen.front().copied() {
            if now.duration_since(at) + Duration::from_millis(1) < keep {
                break;
            }
            target = Some(revision);
            seen.pop_front();
        }
        if let Some(revision) = target.filter(|r| *r > 1) {
            let started = std::time::Instant::now();
            match store.compact(revision).await {
                Ok(()) => {
                    let mut done = done
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    *done = (done.0 + 1, revision, started.elapsed().as_secs_f64());
                    drop(done);
                    registry.caches.compacted(revision);
                    tracing::debug!(revision, "compacted");
                }
                Err(plinth_store::StoreError::Compacted { .. }) => {}
                Err(e) => tracing::warn!(error = %e, revision, "compaction failed"),
            }
        }
        seen.push_back((now, current));
    }
}

async fn serve(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    app: axum::Router,
    mut stopping: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopping.wait_for(|s| *s) => break,
        };
        let (tcp, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls =
                match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
            // A client certificate (verified against the cluster CA in the handshake) goes
            // with every request of the connection.
            let peer_cert = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|cert| plinth_auth::PeerCertificate(Arc::new(cert.to_vec())));
            let app = tower::ServiceExt::map_request(
                app,
                move |mut request: axum::http::Request<hyper::body::Incoming>| {
                    if let Some(cert) = &peer_cert {
                        request.extensions_mut().insert(cert.clone());
                    }
                    request
                        .extensions_mut()
                        .insert(crate::http::PeerAddress(peer));
                    request
                },
            );
            let service = TowerToHyperService::new(app);
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(connection.into_owned()).await {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(Duration::from_secs(30), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open 30 s after shutdown began; closing");
    }
}

/// Creates `dir` (and its parents) readable by the owner only, as the data directory holds
/// credentials (and, with embedded storage, every object).
///
/// # Errors
/// [`ServeError::DataDir`] naming the directory.
pub fn create_private_dir(dir: &std::path::Path) -> Result<(), ServeError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| ServeError::DataDir {
            path: dir.to_owned(),
            source: e,
        })
}
