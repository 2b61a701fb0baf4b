//! The `RedisCluster` API (`database.example.com/v1alpha1`) and its CRD, generated from these
//! types with the CEL rules that state its invariants.

// kube's `KubeSchema` derive re-declares the structs it annotates inside a private module,
// which the `unreachable_pub` lint sees; they are public through this module.
#![allow(unreachable_pub)]

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use plinth_runtime::helpers::Condition;
use serde::{Deserialize, Serialize};

/// The image a cluster runs when its spec names none.
pub const DEFAULT_IMAGE: &str = "redis:7.2";

/// The size of each pod's data volume when the spec names none.
pub const DEFAULT_STORAGE: &str = "1Gi";

/// What a Redis cluster asks for: one primary and `replicas - 1` replicas.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default)]
#[kube(
    group = "database.example.com",
    version = "v1alpha1",
    kind = "RedisCluster",
    namespaced,
    status = "RedisClusterStatus",
    shortname = "redis",
    category = "all",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.readyReplicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Master","type":"string","jsonPath":".status.currentMaster"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RedisClusterSpec {
    /// How many Redis servers: the primary and its replicas.
    #[x_kube(validation = Rule::new("self >= 1").message("replicas may not drop below 1"))]
    pub replicas: i32,
    /// The Redis image (default `redis:7.2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Promote a replica when the primary stays unreachable.
    #[serde(default)]
    pub enable_auto_failover: bool,
    /// The Redis container's requests and limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub resources: Option<ResourceRequirements>,
    /// Each server's data volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Storage>,
    /// Backups (RDB snapshots on a backup volume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<Backup>,
    /// The password's Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Auth>,
    /// A snapshot each new server starts from (a backup: `<name>-backup`,
    /// `<job>.rdb`), when its data volume is still empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_from: Option<RestoreFrom>,
}

/// Where a snapshot to start from is.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreFrom {
    /// The PersistentVolumeClaim holding it (a cluster's backup volume).
    pub claim_name: String,
    /// The file's name on it (`cache-final-backup.rdb`).
    pub file: String,
}

/// A pod's data volume.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    /// Its size (a quantity such as `1Gi`); it cannot change once set.
    #[x_kube(validation = Rule::new("self == oldSelf").message("storage.size is immutable"))]
    pub size: String,
    /// The StorageClass (the cluster's default when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// When to take backups and how many to keep.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Backup {
    /// A cron schedule (`0 3 * * *`); without one, backups are taken on request only (the
    /// `database.example.com/backup-request` annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// How many snapshots the backup volume keeps (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("retain must be at least 1"))]
    pub retain: Option<i32>,
}

/// Where the password is.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Auth {
    /// A Secret in the cluster's namespace whose `password` key holds it.
    pub secret_name: String,
}

/// What the operator reports.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedisClusterStatus {
    /// Servers that are ready and in the topology (the primary, and replicas linked to it).
    #[serde(default)]
    pub ready_replicas: i32,
    /// The primary's pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_master: Option<String>,
    /// `Initializing`, `Running`, `Degraded`, `FailingOver` or `Deleting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `Available`, `Progressing`, `Degraded`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The generation last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The last backup that completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<LastBackup>,
    /// The pods' label selector (for `/scale`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Since when the primary has been unreachable (RFC 3339), while it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_unreachable_since: Option<String>,
    /// The primary's server process (its `run_id`): another one means it restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_run_id: Option<String>,
}

/// A completed backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastBackup {
    /// When it completed (RFC 3339).
    pub time: String,
    /// The Job that took it.
    pub job: String,
    /// The snapshot's file on the backup volume.
    pub file: String,
}

fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

impl RedisCluster {
    /// The image it runs.
    pub fn image(&self) -> String {
        self.spec
            .image
            .clone()
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| DEFAULT_IMAGE.into())
    }

    /// How many snapshots to keep.
    pub fn retain(&self) -> i32 {
        self.spec
            .backup
            .as_ref()
            .and_then(|b| b.retain)
            .unwrap_or(3)
            .max(1)
    }
}

/// The RedisCluster CRD.
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    RedisCluster::crd()
}
