//! A Deployment's rollout: scaling its ReplicaSets for a replica change, a rolling update or
//! a recreate, and deleting old ones beyond the history limit.

use std::sync::Arc;

use plinth_core::Frozen;
use plinth_registry::DeleteOptions;

use crate::workload::{deleting, uid};

use super::*;

impl Context<'_> {
    /// A change of `spec.replicas`: the active ReplicaSets are sized to the new count — the
    /// only active one (or the new one) to `replicas`, several in proportion to their size
    /// (kube's `scale`). Whether anything was scaled.
    pub(super) async fn scale(&self, sets: &[Arc<Frozen>], new: Option<&Frozen>) -> bool {
        let desired = self.replicas().to_string();
        let active: Vec<&Arc<Frozen>> = sets.iter().filter(|s| replicas_of(s) > 0).collect();
        let scaling = active.iter().any(|s| {
            s.at("/metadata/annotations")
                .and_then(|a| a.get(DESIRED))
                .and_then(Frozen::as_str)
                .is_some_and(|d| d != desired)
        });
        match active.as_slice() {
            [] => match new {
                Some(new)
                    if self.spec("/spec/paused").is_some_and(|p| *p == true)
                        || new_only(sets, new) =>
                {
                    self.scale_set(new, self.replicas()).await
                }
                _ => false,
            },
            [only] => {
                let is_new = new.is_some_and(|n| uid(n) == uid(only));
                if (is_new || new.is_none()) && replicas_of(only) != self.replicas() {
                    self.scale_set(only, self.replicas()).await
                } else {
                    false
                }
            }
            many if scaling => {
                let (surge, _) = self.fenceposts();
                let allowed = self.replicas() + surge;
                let total: i64 = many.iter().map(|s| replicas_of(s)).sum();
                let delta = allowed - total;
                if delta == 0 {
                    return false;
                }
                // kube's `GetProportion`: each set, largest first (on the way up the newer
                // of two of a size first, on the way down the older), grows to its size
                // times the new total over the total it was sized for (its max-replicas
                // annotation), rounded, within what is left to give; the rest goes to the
                // first.
                let mut ordered: Vec<&Arc<Frozen>> = many.to_vec();
                let created = |s: &Frozen| {
                    plinth_core::meta::meta_str(s, "creationTimestamp").map(str::to_owned)
                };
                ordered.sort_by(|a, b| {
                    let by_age = if delta > 0 {
                        created(b).cmp(&created(a))
                    } else {
                        created(a).cmp(&created(b))
                    };
                    replicas_of(b).cmp(&replicas_of(a)).then(by_age)
                });
                let status_replicas = self
                    .deployment
                    .at("/status/replicas")
                    .and_then(Frozen::as_i64)
                    .unwrap_or(total);
                let mut given = 0;
                let mut targets: Vec<(Arc<Frozen>, i64)> = Vec::new();
                for s in &ordered {
                    let size = replicas_of(s);
                    let fraction = if self.replicas() == 0 {
                        -size
                    } else {
                        let annotated = s
                            .at("/metadata/annotations")
                            .and_then(|a| a.get(MAX))
                            .and_then(Frozen::as_str)
                            .and_then(|m| m.parse::<i64>().ok())
                            .unwrap_or(status_replicas)
                            .max(1);
                        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
                        let grown = ((size * allowed) as f64 / annotated as f64).round() as i64;
                        grown - size
                    };
                    let left = delta - given;
                    let share = if size == 0 || left == 0 {
                        0
                    } else if delta > 0 {
                        fraction.min(left)
                    } else {
                        fraction.max(left)
                    };
                    given += share;
                    targets.push(((*s).clone(), size + share));
                }
                if let Some(first) = targets.first_mut() {
                    first.1 = (first.1 + delta - given).max(0);
                }
                let mut any = false;
                for (set, replicas) in targets {
                    any |= self.scale_set(&set, replicas.max(0)).await;
                }
                any
            }
            _ => false,
        }
    }

    /// One step of a rolling update; whether anything was scaled.
    pub(super) async fn rollout_rolling(&self, sets: &[Arc<Frozen>], new: Option<&Frozen>) -> bool {
        let Some(new) = new else { return false };
        let target = self.new_replicas(sets, Some(new));
        if target != replicas_of(new) {
            return self.scale_set(new, target).await;
        }
        let mut old: Vec<&Arc<Frozen>> = sets.iter().filter(|s| uid(s) != uid(new)).collect();
        if old.iter().all(|s| replicas_of(s) == 0) {
            return false;
        }
        old.sort_by_key(|s| plinth_core::meta::meta_str(s, "creationTimestamp").map(str::to_owned));
        let (_, unavailable) = self.fenceposts();
        let min_available = self.replicas() - unavailable;
        let all: i64 = sets.iter().map(|s| replicas_of(s)).sum();
        let new_unavailable = replicas_of(new) - int(new, "/status/availableReplicas");
        let mut room = all - min_available - new_unavailable;
        if room <= 0 {
            return false;
        }
        let mut changed = false;
        // Unhealthy old replicas go first: they do not count towards availability.
        let mut sizes: Vec<i64> = old.iter().map(|s| replicas_of(s)).collect();
        for (i, set) in old.iter().enumerate() {
            if room <= 0 {
                break;
            }
            let unhealthy = sizes[i] - int(set, "/status/availableReplicas");
            if unhealthy > 0 {
                let down = unhealthy.min(room);
                sizes[i] -= down;
                room -= down;
            }
        }
        let available: i64 = sets
            .iter()
            .map(|s| int(s, "/status/availableReplicas"))
            .sum();
        let mut total_down = (available - min_available).max(0);
        for (i, _) in old.iter().enumerate() {
            if total_down <= 0 {
                break;
            }
            let down = sizes[i].min(total_down);
            sizes[i] -= down;
            total_down -= down;
        }
        for (set, size) in old.iter().zip(sizes) {
            if size != replicas_of(set) {
                changed |= self.scale_set(set, size).await;
            }
        }
        changed
    }

    /// Recreate: the old ReplicaSets to zero, then — once their pods are gone — the new
    /// one to `replicas`; whether anything was scaled.
    pub(super) async fn rollout_recreate(
        &self,
        sets: &[Arc<Frozen>],
        new: Option<&Frozen>,
    ) -> bool {
        let mut changed = false;
        for set in sets {
            if new.is_none_or(|n| uid(n) != uid(set)) && replicas_of(set) > 0 {
                changed |= self.scale_set(set, 0).await;
            }
        }
        if changed {
            return true;
        }
        let old: Vec<Arc<Frozen>> = sets
            .iter()
            .filter(|s| new.is_none_or(|n| uid(n) != uid(s)))
            .cloned()
            .collect();
        if self.old_pods_running(&old) {
            return false;
        }
        match new {
            Some(new) if replicas_of(new) != self.replicas() => {
                self.scale_set(new, self.replicas()).await
            }
            _ => false,
        }
    }

    /// Deletes the oldest empty old ReplicaSets beyond `revisionHistoryLimit`.
    pub(super) async fn cleanup(&self, sets: &[Arc<Frozen>], new: Option<&Frozen>) {
        let limit = self
            .spec("/spec/revisionHistoryLimit")
            .and_then(Frozen::as_i64)
            .unwrap_or(10);
        let mut old: Vec<&Arc<Frozen>> = sets
            .iter()
            .filter(|s| new.is_none_or(|n| uid(n) != uid(s)) && !deleting(s))
            .collect();
        let excess = i64::try_from(old.len()).unwrap_or(0) - limit;
        if excess <= 0 {
            return;
        }
        old.sort_by_key(|s| revision_of(s));
        let Some(def) = self.registry.resources.get("apps", "v1", "replicasets") else {
            return;
        };
        for set in old
            .into_iter()
            .filter(|s| replicas_of(s) == 0 && int(s, "/status/replicas") == 0)
            .take(usize::try_from(excess).unwrap_or(0))
        {
            let _ = self
                .registry
                .delete(
                    &def,
                    plinth_core::meta::namespace(set),
                    name_of(set),
                    &DeleteOptions::default(),
                )
                .await;
        }
    }
}
