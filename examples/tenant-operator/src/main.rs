//! `tenant-operator crd` prints the Tenant CRD; `tenant-operator run` runs the operator against
//! the cluster of `$KUBECONFIG` (or in-cluster config).

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use plinth_runtime::webhook::WebhookEndpoint;
use plinth_runtime::{LeaderElector, Manager};

#[derive(Parser)]
#[command(
    about = "Keeps a namespace, an admin ServiceAccount and a config ConfigMap for each Tenant"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Prints the Tenant CRD (YAML): v1alpha1; with --conversion-url or --conversion-service,
    /// v1alpha1 and v1beta1 stored in v1beta1 and converted by the webhook server there.
    Crd {
        /// The webhook server's base URL (`https://127.0.0.1:9443`).
        #[arg(long, conflicts_with = "conversion_service")]
        conversion_url: Option<String>,
        /// The webhook server's Service (`namespace/name[:port]`), in the cluster.
        #[arg(long)]
        conversion_service: Option<String>,
    },
    /// Prints the RBAC the operator needs (YAML documents): its ServiceAccount in NAMESPACE,
    /// a ClusterRole and binding for what it manages, a Role for its Lease.
    Rbac {
        /// The operator's namespace (where its ServiceAccount and Lease live).
        #[arg(long, default_value = "tenant-system")]
        namespace: String,
    },
    /// Prints the webhook configurations (YAML) for a webhook server at URL or behind SERVICE.
    WebhookConfig {
        /// The server's base URL (`https://127.0.0.1:9443`).
        #[arg(long, required_unless_present = "service", conflicts_with = "service")]
        url: Option<String>,
        /// The server's Service (`namespace/name[:port]`), in the cluster.
        #[arg(long)]
        service: Option<String>,
    },
    /// Serves the admission webhooks over TLS with a certificate of its own (made in
    /// CERT_DIR if missing) and writes its CA into the webhook configurations.
    Webhook {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:9443")]
        bind_address: SocketAddr,
        /// Where the certificate lives (`ca.crt`, `tls.crt`, `tls.key`).
        #[arg(long)]
        cert_dir: PathBuf,
        /// The Service the server is behind (`namespace/name`), in the cluster: its names go
        /// into the certificate.
        #[arg(long)]
        service: Option<String>,
    },
    /// Runs the operator.
    Run {
        /// Run only while holding the `tenant-operator` Lease.
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
        /// Where deleted tenants are archived.
        #[arg(long, default_value = "./tenant-archive")]
        archive_dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd {
            conversion_url,
            conversion_service,
        } => {
            let crd = match (conversion_url, conversion_service) {
                (Some(url), _) => tenant_operator::crd_with_conversion(url.as_str()),
                (None, Some(service)) => match WebhookEndpoint::service(&service) {
                    Some(service) => tenant_operator::crd_with_conversion(service),
                    None => Err(bad_service(&service)),
                },
                (None, None) => Ok(tenant_operator::crd()),
            };
            match crd.and_then(|c| serde_norway::to_string(&c).map_err(|e| e.to_string())) {
                Ok(yaml) => {
                    print!("{yaml}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("tenant-operator: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::WebhookConfig { url, service } => match (url, service) {
            (Some(url), _) => print_yaml(&tenant_operator::webhooks::configurations(url.as_str())),
            (None, Some(service)) => match WebhookEndpoint::service(&service) {
                Some(service) => print_yaml(&tenant_operator::webhooks::configurations(service)),
                None => {
                    eprintln!("tenant-operator: {}", bad_service(&service));
                    ExitCode::FAILURE
                }
            },
            (None, None) => ExitCode::FAILURE,
        },
        Command::Webhook {
            bind_address,
            cert_dir,
            service,
        } => {
            let names = match service.as_deref().map(WebhookEndpoint::service) {
                Some(Some(service)) => service.dns_names(),
                Some(None) => {
                    eprintln!(
                        "tenant-operator: {}",
                        bad_service(service.as_deref().unwrap_or(""))
                    );
                    return ExitCode::FAILURE;
                }
                None => Vec::new(),
            };
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(e) => {
                    eprintln!("tenant-operator: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(webhook(bind_address, cert_dir, names)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tenant-operator: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Rbac { namespace } => print_yaml(&tenant_operator::rbac(&namespace)),
        Command::Run {
            leader_elect,
            leader_election_namespace,
            metrics_bind_address,
            health_probe_bind_address,
            archive_dir,
        } => {
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(e) => {
                    eprintln!("tenant-operator: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let options = RunOptions {
                leader_elect,
                leader_election_namespace,
                metrics_bind_address,
                health_probe_bind_address,
                archive_dir,
            };
            match runtime.block_on(run(options)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tenant-operator: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Prints `objects` as YAML documents.
fn print_yaml(objects: &[serde_json::Value]) -> ExitCode {
    let mut out = String::new();
    for object in objects {
        match serde_norway::to_string(object) {
            Ok(yaml) => out.push_str(&format!("---\n{yaml}")),
            Err(e) => {
                eprintln!("tenant-operator: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    use std::io::Write;
    match std::io::stdout().write_all(out.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

fn bad_service(text: &str) -> String {
    format!("{text:?} is not a Service reference (namespace/name[:port])")
}

/// Serves the webhooks until SIGTERM (a certificate for the address, `localhost` and
/// `names`); prints the address once listening.
async fn webhook(
    address: SocketAddr,
    cert_dir: PathBuf,
    names: Vec<String>,
) -> Result<(), Box<dyn std::error::Error>> {
    use plinth_runtime::webhook::{CaTarget, inject_ca_bundle, self_signed};
    let host = address.ip().to_string();
    let mut hosts = vec![host.as_str(), "localhost"];
    hosts.extend(names.iter().map(String::as_str));
    let certificate = self_signed(&cert_dir, &hosts)?;
    let running = tenant_operator::webhooks::server()
        .bind(address, certificate.source)
        .await?;
    let client = kube::Client::try_default().await?;
    let name = tenant_operator::webhooks::CONFIGURATION.to_owned();
    let mut targets = vec![CaTarget::Mutating(name.clone()), CaTarget::Validating(name)];
    // The CRD's conversion webhook too, when the CRD converts through this server.
    let crds: kube::Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = kube::Api::all(client.clone());
    if crds
        .get_opt("tenants.platform.plinth.dev")
        .await?
        .and_then(|c| c.spec.conversion)
        .is_some_and(|c| c.strategy == "Webhook")
    {
        targets.push(CaTarget::Conversion("tenants.platform.plinth.dev".into()));
    }
    inject_ca_bundle(&client, &certificate.ca_pem, &targets).await?;
    println!("https://{}", running.local_addr);
    plinth_runtime::shutdown_signal().await;
    running.shutdown().await;
    Ok(())
}

struct RunOptions {
    leader_elect: bool,
    leader_election_namespace: String,
    metrics_bind_address: SocketAddr,
    health_probe_bind_address: SocketAddr,
    archive_dir: PathBuf,
}

async fn run(options: RunOptions) -> Result<(), Box<dyn std::error::Error>> {
    let client = kube::Client::try_default().await?;
    let identity = format!(
        "{}-{}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "tenant-operator".into()),
        std::process::id()
    );
    let mut manager = Manager::new();
    if options.leader_elect {
        let elector = LeaderElector::new(
            client.clone(),
            &options.leader_election_namespace,
            "tenant-operator",
            &identity,
        );
        manager = manager.leader_election(elector);
    }
    manager.bind_metrics(options.metrics_bind_address).await?;
    manager
        .bind_health_probes(options.health_probe_bind_address)
        .await?;
    let context = tenant_operator::Context {
        client: client.clone(),
        archive_dir: options.archive_dir,
        recorder: plinth_runtime::helpers::EventRecorder::new(
            client,
            "platform.plinth.dev/tenant-operator",
            &identity,
        ),
    };
    tenant_operator::register(&mut manager, context)?;
    manager.run(plinth_runtime::shutdown_signal()).await?;
    Ok(())
}
