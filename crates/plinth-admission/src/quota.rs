//! kube's ResourceQuota admission: a create in a namespace with quotas (and an update of a
//! Service or a claim, whose usage can grow) is charged to each quota that counts it — what
//! the object uses ([`plinth_types::core::quota_usage`]: its object count, a pod's compute
//! requests and limits, a Service's node ports, a claim's storage) added to `status.used` by a
//! guaranteed update of the quota, so two writes cannot both take the last place — or refused
//! when it would pass `hard`.

use plinth_core::ApiError;
use serde_json::{Value, json};

use super::{Operation, Request};
use plinth_registry::resources::Objects;
use plinth_registry::{ListOptions, Part, WriteOptions};
use plinth_types::core::quota_usage::{self, Usage, milli, quantity};

pub use plinth_types::core::quota_usage::measured_resource as resource_of;

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

/// Charges a write to the quotas of its namespace.
///
/// # Errors
/// 403 `exceeded quota: …` or `status unknown for quota: …`, as kube words them.
pub fn admit<'a>(
    objects: &'a dyn Objects,
    ledger: &'a Ledger,
    request: &'a Request<'a>,
    object: Option<&'a Value>,
    old: Option<&'a Value>,
) -> futures::future::BoxFuture<'a, Result<(), ApiError>> {
    // Boxed: charging writes the quota, whose write is admitted in turn.
    Box::pin(charge(objects, ledger, request, object, old))
}

/// What the write adds to what its object uses: all of it for a create; for an update of a
/// Service or a claim, what grew (kube's other evaluators do not handle updates).
fn delta(request: &Request<'_>, object: &Value, old: Option<&Value>) -> Option<Usage> {
    let (group, plural) = (
        request.def.group_version.group.as_str(),
        request.def.plural.as_str(),
    );
    let now = plinth_registry::now();
    match (request.operation, old) {
        (Operation::Create, _) => Some(quota_usage::usage(group, plural, object, now)),
        (Operation::Update, Some(old))
            if group.is_empty() && matches!(plural, "services" | "persistentvolumeclaims") =>
        {
            let before = quota_usage::usage(group, plural, old, now);
            let after = quota_usage::usage(group, plural, object, now);
            Some(
                after
                    .into_iter()
                    .map(|(name, m)| {
                        let grown = (m - before.get(&name).copied().unwrap_or(0)).max(0);
                        (name, grown)
                    })
                    .collect(),
            )
        }
        _ => None,
    }
}

/// `a=1,b=2`, names sorted, as kube prints resource lists in quota errors.
fn listed(values: &[(String, i128)]) -> String {
    let mut values = values.to_vec();
    values.sort();
    values
        .iter()
        .map(|(name, m)| format!("{name}={}", quantity(name, *m)))
        .collect::<Vec<_>>()
        .join(",")
}

async fn charge(
    objects: &dyn Objects,
    ledger: &Ledger,
    request: &Request<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let def = request.def;
    if !def.namespaced || !request.subresource.is_empty() {
        return Ok(());
    }
    let (Some(namespace), Some(quotas), Some(object)) = (
        request.namespace,
        objects.resource("", "v1", "resourcequotas"),
        object,
    ) else {
        return Ok(());
    };
    let Some(delta) = delta(request, object, old) else {
        return Ok(());
    };
    // A lister's read (kube's quota admission reads its informer): most namespaces have no
    // quota, and finding none costs no list.
    let items = match objects.cached_list(&quotas, Some(namespace)) {
        Some(items) => items,
        None => {
            let mut list = objects
                .list(&quotas, Some(namespace), &ListOptions::any_state())
                .await?;
            match list["items"].take() {
                Value::Array(items) => items,
                _ => Vec::new(),
            }
        }
    };
    let (group, plural) = (def.group_version.group.as_str(), def.plural.as_str());
    for quota in &items {
        let Some(hard) = quota.pointer("/spec/hard").and_then(Value::as_object) else {
            continue;
        };
        let requested: Vec<(String, i128)> = delta
            .iter()
            .filter(|(name, m)| hard.contains_key(*name) && **m > 0)
            .map(|(name, m)| (name.clone(), *m))
            .collect();
        if requested.is_empty() || !quota_usage::quota_counts(quota, group, plural, object) {
            continue;
        }
        let quota_name = plinth_core::meta::name(quota).unwrap_or("").to_owned();
        let refuse =
            |why: String| ApiError::forbidden(Some(&def.group_resource()), request.name, &why);
        let count = |current: &mut Value| -> Result<bool, ApiError> {
            let mut exceeded = Vec::new();
            let mut new_used = Vec::new();
            for (name, wanted) in &requested {
                let Some(limit) = current
                    .pointer("/status/hard")
                    .and_then(|h| h.get(name.as_str()))
                    .and_then(milli)
                else {
                    return Err(refuse(format!(
                        "status unknown for quota: {quota_name}, resource: {name}"
                    )));
                };
                let used = current
                    .pointer("/status/used")
                    .and_then(|u| u.get(name.as_str()))
                    .and_then(milli)
                    .unwrap_or(0);
                if used + wanted > limit {
                    exceeded.push((name.clone(), *wanted, used, limit));
                }
                new_used.push((name.clone(), used + wanted));
            }
            if !exceeded.is_empty() {
                let pick = |f: fn(&(String, i128, i128, i128)) -> i128| -> Vec<(String, i128)> {
                    exceeded.iter().map(|e| (e.0.clone(), f(e))).collect()
                };
                return Err(refuse(format!(
                    "exceeded quota: {quota_name}, requested: {}, used: {}, limited: {}",
                    listed(&pick(|e| e.1)),
                    listed(&pick(|e| e.2)),
                    listed(&pick(|e| e.3)),
                )));
            }
            if !current.get("status").is_some_and(Value::is_object) {
                current["status"] = json!({});
            }
            if !current["status"].get("used").is_some_and(Value::is_object) {
                current["status"]["used"] = json!({});
            }
            for (name, used) in new_used {
                current["status"]["used"][name.as_str()] = json!(quantity(&name, used));
            }
            Ok(true)
        };
        if request.dry_run {
            count(&mut quota.clone())?;
            continue;
        }
        // Noted before the count is written: the controller, seeing the write, must already
        // know that this write's object may not be stored yet.
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
