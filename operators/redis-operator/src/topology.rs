//! The primary/replica topology: what each server says of itself (`INFO replication`, asked
//! with the `redis` crate), and the plan that repairs it — which server is the primary, who
//! is promoted, who is repointed — decided by a pure function, so every rule is a unit test.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// The port every server listens on.
pub const PORT: u16 = 6379;

/// A server's replication role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// It takes writes.
    Master,
    /// It copies a primary.
    Replica,
}

/// What a server reports of its replication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replication {
    /// Its role.
    pub role: Role,
    /// The primary it follows (a replica's `master_host`).
    pub master_host: Option<String>,
    /// Whether a replica's link to its primary is up.
    pub link_up: bool,
    /// Whether a replica has synced with its primary since it started: its link is up, or
    /// down for a known time (`master_link_down_since_seconds` ≥ 0; -1 is never synced — a
    /// server just started as a replica of nobody, or one still in its first sync).
    pub synced: bool,
    /// How far it is in the replication stream (`master_repl_offset`, or a replica's
    /// `slave_repl_offset`).
    pub offset: i64,
    /// The server process's identity (`run_id`): a new one means it restarted.
    pub run_id: Option<String>,
}

impl Replication {
    /// Parses `INFO` (its `server` and `replication` sections).
    pub fn parse(info: &str) -> Option<Self> {
        let field = |name: &str| {
            info.lines()
                .filter_map(|l| l.trim().split_once(':'))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.trim().to_owned())
        };
        let role = match field("role")?.as_str() {
            "master" => Role::Master,
            "slave" | "replica" => Role::Replica,
            _ => return None,
        };
        let number = |name: &str| field(name).and_then(|v| v.parse::<i64>().ok());
        let link_up = field("master_link_status").as_deref() == Some("up");
        Some(Self {
            role,
            master_host: field("master_host").filter(|_| role == Role::Replica),
            link_up,
            synced: role == Role::Replica
                && (link_up || number("master_link_down_since_seconds").is_some_and(|s| s >= 0)),
            offset: match role {
                Role::Master => number("master_repl_offset").unwrap_or(0),
                Role::Replica => number("slave_repl_offset")
                    .or_else(|| number("master_repl_offset"))
                    .unwrap_or(0),
            },
            run_id: field("run_id"),
        })
    }
}

/// One of the cluster's pods, as seen now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    /// The pod's name.
    pub pod: String,
    /// Its ordinal in the StatefulSet.
    pub ordinal: i32,
    /// Its address, once it has one.
    pub address: Option<String>,
    /// Whether the pod is Ready.
    pub ready: bool,
    /// What the server said; `None` when it could not be asked.
    pub replication: Option<Replication>,
}

impl Server {
    fn reachable(&self) -> bool {
        self.replication.is_some() && self.address.is_some()
    }
}

/// What the reconcile knows besides the servers.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// `spec.replicas`.
    pub desired: i32,
    /// `status.currentMaster`.
    pub current_master: Option<String>,
    /// `status.masterUnreachableSince`.
    pub unreachable_since: Option<DateTime<Utc>>,
    /// `status.masterRunId`: the primary's process when it was last seen.
    pub master_run_id: Option<String>,
    /// Now.
    pub now: DateTime<Utc>,
    /// How long the primary may be unreachable before a replica replaces it.
    pub failover_after: Duration,
    /// `spec.enableAutoFailover`.
    pub auto_failover: bool,
}

/// A command for one server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `REPLICAOF NO ONE`.
    Promote(String),
    /// `REPLICAOF <address> 6379`.
    Follow {
        /// The pod told.
        pod: String,
        /// The primary's address.
        master_address: String,
    },
}

/// Why the primary changes, when it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The first primary of a new cluster.
    Elected,
    /// The primary was unreachable past the threshold, or its process restarted (and may
    /// have lost what it had not written to disk), and a replica replaced it.
    FailedOver {
        /// The replaced primary.
        from: String,
        /// Whether it came back restarted (rather than staying unreachable).
        restarted: bool,
    },
    /// The primary's pod goes with a scale-down: a replica that stays takes over first.
    SwitchedOver {
        /// The primary being scaled away.
        from: String,
    },
}

/// The repair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The primary after the steps (`None`: none can be chosen yet).
    pub master: Option<String>,
    /// What each server is told, promotions first.
    pub steps: Vec<Step>,
    /// Why the primary changed, if it did.
    pub change: Option<Change>,
    /// Whether the primary is unreachable (and since when, to carry in status).
    pub unreachable_since: Option<DateTime<Utc>>,
    /// How many pods the StatefulSet may have: `desired`, or more while the primary's pod
    /// is beyond it (a scale-down waits for the switch-over).
    pub statefulset_replicas: i32,
    /// The primary's process as seen now (for `status.masterRunId`).
    pub master_run_id: Option<String>,
}

/// The replica among `servers` (within `desired`, reachable, not `except`) furthest in the
/// replication stream — of those that copy `except` (its address, when it has one) and have
/// synced with it: a server that never synced (started as a replica of nobody, or in its
/// first sync) holds nothing to take over with, and promoting it would lose every write.
fn best_replica<'a>(servers: &'a [Server], desired: i32, except: &str) -> Option<&'a Server> {
    let old_address = servers
        .iter()
        .find(|s| s.pod == except)
        .and_then(|s| s.address.as_deref());
    servers
        .iter()
        .filter(|s| s.pod != except && s.ordinal < desired && s.reachable())
        .filter(|s| {
            s.replication.as_ref().is_some_and(|r| {
                r.role == Role::Replica
                    && r.synced
                    && old_address.is_none_or(|a| r.master_host.as_deref() == Some(a))
            })
        })
        .max_by_key(|s| {
            let r = s.replication.as_ref();
            (
                r.map_or(i64::MIN, |r| r.offset),
                std::cmp::Reverse(s.ordinal),
            )
        })
}

/// Decides the topology: keep a reachable primary; elect one for a new cluster (a reachable
/// server others already follow, else the lowest ordinal); fail over to the replica furthest
/// in the stream once the primary has been unreachable for `failover_after` (with
/// auto-failover on); switch over before a scale-down removes the primary; and tell every
/// other reachable server to follow the primary (a restarted lone primary or a replica of
/// the wrong primary is repointed).
pub fn plan(servers: &[Server], inputs: &Inputs) -> Plan {
    let by_pod = |pod: &str| servers.iter().find(|s| s.pod == pod);
    let mut change = None;
    let mut unreachable_since = None;
    let mut master = inputs.current_master.clone();
    match master.as_deref().map(|m| (m, by_pod(m))) {
        None => {
            let followed = servers.iter().find(|candidate| {
                candidate.reachable()
                    && servers.iter().any(|s| {
                        s.replication.as_ref().is_some_and(|r| {
                            r.role == Role::Replica && r.master_host == candidate.address
                        })
                    })
            });
            let lowest = servers
                .iter()
                .filter(|s| s.reachable() && s.ordinal < inputs.desired)
                .min_by_key(|s| s.ordinal);
            master = followed.or(lowest).map(|s| s.pod.clone());
            if master.is_some() {
                change = Some(Change::Elected);
            }
        }
        Some((name, found)) if !found.is_some_and(Server::reachable) => {
            let since = inputs.unreachable_since.unwrap_or(inputs.now);
            let waited = (inputs.now - since).to_std().unwrap_or_default();
            let replacement = best_replica(servers, inputs.desired, name);
            match replacement {
                Some(next) if inputs.auto_failover && waited >= inputs.failover_after => {
                    change = Some(Change::FailedOver {
                        from: name.into(),
                        restarted: false,
                    });
                    master = Some(next.pod.clone());
                }
                _ => unreachable_since = Some(since),
            }
        }
        // The primary answers, but as a new process (which starts as a read-only replica of
        // nobody, so it took no writes): a replica that followed it may have more than it
        // kept. The replica furthest in the stream takes over (with auto-failover on); with
        // no replica to take over, the restarted primary is promoted again below.
        Some((name, Some(found)))
            if inputs.auto_failover
                && inputs.master_run_id.is_some()
                && found.replication.as_ref().and_then(|r| r.run_id.as_ref())
                    != inputs.master_run_id.as_ref() =>
        {
            if let Some(next) = best_replica(servers, inputs.desired, name) {
                change = Some(Change::FailedOver {
                    from: name.into(),
                    restarted: true,
                });
                master = Some(next.pod.clone());
            }
        }
        Some((name, Some(found))) if found.ordinal >= inputs.desired => {
            if let Some(next) = best_replica(servers, inputs.desired, name) {
                change = Some(Change::SwitchedOver { from: name.into() });
                master = Some(next.pod.clone());
            }
        }
        Some(_) => {}
    }
    let mut steps = Vec::new();
    let master_server = master.as_deref().and_then(by_pod);
    if unreachable_since.is_none()
        && let Some(primary) = master_server
        && let Some(master_address) = primary.address.clone()
    {
        if primary
            .replication
            .as_ref()
            .is_some_and(|r| r.role != Role::Master)
        {
            steps.push(Step::Promote(primary.pod.clone()));
        }
        for other in servers.iter().filter(|s| s.pod != primary.pod) {
            let Some(replication) = &other.replication else {
                continue;
            };
            let follows = replication.role == Role::Replica
                && replication.master_host.as_deref() == Some(master_address.as_str());
            if !follows {
                steps.push(Step::Follow {
                    pod: other.pod.clone(),
                    master_address: master_address.clone(),
                });
            }
        }
    }
    let master_ordinal = master_server.map_or(0, |s| s.ordinal);
    let master_run_id = master_server
        .and_then(|s| s.replication.as_ref())
        .and_then(|r| r.run_id.clone())
        .or_else(|| inputs.master_run_id.clone());
    Plan {
        master_run_id,
        statefulset_replicas: inputs.desired.max(master_ordinal + 1),
        master,
        steps,
        change,
        unreachable_since,
    }
}

/// Whether `server` serves in the topology `master` heads: the primary itself when it says
/// so, or a replica of the primary's address with its link up; and its pod is Ready.
pub fn in_topology(server: &Server, master: &Server) -> bool {
    let Some(replication) = &server.replication else {
        return false;
    };
    server.ready
        && if server.pod == master.pod {
            replication.role == Role::Master
        } else {
            replication.role == Role::Replica
                && replication.link_up
                && replication.master_host == master.address
        }
}

/// How long a question to a server may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);

async fn connection(
    address: &str,
    password: &str,
) -> Result<redis::aio::MultiplexedConnection, String> {
    use redis::IntoConnectionInfo;
    let mut info = redis::ConnectionAddr::Tcp(address.to_owned(), PORT)
        .into_connection_info()
        .map_err(|e| e.to_string())?;
    if !password.is_empty() {
        info =
            info.set_redis_settings(redis::RedisConnectionInfo::default().set_password(password));
    }
    let client = redis::Client::open(info).map_err(|e| e.to_string())?;
    tokio::time::timeout(ASK_TIMEOUT, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| format!("{address}: no answer"))?
        .map_err(|e| format!("{address}: {e}"))
}

async fn command<T: redis::FromRedisValue>(
    address: &str,
    password: &str,
    cmd: &redis::Cmd,
) -> Result<T, String> {
    let mut connection = connection(address, password).await?;
    tokio::time::timeout(ASK_TIMEOUT, cmd.query_async(&mut connection))
        .await
        .map_err(|_| format!("{address}: no answer"))?
        .map_err(|e| format!("{address}: {e}"))
}

/// Asks the server at `address` for its replication (`None` when it does not answer).
pub async fn ask(address: &str, password: &str) -> Option<Replication> {
    let mut info = redis::cmd("INFO");
    info.arg("server").arg("replication");
    let text: String = command(address, password, &info).await.ok()?;
    Replication::parse(&text)
}

/// Carries out one step on the server at `address`.
///
/// # Errors
/// The server's refusal, or that it did not answer.
pub async fn run(step: &Step, address: &str, password: &str) -> Result<(), String> {
    let mut cmd = redis::cmd("REPLICAOF");
    match step {
        Step::Promote(_) => cmd.arg("NO").arg("ONE"),
        Step::Follow { master_address, .. } => cmd.arg(master_address).arg(PORT),
    };
    command::<String>(address, password, &cmd).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn master(offset: i64) -> Option<Replication> {
        Some(Replication {
            role: Role::Master,
            master_host: None,
            link_up: false,
            synced: false,
            offset,
            run_id: Some("first".into()),
        })
    }

    fn replica_of(address: &str, offset: i64) -> Option<Replication> {
        Some(Replication {
            role: Role::Replica,
            master_host: Some(address.into()),
            link_up: true,
            synced: true,
            offset,
            run_id: None,
        })
    }

    fn server(ordinal: i32, replication: Option<Replication>) -> Server {
        Server {
            pod: format!("r-{ordinal}"),
            ordinal,
            address: Some(format!("127.64.0.{}", ordinal + 10)),
            ready: replication.is_some(),
            replication,
        }
    }

    fn inputs(current: Option<&str>, since: Option<i64>) -> Inputs {
        let now = DateTime::from_timestamp(1_000_000, 0).unwrap_or_default();
        Inputs {
            desired: 3,
            current_master: current.map(str::to_owned),
            unreachable_since: since.map(|s| now - chrono::Duration::seconds(s)),
            master_run_id: current.map(|_| "first".to_owned()),
            now,
            failover_after: Duration::from_secs(10),
            auto_failover: true,
        }
    }

    fn follow(ordinal: i32, master: i32) -> Step {
        Step::Follow {
            pod: format!("r-{ordinal}"),
            master_address: format!("127.64.0.{}", master + 10),
        }
    }

    #[test]
    fn info_replication_parses() {
        let primary = "# Server\r\nrun_id:first\r\n# Replication\r\nrole:master\r\nconnected_slaves:1\r\nmaster_repl_offset:420\r\n";
        assert_eq!(Replication::parse(primary), master(420));
        let replica = "role:slave\r\nmaster_host:127.64.0.10\r\nmaster_port:6379\r\nmaster_link_status:up\r\nslave_repl_offset:400\r\nmaster_repl_offset:400\r\n";
        assert_eq!(Replication::parse(replica), replica_of("127.64.0.10", 400));
        let broken = "role:slave\r\nmaster_host:127.64.0.10\r\nmaster_link_status:down\r\nslave_repl_offset:87\r\nmaster_link_down_since_seconds:8\r\n";
        assert!(Replication::parse(broken).is_some_and(|r| r.synced && !r.link_up));
        let never = "role:slave\r\nmaster_host:127.0.0.1\r\nmaster_link_status:down\r\nslave_repl_offset:1\r\nmaster_link_down_since_seconds:-1\r\n";
        assert!(Replication::parse(never).is_some_and(|r| !r.synced));
        assert_eq!(Replication::parse("role:sentinel"), None);
        assert_eq!(Replication::parse(""), None);
    }

    #[test]
    fn a_new_cluster_elects_the_lowest_ordinal_and_the_rest_follow() {
        let servers = [server(0, master(0)), server(1, master(0)), server(2, None)];
        let plan = plan(&servers, &inputs(None, None));
        assert_eq!(plan.master.as_deref(), Some("r-0"));
        assert_eq!(plan.change, Some(Change::Elected));
        assert_eq!(
            plan.steps,
            [follow(1, 0)],
            "a server not up yet is left alone"
        );
    }

    #[test]
    fn an_operator_without_status_keeps_the_primary_others_follow() {
        let servers = [
            server(0, replica_of("127.64.0.11", 5)),
            server(1, master(5)),
            server(2, master(0)),
        ];
        let plan = plan(&servers, &inputs(None, None));
        assert_eq!(plan.master.as_deref(), Some("r-1"));
        assert_eq!(plan.steps, [follow(2, 1)]);
    }

    #[test]
    fn drift_is_repaired_a_lone_primary_and_a_wrong_primary_follow_again() {
        let servers = [
            server(0, master(10)),
            server(1, master(3)),
            server(2, replica_of("127.64.0.99", 3)),
        ];
        let plan = plan(&servers, &inputs(Some("r-0"), None));
        assert_eq!(plan.master.as_deref(), Some("r-0"));
        assert_eq!(plan.change, None);
        assert_eq!(plan.steps, [follow(1, 0), follow(2, 0)]);
        let healthy = [
            server(0, master(10)),
            server(1, replica_of("127.64.0.10", 10)),
        ];
        assert!(
            super::plan(&healthy, &inputs(Some("r-0"), None))
                .steps
                .is_empty()
        );
    }

    #[test]
    fn an_unreachable_primary_is_waited_for_then_replaced_by_the_furthest_replica() {
        let servers = [
            server(0, None),
            server(1, replica_of("127.64.0.10", 7)),
            server(2, replica_of("127.64.0.10", 9)),
        ];
        let waiting = plan(&servers, &inputs(Some("r-0"), None));
        assert_eq!(waiting.master.as_deref(), Some("r-0"));
        assert!(waiting.steps.is_empty(), "nothing changes while waiting");
        assert_eq!(waiting.unreachable_since, Some(inputs(None, None).now));
        let still = plan(&servers, &inputs(Some("r-0"), Some(5)));
        assert!(still.change.is_none() && still.unreachable_since.is_some());
        let over = plan(&servers, &inputs(Some("r-0"), Some(10)));
        assert_eq!(over.master.as_deref(), Some("r-2"));
        assert_eq!(
            over.change,
            Some(Change::FailedOver {
                from: "r-0".into(),
                restarted: false
            })
        );
        assert_eq!(over.steps, [Step::Promote("r-2".into()), follow(1, 2)]);
        assert_eq!(over.unreachable_since, None);
        let mut manual = inputs(Some("r-0"), Some(60));
        manual.auto_failover = false;
        assert!(
            plan(&servers, &manual).change.is_none(),
            "auto-failover off"
        );
    }

    #[test]
    fn a_choice_recorded_by_a_leader_that_died_is_finished_not_made_again() {
        // The leader recorded r-1 and died before telling any server: r-2 is now further
        // in the stream, yet the successor promotes r-1 (the recorded choice) and repoints
        // r-2 — one promotion, not a second failover.
        let mut chosen = server(1, replica_of("127.64.0.10", 7));
        if let Some(r) = chosen.replication.as_mut() {
            r.run_id = Some("second".into());
        }
        let servers = [
            server(0, None),
            chosen,
            server(2, replica_of("127.64.0.10", 9)),
        ];
        let mut recorded = inputs(Some("r-1"), None);
        recorded.master_run_id = Some("second".into());
        let plan = plan(&servers, &recorded);
        assert_eq!(plan.master.as_deref(), Some("r-1"));
        assert_eq!(plan.change, None, "no second failover");
        assert_eq!(plan.unreachable_since, None);
        assert_eq!(
            plan.steps,
            [Step::Promote("r-1".into()), follow(2, 1)],
            "the recorded choice is promoted, the other follows it"
        );
    }

    #[test]
    fn only_a_replica_that_synced_with_the_primary_replaces_it() {
        // Started as replicas of nobody (the placeholder), never synced: nothing to take
        // over with.
        let nobody = |run_id: &str| {
            Some(Replication {
                role: Role::Replica,
                master_host: Some("127.0.0.1".into()),
                link_up: false,
                synced: false,
                offset: 1,
                run_id: Some(run_id.into()),
            })
        };
        // The primary restarted (its data back from its append-only file); the other
        // servers restarted too, or copy another server: it is promoted again.
        let servers = [
            server(0, nobody("second")),
            server(1, nobody("other")),
            server(2, replica_of("127.64.0.99", 50)),
        ];
        let kept = plan(&servers, &inputs(Some("r-0"), None));
        assert_eq!(kept.master.as_deref(), Some("r-0"));
        assert_eq!(kept.change, None, "no failover to an empty server");
        assert_eq!(
            kept.steps,
            [Step::Promote("r-0".into()), follow(1, 0), follow(2, 0)]
        );
        // Unreachable past the threshold with no replica that synced with it: waited for.
        let servers = [server(0, None), server(1, nobody("other"))];
        let waiting = plan(&servers, &inputs(Some("r-0"), Some(60)));
        assert_eq!(waiting.change, None);
        assert!(waiting.unreachable_since.is_some());
    }

    #[test]
    fn a_primary_that_restarted_is_replaced_by_the_furthest_replica() {
        let mut restarted = server(0, master(0));
        if let Some(r) = restarted.replication.as_mut() {
            r.run_id = Some("second".into());
        }
        let servers = [
            restarted,
            server(1, replica_of("127.64.0.10", 7)),
            server(2, replica_of("127.64.0.10", 9)),
        ];
        let over = plan(&servers, &inputs(Some("r-0"), None));
        assert_eq!(
            over.change,
            Some(Change::FailedOver {
                from: "r-0".into(),
                restarted: true
            })
        );
        assert_eq!(over.master.as_deref(), Some("r-2"));
        assert_eq!(
            over.steps,
            [Step::Promote("r-2".into()), follow(0, 2), follow(1, 2)]
        );
        // Without auto-failover, or with no run id recorded yet, it stays.
        let mut manual = inputs(Some("r-0"), None);
        manual.auto_failover = false;
        let kept = plan(&servers, &manual);
        assert!(kept.change.is_none());
        assert_eq!(kept.master_run_id.as_deref(), Some("second"));
        let mut fresh = inputs(Some("r-0"), None);
        fresh.master_run_id = None;
        assert!(plan(&servers, &fresh).change.is_none());
    }

    #[test]
    fn the_old_primary_rejoins_as_a_replica() {
        let servers = [
            server(0, master(0)),
            server(1, replica_of("127.64.0.12", 9)),
            server(2, master(9)),
        ];
        let plan = plan(&servers, &inputs(Some("r-2"), None));
        assert_eq!(plan.steps, [follow(0, 2)]);
    }

    #[test]
    fn a_scale_down_never_removes_the_primary() {
        let servers = [
            server(0, replica_of("127.64.0.12", 4)),
            server(1, replica_of("127.64.0.12", 8)),
            server(2, master(8)),
        ];
        let mut two = inputs(Some("r-2"), None);
        two.desired = 2;
        let plan = plan(&servers, &two);
        assert_eq!(plan.master.as_deref(), Some("r-1"));
        assert_eq!(
            plan.change,
            Some(Change::SwitchedOver { from: "r-2".into() })
        );
        assert_eq!(plan.statefulset_replicas, 2);
        assert_eq!(
            plan.steps,
            [Step::Promote("r-1".into()), follow(0, 1), follow(2, 1)]
        );
        // With no replica to take over, the StatefulSet keeps the primary's pod.
        let lone = [server(0, None), server(1, None), server(2, master(8))];
        let kept = super::plan(&lone, &two);
        assert_eq!(kept.master.as_deref(), Some("r-2"));
        assert_eq!(kept.statefulset_replicas, 3);
    }

    #[test]
    fn serving_means_ready_and_linked_to_the_primary() {
        let primary = server(0, master(3));
        assert!(in_topology(&primary, &primary));
        assert!(in_topology(
            &server(1, replica_of("127.64.0.10", 3)),
            &primary
        ));
        let mut down = server(2, replica_of("127.64.0.10", 3));
        if let Some(r) = down.replication.as_mut() {
            r.link_up = false;
        }
        assert!(!in_topology(&down, &primary));
        assert!(!in_topology(&server(2, master(0)), &primary));
        assert!(!in_topology(&server(2, None), &primary));
    }
}
