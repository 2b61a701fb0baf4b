//! scheduling.k8s.io/v1 PriorityClass: a name for a pod priority. The server starts with the
//! two system classes; the Priority admission plugin ([`admit_pod`]) gives each new pod its
//! class's value (the global default's, or 0) and preemption policy, and the scheduler orders
//! and preempts by it.

use futures::future::BoxFuture;
use plinth_core::{ApiError, Cause};
use serde_json::{Value, json};

use plinth_core::gvk::GroupResource;
use plinth_registry::ListOptions;
use plinth_registry::resources::{Objects, ResourceDef, age_cell, column};
use plinth_registry::schema::{Schema, top};
use plinth_registry::strategy::Strategy;

/// The highest value a class that is not a system class may have.
pub const HIGHEST_USER_DEFINABLE: i64 = 1_000_000_000;
/// The prefix reserved for the system classes.
pub const SYSTEM_PREFIX: &str = "system-";

/// The system classes (name, value, description), created when the server starts.
pub const SYSTEM_CLASSES: [(&str, i64, &str); 2] = [
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

/// The `priorityclasses` resource.
pub fn resource() -> ResourceDef {
    let mut def = ResourceDef::new("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses")
        .cluster_scoped()
        .short_names(&["pc"])
        .no_age_column()
        .columns(vec![
            column("Value", "integer", "value represents the integer value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec.", 0, |o, _| json!(o["value"].as_i64().unwrap_or(0))),
            column("Global-Default", "boolean", "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class. Only one PriorityClass can be marked as `globalDefault`. However, if more than one PriorityClasses exists with their `globalDefault` field set to true, the smallest value of such global default PriorityClasses will be used as the default priority.", 0, |o, _| json!(o["globalDefault"] == true)),
            column("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata", 0, |o, now| age_cell(o, "metadata.creationTimestamp", now)),
            column("PreemptionPolicy", "string", "preemptionPolicy is the Policy for preempting pods with lower priority. One of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset.", 0, |o, _| o["preemptionPolicy"].clone()),
        ])
        .schema(top(vec![
            ("value", Schema::Int),
            ("globalDefault", Schema::Bool),
            ("description", Schema::String),
            ("preemptionPolicy", Schema::String),
        ]))
        .strategy(PriorityClasses);
    def.allocate = Some(one_default);
    def
}

/// The system classes as objects.
pub fn system_classes() -> Vec<Value> {
    SYSTEM_CLASSES
        .iter()
        .map(|(name, value, description)| {
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value, "description": description,
                "preemptionPolicy": "PreemptLowerPriority"})
        })
        .collect()
}

#[derive(Debug)]
struct PriorityClasses;

impl Strategy for PriorityClasses {
    fn prepare_create(&self, object: &mut Value) {
        if let Some(o) = object.as_object_mut() {
            o.entry("preemptionPolicy")
                .or_insert_with(|| json!("PreemptLowerPriority"));
        }
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let name = plinth_core::meta::name(object).unwrap_or("");
        let value = object["value"].as_i64().unwrap_or(0);
        let default = object["globalDefault"] == true;
        if let Some(old) = old {
            if old["value"] != object["value"] {
                causes.push(Cause::forbidden(
                    "value",
                    "may not be changed in an update.",
                ));
            }
            if old["preemptionPolicy"] != object["preemptionPolicy"] {
                causes.push(Cause::immutable(
                    "preemptionPolicy",
                    &object["preemptionPolicy"],
                ));
            }
            return causes;
        }
        if name.starts_with(SYSTEM_PREFIX) {
            let known = SYSTEM_CLASSES.iter().find(|(n, _, _)| *n == name);
            let error = match known {
                None => Some(format!("{name} is not a known system priority class")),
                Some((_, v, _)) if *v != value => {
                    Some(format!("value of {name} PriorityClass must be {v}"))
                }
                Some(_) if default => Some(format!(
                    "globalDefault of {name} PriorityClass must be false"
                )),
                Some(_) => None,
            };
            if let Some(error) = error {
                causes.push(Cause::forbidden(
                    "metadata.name",
                    &format!("priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system use only. error: {error}"),
                ));
            }
        } else if value > HIGHEST_USER_DEFINABLE {
            causes.push(Cause::forbidden(
                "value",
                &format!(
                    "maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE}"
                ),
            ));
        }
        match object["preemptionPolicy"].as_str() {
            Some("PreemptLowerPriority" | "Never") | None => {}
            Some("") => causes.push(Cause::required("preemptionPolicy", "")),
            Some(other) => causes.push(Cause::not_supported(
                "preemptionPolicy",
                &json!(other),
                &["PreemptLowerPriority", "Never"],
            )),
        }
        causes
    }
}

fn resource_of() -> GroupResource {
    GroupResource::new("scheduling.k8s.io", "priorityclasses")
}

/// The global default class: of several (a race), the one of the lowest value.
async fn global_default(objects: &dyn Objects) -> Result<Option<Value>, ApiError> {
    let Some(def) = objects.resource("scheduling.k8s.io", "v1", "priorityclasses") else {
        return Ok(None);
    };
    let classes = objects.list(&def, None, &ListOptions::default()).await?;
    Ok(classes["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["globalDefault"] == true)
        .min_by_key(|c| c["value"].as_i64().unwrap_or(0))
        .cloned())
}

/// Only one class may be the global default (the Priority plugin's check of a new class).
fn one_default<'a>(
    objects: &'a dyn Objects,
    class: &'a mut Value,
) -> BoxFuture<'a, Result<(), ApiError>> {
    Box::pin(only_default(objects, class))
}

/// The Priority plugin's check of a class written (created, or updated: then the default
/// may be itself): no other class may be the global default already.
///
/// # Errors
/// kube's 403 naming the existing default.
pub async fn only_default(objects: &dyn Objects, class: &Value) -> Result<(), ApiError> {
    if class["globalDefault"] != true {
        return Ok(());
    }
    let name = plinth_core::meta::name(class).unwrap_or("");
    if let Some(existing) = global_default(objects).await?
        && plinth_core::meta::name(&existing) != Some(name)
    {
        return Err(ApiError::forbidden(
            Some(&resource_of()),
            name,
            &format!(
                "PriorityClass {} is already marked as default. Only one default can exist",
                plinth_core::meta::name(&existing).unwrap_or("")
            ),
        ));
    }
    Ok(())
}

/// The Priority admission plugin for a new pod: its class's value and preemption policy (the
/// global default's when it names none, else 0 and `PreemptLowerPriority`).
///
/// # Errors
/// 403 for a class that does not exist, or a priority or policy in the pod that differs from
/// its class's.
pub async fn admit_pod(objects: &dyn Objects, pod: &mut Value) -> Result<(), ApiError> {
    let Some(def) = objects.resource("scheduling.k8s.io", "v1", "priorityclasses") else {
        return Ok(());
    };
    let pods = GroupResource::new("", "pods");
    let name = plinth_core::meta::name(pod).unwrap_or("").to_owned();
    let named = pod
        .pointer("/spec/priorityClassName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_owned);
    let (class_name, priority, policy) = match &named {
        Some(class_name) => {
            let class = match objects.cached(&def, None, class_name) {
                Some(found) => found,
                None => objects.get(&def, None, class_name).await.ok(),
            };
            let Some(class) = class else {
                return Err(ApiError::forbidden(
                    Some(&pods),
                    &name,
                    &format!("no PriorityClass with name {class_name} was found"),
                ));
            };
            (
                class_name.clone(),
                class["value"].as_i64().unwrap_or(0),
                class["preemptionPolicy"].as_str().map(str::to_owned),
            )
        }
        None => match global_default(objects).await? {
            Some(class) => (
                plinth_core::meta::name(&class).unwrap_or("").to_owned(),
                class["value"].as_i64().unwrap_or(0),
                class["preemptionPolicy"].as_str().map(str::to_owned),
            ),
            None => (String::new(), 0, Some("PreemptLowerPriority".to_owned())),
        },
    };
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if let Some(given) = spec.get("priority").and_then(Value::as_i64)
        && given != priority
    {
        return Err(ApiError::forbidden(
            Some(&pods),
            &name,
            &format!(
                "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
            ),
        ));
    }
    if named.is_none() && !class_name.is_empty() {
        spec.insert("priorityClassName".into(), json!(class_name));
    }
    spec.insert("priority".into(), json!(priority));
    if let Some(policy) = policy {
        if let Some(given) = spec.get("preemptionPolicy").and_then(Value::as_str)
            && given != policy
        {
            return Err(ApiError::forbidden(
                Some(&pods),
                &name,
                &format!(
                    "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
                ),
            ));
        }
        spec.insert("preemptionPolicy".into(), json!(policy));
    }
    Ok(())
}
