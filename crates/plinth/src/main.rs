//! `plinth`: the command line. `plinth serve` runs the control plane.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use plinth_apiserver::ServerConfig;
use plinth_store::Store;

/// Plinth: the Kubernetes extension model, whole, in Rust.
#[derive(Parser, Debug)]
#[command(
    name = "plinth",
    version = manual::VERSION,
    after_help = "Examples:\n  plinth serve                      # a control plane and a node agent; prints the kubeconfig's path\n  plinth serve --etcd-servers http://127.0.0.1:2379\n  plinth completion bash > /etc/bash_completion.d/plinth\n  plinth man /usr/local/share/man/man1"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
#[allow(clippy::large_enum_variant)] // parsed once
enum Command {
    /// Runs the API server; writes DIR/kubeconfig and prints its path.
    #[command(
        after_help = "Examples:\n  plinth serve                                  # embedded store, a node agent; prints the kubeconfig path\n  plinth serve --data-dir /var/lib/plinth --listen 0.0.0.0:6443\n  plinth serve --etcd-servers http://127.0.0.1:2379 --data-dir DIR\n  plinth serve --simulate-nodes 100             # 100 simulated nodes beside the real agent\n  plinth serve --no-node --history-retention 24h"
    )]
    Serve {
        /// Data directory: credentials, kubeconfig, and the embedded store.
        #[arg(long, env = "PLINTH_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:6443")]
        listen: SocketAddr,
        /// Use these etcd servers (comma-separated client URLs) instead of the embedded store.
        #[arg(long, value_delimiter = ',')]
        etcd_servers: Vec<String>,
        /// Key prefix in etcd.
        #[arg(long, default_value = "/registry/")]
        etcd_prefix: String,
        /// How often history is compacted (`300s`, `5m`, `1h`; `0s` never).
        #[arg(long, default_value = "5m", value_parser = parse_duration)]
        compaction_interval: std::time::Duration,
        /// How long past revisions of every object are kept, with who made them, for
        /// `plinth history` and the history API (`24h`; `0s`: as long as compaction keeps them).
        #[arg(long, default_value = "0s", value_parser = parse_duration)]
        history_retention: std::time::Duration,
        /// How often watches that allow bookmarks get one.
        #[arg(long, default_value = "60s", value_parser = parse_duration, hide = true)]
        watch_bookmark_interval: std::time::Duration,
        /// How many revisions before the watch cache's window a watch is still served by
        /// replaying storage; an older one gets 410 ("too old resource version"), as every
        /// one does from kube-apiserver. Default: 10000 on etcd (which re-reads a lagging
        /// watcher's whole backlog until it catches up), unlimited on the embedded store.
        #[arg(long, value_name = "REVISIONS")]
        watch_replay_limit: Option<u64>,
        /// Log format.
        #[arg(long, default_value = "text", value_parser = ["text", "json"])]
        log_format: String,
        /// kube's static token file: `token,user,uid[,"group1,group2"]` per line.
        #[arg(long)]
        token_auth_file: Option<PathBuf>,
        /// Requests without credentials act as `system:anonymous` (group
        /// `system:unauthenticated`) and RBAC decides; off, they get 401 but for the health,
        /// version and OIDC documents.
        #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true",
              action = clap::ArgAction::Set)]
        anonymous_auth: bool,
        /// kube's `EncryptionConfiguration`: which resources are encrypted at rest, and how.
        #[arg(long)]
        encryption_provider_config: Option<PathBuf>,
        /// kube's `AdmissionConfiguration`: the PodSecurity plugin's defaults and exemptions.
        #[arg(long)]
        admission_control_config_file: Option<PathBuf>,
        /// Read requests served at once; past it, 429 (0: no limit). Watches are not counted.
        #[arg(long, default_value_t = 400)]
        max_requests_inflight: usize,
        /// Writes served at once; past it, 429 (0: no limit).
        #[arg(long, default_value_t = 200)]
        max_mutating_requests_inflight: usize,
        /// kube's audit policy (`audit.k8s.io/v1` Policy); with --audit-log-path.
        #[arg(long, requires = "audit_log_path")]
        audit_policy_file: Option<PathBuf>,
        /// Where audit events go, one JSON line each.
        #[arg(long, requires = "audit_policy_file")]
        audit_log_path: Option<PathBuf>,
        /// Megabytes before the audit log rotates (0: never).
        #[arg(long, default_value_t = 100)]
        audit_log_maxsize: u64,
        /// Rotated audit logs kept (0: all).
        #[arg(long, default_value_t = 10)]
        audit_log_maxbackup: usize,
        /// How long a node may go unheard before it is `Ready=Unknown` and tainted
        /// unreachable (kube-controller-manager's flag).
        #[arg(long, default_value = "40s", value_parser = parse_duration)]
        node_monitor_grace_period: std::time::Duration,
        /// How often the node lifecycle controller looks at nodes.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        node_monitor_period: std::time::Duration,
        /// The `tolerationSeconds` of the `not-ready:NoExecute` toleration every pod gets
        /// (kube-apiserver's DefaultTolerationSeconds plugin).
        #[arg(long, default_value_t = 300)]
        default_not_ready_toleration_seconds: i64,
        /// The `tolerationSeconds` of the `unreachable:NoExecute` toleration every pod gets.
        #[arg(long, default_value_t = 300)]
        default_unreachable_toleration_seconds: i64,
        /// The Services' addresses (kube-apiserver's flag; default: see --pod-network).
        #[arg(long)]
        service_cluster_ip_range: Option<String>,
        /// The pods' addresses, handed to nodes in /24s (kube-controller-manager's flag;
        /// default: see --pod-network).
        #[arg(long)]
        cluster_cidr: Option<String>,
        /// How pods are networked: `auto` gives each pod a network namespace of its own where
        /// the machine allows (root, `ip`, `nft`), with ranges chosen to miss the machine's
        /// networks, else pods share the machine's network at loopback addresses (`shared`).
        /// The choice is kept in the data directory's network.json.
        #[arg(long, value_enum, default_value = "auto")]
        pod_network: network::PodNetwork,
        /// Run no node agent in the server's process.
        #[arg(long, default_value_t = false)]
        no_node: bool,
        /// Run the built-in controllers (leader-elected with the other servers on the same
        /// storage); `--controllers=false` makes a pure API server.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
            default_missing_value = "true")]
        controllers: bool,
        /// The serving certificate (PEM) in place of the one Plinth signs at start; with
        /// --tls-private-key-file.
        #[arg(long, requires = "tls_private_key_file")]
        tls_cert_file: Option<PathBuf>,
        /// The serving certificate's key (PEM).
        #[arg(long, requires = "tls_cert_file")]
        tls_private_key_file: Option<PathBuf>,
        /// A CA (PEM) whose client certificates are trusted beside the cluster CA's.
        #[arg(long)]
        client_ca_file: Option<PathBuf>,
        /// Admission plugins to turn off (kube's names; `ServiceAccount` is the one Plinth can).
        #[arg(long, value_delimiter = ',', value_parser = ["ServiceAccount"])]
        disable_admission_plugins: Vec<String>,
        /// Keep the cluster DNS Service `kube-system/kube-dns` (the node agents answer its
        /// address); `--cluster-dns=false` leaves the cluster without the DNS add-on.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
            default_missing_value = "true")]
        cluster_dns: bool,
        /// The node agent's settings.
        #[command(flatten)]
        node: node::NodeArgs,
    },
    /// Writes `kube-apiserver` and `etcd` into DIR (links to this binary, which takes their
    /// flags) and `kubectl`, for `KUBEBUILDER_ASSETS=DIR`: controller-runtime's envtest then
    /// runs its control plane on Plinth. Prints DIR.
    #[command(
        after_help = "Examples:\n  plinth envtest-assets ./bin/plinth-assets\n  KUBEBUILDER_ASSETS=$(plinth envtest-assets ./bin/plinth-assets) go test ./..."
    )]
    EnvtestAssets {
        /// Where to write them.
        dir: PathBuf,
    },
    /// Runs a node agent against a Plinth (or Kubernetes) API server: it registers a Node
    /// and runs the Pods bound to it as local processes.
    #[command(
        after_help = "Examples:\n  plinth node --kubeconfig ~/.local/share/plinth/kubeconfig --name second\n  plinth node --kubeconfig KUBECONFIG --simulate 100"
    )]
    Node {
        /// The kubeconfig to reach the API server with.
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: PathBuf,
        /// Where pods' files and logs live (default: the data directory's `node-NAME`).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// The cluster's pod range (kube-proxy's flag; default: the server's, from its data
        /// directory's network.json).
        #[arg(long)]
        cluster_cidr: Option<String>,
        /// The cluster's Service range (default: the server's, as --cluster-cidr).
        #[arg(long)]
        service_cluster_ip_range: Option<String>,
        /// The kubeconfig the agent follows NetworkPolicy with: an account that may list
        /// every pod, namespace and policy (a CNI daemon's; a node's own identity may not,
        /// under kube's Node authorizer). Default: --kubeconfig.
        #[arg(long)]
        policy_kubeconfig: Option<PathBuf>,
        /// The agent's settings.
        #[command(flatten)]
        node: node::NodeArgs,
    },
    /// The container sandbox the node agent runs (not for people).
    #[command(hide = true)]
    Sandbox {
        /// The second stage (inside the new namespaces).
        #[arg(long)]
        stage2: bool,
        /// What to run (JSON).
        spec: String,
    },
    /// Writes a kubeconfig for USER with a fresh client certificate signed by the cluster CA
    /// (an admin's shortcut past the CertificateSigningRequest flow), or for the admin (its
    /// token) without `--user`; with `--servers`, one context per server of a control plane
    /// (`plinth-1`, `plinth-2`, …) and `plinth`, the default, on the first. Prints its path.
    #[command(
        after_help = "Examples:\n  plinth kubeconfig                              # the admin's\n  plinth kubeconfig --user alice --group dev --out alice.kubeconfig\n  plinth kubeconfig --servers 127.0.0.1:6443,127.0.0.1:6444,127.0.0.1:6445"
    )]
    Kubeconfig {
        /// Data directory of the server (its CA and kubeconfig).
        #[arg(long, env = "PLINTH_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// The user name (the certificate's common name); the admin's token without it.
        #[arg(long)]
        user: Option<String>,
        /// The servers, comma-separated (`https://HOST:PORT` or `HOST:PORT`): every server
        /// sharing this data directory's credential files (default: the server of its
        /// kubeconfig).
        #[arg(long, value_delimiter = ',')]
        servers: Vec<String>,
        /// A group (an organization of the certificate); repeatable.
        #[arg(long = "group")]
        groups: Vec<String>,
        /// Where to write it (default: DIR/kubeconfig-USER, or DIR/kubeconfig-servers).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// An object's past revisions with who made each (user, operation, field manager), from
    /// the history API; `--diff` shows each change. Uses the kubeconfig.
    #[command(
        after_help = "Examples:\n  plinth history configmap/settings\n  plinth history deployments.apps/web -n shop --since 10m --diff"
    )]
    History {
        /// `KIND/NAME` (`configmap/settings`, `deployments.apps/web`).
        target: String,
        /// The namespace (default: the kubeconfig context's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Only revisions since then: a duration before now (`10m`) or an RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
        /// `yaml` or `json`: the whole `ObjectHistory` (objects and provenance).
        #[arg(short, long)]
        output: Option<String>,
        /// Each revision's changes as a unified diff (coloured on a terminal).
        #[arg(long)]
        diff: bool,
    },
    /// What happened to an object and everything it owns, in order: its writes and its
    /// descendants' (by ownerReferences), the Events about them, container starts and exits,
    /// with who did each. Uses the kubeconfig.
    #[command(after_help = "Examples:\n  plinth timeline deployment/web --since 1h")]
    Timeline {
        /// `KIND/NAME` (`deployment/web`).
        target: String,
        /// The namespace (default: the kubeconfig context's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Only what happened since then: a duration before now (`10m`) or an RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
        /// `yaml` or `json`: the whole `Timeline`.
        #[arg(short, long)]
        output: Option<String>,
    },
    /// An object, or a resource's objects, as they were at a past revision or time (from the
    /// history the server retains). Uses the kubeconfig.
    #[command(
        after_help = "Examples:\n  plinth get configmap/settings --as-of 10m -o yaml\n  plinth get pods -n shop --as-of 2026-12-01T10:00:00Z"
    )]
    Get {
        /// `KIND/NAME` or `KIND`.
        target: String,
        /// The namespace (default: the kubeconfig context's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// A revision (`1234`), a duration before now (`10m`) or an RFC 3339 time.
        #[arg(long)]
        as_of: String,
        /// `yaml`, `json`, or for a list `name` (the default).
        #[arg(short, long)]
        output: Option<String>,
    },
    /// Writes every object of the given resources back unchanged through the API, so that
    /// storage holds each under the current encryption key (after a key rotation or a new
    /// provider in the `EncryptionConfiguration`). Uses the kubeconfig (`KUBECONFIG` or
    /// `~/.kube/config`).
    #[command(
        after_help = "Examples:\n  plinth rewrite secrets\n  plinth rewrite secrets widgets.example.com"
    )]
    Rewrite {
        /// Resources as kubectl names them: `secrets`, `configmaps`, `widgets.example.com`.
        #[arg(required = true)]
        resources: Vec<String>,
    },
    /// Copies the embedded store of a data directory to FILE at one revision, while its
    /// server runs — or, with `--etcd-servers`, takes an etcd snapshot (for `etcdctl snapshot
    /// restore`); prints the revision.
    #[command(
        after_help = "Examples:\n  plinth backup --to /backups/plinth.db\n  plinth backup --etcd-servers http://127.0.0.1:2379 --to /backups/etcd.snap"
    )]
    Backup {
        /// Data directory of the server.
        #[arg(long, env = "PLINTH_DATA_DIR", conflicts_with = "etcd_servers")]
        data_dir: Option<PathBuf>,
        /// Snapshot this etcd (comma-separated client URLs) instead.
        #[arg(long, value_delimiter = ',')]
        etcd_servers: Vec<String>,
        /// The backup file to create (it may not exist).
        #[arg(long)]
        to: PathBuf,
    },
    /// Copies every object from the embedded store of a data directory into etcd, or from
    /// etcd into a data directory holding no store yet, at one revision; the servers must be
    /// stopped. Into etcd, objects get new resourceVersions past every old one (clients relist
    /// after a 410); into the embedded store they keep theirs.
    #[command(
        after_help = "Examples:\n  plinth migrate --from-data-dir DIR --to-etcd http://127.0.0.1:2379\n  plinth migrate --from-etcd http://127.0.0.1:2379 --to-data-dir NEW"
    )]
    Migrate {
        /// The data directory whose embedded store is copied.
        #[arg(
            long,
            conflicts_with = "from_etcd",
            required_unless_present = "from_etcd"
        )]
        from_data_dir: Option<PathBuf>,
        /// The etcd servers (comma-separated client URLs) whose objects are copied.
        #[arg(long, value_delimiter = ',', requires = "to_data_dir")]
        from_etcd: Vec<String>,
        /// The etcd servers to copy into (under a prefix holding no key).
        #[arg(long, value_delimiter = ',', requires = "from_data_dir")]
        to_etcd: Vec<String>,
        /// The data directory to copy into (it may not hold a store).
        #[arg(long, conflicts_with = "to_etcd")]
        to_data_dir: Option<PathBuf>,
        /// The key prefix in etcd.
        #[arg(long, default_value = plinth_store_etcd::DEFAULT_PREFIX)]
        etcd_prefix: String,
    },
    /// Puts a backup into a data directory holding no store yet (a server started on it
    /// serves the backup's objects at their resourceVersions); prints the revision.
    #[command(after_help = "Examples:\n  plinth restore --from /backups/plinth.db --data-dir NEW")]
    Restore {
        /// The backup file.
        #[arg(long)]
        from: PathBuf,
        /// Data directory to restore into.
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Prints a completion script for SHELL: `source <(plinth completion bash)`, or write it
    /// where the shell loads completions from.
    #[command(
        after_help = "Examples:\n  source <(plinth completion bash)\n  plinth completion zsh > \"${fpath[1]}/_plinth\"\n  plinth completion fish > ~/.config/fish/completions/plinth.fish"
    )]
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Writes man pages (`plinth.1`, `plinth-serve.1`, …) into DIR and prints their paths, or
    /// prints `plinth.1` without DIR.
    #[command(
        after_help = "Examples:\n  plinth man | man -l -\n  plinth man /usr/local/share/man/man1"
    )]
    Man {
        /// Where to write the pages.
        dir: Option<PathBuf>,
    },
    /// Prints the book's command-line reference in Markdown (docs/book/src/reference/cli.md).
    #[command(hide = true)]
    Reference,
}

/// The embedded store's directory inside a data directory.
const STORE_DIR: &str = "store";

/// `90s`, `5m`, `2h`, or plain seconds.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, "s"), |i| text.split_at(i));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: expected e.g. 300s, 5m, 1h"))?;
    let seconds = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => {
            return Err(format!(
                "invalid duration {text:?}: the unit must be s, m or h"
            ));
        }
    };
    Ok(std::time::Duration::from_secs(seconds))
}

mod envtest;
mod history;
mod manual;
mod migrate;
mod network;
mod node;
mod rewrite;

/// The whole command-line definition, built (global settings propagated to subcommands): what
/// completions, man pages and the book's reference are made from.
fn cli_command() -> clap::Command {
    let mut command = <Cli as clap::CommandFactory>::command();
    command.build();
    command
}

/// Runs `work` on a runtime from `builder`.
fn run(
    mut builder: tokio::runtime::Builder,
    work: impl std::future::Future<Output = ExitCode>,
) -> ExitCode {
    match builder.enable_all().build() {
        Ok(runtime) => runtime.block_on(work),
        Err(e) => {
            eprintln!("plinth: cannot start the runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

fn default_data_dir() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local").join("share"))
        });
    base.unwrap_or_else(|| PathBuf::from(".")).join("plinth")
}

/// mimalloc returns freed memory to the system far better than glibc's allocator under the
/// server's many short-lived allocations (request bodies, decoded objects) across threads.
/// (The `system-allocator` feature leaves it out, for heap profilers that follow `malloc`.)
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match envtest::called_as() {
        None => Cli::parse(),
        Some(name) => {
            let args: Vec<String> = std::env::args().skip(1).collect();
            envtest::exit_with_parent(name);
            if name == "etcd" {
                return envtest::etcd(&args);
            }
            match envtest::apiserver_args(&args) {
                Ok(serve) => Cli::parse_from(std::iter::once("plinth".to_owned()).chain(serve)),
                Err(exit) => return exit,
            }
        }
    };
    match cli.command {
        Command::Serve {
            data_dir,
            listen,
            etcd_servers,
            etcd_prefix,
            compaction_interval,
            history_retention,
            watch_bookmark_interval,
            watch_replay_limit,
            log_format,
            token_auth_file,
            anonymous_auth,
            encryption_provider_config,
            admission_control_config_file,
            max_requests_inflight,
            max_mutating_requests_inflight,
            audit_policy_file,
            audit_log_path,
            audit_log_maxsize,
            audit_log_maxbackup,
            no_node,
            controllers,
            node,
            node_monitor_grace_period,
            node_monitor_period,
            default_not_ready_toleration_seconds,
            default_unreachable_toleration_seconds,
            service_cluster_ip_range,
            cluster_cidr,
            pod_network,
            tls_cert_file,
            tls_private_key_file,
            client_ca_file,
            disable_admission_plugins,
            cluster_dns,
        } => {
            init_logging(&log_format);
            plinth_types::core::pod::set_service_account_admission(
                !disable_admission_plugins
                    .iter()
                    .any(|p| p == "ServiceAccount"),
            );
            let watch_replay_limit =
                watch_replay_limit.or((!etcd_servers.is_empty()).then_some(10_000));
            let backend = if etcd_servers.is_empty() {
                Backend::Embedded
            } else {
                Backend::Etcd {
                    endpoints: etcd_servers,
                    prefix: etcd_prefix,
                }
            };
            let storage = Storage {
                backend,
                encryption: encryption_provider_config,
            };
            let pod_security = match admission_control_config_file {
                None => plinth_apiserver::admission_config::PodSecurity::default(),
                Some(path) => match plinth_apiserver::admission_config::pod_security(&path) {
                    Ok(config) => config,
                    Err(e) => {
                        eprintln!("plinth: {e}");
                        return ExitCode::FAILURE;
                    }
                },
            };
            let data_dir = data_dir.unwrap_or_else(default_data_dir);
            let ranges = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
                .and_then(|runtime| {
                    runtime.block_on(network::resolve(
                        &data_dir,
                        cluster_cidr.as_deref(),
                        service_cluster_ip_range.as_deref(),
                        pod_network,
                    ))
                });
            let (pod_range, service_range) = match ranges {
                Ok(ranges) => ranges,
                Err(e) => {
                    eprintln!("plinth: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let config = ServerConfig {
                data_dir,
                listen,
                compaction_interval,
                history_retention,
                bookmark_interval: watch_bookmark_interval,
                watch_replay_limit,
                token_auth_file,
                anonymous_auth,
                max_requests_inflight,
                max_mutating_requests_inflight,
                pod_security,
                serving: plinth_apiserver::ServingFiles {
                    cert_and_key: tls_cert_file.zip(tls_private_key_file),
                    client_ca: client_ca_file,
                },
                cluster_dns,
                audit: audit_policy_file.zip(audit_log_path).map(|(policy, log)| {
                    plinth_apiserver::AuditConfig {
                        policy,
                        log,
                        max_size_mb: audit_log_maxsize,
                        max_backups: audit_log_maxbackup,
                    }
                }),
            };
            let simulated =
                match node::simulated(&node.simulated, node.node_status_update_frequency) {
                    Ok(simulated) => simulated,
                    Err(e) => {
                        eprintln!("plinth: {e}");
                        return ExitCode::FAILURE;
                    }
                };
            let node = (!no_node).then_some(node);
            plinth_types::core::pod::set_default_toleration_seconds(
                default_not_ready_toleration_seconds,
                default_unreachable_toleration_seconds,
            );
            let cluster_cidr =
                match plinth_controllers::nodeipam::ClusterCidr::parse(&pod_range.to_string()) {
                    Ok(range) => range,
                    Err(e) => {
                        eprintln!("plinth: {e}");
                        return ExitCode::FAILURE;
                    }
                };
            if let Err(e) =
                plinth_types::core::service::set_service_range(&service_range.to_string())
            {
                eprintln!("plinth: {e}");
                return ExitCode::FAILURE;
            }
            let settings = plinth_controllers::Settings {
                node_lifecycle: plinth_controllers::nodelifecycle::NodeLifecycle {
                    grace: node_monitor_grace_period,
                    period: node_monitor_period,
                },
                cluster_cidr,
                volumes_dir: PathBuf::new(),
                node_proxy: None,
                identity: None,
                quota_ledger: std::sync::Arc::default(),
                metrics: std::sync::Arc::default(),
            };
            run(
                tokio::runtime::Builder::new_multi_thread(),
                serve(
                    config,
                    storage,
                    node.map(|args| {
                        (
                            args,
                            plinth_node::Ranges {
                                pods: pod_range,
                                services: service_range,
                            },
                        )
                    }),
                    simulated,
                    controllers.then_some(settings),
                ),
            )
        }
        Command::Node {
            kubeconfig,
            data_dir,
            node,
            cluster_cidr,
            service_cluster_ip_range,
            policy_kubeconfig,
        } => {
            init_logging("text");
            match node::simulated(&node.simulated, node.node_status_update_frequency) {
                Err(e) => {
                    eprintln!("plinth: {e}");
                    return ExitCode::FAILURE;
                }
                Ok(Some(simulated)) => {
                    return run(tokio::runtime::Builder::new_multi_thread(), async move {
                        let (stop, stopping) = tokio::sync::watch::channel(false);
                        tokio::spawn(stop_on_signal(stop));
                        match node::run_simulated(simulated, &kubeconfig, stopping).await {
                            Ok(()) => ExitCode::SUCCESS,
                            Err(e) => {
                                eprintln!("plinth: {e}");
                                ExitCode::FAILURE
                            }
                        }
                    });
                }
                Ok(None) => {}
            }
            run(tokio::runtime::Builder::new_multi_thread(), async move {
                let base = default_data_dir();
                let config = match node::config(&node, Path::new(".")) {
                    Ok(mut config) => {
                        config.data_dir =
                            data_dir.unwrap_or_else(|| base.join(format!("node-{}", config.name)));
                        let server_dir = std::env::var_os("PLINTH_DATA_DIR")
                            .map_or_else(|| base.clone(), PathBuf::from);
                        let recorded = network::recorded(&server_dir);
                        let pods = cluster_cidr
                            .as_deref()
                            .and_then(plinth_net::Cidr::parse)
                            .or(recorded.map(|r| r.0));
                        let services = service_cluster_ip_range
                            .as_deref()
                            .and_then(plinth_net::Cidr::parse)
                            .or(recorded.map(|r| r.1));
                        config.ranges = pods
                            .zip(services)
                            .map(|(pods, services)| plinth_node::Ranges { pods, services });
                        config
                    }
                    Err(e) => {
                        eprintln!("plinth: {e}");
                        return ExitCode::FAILURE;
                    }
                };
                let (stop, stopping) = tokio::sync::watch::channel(false);
                tokio::spawn(stop_on_signal(stop));
                match node::run(config, &kubeconfig, policy_kubeconfig.as_deref(), stopping).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("plinth: {e}");
                        ExitCode::FAILURE
                    }
                }
            })
        }
        Command::EnvtestAssets { dir } => match envtest::write_assets(&dir) {
            Ok(()) => {
                println!("{}", dir.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("plinth: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Sandbox { stage2, spec } => {
            let code = plinth_node::sandbox::main(&spec, stage2);
            ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1))
        }
        Command::Kubeconfig {
            data_dir,
            user,
            servers,
            groups,
            out,
        } => {
            if user.is_none() && !groups.is_empty() {
                eprintln!("plinth: --group names a group of --user's certificate: give --user");
                return ExitCode::FAILURE;
            }
            let dir = data_dir.unwrap_or_else(default_data_dir);
            let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
            let out = out.unwrap_or_else(|| match &user {
                Some(user) => dir.join(format!("kubeconfig-{user}")),
                None => dir.join("kubeconfig-servers"),
            });
            let user = user.as_deref().map(|user| (user, groups.as_slice()));
            match plinth_auth::pki::write_cluster_kubeconfig(&dir, &servers, user, &out) {
                Ok(()) => {
                    println!("{}", out.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("plinth: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Backup {
            data_dir,
            etcd_servers,
            to,
        } => {
            if etcd_servers.is_empty() {
                let dir = data_dir.unwrap_or_else(default_data_dir).join(STORE_DIR);
                answer(plinth_store_embedded::backup::backup(&dir, &to))
            } else {
                run(tokio::runtime::Builder::new_current_thread(), async move {
                    let taken = match plinth_store_etcd::EtcdStore::connect(
                        &etcd_servers,
                        plinth_store_etcd::DEFAULT_PREFIX,
                    )
                    .await
                    {
                        Ok(store) => store.snapshot(&to).await,
                        Err(e) => Err(e),
                    };
                    answer(taken)
                })
            }
        }
        Command::Completion { shell } => manual::completion(shell, cli_command()),
        Command::Man { dir } => manual::man(dir.as_deref(), cli_command()),
        Command::Reference => manual::emit(manual::reference(&cli_command()).as_bytes()),
        Command::Restore { from, data_dir } => answer(plinth_store_embedded::backup::restore(
            &from,
            &data_dir.join(STORE_DIR),
        )),
        Command::Migrate {
            from_data_dir,
            from_etcd,
            to_etcd,
            to_data_dir,
            etcd_prefix,
        } => run(tokio::runtime::Builder::new_multi_thread(), async move {
            let outcome = match (from_data_dir, to_data_dir) {
                (Some(from), None) if !to_etcd.is_empty() => {
                    migrate::report(migrate::to_etcd(
                        &from.join(STORE_DIR),
                        &to_etcd,
                        &etcd_prefix,
                    ))
                    .await
                }
                (None, Some(to)) if !from_etcd.is_empty() => {
                    migrate::report(migrate::from_etcd(
                        &from_etcd,
                        &etcd_prefix,
                        &to.join(STORE_DIR),
                    ))
                    .await
                }
                _ => Err(
                    "migrate --from-data-dir DIR --to-etcd URLS, or --from-etcd URLS --to-data-dir DIR"
                        .to_owned(),
                ),
            };
            match outcome {
                Ok(line) => {
                    println!("{line}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("plinth: {e}");
                    ExitCode::FAILURE
                }
            }
        }),
        Command::History {
            target,
            namespace,
            since,
            output,
            diff,
        } => {
            let args = history::HistoryArgs {
                target,
                namespace,
                since,
                output,
                diff,
            };
            run(tokio::runtime::Builder::new_current_thread(), async {
                finish(history::history(&args).await)
            })
        }
        Command::Timeline {
            target,
            namespace,
            since,
            output,
        } => {
            let args = history::HistoryArgs {
                target,
                namespace,
                since,
                output,
                diff: false,
            };
            run(tokio::runtime::Builder::new_current_thread(), async {
                finish(history::timeline(&args).await)
            })
        }
        Command::Get {
            target,
            namespace,
            as_of,
            output,
        } => run(tokio::runtime::Builder::new_current_thread(), async {
            finish(
                history::get_as_of(&target, namespace.as_deref(), &as_of, output.as_deref()).await,
            )
        }),
        Command::Rewrite { resources } => {
            run(tokio::runtime::Builder::new_current_thread(), async {
                match rewrite::run(&resources).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("plinth: {e}");
                        ExitCode::FAILURE
                    }
                }
            })
        }
    }
}

/// The exit of a command: its error printed.
fn finish(outcome: Result<(), String>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plinth: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a backup's or restore's revision, or its error.
fn answer(outcome: plinth_store::StoreResult<plinth_store::Revision>) -> ExitCode {
    match outcome {
        Ok(revision) => {
            println!("{revision}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("plinth: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    // Colour codes only on a terminal: `plinth serve 2> file` writes plain lines.
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if format == "json" {
        subscriber.json().init();
    } else {
        subscriber.init();
    }
}

/// Sends `true` on `stop` at SIGTERM or Ctrl-C. The handlers are in place when this returns
/// (before the future runs): a signal that comes at once after, say, the kubeconfig's path is
/// printed still stops the process cleanly.
fn stop_on_signal(
    stop: tokio::sync::watch::Sender<bool>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = signal(SignalKind::terminate())
        .and_then(|term| signal(SignalKind::interrupt()).map(|interrupt| (term, interrupt)));
    async move {
        let (mut term, mut interrupt) = match handlers {
            Ok(handlers) => handlers,
            Err(e) => {
                tracing::error!(error = %e, "cannot handle SIGTERM");
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
        tracing::info!("shutting down");
        let _ = stop.send(true);
    }
}

/// Where objects are stored and how: the binary picks the backend (and wraps it in
/// encryption at rest); the API server only sees a `dyn Store`.
struct Storage {
    backend: Backend,
    /// The `EncryptionConfiguration` file, if any.
    encryption: Option<PathBuf>,
}

/// The storage backend.
enum Backend {
    /// The embedded store in `<data dir>/store`.
    Embedded,
    /// An etcd cluster.
    Etcd {
        /// Client URLs.
        endpoints: Vec<String>,
        /// Key prefix.
        prefix: String,
    },
}

async fn open_store(
    config: &ServerConfig,
    storage: Storage,
) -> Result<Arc<dyn Store>, plinth_apiserver::ServeError> {
    plinth_apiserver::create_private_dir(&config.data_dir)?;
    let store: Arc<dyn Store> = match storage.backend {
        Backend::Embedded => Arc::new(
            plinth_store_embedded::EmbeddedStore::open(config.data_dir.join(STORE_DIR))
                .map_err(|e| plinth_apiserver::ServeError::Storage(Box::new(e)))?,
        ),
        Backend::Etcd { endpoints, prefix } => Arc::new(
            plinth_store_etcd::EtcdStore::connect(&endpoints, &prefix)
                .await
                .map_err(|e| plinth_apiserver::ServeError::Storage(Box::new(e)))?,
        ),
    };
    let Some(path) = storage.encryption else {
        return Ok(store);
    };
    let encryption = plinth_apiserver::encryption::Encryption::from_file(&path)
        .map_err(plinth_apiserver::ServeError::Encryption)?;
    Ok(Arc::new(plinth_apiserver::encryption::EncryptedStore::new(
        store, encryption,
    )))
}

async fn serve(
    config: ServerConfig,
    storage: Storage,
    node: Option<(node::NodeArgs, plinth_node::Ranges)>,
    simulated: Option<plinth_simnodes::Config>,
    settings: Option<plinth_controllers::Settings>,
) -> ExitCode {
    let data_dir = config.data_dir.clone();
    let started = match open_store(&config, storage).await {
        Ok(store) => plinth_apiserver::start(config, store).await,
        Err(e) => Err(e),
    };
    let server = match started {
        Ok(server) => server,
        Err(e) => {
            eprintln!("plinth: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(mut settings) = settings {
        settings.volumes_dir = data_dir.join("volumes");
        settings.node_proxy = Some(server.nodes.clone());
        settings.quota_ledger = server.quota_ledger.clone();
        settings.metrics = server.metric_sources.clone();
        settings.identity = Some(plinth_controllers::leader::identity_of(&data_dir));
        plinth_controllers::spawn_all(
            server.client.clone(),
            server.stopping(),
            &plinth_controllers::ClusterCa {
                pem: server.ca_pem.clone(),
                signer: server.signer.clone(),
            },
            &settings,
        );
    } else {
        tracing::info!("the built-in controllers are off (--controllers=false)");
    }
    tokio::spawn(stop_on_signal(server.stopper()));
    println!("{}", server.kubeconfig.display());
    let agent = match node {
        Some((args, ranges)) => match node::config(&args, &data_dir) {
            Ok(mut config) => {
                config.data_dir = data_dir.join("node");
                config.ranges = Some(ranges);
                // The agent acts as its node (`system:node:<name>`, group `system:nodes`), and
                // follows NetworkPolicy as a network agent (which may list every pod).
                let kubeconfig = data_dir.join(format!("kubeconfig-node-{}", config.name));
                let policy_kubeconfig =
                    data_dir.join(format!("kubeconfig-network-{}", config.name));
                let written = plinth_auth::pki::write_user_kubeconfig(
                    &data_dir,
                    &format!("system:node:{}", config.name),
                    &[plinth_auth::bootstrap::NODES],
                    &kubeconfig,
                )
                .and_then(|()| {
                    plinth_auth::pki::write_user_kubeconfig(
                        &data_dir,
                        &format!("plinth:network-agent:{}", config.name),
                        &[plinth_auth::bootstrap::NETWORK_AGENTS],
                        &policy_kubeconfig,
                    )
                });
                if let Err(e) = written {
                    eprintln!("plinth: {e}");
                    return ExitCode::FAILURE;
                }
                let stopping = server.stopping();
                Some(tokio::spawn(async move {
                    if let Err(e) =
                        node::run(config, &kubeconfig, Some(&policy_kubeconfig), stopping).await
                    {
                        tracing::error!(error = %e, "the node agent stopped");
                    }
                }))
            }
            Err(e) => {
                eprintln!("plinth: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let simulator = match simulated {
        Some(simulated) => {
            // The simulated nodes act as one identity that may write every node and pod.
            let kubeconfig = data_dir.join("kubeconfig-simulated-nodes");
            if let Err(e) = plinth_auth::pki::write_user_kubeconfig(
                &data_dir,
                "plinth:simulated-nodes",
                &["system:masters"],
                &kubeconfig,
            ) {
                eprintln!("plinth: {e}");
                return ExitCode::FAILURE;
            }
            let stopping = server.stopping();
            Some(tokio::spawn(async move {
                if let Err(e) = node::run_simulated(simulated, &kubeconfig, stopping).await {
                    tracing::error!(error = %e, "the simulated nodes stopped");
                }
            }))
        }
        None => None,
    };
    server.wait().await;
    if let Some(agent) = agent {
        let _ = agent.await;
    }
    if let Some(simulator) = simulator {
        let _ = simulator.await;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod manual_tests {
    use super::{cli_command as command, manual};
    use manual::{VERSION, reference};

    #[test]
    fn the_version_names_the_kubernetes_version_served() {
        let served = format!(
            "v{}.{}",
            plinth_apiserver::discovery::KUBE_MAJOR,
            plinth_apiserver::discovery::KUBE_MINOR
        );
        assert!(
            VERSION.contains(&format!("Kubernetes {served} API")),
            "{VERSION}"
        );
    }

    #[test]
    fn the_reference_names_every_visible_subcommand_and_flag() {
        let page = reference(&command());
        for sub in command().get_subcommands().filter(|s| !s.is_hide_set()) {
            if sub.get_name() == "help" {
                continue;
            }
            assert!(
                page.contains(&format!("\n## plinth {}\n", sub.get_name())),
                "{}",
                sub.get_name()
            );
            for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(long) = arg.get_long().filter(|l| *l != "help") {
                    assert!(
                        page.contains(&format!("--{long} "))
                            || page.contains(&format!("--{long}`")),
                        "--{long} of {}",
                        sub.get_name()
                    );
                }
            }
        }
        assert!(
            !page.contains("## plinth sandbox"),
            "hidden subcommands stay out"
        );
    }

    #[test]
    fn every_shell_gets_a_completion_script_naming_the_subcommands() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let out = manual::completion_script(shell, command());
            let script = String::from_utf8_lossy(&out);
            for name in ["serve", "node", "kubeconfig", "backup"] {
                assert!(script.contains(name), "{shell}: {name}");
            }
        }
    }
}
