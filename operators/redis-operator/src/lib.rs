//! The RedisCluster operator: operational knowledge as software. For each `RedisCluster`
//! (`database.example.com/v1alpha1`) it keeps a StatefulSet of `redis-server` pods (a data
//! volume each), a headless, a `-primary` and a `-replicas` Service, a `redis.conf`
//! ConfigMap and the password's Secret; it audits every server's replication (`INFO
//! replication`) and repairs drift, fails over to the replica furthest in the stream when
//! the primary stays unreachable, switches over before a scale-down would remove the
//! primary, takes backups as Jobs (scheduled by a CronJob, or on request), and takes a final
//! snapshot before a deleted cluster goes. Level-triggered: every reconcile starts from what
//! it observes, and never blocks — it requeues.
//!
//! ```
//! let crd = redis_operator::types::crd();
//! assert_eq!(crd.spec.names.short_names, Some(vec!["redis".to_owned()]));
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod resources;
pub mod topology;
pub mod types;
pub mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use plinth_runtime::BuildError;
use plinth_runtime::helpers::{
    EventRecorder, FinalizerEvent, controller_reference, finalizer, set_condition,
};
use plinth_runtime::metrics::Metrics;
use plinth_runtime::{Action, InformerOptions, Manager, ObjectKey, ReconcileError};
use serde_json::{Value, json};

use resources::{BACKUP_LABEL, INSTANCE_LABEL, ROLE_LABEL};
use topology::{Change, Server, Step};
pub use types::{RedisCluster, RedisClusterSpec, RedisClusterStatus};

/// The finalizer that takes the final snapshot.
pub const FINALIZER: &str = "database.example.com/finalizer";
/// The annotation asking for a backup now: each new value is one backup.
pub const BACKUP_REQUEST: &str = "database.example.com/backup-request";
/// The field manager of everything the operator applies.
pub const MANAGER: &str = "redis-operator";

/// What the reconciler uses.
#[derive(Clone)]
pub struct Context {
    /// The client.
    pub client: kube::Client,
    /// Events.
    pub recorder: EventRecorder,
    /// How long the primary may be unreachable before a replica replaces it.
    pub failover_after: Duration,
    /// The manager's metrics (the operator's own are registered on them).
    pub metrics: Metrics,
    /// Whether the caches keep `managedFields`. Off (the default), a transform drops them:
    /// the operator never reads them. On only to measure what that saves
    /// (`plinth-bench operator-cache`).
    pub cache_managed_fields: bool,
    /// The cluster's DNS domain (`cluster.local`) when the operator runs where its names
    /// resolve (in a pod): servers are then reached, and replicas follow their primary, by
    /// their stable names (`<pod>.<cluster>-headless.<namespace>.svc.<domain>`); `None`, by
    /// their pods' addresses (the operator runs outside the cluster).
    pub cluster_domain: Option<String>,
    /// The backup Jobs counted (and announced) by this process, and when it started: each
    /// backup completed since is counted once, whatever the reconciles in between.
    counted: Arc<
        std::sync::Mutex<(
            k8s_openapi::jiff::Timestamp,
            std::collections::HashSet<String>,
        )>,
    >,
}

impl Context {
    /// A context with kube's usual failover threshold (15 s) and `metrics`.
    pub fn new(client: kube::Client, instance: &str, metrics: Metrics) -> Self {
        Self {
            recorder: EventRecorder::new(
                client.clone(),
                "database.example.com/redis-operator",
                instance,
            ),
            client,
            failover_after: Duration::from_secs(15),
            metrics,
            cache_managed_fields: false,
            cluster_domain: None,
            counted: Arc::new(std::sync::Mutex::new((
                k8s_openapi::jiff::Timestamp::now(),
                std::collections::HashSet::new(),
            ))),
        }
    }

    fn cluster_label(cluster: &RedisCluster) -> String {
        format!(
            "{}/{}",
            cluster.namespace().unwrap_or_default(),
            cluster.name_any()
        )
    }

    fn failed_over(&self, cluster: &RedisCluster) {
        let label = Self::cluster_label(cluster);
        self.metrics
            .counter_with(
                "redis_operator_failovers_total",
                "Primaries replaced by a replica (failovers and switch-overs)",
                &[("cluster", &label)],
            )
            .inc();
    }

    fn ready(&self, cluster: &RedisCluster, ready: i32) {
        let label = Self::cluster_label(cluster);
        self.metrics
            .gauge_with(
                "redis_operator_ready_replicas",
                "Servers ready and in the topology, per cluster",
                &[("cluster", &label)],
            )
            .set(i64::from(ready));
    }

    fn backed_up(&self, cluster: &RedisCluster, seconds: i64) {
        let label = Self::cluster_label(cluster);
        let labels = [("cluster", label.as_str())];
        self.metrics
            .counter_with("redis_operator_backups_total", "Backups completed", &labels)
            .inc();
        self.metrics
            .gauge_with(
                "redis_operator_last_backup_duration_seconds",
                "How long the last completed backup took",
                &labels,
            )
            .set(seconds);
    }
}

async fn apply<K>(api: &Api<K>, name: &str, object: &Value) -> Result<K, ReconcileError>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(object),
        )
        .await?)
}

fn now_text(now: DateTime<Utc>) -> String {
    now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Reconciles one cluster: the finalizer first; then the owned objects, the topology, the
/// backups and the status; a deleted cluster's final snapshot before the finalizer goes.
///
/// # Errors
/// A retryable error when a write or a server fails.
pub async fn reconcile(
    cluster: Arc<RedisCluster>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let namespace = cluster.namespace().unwrap_or_default();
    let clusters: Api<RedisCluster> = Api::namespaced(ctx.client.clone(), &namespace);
    // The status is the operator's memory (the primary, since when it is unreachable): it is
    // read from the server, never from a cache that may not show the last write yet — a stale
    // primary would fail over twice.
    let Some(cluster) = clusters.get_opt(&cluster.name_any()).await? else {
        return Ok(Action::Done);
    };
    let cluster = Arc::new(cluster);
    let writer = clusters.clone();
    finalizer(&clusters, FINALIZER, cluster, |event| async move {
        match event {
            FinalizerEvent::Apply(cluster) => run(&cluster, &ctx, &writer).await,
            FinalizerEvent::Cleanup(cluster) => final_snapshot(&cluster, &ctx, &writer).await,
        }
    })
    .await
}

/// The password: from the spec's Secret, or one generated into `<name>-auth` the first time.
async fn password(
    cluster: &RedisCluster,
    ctx: &Context,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
) -> Result<String, ReconcileError> {
    let namespace = cluster.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let name = resources::auth_secret_name(cluster);
    if let Some(secret) = secrets.get_opt(&name).await? {
        let value = secret
            .data
            .and_then(|d| d.get("password").cloned())
            .map(|b| String::from_utf8_lossy(&b.0).into_owned());
        return value.ok_or_else(|| {
            ReconcileError::Terminal(format!("Secret {name} has no key \"password\""))
        });
    }
    if cluster.spec.auth.is_some() {
        let _ = ctx
            .recorder
            .publish(
                cluster,
                true,
                "SecretMissing",
                "Reconcile",
                &format!("Secret {name} (spec.auth.secretName) does not exist"),
            )
            .await;
        return Err(ReconcileError::Retry(format!(
            "Secret {name} does not exist"
        )));
    }
    let password = generate_password()?;
    let secret: Secret = serde_json::from_value(resources::secret(cluster, owner, &password))
        .map_err(|e| ReconcileError::Terminal(e.to_string()))?;
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(password),
        // Made by a reconcile a moment ago: read it next time.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            Err(ReconcileError::Retry("the Secret was just created".into()))
        }
        Err(e) => Err(e.into()),
    }
}

fn generate_password() -> Result<String, ReconcileError> {
    use base64::Engine;
    use std::io::Read;
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| ReconcileError::Retry(format!("random password: {e}")))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// The cluster's pods, as servers: ordinal, address, readiness and what each says of its
/// replication.
async fn observe(
    cluster: &RedisCluster,
    ctx: &Context,
    password: &str,
) -> Result<Vec<(Pod, Server)>, ReconcileError> {
    let namespace = cluster.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let listed = pods
        .list(&ListParams::default().labels(&resources::selector_text(cluster)))
        .await?;
    let prefix = format!("{}-", cluster.name_any());
    let mut servers = Vec::new();
    for pod in listed.items {
        let name = pod.name_any();
        let Some(ordinal) = name
            .strip_prefix(&prefix)
            .and_then(|o| o.parse::<i32>().ok())
        else {
            continue;
        };
        let status = pod.status.clone().unwrap_or_default();
        // Its stable name in the cluster's DNS (when the operator runs where that resolves),
        // or else its pod's address; either only once the pod has an address.
        let address =
            status
                .pod_ip
                .clone()
                .filter(|ip| !ip.is_empty())
                .map(|ip| match &ctx.cluster_domain {
                    Some(domain) => format!(
                        "{name}.{}.{namespace}.svc.{domain}",
                        resources::headless_name(cluster)
                    ),
                    None => ip,
                });
        let ready = status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let replication = match &address {
            Some(address) if !terminating => topology::ask(address, password).await,
            _ => None,
        };
        servers.push((
            pod,
            Server {
                pod: name,
                ordinal,
                address,
                ready: ready && !terminating,
                replication,
            },
        ));
    }
    servers.sort_by_key(|(_, s)| s.ordinal);
    Ok(servers)
}

/// Brings a live cluster in line with its spec.
async fn run(
    cluster: &RedisCluster,
    ctx: &Context,
    clusters: &Api<RedisCluster>,
) -> Result<Action, ReconcileError> {
    let namespace = cluster.namespace().unwrap_or_default();
    let client = ctx.client.clone();
    let owner = controller_reference(cluster)
        .ok_or_else(|| ReconcileError::Terminal("the cluster has no uid".into()))?;
    let password = password(cluster, ctx, &owner).await?;
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let config = resources::config_map(cluster, &owner);
    apply(&configs, &format!("{}-config", cluster.name_any()), &config).await?;
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    for (name, service) in resources::services(cluster, &owner) {
        apply(&services, &name, &service).await?;
    }

    let observed = observe(cluster, ctx, &password).await?;
    let servers: Vec<Server> = observed.iter().map(|(_, s)| s.clone()).collect();
    let old = cluster.status.clone().unwrap_or_default();
    let now = Utc::now();
    let inputs = topology::Inputs {
        desired: cluster.spec.replicas.max(1),
        current_master: old.current_master.clone(),
        unreachable_since: old
            .master_unreachable_since
            .as_deref()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc)),
        master_run_id: old.master_run_id.clone(),
        now,
        failover_after: ctx.failover_after,
        auto_failover: cluster.spec.enable_auto_failover,
    };
    let plan = topology::plan(&servers, &inputs);
    if plan.master.is_some() && plan.master != old.current_master {
        // Written ahead, before any server is told: a successor that takes over from here
        // (this process killed mid-failover) finds the choice made and finishes it — it
        // promotes the same server, never a second one. The precondition refuses the write
        // if the cluster changed since it was read (another leader acted).
        record_choice(cluster, clusters, &plan, &old).await?;
        announce(cluster, ctx, &plan, &servers).await;
    }
    let mut failures = Vec::new();
    for step in &plan.steps {
        let pod = match step {
            Step::Promote(pod) | Step::Follow { pod, .. } => pod,
        };
        let Some(address) = servers
            .iter()
            .find(|s| &s.pod == pod)
            .and_then(|s| s.address.clone())
        else {
            continue;
        };
        if let Err(e) = topology::run(step, &address, &password).await {
            failures.push(format!("{pod}: {e}"));
        }
    }
    label_roles(ctx, &namespace, &observed, plan.master.as_deref()).await?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    let set = resources::stateful_set(cluster, &owner, plan.statefulset_replicas);
    apply(&sets, &cluster.name_any(), &set).await?;
    let last_backup = backups(cluster, ctx, &owner, &old).await?;

    // Status: servers in the topology, phase and conditions.
    let master = plan
        .master
        .as_deref()
        .and_then(|m| servers.iter().find(|s| s.pod == m));
    let desired = inputs.desired;
    let serving: Vec<&Server> = servers.iter().filter(|s| s.ordinal < desired).collect();
    let ready = master.map_or(0, |m| {
        serving
            .iter()
            .filter(|s| topology::in_topology(s, m))
            .count()
    });
    let ready = i32::try_from(ready).unwrap_or(i32::MAX);
    let existing_healthy = master.is_some_and(|m| {
        serving
            .iter()
            .filter(|s| s.address.is_some())
            .all(|s| topology::in_topology(s, m))
    });
    let phase = if plan.master.is_none() {
        "Initializing"
    } else if matches!(plan.change, Some(Change::FailedOver { .. })) {
        "FailingOver"
    } else if plan.unreachable_since.is_some() {
        "Degraded"
    } else if ready == desired || (existing_healthy && old.phase.as_deref() == Some("Running")) {
        "Running"
    } else if matches!(old.phase.as_deref(), None | Some("Initializing")) {
        "Initializing"
    } else {
        "Degraded"
    };
    let generation = cluster.meta().generation;
    let mut status = RedisClusterStatus {
        ready_replicas: ready,
        current_master: plan.master.clone(),
        phase: Some(phase.into()),
        conditions: old.conditions.clone(),
        observed_generation: generation,
        last_backup,
        selector: Some(resources::selector_text(cluster)),
        master_unreachable_since: plan.unreachable_since.map(now_text),
        master_run_id: plan.master_run_id.clone(),
    };
    let available = master.is_some() && plan.unreachable_since.is_none();
    set_condition(
        &mut status.conditions,
        "Available",
        available,
        if available {
            "PrimaryReachable"
        } else {
            "NoPrimary"
        },
        &match (&plan.master, available) {
            (Some(m), true) => format!("{m} takes writes"),
            (Some(m), false) => format!("primary {m} is unreachable"),
            (None, _) => "no server answers yet".into(),
        },
        generation,
    );
    let progressing = ready < desired;
    set_condition(
        &mut status.conditions,
        "Progressing",
        progressing,
        if progressing {
            "ServersStarting"
        } else {
            "AllServersReady"
        },
        &format!("{ready} of {desired} servers ready"),
        generation,
    );
    let degraded = phase == "Degraded" || phase == "FailingOver";
    set_condition(
        &mut status.conditions,
        "Degraded",
        degraded,
        if degraded { "ServersDown" } else { "AsDesired" },
        &if failures.is_empty() {
            format!("{ready} of {desired} servers in the topology")
        } else {
            failures.join("; ")
        },
        generation,
    );
    ctx.ready(cluster, ready);
    if status != old {
        // A merge patch keeps what it does not name: fields now empty are nulled.
        let mut patch =
            serde_json::to_value(&status).map_err(|e| ReconcileError::Terminal(e.to_string()))?;
        for field in [
            "currentMaster",
            "masterUnreachableSince",
            "masterRunId",
            "lastBackup",
        ] {
            if patch.get(field).is_none() {
                patch[field] = Value::Null;
            }
        }
        clusters
            .patch_status(
                &cluster.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": patch})),
            )
            .await?;
    }
    if !failures.is_empty() {
        // Audited again shortly (not with an error's growing back-off: a server that
        // refuses now must not delay the next failover check).
        tracing::warn!(cluster = %cluster.name_any(), failures = %failures.join("; "), "repair failed");
        let _ = ctx
            .recorder
            .publish(
                cluster,
                true,
                "RepairFailed",
                "Repair",
                &failures.join("; "),
            )
            .await;
        return Ok(Action::RequeueAfter(Duration::from_secs(2)));
    }
    // Audit again soon while anything is amiss, else now and then (a hung primary sends no
    // event).
    let settled = phase == "Running" && ready == desired;
    Ok(Action::RequeueAfter(if settled {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(2)
    }))
}

/// Records a newly chosen primary in status (with its process's run ID, the unreachable
/// clock stopped, `FailingOver` for a failover) under the cluster's resourceVersion.
async fn record_choice(
    cluster: &RedisCluster,
    clusters: &Api<RedisCluster>,
    plan: &topology::Plan,
    old: &RedisClusterStatus,
) -> Result<(), ReconcileError> {
    let phase = match plan.change {
        Some(Change::FailedOver { .. }) => Some("FailingOver"),
        _ => old.phase.as_deref(),
    };
    let patch = json!({
        "metadata": {"resourceVersion": cluster.resource_version()},
        "status": {
            "currentMaster": plan.master,
            "masterRunId": plan.master_run_id,
            "masterUnreachableSince": Value::Null,
            "phase": phase,
        },
    });
    clusters
        .patch_status(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(())
}

/// Events (and metrics) for a change of primary.
async fn announce(
    cluster: &RedisCluster,
    ctx: &Context,
    plan: &topology::Plan,
    servers: &[Server],
) {
    let Some(master) = &plan.master else { return };
    let offset = servers
        .iter()
        .find(|s| &s.pod == master)
        .and_then(|s| s.replication.as_ref())
        .map_or(0, |r| r.offset);
    let (warning, reason, note) = match &plan.change {
        None => return,
        Some(Change::Elected) => (false, "PrimaryElected", format!("{master} is the primary")),
        Some(Change::FailedOver { from, restarted }) => {
            ctx.failed_over(cluster);
            let why = if *restarted {
                "restarted as a new process".to_owned()
            } else {
                format!("unreachable for {}s", ctx.failover_after.as_secs())
            };
            (
                true,
                "FailedOver",
                format!("primary {from} {why}: promoted {master} (replication offset {offset})"),
            )
        }
        Some(Change::SwitchedOver { from }) => {
            ctx.failed_over(cluster);
            (
                false,
                "SwitchedOver",
                format!(
                    "{from} goes with the scale-down: promoted {master} (replication offset {offset})"
                ),
            )
        }
    };
    let _ = ctx
        .recorder
        .publish(cluster, warning, reason, "Failover", &note)
        .await;
}

/// Labels each pod with its role, which the `-primary` and `-replicas` Services select.
async fn label_roles(
    ctx: &Context,
    namespace: &str,
    observed: &[(Pod, Server)],
    master: Option<&str>,
) -> Result<(), ReconcileError> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    for (pod, server) in observed {
        let role = if Some(server.pod.as_str()) == master {
            "primary"
        } else {
            "replica"
        };
        if pod.labels().get(ROLE_LABEL).map(String::as_str) == Some(role) {
            continue;
        }
        match pods
            .patch(
                &server.pod,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {ROLE_LABEL: role}}})),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A Job name for backup request `token`: `<cluster>-backup-<token>`, in kube's name rules.
fn request_job_name(cluster: &str, token: &str) -> String {
    let clean: String = token
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let mut name = format!("{cluster}-backup-{}", clean.trim_matches('-'));
    name.truncate(52);
    name.trim_end_matches('-').to_owned()
}

/// Scheduled and requested backups; returns the last completed one.
async fn backups(
    cluster: &RedisCluster,
    ctx: &Context,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    old: &RedisClusterStatus,
) -> Result<Option<types::LastBackup>, ReconcileError> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let schedule = cluster
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.schedule.clone());
    let request = cluster.annotations().get(BACKUP_REQUEST).cloned();
    if schedule.is_some() || request.is_some() {
        ensure_backup_claim(cluster, ctx).await?;
    }
    let crons: Api<CronJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let cron_name = format!("{name}-backup");
    match &schedule {
        Some(schedule) => {
            apply(
                &crons,
                &cron_name,
                &resources::backup_cron_job(cluster, owner, schedule),
            )
            .await?;
        }
        None => {
            if crons.get_opt(&cron_name).await?.is_some() {
                crons.delete(&cron_name, &Default::default()).await?;
            }
        }
    }
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Some(token) = request.filter(|t| !t.is_empty()) {
        let job = request_job_name(&name, &token);
        if jobs.get_opt(&job).await?.is_none() {
            let object: Job = serde_json::from_value(resources::backup_job(cluster, owner, &job))
                .map_err(|e| ReconcileError::Terminal(e.to_string()))?;
            match jobs.create(&PostParams::default(), &object).await {
                Ok(_) => {
                    let _ = ctx
                        .recorder
                        .publish(
                            cluster,
                            false,
                            "BackupStarted",
                            "Backup",
                            &format!("Job {job} takes a snapshot (requested: {token})"),
                        )
                        .await;
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    let listed = jobs
        .list(&ListParams::default().labels(&format!("{BACKUP_LABEL}={name}")))
        .await?;
    // Every backup completed since this process started, once; then the latest one.
    let mut completed: Vec<(
        k8s_openapi::jiff::Timestamp,
        k8s_openapi::jiff::Timestamp,
        String,
        String,
    )> = listed
        .items
        .iter()
        .filter(|j| j.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) > 0)
        .filter_map(|j| {
            let status = j.status.as_ref()?;
            let done = status.completion_time.as_ref()?.0;
            let started = status.start_time.as_ref().map_or(done, |t| t.0);
            Some((done, started, j.name_any(), j.uid().unwrap_or_default()))
        })
        .collect();
    completed.sort();
    let fresh: Vec<(
        k8s_openapi::jiff::Timestamp,
        k8s_openapi::jiff::Timestamp,
        String,
    )> = {
        let mut counted = ctx
            .counted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let since = counted.0;
        completed
            .iter()
            .filter(|(done, ..)| *done >= since)
            .filter(|(.., uid)| counted.1.insert(uid.clone()))
            .map(|(done, started, job, _)| (*done, *started, job.clone()))
            .collect()
    };
    for (done, started, job) in fresh {
        let seconds = done.duration_since(started).as_secs();
        ctx.backed_up(cluster, seconds);
        let _ = ctx
            .recorder
            .publish(
                cluster,
                false,
                "BackupCompleted",
                "Backup",
                &format!("Job {job} wrote /backup/{job}.rdb in {seconds}s"),
            )
            .await;
    }
    let Some((done, _, job, _)) = completed.pop() else {
        return Ok(old.last_backup.clone());
    };
    Ok(Some(types::LastBackup {
        time: done.to_string(),
        file: format!("/backup/{job}.rdb"),
        job,
    }))
}

async fn ensure_backup_claim(cluster: &RedisCluster, ctx: &Context) -> Result<(), ReconcileError> {
    let namespace = cluster.namespace().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    let name = format!("{}-backup", cluster.name_any());
    if claims.get_opt(&name).await?.is_none() {
        let claim: PersistentVolumeClaim = serde_json::from_value(resources::backup_claim(cluster))
            .map_err(|e| ReconcileError::Terminal(e.to_string()))?;
        match claims.create(&PostParams::default(), &claim).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A deleted cluster's final snapshot: a Job (then waited for by requeueing) before the
/// finalizer goes; a cluster that never had a primary has nothing to keep.
async fn final_snapshot(
    cluster: &RedisCluster,
    ctx: &Context,
    clusters: &Api<RedisCluster>,
) -> Result<Action, ReconcileError> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let old = cluster.status.clone().unwrap_or_default();
    if old.phase.as_deref() != Some("Deleting") {
        clusters
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Deleting"}})),
            )
            .await?;
    }
    if old.current_master.is_none() {
        return Ok(Action::Done);
    }
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let job_name = format!("{name}-final-backup");
    let Some(job) = jobs.get_opt(&job_name).await? else {
        let owner = controller_reference(cluster)
            .ok_or_else(|| ReconcileError::Terminal("the cluster has no uid".into()))?;
        let created = async {
            ensure_backup_claim(cluster, ctx).await?;
            let object: Job =
                serde_json::from_value(resources::backup_job(cluster, &owner, &job_name))
                    .map_err(|e| ReconcileError::Terminal(e.to_string()))?;
            jobs.create(&PostParams::default(), &object)
                .await
                .map_err(ReconcileError::from)
        };
        return match created.await {
            Ok(_) => {
                let _ = ctx
                    .recorder
                    .publish(
                        cluster,
                        false,
                        "FinalBackupStarted",
                        "Delete",
                        &format!("Job {job_name} takes the final snapshot"),
                    )
                    .await;
                Ok(Action::RequeueAfter(Duration::from_secs(2)))
            }
            // The namespace is going: nothing can be created in it any more.
            Err(ReconcileError::Api(kube::Error::Api(e))) if e.code == 403 || e.code == 404 => {
                let _ = ctx
                    .recorder
                    .publish(
                        cluster,
                        true,
                        "FinalBackupSkipped",
                        "Delete",
                        &format!("no final snapshot: {}", e.message),
                    )
                    .await;
                Ok(Action::Done)
            }
            Err(e) => Err(e),
        };
    };
    let status = job.status.unwrap_or_default();
    if status.succeeded.unwrap_or(0) > 0 {
        let _ = ctx
            .recorder
            .publish(
                cluster,
                false,
                "FinalBackupCompleted",
                "Delete",
                &format!("final snapshot in /backup/{job_name}.rdb on {name}-backup"),
            )
            .await;
        ctx.metrics.forget(
            "redis_operator_ready_replicas",
            &[("cluster", &Context::cluster_label(cluster))],
        );
        return Ok(Action::Done);
    }
    let failed = status
        .conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Failed" && c.status == "True");
    if failed {
        let _ = ctx
            .recorder
            .publish(
                cluster,
                true,
                "FinalBackupFailed",
                "Delete",
                &format!("Job {job_name} failed: the cluster goes without a final snapshot"),
            )
            .await;
        return Ok(Action::Done);
    }
    Ok(Action::RequeueAfter(Duration::from_secs(2)))
}

/// The cluster a pod belongs to (its instance label), for the Pod watch.
fn owner_key(
    namespace: Option<String>,
    labels: &std::collections::BTreeMap<String, String>,
) -> Vec<ObjectKey> {
    labels
        .get(INSTANCE_LABEL)
        .map(|name| {
            vec![ObjectKey {
                namespace,
                name: name.clone(),
            }]
        })
        .unwrap_or_default()
}

/// Cache options dropping `managedFields`, which the operator never reads (unless `keep`).
fn lean<K: Resource + 'static>(keep: bool) -> InformerOptions<K> {
    if keep {
        InformerOptions::default()
    } else {
        InformerOptions::default().strip_managed_fields()
    }
}

/// Registers the RedisCluster controller on `manager`: clusters, the StatefulSets, Services,
/// ConfigMaps, Secrets, CronJobs and Jobs they own, and their pods (by label).
///
/// # Errors
/// If a `rediscluster` controller is registered on `manager` already.
pub fn register(manager: &mut Manager, context: Context) -> Result<(), BuildError> {
    let client = context.client.clone();
    let keep = context.cache_managed_fields;
    manager
        .controller_with(Api::<RedisCluster>::all(client.clone()), lean(keep))
        .owns_with(Api::<StatefulSet>::all(client.clone()), lean(keep))
        .owns_with(Api::<Service>::all(client.clone()), lean(keep))
        .owns_with(Api::<ConfigMap>::all(client.clone()), lean(keep))
        .owns_with(Api::<CronJob>::all(client.clone()), lean(keep))
        .owns_with(Api::<Job>::all(client.clone()), lean(keep))
        // Only the cluster's pods (by label), without managedFields.
        .watches_with(
            Api::<Pod>::all(client),
            lean::<Pod>(keep).labels("app.kubernetes.io/name=redis"),
            |pod: &Pod| owner_key(pod.namespace(), pod.labels()),
        )
        .named("rediscluster")
        .concurrency(4)
        .run(reconcile, Arc::new(context))
}

/// The RBAC the operator needs, and no more, running as ServiceAccount `redis-operator` in
/// `namespace`: a ClusterRole for what it manages (RedisClusters and their status, the
/// objects it keeps, pods' role labels, events) bound to it, and a Role for its Lease.
pub fn rbac(namespace: &str) -> Vec<Value> {
    let all = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let group = "rbac.authorization.k8s.io";
    let subject =
        json!([{"kind": "ServiceAccount", "name": "redis-operator", "namespace": namespace}]);
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "redis-operator", "namespace": namespace}}),
        json!({"apiVersion": format!("{group}/v1"), "kind": "ClusterRole",
        "metadata": {"name": "redis-operator"},
        "rules": [
            {"apiGroups": ["database.example.com"], "resources": ["redisclusters"],
                "verbs": ["get", "list", "watch", "update", "patch"]},
            {"apiGroups": ["database.example.com"], "resources": ["redisclusters/status"],
                "verbs": ["get", "update", "patch"]},
            {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": all},
            {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": all},
            {"apiGroups": [""], "resources": ["services", "configmaps", "persistentvolumeclaims"],
                "verbs": all},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch", "create"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
            // The webhook server writes its CA into its own two configurations.
            {"apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
                "resourceNames": [webhooks::CONFIGURATION], "verbs": ["get", "update", "patch"]},
        ]}),
        json!({"apiVersion": format!("{group}/v1"), "kind": "ClusterRoleBinding",
            "metadata": {"name": "redis-operator"},
            "roleRef": {"apiGroup": group, "kind": "ClusterRole", "name": "redis-operator"},
            "subjects": subject}),
        json!({"apiVersion": format!("{group}/v1"), "kind": "Role",
            "metadata": {"name": "redis-operator-leader-election", "namespace": namespace},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                "verbs": ["get", "create", "update"]}]}),
        json!({"apiVersion": format!("{group}/v1"), "kind": "RoleBinding",
            "metadata": {"name": "redis-operator-leader-election", "namespace": namespace},
            "roleRef": {"apiGroup": group, "kind": "Role", "name": "redis-operator-leader-election"},
            "subjects": subject}),
    ]
}

/// The image the shipped deployment runs.
pub const IMAGE: &str = "example.com/redis-operator:0.1.0";

/// The Service in front of the operator's webhook servers.
pub const WEBHOOK_SERVICE: &str = "redis-operator-webhook";
/// The Secret holding the webhook servers' certificate (see [`webhook_secret`]).
pub const WEBHOOK_SECRET: &str = "redis-operator-webhook-cert";
/// Where the pods mount it.
const WEBHOOK_CERT_DIR: &str = "/etc/redis-operator/certs";

/// Where the deployed operator's webhooks are: its Service in `namespace`.
pub fn webhook_service(namespace: &str) -> plinth_runtime::webhook::WebhookEndpoint<'_> {
    plinth_runtime::webhook::WebhookEndpoint::Service {
        namespace,
        name: WEBHOOK_SERVICE,
        port: 443,
    }
}

/// The Secret [`manifests`] mounts as the webhook servers' certificate: a new CA and a
/// certificate for the webhook Service's names (what cert-manager would otherwise issue),
/// shared by every replica so that the CA they write into the configurations is one.
///
/// # Errors
/// The certificate cannot be made.
pub fn webhook_secret(namespace: &str) -> Result<Value, String> {
    let names = webhook_service(namespace).dns_names();
    let hosts: Vec<&str> = names.iter().map(String::as_str).collect();
    plinth_runtime::webhook::certificate_secret(namespace, WEBHOOK_SECRET, &hosts)
        .map_err(|e| e.to_string())
}

/// How the operator is deployed in `namespace`: the namespace, [`rbac`], a Deployment of
/// two replicas of `image` with leader election, metrics, probes and webhooks on the pod's
/// address (the certificate from the [`webhook_secret`]), the webhooks' Service, and the
/// webhook configurations that name it (their `caBundle` written by the servers).
pub fn manifests(namespace: &str, image: &str) -> Vec<Value> {
    let labels = json!({"app.kubernetes.io/name": "redis-operator"});
    let mut out = vec![json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": namespace}})];
    out.extend(rbac(namespace));
    out.push(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "redis-operator", "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": "redis-operator",
                    "containers": [{
                        "name": "operator",
                        "image": image,
                        "args": ["run", "--leader-elect",
                                 format!("--leader-election-namespace={namespace}"),
                                 "--metrics-bind-address=$(POD_IP):8080",
                                 "--health-probe-bind-address=$(POD_IP):8081",
                                 "--webhook-bind-address=$(POD_IP):9443",
                                 format!("--webhook-cert-dir={WEBHOOK_CERT_DIR}")],
                        "env": [
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        ],
                        "ports": [{"name": "metrics", "containerPort": 8080},
                                  {"name": "health", "containerPort": 8081},
                                  {"name": "webhook", "containerPort": 9443}],
                        "volumeMounts": [{"name": "webhook-cert", "mountPath": WEBHOOK_CERT_DIR,
                                          "readOnly": true}],
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "health"}},
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "health"},
                                           "periodSeconds": 2},
                        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                      "limits": {"memory": "256Mi"}},
                    }],
                    "volumes": [{"name": "webhook-cert", "secret": {"secretName": WEBHOOK_SECRET}}],
                },
            },
        },
    }));
    out.push(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": WEBHOOK_SERVICE, "namespace": namespace, "labels": labels},
        "spec": {"selector": labels,
                 "ports": [{"name": "webhook", "port": 443, "targetPort": "webhook"}]},
    }));
    out.extend(webhooks::configurations(webhook_service(namespace)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_manifest_is_what_the_binary_prints() {
        let mut printed = String::new();
        for object in manifests("redis-system", IMAGE) {
            printed.push_str("---\n");
            printed.push_str(&serde_norway::to_string(&object).unwrap_or_default());
        }
        let crd = format!(
            "---\n{}",
            serde_norway::to_string(&types::crd()).unwrap_or_default()
        );
        assert_eq!(
            include_str!("../deploy/crd.yaml"),
            crd,
            "regenerate with: redis-operator crd > operators/redis-operator/deploy/crd.yaml"
        );
        let shipped = include_str!("../deploy/redis-operator.yaml");
        assert_eq!(
            shipped, printed,
            "regenerate with: redis-operator manifests > operators/redis-operator/deploy/redis-operator.yaml"
        );
    }

    #[test]
    fn request_tokens_become_job_names() {
        assert_eq!(
            request_job_name("cache", "Nightly 2026/12/02"),
            "cache-backup-nightly-2026-12-02"
        );
        let long = request_job_name("cache", &"x".repeat(100));
        assert!(long.len() <= 52 && long.starts_with("cache-backup-x"));
    }

    #[test]
    fn the_crd_states_its_invariants() {
        let crd = serde_json::to_value(types::crd()).unwrap_or_default();
        let version = &crd["spec"]["versions"][0];
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(
            spec["properties"]["replicas"]["x-kubernetes-validations"][0]["rule"],
            "self >= 1"
        );
        assert_eq!(
            spec["properties"]["storage"]["properties"]["size"]["x-kubernetes-validations"][0]["rule"],
            "self == oldSelf"
        );
        assert_eq!(
            version["subresources"]["scale"]["labelSelectorPath"],
            ".status.selector"
        );
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(["redis"]));
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(columns, ["Replicas", "Ready", "Phase", "Master", "Age"]);
    }
}
