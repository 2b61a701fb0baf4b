//! The template history of StatefulSets and DaemonSets: each template a workload has had is
//! a ControllerRevision it owns (`<workload>-<hash>`, `data` the template as a patch,
//! numbered in order) — what `kubectl rollout history|undo` read. Returning to an old
//! template renumbers its revision as the latest; revisions beyond `revisionHistoryLimit`
//! that no pod uses are deleted.

use plinth_core::At as _;
use std::sync::Arc;

use plinth_core::{Frozen, Tree};
use plinth_registry::{Client, DeleteOptions, Part, WriteOptions};
use serde_json::{Value, json};

use crate::informer::{Informer, key_of};
use crate::workload::{EXPECTATION_TIMEOUT, controller_of, template_hash, uid};

/// A revision's `data` as kube's controllers write it (and as `kubectl rollout undo` and the
/// DaemonSet controller's `Match` read it, the latter byte for byte):
/// `{"spec":{"template":T}}`, T the template as Go's typed encoding has it — the metadata's
/// `creationTimestamp` and every container's `resources` present even when empty — marked
/// `"$patch":"replace"`.
pub(crate) fn revision_data(template: &Value) -> Value {
    let mut template = template.clone();
    if let Some(object) = template.as_object_mut() {
        let metadata = object.entry("metadata").or_insert_with(|| json!({}));
        if let Some(metadata) = metadata.as_object_mut() {
            metadata.entry("creationTimestamp").or_insert(Value::Null);
        }
        for list in ["initContainers", "containers", "ephemeralContainers"] {
            for container in template
                .pointer_mut(&format!("/spec/{list}"))
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(container) = container.as_object_mut() {
                    container.entry("resources").or_insert_with(|| json!({}));
                }
            }
        }
        template["$patch"] = json!("replace");
    }
    json!({"spec": {"template": template}})
}

/// The pod template a revision records (its `data` without the patch directive).
pub(crate) fn template_of(revision: &Value) -> Value {
    let mut template = revision
        .at("/data/spec/template")
        .cloned()
        .unwrap_or(json!({}));
    if let Some(object) = template.as_object_mut() {
        object.remove("$patch");
    }
    if let Some(metadata) = template["metadata"].as_object_mut()
        && metadata.get("creationTimestamp") == Some(&Value::Null)
    {
        metadata.remove("creationTimestamp");
    }
    template
}

/// One workload's revisions.
pub(crate) struct History<'a> {
    /// The registry written to.
    pub(crate) registry: &'a Client,
    /// The ControllerRevisions, cached.
    pub(crate) revisions: &'a Informer,
    /// The workload.
    pub(crate) owner: &'a Frozen,
    /// Its controller reference.
    pub(crate) controller: &'a Value,
    /// Who writes.
    pub(crate) manager: &'a str,
}

fn int(object: &Frozen, pointer: &str) -> i64 {
    object.at(pointer).and_then(Frozen::as_i64).unwrap_or(0)
}

fn name_of(object: &(impl Tree + ?Sized)) -> &str {
    plinth_core::meta::name(object).unwrap_or("")
}

impl History<'_> {
    fn namespace(&self) -> &str {
        plinth_core::meta::namespace(self.owner).unwrap_or("default")
    }

    /// The revision called `current` (or the update one when there is none) and the
    /// revision of the workload's template now, recorded when new; `used` names the
    /// revisions pods still run, kept whatever the limit.
    pub(crate) async fn sync(&self, current: &str, used: &[String]) -> Option<(Value, Value)> {
        let owner = uid(self.owner);
        let mut owned: Vec<Arc<Frozen>> = self
            .revisions
            .in_namespace(self.namespace())
            .into_iter()
            .filter(|r| controller_of(r).is_some_and(|c| c["uid"] == owner))
            .collect();
        owned.sort_by_key(|r| int(r, "/revision"));
        let template = self
            .owner
            .at("/spec/template")
            .map_or(json!({}), Frozen::to_value);
        let data = revision_data(&template);
        let latest = owned.last().map_or(0, |r| int(r, "/revision"));
        // Revisions recorded before `data` took kube's form (the bare template) still match.
        let legacy = json!({"spec": {"template": template}});
        // Of several equal revisions (a user may copy one), the latest counts (kube's
        // FindEqualRevisions, last first).
        let update = match owned
            .iter()
            .rfind(|r| r.get("data").is_some_and(|d| *d == data || *d == legacy))
        {
            Some(found) if int(found, "/revision") == latest => found.to_value(),
            Some(found) => self.renumber(found, latest + 1).await?,
            None => self.record(&template, data, latest + 1).await?,
        };
        let current = owned
            .iter()
            .find(|r| name_of(r) == current)
            .map_or_else(|| update.clone(), |r| r.to_value());
        self.trim(&owned, &current, &update, used).await;
        Some((current, update))
    }

    async fn record(&self, template: &Value, data: Value, number: i64) -> Option<Value> {
        let collisions = self
            .owner
            .at("/status/collisionCount")
            .and_then(Frozen::as_i64);
        let hash = template_hash(template, collisions);
        let name = format!("{}-{}", name_of(self.owner), hash);
        // kube's: the template's labels and the hash (a DaemonSet's also under its pods'
        // hash label).
        let mut labels = self
            .owner
            .at("/spec/template/metadata/labels")
            .or_else(|| self.owner.at("/spec/selector/matchLabels"))
            .filter(|l| l.is_object())
            .map_or(json!({}), Frozen::to_value);
        labels["controller.kubernetes.io/hash"] = json!(hash);
        if self.owner["kind"] == "DaemonSet" {
            labels["controller-revision-hash"] = json!(hash);
        }
        let revision = json!({
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {
                "name": name,
                "namespace": self.namespace(),
                "labels": labels,
                "ownerReferences": [self.controller],
            },
            "data": data,
            "revision": number,
        });
        let def = self
            .registry
            .resources
            .get("apps", "v1", "controllerrevisions")?;
        let written = self
            .registry
            .create(
                &def,
                Some(self.namespace()),
                revision,
                &WriteOptions::internal(self.manager),
            )
            .await
            .map_err(|e| {
                tracing::warn!(owner = %key_of(self.owner), error = %e.message, "revision not recorded");
            })
            .ok()?;
        let key = key_of(&written.object);
        self.revisions
            .wait_until(EXPECTATION_TIMEOUT, |r| r.get(&key).is_some())
            .await;
        Some(written.object)
    }

    async fn renumber(&self, revision: &Frozen, number: i64) -> Option<Value> {
        let def = self
            .registry
            .resources
            .get("apps", "v1", "controllerrevisions")?;
        let written = self
            .registry
            .modify(
                &def,
                Some(self.namespace()),
                name_of(revision),
                Part::Main,
                &WriteOptions::internal(self.manager),
                |r| {
                    r["revision"] = json!(number);
                    Ok(true)
                },
            )
            .await
            .ok()??;
        Some(written.object)
    }

    /// Deletes the oldest revisions beyond `revisionHistoryLimit` that are neither current
    /// nor the update nor in use.
    async fn trim(&self, owned: &[Arc<Frozen>], current: &Value, update: &Value, used: &[String]) {
        let limit = self
            .owner
            .at("/spec/revisionHistoryLimit")
            .and_then(Frozen::as_i64)
            .unwrap_or(10);
        let spare: Vec<&Arc<Frozen>> = owned
            .iter()
            .filter(|r| {
                let n = name_of(r);
                n != name_of(current) && n != name_of(update) && !used.iter().any(|u| u == n)
            })
            .collect();
        let excess = usize::try_from(i64::try_from(spare.len()).unwrap_or(0) - limit).unwrap_or(0);
        let Some(def) = self
            .registry
            .resources
            .get("apps", "v1", "controllerrevisions")
        else {
            return;
        };
        for revision in spare.into_iter().take(excess) {
            let _ = self
                .registry
                .delete(
                    &def,
                    Some(self.namespace()),
                    name_of(revision),
                    &DeleteOptions::default(),
                )
                .await;
        }
    }
}
