//! The garbage collector: deletes objects whose owners are all gone, and carries out the
//! `Foreground` and `Orphan` propagation policies (kube-controller-manager's garbage collector).
//!
//! It follows every served resource — through the shared informer when another controller
//! keeps one of it (pods, ReplicaSets, Deployments, …), else with a watch of its own that keeps
//! no object (as kube's collector follows most resources with metadata informers of its own) —
//! keeping in memory which objects name which owners (by uid), so that when an object is
//! deleted its dependents are found at once. Whether an owner
//! is really gone is always confirmed by reading it from storage (name and uid), so the order in
//! which watch events arrive can never make it delete something whose owner exists — an owner
//! created just before its dependent, or recreated under the same name with a new uid, is judged
//! by what storage holds.
//!
//! - A dependent with no remaining owner is deleted (with `Foreground` itself if an owner is
//!   being deleted in the foreground and it has dependents of its own); one that still has an
//!   owner loses its references to absent owners and to owners deleted in the foreground.
//! - An owner with the `foregroundDeletion` finalizer keeps it until no dependent references it
//!   with `blockOwnerDeletion: true`; its dependents are deleted meanwhile.
//! - An owner with the `orphan` finalizer has its references removed from every dependent, then
//!   loses the finalizer.
//! - A cluster-scoped dependent naming a namespaced owner kind can never be resolved: it is kept,
//!   and a warning event `OwnerRefInvalidNamespace` says so. A namespaced dependent whose owner
//!   exists only in another namespace has an absent owner (it is collected), reported the same.
//!
//! Orphaning and foreground deletion act only once every resource's initial state has been read
//! (the graph is complete), so no dependent is missed after a restart.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use plinth_core::Tree;
use plinth_core::{ApiError, GroupVersion, StatusReason};
use plinth_registry::resources::ResourceDef;
use plinth_registry::{
    Client, DeleteOptions, FINALIZER_FOREGROUND, FINALIZER_ORPHAN, Part, Propagation, WatchOptions,
    WriteOptions,
};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, watch};

use crate::informer::{Change, SharedInformers};

/// Resources the collector does not follow (kube-controller-manager's
/// `DefaultIgnoredResources`): Events, by group and resource. Their owner references are not
/// acted on, and the collector holds nothing of them.
pub(crate) const IGNORED: [(&str, &str); 2] = [("", "events"), ("events.k8s.io", "events")];

/// How many work items run at once.
const WORKERS: usize = 8;

/// A string the graph holds in several places (uids, namespaces, owner kinds and names):
/// one allocation, shared (see [`Strings`]).
type Text = Arc<str>;

/// An owner reference, as the collector needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Owner {
    uid: Text,
    api_version: Text,
    kind: Text,
    name: Text,
    block: bool,
}

/// An object that names owners.
#[derive(Clone, Debug)]
struct Dependent {
    def: Arc<ResourceDef>,
    namespace: Option<Text>,
    name: String,
    owners: Box<[Owner]>,
    /// It is being deleted in the foreground (waiting for its own dependents).
    deleting_dependents: bool,
}

/// The strings the graph holds, each once: an object's uid is a key of several maps and the
/// uid of its dependents' owner references; namespaces, owner kinds and owner names repeat
/// across thousands of dependents. Those no longer held anywhere else are dropped whenever the
/// set has doubled since the last time.
#[derive(Default)]
struct Strings {
    held: HashSet<Text>,
    /// The number held after the last sweep.
    swept: usize,
}

impl Strings {
    /// The shared copy of `text`.
    fn get(&mut self, text: &str) -> Text {
        if let Some(held) = self.held.get(text) {
            return held.clone();
        }
        if self.held.len() >= 2 * self.swept.max(512) {
            self.held.retain(|t| Arc::strong_count(t) > 1);
            self.swept = self.held.len();
        }
        let text: Text = Arc::from(text);
        self.held.insert(text.clone());
        text
    }
}

#[derive(Default)]
struct Graph {
    /// Objects that have owners, by uid.
    dependents: HashMap<Text, Dependent>,
    /// Owner uid → the uids of its dependents.
    by_owner: HashMap<Text, HashSet<Text>>,
    /// Resource key prefixes being watched → whether their initial state has been read.
    synced: HashMap<String, bool>,
    /// Dependents already reported for an unresolvable owner reference.
    reported: HashSet<String>,
    /// The namespace of every namespaced object seen, by uid (to recognise an owner reference
    /// that names an object of another namespace).
    namespaces: HashMap<Text, Text>,
    /// What the maps' strings share.
    strings: Strings,
}

impl Graph {
    fn forget(&mut self, uid: &str) -> Option<Dependent> {
        let old = self.dependents.remove(uid)?;
        for owner in &old.owners {
            if let Some(set) = self.by_owner.get_mut(&owner.uid) {
                set.remove(uid);
                if set.is_empty() {
                    self.by_owner.remove(&owner.uid);
                }
            }
        }
        Some(old)
    }

    fn record(&mut self, uid: &Text, dependent: Dependent) -> Option<Dependent> {
        let old = self.forget(uid);
        for owner in &dependent.owners {
            self.by_owner
                .entry(owner.uid.clone())
                .or_default()
                .insert(uid.clone());
        }
        self.dependents.insert(uid.clone(), dependent);
        old
    }

    fn complete(&self) -> bool {
        self.synced.values().all(|s| *s)
    }

    /// Whether some dependent references `owner` with `blockOwnerDeletion: true`.
    fn blocked(&self, owner: &str) -> bool {
        self.by_owner.get(owner).into_iter().flatten().any(|uid| {
            self.dependents
                .get(uid)
                .is_some_and(|d| d.owners.iter().any(|o| &*o.uid == owner && o.block))
        })
    }
}

/// One thing to look at.
#[derive(Clone, Debug)]
enum Work {
    /// A dependent (by uid): are its owners gone?
    Dependent(Text),
    /// An owner that may be waiting for its dependents (`orphan` / `foregroundDeletion`).
    Owner {
        def: Arc<ResourceDef>,
        namespace: Option<String>,
        name: String,
    },
}

/// The owner references of `object`, their strings made by `share`.
fn owners_of<T: Tree + ?Sized>(object: &T, share: &mut dyn FnMut(&str) -> Text) -> Box<[Owner]> {
    object
        .path(&["metadata", "ownerReferences"])
        .map(|refs| {
            refs.elements()
                .into_iter()
                .filter_map(|r| {
                    let mut text =
                        |field: &str| r.field(field).and_then(Tree::text).map(&mut *share);
                    Some(Owner {
                        uid: text("uid")?,
                        api_version: text("apiVersion")?,
                        kind: text("kind")?,
                        name: text("name")?,
                        block: r
                            .field("blockOwnerDeletion")
                            .is_some_and(|b| b.boolean() == Some(true)),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn is_deleting<T: Tree + ?Sized>(object: &T) -> bool {
    object
        .path(&["metadata", "deletionTimestamp"])
        .is_some_and(|v| !v.is_null())
}

fn has_finalizer<T: Tree + ?Sized>(object: &T, finalizer: &str) -> bool {
    plinth_core::meta::finalizers(object)
        .iter()
        .any(|f| f == finalizer)
}

/// Starts the collector; it stops when `stopping` becomes true. It follows a resource through
/// `informers` when another controller keeps one of it (pods, ReplicaSets, …).
pub fn spawn_garbage_collector(
    registry: Client,
    informers: &SharedInformers,
    stopping: watch::Receiver<bool>,
) {
    let graph: Arc<Mutex<Graph>> = Arc::default();
    let (queue, work) = mpsc::unbounded_channel::<Work>();
    let collector = Collector {
        registry,
        informers: informers.clone(),
        graph,
        queue,
    };
    tokio::spawn(collector.clone().run(work, stopping.clone()));
    tokio::spawn(collector.discover(stopping));
}

#[derive(Clone)]
struct Collector {
    registry: Client,
    informers: SharedInformers,
    graph: Arc<Mutex<Graph>>,
    queue: mpsc::UnboundedSender<Work>,
}

impl Collector {
    fn graph(&self) -> std::sync::MutexGuard<'_, Graph> {
        self.graph.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Watches every resource but [`IGNORED`] as it appears (CRDs add some at run time), once
    /// per storage.
    async fn discover(self, mut stopping: watch::Receiver<bool>) {
        let mut watched: HashSet<String> = HashSet::new();
        loop {
            for def in self.registry.resources.all() {
                // All versions of a resource share one storage: watch it once.
                if def.stored_as.is_some()
                    || IGNORED.contains(&(def.group_version.group.as_str(), def.plural.as_str()))
                    || !watched.insert(def.key_prefix())
                {
                    continue;
                }
                self.graph().synced.insert(def.key_prefix(), false);
                if !self.join(&def) {
                    tokio::spawn(self.clone().watch_resource(def, stopping.clone()));
                }
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = stopping.wait_for(|s| *s) => return,
            }
        }
    }

    /// Follows `def` through the shared informer another controller keeps of it, if there is
    /// one: its changes feed the graph, its first full list marks the resource read.
    fn join(&self, def: &Arc<ResourceDef>) -> bool {
        let collector = self.clone();
        let followed = def.clone();
        let resource = (
            def.group_version.group.as_str(),
            def.group_version.version.as_str(),
            def.plural.as_str(),
        );
        let Some(informer) = self.informers.join(resource, move |change: Change<'_>| {
            let (kind, object) = match (change.new, change.old) {
                (Some(new), None) => ("ADDED", new),
                (Some(new), Some(_)) => ("MODIFIED", new),
                (None, Some(old)) => ("DELETED", old),
                (None, None) => return,
            };
            collector.observe(&followed, kind, object);
        }) else {
            return false;
        };
        let (collector, def) = (self.clone(), def.clone());
        tokio::spawn(async move {
            informer.synced().await;
            collector.initial_state_read(&def);
        });
        true
    }

    fn served(&self, def: &ResourceDef) -> bool {
        self.registry
            .resources
            .get(
                &def.group_version.group,
                &def.group_version.version,
                &def.plural,
            )
            .is_some()
    }

    async fn watch_resource(self, def: Arc<ResourceDef>, stopping: watch::Receiver<bool>) {
        loop {
            if *stopping.borrow() || !self.served(&def) {
                self.graph().synced.remove(&def.key_prefix());
                return;
            }
            let events = match self
                .registry
                .watch(
                    def.clone(),
                    None,
                    WatchOptions {
                        send_initial_events: true,
                        bookmarks: true,
                        ..WatchOptions::default()
                    },
                )
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
                self.observe(&def, event.kind, &event.object());
            }
            // The watch ended (the server is stopping, or the cache was rebuilt): watch again.
            if *stopping.borrow() {
                return;
            }
        }
    }

    /// `def`'s objects are all known now: dependents naming one of its kind are looked at
    /// again (an owner deleted before this resource was followed is seen as gone).
    fn initial_state_read(&self, def: &Arc<ResourceDef>) {
        let mut g = self.graph();
        g.synced.insert(def.key_prefix(), true);
        let group = &def.group_version.group;
        let recheck: Vec<Text> = g
            .dependents
            .iter()
            .filter(|(_, d)| {
                d.owners.iter().any(|o| {
                    *o.kind == def.kind
                        && GroupVersion::parse(&o.api_version).is_some_and(|gv| gv.group == *group)
                })
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        drop(g);
        for uid in recheck {
            let _ = self.queue.send(Work::Dependent(uid));
        }
    }

    /// Updates the graph from one watch event and queues what it makes worth a look.
    fn observe<T: Tree + ?Sized>(&self, def: &Arc<ResourceDef>, kind: &str, object: &T) {
        if kind == "BOOKMARK" {
            if object
                .path(&["metadata", "annotations", "k8s.io/initial-events-end"])
                .is_some()
            {
                self.initial_state_read(def);
            }
            return;
        }
        let Some(uid) = plinth_core::meta::meta_str(object, "uid") else {
            return;
        };
        let name = plinth_core::meta::name(object).unwrap_or("").to_owned();
        let mut work = Vec::new();
        let namespace;
        {
            let mut g = self.graph();
            let uid = g.strings.get(uid);
            namespace = plinth_core::meta::namespace(object).map(|ns| g.strings.get(ns));
            match (&namespace, kind) {
                (Some(ns), "ADDED") => {
                    g.namespaces.insert(uid.clone(), ns.clone());
                }
                (_, "DELETED") => {
                    g.namespaces.remove(&uid);
                }
                _ => {}
            }
            let previous = match kind {
                "ADDED" | "MODIFIED" => {
                    let strings = &mut g.strings;
                    let owners = owners_of(object, &mut |text| strings.get(text));
                    if owners.is_empty() {
                        g.forget(&uid)
                    } else {
                        // Its owners may be gone already (or never have existed).
                        work.push(Work::Dependent(uid.clone()));
                        g.record(
                            &uid,
                            Dependent {
                                def: def.clone(),
                                namespace: namespace.clone(),
                                name: name.clone(),
                                owners,
                                deleting_dependents: is_deleting(object)
                                    && has_finalizer(object, FINALIZER_FOREGROUND),
                            },
                        )
                    }
                }
                "DELETED" => {
                    let old = g.forget(&uid);
                    g.reported.remove(&*uid);
                    work.extend(
                        g.by_owner
                            .get(&uid)
                            .into_iter()
                            .flatten()
                            .map(|d| Work::Dependent(d.clone())),
                    );
                    old
                }
                _ => None,
            };
            // Owners this object referenced may have been waiting for it.
            let still: HashSet<&str> = g
                .dependents
                .get(&uid)
                .map(|d| d.owners.iter().map(|o| &*o.uid).collect())
                .unwrap_or_default();
            for owner in previous.iter().flat_map(|p| &p.owners) {
                if (kind == "DELETED" || !still.contains(&*owner.uid) || owner.block)
                    && let Some(work_item) = self.owner_work(owner, namespace.as_deref())
                {
                    work.push(work_item);
                }
            }
        }
        if kind != "DELETED"
            && is_deleting(object)
            && (has_finalizer(object, FINALIZER_ORPHAN)
                || has_finalizer(object, FINALIZER_FOREGROUND))
        {
            work.push(Work::Owner {
                def: def.clone(),
                namespace: namespace.as_deref().map(str::to_owned),
                name,
            });
        }
        for item in work {
            let _ = self.queue.send(item);
        }
    }

    fn owner_def(&self, owner: &Owner) -> Option<Arc<ResourceDef>> {
        let gv = GroupVersion::parse(&owner.api_version)?;
        self.registry
            .resources
            .by_kind(&gv.group, &gv.version, &owner.kind)
    }

    fn owner_work(&self, owner: &Owner, namespace: Option<&str>) -> Option<Work> {
        let def = self.owner_def(owner)?;
        let namespace = if def.namespaced {
            namespace.map(str::to_owned)
        } else {
            None
        };
        Some(Work::Owner {
            def,
            namespace,
            name: owner.name.to_string(),
        })
    }

    /// Runs queued work, several items at a time.
    async fn run(
        self,
        mut work: mpsc::UnboundedReceiver<Work>,
        mut stopping: watch::Receiver<bool>,
    ) {
        let slots = Arc::new(Semaphore::new(WORKERS));
        loop {
            let item = tokio::select! {
                item = work.recv() => match item { Some(item) => item, None => return },
                _ = stopping.wait_for(|s| *s) => return,
            };
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            let collector = self.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let retry = match &item {
                    Work::Dependent(uid) => collector.attempt_to_delete(uid).await,
                    Work::Owner {
                        def,
                        namespace,
                        name,
                    } => {
                        collector
                            .process_deleting_owner(def, namespace.as_deref(), name)
                            .await
                    }
                };
                if retry {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let _ = collector.queue.send(item);
                }
            });
        }
    }

    /// Reads `owner` of an object in `namespace` from storage: `None` if it cannot be resolved
    /// now (unknown kind, storage trouble).
    async fn owner_state(&self, owner: &Owner, namespace: Option<&str>) -> Option<OwnerState> {
        let def = self.owner_def(owner)?;
        let namespace = if def.namespaced { namespace } else { None };
        match self.registry.get(&def, namespace, &owner.name).await {
            Ok(object) => Some(
                if plinth_core::meta::meta_str(&object, "uid") != Some(&*owner.uid) {
                    OwnerState::Absent
                } else if is_deleting(&object) && has_finalizer(&object, FINALIZER_FOREGROUND) {
                    OwnerState::Waiting
                } else {
                    OwnerState::Solid
                },
            ),
            Err(e) if e.reason == StatusReason::NotFound => Some(OwnerState::Absent),
            Err(_) => None,
        }
    }

    /// kube's `attemptToDeleteItem`. Returns whether to look again later.
    async fn attempt_to_delete(&self, uid: &str) -> bool {
        let Some(mut dependent) = self.graph().dependents.get(uid).cloned() else {
            return false;
        };
        // Decided on the object as stored now, as kube's `attemptToDeleteItem` reads it: the
        // graph may not have heard yet that its references changed (an owner deleted with
        // `orphan` has just had them dropped), and acting on the old ones would delete an
        // object that was orphaned.
        match self
            .registry
            .get(
                &dependent.def,
                dependent.namespace.as_deref(),
                &dependent.name,
            )
            .await
        {
            Ok(latest) if plinth_core::meta::meta_str(&latest, "uid") == Some(uid) => {
                dependent.owners = owners_of(&latest, &mut |text| Text::from(text));
                if dependent.owners.is_empty() {
                    return false;
                }
            }
            Ok(_) => return false,
            Err(e) if e.reason == StatusReason::NotFound => return false,
            Err(_) => return true,
        }
        let mut solid = false;
        let mut gone: Vec<&Owner> = Vec::new();
        let mut waiting: Vec<&Owner> = Vec::new();
        for owner in &dependent.owners {
            if !dependent.def.namespaced && self.owner_def(owner).is_some_and(|d| d.namespaced) {
                // A cluster-scoped object cannot be owned by a namespaced one.
                self.report_invalid_namespace(uid, &dependent, owner).await;
                solid = true;
                continue;
            }
            match self
                .owner_state(owner, dependent.namespace.as_deref())
                .await
            {
                Some(OwnerState::Solid) | None => solid = true,
                Some(OwnerState::Absent) => {
                    self.check_other_namespaces(uid, &dependent, owner).await;
                    gone.push(owner);
                }
                Some(OwnerState::Waiting) => waiting.push(owner),
            }
        }
        if solid {
            if gone.is_empty() && waiting.is_empty() {
                return false;
            }
            // Keep the owners that exist; drop the references to the others.
            let dropped: HashSet<Text> =
                gone.iter().chain(&waiting).map(|o| o.uid.clone()).collect();
            return self.drop_owner_refs(&dependent, uid, &dropped).await;
        }
        let (has_dependents, dependent_waits) = {
            let g = self.graph();
            let dependents = g.by_owner.get(uid);
            let waits = dependents
                .into_iter()
                .flatten()
                .any(|d| g.dependents.get(d).is_some_and(|d| d.deleting_dependents));
            (dependents.is_some(), waits)
        };
        if !waiting.is_empty() && dependent_waits && dependent.owners.iter().any(|o| o.block) {
            // kube's cycle guard: an owner waits for this object while one of its own
            // dependents waits too — they may wait for each other. Its references stop
            // blocking their owners, and it is deleted in the foreground.
            if self.unblock_owner_refs(&dependent, uid).await {
                return true;
            }
        }
        let propagation = if !waiting.is_empty() && has_dependents {
            Some(Propagation::Foreground)
        } else {
            None
        };
        let options = DeleteOptions {
            uid: Some(uid.to_owned()),
            propagation,
            ..DeleteOptions::default()
        };
        match self
            .registry
            .delete(
                &dependent.def,
                dependent.namespace.as_deref(),
                &dependent.name,
                &options,
            )
            .await
        {
            Ok(_) => {
                tracing::info!(name = %dependent.name, resource = %dependent.def.plural, "garbage collected: no owner left");
                false
            }
            Err(e) if matches!(e.reason, StatusReason::NotFound | StatusReason::Conflict) => false,
            Err(e) => {
                tracing::warn!(name = %dependent.name, error = %e.message, "garbage collection failed");
                true
            }
        }
    }

    /// kube's `processDeletingDependentsItem` and `orphanDependents`. Returns whether to look
    /// again later.
    async fn process_deleting_owner(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> bool {
        let object = match self.registry.get(def, namespace, name).await {
            Ok(object) => object,
            Err(e) => return e.reason != StatusReason::NotFound,
        };
        let orphan = has_finalizer(&object, FINALIZER_ORPHAN);
        let foreground = has_finalizer(&object, FINALIZER_FOREGROUND);
        if !is_deleting(&object) || !(orphan || foreground) {
            return false;
        }
        let Some(uid) = plinth_core::meta::meta_str(&object, "uid").map(Text::from) else {
            return false;
        };
        if !self.graph().complete() {
            // Some resource's objects are not known yet: a dependent could be missed.
            return true;
        }
        if orphan {
            let dependents: Vec<(Text, Dependent)> = {
                let g = self.graph();
                g.by_owner
                    .get(&uid)
                    .into_iter()
                    .flatten()
                    .filter_map(|d| Some((d.clone(), g.dependents.get(d)?.clone())))
                    .collect()
            };
            for (dependent_uid, dependent) in dependents {
                let owner = HashSet::from([uid.clone()]);
                let retry = self
                    .drop_owner_refs(&dependent, &dependent_uid, &owner)
                    .await;
                if retry {
                    return true;
                }
            }
            return self
                .remove_finalizer(def, namespace, name, &uid, FINALIZER_ORPHAN)
                .await;
        }
        let (blocked, dependents): (bool, Vec<Text>) = {
            let g = self.graph();
            (
                g.blocked(&uid),
                g.by_owner
                    .get(&uid)
                    .into_iter()
                    .flatten()
                    .cloned()
                    .collect(),
            )
        };
        if blocked {
            for dependent in dependents {
                let _ = self.queue.send(Work::Dependent(dependent));
            }
            return false;
        }
        self.remove_finalizer(def, namespace, name, &uid, FINALIZER_FOREGROUND)
            .await
    }

    /// Removes from `dependent` its references to the owners in `owners` (by uid). Returns
    /// whether to try again later.
    async fn drop_owner_refs(
        &self,
        dependent: &Dependent,
        dependent_uid: &str,
        owners: &HashSet<Text>,
    ) -> bool {
        self.modify_dependent(dependent, dependent_uid, |object| {
            let Some(refs) = object
                .pointer_mut("/metadata/ownerReferences")
                .and_then(Value::as_array_mut)
            else {
                return false;
            };
            let before = refs.len();
            refs.retain(|r| {
                r.get("uid")
                    .and_then(Value::as_str)
                    .is_none_or(|u| !owners.contains(u))
            });
            refs.len() != before
        })
        .await
    }

    /// Sets `blockOwnerDeletion: false` on every owner reference of `dependent`. Returns
    /// whether to try again later.
    async fn unblock_owner_refs(&self, dependent: &Dependent, dependent_uid: &str) -> bool {
        self.modify_dependent(dependent, dependent_uid, |object| {
            let mut changed = false;
            for reference in object
                .pointer_mut("/metadata/ownerReferences")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if reference.get("blockOwnerDeletion") == Some(&Value::Bool(true)) {
                    reference["blockOwnerDeletion"] = Value::Bool(false);
                    changed = true;
                }
            }
            changed
        })
        .await
    }

    /// [`Collector::modify`] of a dependent, if it is still the object with `dependent_uid`.
    async fn modify_dependent(
        &self,
        dependent: &Dependent,
        dependent_uid: &str,
        change: impl Fn(&mut Value) -> bool + Sync,
    ) -> bool {
        self.modify(
            &dependent.def,
            dependent.namespace.as_deref(),
            &dependent.name,
            Some(dependent_uid),
            change,
        )
        .await
    }

    async fn remove_finalizer(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        uid: &str,
        finalizer: &str,
    ) -> bool {
        self.modify(def, namespace, name, Some(uid), |object| {
            let Some(list) = object
                .pointer_mut("/metadata/finalizers")
                .and_then(Value::as_array_mut)
            else {
                return false;
            };
            let before = list.len();
            list.retain(|f| f != finalizer);
            list.len() != before
        })
        .await
    }

    /// Changes an object with `change` (which says whether it changed anything) in one
    /// guaranteed update, if it still has `uid`. Returns whether to try again later (a failure
    /// other than the object being gone or replaced).
    async fn modify(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        uid: Option<&str>,
        change: impl Fn(&mut Value) -> bool + Sync,
    ) -> bool {
        let written = self
            .registry
            .modify(
                def,
                namespace,
                name,
                Part::Main,
                &WriteOptions::internal("kube-controller-manager"),
                |object| {
                    if uid.is_some_and(|u| plinth_core::meta::meta_str(object, "uid") != Some(u)) {
                        return Ok(false);
                    }
                    Ok(change(object))
                },
            )
            .await;
        match written {
            Ok(_) => false,
            Err(e) if e.reason == StatusReason::NotFound => false,
            Err(e) => {
                log_failure(name, &e);
                true
            }
        }
    }

    /// A namespaced owner absent from its dependent's namespace but present (same uid) in
    /// another: the reference is invalid — treated as absent, and reported.
    async fn check_other_namespaces(&self, uid: &str, dependent: &Dependent, owner: &Owner) {
        let elsewhere = {
            let g = self.graph();
            match (g.namespaces.get(&owner.uid), &dependent.namespace) {
                (Some(found), Some(ns)) => **found != **ns,
                _ => false,
            }
        };
        if elsewhere {
            self.report_invalid_namespace(uid, dependent, owner).await;
        }
    }

    /// A warning event on `dependent`: its owner reference can never resolve.
    async fn report_invalid_namespace(&self, uid: &str, dependent: &Dependent, owner: &Owner) {
        if !self.graph().reported.insert(uid.to_owned()) {
            return;
        }
        let Some(events) = self.registry.resources.get("", "v1", "events") else {
            return;
        };
        let namespace = dependent.namespace.as_deref().unwrap_or("");
        let now = plinth_core::meta::format_time(plinth_registry::now());
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": format!("{}.", dependent.name)},
            "involvedObject": {
                "apiVersion": dependent.def.group_version.api_version(),
                "kind": dependent.def.kind,
                "name": dependent.name,
                "namespace": dependent.namespace.as_deref(),
                "uid": uid,
            },
            "reason": "OwnerRefInvalidNamespace",
            "message": format!(
                "ownerRef [{}/{}, namespace: {namespace}, name: {}, uid: {}] does not exist in namespace \"{namespace}\"",
                owner.api_version, owner.kind, owner.name, owner.uid
            ),
            "type": "Warning",
            "source": {"component": "garbage-collector-controller"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        if let Err(e) = self
            .registry
            .create(
                &events,
                Some(dependent.namespace.as_deref().unwrap_or("default")),
                event,
                &WriteOptions::internal("kube-controller-manager"),
            )
            .await
        {
            log_failure(&dependent.name, &e);
        }
    }
}

/// What storage says of an owner reference.
enum OwnerState {
    /// It exists and is not waiting for its dependents.
    Solid,
    /// It does not exist (or another object with that name does).
    Absent,
    /// It is being deleted in the foreground.
    Waiting,
}

fn log_failure(name: &str, e: &ApiError) {
    tracing::warn!(%name, error = %e.message, "garbage collector: write failed");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_shared_and_the_unheld_swept_once_the_set_doubles() {
        let mut strings = Strings::default();
        let kept = strings.get("kept");
        assert!(Arc::ptr_eq(&kept, &strings.get("kept")));
        // Past twice the last sweep's count (at least 512), strings held nowhere else go.
        for i in 0..1023 {
            let _ = strings.get(&format!("uid-{i}"));
        }
        assert_eq!(strings.held.len(), 1024);
        let _ = strings.get("one more");
        assert_eq!(strings.held.len(), 2, "{:?}", strings.swept);
        assert!(strings.held.contains("kept") && strings.held.contains("one more"));
        assert!(Arc::ptr_eq(&kept, &strings.get("kept")));
    }

    #[test]
    fn owner_references_share_their_strings() {
        let object = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u1",
             "blockOwnerDeletion": true},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-2", "uid": "u2"},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "uid": "no name"},
        ]}});
        let mut strings = Strings::default();
        let owners = owners_of(&object, &mut |text| strings.get(text));
        assert_eq!(owners.len(), 2);
        assert_eq!((&*owners[0].name, owners[0].block), ("web", true));
        assert_eq!((&*owners[1].uid, owners[1].block), ("u2", false));
        assert!(Arc::ptr_eq(&owners[0].kind, &owners[1].kind));
        assert!(Arc::ptr_eq(&owners[0].api_version, &owners[1].api_version));
    }
}
