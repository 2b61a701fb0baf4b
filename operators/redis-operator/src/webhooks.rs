//! The operator's admission webhooks: a defaulter (the image, the data volume's size, the
//! backups kept) and a validator (a cron schedule, a quantity, a Secret name, a storage
//! class that cannot change under a StatefulSet), and the configurations that send
//! RedisClusters to them.

use plinth_runtime::webhook::{
    AdmissionRequest, Defaulter, Validator, Verdict, WebhookServer, WebhookTarget,
};
use serde_json::Value;

use crate::types::{DEFAULT_IMAGE, DEFAULT_STORAGE, RedisCluster, Storage};

/// Where the defaulter is served.
pub const DEFAULT_PATH: &str = "/default-database-example-com-v1alpha1-rediscluster";
/// Where the validator is served.
pub const VALIDATE_PATH: &str = "/validate-database-example-com-v1alpha1-rediscluster";
/// The name of both webhook configurations.
pub const CONFIGURATION: &str = "redis-operator";

/// Fills in what a cluster leaves out: `image`, `storage.size`, `backup.retain`.
#[derive(Debug)]
pub struct Defaults;

impl Defaulter<RedisCluster> for Defaults {
    async fn default(
        &self,
        _: &AdmissionRequest,
        cluster: &mut RedisCluster,
    ) -> Result<(), Verdict> {
        let spec = &mut cluster.spec;
        if spec.image.as_deref().is_none_or(str::is_empty) {
            spec.image = Some(DEFAULT_IMAGE.into());
        }
        let storage = spec.storage.get_or_insert_with(Storage::default);
        if storage.size.is_empty() {
            DEFAULT_STORAGE.clone_into(&mut storage.size);
        }
        if let Some(backup) = spec.backup.as_mut() {
            backup.retain.get_or_insert(3);
        }
        Ok(())
    }
}

/// Whether `text` is a Kubernetes quantity (`1Gi`, `500M`, `1.5e3`).
fn quantity(text: &str) -> bool {
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    let numeric = !number.is_empty() && number.parse::<f64>().is_ok();
    let suffixes = [
        "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E",
    ];
    let exponent = suffix.strip_prefix(['e', 'E']).is_some_and(|e| {
        !e.is_empty()
            && e.trim_start_matches(['+', '-'])
                .chars()
                .all(|c| c.is_ascii_digit())
    });
    numeric && (suffixes.contains(&suffix) || exponent)
}

/// Whether `text` is a cron schedule the CronJob controller takes: five fields, or a
/// `@hourly`-style macro (each field's ranges are the CronJob's to check).
fn schedule(text: &str) -> bool {
    let text = text.trim();
    if let Some(name) = text.strip_prefix('@') {
        return [
            "yearly", "annually", "monthly", "weekly", "daily", "midnight", "hourly",
        ]
        .contains(&name);
    }
    let fields: Vec<&str> = text.split_whitespace().collect();
    fields.len() == 5
        && fields.iter().all(|f| {
            f.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '*' | '/' | ',' | '-' | '?'))
        })
}

/// Whether `name` is a DNS-1123 subdomain (a Secret's name).
fn subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Why `cluster` (replacing `old`, on an update) is refused, with kube's field-error form.
pub fn problems(cluster: &RedisCluster, old: Option<&RedisCluster>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(storage) = &cluster.spec.storage
        && !storage.size.is_empty()
        && !quantity(&storage.size)
    {
        out.push(format!(
            "spec.storage.size: Invalid value: {:?}: must be a quantity such as 1Gi",
            storage.size
        ));
    }
    if let Some(schedule_text) = cluster
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.schedule.as_ref())
        && !schedule(schedule_text)
    {
        out.push(format!(
            "spec.backup.schedule: Invalid value: {schedule_text:?}: must be a cron schedule (five fields, or @hourly, @daily…)"
        ));
    }
    if let Some(auth) = &cluster.spec.auth
        && !subdomain(&auth.secret_name)
    {
        out.push(format!(
            "spec.auth.secretName: Invalid value: {:?}: must be a Secret's name (a DNS-1123 subdomain)",
            auth.secret_name
        ));
    }
    if let Some(restore) = &cluster.spec.restore_from {
        if !subdomain(&restore.claim_name) {
            out.push(format!(
                "spec.restoreFrom.claimName: Invalid value: {:?}: must be a PersistentVolumeClaim's name (a DNS-1123 subdomain)",
                restore.claim_name
            ));
        }
        let file = restore.file.as_str();
        if file.is_empty() || file.contains('/') || file == "." || file == ".." {
            out.push(format!(
                "spec.restoreFrom.file: Invalid value: {file:?}: must be a file name on the claim (no '/')"
            ));
        }
    }
    if let Some(old) = old {
        let class = |c: &RedisCluster| {
            c.spec
                .storage
                .as_ref()
                .and_then(|s| s.storage_class_name.clone())
        };
        if class(old) != class(cluster) {
            out.push(
                "spec.storage.storageClassName: Invalid value: field is immutable (the StatefulSet's volume claims cannot change)"
                    .to_owned(),
            );
        }
    }
    out
}

/// Refuses what the operator could not run, warns about what it cannot protect.
#[derive(Debug)]
pub struct Valid;

impl Validator<RedisCluster> for Valid {
    async fn validate(
        &self,
        _: &AdmissionRequest,
        cluster: Option<&RedisCluster>,
        old: Option<&RedisCluster>,
    ) -> Verdict {
        let Some(cluster) = cluster else {
            return Verdict::allow();
        };
        let problems = problems(cluster, old);
        if !problems.is_empty() {
            let name = cluster.metadata.name.clone().unwrap_or_default();
            return Verdict::deny(format!(
                "RedisCluster.database.example.com {name:?} is invalid: {}",
                problems.join(", ")
            ))
            .with_code(422, "Invalid");
        }
        let verdict = Verdict::allow();
        if cluster.spec.enable_auto_failover && cluster.spec.replicas < 2 {
            return verdict.with_warning(
                "spec.enableAutoFailover: a cluster of one server has no replica to promote",
            );
        }
        verdict
    }
}

/// The webhook server with both handlers.
pub fn server() -> WebhookServer {
    WebhookServer::new()
        .defaulter(DEFAULT_PATH, Defaults)
        .validator(VALIDATE_PATH, Valid)
}

/// The Mutating- and ValidatingWebhookConfiguration sending redisclusters creates and updates
/// to the server at `base` (`https://host:port`); `caBundle` left for the server to fill in.
pub fn configurations<'a>(
    server: impl Into<plinth_runtime::webhook::WebhookEndpoint<'a>>,
) -> Vec<Value> {
    let target = WebhookTarget {
        group: "database.example.com",
        version: "v1alpha1",
        resource: "redisclusters",
        scope: "Namespaced",
    };
    plinth_runtime::webhook::configurations(
        CONFIGURATION,
        server,
        target,
        DEFAULT_PATH,
        VALIDATE_PATH,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_schedules_and_names() {
        for ok in ["1Gi", "500M", "1.5e3", "10", "0.5Ti"] {
            assert!(quantity(ok), "{ok}");
        }
        for bad in ["", "Gi", "1GB", "one", "1 Gi"] {
            assert!(!quantity(bad), "{bad}");
        }
        for ok in ["0 3 * * *", "*/5 * * * *", "@daily", "0 0 1,15 * MON-FRI"] {
            assert!(schedule(ok), "{ok}");
        }
        for bad in ["", "* * * *", "@sometimes", "0 3 * * * *", "rm -rf /"] {
            assert!(!schedule(bad), "{bad}");
        }
        assert!(subdomain("redis-auth") && subdomain("a.b"));
        assert!(!subdomain("Redis") && !subdomain("-x") && !subdomain(""));
    }

    #[test]
    fn a_restore_names_a_claim_and_a_file_on_it() {
        let cluster = |claim: &str, file: &str| {
            let mut cluster = RedisCluster::new("r", crate::RedisClusterSpec::default());
            cluster.spec.restore_from = Some(crate::types::RestoreFrom {
                claim_name: claim.into(),
                file: file.into(),
            });
            cluster
        };
        assert!(problems(&cluster("cache-backup", "cache-final-backup.rdb"), None).is_empty());
        let bad = problems(&cluster("Cache_Backup", "../../etc/passwd"), None);
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].starts_with("spec.restoreFrom.claimName: Invalid value: \"Cache_Backup\""));
        assert!(bad[1].starts_with("spec.restoreFrom.file: Invalid value: \"../../etc/passwd\""));
        assert_eq!(problems(&cluster("c", ".."), None).len(), 1);
    }
}
