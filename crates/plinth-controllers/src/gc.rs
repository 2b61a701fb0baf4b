//! The garbage collector: deletes objects whose owners are all gone (background propagation).
//!
//! It watches every served resource, keeping in memory which objects name which owners (by
//! uid), so that when an object is deleted its dependents are found at once. Whether an owner
//! is really gone is always confirmed by reading it from storage (name and uid), so the order in
//! which watch events arrive can never make it delete something whose owner exists — an owner
//! created just before its dependent, or recreated under the same name with a new uid, is judged
//! by what storage holds.
//!
//! # Caveats
//! Only background propagation for now: `propagationPolicy` Foreground and Orphan, and
//! `blockOwnerDeletion`, come with the rest of issue #5.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use plinth_apiserver::registry::{DeleteOptions, ListOptions, Registry};
use plinth_apiserver::resources::ResourceDef;
use plinth_core::{GroupVersion, StatusReason};
use serde_json::Value;
use tokio::sync::{mpsc, watch};

/// An owner reference, as the collector needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Owner {
    uid: String,
    api_version: String,
    kind: String,
    name: String,
}

/// An object that names owners.
#[derive(Clone, Debug)]
struct Dependent {
    def: Arc<ResourceDef>,
    namespace: Option<String>,
    name: String,
    owners: Vec<Owner>,
}

#[derive(Default)]
struct Graph {
    /// Objects that have owners, by uid.
    dependents: HashMap<String, Dependent>,
    /// Owner uid → the uids of its dependents.
    by_owner: HashMap<String, HashSet<String>>,
}

impl Graph {
    fn forget(&mut self, uid: &str) {
        if let Some(old) = self.dependents.remove(uid) {
            for owner in old.owners {
                if let Some(set) = self.by_owner.get_mut(&owner.uid) {
                    set.remove(uid);
                    if set.is_empty() {
                        self.by_owner.remove(&owner.uid);
                    }
                }
            }
        }
    }

    fn record(&mut self, uid: &str, dependent: Dependent) {
        self.forget(uid);
        for owner in &dependent.owners {
            self.by_owner
                .entry(owner.uid.clone())
                .or_default()
                .insert(uid.to_owned());
        }
        self.dependents.insert(uid.to_owned(), dependent);
    }
}

fn owners_of(object: &Value) -> Vec<Owner> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    Some(Owner {
                        uid: r.get("uid")?.as_str()?.to_owned(),
                        api_version: r.get("apiVersion")?.as_str()?.to_owned(),
                        kind: r.get("kind")?.as_str()?.to_owned(),
                        name: r.get("name")?.as_str()?.to_owned(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Starts the collector; it stops when `stopping` becomes true.
pub fn spawn_garbage_collector(registry: Registry, stopping: watch::Receiver<bool>) {
    let graph: Arc<Mutex<Graph>> = Arc::default();
    let (queue, work) = mpsc::unbounded_channel::<String>();
    tokio::spawn(worker(
        registry.clone(),
        graph.clone(),
        work,
        stopping.clone(),
    ));
    tokio::spawn(discover(registry, graph, queue, stopping));
}

/// Watches every resource as it appears (CRDs add some at run time), once per storage.
async fn discover(
    registry: Registry,
    graph: Arc<Mutex<Graph>>,
    queue: mpsc::UnboundedSender<String>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut watched: HashSet<String> = HashSet::new();
    loop {
        for def in registry.resources.all() {
            // All versions of a resource share one storage: watch it once.
            if def.events_k8s_io || !watched.insert(def.key_prefix()) {
                continue;
            }
            tokio::spawn(watch_resource(
                registry.clone(),
                def,
                graph.clone(),
                queue.clone(),
                stopping.clone(),
            ));
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}

async fn watch_resource(
    registry: Registry,
    def: Arc<ResourceDef>,
    graph: Arc<Mutex<Graph>>,
    queue: mpsc::UnboundedSender<String>,
    stopping: watch::Receiver<bool>,
) {
    loop {
        if *stopping.borrow()
            || registry
                .resources
                .get(
                    &def.group_version.group,
                    &def.group_version.version,
                    &def.plural,
                )
                .is_none()
        {
            return;
        }
        let events = match registry
            .watch(def.clone(), None, ListOptions::default(), false, false)
            .await
        {
            Ok(events) => events,
            Err(_) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut stop = stopping.clone();
        let mut events = events.take_until(Box::pin(async move {
            let _ = stop.wait_for(|s| *s).await;
        }));
        while let Some(event) = events.next().await {
            let Some(uid) = event
                .object
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_owned)
            else {
                continue;
            };
            match event.kind {
                "ADDED" | "MODIFIED" => {
                    let owners = owners_of(&event.object);
                    let mut g = graph.lock().unwrap_or_else(PoisonError::into_inner);
                    if owners.is_empty() {
                        g.forget(&uid);
                    } else {
                        let dependent = Dependent {
                            def: def.clone(),
                            namespace: plinth_core::meta::namespace(&event.object)
                                .map(str::to_owned),
                            name: plinth_core::meta::name(&event.object)
                                .unwrap_or("")
                                .to_owned(),
                            owners,
                        };
                        g.record(&uid, dependent);
                        // Its owners may be gone already (or never have existed).
                        let _ = queue.send(uid.clone());
                    }
                }
                "DELETED" => {
                    let mut g = graph.lock().unwrap_or_else(PoisonError::into_inner);
                    g.forget(&uid);
                    for dependent in g.by_owner.get(&uid).into_iter().flatten() {
                        let _ = queue.send(dependent.clone());
                    }
                }
                _ => {}
            }
        }
        // The watch ended (the server is stopping, or the cache was rebuilt): watch again.
        if *stopping.borrow() {
            return;
        }
    }
}

/// Whether `owner` of an object in `namespace` exists in storage with the referenced uid.
async fn owner_exists(registry: &Registry, owner: &Owner, namespace: Option<&str>) -> Option<bool> {
    let gv = GroupVersion::parse(&owner.api_version)?;
    let def = registry
        .resources
        .by_kind(&gv.group, &gv.version, &owner.kind)?;
    let namespace = if def.namespaced { namespace } else { None };
    match registry.get(&def, namespace, &owner.name).await {
        Ok(object) => Some(
            object.pointer("/metadata/uid").and_then(Value::as_str) == Some(owner.uid.as_str()),
        ),
        Err(e) if e.reason == StatusReason::NotFound => Some(false),
        Err(_) => None,
    }
}

async fn worker(
    registry: Registry,
    graph: Arc<Mutex<Graph>>,
    mut work: mpsc::UnboundedReceiver<String>,
    mut stopping: watch::Receiver<bool>,
) {
    loop {
        let uid = tokio::select! {
            uid = work.recv() => match uid { Some(uid) => uid, None => return },
            _ = stopping.wait_for(|s| *s) => return,
        };
        let Some(dependent) = graph
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .dependents
            .get(&uid)
            .cloned()
        else {
            continue;
        };
        let mut alive = false;
        for owner in &dependent.owners {
            match owner_exists(&registry, owner, dependent.namespace.as_deref()).await {
                Some(false) => {}
                // Present, or not resolvable now (unknown kind, storage trouble): keep the dependent.
                Some(true) | None => {
                    alive = true;
                    break;
                }
            }
        }
        if alive {
            continue;
        }
        let options = DeleteOptions {
            uid: Some(uid.clone()),
            ..DeleteOptions::default()
        };
        match registry
            .delete(
                &dependent.def,
                dependent.namespace.as_deref(),
                &dependent.name,
                &options,
            )
            .await
        {
            Ok(_) => {
                tracing::info!(name = %dependent.name, resource = %dependent.def.plural, "garbage collected: all owners are gone")
            }
            Err(e) if matches!(e.reason, StatusReason::NotFound | StatusReason::Conflict) => {}
            Err(e) => {
                tracing::warn!(name = %dependent.name, error = %e.message, "garbage collection failed")
            }
        }
    }
}
