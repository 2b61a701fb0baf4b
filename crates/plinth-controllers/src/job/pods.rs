//! A Job's pods: started for `parallelism` after the back-off, one per index when indexed,
//! deleted.

use std::collections::BTreeSet;
use std::sync::Arc;

use plinth_core::Frozen;
use plinth_registry::WriteOptions;
use serde_json::{Value, json};

use crate::informer::key_of;
use crate::workload::{EXPECTATION_TIMEOUT, PodName, delete_pod, pod_from_template};

use super::*;

impl Pass<'_> {
    /// Creates the pods missing for `parallelism`, after the back-off of recent failures;
    /// seconds until the back-off ends, when it holds them back.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn start_pods(
        &self,
        pods: &[Arc<Frozen>],
        active: &[&Arc<Frozen>],
        succeeded: i64,
        failed: i64,
        completions: Option<i64>,
        parallelism: i64,
        indexed: bool,
        done_indexes: &BTreeSet<i64>,
        controller: &Value,
        now: i64,
    ) -> Option<i64> {
        let active_count = i64::try_from(active.len()).unwrap_or(0);
        let wanted = match completions {
            Some(n) if indexed => {
                parallelism.min(n - i64::try_from(done_indexes.len()).unwrap_or(0))
            }
            Some(n) => parallelism.min(n - succeeded),
            None if succeeded > 0 => 0,
            None => parallelism,
        };
        let missing = wanted - active_count;
        if missing <= 0 {
            return None;
        }
        // kube's back-off: after the n-th failure, 10 s · 2^(n-1), at most 6 min, from
        // when the last failed pod finished.
        let recent_failures = failed;
        if recent_failures > 0 {
            let last = pods
                .iter()
                .filter(|p| outcome(p) == Some(false))
                .filter_map(|p| finished_at(p))
                .max()
                .unwrap_or(0);
            let shift = u32::try_from((recent_failures - 1).min(10)).unwrap_or(10);
            let backoff = (BACKOFF_BASE << shift).min(BACKOFF_MAX);
            if last > 0 && last + backoff > now {
                return Some(last + backoff - now);
            }
        }
        let def = self.registry.resources.get("", "v1", "pods")?;
        let template = self
            .spec("/spec/template")
            .map_or(json!({}), Frozen::to_value);
        let running_indexes: BTreeSet<i64> = active.iter().filter_map(|p| index_of(p)).collect();
        let mut free = (0..completions.unwrap_or(0))
            .filter(|i| !done_indexes.contains(i) && !running_indexes.contains(i));
        let mut created = Vec::new();
        for _ in 0..missing {
            let mut template = template.clone();
            let prefix = match indexed {
                true => {
                    let Some(index) = free.next() else { break };
                    index_template(&mut template, name_of(self.job), index);
                    format!("{}-{index}-", name_of(self.job))
                }
                false => format!("{}-", name_of(self.job)),
            };
            let mut pod =
                pod_from_template(&template, self.job, controller, PodName::Generated(&prefix));
            pod["metadata"]["finalizers"] = json!([TRACKING]);
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
                Ok(written) => {
                    self.event(
                        "Normal",
                        "SuccessfulCreate",
                        &format!("Created pod: {}", name_of(&written.object)),
                    )
                    .await;
                    created.push(key_of(&written.object));
                }
                Err(e) => {
                    self.failed.mark();
                    self.event(
                        "Warning",
                        "FailedCreate",
                        &format!("Error creating: {}", e.message),
                    )
                    .await;
                    break;
                }
            }
        }
        self.pods
            .wait_until(EXPECTATION_TIMEOUT, |p| {
                created.iter().all(|k| p.get(k).is_some())
            })
            .await;
        None
    }

    pub(super) async fn delete_pod(&self, pod: &Frozen) {
        let message = format!("Deleted pod: {}", name_of(pod));
        delete_pod(self.registry, self.pods, self.job, pod, &message, MANAGER).await;
    }
}

/// An Indexed Job's pod template for `index`: the index annotation and label, its host
/// name, `JOB_COMPLETION_INDEX` in every container.
pub(super) fn index_template(template: &mut Value, job: &str, index: i64) {
    let text = index.to_string();
    for field in ["annotations", "labels"] {
        if !template["metadata"][field].is_object() {
            template["metadata"][field] = json!({});
        }
        template["metadata"][field][INDEX] = json!(text);
    }
    template["spec"]["hostname"] = json!(format!("{job}-{index}"));
    let env = json!({
        "name": "JOB_COMPLETION_INDEX",
        "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.annotations['{INDEX}']")}},
    });
    for list in ["containers", "initContainers"] {
        if let Some(containers) = template["spec"][list].as_array_mut() {
            for container in containers {
                let mut vars = container["env"].as_array().cloned().unwrap_or_default();
                vars.retain(|v| v["name"] != "JOB_COMPLETION_INDEX");
                vars.push(env.clone());
                container["env"] = json!(vars);
            }
        }
    }
}
