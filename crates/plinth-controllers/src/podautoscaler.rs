//! The HorizontalPodAutoscaler controller (kube-controller-manager's `horizontal-pod-
//! autoscaler`): every 15 s, for each autoscaler, the target's `/scale` — a Deployment's, a
//! StatefulSet's, a ReplicaSet's or a custom resource's — and the resource metrics
//! (`metrics.k8s.io`, read from the node agents) of the pods its selector picks give a
//! replica count by kube's rule, `ceil(current × usage / target)` outside a 10 % tolerance,
//! the largest over the metrics; then the `behavior`: stabilization windows (300 s down,
//! none up, by default) and rate policies (up: 4 pods or 100 % per 15 s; down: 100 %), and
//! `minReplicas`/`maxReplicas`. The new count goes through `/scale`; the status carries the
//! current metrics and kube's `AbleToScale`, `ScalingActive` and `ScalingLimited` conditions,
//! with `SuccessfulRescale` events.

use plinth_core::At as _;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plinth_core::selector::LabelSelector;
use plinth_registry::resources::Reading;
use plinth_registry::{Client, ListOptions, Part, Patch, ScaleWrite, WriteOptions};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::informer::{Queue, SharedInformers, enqueue, key_of, run_workers};

const MANAGER: &str = "horizontal-pod-autoscaler";
const SYNC_PERIOD: Duration = Duration::from_secs(15);
const TOLERANCE: f64 = 0.1;

/// Starts the controller; `nodes` reach the agents for metrics (without, no metric is ever
/// found). It ends when `stopping` becomes true.
pub fn spawn_hpa_controller(
    registry: Client,
    informers: &SharedInformers,
    nodes: Option<Arc<dyn plinth_registry::resources::NodeDialer>>,
    stopping: watch::Receiver<bool>,
) {
    let queue = Queue::default();
    let autoscalers = informers.start_version(
        ("autoscaling", "v2", "horizontalpodautoscalers"),
        enqueue(&queue),
    );
    tokio::spawn(async move {
        let history: Mutex<HashMap<String, Vec<(i64, i64)>>> = Mutex::new(HashMap::new());
        let (registry, nodes, history) = (&registry, nodes.as_deref(), &history);
        run_workers(
            queue,
            stopping,
            &[&autoscalers],
            &autoscalers,
            move |hpa| async move {
                let hpa = hpa.to_value();
                let pass = Pass {
                    registry,
                    nodes,
                    hpa: &hpa,
                    history,
                };
                pass.sync().await;
                Some(SYNC_PERIOD)
            },
        )
        .await;
    });
}

struct Pass<'a> {
    registry: &'a Client,
    nodes: Option<&'a dyn plinth_registry::resources::NodeDialer>,
    hpa: &'a Value,
    /// Recent recommendations (time, replicas) per autoscaler, for stabilization.
    history: &'a Mutex<HashMap<String, Vec<(i64, i64)>>>,
}

/// One metric's proposal, or why there is none.
struct Proposal {
    replicas: i64,
    current: Value,
    reason: String,
}

fn ready(pod: &Value) -> bool {
    pod.at("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
        && pod
            .at("/metadata/deletionTimestamp")
            .is_none_or(Value::is_null)
}

impl Pass<'_> {
    fn spec(&self, pointer: &str) -> Option<&Value> {
        self.hpa.at(pointer)
    }

    fn namespace(&self) -> &str {
        plinth_core::meta::namespace(self.hpa).unwrap_or("default")
    }

    async fn sync(&self) {
        let mut conditions = Vec::new();
        let now = plinth_registry::now();
        let now_text = plinth_core::meta::format_time(now);
        let mut status = self.hpa.get("status").cloned().unwrap_or_else(|| json!({}));
        status["observedGeneration"] = self
            .spec("/metadata/generation")
            .cloned()
            .unwrap_or(json!(1));
        let target = self
            .spec("/spec/scaleTargetRef")
            .cloned()
            .unwrap_or(json!({}));
        let (group, version) = match target["apiVersion"]
            .as_str()
            .unwrap_or("v1")
            .split_once('/')
        {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (
                String::new(),
                target["apiVersion"].as_str().unwrap_or("v1").to_owned(),
            ),
        };
        let kind = target["kind"].as_str().unwrap_or("");
        let name = target["name"].as_str().unwrap_or("");
        let scale = match self.registry.resources.by_kind(&group, &version, kind) {
            Some(def) => self
                .registry
                .get_scale(&def, Some(self.namespace()), name)
                .await
                .map(|s| (def, s))
                .map_err(|e| e.message),
            None => Err(format!(
                "no matches for kind \"{kind}\" in group \"{group}\""
            )),
        };
        let (def, scale) = match scale {
            Ok(found) => found,
            Err(e) => {
                conditions.push(condition(
                    "AbleToScale",
                    "False",
                    "FailedGetScale",
                    &format!(
                        "the HPA controller was unable to get the target's current scale: {e}"
                    ),
                ));
                self.event("Warning", "FailedGetScale", &e).await;
                self.write(status, conditions, &now_text).await;
                return;
            }
        };
        let current = scale
            .at("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        status["currentReplicas"] = scale.at("/status/replicas").cloned().unwrap_or(json!(0));
        let min = self
            .spec("/spec/minReplicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let max = self
            .spec("/spec/maxReplicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        if current == 0 && min != 0 {
            conditions.push(condition(
                "AbleToScale",
                "True",
                "SucceededGetScale",
                "the HPA controller was able to get the target's current scale",
            ));
            conditions.push(condition(
                "ScalingActive",
                "False",
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero",
            ));
            status["desiredReplicas"] = json!(0);
            self.write(status, conditions, &now_text).await;
            return;
        }
        let selector = scale
            .at("/status/selector")
            .and_then(Value::as_str)
            .unwrap_or("");
        let Ok(selector) = LabelSelector::parse(selector)
            .map_err(|_| ())
            .and_then(|s| if s.is_empty() { Err(()) } else { Ok(s) })
        else {
            conditions.push(condition(
                "AbleToScale",
                "True",
                "SucceededGetScale",
                "the HPA controller was able to get the target's current scale",
            ));
            conditions.push(condition(
                "ScalingActive",
                "False",
                "InvalidSelector",
                "the HPA target's scale is missing a selector",
            ));
            self.write(status, conditions, &now_text).await;
            return;
        };
        let pods = self.pods(&selector).await;
        let usage = self.usage(&selector).await;
        let mut proposals = Vec::new();
        let mut failure = None;
        for metric in self
            .spec("/spec/metrics")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
        {
            match self.propose(&metric, current, &pods, &usage) {
                Ok(p) => proposals.push(p),
                Err((reason, message)) => failure = Some((reason, message)),
            }
        }
        status["currentMetrics"] = json!(
            proposals
                .iter()
                .map(|p| p.current.clone())
                .collect::<Vec<_>>()
        );
        let Some(best) = proposals.iter().max_by_key(|p| p.replicas) else {
            let (reason, message) =
                failure.unwrap_or(("FailedGetResourceMetric", "no metrics".into()));
            conditions.push(condition(
                "AbleToScale",
                "True",
                "SucceededGetScale",
                "the HPA controller was able to get the target's current scale",
            ));
            conditions.push(condition("ScalingActive", "False", reason, &message));
            self.event("Warning", reason, &message).await;
            status["desiredReplicas"] = json!(current);
            self.write(status, conditions, &now_text).await;
            return;
        };
        let recommended = best.replicas;
        let reason = best.reason.clone();
        let metric_name = best
            .current
            .at("/resource/name")
            .and_then(Value::as_str)
            .unwrap_or("cpu")
            .to_owned();
        conditions.push(condition("ScalingActive", "True", "ValidMetricFound", &format!("the HPA was able to successfully calculate a replica count from {metric_name} resource utilization (percentage of request)")));
        let stabilized = self.stabilize(recommended, current, now);
        let limited = self.rate_limit(stabilized, current);
        let desired = limited.clamp(min, max.max(min));
        conditions.push(if limited > max {
            condition(
                "ScalingLimited",
                "True",
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count",
            )
        } else if limited < min {
            condition(
                "ScalingLimited",
                "True",
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count",
            )
        } else {
            condition(
                "ScalingLimited",
                "False",
                "DesiredWithinRange",
                "the desired count is within the acceptable range",
            )
        });
        status["desiredReplicas"] = json!(desired);
        if desired != current {
            let patch = ScaleWrite::Patch(Patch::Merge(json!({"spec": {"replicas": desired}})));
            match self
                .registry
                .write_scale(
                    &def,
                    Some(self.namespace()),
                    name,
                    patch,
                    &WriteOptions::internal(MANAGER),
                )
                .await
            {
                Ok(_) => {
                    conditions.insert(0, condition("AbleToScale", "True", "SucceededRescale", &format!("the HPA controller was able to update the target scale to {desired}")));
                    status["lastScaleTime"] = json!(now_text);
                    let why = if desired > current {
                        reason.replace("{direction}", "above")
                    } else {
                        reason.replace("{direction}", "below")
                    };
                    self.event(
                        "Normal",
                        "SuccessfulRescale",
                        &format!("New size: {desired}; reason: {why}"),
                    )
                    .await;
                }
                Err(e) => {
                    conditions.insert(
                        0,
                        condition(
                            "AbleToScale",
                            "False",
                            "FailedUpdateScale",
                            &format!(
                                "the HPA controller was unable to update the target scale: {}",
                                e.message
                            ),
                        ),
                    );
                    self.event(
                        "Warning",
                        "FailedRescale",
                        &format!(
                            "New size: {desired}; reason: {reason}; error: {}",
                            e.message
                        ),
                    )
                    .await;
                }
            }
        } else {
            conditions.insert(
                0,
                condition(
                    "AbleToScale",
                    "True",
                    "ReadyForNewScale",
                    "recommended size matches current size",
                ),
            );
        }
        self.write(status, conditions, &now_text).await;
    }

    async fn pods(&self, selector: &LabelSelector) -> Vec<Value> {
        let Some(def) = self.registry.resources.get("", "v1", "pods") else {
            return Vec::new();
        };
        let options = ListOptions {
            labels: selector.clone(),
            ..ListOptions::default()
        };
        self.registry
            .list(&def, Some(self.namespace()), &options)
            .await
            .ok()
            .and_then(|l| l["items"].as_array().cloned())
            .unwrap_or_default()
    }

    /// Each pod's usage (CPU in millicores, memory in bytes) from metrics.k8s.io.
    async fn usage(&self, selector: &LabelSelector) -> HashMap<String, (i64, i64)> {
        let mut found = HashMap::new();
        let (Some(nodes), Some(def)) = (
            self.nodes,
            self.registry
                .resources
                .get("metrics.k8s.io", "v1beta1", "pods"),
        ) else {
            return found;
        };
        let Some(read) = def.computed else {
            return found;
        };
        let reading = Reading {
            objects: self.registry,
            nodes,
            namespace: Some(self.namespace()),
            name: None,
            labels: selector.clone(),
        };
        let Ok(list) = read(reading).await else {
            return found;
        };
        for item in list["items"].as_array().into_iter().flatten() {
            let (mut cpu, mut memory) = (0, 0);
            for container in item["containers"].as_array().into_iter().flatten() {
                cpu += plinth_core::quantity::millis(&container["usage"]["cpu"]).unwrap_or(0);
                memory += plinth_core::quantity::bytes(&container["usage"]["memory"]).unwrap_or(0);
            }
            if let Some(name) = item.at("/metadata/name").and_then(Value::as_str) {
                found.insert(name.to_owned(), (cpu, memory));
            }
        }
        found
    }

    /// The replicas one metric asks for (kube's `GetResourceReplicas`).
    fn propose(
        &self,
        metric: &Value,
        current: i64,
        pods: &[Value],
        usage: &HashMap<String, (i64, i64)>,
    ) -> Result<Proposal, (&'static str, String)> {
        if metric["type"] != "Resource" {
            let kind = metric["type"].as_str().unwrap_or("");
            return Err((
                "FailedGetExternalMetric",
                format!("unable to get {kind} metric: no custom or external metrics API is served"),
            ));
        }
        let resource = metric["resource"]["name"].as_str().unwrap_or("");
        let target = &metric["resource"]["target"];
        let pick = |u: &(i64, i64)| if resource == "memory" { u.1 } else { u.0 };
        let mut total_usage = 0i64;
        let mut total_request = 0i64;
        let mut counted = 0i64;
        for pod in pods.iter().filter(|p| ready(p)) {
            let name = plinth_core::meta::name(pod).unwrap_or("");
            let Some(used) = usage.get(name) else {
                continue;
            };
            let mut request = 0;
            for container in pod
                .at("/spec/containers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let asked = container.at(&format!("/resources/requests/{resource}"));
                let value = match resource {
                    "memory" => asked.and_then(plinth_core::quantity::bytes),
                    _ => asked.and_then(plinth_core::quantity::millis),
                };
                match value {
                    Some(v) => request += v,
                    None if target["type"] == "Utilization" => {
                        return Err((
                            "FailedGetResourceMetric",
                            format!(
                                "failed to get {resource} utilization: missing request for {resource} in container {} of Pod {name}",
                                container["name"].as_str().unwrap_or("")
                            ),
                        ));
                    }
                    None => {}
                }
            }
            total_usage += pick(used);
            total_request += request;
            counted += 1;
        }
        if counted == 0 {
            return Err((
                "FailedGetResourceMetric",
                format!(
                    "failed to get {resource} utilization: unable to get metrics for resource {resource}: no metrics returned from resource metrics API"
                ),
            ));
        }
        let average = total_usage / counted;
        let average_text = if resource == "memory" {
            format!("{average}")
        } else {
            format!("{average}m")
        };
        match target["type"].as_str() {
            Some("Utilization") => {
                let utilization =
                    (total_usage as f64 * 100.0 / (total_request.max(1)) as f64).round() as i64;
                let wanted = target["averageUtilization"].as_i64().unwrap_or(80).max(1);
                let ratio = utilization as f64 / wanted as f64;
                let replicas = if (ratio - 1.0).abs() <= TOLERANCE {
                    current
                } else {
                    (ratio * counted as f64).ceil() as i64
                };
                Ok(Proposal {
                    replicas,
                    current: json!({"type": "Resource", "resource": {"name": resource,
                        "current": {"averageUtilization": utilization, "averageValue": average_text}}}),
                    reason: format!(
                        "{resource} resource utilization (percentage of request) {{direction}} target"
                    ),
                })
            }
            Some("AverageValue") => {
                let wanted = match resource {
                    "memory" => plinth_core::quantity::bytes(&target["averageValue"]),
                    _ => plinth_core::quantity::millis(&target["averageValue"]),
                }
                .unwrap_or(1)
                .max(1);
                let ratio = average as f64 / wanted as f64;
                let replicas = if (ratio - 1.0).abs() <= TOLERANCE {
                    current
                } else {
                    (total_usage as f64 / wanted as f64).ceil() as i64
                };
                Ok(Proposal {
                    replicas,
                    current: json!({"type": "Resource", "resource": {"name": resource,
                        "current": {"averageValue": average_text}}}),
                    reason: format!("{resource} resource {{direction}} target"),
                })
            }
            _ => Err((
                "InvalidMetricSourceType",
                format!(
                    "the HPA was unable to compute the replica count: invalid target type for {resource}"
                ),
            )),
        }
    }

    /// kube's stabilization: up to the lowest, down to the highest recommendation of their
    /// windows.
    fn stabilize(&self, recommended: i64, current: i64, now: i64) -> i64 {
        let window = |direction: &str, default: i64| {
            self.spec(&format!(
                "/spec/behavior/{direction}/stabilizationWindowSeconds"
            ))
            .and_then(Value::as_i64)
            .unwrap_or(default)
        };
        let (up, down) = (window("scaleUp", 0), window("scaleDown", 300));
        let key = key_of(self.hpa);
        let mut history = self
            .history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entries = history.entry(key).or_default();
        entries.push((now, recommended));
        entries.retain(|(at, _)| now - at <= up.max(down));
        let up_floor = entries
            .iter()
            .filter(|(at, _)| now - at <= up)
            .map(|(_, r)| *r)
            .min()
            .unwrap_or(recommended);
        let down_ceiling = entries
            .iter()
            .filter(|(at, _)| now - at <= down)
            .map(|(_, r)| *r)
            .max()
            .unwrap_or(recommended);
        if recommended > current {
            up_floor.max(current).min(recommended)
        } else {
            down_ceiling.min(current).max(recommended)
        }
    }

    /// The `behavior` policies: how far one step may go from `current`.
    fn rate_limit(&self, wanted: i64, current: i64) -> i64 {
        let (direction, policies, select) = if wanted > current {
            (
                "scaleUp",
                json!([{"type": "Pods", "value": 4}, {"type": "Percent", "value": 100}]),
                "Max",
            )
        } else if wanted < current {
            (
                "scaleDown",
                json!([{"type": "Percent", "value": 100}]),
                "Max",
            )
        } else {
            return wanted;
        };
        let rules = self.spec(&format!("/spec/behavior/{direction}"));
        let select = rules
            .and_then(|r| r["selectPolicy"].as_str())
            .unwrap_or(select);
        if select == "Disabled" {
            return current;
        }
        let policies = rules
            .and_then(|r| r.get("policies"))
            .filter(|p| p.as_array().is_some_and(|a| !a.is_empty()))
            .cloned()
            .unwrap_or(policies);
        let limits: Vec<i64> = policies
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let value = p["value"].as_i64().unwrap_or(0);
                let step = match p["type"].as_str() {
                    Some("Pods") => value,
                    _ => (current as f64 * value as f64 / 100.0).ceil() as i64,
                };
                if direction == "scaleUp" {
                    current + step
                } else {
                    current - step
                }
            })
            .collect();
        // "Max" picks the policy that allows the biggest change, "Min" the smallest: up,
        // the highest or lowest ceiling; down, the lowest or highest floor.
        let limit = match (direction, select) {
            ("scaleUp", "Min") | ("scaleDown", "Max") => limits.iter().copied().min(),
            _ => limits.iter().copied().max(),
        };
        match limit {
            Some(l) if direction == "scaleUp" => wanted.min(l),
            Some(l) => wanted.max(l),
            None => wanted,
        }
    }

    async fn event(&self, kind: &str, reason: &str, message: &str) {
        crate::events::record(self.registry, self.hpa, kind, reason, message, MANAGER).await;
    }

    /// Writes the status with `conditions` (their transition times kept while unchanged).
    async fn write(&self, mut status: Value, conditions: Vec<Value>, now: &str) {
        let previous = self
            .hpa
            .at("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let merged: Vec<Value> = conditions
            .into_iter()
            .map(|mut c| {
                let same = previous
                    .iter()
                    .find(|p| p["type"] == c["type"] && p["status"] == c["status"]);
                c["lastTransitionTime"] =
                    same.map_or_else(|| json!(now), |p| p["lastTransitionTime"].clone());
                c
            })
            .collect();
        status["conditions"] = json!(merged);
        let Some(def) =
            self.registry
                .resources
                .get("autoscaling", "v2", "horizontalpodautoscalers")
        else {
            return;
        };
        let name = plinth_core::meta::name(self.hpa).unwrap_or("");
        let _ = self
            .registry
            .modify(
                &def,
                Some(self.namespace()),
                name,
                Part::Status,
                &WriteOptions::internal(MANAGER),
                |hpa| {
                    if hpa.get("status") == Some(&status) {
                        return Ok(false);
                    }
                    hpa["status"] = status.clone();
                    Ok(true)
                },
            )
            .await;
    }
}

fn condition(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": message})
}
