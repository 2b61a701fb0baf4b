//! The objects a cluster owns, as server-side apply documents: the password's Secret, the
//! `redis.conf` ConfigMap, the headless, `-primary` and `-replicas` Services, the
//! StatefulSet, and the backup volume, CronJob and Jobs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use serde_json::{Value, json};

use crate::types::{DEFAULT_STORAGE, RedisCluster};

/// The label naming a pod's role (`primary` or `replica`), which the Services select on.
pub const ROLE_LABEL: &str = "database.example.com/role";
/// The label of every object of a cluster (its name).
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// The label marking backup Jobs.
pub const BACKUP_LABEL: &str = "database.example.com/backup";

/// The labels that select a cluster's pods.
pub fn selector(cluster: &RedisCluster) -> Value {
    json!({"app.kubernetes.io/name": "redis", INSTANCE_LABEL: cluster.name_any()})
}

/// The selector as a string (`status.selector`, for `/scale`).
pub fn selector_text(cluster: &RedisCluster) -> String {
    format!(
        "app.kubernetes.io/name=redis,{INSTANCE_LABEL}={}",
        cluster.name_any()
    )
}

fn labels(cluster: &RedisCluster) -> Value {
    let mut labels = selector(cluster);
    labels["app.kubernetes.io/managed-by"] = json!("redis-operator");
    labels
}

fn metadata(cluster: &RedisCluster, name: &str, owner: Option<&OwnerReference>) -> Value {
    let mut meta = json!({
        "name": name,
        "namespace": cluster.namespace().unwrap_or_default(),
        "labels": labels(cluster),
    });
    if let Some(owner) = owner {
        meta["ownerReferences"] = json!([owner]);
    }
    meta
}

/// The generated password's Secret (when the spec names none).
pub fn auth_secret_name(cluster: &RedisCluster) -> String {
    cluster.spec.auth.as_ref().map_or_else(
        || format!("{}-auth", cluster.name_any()),
        |a| a.secret_name.clone(),
    )
}

/// A Secret holding `password`.
pub fn secret(cluster: &RedisCluster, owner: &OwnerReference, password: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": metadata(cluster, &auth_secret_name(cluster), Some(owner)),
        "type": "Opaque",
        "stringData": {"password": password},
    })
}

/// The servers' configuration.
pub fn config_map(cluster: &RedisCluster, owner: &OwnerReference) -> Value {
    // Every write on disk before it is answered: a primary killed and restarted at once
    // loses nothing it acknowledged. And every server starts as a read-only replica of a
    // primary that does not exist (nothing listens on port 1), until the operator names the
    // primary: a primary that restarts cannot take writes the operator does not know of
    // (a split brain) before the operator decides who leads.
    let conf = "port 6379\ndir /data\nappendonly yes\nappendfsync always\nprotected-mode no\nreplica-read-only yes\nreplicaof 127.0.0.1 1\n";
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": metadata(cluster, &format!("{}-config", cluster.name_any()), Some(owner)),
        "data": {"redis.conf": conf},
    })
}

/// The name of the cluster's headless Service, the StatefulSet's `serviceName`: its pods'
/// stable DNS names are `<pod>.<this>.<namespace>.svc.<domain>`.
pub fn headless_name(cluster: &RedisCluster) -> String {
    format!("{}-headless", cluster.name_any())
}

/// The headless Service of the StatefulSet (`<name>-headless`), the `-primary` Service (the
/// pod labelled primary) and the `-replicas` Service.
pub fn services(cluster: &RedisCluster, owner: &OwnerReference) -> Vec<(String, Value)> {
    let name = cluster.name_any();
    let service = |suffix: &str, role: Option<&str>, headless: bool| {
        let mut select = selector(cluster);
        if let Some(role) = role {
            select[ROLE_LABEL] = json!(role);
        }
        let mut spec = json!({
            "selector": select,
            "ports": [{"name": "redis", "port": 6379, "targetPort": "redis"}],
        });
        if headless {
            spec["clusterIP"] = json!("None");
            spec["publishNotReadyAddresses"] = json!(true);
        }
        let full = format!("{name}-{suffix}");
        (
            full.clone(),
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": metadata(cluster, &full, Some(owner)), "spec": spec}),
        )
    };
    vec![
        service("headless", None, true),
        service("primary", Some("primary"), false),
        service("replicas", Some("replica"), false),
    ]
}

/// How a server starts: its configuration file, its address, and the password on standard
/// input (`redis-server FILE --bind IP -`: Redis reads a last `-` as "the rest from stdin"),
/// escaped for Redis's configuration syntax. The password never becomes an argument:
/// arguments are world-readable (`/proc/<pid>/cmdline`), the environment is the owner's.
const SERVER_SCRIPT: &str = "set -e
pw=$(printf '%s' \"$REDIS_PASSWORD\" | sed 's/[\\\\\"]/\\\\&/g')
exec redis-server /etc/redis/redis.conf --bind \"$POD_IP\" --replica-announce-ip \"$POD_IP\" - <<EOF
requirepass \"$pw\"
masterauth \"$pw\"
EOF
";

/// The StatefulSet of `replicas` servers: each binds its pod's address, takes its password
/// from the Secret (on standard input, see [`SERVER_SCRIPT`]) and keeps its data on a volume
/// of its own.
pub fn stateful_set(cluster: &RedisCluster, owner: &OwnerReference, replicas: i32) -> Value {
    let name = cluster.name_any();
    let storage = cluster.spec.storage.clone().unwrap_or_default();
    let size = if storage.size.is_empty() {
        DEFAULT_STORAGE.to_owned()
    } else {
        storage.size
    };
    let mut claim = json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    });
    if let Some(class) = storage.storage_class_name {
        claim["spec"]["storageClassName"] = json!(class);
    }
    let mut container = json!({
        "name": "redis",
        "image": cluster.image(),
        "command": ["sh", "-c", SERVER_SCRIPT],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef":
                {"name": auth_secret_name(cluster), "key": "password"}}},
        ],
        "ports": [{"name": "redis", "containerPort": 6379}],
        "readinessProbe": {"tcpSocket": {"port": "redis"}, "periodSeconds": 2},
        "livenessProbe": {"tcpSocket": {"port": "redis"}, "periodSeconds": 5, "failureThreshold": 6},
        "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "config", "mountPath": "/etc/redis"},
        ],
    });
    if let Some(resources) = &cluster.spec.resources {
        container["resources"] = json!(resources);
    }
    let mut volumes =
        vec![json!({"name": "config", "configMap": {"name": format!("{name}-config")}})];
    let mut init = Vec::new();
    if let Some(restore) = &cluster.spec.restore_from {
        // A server whose volume holds no data yet starts from the snapshot: it becomes the
        // base of Redis 7's append-only files (with `appendonly yes` a `dump.rdb` alone is
        // not loaded).
        init.push(json!({
            "name": "restore",
            "image": cluster.image(),
            "command": ["sh", "-c", "set -e\n\
                if [ ! -e /data/appendonlydir ] && [ ! -e /data/appendonly.aof ]; then\n\
                  mkdir -p /data/appendonlydir\n\
                  cp \"/restore/$FILE\" /data/appendonlydir/appendonly.aof.1.base.rdb\n\
                  echo 'file appendonly.aof.1.base.rdb seq 1 type b' > /data/appendonlydir/appendonly.aof.manifest\n\
                fi\n"],
            "env": [{"name": "FILE", "value": restore.file}],
            "volumeMounts": [
                {"name": "data", "mountPath": "/data"},
                {"name": "restore", "mountPath": "/restore", "readOnly": true},
            ],
        }));
        volumes.push(json!({"name": "restore", "persistentVolumeClaim":
            {"claimName": restore.claim_name, "readOnly": true}}));
    }
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": metadata(cluster, &name, Some(owner)),
        "spec": {
            "replicas": replicas,
            "serviceName": headless_name(cluster),
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector(cluster)},
            "template": {
                "metadata": {"labels": labels(cluster)},
                "spec": {
                    "terminationGracePeriodSeconds": 10,
                    "initContainers": init,
                    "containers": [container],
                    "volumes": volumes,
                },
            },
            "volumeClaimTemplates": [claim],
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
        },
    })
}

/// The backup volume (`<name>-backup`): not owned by the cluster, so the snapshots outlive it.
pub fn backup_claim(cluster: &RedisCluster) -> Value {
    let storage = cluster.spec.storage.clone().unwrap_or_default();
    let mut claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": metadata(cluster, &format!("{}-backup", cluster.name_any()), None),
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": DEFAULT_STORAGE}}},
    });
    if let Some(class) = storage.storage_class_name {
        claim["spec"]["storageClassName"] = json!(class);
    }
    claim
}

/// The environment variable kube gives pods for Service `name`'s `suffix` (`HOST`, `PORT`).
fn service_variable(name: &str, suffix: &str) -> String {
    format!(
        "{}_SERVICE_{suffix}",
        name.to_uppercase().replace(['-', '.'], "_")
    )
}

/// The pod template of a backup Job: `redis-cli --rdb` through the `-primary` Service (its
/// address from the Service variables kube gives pods) into `/backup/<job>.rdb`, then only
/// the newest `retain` snapshots are kept.
pub fn backup_job_spec(cluster: &RedisCluster) -> Value {
    let name = cluster.name_any();
    let primary = format!("{name}-primary");
    let script = format!(
        "set -e\n\
         file=/backup/$JOB_NAME.rdb\n\
         redis-cli -h \"${{{host}}}\" -p \"${{{port}}}\" --rdb \"$file.partial\"\n\
         mv \"$file.partial\" \"$file\"\n\
         ls -1t /backup/*.rdb | tail -n +$((RETAIN + 1)) | xargs -r rm -f\n\
         echo \"$file\"\n",
        host = service_variable(&primary, "HOST"),
        port = service_variable(&primary, "PORT"),
    );
    json!({
        "backoffLimit": 2,
        "template": {
            "metadata": {"labels": {BACKUP_LABEL: name.clone()}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "backup",
                    "image": cluster.image(),
                    "command": ["sh", "-c", script],
                    "env": [
                        {"name": "JOB_NAME", "valueFrom": {"fieldRef":
                            {"fieldPath": "metadata.labels['batch.kubernetes.io/job-name']"}}},
                        {"name": "RETAIN", "value": cluster.retain().to_string()},
                        // redis-cli's password from its environment, not its arguments.
                        {"name": "REDISCLI_AUTH", "valueFrom": {"secretKeyRef":
                            {"name": auth_secret_name(cluster), "key": "password"}}},
                    ],
                    "volumeMounts": [{"name": "backup", "mountPath": "/backup"}],
                }],
                "volumes": [{"name": "backup", "persistentVolumeClaim":
                    {"claimName": format!("{name}-backup")}}],
            },
        },
    })
}

/// A backup Job named `job`.
pub fn backup_job(cluster: &RedisCluster, owner: &OwnerReference, job: &str) -> Value {
    let mut meta = metadata(cluster, job, Some(owner));
    meta["labels"][BACKUP_LABEL] = json!(cluster.name_any());
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": meta,
        "spec": backup_job_spec(cluster),
    })
}

/// The scheduled backups' CronJob (`<name>-backup`).
pub fn backup_cron_job(cluster: &RedisCluster, owner: &OwnerReference, schedule: &str) -> Value {
    let name = cluster.name_any();
    let mut template_meta = json!({"labels": {BACKUP_LABEL: name.clone()}});
    template_meta["labels"][INSTANCE_LABEL] = json!(name.clone());
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": metadata(cluster, &format!("{name}-backup"), Some(owner)),
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 1,
            "jobTemplate": {"metadata": template_meta, "spec": backup_job_spec(cluster)},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Backup, RedisClusterSpec};

    fn cluster() -> RedisCluster {
        let mut cluster = RedisCluster::new(
            "cache",
            RedisClusterSpec {
                replicas: 3,
                backup: Some(Backup {
                    schedule: Some("*/5 * * * *".into()),
                    retain: Some(2),
                }),
                ..RedisClusterSpec::default()
            },
        );
        cluster.metadata.namespace = Some("shop".into());
        cluster
    }

    #[test]
    fn backups_reach_the_primary_through_its_service_variables() {
        let spec = backup_job_spec(&cluster());
        let script = spec["template"]["spec"]["containers"][0]["command"][2]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(script.contains("${CACHE_PRIMARY_SERVICE_HOST}"), "{script}");
        assert!(script.contains("${CACHE_PRIMARY_SERVICE_PORT}"), "{script}");
        assert!(!script.contains("-a "), "no password argument: {script}");
        assert_eq!(
            spec["template"]["spec"]["containers"][0]["env"][1]["value"],
            "2"
        );
    }

    #[test]
    fn the_statefulset_binds_the_pods_address_and_selects_the_cluster() {
        let owner = OwnerReference::default();
        let set = stateful_set(&cluster(), &owner, 3);
        assert_eq!(set["spec"]["replicas"], 3);
        assert_eq!(set["spec"]["serviceName"], "cache-headless");
        assert_eq!(
            set["spec"]["selector"]["matchLabels"][INSTANCE_LABEL],
            "cache"
        );
        let container = &set["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["command"][0], "sh");
        let script = container["command"][2].as_str().unwrap_or_default();
        assert!(
            script.contains(
                r#"exec redis-server /etc/redis/redis.conf --bind "$POD_IP" --replica-announce-ip "$POD_IP" - <<EOF"#
            ),
            "{script}"
        );
        // The password reaches the server on standard input, never as an argument.
        assert!(script.contains("requirepass \"$pw\""), "{script}");
        assert!(!container.to_string().contains("--requirepass"));
        assert_eq!(
            selector_text(&cluster()),
            "app.kubernetes.io/name=redis,app.kubernetes.io/instance=cache"
        );
        let names: Vec<String> = services(&cluster(), &owner)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["cache-headless", "cache-primary", "cache-replicas"]);
    }
}
