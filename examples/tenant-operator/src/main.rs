//! `tenant-operator crd` prints the Tenant CRD; `tenant-operator run` runs the operator against
//! the cluster of `$KUBECONFIG` (or in-cluster config).

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
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
    /// Prints the Tenant CRD (YAML).
    Crd,
    /// Prints the RBAC the operator needs (YAML documents): its ServiceAccount in NAMESPACE,
    /// a ClusterRole and binding for what it manages, a Role for its Lease.
    Rbac {
        /// The operator's namespace (where its ServiceAccount and Lease live).
        #[arg(long, default_value = "tenant-system")]
        namespace: String,
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
        Command::Crd => match serde_norway::to_string(&tenant_operator::crd()) {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tenant-operator: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Rbac { namespace } => {
            let mut out = String::new();
            for object in tenant_operator::rbac(&namespace) {
                match serde_norway::to_string(&object) {
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
        manager = manager.leader_election("tenant-operator", elector);
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
    manager.run(terminated()).await?;
    Ok(())
}

/// Completes on SIGTERM or Ctrl-C.
async fn terminated() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
