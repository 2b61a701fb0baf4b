//! Keeps the webhooks in force in step with the Mutating/ValidatingWebhookConfigurations: read
//! once before the server serves, then followed from their watches.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use plinth_core::ApiError;
use serde_json::Value;
use tokio::sync::watch;

use super::{Admission, webhook};
use plinth_registry::{Client, ListOptions};

const GROUP: &str = "admissionregistration.k8s.io";
const KINDS: [(&str, bool); 2] = [
    ("mutatingwebhookconfigurations", true),
    ("validatingwebhookconfigurations", false),
];

fn publish(admission: &Admission, mutating: bool, configurations: &BTreeMap<String, Value>) {
    let hooks = configurations
        .values()
        .flat_map(|c| webhook::parse(c, mutating))
        .collect();
    admission.set(mutating, hooks);
}

const POLICY_KINDS: [&str; 2] = [
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
];

/// The policies and bindings seen, by resource and name.
type Seen = std::sync::Mutex<BTreeMap<&'static str, BTreeMap<String, Value>>>;

fn publish_policies(admission: &Admission, seen: &Seen) {
    let seen = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut policies = super::policy::Policies::default();
    for object in seen
        .get(POLICY_KINDS[0])
        .into_iter()
        .flat_map(BTreeMap::values)
    {
        match super::policy::Policy::parse(object) {
            Some(policy) => {
                let name = plinth_core::meta::name(object).unwrap_or("").to_owned();
                policies.policies.insert(name, Arc::new(policy));
            }
            None => {
                tracing::warn!(policy = ?plinth_core::meta::name(object), "policy left out: it does not compile")
            }
        }
    }
    for object in seen
        .get(POLICY_KINDS[1])
        .into_iter()
        .flat_map(BTreeMap::values)
    {
        if let Some(binding) = super::policy::Binding::parse(object) {
            policies.bindings.push(Arc::new(binding));
        }
    }
    admission.set_policies(policies);
}

/// kube's policy status: the generation checked and its type checking (fields the matched
/// types do not declare).
async fn report_status(
    registry: &Client,
    def: &plinth_registry::resources::ResourceDef,
    policy: &Value,
) {
    let generation = policy
        .pointer("/metadata/generation")
        .cloned()
        .unwrap_or(Value::Null);
    if policy.pointer("/status/observedGeneration") == Some(&generation) {
        return;
    }
    let Some(name) = plinth_core::meta::name(policy) else {
        return;
    };
    let type_checking = super::policy::type_check(registry, policy);
    let options =
        plinth_registry::WriteOptions::internal("validatingadmissionpolicy-status-controller");
    let written = registry
        .modify(
            def,
            None,
            name,
            plinth_registry::Part::Status,
            &options,
            |current| {
                let generation = current
                    .pointer("/metadata/generation")
                    .cloned()
                    .unwrap_or(Value::Null);
                if current.pointer("/status/observedGeneration") == Some(&generation) {
                    return Ok(false);
                }
                current["status"] = serde_json::json!({"observedGeneration": generation,
                    "typeChecking": type_checking.clone()});
                Ok(true)
            },
        )
        .await;
    if let Err(e) = written
        && e.reason != plinth_core::StatusReason::NotFound
    {
        tracing::warn!(policy = name, error = %e.message, "could not write the policy's status");
    }
}

async fn follow_policies(
    registry: Client,
    admission: Arc<Admission>,
    stopping: watch::Receiver<bool>,
    plural: &'static str,
    seen: Arc<Seen>,
) {
    loop {
        let Some((def, mut events)) = registry
            .watch_until_stopped((GROUP, plural), &stopping, "admission policies")
            .await
        else {
            return;
        };
        seen.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(plural, BTreeMap::new());
        while let Some(event) = events.next().await {
            let object = event.object();
            let Some(name) = plinth_core::meta::name(&object).map(str::to_owned) else {
                continue;
            };
            {
                let mut all = seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let these = all.entry(plural).or_default();
                match event.kind {
                    "ADDED" | "MODIFIED" => {
                        these.insert(name, (*object).clone());
                    }
                    "DELETED" => {
                        these.remove(&name);
                    }
                    _ => continue,
                }
            }
            publish_policies(&admission, &seen);
            if plural == POLICY_KINDS[0] && event.kind != "DELETED" {
                report_status(&registry, &def, &object).await;
            }
        }
        if *stopping.borrow() {
            return;
        }
    }
}

/// Reads the configurations there are, then follows them until the server stops.
///
/// # Errors
/// A list that fails at start.
pub async fn start(
    registry: &Client,
    admission: &Arc<Admission>,
    stopping: &watch::Receiver<bool>,
) -> Result<(), ApiError> {
    for (plural, mutating) in KINDS {
        let Some(def) = registry.resources.get(GROUP, "v1", plural) else {
            continue;
        };
        let list = registry.list(&def, None, &ListOptions::default()).await?;
        let configurations: BTreeMap<String, Value> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| Some((plinth_core::meta::name(c)?.to_owned(), c.clone())))
            .collect();
        publish(admission, mutating, &configurations);
        tokio::spawn(follow(
            registry.clone(),
            admission.clone(),
            stopping.clone(),
            plural,
            mutating,
        ));
    }
    let seen: Arc<Seen> = Arc::default();
    for plural in POLICY_KINDS {
        let Some(def) = registry.resources.get(GROUP, "v1", plural) else {
            continue;
        };
        let list = registry.list(&def, None, &ListOptions::default()).await?;
        let objects: BTreeMap<String, Value> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| Some((plinth_core::meta::name(c)?.to_owned(), c.clone())))
            .collect();
        seen.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(plural, objects);
    }
    publish_policies(admission, &seen);
    for plural in POLICY_KINDS {
        tokio::spawn(follow_policies(
            registry.clone(),
            admission.clone(),
            stopping.clone(),
            plural,
            seen.clone(),
        ));
    }
    Ok(())
}

async fn follow(
    registry: Client,
    admission: Arc<Admission>,
    stopping: watch::Receiver<bool>,
    plural: &'static str,
    mutating: bool,
) {
    loop {
        let Some((_, mut events)) = registry
            .watch_until_stopped((GROUP, plural), &stopping, "admission webhooks")
            .await
        else {
            return;
        };
        // The watch begins with every configuration there is.
        let mut configurations = BTreeMap::new();
        while let Some(event) = events.next().await {
            let object = event.object();
            let Some(name) = plinth_core::meta::name(&object).map(str::to_owned) else {
                continue;
            };
            match event.kind {
                "ADDED" | "MODIFIED" => {
                    configurations.insert(name, (*object).clone());
                }
                "DELETED" => {
                    configurations.remove(&name);
                }
                _ => continue,
            }
            publish(&admission, mutating, &configurations);
        }
        if *stopping.borrow() {
            return;
        }
    }
}
