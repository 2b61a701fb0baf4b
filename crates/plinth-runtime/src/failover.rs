//! A [`kube::Client`] over several API servers of one control plane (opt-in; client-go and
//! kube-rs talk to one server): requests go to one server while it answers, and to the next
//! when it does not — a request that never reached its server (connection refused) is sent to
//! the next whatever its method; a read (`GET`, `HEAD`) also after its connection broke. A
//! write whose connection broke after it was sent is not repeated (it may have been applied):
//! its error is returned, as from any client. Watches are requests like any other, so an
//! informer whose server dies re-watches through the next one from its last resourceVersion.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! // A kubeconfig written by `plinth kubeconfig --servers a,b,c`: one context per server.
//! let client = plinth_runtime::failover::client_from_kubeconfig(None).await?;
//! let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(client);
//! let _ = pods.list(&Default::default()).await?;
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::client::Body;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

/// Why a failover client could not be built.
///
/// # Example
///
/// ```
/// use plinth_runtime::failover::{client, FailoverError};
/// assert!(matches!(client(Vec::new()), Err(FailoverError::NoServers)));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum FailoverError {
    /// The kubeconfig could not be read or one of its contexts could not be used.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] KubeconfigError),
    /// A client could not be built for a server.
    #[error("client: {0}")]
    Client(#[from] kube::Error),
    /// No server was given.
    #[error("no server to talk to")]
    NoServers,
}

/// The servers' clients and the one requests go to now.
struct Servers {
    clients: Vec<kube::Client>,
    current: AtomicUsize,
}

/// The tower service under the failover client.
#[derive(Clone)]
struct Failover(Arc<Servers>);

impl tower::Service<Request<Body>> for Failover {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let servers = self.0.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            // Kept whole so the request can be sent again (bodies of API requests are small
            // and already in memory; a watch's is empty).
            let body = body
                .collect()
                .await
                .map_err(|e| kube::Error::Service(e.into()))?
                .to_bytes();
            let idempotent = matches!(parts.method, Method::GET | Method::HEAD);
            let count = servers.clients.len();
            let first = servers.current.load(Ordering::Acquire);
            let mut last = None;
            for step in 0..count {
                let index = (first + step) % count;
                let attempt = Request::from_parts(parts.clone(), Body::from(body.clone()));
                match servers.clients[index].send(attempt).await {
                    Ok(response) => {
                        if index != first {
                            // Later requests start at the server that answered.
                            let _ = servers.current.compare_exchange(
                                first,
                                index,
                                Ordering::AcqRel,
                                Ordering::Acquire,
                            );
                        }
                        return Ok(response);
                    }
                    Err(e) if never_sent(&e) || (idempotent && transport(&e)) => {
                        tracing::debug!(server = index, error = %e, "API server did not answer; trying the next");
                        last = Some(e);
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(last.unwrap_or_else(|| kube::Error::Service("no server to talk to".into())))
        })
    }
}

/// The error is the transport's (no HTTP answer came), not an API status.
fn transport(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Service(_) | kube::Error::HyperError(_))
}

/// The request never reached a server: the connection could not be made.
fn never_sent(e: &kube::Error) -> bool {
    if !transport(e) {
        return false;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::AddrNotAvailable
                    | std::io::ErrorKind::NotConnected
            )
        {
            return true;
        }
        source = error.source();
    }
    false
}

/// A client sending each request to the first of `configs`' servers that answers, starting at
/// the one that answered last. Every config should name a server of one control plane, with
/// the same credentials (the default namespace is the first's).
///
/// # Errors
/// [`FailoverError::NoServers`] for no configs; a client error if one cannot be built.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let env = plinth_testenv::TestEnv::start().await?;
/// let kubeconfig = kube::config::Kubeconfig::read_from(env.kubeconfig())?;
/// let live = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
/// // A server that is gone first, then the live one: requests fail over to it.
/// let mut gone = live.clone();
/// gone.cluster_url = "https://127.0.0.1:9".parse()?;
/// let client = plinth_runtime::failover::client(vec![gone, live])?;
/// assert_eq!(client.apiserver_version().await?.major, "1");
/// # Ok(()) }
/// ```
pub fn client(configs: Vec<kube::Config>) -> Result<kube::Client, FailoverError> {
    let default_namespace = configs
        .first()
        .ok_or(FailoverError::NoServers)?
        .default_namespace
        .clone();
    let clients = configs
        .into_iter()
        .map(kube::Client::try_from)
        .collect::<Result<Vec<_>, _>>()?;
    let servers = Arc::new(Servers {
        clients,
        current: AtomicUsize::new(0),
    });
    Ok(kube::Client::new(Failover(servers), default_namespace))
}

/// One config per server of the kubeconfig's current context's control plane: the current
/// context first, then every other context with the same user whose cluster trusts the same
/// CA (as `plinth kubeconfig --servers` writes them), each server once.
///
/// # Errors
/// A kubeconfig error if a context cannot be turned into a config.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let env = plinth_testenv::TestEnv::start().await?;
/// let kubeconfig = kube::config::Kubeconfig::read_from(env.kubeconfig())?;
/// // One server here; `plinth kubeconfig --servers a,b,c` writes a context per server.
/// let configs = plinth_runtime::failover::configs_from_kubeconfig(&kubeconfig).await?;
/// assert_eq!(configs.len(), 1);
/// # Ok(()) }
/// ```
pub async fn configs_from_kubeconfig(
    kubeconfig: &Kubeconfig,
) -> Result<Vec<kube::Config>, FailoverError> {
    let current = kubeconfig.current_context.clone().unwrap_or_default();
    let context_of = |name: &str| {
        kubeconfig
            .contexts
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.context.clone())
    };
    let cluster_of = |name: &str| {
        kubeconfig
            .clusters
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.cluster.clone())
    };
    let Some(home) = context_of(&current) else {
        // No current context: whatever kube makes of it (its error, most likely).
        let options = KubeConfigOptions::default();
        return Ok(vec![
            kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &options).await?,
        ]);
    };
    let home_ca = cluster_of(&home.cluster).and_then(|c| c.certificate_authority_data);
    let mut names = vec![current.clone()];
    names.extend(
        kubeconfig
            .contexts
            .iter()
            .filter(|c| c.name != current)
            .filter(|c| {
                c.context.as_ref().is_some_and(|context| {
                    context.user == home.user
                        && cluster_of(&context.cluster).and_then(|c| c.certificate_authority_data)
                            == home_ca
                })
            })
            .map(|c| c.name.clone()),
    );
    let mut configs: Vec<kube::Config> = Vec::new();
    for name in names {
        let options = KubeConfigOptions {
            context: Some(name),
            ..KubeConfigOptions::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &options).await?;
        if !configs.iter().any(|c| c.cluster_url == config.cluster_url) {
            configs.push(config);
        }
    }
    Ok(configs)
}

/// A failover [`client`] over [`configs_from_kubeconfig`] of the kubeconfig at `path`, or of
/// `KUBECONFIG` / `~/.kube/config` without one.
///
/// # Errors
/// As [`configs_from_kubeconfig`] and [`client`].
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// // Every server of `KUBECONFIG`'s current control plane, one after another as they fail.
/// let client = plinth_runtime::failover::client_from_kubeconfig(None).await?;
/// let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(client);
/// pods.list(&Default::default()).await?;
/// # Ok(()) }
/// ```
pub async fn client_from_kubeconfig(
    path: Option<&std::path::Path>,
) -> Result<kube::Client, FailoverError> {
    let kubeconfig = match path {
        Some(path) => Kubeconfig::read_from(path)?,
        None => Kubeconfig::read()?,
    };
    client(configs_from_kubeconfig(&kubeconfig).await?)
}
