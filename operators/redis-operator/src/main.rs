//! `redis-operator crd` prints the RedisCluster CRD; `redis-operator rbac` its RBAC;
//! `redis-operator run` runs the operator against the cluster of `$KUBECONFIG` (or the
//! in-cluster configuration), like any kube client.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use plinth_runtime::{LeaderElector, Manager};

#[derive(Parser)]
#[command(about = "Runs RedisClusters: a primary and replicas, failover, scaling, backups")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Prints the RedisCluster CRD (YAML).
    Crd,
    /// Prints the RBAC the operator needs (YAML documents) for its ServiceAccount in
    /// NAMESPACE.
    Rbac {
        /// The operator's namespace.
        #[arg(long, default_value = "redis-system")]
        namespace: String,
    },
    /// Prints how the operator is deployed (YAML documents): its namespace, RBAC and a
    /// Deployment of two replicas with leader election.
    Manifests {
        /// The operator's namespace.
        #[arg(long, default_value = "redis-system")]
        namespace: String,
        /// The operator's image.
        #[arg(long, default_value = redis_operator::IMAGE)]
        image: String,
    },
    /// Prints the webhook configurations (YAML) for the operator's webhook server at URL, or
    /// behind the Service `manifests` deploys in NAMESPACE.
    WebhookConfig {
        /// The server's base URL (`https://127.0.0.1:9443`).
        #[arg(
            long,
            required_unless_present = "namespace",
            conflicts_with = "namespace"
        )]
        url: Option<String>,
        /// The operator's namespace (the webhook Service's).
        #[arg(long)]
        namespace: Option<String>,
    },
    /// Prints the Secret (YAML) the deployed webhook servers mount: a new CA and a
    /// certificate for the webhook Service of NAMESPACE. Apply it before `manifests`.
    WebhookSecret {
        /// The operator's namespace.
        #[arg(long, default_value = "redis-system")]
        namespace: String,
    },
    /// Runs the operator.
    Run {
        /// Also serve the admission webhooks here (TLS, a certificate of its own made in
        /// --webhook-cert-dir, its CA written into the webhook configurations).
        #[arg(long)]
        webhook_bind_address: Option<SocketAddr>,
        /// Where the webhook certificate lives (`ca.crt`, `tls.crt`, `tls.key`).
        #[arg(long, default_value = "./redis-operator-certs")]
        webhook_cert_dir: std::path::PathBuf,
        /// Run only while holding the `redis-operator` Lease.
        #[arg(long)]
        leader_elect: bool,
        /// Namespace of the Lease.
        #[arg(long, default_value = "default")]
        leader_election_namespace: String,
        /// Where `/metrics` is served.
        #[arg(long, default_value = "127.0.0.1:8080")]
        metrics_bind_address: SocketAddr,
        /// Where `/healthz` and `/readyz` are served.
        #[arg(long, default_value = "127.0.0.1:8081")]
        health_probe_bind_address: SocketAddr,
        /// How long a primary may be unreachable before a replica replaces it (seconds).
        #[arg(long, default_value_t = 15)]
        failover_after_seconds: u64,
        /// How servers are addressed: `names` (their stable DNS names, which resolve in a
        /// pod), `ips` (their pods' addresses, for an operator outside the cluster), or
        /// `auto`: names when running in a pod (`KUBERNETES_SERVICE_HOST` set).
        #[arg(long, default_value = "auto", value_parser = ["auto", "names", "ips"])]
        server_addresses: String,
        /// The cluster's DNS domain.
        #[arg(long, default_value = "cluster.local")]
        cluster_domain: String,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let outcome = match Cli::parse().command {
        Command::Crd => {
            print_yaml(&[serde_json::to_value(redis_operator::types::crd()).unwrap_or_default()])
        }
        Command::Rbac { namespace } => print_yaml(&redis_operator::rbac(&namespace)),
        Command::Manifests { namespace, image } => {
            print_yaml(&redis_operator::manifests(&namespace, &image))
        }
        Command::WebhookConfig { url, namespace } => match (url, namespace) {
            (Some(url), _) => print_yaml(&redis_operator::webhooks::configurations(&url)),
            (None, namespace) => {
                let namespace = namespace.unwrap_or_default();
                print_yaml(&redis_operator::webhooks::configurations(
                    redis_operator::webhook_service(&namespace),
                ))
            }
        },
        Command::WebhookSecret { namespace } => {
            redis_operator::webhook_secret(&namespace).and_then(|secret| print_yaml(&[secret]))
        }
        Command::Run {
            webhook_bind_address,
            webhook_cert_dir,
            leader_elect,
            leader_election_namespace,
            metrics_bind_address,
            health_probe_bind_address,
            failover_after_seconds,
            server_addresses,
            cluster_domain,
        } => tokio::runtime::Runtime::new()
            .map_err(|e| e.to_string())
            .and_then(|runtime| {
                runtime
                    .block_on(run(Options {
                        webhook: webhook_bind_address.map(|a| (a, webhook_cert_dir)),
                        leader_elect,
                        leader_election_namespace,
                        metrics_bind_address,
                        health_probe_bind_address,
                        failover_after: Duration::from_secs(failover_after_seconds),
                        cluster_domain: match server_addresses.as_str() {
                            "names" => Some(cluster_domain),
                            "ips" => None,
                            _ => {
                                std::env::var_os("KUBERNETES_SERVICE_HOST").map(|_| cluster_domain)
                            }
                        },
                    }))
                    .map_err(|e| e.to_string())
            }),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("redis-operator: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints `objects` as YAML documents.
fn print_yaml(objects: &[serde_json::Value]) -> Result<(), String> {
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(object).map_err(|e| e.to_string())?);
    }
    use std::io::Write;
    std::io::stdout()
        .write_all(out.as_bytes())
        .map_err(|e| e.to_string())
}

struct Options {
    webhook: Option<(SocketAddr, std::path::PathBuf)>,
    leader_elect: bool,
    leader_election_namespace: String,
    metrics_bind_address: SocketAddr,
    health_probe_bind_address: SocketAddr,
    failover_after: Duration,
    cluster_domain: Option<String>,
}

async fn run(options: Options) -> Result<(), Box<dyn std::error::Error>> {
    // The pod's name in a cluster (or the host's), and this process.
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "redis-operator".into());
    // Unique per process, as client-go's (a restarted container keeps its host name and
    // may get its PID back, yet must not take over the dead one's Lease as if it held it).
    let identity = format!("{host}_{}", uuid::Uuid::new_v4());
    // Every request names this process (the audit log's userAgent): which replica did what.
    let mut config = kube::Config::infer().await?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&format!("redis-operator/{identity}"))?,
    ));
    let client = kube::Client::try_from(config)?;
    let mut manager = Manager::new();
    // The reconcilers' client: with leader election, fenced by it (a write after the lease is
    // lost is refused unsent, so the old leader never writes beside the new one).
    let mut reconciling = client.clone();
    if options.leader_elect {
        let elector = LeaderElector::new(
            client.clone(),
            &options.leader_election_namespace,
            "redis-operator",
            &identity,
        );
        reconciling = elector.fence(client.clone());
        manager = manager.leader_election(elector);
    }
    let metrics = manager.bind_metrics(options.metrics_bind_address).await?;
    let probes = manager
        .bind_health_probes(options.health_probe_bind_address)
        .await?;
    tracing::info!(%metrics, %probes, leader_elect = options.leader_elect, "redis-operator running");
    let webhooks = match options.webhook {
        Some((address, dir)) => Some(serve_webhooks(&client, address, &dir).await?),
        None => None,
    };
    let mut context = redis_operator::Context::new(reconciling, &identity, manager.metrics());
    context.failover_after = options.failover_after;
    context.cluster_domain = options.cluster_domain;
    redis_operator::register(&mut manager, context)?;
    manager.run(plinth_runtime::shutdown_signal()).await?;
    if let Some(running) = webhooks {
        running.shutdown().await;
    }
    Ok(())
}

/// Serves the webhooks on `address` with the certificate in `dir` (made there if missing)
/// and writes its CA into the two configurations.
async fn serve_webhooks(
    client: &kube::Client,
    address: SocketAddr,
    dir: &std::path::Path,
) -> Result<plinth_runtime::webhook::RunningWebhookServer, Box<dyn std::error::Error>> {
    use plinth_runtime::webhook::{CaTarget, inject_ca_bundle, self_signed};
    let host = address.ip().to_string();
    let certificate = self_signed(dir, &[host.as_str(), "localhost"])?;
    let running = redis_operator::webhooks::server()
        .bind(address, certificate.source)
        .await?;
    let name = redis_operator::webhooks::CONFIGURATION.to_owned();
    inject_ca_bundle(
        client,
        &certificate.ca_pem,
        &[CaTarget::Mutating(name.clone()), CaTarget::Validating(name)],
    )
    .await?;
    tracing::info!(address = %running.local_addr, "webhooks served");
    Ok(running)
}
