//! `plinth-bench`: a load generator that talks to any Kubernetes API server through a
//! kubeconfig, so that the same figures can be taken against Plinth and against a cluster.
//!
//! `plinth-bench load` measures, on a throw-away CRD (`benchobjects.bench.plinth.dev`) it
//! installs and removes: creates/s of a 1 KiB custom resource at 1, 16 and 64 concurrent
//! clients; gets/s; the latency of listing 10,000 objects; watch delivery latency p50/p99 with
//! 100 and 1,000 watchers; and the server's resident memory when given its pid.
//! `plinth-bench ha` starts N servers on a three-member etcd and measures creates and watch
//! latency across them and the controllers' failover.
//! `plinth-bench million` fills one server with a million ConfigMaps and measures it.
//! `plinth-bench startup` measures how soon `plinth serve` answers `/readyz` after it is started.
//! `plinth-bench gc` measures reads while the garbage collector deletes 50,000 dependents.
//! `plinth-bench reads` measures the server time of lists (JSON, protobuf, selected,
//! paginated) of 10,000 1-KiB ConfigMaps and the memory they take.
//! `plinth-bench robustness` drives mixed traffic under faults and checks the recorded history
//! with `plinth-check`.

#![forbid(unsafe_code)]

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::common::{client, config};
use crate::load::{load, startup};

mod admission;
mod common;
mod deployments;
mod failover;
mod fairness;
mod gc;
mod ha;
mod history;
mod load;
mod million;
mod network;
mod operator_cache;
mod pods;
mod reads;
mod reconcile;
mod robustness;
mod simulated;
mod watchers;

#[derive(Parser, Debug)]
#[command(
    name = "plinth-bench",
    version,
    about = "Load generator for Kubernetes API servers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Loads the server the kubeconfig points at.
    Load {
        /// Kubeconfig of the server under test (default: $KUBECONFIG, then ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Seconds per create/get measurement.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Objects in the list measurement.
        #[arg(long, default_value_t = 10_000)]
        list_objects: usize,
        /// Watcher counts for the watch-latency measurements.
        #[arg(long, value_delimiter = ',', default_value = "100,1000")]
        watchers: Vec<usize>,
        /// The server's process id, to report its resident memory.
        #[arg(long)]
        pid: Option<u32>,
        /// Namespace to work in.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// Writes to other objects first (history in the store), as `reads --history`.
        #[arg(long, default_value_t = 0)]
        history: usize,
    },
    /// Reconcile throughput, latency (create → status written) and cache memory per object, on
    /// plinth-runtime or kube-runtime (run once per runtime: memory is this process's).
    Reconcile {
        /// Kubeconfig of the server (default: $KUBECONFIG, then ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// `plinth`, `plinth-stripped` (its cache drops managedFields) or `kube`.
        #[arg(long, default_value = "plinth")]
        runtime: String,
        /// How many objects.
        #[arg(long, default_value_t = 1000)]
        objects: usize,
    },
    /// Reads during a garbage collection: GET latency while the collector deletes the
    /// dependents of deleted owners, and how long it takes.
    Gc {
        /// Kubeconfig of the server (default: $KUBECONFIG, then ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Owners (ConfigMaps).
        #[arg(long, default_value_t = 10_000)]
        owners: usize,
        /// Dependents per owner.
        #[arg(long, default_value_t = 5)]
        dependents: usize,
        /// Namespace to work in.
        #[arg(long, default_value = "default")]
        namespace: String,
    },
    /// Server time of reads: full lists of 1-KiB ConfigMaps (JSON and protobuf, read to the
    /// last byte, not decoded), a label-selected list, a paginated traversal, memory per object.
    Reads {
        /// Kubeconfig of the server (default: $KUBECONFIG, then ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// ConfigMaps to fill the namespace with.
        #[arg(long, default_value_t = 10_000)]
        objects: usize,
        /// Writes to other objects before the reads are timed (history in the store).
        #[arg(long, default_value_t = 0)]
        history: usize,
        /// The server's process id, to report its resident memory.
        #[arg(long)]
        pid: Option<u32>,
    },
    /// The history API's costs: an object's history with N revisions, a diff, a list as of a
    /// past revision against a current one, the store's growth per retained revision.
    History {
        /// Kubeconfig of the server (default: $KUBECONFIG, then ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Revisions of the one object.
        #[arg(long, default_value_t = 1_000)]
        revisions: usize,
        /// ConfigMaps for the past and present lists.
        #[arg(long, default_value_t = 10_000)]
        objects: usize,
        /// The server's data directory (embedded store), to measure its growth.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// One user floods the server past its in-flight limit while another reads: the other's
    /// latency and refusals (fair queuing). Both users must be in the server's token file.
    Fairness {
        /// The administrator's kubeconfig (binds the users to `view`, fills a namespace).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// The flooding user, as `name:token`.
        #[arg(long, default_value = "flood:flood-token")]
        flood: String,
        /// The other user, as `name:token`.
        #[arg(long, default_value = "calm:calm-token")]
        other: String,
        /// Concurrent clients of the flood.
        #[arg(long, default_value_t = 100)]
        clients: usize,
        /// Seconds the other user is measured under the flood.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// What admission webhooks cost a create: latency and throughput with 0, 1 and 5
    /// validating webhooks (served by this process) in force.
    Admission {
        /// Kubeconfig of the server (default: $KUBECONFIG, then ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Sequential creates per webhook count.
        #[arg(long, default_value_t = 500)]
        requests: usize,
        /// Webhook counts, ascending.
        #[arg(long, value_delimiter = ',', default_value = "0,1,5")]
        webhooks: Vec<usize>,
    },
    /// Cluster DNS from the machine over UDP: queries per second and latency.
    Dns {
        /// Kubeconfig of the server (to find the `kube-dns` Service's address).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// The DNS server (default: the `kube-system/kube-dns` ClusterIP, port 53).
        #[arg(long)]
        server: Option<std::net::SocketAddr>,
        /// The name asked for (type A).
        #[arg(long, default_value = "kubernetes.default.svc.cluster.local")]
        name: String,
        /// Seconds of load.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Queries in flight (one socket each).
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
    },
    /// Small HTTP requests through a ClusterIP from a pod: servers and the load generator are
    /// pods of IMAGE, which the node's image map must map to this binary.
    Services {
        /// Kubeconfig of the server under test.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Namespace to work in.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// The image standing for `plinth-bench`.
        #[arg(long, default_value = "example.com/plinth-bench:latest")]
        image: String,
        /// Server pods behind the Service.
        #[arg(long, default_value_t = 2)]
        replicas: usize,
        /// Seconds of load.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Kept-open connections of the load generator.
        #[arg(long, default_value_t = 32)]
        connections: usize,
    },
    /// Mixed traffic under faults (SIGKILL and SIGSTOP of servers and etcd members), every
    /// call and watch event recorded and checked: linearizable writes, consistent reads,
    /// watch guarantees, acknowledged writes durable. Fails on any violation.
    Robustness {
        /// The plinth binary.
        #[arg(long, default_value = "target/release/plinth")]
        binary: PathBuf,
        /// Servers on a new three-member etcd instead of one on the embedded store.
        #[arg(long)]
        etcd: bool,
        /// Servers (with --etcd).
        #[arg(long, default_value_t = 3)]
        servers: usize,
        /// Seconds of traffic.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Concurrent clients, spread over the servers.
        #[arg(long, default_value_t = 8)]
        clients: u32,
        /// Keys (ConfigMaps) the clients share; half the calls go to three of them.
        #[arg(long, default_value_t = 10)]
        keys: u64,
        /// Faults, taken in turn: kill-server, pause-server, partition-server, kill-member,
        /// pause-member, partition-member (all but the first two with --etcd; partitions put
        /// every server and member in a network namespace, as root), or none.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "kill-server,pause-server"
        )]
        faults: Vec<String>,
        /// Seconds between faults.
        #[arg(long, default_value_t = 5)]
        fault_interval: u64,
        /// Where to write the recorded history (JSON), for `check-history`.
        #[arg(long)]
        history: Option<PathBuf>,
    },
    /// Checks a history `robustness --history` recorded.
    CheckHistory {
        /// The history file.
        path: PathBuf,
    },
    /// (In a pod, for `services`.) Answers HTTP requests with `ok`.
    HttpServe {
        /// Where to listen.
        #[arg(long)]
        listen: std::net::SocketAddr,
    },
    /// (In a pod, for `services`.) Sends GETs to URL and prints the rate and latency.
    HttpLoad {
        /// `http://host:port/path`.
        #[arg(long)]
        url: String,
        /// Seconds of load.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Kept-open connections.
        #[arg(long, default_value_t = 32)]
        connections: usize,
    },
    /// Starts pods on the server's node agents: pods Ready per second, create → Ready
    /// latency, memory per pod.
    Pods {
        /// Kubeconfig of the server under test.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Namespace to create them in.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// How many.
        #[arg(long, default_value_t = 100)]
        pods: usize,
        /// The process running the node agent (`plinth serve`'s, or `plinth node`'s), for its
        /// memory.
        #[arg(long)]
        agent_pid: Option<u32>,
        /// The API server's process, when the agent runs apart (`plinth node`), for its memory.
        #[arg(long)]
        server_pid: Option<u32>,
        /// Each pod created once the one before is Ready (a pod's own start, not a burst's).
        #[arg(long)]
        one_at_a_time: bool,
    },
    /// A Deployment on the server's node agents: the time until its replicas are available
    /// and until a rolling update finishes, the server's memory.
    Deployments {
        /// Kubeconfig of the server under test.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Namespace to create it in.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// Replicas.
        #[arg(long, default_value_t = 100)]
        replicas: usize,
        /// The server's process (`plinth serve`, which runs the controllers), for its memory.
        #[arg(long)]
        server_pid: Option<u32>,
        /// Only create the pods (a server with `--no-node`): the controllers' memory per pod.
        #[arg(long)]
        pending: bool,
    },
    /// A RedisCluster's failover on this machine's node agent, with the RedisCluster
    /// operator running: SIGKILLs the primary's process `kills` times and times until a
    /// write through the `-primary` Service is accepted again (p50/p99).
    RedisFailover {
        /// Kubeconfig of the server under test.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Namespace to create the cluster in.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// How many times the primary is killed.
        #[arg(long, default_value_t = 20)]
        kills: usize,
        /// Hang the primary (SIGSTOP, resumed after) instead of killing it.
        #[arg(long)]
        hang: bool,
    },
    /// The RedisCluster operator's cache memory per object: as shipped (managedFields
    /// stripped), keeping managedFields, and kube-runtime reflectors of the same kinds.
    OperatorCache {
        /// Kubeconfig of the server under test.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Namespace of the clusters (kept between runs).
        #[arg(long, default_value = "cache-bench")]
        namespace: String,
        /// How many RedisClusters (each with its StatefulSet, 3 Services, ConfigMap,
        /// CronJob and 3 pods).
        #[arg(long, default_value_t = 300)]
        clusters: usize,
        /// `lean`, `full` or `kube`.
        #[arg(long, default_value = "lean")]
        runtime: String,
    },
    /// A control plane of SERVERS Plinth servers on a three-member etcd, started here:
    /// creates/s over the servers, watch latency across them, and (several servers) the
    /// controllers' failover after SIGKILL of the Lease holder.
    Ha {
        /// The plinth binary.
        #[arg(long, default_value = "target/release/plinth")]
        binary: PathBuf,
        /// Plinth servers.
        #[arg(long, default_value_t = 3)]
        servers: usize,
        /// Seconds per create measurement.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Failovers timed (with two servers or more).
        #[arg(long, default_value_t = 5)]
        failovers: usize,
    },
    /// Starts `plinth serve --no-node` and `plinth node --simulate NODES`; times one Deployment of
    /// `replicas` pods until all are Running and Ready (created, bound, scheduling rate),
    /// with the API's latency during it against kube's SLOs and the server's memory per pod.
    Simulated {
        /// The plinth binary.
        #[arg(long, default_value = "target/release/plinth")]
        binary: PathBuf,
        /// Simulated nodes.
        #[arg(long, default_value_t = 100)]
        nodes: usize,
        /// The Deployment's replicas.
        #[arg(long, default_value_t = 5000)]
        replicas: usize,
        /// Pods of a second Deployment created while every node is cordoned, then scheduled
        /// at once (the scheduler's own pace).
        #[arg(long, default_value_t = 2000)]
        queued: usize,
    },
    /// Starts `plinth serve --no-node` and opens WATCHERS watches of ConfigMaps (per
    /// namespace, and 1 in 100 cluster-wide by label), then writes RATE a second: delivery
    /// latency, events missed, server memory per watcher (needs `ulimit -n` above WATCHERS).
    Watchers {
        /// The plinth binary.
        #[arg(long, default_value = "target/release/plinth")]
        binary: PathBuf,
        /// Watches to open.
        #[arg(long, default_value_t = 10_000)]
        watchers: usize,
        /// Namespaces the per-namespace watches spread over.
        #[arg(long, default_value_t = 100)]
        namespaces: usize,
        /// Writes a second.
        #[arg(long, default_value_t = 100)]
        rate: usize,
        /// Seconds of writes.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// Carries the watches over HTTP/2 connections, this many streams each (as client-go
        /// multiplexes its watches); 0: one HTTP/1.1 connection per watch (as kube-rs does).
        #[arg(long, default_value_t = 0)]
        http2_streams: usize,
    },
    /// Starts `plinth serve --no-node` (embedded, or on an etcd started here) and fills it
    /// with a million 1-KiB ConfigMaps: memory, store size, watches from old revisions,
    /// `limit=500` pages, backup, restart to ready, compaction.
    Million {
        /// The plinth binary.
        #[arg(long, default_value = "target/release/plinth")]
        binary: PathBuf,
        /// ConfigMaps to create.
        #[arg(long, default_value_t = 1_000_000)]
        objects: usize,
        /// Namespaces they spread over.
        #[arg(long, default_value_t = 1_000)]
        namespaces: usize,
        /// Concurrent clients creating them.
        #[arg(long, default_value_t = 64)]
        clients: usize,
        /// Store them in an etcd started here instead of the embedded store.
        #[arg(long)]
        etcd: bool,
        /// The server's data directory, kept afterwards (default: a temporary one).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Starts `plinth serve` and measures the time until `/readyz` answers.
    Startup {
        /// The plinth binary.
        #[arg(long, default_value = "target/release/plinth")]
        binary: PathBuf,
        /// Runs.
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Command::Load {
            kubeconfig,
            seconds,
            list_objects,
            watchers,
            pid,
            namespace,
            history,
        } => {
            load(
                kubeconfig,
                seconds,
                list_objects,
                watchers,
                pid,
                namespace,
                history,
            )
            .await
        }
        Command::Startup { binary, runs } => startup(binary, runs).await,
        Command::Million {
            binary,
            objects,
            namespaces,
            clients,
            etcd,
            data_dir,
        } => million::run(binary, objects, namespaces, clients, etcd, data_dir).await,
        Command::Watchers {
            binary,
            watchers,
            namespaces,
            rate,
            seconds,
            http2_streams,
        } => watchers::run(binary, watchers, namespaces, rate, seconds, http2_streams).await,
        Command::Simulated {
            binary,
            nodes,
            replicas,
            queued,
        } => simulated::run(binary, nodes, replicas, queued).await,
        Command::Ha {
            binary,
            servers,
            seconds,
            failovers,
        } => ha::run(binary, servers.max(1), seconds, failovers).await,
        Command::Gc {
            kubeconfig,
            owners,
            dependents,
            namespace,
        } => match client(kubeconfig).await {
            Ok(client) => gc::run(client, &namespace, owners, dependents).await,
            Err(e) => Err(e),
        },
        Command::History {
            kubeconfig,
            revisions,
            objects,
            data_dir,
        } => match client(kubeconfig).await {
            Ok(client) => history::run(client, revisions, objects, data_dir).await,
            Err(e) => Err(e),
        },
        Command::Reads {
            kubeconfig,
            objects,
            history,
            pid,
        } => match client(kubeconfig).await {
            Ok(client) => reads::run(client, objects, history, pid).await,
            Err(e) => Err(e),
        },
        Command::Admission {
            kubeconfig,
            requests,
            webhooks,
        } => match client(kubeconfig).await {
            Ok(client) => admission::run(client, requests, &webhooks).await,
            Err(e) => Err(e),
        },
        Command::Fairness {
            kubeconfig,
            flood,
            other,
            clients,
            seconds,
        } => {
            let split = |s: &str| s.split_once(':').map(|(u, t)| (u.to_owned(), t.to_owned()));
            match (config(kubeconfig).await, split(&flood), split(&other)) {
                (Ok(config), Some(flood), Some(other)) => {
                    fairness::run(
                        config,
                        (&flood.0, &flood.1),
                        (&other.0, &other.1),
                        clients,
                        seconds,
                    )
                    .await
                }
                (Err(e), _, _) => Err(e),
                _ => Err("--flood and --other are name:token".into()),
            }
        }
        Command::Dns {
            kubeconfig,
            server,
            name,
            seconds,
            concurrency,
        } => {
            let server = match server {
                Some(server) => Ok(server),
                None => match client(kubeconfig).await {
                    Ok(client) => network::dns_service(client).await,
                    Err(e) => Err(e),
                },
            };
            match server {
                Ok(server) => network::dns(server, &name, seconds, concurrency).await,
                Err(e) => Err(e),
            }
        }
        Command::Services {
            kubeconfig,
            namespace,
            image,
            replicas,
            seconds,
            connections,
        } => match client(kubeconfig).await {
            Ok(client) => {
                network::services(client, &namespace, &image, replicas, seconds, connections).await
            }
            Err(e) => Err(e),
        },
        Command::HttpServe { listen } => network::http_serve(listen).await,
        Command::HttpLoad {
            url,
            seconds,
            connections,
        } => network::http_load(&url, seconds, connections).await,
        Command::Pods {
            kubeconfig,
            namespace,
            pods: count,
            agent_pid,
            server_pid,
            one_at_a_time,
        } => match client(kubeconfig).await {
            Ok(client) => {
                pods::run(
                    client,
                    &namespace,
                    count,
                    agent_pid,
                    server_pid,
                    one_at_a_time,
                )
                .await
            }
            Err(e) => Err(e),
        },
        Command::Deployments {
            kubeconfig,
            namespace,
            replicas,
            server_pid,
            pending,
        } => match client(kubeconfig).await {
            Ok(client) => deployments::run(client, &namespace, replicas, server_pid, pending).await,
            Err(e) => Err(e),
        },
        Command::RedisFailover {
            kubeconfig,
            namespace,
            kills,
            hang,
        } => match client(kubeconfig).await {
            Ok(client) => failover::run(client, &namespace, kills, hang).await,
            Err(e) => Err(e),
        },
        Command::OperatorCache {
            kubeconfig,
            namespace,
            clusters,
            runtime,
        } => match client(kubeconfig).await {
            Ok(client) => operator_cache::run(client, &namespace, clusters, &runtime).await,
            Err(e) => Err(e),
        },
        Command::Robustness {
            binary,
            etcd,
            servers,
            seconds,
            clients,
            keys,
            faults,
            fault_interval,
            history,
        } => {
            robustness::run(robustness::Options {
                binary,
                etcd,
                servers,
                seconds,
                clients,
                keys,
                faults,
                fault_interval: std::time::Duration::from_secs(fault_interval),
                history,
            })
            .await
        }
        Command::CheckHistory { path } => robustness::recheck(&path),
        Command::Reconcile {
            kubeconfig,
            runtime,
            objects,
        } => match client(kubeconfig).await {
            Ok(client) => reconcile::run(client, &runtime, objects).await,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plinth-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
