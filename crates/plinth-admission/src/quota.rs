//! kube's ResourceQuota admission, for object counts: a create in a namespace with quotas on
//! its resource (`count/widgets.example.com`, `count/configmaps`, or the older `configmaps`,
//! `secrets`, …) is counted in each quota's `status.used` — a guaranteed update of the quota,
//! so two creates cannot both take the last place — or refused when it would pass `hard`.

use plinth_core::ApiError;
use serde_json::{Value, json};

use super::{Operation, Request};
use plinth_registry::resources::Objects;
use plinth_registry::resources::ResourceDef;
use plinth_registry::{ListOptions, Part, WriteOptions};
use plinth_types::core::resourcequota::count_of;

/// The core resources quotas may also name without `count/`.
const LEGACY: [&str; 7] = [
    "configmaps",
    "secrets",
    "services",
    "pods",
    "persistentvolumeclaims",
    "replicationcontrollers",
    "resourcequotas",
];

/// The quota resource names a create of `def` counts against.
pub fn counted_as(def: &ResourceDef) -> Vec<String> {
    let (group, plural) = (&def.group_version.group, &def.plural);
    if group.is_empty() {
        let mut names = vec![format!("count/{plural}")];
        if LEGACY.contains(&plural.as_str()) {
            names.push(plural.clone());
        }
        names
    } else {
        vec![format!("count/{plural}.{group}")]
    }
}

/// The resource a quota resource name counts (`count/widgets.example.com` →
/// (`example.com`, `widgets`)).
pub fn resource_of(name: &str) -> Option<(String, String)> {
    if let Some(rest) = name.strip_prefix("count/") {
        return Some(match rest.split_once('.') {
            Some((plural, group)) => (group.to_owned(), plural.to_owned()),
            None => (String::new(), rest.to_owned()),
        });
    }
    LEGACY
        .contains(&name)
        .then(|| (String::new(), name.to_owned()))
}

/// When each quota (namespace, name) last counted a create: the quota controller leaves a count
/// it would lower alone for a while after, as the object may not be stored yet.
#[derive(Debug, Default)]
pub struct Ledger {
    counted: std::sync::Mutex<std::collections::HashMap<(String, String), std::time::Instant>>,
}

impl Ledger {
    /// When quota `name` in `namespace` last counted a create made through this server.
    pub fn counted_at(&self, namespace: &str, name: &str) -> Option<std::time::Instant> {
        self.counted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(namespace.to_owned(), name.to_owned()))
            .copied()
    }

    fn note(&self, namespace: &str, name: &str) {
        self.counted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                (namespace.to_owned(), name.to_owned()),
                std::time::Instant::now(),
            );
    }
}

/// Counts a create against the quotas of its namespace.
///
/// # Errors
/// 403 `exceeded quota: …` or `status unknown for quota: …`, as kube words them.
pub fn admit<'a>(
    objects: &'a dyn Objects,
    ledger: &'a Ledger,
    request: &'a Request<'a>,
) -> futures::future::BoxFuture<'a, Result<(), ApiError>> {
    // Boxed: counting writes the quota, whose write is admitted in turn.
    Box::pin(count_create(objects, ledger, request))
}

async fn count_create(
    objects: &dyn Objects,
    ledger: &Ledger,
    request: &Request<'_>,
) -> Result<(), ApiError> {
    let def = request.def;
    if request.operation != Operation::Create || !def.namespaced || !request.subresource.is_empty()
    {
        return Ok(());
    }
    let (Some(namespace), Some(quotas)) = (
        request.namespace,
        objects.resource("", "v1", "resourcequotas"),
    ) else {
        return Ok(());
    };
    let names = counted_as(def);
    let list = objects
        .list(&quotas, Some(namespace), &ListOptions::any_state())
        .await?;
    for quota in list["items"].as_array().into_iter().flatten() {
        let Some(hard) = quota.pointer("/spec/hard").and_then(Value::as_object) else {
            continue;
        };
        let limited: Vec<&String> = names.iter().filter(|n| hard.contains_key(*n)).collect();
        if limited.is_empty() {
            continue;
        }
        let quota_name = plinth_core::meta::name(quota).unwrap_or("").to_owned();
        let refuse =
            |why: String| ApiError::forbidden(Some(&def.group_resource()), request.name, &why);
        let count = |current: &mut Value| -> Result<bool, ApiError> {
            for name in &limited {
                let Some(limit) = current
                    .pointer("/status/hard")
                    .and_then(|h| h.get(name.as_str()))
                    .and_then(count_of)
                else {
                    return Err(refuse(format!(
                        "status unknown for quota: {quota_name}, resource: {name}"
                    )));
                };
                let used = current
                    .pointer("/status/used")
                    .and_then(|u| u.get(name.as_str()))
                    .and_then(count_of)
                    .unwrap_or(0);
                if used + 1 > limit {
                    return Err(refuse(format!(
                        "exceeded quota: {quota_name}, requested: {name}=1, used: {name}={used}, limited: {name}={limit}"
                    )));
                }
                if !current.get("status").is_some_and(Value::is_object) {
                    current["status"] = json!({});
                }
                if !current["status"].get("used").is_some_and(Value::is_object) {
                    current["status"]["used"] = json!({});
                }
                current["status"]["used"][name.as_str()] = json!((used + 1).to_string());
            }
            Ok(true)
        };
        if request.dry_run {
            count(&mut quota.clone())?;
            continue;
        }
        // Noted before the count is written: the controller, seeing the write, must already
        // know that this create's object may not be stored yet.
        ledger.note(namespace, &quota_name);
        objects
            .modify(
                &quotas,
                Some(namespace),
                &quota_name,
                Part::Status,
                &WriteOptions::internal("resourcequota-admission"),
                &count,
            )
            .await?;
    }
    Ok(())
}
