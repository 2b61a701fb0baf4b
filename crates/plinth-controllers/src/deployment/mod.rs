//! The Deployment controller (kube-controller-manager's `deployment`): a Deployment owns
//! ReplicaSets, one per template it has had (named `<deployment>-<pod-template-hash>`); the
//! one matching its template is the new one. A RollingUpdate scales the new one up by at
//! most `maxSurge` above `replicas` and the old ones down while at least `replicas -
//! maxUnavailable` pods stay available; a Recreate scales the old ones to zero, waits for
//! their pods to go, then scales the new one up. Replica changes mid-rollout are shared out
//! in proportion; `paused` stops the rollout but not scaling; revisions are recorded in
//! `deployment.kubernetes.io/revision` (what `kubectl rollout history|undo` read) and old
//! ReplicaSets beyond `revisionHistoryLimit` are deleted. The status carries kube's
//! `Available` and `Progressing` conditions, `ProgressDeadlineExceeded` included.

use plinth_core::At as _;
use std::sync::Arc;
use std::time::Duration;

use plinth_core::{Frozen, Tree};
use plinth_registry::{Client, Part, WriteOptions};
use plinth_types::apps::scaled;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

mod rollout;
mod status;

use crate::informer::{Failed, Informer, Queue, SharedInformers, enqueue, key_of, run_workers};
use crate::workload::{
    EXPECTATION_TIMEOUT, claim, controller_of, controller_ref, deleting, enqueue_owner, normalized,
    template_hash, uid, write_status,
};
use status::new_only;

const MANAGER: &str = "deployment-controller";
const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX: &str = "deployment.kubernetes.io/max-replicas";
const HASH: &str = "pod-template-hash";
/// Annotations of the Deployment not copied to its ReplicaSets.
const NOT_COPIED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    "deployment.kubernetes.io/revision-history",
    DESIRED,
    MAX,
    "deprecated.deployment.rollback.to",
];

/// Starts the controller; it ends when `stopping` becomes true.
pub fn spawn_deployment_controller(
    registry: Client,
    informers: &SharedInformers,
    stopping: watch::Receiver<bool>,
) {
    let queue = Queue::default();
    let deployments = informers.start(("apps", "deployments"), enqueue(&queue));
    let sets = informers.start(
        ("apps", "replicasets"),
        enqueue_owner(&queue, "Deployment", Some(deployments.clone())),
    );
    // Pods matter to Recreate, which waits for the old ones to go.
    let pods = {
        let (queue, sets) = (queue.clone(), sets.clone());
        informers.start(("", "pods"), move |c| {
            for pod in [c.new, c.old].into_iter().flatten() {
                let namespace = plinth_core::meta::namespace(pod).unwrap_or("default");
                let set = controller_of(pod)
                    .filter(|o| o["kind"] == "ReplicaSet")
                    .and_then(|o| o["name"].as_str())
                    .and_then(|name| sets.get(&format!("{namespace}/{name}")));
                if let Some(owner) = set.as_deref().and_then(controller_of)
                    && owner["kind"] == "Deployment"
                    && let Some(name) = owner["name"].as_str()
                {
                    queue.add(format!("{namespace}/{name}"));
                }
            }
        })
    };
    tokio::spawn(async move {
        let caches = [&deployments, &sets, &pods];
        let (registry, owned_sets, owned_pods) = (&registry, &sets, &pods);
        run_workers(
            queue,
            stopping,
            &caches,
            &deployments,
            move |deployment| async move {
                let context = Context {
                    registry,
                    sets: owned_sets,
                    pods: owned_pods,
                    deployment: &deployment,
                    failed: Failed::default(),
                };
                let wait = context.sync().await;
                context.failed.next(wait)
            },
        )
        .await;
    });
}

struct Context<'a> {
    registry: &'a Client,
    sets: &'a Informer,
    pods: &'a Informer,
    deployment: &'a Frozen,
    /// Whether a write of this pass failed (the key is retried after its backoff).
    failed: Failed,
}

fn int(object: &Frozen, pointer: &str) -> i64 {
    object.at(pointer).and_then(Frozen::as_i64).unwrap_or(0)
}

fn replicas_of(set: &Frozen) -> i64 {
    int(set, "/spec/replicas")
}

fn revision_of(set: &Frozen) -> i64 {
    set.at("/metadata/annotations")
        .and_then(|a| a.get(REVISION))
        .and_then(Frozen::as_str)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn name_of(object: &(impl Tree + ?Sized)) -> &str {
    plinth_core::meta::name(object).unwrap_or("")
}

/// The template without its `pod-template-hash` label (kube's `EqualIgnoreHash`).
fn without_hash(template: &Value) -> Value {
    let mut template = template.clone();
    if let Some(labels) = template
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(HASH);
        if labels.is_empty()
            && let Some(meta) = template.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.remove("labels");
        }
    }
    normalized(template)
}

impl Context<'_> {
    fn spec(&self, pointer: &str) -> Option<&Frozen> {
        self.deployment.at(pointer)
    }

    fn replicas(&self) -> i64 {
        self.spec("/spec/replicas")
            .and_then(Frozen::as_i64)
            .unwrap_or(1)
    }

    /// `maxSurge` and `maxUnavailable` resolved against `replicas` (kube's
    /// `ResolveFenceposts`: both zero makes `maxUnavailable` one).
    fn fenceposts(&self) -> (i64, i64) {
        if self.spec("/spec/strategy/type").and_then(Frozen::as_str) == Some("Recreate") {
            return (0, self.replicas());
        }
        let rolling = self.spec("/spec/strategy/rollingUpdate");
        let field = |f: &str| {
            rolling
                .and_then(|r| r.get(f))
                .map_or(json!("25%"), Frozen::to_value)
        };
        let replicas = self.replicas();
        let surge = scaled(&field("maxSurge"), replicas, true).unwrap_or(0);
        let unavailable = scaled(&field("maxUnavailable"), replicas, false).unwrap_or(0);
        if surge == 0 && unavailable == 0 {
            (0, 1)
        } else {
            (surge, unavailable)
        }
    }

    async fn sync(&self) -> Option<Duration> {
        let controller = controller_ref(self.deployment, "apps/v1", "Deployment");
        let mut sets = claim(
            self.registry,
            self.sets,
            ("apps", "replicasets"),
            self.deployment,
            &controller,
            MANAGER,
        )
        .await;
        if deleting(self.deployment) {
            return self.update_status(&sets, None).await;
        }
        let template = self
            .spec("/spec/template")
            .map_or_else(|| json!({}), Frozen::to_value);
        let wanted = normalized(template);
        let mut newest = sets
            .iter()
            .find(|s| {
                s.at("/spec/template")
                    .is_some_and(|t| without_hash(&t.to_value()) == wanted)
            })
            .cloned();
        let paused = self.spec("/spec/paused").is_some_and(|p| *p == true);
        // A change of `replicas` alone is a scaling event, rollout or not.
        if self.scale(&sets, newest.as_deref()).await {
            return None;
        }
        if paused {
            return self.update_status(&sets, newest.as_deref()).await;
        }
        let recreate =
            self.spec("/spec/strategy/type").and_then(Frozen::as_str) == Some("Recreate");
        match &newest {
            Some(new) => {
                if let Some(updated) = self.keep_revision(new, &sets).await {
                    newest = Some(Arc::new(Frozen::from(updated)));
                    sets = self.owned_sets();
                }
            }
            None => {
                let old_running = sets.iter().any(|s| replicas_of(s) > 0);
                if recreate && (old_running || self.old_pods_running(&sets)) {
                    // Old pods first go.
                } else {
                    match self.create_new(&sets, recreate).await {
                        Some(created) => {
                            sets = self.owned_sets();
                            newest = sets.iter().find(|s| uid(s) == uid(&created)).cloned();
                        }
                        None => return Some(Duration::from_secs(5)),
                    }
                }
            }
        }
        let changed = if recreate {
            self.rollout_recreate(&sets, newest.as_deref()).await
        } else {
            self.rollout_rolling(&sets, newest.as_deref()).await
        };
        if changed {
            return None;
        }
        self.cleanup(&sets, newest.as_deref()).await;
        self.update_status(&sets, newest.as_deref()).await
    }

    /// The ReplicaSets this Deployment controls, as the cache has them now.
    fn owned_sets(&self) -> Vec<Arc<Frozen>> {
        let namespace = plinth_core::meta::namespace(self.deployment).unwrap_or("default");
        let owner = uid(self.deployment);
        self.sets
            .in_namespace(namespace)
            .into_iter()
            .filter(|s| controller_of(s).is_some_and(|c| c["uid"] == owner))
            .collect()
    }

    fn old_pods_running(&self, sets: &[Arc<Frozen>]) -> bool {
        let namespace = plinth_core::meta::namespace(self.deployment).unwrap_or("default");
        let uids: Vec<&str> = sets.iter().map(uid).collect();
        self.pods.in_namespace(namespace).iter().any(|p| {
            let phase = p.at("/status/phase").and_then(Frozen::as_str);
            !matches!(phase, Some("Succeeded" | "Failed"))
                && controller_of(p)
                    .and_then(|c| c["uid"].as_str())
                    .is_some_and(|u| uids.contains(&u))
        })
    }

    /// The next revision: one more than any ReplicaSet's.
    fn next_revision(&self, sets: &[Arc<Frozen>], except: Option<&Frozen>) -> i64 {
        sets.iter()
            .filter(|s| except.is_none_or(|e| uid(s) != uid(e)))
            .map(|s| revision_of(s))
            .max()
            .unwrap_or(0)
            + 1
    }

    /// Gives a ReplicaSet that became the new one again (a rollback) the next revision, and
    /// the Deployment its revision; the ReplicaSet as written when it changed.
    async fn keep_revision(&self, new: &Frozen, sets: &[Arc<Frozen>]) -> Option<Value> {
        let older_max = self.next_revision(sets, Some(new)) - 1;
        let revision = if revision_of(new) > older_max {
            revision_of(new)
        } else {
            older_max + 1
        };
        self.set_deployment_revision(revision).await;
        if revision == revision_of(new) {
            return None;
        }
        self.modify_set(new, |set| {
            set["metadata"]["annotations"][REVISION] = json!(revision.to_string());
        })
        .await
    }

    async fn set_deployment_revision(&self, revision: i64) {
        let Some(def) = self.registry.resources.get("apps", "v1", "deployments") else {
            return;
        };
        let text = revision.to_string();
        let _ = self
            .registry
            .modify(
                &def,
                plinth_core::meta::namespace(self.deployment),
                name_of(self.deployment),
                Part::Main,
                &WriteOptions::internal(MANAGER),
                |d| {
                    if d.at("/metadata/annotations")
                        .and_then(|a| a.get(REVISION))
                        .and_then(Value::as_str)
                        == Some(text.as_str())
                    {
                        return Ok(false);
                    }
                    if !d["metadata"]["annotations"].is_object() {
                        d["metadata"]["annotations"] = json!({});
                    }
                    d["metadata"]["annotations"][REVISION] = json!(text);
                    Ok(true)
                },
            )
            .await;
    }

    /// Creates the ReplicaSet of the current template; `None` if that failed.
    async fn create_new(&self, sets: &[Arc<Frozen>], recreate: bool) -> Option<Value> {
        let def = self.registry.resources.get("apps", "v1", "replicasets")?;
        let collisions = self.spec("/status/collisionCount").and_then(Frozen::as_i64);
        let mut template = self
            .spec("/spec/template")
            .map_or(json!({}), Frozen::to_value);
        let hash = template_hash(&template, collisions);
        template["metadata"]["labels"][HASH] = json!(hash);
        let mut selector = self
            .spec("/spec/selector")
            .map_or(json!({}), Frozen::to_value);
        selector["matchLabels"][HASH] = json!(hash);
        let revision = self.next_revision(sets, None);
        let (surge, _) = self.fenceposts();
        let replicas = if recreate {
            self.replicas()
        } else {
            self.new_replicas(sets, None)
        };
        let mut annotations: Map<String, Value> = self
            .spec("/metadata/annotations")
            .and_then(Frozen::as_object)
            .into_iter()
            .flatten()
            .filter(|(k, _)| !NOT_COPIED.contains(k))
            .map(|(k, v)| (k.to_owned(), v.to_value()))
            .collect();
        annotations.insert(REVISION.into(), json!(revision.to_string()));
        annotations.insert(DESIRED.into(), json!(self.replicas().to_string()));
        annotations.insert(MAX.into(), json!((self.replicas() + surge).to_string()));
        let name = format!("{}-{hash}", name_of(self.deployment));
        let set = json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": plinth_core::meta::namespace(self.deployment),
                "labels": template["metadata"]["labels"],
                "annotations": annotations,
                "ownerReferences": [controller_ref(self.deployment, "apps/v1", "Deployment")],
            },
            "spec": {
                "replicas": replicas,
                "minReadySeconds": int(self.deployment, "/spec/minReadySeconds"),
                "selector": selector,
                "template": template,
            },
        });
        let namespace = plinth_core::meta::namespace(self.deployment);
        match self
            .registry
            .create(&def, namespace, set, &WriteOptions::internal(MANAGER))
            .await
        {
            Ok(written) => {
                let key = key_of(&written.object);
                self.sets
                    .wait_until(EXPECTATION_TIMEOUT, |s| s.get(&key).is_some())
                    .await;
                self.set_deployment_revision(revision).await;
                if replicas > 0 {
                    self.event(&format!(
                        "Scaled up replica set {name} from 0 to {replicas}"
                    ))
                    .await;
                }
                self.set_progressing(
                    "NewReplicaSetCreated",
                    &format!("Created new replica set \"{name}\""),
                )
                .await;
                Some(written.object)
            }
            Err(e) => {
                self.failed.mark();
                tracing::warn!(deployment = %key_of(self.deployment), error = %e.message, "replica set not created");
                if e.reason == plinth_core::StatusReason::AlreadyExists {
                    self.bump_collisions().await;
                }
                None
            }
        }
    }

    async fn bump_collisions(&self) {
        let mut status = self
            .deployment
            .get("status")
            .map_or(json!({}), Frozen::to_value);
        status["collisionCount"] = json!(int(self.deployment, "/status/collisionCount") + 1);
        write_status(
            self.registry,
            ("apps", "deployments"),
            self.deployment,
            status,
            MANAGER,
        )
        .await;
    }

    /// kube's `NewRSNewReplicas` for a rolling update.
    fn new_replicas(&self, sets: &[Arc<Frozen>], new: Option<&Frozen>) -> i64 {
        let (surge, _) = self.fenceposts();
        let current: i64 = sets.iter().map(|s| replicas_of(s)).sum();
        let new_now = new.map_or(0, replicas_of);
        let room = self.replicas() + surge - current;
        if room <= 0 {
            return new_now;
        }
        new_now + room.min((self.replicas() - new_now).max(0))
    }

    /// Scales `set` to `replicas` (with the Deployment's size annotations); whether it did.
    async fn scale_set(&self, set: &Frozen, replicas: i64) -> bool {
        let (surge, _) = self.fenceposts();
        let desired = self.replicas().to_string();
        let max = (self.replicas() + surge).to_string();
        let before = replicas_of(set);
        let annotated = |s: &Frozen, key: &str, value: &str| {
            s.at("/metadata/annotations")
                .and_then(|a| a.get(key))
                .and_then(Frozen::as_str)
                == Some(value)
        };
        if before == replicas && annotated(set, DESIRED, &desired) && annotated(set, MAX, &max) {
            return false;
        }
        let written = self
            .modify_set(set, |s| {
                s["spec"]["replicas"] = json!(replicas);
                s["metadata"]["annotations"][DESIRED] = json!(desired);
                s["metadata"]["annotations"][MAX] = json!(max);
            })
            .await;
        if written.is_some() && before != replicas {
            let direction = if replicas > before { "up" } else { "down" };
            self.event(&format!(
                "Scaled {direction} replica set {} from {before} to {replicas}",
                name_of(set)
            ))
            .await;
        }
        written.is_some() && before != replicas
    }

    async fn modify_set(&self, set: &Frozen, change: impl Fn(&mut Value) + Sync) -> Option<Value> {
        let def = self.registry.resources.get("apps", "v1", "replicasets")?;
        let written = self
            .registry
            .modify(
                &def,
                plinth_core::meta::namespace(set),
                name_of(set),
                Part::Main,
                &WriteOptions::internal(MANAGER),
                |current| {
                    let before = current.clone();
                    if !current["metadata"]["annotations"].is_object() {
                        current["metadata"]["annotations"] = json!({});
                    }
                    change(current);
                    Ok(*current != before)
                },
            )
            .await
            .ok()??;
        let (key, rv) = (
            key_of(&written.object),
            plinth_core::meta::meta_str(&written.object, "resourceVersion").map(str::to_owned),
        );
        self.sets
            .wait_until(EXPECTATION_TIMEOUT, |s| {
                s.get(&key).is_some_and(|o| {
                    plinth_core::meta::meta_str(&o, "resourceVersion").map(str::to_owned) == rv
                })
            })
            .await;
        Some(written.object)
    }
}
