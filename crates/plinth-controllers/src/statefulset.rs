//! The StatefulSet controller (kube-controller-manager's `statefulset`): pods with stable
//! names (`<set>-<ordinal>`, from `spec.ordinals.start`), host names and, from
//! `volumeClaimTemplates`, claims of their own (`<claim>-<set>-<ordinal>`) that outlive
//! them. OrderedReady creates one ordinal at a time, each after the ones before are running
//! and ready, and removes from the highest; Parallel does all at once. Templates are recorded
//! as ControllerRevisions (`<set>-<hash>`, the pods' `controller-revision-hash` label); a
//! RollingUpdate replaces pods from the highest ordinal down to `partition`, one at a time,
//! OnDelete only when a pod is deleted. `persistentVolumeClaimRetentionPolicy` decides whether
//! claims go with the set (`whenDeleted`) or with their scaled-away pod (`whenScaled`).

use plinth_core::At as _;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use plinth_core::{Frozen, Tree};
use plinth_registry::{Client, Part, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::history::History;
use crate::informer::{Failed, Informer, Queue, SharedInformers, enqueue, run_workers};
use crate::workload::{
    EXPECTATION_TIMEOUT, PodName, available, claim, controller_of, controller_ref, delete_pod,
    deleting, enqueue_owner, next_available, pod_from_template, ready, uid, write_status,
};

const MANAGER: &str = "statefulset-controller";
const REVISION_LABEL: &str = "controller-revision-hash";
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// Starts the controller; it ends when `stopping` becomes true.
pub fn spawn_statefulset_controller(
    registry: Client,
    informers: &SharedInformers,
    stopping: watch::Receiver<bool>,
) {
    let queue = Queue::default();
    let sets = informers.start(("apps", "statefulsets"), enqueue(&queue));
    let pods = informers.start(
        ("", "pods"),
        enqueue_owner(&queue, "StatefulSet", Some(sets.clone())),
    );
    let revisions = informers.start(
        ("apps", "controllerrevisions"),
        enqueue_owner(&queue, "StatefulSet", Some(sets.clone())),
    );
    tokio::spawn(async move {
        let caches = [&sets, &pods, &revisions];
        let (registry, owned_pods, owned_revisions) = (&registry, &pods, &revisions);
        run_workers(queue, stopping, &caches, &sets, move |set| async move {
            let pass = Pass {
                registry,
                pods: owned_pods,
                revisions: owned_revisions,
                set: &set,
                failed: Failed::default(),
            };
            let wait = pass.sync().await;
            pass.failed.next(wait)
        })
        .await;
    });
}

struct Pass<'a> {
    registry: &'a Client,
    pods: &'a Informer,
    revisions: &'a Informer,
    set: &'a Frozen,
    /// Whether a write of this pass failed (the key is retried after its backoff).
    failed: Failed,
}

fn int(object: &Frozen, pointer: &str) -> i64 {
    object.at(pointer).and_then(Frozen::as_i64).unwrap_or(0)
}

fn name_of(object: &(impl Tree + ?Sized)) -> &str {
    plinth_core::meta::name(object).unwrap_or("")
}

fn revision_label(pod: &Frozen) -> &str {
    pod.at(&format!(
        "/metadata/labels/{}",
        REVISION_LABEL.replace('/', "~1")
    ))
    .and_then(Frozen::as_str)
    .unwrap_or("")
}

fn running_and_ready(pod: &Frozen) -> bool {
    pod.at("/status/phase").and_then(Frozen::as_str) == Some("Running") && ready(pod)
}

fn finished(pod: &Frozen) -> bool {
    matches!(
        pod.at("/status/phase").and_then(Frozen::as_str),
        Some("Succeeded" | "Failed")
    )
}

impl Pass<'_> {
    fn namespace(&self) -> &str {
        plinth_core::meta::namespace(self.set).unwrap_or("default")
    }

    fn parallel(&self) -> bool {
        self.set
            .at("/spec/podManagementPolicy")
            .and_then(Frozen::as_str)
            == Some("Parallel")
    }

    async fn sync(&self) -> Option<Duration> {
        let controller = controller_ref(self.set, "apps/v1", "StatefulSet");
        let (current, update) = self.revisions(&controller).await?;
        let pods = claim(
            self.registry,
            self.pods,
            ("", "pods"),
            self.set,
            &controller,
            MANAGER,
        )
        .await;
        let start = int(self.set, "/spec/ordinals/start");
        let replicas = self
            .set
            .at("/spec/replicas")
            .and_then(Frozen::as_i64)
            .unwrap_or(1);
        let prefix = format!("{}-", name_of(self.set));
        let mut by_ordinal: BTreeMap<i64, Arc<Frozen>> = BTreeMap::new();
        for pod in &pods {
            if let Some(ordinal) = name_of(pod)
                .strip_prefix(&prefix)
                .and_then(|n| n.parse().ok())
            {
                by_ordinal.insert(ordinal, pod.clone());
            }
        }
        if !deleting(self.set) {
            self.manage(&by_ordinal, start, replicas, &current, &update, &controller)
                .await;
        }
        self.update_status(&current, &update).await
    }

    /// Creates, replaces and removes pods; one step for OrderedReady.
    async fn manage(
        &self,
        pods: &BTreeMap<i64, Arc<Frozen>>,
        start: i64,
        replicas: i64,
        current: &Value,
        update: &Value,
        controller: &Value,
    ) {
        let wanted = start..start + replicas;
        let rolling = self
            .set
            .at("/spec/updateStrategy/type")
            .and_then(Frozen::as_str)
            .unwrap_or("RollingUpdate")
            == "RollingUpdate";
        let partition = int(self.set, "/spec/updateStrategy/rollingUpdate/partition");
        // Missing and finished pods, in order.
        for ordinal in wanted.clone() {
            match pods.get(&ordinal) {
                Some(pod) if finished(pod) && !deleting(pod) => {
                    self.delete_pod(pod).await;
                    if !self.parallel() {
                        return;
                    }
                }
                Some(pod) => {
                    for template in self.claim_templates() {
                        let claim = claim_name_of(&template, self.set, ordinal);
                        self.ensure_claim(&template, &claim, name_of(pod)).await;
                    }
                    if !self.parallel() && !running_and_ready(pod) {
                        return;
                    }
                }
                None => {
                    let revision = if rolling && ordinal - start < partition {
                        current
                    } else {
                        update
                    };
                    self.create_pod(ordinal, revision, controller).await;
                    if !self.parallel() {
                        return;
                    }
                }
            }
        }
        // Ordinals beyond the wanted ones, the highest first.
        let condemned: Vec<&Arc<Frozen>> = pods
            .iter()
            .rev()
            .filter(|(o, _)| !wanted.contains(*o))
            .map(|(_, p)| p)
            .collect();
        // kube's first unhealthy pod: the lowest ordinal not running and ready, of the
        // wanted pods, then of the condemned. In order, only it may go while unhealthy.
        let first_unhealthy = pods
            .iter()
            .filter(|(o, _)| wanted.contains(*o))
            .chain(pods.iter().filter(|(o, _)| !wanted.contains(*o)))
            .map(|(_, p)| p)
            .find(|p| !running_and_ready(p))
            .map(|p| name_of(p).to_owned());
        for pod in &condemned {
            if deleting(pod) {
                if !self.parallel() {
                    return;
                }
                continue;
            }
            if !self.parallel()
                && !running_and_ready(pod)
                && first_unhealthy.as_deref() != Some(name_of(pod))
            {
                return;
            }
            self.release_claims_with(pod).await;
            self.delete_pod(pod).await;
            if !self.parallel() {
                return;
            }
        }
        if !condemned.is_empty() {
            return;
        }
        // A rolling update: the highest pod from partition up still on an old revision,
        // once every pod is running and ready.
        let update_name = name_of(update);
        if rolling
            && wanted.clone().all(|o| {
                pods.get(&o)
                    .is_some_and(|p| running_and_ready(p) && !deleting(p))
            })
            && let Some(pod) = wanted
                .rev()
                .filter(|o| o - start >= partition)
                .filter_map(|o| pods.get(&o))
                .find(|p| revision_label(p) != update_name)
        {
            self.delete_pod(pod).await;
        }
    }

    /// The current and update revisions (the template recorded when new).
    async fn revisions(&self, controller: &Value) -> Option<(Value, Value)> {
        let used: Vec<String> = self
            .pods
            .in_namespace(self.namespace())
            .iter()
            .filter(|p| controller_of(p).is_some_and(|c| c["uid"] == uid(self.set)))
            .map(|p| revision_label(p).to_owned())
            .collect();
        let current = self
            .set
            .at("/status/currentRevision")
            .and_then(Frozen::as_str)
            .unwrap_or("");
        History {
            registry: self.registry,
            revisions: self.revisions,
            owner: self.set,
            controller,
            manager: MANAGER,
        }
        .sync(current, &used)
        .await
    }

    /// The pod of `ordinal` from `revision`'s template: its name, host name, labels and
    /// claims.
    async fn create_pod(&self, ordinal: i64, revision: &Value, controller: &Value) {
        let Some(def) = self.registry.resources.get("", "v1", "pods") else {
            return;
        };
        let name = format!("{}-{ordinal}", name_of(self.set));
        let mut template = crate::history::template_of(revision);
        let labels = &mut template["metadata"]["labels"];
        if !labels.is_object() {
            *labels = json!({});
        }
        labels[POD_NAME_LABEL] = json!(name);
        labels[POD_INDEX_LABEL] = json!(ordinal.to_string());
        labels[REVISION_LABEL] = json!(name_of(revision));
        let spec = &mut template["spec"];
        spec["hostname"] = json!(name);
        if let Some(service) = self.set.at("/spec/serviceName").and_then(Frozen::as_str)
            && !service.is_empty()
        {
            spec["subdomain"] = json!(service);
        }
        for claim in self.claim_templates() {
            let claim_name = claim_name_of(&claim, self.set, ordinal);
            self.ensure_claim(&claim, &claim_name, &name).await;
            let volume = json!({
                "name": name_of(&claim),
                "persistentVolumeClaim": {"claimName": claim_name},
            });
            let volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
            let mut volumes: Vec<Value> = volumes
                .into_iter()
                .filter(|v| v["name"] != name_of(&claim))
                .collect();
            volumes.push(volume);
            spec["volumes"] = json!(volumes);
        }
        let pod = pod_from_template(&template, self.set, controller, PodName::Exact(&name));
        match self
            .registry
            .create(
                &def,
                Some(self.namespace()),
                pod,
                &WriteOptions::internal(MANAGER),
            )
            .await
        {
            Ok(_) => {
                self.event(
                    "Normal",
                    "SuccessfulCreate",
                    &format!(
                        "create Pod {name} in StatefulSet {} successful",
                        name_of(self.set)
                    ),
                )
                .await;
                let key = format!("{}/{name}", self.namespace());
                self.pods
                    .wait_until(EXPECTATION_TIMEOUT, |p| p.get(&key).is_some())
                    .await;
            }
            Err(e) => {
                self.failed.mark();
                self.event(
                    "Warning",
                    "FailedCreate",
                    &format!(
                        "create Pod {name} in StatefulSet {} failed error: {}",
                        name_of(self.set),
                        e.message
                    ),
                )
                .await;
            }
        }
    }

    fn claim_templates(&self) -> Vec<Value> {
        self.set
            .at("/spec/volumeClaimTemplates")
            .and_then(Frozen::as_array)
            .map(|t| t.iter().map(Frozen::to_value).collect())
            .unwrap_or_default()
    }

    /// Creates the claim unless it exists; with `whenDeleted: Delete`, owned by the set.
    async fn ensure_claim(&self, template: &Value, name: &str, pod: &str) {
        let Some(def) = self
            .registry
            .resources
            .get("", "v1", "persistentvolumeclaims")
        else {
            return;
        };
        if self
            .registry
            .get(&def, Some(self.namespace()), name)
            .await
            .is_ok()
        {
            self.claim_owner(&def, name).await;
            return;
        }
        let mut labels = template
            .at("/metadata/labels")
            .cloned()
            .unwrap_or(json!({}));
        if let Some(selector) = self
            .set
            .at("/spec/selector/matchLabels")
            .and_then(Frozen::as_object)
        {
            for (k, v) in selector {
                labels[k] = v.to_value();
            }
        }
        let mut metadata = json!({"name": name, "namespace": self.namespace(), "labels": labels});
        if let Some(annotations) = template.at("/metadata/annotations") {
            metadata["annotations"] = annotations.clone();
        }
        if self.retention("whenDeleted") == "Delete" {
            metadata["ownerReferences"] =
                json!([controller_ref(self.set, "apps/v1", "StatefulSet")]);
        }
        let claim = json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": metadata,
            "spec": template.get("spec").cloned().unwrap_or(json!({})),
        });
        match self
            .registry
            .create(
                &def,
                Some(self.namespace()),
                claim,
                &WriteOptions::internal(MANAGER),
            )
            .await
        {
            Ok(_) => {
                self.event(
                    "Normal",
                    "SuccessfulCreate",
                    &format!(
                        "create Claim {name} Pod {pod} in StatefulSet {} success",
                        name_of(self.set)
                    ),
                )
                .await;
            }
            Err(e) if e.reason == plinth_core::StatusReason::AlreadyExists => {}
            Err(e) => {
                self.failed.mark();
                self.event(
                    "Warning",
                    "FailedCreate",
                    &format!(
                        "create Claim {name} for Pod {pod} in StatefulSet {} failed error: {}",
                        name_of(self.set),
                        e.message
                    ),
                )
                .await;
            }
        }
    }

    /// Keeps an existing claim's reference to the set as `whenDeleted` says: present for
    /// `Delete` (the claim goes with the set), absent for `Retain`.
    async fn claim_owner(&self, def: &plinth_registry::resources::ResourceDef, name: &str) {
        let owner = controller_ref(self.set, "apps/v1", "StatefulSet");
        let wanted = self.retention("whenDeleted") == "Delete";
        let _ = self
            .registry
            .modify(
                def,
                Some(self.namespace()),
                name,
                Part::Main,
                &WriteOptions::internal(MANAGER),
                |claim| {
                    let refs = claim["metadata"]["ownerReferences"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    let has = refs.iter().any(|r| r["uid"] == owner["uid"]);
                    if has == wanted {
                        return Ok(false);
                    }
                    let mut refs: Vec<Value> = refs
                        .into_iter()
                        .filter(|r| r["uid"] != owner["uid"])
                        .collect();
                    if wanted {
                        refs.push(owner.clone());
                    }
                    claim["metadata"]["ownerReferences"] = json!(refs);
                    Ok(true)
                },
            )
            .await;
    }

    fn retention(&self, which: &str) -> &str {
        self.set
            .at(&format!(
                "/spec/persistentVolumeClaimRetentionPolicy/{which}"
            ))
            .and_then(Frozen::as_str)
            .unwrap_or("Retain")
    }

    /// With `whenScaled: Delete`, a scaled-away pod's claims are given to the pod, so the
    /// garbage collector deletes them after it.
    async fn release_claims_with(&self, pod: &Frozen) {
        if self.retention("whenScaled") != "Delete" {
            return;
        }
        let Some(def) = self
            .registry
            .resources
            .get("", "v1", "persistentvolumeclaims")
        else {
            return;
        };
        let prefix = format!("{}-", name_of(self.set));
        let Some(ordinal) = name_of(pod)
            .strip_prefix(&prefix)
            .and_then(|n| n.parse::<i64>().ok())
        else {
            return;
        };
        let owner = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name_of(pod),
            "uid": uid(pod),
            "controller": false,
            "blockOwnerDeletion": false,
        });
        for template in self.claim_templates() {
            let name = claim_name_of(&template, self.set, ordinal);
            let _ = self
                .registry
                .modify(
                    &def,
                    Some(self.namespace()),
                    &name,
                    Part::Main,
                    &WriteOptions::internal(MANAGER),
                    |claim| {
                        let refs = claim["metadata"]["ownerReferences"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default();
                        let mut refs: Vec<Value> = refs
                            .into_iter()
                            .filter(|r| r["kind"] != "StatefulSet")
                            .collect();
                        if refs.iter().any(|r| r["uid"] == owner["uid"]) {
                            return Ok(false);
                        }
                        refs.push(owner.clone());
                        claim["metadata"]["ownerReferences"] = json!(refs);
                        Ok(true)
                    },
                )
                .await;
        }
    }

    async fn delete_pod(&self, pod: &Frozen) {
        let message = format!(
            "delete Pod {} in StatefulSet {} successful",
            name_of(pod),
            name_of(self.set)
        );
        delete_pod(self.registry, self.pods, self.set, pod, &message, MANAGER).await;
    }

    async fn event(&self, kind: &str, reason: &str, message: &str) {
        crate::events::record(self.registry, self.set, kind, reason, message, MANAGER).await;
    }

    async fn update_status(&self, current: &Value, update: &Value) -> Option<Duration> {
        let owner = uid(self.set);
        let pods: Vec<Arc<Frozen>> = self
            .pods
            .in_namespace(self.namespace())
            .into_iter()
            .filter(|p| controller_of(p).is_some_and(|c| c["uid"] == owner))
            .collect();
        let min_ready = int(self.set, "/spec/minReadySeconds");
        let now = plinth_registry::now();
        let count = |f: &dyn Fn(&Frozen) -> bool| pods.iter().filter(|p| f(p)).count();
        let replicas = self
            .set
            .at("/spec/replicas")
            .and_then(Frozen::as_i64)
            .unwrap_or(1);
        let updated = count(&|p| revision_label(p) == name_of(update));
        let current_count = count(&|p| revision_label(p) == name_of(current));
        // Once every pod runs the update revision, it is the current one.
        let (current_name, current_count) =
            if i64::try_from(updated).unwrap_or(0) == replicas && updated == pods.len() {
                (name_of(update), updated)
            } else {
                (name_of(current), current_count)
            };
        let mut status = json!({
            "observedGeneration": self.set.at("/metadata/generation").map_or(json!(1), Frozen::to_value),
            "replicas": pods.len(),
            "readyReplicas": count(&|p| ready(p)),
            "currentReplicas": current_count,
            "updatedReplicas": updated,
            "currentRevision": current_name,
            "updateRevision": name_of(update),
            "collisionCount": int(self.set, "/status/collisionCount"),
            "availableReplicas": count(&|p| available(p, min_ready, now)),
        });
        if let Some(map) = status.as_object_mut() {
            map.retain(|k, v| v != 0 || k == "replicas" || k == "availableReplicas");
        }
        write_status(
            self.registry,
            ("apps", "statefulsets"),
            self.set,
            status,
            MANAGER,
        )
        .await;
        if min_ready > 0 {
            let ready_pods: Vec<Arc<Frozen>> = pods.into_iter().filter(|p| ready(p)).collect();
            return next_available(&ready_pods, min_ready, now)
                .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(1)));
        }
        None
    }
}

/// `<template>-<set>-<ordinal>`.
fn claim_name_of(template: &Value, set: &Frozen, ordinal: i64) -> String {
    format!("{}-{}-{ordinal}", name_of(template), name_of(set))
}
