//! Timelines: what happened to an object and everything it owns — its own writes, its
//! descendants' writes (by ownerReferences, recursively), the Events about any of them and the
//! node agent's container starts and exits — merged in revision order, with who made each
//! write and what it changed. One pass over the store's journal from a revision on.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use plinth_core::ApiError;
use plinth_store::{EventKind, Revision};
use serde_json::{Value, json};

use crate::Registry;
use crate::provenance::Provenance;
use crate::resources::ResourceDef;

/// At most this many writes are read for one timeline; past it the answer says so.
pub const MAX_WRITES: usize = 200_000;

/// One step of a timeline.
#[derive(Clone, Debug)]
pub struct Step {
    /// The write's revision.
    pub revision: Revision,
    /// When (the write's provenance time, or the Event's own), RFC 3339 with microseconds.
    pub time: String,
    /// What: `ADDED`, `MODIFIED`, `DELETED`, `Event`, `ContainerStarted`, `ContainerExited`.
    pub what: String,
    /// The object it is about.
    pub object: ObjectRef,
    /// Who made the write.
    pub provenance: Option<Provenance>,
    /// A line saying what changed (the fields, the Event's reason and message, the exit).
    pub summary: String,
}

/// An object a step is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    /// `apps/v1`.
    pub api_version: String,
    /// `ReplicaSet`.
    pub kind: String,
    /// Its plural, as authorization names it.
    pub resource: String,
    /// Its group.
    pub group: String,
    /// Empty for a cluster-scoped object.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl Step {
    /// As the history API shows it.
    pub fn to_json(&self) -> Value {
        let mut out = json!({
            "revision": self.revision.to_string(),
            "time": self.time,
            "type": self.what,
            "object": {
                "apiVersion": self.object.api_version,
                "kind": self.object.kind,
                "namespace": self.object.namespace,
                "name": self.object.name,
            },
            "summary": self.summary,
        });
        if let Some(p) = &self.provenance {
            out["provenance"] = p.to_json();
        }
        out
    }
}

/// A timeline, and whether the journal was cut short.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// The steps, oldest first.
    pub steps: Vec<Step>,
    /// More writes followed than were read ([`MAX_WRITES`]).
    pub truncated: bool,
}

/// What the pass keeps of an object of the family.
struct Member {
    object: ObjectRef,
    last: Value,
}

impl Registry {
    /// The timeline of the object `name` of `def` from revision `from` (0: all kept), with
    /// only the steps about objects `visible` lets the reader see.
    ///
    /// # Errors
    /// 410 when `from` is older than history keeps; 404 when the object has no history.
    pub async fn timeline(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        from: Revision,
        visible: &(dyn Fn(&ObjectRef) -> bool + Sync),
    ) -> Result<Timeline, ApiError> {
        let root_key = def.key(namespace, name);
        let writes = self
            .store
            .journal("/", from, MAX_WRITES + 1)
            .await
            .map_err(|e| match e {
                plinth_store::StoreError::Compacted {
                    requested,
                    compacted: Some(oldest),
                } => ApiError::expired(format!(
                    "too old resource version: {requested} ({oldest}): the oldest retained revision is {oldest}"
                )),
                other => ApiError::internal(other),
            })?;
        let truncated = writes.len() > MAX_WRITES;
        let defs = self.key_prefixes();
        // The family: the uids of the root and of everything it owns, and their keys.
        let mut uids: HashSet<String> = HashSet::new();
        let mut members: HashMap<String, Member> = HashMap::new();
        let mut steps = Vec::new();
        for write in writes.into_iter().take(MAX_WRITES) {
            let key = write.kv.key.clone();
            let provenance = write.note.as_deref().and_then(Provenance::from_note);
            let time = provenance
                .as_ref()
                .map(|p| plinth_core::meta::format_micro_time(p.time_micros))
                .unwrap_or_default();
            if write.kind == EventKind::Delete {
                if let Some(member) = members.remove(&key) {
                    steps.push(Step {
                        revision: write.kv.mod_revision,
                        time,
                        what: "DELETED".into(),
                        object: member.object,
                        provenance,
                        summary: "deleted".into(),
                    });
                }
                continue;
            }
            let Some(def) = defs
                .iter()
                .find(|(prefix, _)| key.starts_with(prefix.as_str()))
                .map(|(_, d)| d)
            else {
                continue;
            };
            let Ok(object) = serde_json::from_slice::<Value>(&write.kv.value) else {
                continue;
            };
            let uid = object
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            if def.kind == "Event" {
                let about = object
                    .pointer("/involvedObject/uid")
                    .or_else(|| object.pointer("/regarding/uid"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if uids.contains(about) && write.kv.create_revision == write.kv.mod_revision {
                    let target = members.values().find(|m| {
                        m.last.pointer("/metadata/uid").and_then(Value::as_str) == Some(about)
                    });
                    if let Some(target) = target {
                        let text = |f: &str| object.get(f).and_then(Value::as_str).unwrap_or("");
                        steps.push(Step {
                            revision: write.kv.mod_revision,
                            time: [
                                text("eventTime"),
                                text("lastTimestamp"),
                                text("firstTimestamp"),
                            ]
                            .into_iter()
                            .find(|t| !t.is_empty())
                            .map_or(time, str::to_owned),
                            what: "Event".into(),
                            object: target.object.clone(),
                            provenance,
                            summary: format!(
                                "{} {}: {}",
                                text("type"),
                                text("reason"),
                                object
                                    .get("message")
                                    .or_else(|| object.get("note"))
                                    .and_then(Value::as_str)
                                    .unwrap_or("")
                            ),
                        });
                    }
                }
                continue;
            }
            let owned = object
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| {
                    refs.iter()
                        .filter_map(|r| r.get("uid").and_then(Value::as_str))
                        .any(|u| uids.contains(u))
                });
            let in_family = key == root_key || owned || members.contains_key(&key);
            if !in_family {
                continue;
            }
            if !uid.is_empty() {
                uids.insert(uid);
            }
            let reference = crate::graph::reference(def, &object);
            let previous = members.get(&key).map(|m| m.last.clone());
            let added = write.kv.create_revision == write.kv.mod_revision;
            let summary = match &previous {
                Some(before) if !added => changed_fields(before, &object),
                _ => "created".to_owned(),
            };
            steps.push(Step {
                revision: write.kv.mod_revision,
                time: time.clone(),
                what: if added { "ADDED" } else { "MODIFIED" }.into(),
                object: reference.clone(),
                provenance: provenance.clone(),
                summary,
            });
            if def.kind == "Pod" {
                for (what, summary) in container_changes(previous.as_ref(), &object) {
                    steps.push(Step {
                        revision: write.kv.mod_revision,
                        time: time.clone(),
                        what,
                        object: reference.clone(),
                        provenance: provenance.clone(),
                        summary,
                    });
                }
            }
            members.insert(
                key,
                Member {
                    object: reference,
                    last: object,
                },
            );
        }
        if steps.is_empty() {
            return Err(ApiError::not_found(&def.group_resource(), name));
        }
        steps.retain(|s| visible(&s.object));
        Ok(Timeline { steps, truncated })
    }

    /// Every served resource's storage prefix, longest first (so that a key finds its own).
    fn key_prefixes(&self) -> Vec<(String, Arc<ResourceDef>)> {
        let mut seen = BTreeSet::new();
        let mut out: Vec<(String, Arc<ResourceDef>)> = self
            .resources
            .all()
            .into_iter()
            .filter(|d| d.answer.is_none() && d.computed.is_none())
            .filter(|d| seen.insert(d.key_prefix()))
            .map(|d| (d.key_prefix(), d))
            .collect();
        out.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        out
    }
}

/// The fields a write changed, two levels deep (`spec.replicas, status`), bookkeeping left out.
fn changed_fields(before: &Value, after: &Value) -> String {
    let mut changed = Vec::new();
    let (Some(a), Some(b)) = (before.as_object(), after.as_object()) else {
        return "changed".into();
    };
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for key in keys {
        let (x, y) = (a.get(key), b.get(key));
        if x == y {
            continue;
        }
        match (x.and_then(Value::as_object), y.and_then(Value::as_object)) {
            (Some(xs), Some(ys)) => {
                let inner: BTreeSet<&String> = xs.keys().chain(ys.keys()).collect();
                for field in inner {
                    if xs.get(field) != ys.get(field)
                        && !(key == "metadata"
                            && matches!(field.as_str(), "resourceVersion" | "managedFields"))
                    {
                        changed.push(format!("{key}.{field}"));
                    }
                }
            }
            _ => changed.push(key.clone()),
        }
    }
    if changed.is_empty() {
        "no change".into()
    } else {
        format!("changed {}", changed.join(", "))
    }
}

/// The containers a pod write shows starting or exiting: (what, summary).
fn container_changes(before: Option<&Value>, after: &Value) -> Vec<(String, String)> {
    let states = |pod: Option<&Value>| -> HashMap<String, Value> {
        pod.and_then(|p| p.pointer("/status/containerStatuses"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .chain(
                pod.and_then(|p| p.pointer("/status/initContainerStatuses"))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten(),
            )
            .filter_map(|s| {
                Some((
                    s.get("name")?.as_str()?.to_owned(),
                    json!({"state": s.get("state"), "restarts": s.get("restartCount")}),
                ))
            })
            .collect()
    };
    let (old, new) = (states(before), states(Some(after)));
    let mut out = Vec::new();
    let mut names: Vec<&String> = new.keys().collect();
    names.sort();
    for name in names {
        let now = &new[name];
        let then = old.get(name);
        if then == Some(now) {
            continue;
        }
        let started = now.pointer("/state/running/startedAt");
        if started.is_some() && then.and_then(|t| t.pointer("/state/running/startedAt")) != started
        {
            out.push((
                "ContainerStarted".to_owned(),
                format!("container {name} started"),
            ));
        }
        if let Some(done) = now.pointer("/state/terminated")
            && then.and_then(|t| t.pointer("/state/terminated")) != Some(done)
        {
            out.push((
                "ContainerExited".to_owned(),
                format!(
                    "container {name} exited with code {} ({})",
                    done.get("exitCode").and_then(Value::as_i64).unwrap_or(0),
                    done.get("reason").and_then(Value::as_str).unwrap_or("")
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_fields_name_what_moved() {
        let before = json!({"metadata": {"resourceVersion": "1", "labels": {"a": "1"}}, "spec": {"replicas": 1}});
        let after = json!({"metadata": {"resourceVersion": "2", "labels": {"a": "2"}}, "spec": {"replicas": 2}, "status": {}});
        assert_eq!(
            changed_fields(&before, &after),
            "changed metadata.labels, spec.replicas, status"
        );
        assert_eq!(changed_fields(&before, &before), "no change");
    }

    #[test]
    fn containers_start_and_exit() {
        let running = json!({"status": {"containerStatuses": [{"name": "web", "restartCount": 0, "state": {"running": {"startedAt": "t1"}}}]}});
        let exited = json!({"status": {"containerStatuses": [{"name": "web", "restartCount": 0, "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]}});
        assert_eq!(
            container_changes(None, &running),
            [(
                "ContainerStarted".to_owned(),
                "container web started".to_owned()
            )]
        );
        assert_eq!(container_changes(Some(&running), &running), []);
        assert_eq!(
            container_changes(Some(&running), &exited),
            [(
                "ContainerExited".to_owned(),
                "container web exited with code 3 (Error)".to_owned()
            )]
        );
    }
}
