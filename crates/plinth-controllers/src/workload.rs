//! What the controllers that own pods share (kube-controller-manager's `controller_utils`
//! and `ControllerRefManager`): controller references, a pod's readiness and availability,
//! pods made from a template, and claiming — adopting the orphans a selector matches,
//! releasing the owned pods it no longer matches.

use plinth_core::At as _;
use std::sync::Arc;
use std::time::Duration;

use plinth_core::selector::LabelSelector;
use plinth_core::{Frozen, Tree};
use plinth_registry::{Client, Part, WriteOptions};
use serde_json::{Map, Value, json};

use crate::informer::{Change, Informer, Queue, key_of};

/// How long a controller waits for its cache to show its own write.
pub(crate) const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(10);

/// The controller reference of `object` (its owner reference with `controller: true`).
pub(crate) fn controller_of(object: &Frozen) -> Option<&Frozen> {
    object
        .at("/metadata/ownerReferences")
        .and_then(Frozen::as_array)?
        .iter()
        .find(|o| o["controller"] == true)
}

/// A handler that queues the `kind` controlling the changed object (client-go's
/// `EnqueueRequestForOwner`) and, with `adopters`, for an orphan every one of them whose
/// selector matches its labels (any of them may adopt it).
pub(crate) fn enqueue_owner(
    queue: &Queue,
    kind: &'static str,
    adopters: Option<Informer>,
) -> impl Fn(Change<'_>) + Send + Sync + 'static {
    let queue = queue.clone();
    move |c| {
        for object in [c.new, c.old].into_iter().flatten() {
            let namespace = plinth_core::meta::namespace(object).unwrap_or("default");
            match controller_of(object) {
                Some(owner) if owner["kind"] == kind => {
                    if let Some(name) = owner["name"].as_str() {
                        queue.add(format!("{namespace}/{name}"));
                    }
                }
                Some(_) => {}
                None => {
                    let labels = plinth_core::meta::labels(object);
                    for adopter in adopters.iter().flat_map(|a| a.in_namespace(namespace)) {
                        if selector(&adopter).is_some_and(|s| s.matches(&labels)) {
                            queue.add(key_of(&adopter));
                        }
                    }
                }
            }
        }
    }
}

/// A controller reference to `owner` of `api_version`/`kind`.
pub(crate) fn controller_ref(owner: &(impl Tree + ?Sized), api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": plinth_core::meta::name(owner),
        "uid": plinth_core::meta::meta_str(owner, "uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// `metadata.uid`.
pub(crate) fn uid<T: Tree + ?Sized>(object: &T) -> &str {
    plinth_core::meta::meta_str(object, "uid").unwrap_or("")
}

/// Whether `object` is being deleted.
pub(crate) fn deleting<T: Tree + ?Sized>(object: &T) -> bool {
    object
        .field("metadata")
        .and_then(|m| m.field("deletionTimestamp"))
        .is_some_and(|t| !t.is_null())
}

/// kube's `IsPodActive`: not finished and not being deleted.
pub(crate) fn active(pod: &Frozen) -> bool {
    let phase = pod.at("/status/phase").and_then(Frozen::as_str);
    !matches!(phase, Some("Succeeded" | "Failed")) && !deleting(pod)
}

/// The pod's `Ready` condition, if true: when it became true.
pub(crate) fn ready_since(pod: &Frozen) -> Option<i64> {
    pod.at("/status/conditions")
        .and_then(Frozen::as_array)?
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
        .map(|c| {
            c["lastTransitionTime"]
                .as_str()
                .and_then(plinth_core::meta::parse_time)
                .unwrap_or(0)
        })
}

/// Whether the pod is ready.
pub(crate) fn ready(pod: &Frozen) -> bool {
    ready_since(pod).is_some()
}

/// kube's `IsPodAvailable`: ready for at least `min_ready` seconds at `now`.
pub(crate) fn available(pod: &Frozen, min_ready: i64, now: i64) -> bool {
    ready_since(pod).is_some_and(|since| min_ready == 0 || since + min_ready <= now)
}

/// The seconds until the first ready pod of `pods` becomes available (to look again then).
pub(crate) fn next_available(pods: &[Arc<Frozen>], min_ready: i64, now: i64) -> Option<i64> {
    pods.iter()
        .filter_map(|p| ready_since(p))
        .map(|since| since + min_ready - now)
        .filter(|wait| *wait > 0)
        .min()
}

/// The workload's selector (`None` when absent or invalid: then it selects nothing).
pub(crate) fn selector(workload: &Frozen) -> Option<LabelSelector> {
    let selector = workload.at("/spec/selector")?;
    if workload["kind"] == "ReplicationController" {
        // A ReplicationController's selector is a map of labels.
        return LabelSelector::from_object(&serde_json::json!({"matchLabels": selector}))
            .ok()
            .filter(|s| !s.is_empty());
    }
    LabelSelector::from_object(selector)
        .ok()
        .filter(|s| !s.is_empty())
}

/// The labels of a workload's pod template.
pub(crate) fn labels_of_template(workload: &Frozen) -> std::collections::BTreeMap<String, String> {
    workload
        .at("/spec/template/metadata/labels")
        .and_then(Frozen::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.to_owned(), v.as_str().unwrap_or("").to_owned()))
        .collect()
}

/// A pod for `owner` from its template: `generateName` (or `name`), the template's labels
/// and annotations, a controller reference, the template's spec.
pub(crate) fn pod_from_template(
    template: &Value,
    owner: &(impl Tree + ?Sized),
    controller: &Value,
    name: PodName<'_>,
) -> Value {
    let mut metadata = json!({
        "labels": template.at("/metadata/labels").cloned().unwrap_or(json!({})),
        "ownerReferences": [controller],
    });
    if let Some(annotations) = template.at("/metadata/annotations") {
        metadata["annotations"] = annotations.clone();
    }
    if let Some(finalizers) = template.at("/metadata/finalizers") {
        metadata["finalizers"] = finalizers.clone();
    }
    match name {
        PodName::Generated(prefix) => metadata["generateName"] = json!(prefix),
        PodName::Exact(name) => metadata["name"] = json!(name),
    }
    if let Some(ns) = plinth_core::meta::namespace(owner) {
        metadata["namespace"] = json!(ns);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": template.get("spec").cloned().unwrap_or(json!({})),
    })
}

/// How a new pod is named.
pub(crate) enum PodName<'a> {
    /// `generateName`.
    Generated(&'a str),
    /// `name`.
    Exact(&'a str),
}

/// The objects of `resource` (pods, ReplicaSets) in `owner`'s namespace that it controls,
/// after adopting the orphans its selector matches and releasing those it no longer matches
/// (kube's `ClaimPods`/`ClaimReplicaSets`); a workload being deleted adopts and releases
/// nothing.
pub(crate) async fn claim(
    registry: &Client,
    objects: &Informer,
    resource: (&str, &str),
    owner: &Frozen,
    controller: &Value,
    manager: &str,
) -> Vec<Arc<Frozen>> {
    let namespace = plinth_core::meta::namespace(owner).unwrap_or("default");
    let owner_uid = uid(owner);
    let select = selector(owner);
    let matches = |pod: &Frozen| {
        select
            .as_ref()
            .is_some_and(|s| s.matches(&plinth_core::meta::labels(pod)))
    };
    let mut owned = Vec::new();
    // kube's `RecheckDeletionTimestamp`: before the first adoption, the owner is read afresh —
    // the cached one may not show a deletion yet, and an owner being deleted (orphaning its
    // objects) must not take them back.
    let mut may_adopt: Option<bool> = None;
    for pod in objects.in_namespace(namespace) {
        match controller_of(&pod) {
            Some(c) if c["uid"] == owner_uid => {
                if matches(&pod) || deleting(owner) {
                    owned.push(pod);
                } else {
                    set_owner(registry, resource, &pod, owner_uid, None, manager).await;
                }
            }
            Some(_) => {}
            None if matches(&pod) && !deleting(owner) && !deleting(&pod) => {
                if may_adopt.is_none() {
                    may_adopt = Some(still_adopting(registry, controller, owner).await);
                }
                if may_adopt == Some(false) {
                    continue;
                }
                if let Some(adopted) = set_owner(
                    registry,
                    resource,
                    &pod,
                    owner_uid,
                    Some(controller),
                    manager,
                )
                .await
                {
                    owned.push(Arc::new(Frozen::from(adopted)));
                }
            }
            None => {}
        }
    }
    owned
}

/// Whether `owner`, read from storage now, is still the same object and not being deleted
/// (`controller`: the reference it hands out, which names its kind).
async fn still_adopting(registry: &Client, controller: &Value, owner: &Frozen) -> bool {
    let api_version = controller["apiVersion"].as_str().unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = controller["kind"].as_str().unwrap_or("");
    let Some(def) = registry.resources.by_kind(group, version, kind) else {
        return false;
    };
    let Some(name) = plinth_core::meta::name(owner) else {
        return false;
    };
    match registry
        .get(&def, plinth_core::meta::namespace(owner), name)
        .await
    {
        Ok(fresh) => uid(&fresh) == uid(owner) && !deleting(&fresh),
        Err(_) => false,
    }
}

/// Adds `controller` to the object's owner references (adoption), or removes the reference
/// to `owner_uid` (release); the object as written.
async fn set_owner(
    registry: &Client,
    (group, plural): (&str, &str),
    pod: &Frozen,
    owner_uid: &str,
    controller: Option<&Value>,
    manager: &str,
) -> Option<Value> {
    let def = registry.resources.get(group, "v1", plural)?;
    let name = plinth_core::meta::name(pod)?;
    let written = registry
        .modify(
            &def,
            plinth_core::meta::namespace(pod),
            name,
            Part::Main,
            &WriteOptions::internal(manager),
            |current| {
                let refs = current["metadata"]["ownerReferences"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let mut kept: Vec<Value> = refs
                    .iter()
                    .filter(|r| r["uid"] != owner_uid)
                    .cloned()
                    .collect();
                match controller {
                    Some(c) if refs.iter().all(|r| r["controller"] != true) => kept.push(c.clone()),
                    Some(_) => return Ok(false),
                    None if kept.len() == refs.len() => return Ok(false),
                    None => {}
                }
                current["metadata"]["ownerReferences"] = json!(kept);
                Ok(true)
            },
        )
        .await;
    match written {
        Ok(Some(w)) => Some(w.object),
        Ok(None) => None,
        Err(e) => {
            tracing::debug!(pod = %key_of(pod), error = %e.message, "owner reference not changed");
            None
        }
    }
}

/// Writes `status` as the workload's status (`/status`) unless it already is; the
/// resourceVersion written, if it wrote.
pub(crate) async fn write_status(
    registry: &Client,
    resource: (&str, &str),
    workload: &Frozen,
    status: Value,
    manager: &str,
) -> Option<String> {
    if workload.get("status").is_some_and(|s| *s == status) {
        return None;
    }
    let def = registry.resources.get(resource.0, "v1", resource.1)?;
    let name = plinth_core::meta::name(workload)?;
    let result = registry
        .modify(
            &def,
            plinth_core::meta::namespace(workload),
            name,
            Part::Status,
            &WriteOptions::internal(manager),
            |current| {
                if current.get("status") == Some(&status) {
                    return Ok(false);
                }
                current["status"] = status.clone();
                Ok(true)
            },
        )
        .await;
    match result {
        Ok(written) => written.and_then(|w| {
            plinth_core::meta::meta_str(&w.object, "resourceVersion").map(str::to_owned)
        }),
        Err(e) => {
            tracing::debug!(workload = %key_of(workload), error = %e.message, "status not written");
            None
        }
    }
}

/// Waits until `informer` holds `object` at `revision` or later (a controller's next pass
/// then sees its own write).
pub(crate) async fn seen(
    informer: &Informer,
    object: &(impl Tree + ?Sized),
    revision: Option<String>,
) {
    let Some(revision) = revision.and_then(|r| r.parse::<u64>().ok()) else {
        return;
    };
    let key = key_of(object);
    informer
        .wait_until(EXPECTATION_TIMEOUT, |cache| {
            cache.get(&key).is_none_or(|o| {
                plinth_core::meta::meta_str(&o, "resourceVersion")
                    .and_then(|r| r.parse::<u64>().ok())
                    .is_some_and(|r| r >= revision)
            })
        })
        .await;
}

/// A template as compared: empty metadata maps and a null creation time dropped.
pub(crate) fn normalized(mut template: Value) -> Value {
    if let Some(meta) = template.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|_, v| !(v.is_null() || v.as_object().is_some_and(Map::is_empty)));
    }
    template
}

/// kube's pod-template-hash: FNV-1a (32 bits) of the template (and the collision count),
/// its decimal digits mapped onto the "safe" alphabet.
pub(crate) fn template_hash(template: &Value, collisions: Option<i64>) -> String {
    let mut text = serde_json::to_string(&normalized(template.clone())).unwrap_or_default();
    if let Some(n) = collisions {
        text.push_str(&n.to_string());
    }
    safe_hash(&text)
}

/// FNV-1a (32 bits) of `text`, its decimal digits mapped onto the "safe" alphabet (kube's
/// way of making a hash a name's part).
pub(crate) fn safe_hash(text: &str) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in text.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    hash.to_string()
        .bytes()
        .map(|b| char::from(SAFE[usize::from(b) % SAFE.len()]))
        .collect()
}

/// Deletes `pod` of `owner` (unless it is already going), records `SuccessfulDelete` with
/// `message`, and waits until `pods` shows it going; whether it deleted.
pub(crate) async fn delete_pod(
    registry: &Client,
    pods: &Informer,
    owner: &Frozen,
    pod: &Frozen,
    message: &str,
    manager: &str,
) -> bool {
    if deleting(pod) {
        return false;
    }
    let Some(def) = registry.resources.get("", "v1", "pods") else {
        return false;
    };
    let name = plinth_core::meta::name(pod).unwrap_or("");
    let options = plinth_registry::DeleteOptions::default();
    if registry
        .delete(&def, plinth_core::meta::namespace(pod), name, &options)
        .await
        .is_err()
    {
        return false;
    }
    crate::events::record(
        registry,
        owner,
        "Normal",
        "SuccessfulDelete",
        message,
        manager,
    )
    .await;
    let key = key_of(pod);
    pods.wait_until(EXPECTATION_TIMEOUT, |p| {
        p.get(&key).is_none_or(|o| deleting(&o))
    })
    .await;
    true
}
