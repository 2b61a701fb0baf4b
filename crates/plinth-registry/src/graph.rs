//! The owner graph of an object, as the garbage collector sees it: its owners (from its
//! ownerReferences), its dependents (the objects whose ownerReferences name it, recursively),
//! and what holds deletions up — finalizers, deletion timestamps, `blockOwnerDeletion`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use plinth_core::ApiError;
use serde_json::{Value, json};

use crate::Registry;
use crate::codec::decode_view;
use crate::resources::ResourceDef;
use crate::timeline::ObjectRef;

/// Dependents are followed this deep at most.
const MAX_DEPTH: usize = 8;

impl Registry {
    /// The owner graph of `object` (an object of `def`), showing only the objects `visible`
    /// lets the reader see.
    ///
    /// # Errors
    /// When storage cannot be read.
    pub async fn owner_graph(
        &self,
        def: &ResourceDef,
        object: &Value,
        visible: &(dyn Fn(&ObjectRef) -> bool + Sync),
    ) -> Result<Value, ApiError> {
        let namespace = plinth_core::meta::namespace(object).map(str::to_owned);
        // Every object that may own or depend on it: its namespace's, and cluster-scoped ones.
        let mut everything: Vec<(Arc<ResourceDef>, Value)> = Vec::new();
        let mut seen_prefixes = HashSet::new();
        for candidate in self.resources.all() {
            if candidate.answer.is_some()
                || candidate.computed.is_some()
                || !seen_prefixes.insert(candidate.key_prefix())
                || (candidate.namespaced && namespace.is_none())
            {
                continue;
            }
            for found in self.objects_of(&candidate, namespace.as_deref()).await? {
                everything.push((candidate.clone(), found));
            }
        }
        let uid_of = |o: &Value| {
            o.pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        // Owner uid → its dependents.
        let mut by_owner: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, (_, o)) in everything.iter().enumerate() {
            for r in o
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(owner) = r.get("uid").and_then(Value::as_str) {
                    by_owner.entry(owner.to_owned()).or_default().push(i);
                }
            }
        }
        let node = |d: &ResourceDef, o: &Value| {
            let reference = reference(d, o);
            json!({
                "apiVersion": reference.api_version,
                "kind": reference.kind,
                "namespace": reference.namespace,
                "name": reference.name,
                "uid": uid_of(o),
                "finalizers": o.pointer("/metadata/finalizers").cloned().unwrap_or(json!([])),
                "deletionTimestamp": o.pointer("/metadata/deletionTimestamp").cloned().unwrap_or(Value::Null),
            })
        };
        fn dependents_of(
            uid: &str,
            depth: usize,
            everything: &[(Arc<ResourceDef>, Value)],
            by_owner: &HashMap<String, Vec<usize>>,
            node: &dyn Fn(&ResourceDef, &Value) -> Value,
            visible: &(dyn Fn(&ObjectRef) -> bool + Sync),
            visited: &mut HashSet<String>,
        ) -> Vec<Value> {
            let mut out = Vec::new();
            for &i in by_owner.get(uid).into_iter().flatten() {
                let (d, o) = &everything[i];
                let child_uid = o
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                if !visible(&reference(d, o)) || !visited.insert(child_uid.clone()) {
                    continue;
                }
                let mut entry = node(d, o);
                let link = o
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .and_then(|refs| {
                        refs.iter()
                            .find(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
                    })
                    .cloned()
                    .unwrap_or(json!({}));
                entry["controller"] = link.get("controller").cloned().unwrap_or(json!(false));
                entry["blockOwnerDeletion"] = link
                    .get("blockOwnerDeletion")
                    .cloned()
                    .unwrap_or(json!(false));
                entry["dependents"] = if depth < MAX_DEPTH {
                    json!(dependents_of(
                        &child_uid,
                        depth + 1,
                        everything,
                        by_owner,
                        node,
                        visible,
                        visited
                    ))
                } else {
                    json!([])
                };
                out.push(entry);
            }
            out
        }
        let mut visited = HashSet::from([uid_of(object)]);
        let dependents = dependents_of(
            &uid_of(object),
            1,
            &everything,
            &by_owner,
            &node,
            visible,
            &mut visited,
        );
        let by_uid: HashMap<String, usize> = everything
            .iter()
            .enumerate()
            .map(|(i, (_, o))| (uid_of(o), i))
            .collect();
        let owners: Vec<Value> = object
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| {
                let uid = r.get("uid").and_then(Value::as_str).unwrap_or("");
                let found = by_uid.get(uid).map(|&i| &everything[i]);
                let mut entry = match found {
                    Some((d, o)) if visible(&reference(d, o)) => node(d, o),
                    _ => json!({
                        "apiVersion": r.get("apiVersion"),
                        "kind": r.get("kind"),
                        "name": r.get("name"),
                        "uid": uid,
                    }),
                };
                entry["exists"] = json!(found.is_some());
                entry["controller"] = r.get("controller").cloned().unwrap_or(json!(false));
                entry["blockOwnerDeletion"] =
                    r.get("blockOwnerDeletion").cloned().unwrap_or(json!(false));
                entry
            })
            .collect();
        Ok(json!({
            "kind": "OwnerGraph",
            "apiVersion": "history.plinth.dev/v1alpha1",
            "object": node(def, object),
            "owners": owners,
            "dependents": dependents,
        }))
    }

    /// The objects of `def` in `namespace` (all, for a cluster-scoped one): from its watch
    /// cache when it has one and that is up, else from storage.
    async fn objects_of(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
    ) -> Result<Vec<Value>, ApiError> {
        let namespace = namespace.filter(|_| def.namespaced);
        if let Some(cacher) = self.cache_of(def) {
            let (cached, revision) = cacher.snapshot(&def.list_prefix(namespace));
            if revision > 0 {
                return Ok(cached.iter().filter_map(|s| s.decode()).collect());
            }
        }
        let listed = self
            .store
            .range(plinth_store::RangeRequest::prefix(
                def.list_prefix(namespace),
            ))
            .await
            .map_err(ApiError::internal)?;
        Ok(listed
            .kvs
            .iter()
            .filter_map(|kv| decode_view(def, kv).ok())
            .collect())
    }
}

/// `def`'s object `o` as a reference.
pub(crate) fn reference(def: &ResourceDef, o: &Value) -> ObjectRef {
    ObjectRef {
        api_version: def.group_version.api_version(),
        kind: def.kind.clone(),
        resource: def.plural.clone(),
        group: def.group_version.group.clone(),
        namespace: plinth_core::meta::namespace(o).unwrap_or("").to_owned(),
        name: plinth_core::meta::name(o).unwrap_or("").to_owned(),
    }
}
