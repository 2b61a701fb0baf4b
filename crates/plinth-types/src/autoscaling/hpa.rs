//! autoscaling/v2 and v1 HorizontalPodAutoscaler: kube's defaults (one replica at least,
//! 80 % CPU when no metric is given), validation, `/status`, columns; v1 objects are the v2
//! ones seen through kube's conversion (`targetCPUUtilizationPercentage`, the other metrics
//! and the conditions in `autoscaling.alpha.kubernetes.io/*` annotations).

use plinth_core::Cause;
use serde_json::{Map, Value, json};

use crate::apps::nonnegative;
use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::strategy::Strategy;

const METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
const CURRENT_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";

fn columns() -> Vec<plinth_registry::resources::Column> {
    vec![
        column(
            "Reference",
            "string",
            "Reference to the target.",
            0,
            |o, _| {
                let target = &o["spec"]["scaleTargetRef"];
                json!(format!(
                    "{}/{}",
                    target["kind"].as_str().unwrap_or(""),
                    target["name"].as_str().unwrap_or("")
                ))
            },
        ),
        column(
            "Targets",
            "string",
            "The metrics and their targets.",
            0,
            |o, _| json!(targets_cell(o)),
        ),
        column(
            "MinPods",
            "string",
            "The lower limit for the number of pods that can be set by the autoscaler, default 1.",
            0,
            |o, _| match o.pointer("/spec/minReplicas").and_then(Value::as_i64) {
                Some(n) => json!(n.to_string()),
                None => json!("<unset>"),
            },
        ),
        column(
            "MaxPods",
            "integer",
            "The upper limit for the number of pods that can be set by the autoscaler.",
            0,
            |o, _| {
                json!(
                    o.pointer("/spec/maxReplicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                )
            },
        ),
        column(
            "Replicas",
            "integer",
            "Current number of replicas of pods managed by this autoscaler.",
            0,
            |o, _| {
                json!(
                    o.pointer("/status/currentReplicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                )
            },
        ),
    ]
}

/// kubectl's `TARGETS`: `cpu: 12%/50%` for each metric (`<unknown>` before a reading).
fn targets_cell(hpa: &Value) -> String {
    let v2 = to_v2(hpa.clone());
    let current = v2
        .pointer("/status/currentMetrics")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let cells: Vec<String> = v2
        .pointer("/spec/metrics")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|metric| {
            let kind = metric["type"].as_str().unwrap_or("");
            let spec = match kind {
                "Resource" => &metric["resource"],
                "ContainerResource" => &metric["containerResource"],
                "Pods" => &metric["pods"],
                "Object" => &metric["object"],
                _ => &metric["external"],
            };
            let name = spec["name"]
                .as_str()
                .or_else(|| spec.pointer("/metric/name").and_then(Value::as_str))
                .unwrap_or("");
            let target = &spec["target"];
            let now = current.iter().find(|c| {
                c["type"] == kind
                    && (c["resource"]["name"] == name
                        || c.pointer("/pods/metric/name").and_then(Value::as_str) == Some(name))
            });
            let (current_text, target_text) = match target["type"].as_str() {
                Some("Utilization") => (
                    now.and_then(|c| c.pointer("/resource/current/averageUtilization"))
                        .and_then(Value::as_i64)
                        .map_or_else(|| "<unknown>".to_owned(), |n| format!("{n}%")),
                    format!("{}%", target["averageUtilization"].as_i64().unwrap_or(0)),
                ),
                Some("AverageValue") => (
                    now.and_then(|c| {
                        c.pointer("/resource/current/averageValue")
                            .or_else(|| c.pointer("/pods/current/averageValue"))
                    })
                    .and_then(Value::as_str)
                    .map_or_else(|| "<unknown>".to_owned(), str::to_owned),
                    target["averageValue"].as_str().unwrap_or("").to_owned(),
                ),
                _ => (
                    "<unknown>".to_owned(),
                    target["value"].as_str().unwrap_or("").to_owned(),
                ),
            };
            format!("{name}: {current_text}/{target_text}")
        })
        .collect();
    if cells.is_empty() {
        "<none>".into()
    } else {
        cells.join(", ")
    }
}

fn target_ref() -> Schema {
    obj(vec![
        ("kind", Schema::String),
        ("name", Schema::String),
        ("apiVersion", Schema::String),
    ])
}

fn conditions() -> Schema {
    array(obj(vec![
        ("type", Schema::String),
        ("status", Schema::String),
        ("lastTransitionTime", Schema::String),
        ("reason", Schema::String),
        ("message", Schema::String),
    ]))
}

/// The `horizontalpodautoscalers` of autoscaling/v2.
pub fn v2() -> ResourceDef {
    let mut def = ResourceDef::new(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
    )
    .short_names(&["hpa"])
    .categories(&["all"])
    .with_status()
    .columns(columns())
    .schema(top(vec![
        (
            "spec",
            obj(vec![
                ("scaleTargetRef", target_ref()),
                ("minReplicas", Schema::Int),
                ("maxReplicas", Schema::Int),
                ("metrics", array(Schema::Any)),
                ("behavior", Schema::Any),
            ]),
        ),
        (
            "status",
            obj(vec![
                ("observedGeneration", Schema::Int),
                ("lastScaleTime", Schema::String),
                ("currentReplicas", Schema::Int),
                ("desiredReplicas", Schema::Int),
                ("currentMetrics", array(Schema::Any)),
                ("conditions", conditions()),
            ]),
        ),
    ]))
    .strategy(V2);
    def.generation = true;
    def
}

/// The `horizontalpodautoscalers` of autoscaling/v1, stored as the v2 ones.
pub fn v1() -> ResourceDef {
    let mut def = ResourceDef::new(
        "autoscaling",
        "v1",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
    )
    .short_names(&["hpa"])
    .categories(&["all"])
    .with_status()
    .columns(columns())
    .schema(top(vec![
        (
            "spec",
            obj(vec![
                ("scaleTargetRef", target_ref()),
                ("minReplicas", Schema::Int),
                ("maxReplicas", Schema::Int),
                ("targetCPUUtilizationPercentage", Schema::Int),
            ]),
        ),
        (
            "status",
            obj(vec![
                ("observedGeneration", Schema::Int),
                ("lastScaleTime", Schema::String),
                ("currentReplicas", Schema::Int),
                ("desiredReplicas", Schema::Int),
                ("currentCPUUtilizationPercentage", Schema::Int),
            ]),
        ),
    ]))
    .strategy(V1);
    def.generation = true;
    def.stored_as = Some("/autoscaling/horizontalpodautoscalers/".to_owned());
    def
}

fn cpu_metric(percent: i64) -> Value {
    json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": percent}}})
}

fn is_cpu_utilization(metric: &Value) -> bool {
    metric["type"] == "Resource"
        && metric["resource"]["name"] == "cpu"
        && metric["resource"]["target"]["type"] == "Utilization"
}

fn annotations(object: &mut Value) -> &mut Map<String, Value> {
    let slot = &mut object["metadata"]["annotations"];
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(map) => map,
        _ => unreachable!("the annotations were just made an object"),
    }
}

/// A v1 object as v2 (what is stored).
fn to_v2(mut object: Value) -> Value {
    if object["apiVersion"] == "autoscaling/v2" {
        return object;
    }
    let mut metrics = Vec::new();
    let extra = annotations(&mut object).remove(METRICS_ANNOTATION);
    if let Some(text) = extra.as_ref().and_then(Value::as_str)
        && let Ok(Value::Array(more)) = serde_json::from_str::<Value>(text)
    {
        metrics.extend(more);
    }
    let behavior = annotations(&mut object).remove(BEHAVIOR_ANNOTATION);
    let current_extra = annotations(&mut object).remove(CURRENT_ANNOTATION);
    let conditions = annotations(&mut object).remove(CONDITIONS_ANNOTATION);
    if object["metadata"]["annotations"]
        .as_object()
        .is_some_and(Map::is_empty)
        && let Some(meta) = object["metadata"].as_object_mut()
    {
        meta.remove("annotations");
    }
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        if let Some(cpu) = spec
            .remove("targetCPUUtilizationPercentage")
            .and_then(|v| v.as_i64())
        {
            metrics.insert(0, cpu_metric(cpu));
        }
        if !metrics.is_empty() {
            spec.insert("metrics".into(), json!(metrics));
        }
        if let Some(text) = behavior.as_ref().and_then(Value::as_str)
            && let Ok(parsed) = serde_json::from_str::<Value>(text)
        {
            spec.insert("behavior".into(), parsed);
        }
    }
    if let Some(status) = object.get_mut("status").and_then(Value::as_object_mut) {
        let mut current = Vec::new();
        if let Some(cpu) = status
            .remove("currentCPUUtilizationPercentage")
            .and_then(|v| v.as_i64())
        {
            current.push(json!({"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": cpu}}}));
        }
        if let Some(text) = current_extra.as_ref().and_then(Value::as_str)
            && let Ok(Value::Array(more)) = serde_json::from_str::<Value>(text)
        {
            current.extend(more);
        }
        if !current.is_empty() {
            status.insert("currentMetrics".into(), json!(current));
        }
        if let Some(text) = conditions.as_ref().and_then(Value::as_str)
            && let Ok(parsed) = serde_json::from_str::<Value>(text)
        {
            status.insert("conditions".into(), parsed);
        }
    }
    object["apiVersion"] = json!("autoscaling/v2");
    object
}

/// A stored (v2) object as v1.
fn to_v1(mut object: Value) -> Value {
    let metrics = object
        .pointer("/spec/metrics")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let (cpu, others): (Vec<Value>, Vec<Value>) = metrics.into_iter().partition(is_cpu_utilization);
    let behavior = object.pointer("/spec/behavior").cloned();
    let current = object
        .pointer("/status/currentMetrics")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let (current_cpu, current_others): (Vec<Value>, Vec<Value>) = current
        .into_iter()
        .partition(|m| m["type"] == "Resource" && m["resource"]["name"] == "cpu");
    let conditions = object.pointer("/status/conditions").cloned();
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("metrics");
        spec.remove("behavior");
        if let Some(percent) = cpu
            .first()
            .and_then(|m| m.pointer("/resource/target/averageUtilization"))
        {
            spec.insert("targetCPUUtilizationPercentage".into(), percent.clone());
        }
    }
    if let Some(status) = object.get_mut("status").and_then(Value::as_object_mut) {
        status.remove("currentMetrics");
        status.remove("conditions");
        if let Some(percent) = current_cpu
            .first()
            .and_then(|m| m.pointer("/resource/current/averageUtilization"))
        {
            status.insert("currentCPUUtilizationPercentage".into(), percent.clone());
        }
    }
    let mut notes = Vec::new();
    if !others.is_empty() {
        notes.push((METRICS_ANNOTATION, json!(others)));
    }
    if let Some(b) = behavior.filter(|b| !b.is_null()) {
        notes.push((BEHAVIOR_ANNOTATION, b));
    }
    if !current_others.is_empty() {
        notes.push((CURRENT_ANNOTATION, json!(current_others)));
    }
    if let Some(c) = conditions.filter(|c| !c.is_null()) {
        notes.push((CONDITIONS_ANNOTATION, c));
    }
    for (key, value) in notes {
        annotations(&mut object).insert(key.into(), json!(value.to_string()));
    }
    object["apiVersion"] = json!("autoscaling/v1");
    object
}

fn default_v2(object: &mut Value) {
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        crate::apps::set_default(spec, "minReplicas", json!(1));
        let empty = spec
            .get("metrics")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if empty {
            spec.insert("metrics".into(), json!([cpu_metric(80)]));
        }
    }
}

fn validate_v2(object: &Value) -> Vec<Cause> {
    let spec = &object["spec"];
    let mut causes = Vec::new();
    let target = &spec["scaleTargetRef"];
    for field in ["kind", "name"] {
        if target[field].as_str().unwrap_or("").is_empty() {
            causes.push(Cause::required(format!("spec.scaleTargetRef.{field}"), ""));
        }
    }
    let min = spec["minReplicas"].as_i64().unwrap_or(1);
    if min < 1 {
        causes.push(Cause::invalid(
            "spec.minReplicas",
            &json!(min),
            "must be greater than or equal to 1",
        ));
    }
    let max = spec["maxReplicas"].as_i64().unwrap_or(0);
    if max < min {
        causes.push(Cause::invalid(
            "spec.maxReplicas",
            &json!(max),
            "must be greater than or equal to `minReplicas`",
        ));
    }
    for (i, metric) in spec["metrics"].as_array().into_iter().flatten().enumerate() {
        let path = format!("spec.metrics[{i}]");
        let kind = metric["type"].as_str().unwrap_or("");
        let source = match kind {
            "Resource" => "resource",
            "ContainerResource" => "containerResource",
            "Pods" => "pods",
            "Object" => "object",
            "External" => "external",
            "" => {
                causes.push(Cause::required(
                    format!("{path}.type"),
                    "must specify a metric source type",
                ));
                continue;
            }
            other => {
                causes.push(Cause::not_supported(
                    format!("{path}.type"),
                    &json!(other),
                    &[
                        "ContainerResource",
                        "External",
                        "Object",
                        "Pods",
                        "Resource",
                    ],
                ));
                continue;
            }
        };
        let body = &metric[source];
        if body.is_null() {
            causes.push(Cause::required(format!("{path}.{source}"), &format!("must populate information for the given metric source (only allowed when type is {kind})")));
            continue;
        }
        let target = &body["target"];
        match target["type"].as_str().unwrap_or("") {
            "Utilization" => match target["averageUtilization"].as_i64() {
                Some(n) if n > 0 => {}
                Some(n) => causes.push(Cause::invalid(
                    format!("{path}.{source}.target.averageUtilization"),
                    &json!(n),
                    "must be greater than 0",
                )),
                None => causes.push(Cause::required(
                    format!("{path}.{source}.target.averageUtilization"),
                    "must set either a target value or averageValue",
                )),
            },
            "AverageValue" | "Value" => {}
            "" => causes.push(Cause::required(
                format!("{path}.{source}.target.type"),
                "must specify a metric target type",
            )),
            other => causes.push(Cause::not_supported(
                format!("{path}.{source}.target.type"),
                &json!(other),
                &["AverageValue", "Utilization", "Value"],
            )),
        }
    }
    for direction in ["scaleUp", "scaleDown"] {
        let rules = &spec["behavior"][direction];
        causes.extend(nonnegative(
            rules,
            "stabilizationWindowSeconds",
            &format!("spec.behavior.{direction}"),
        ));
        if let Some(window) = rules["stabilizationWindowSeconds"].as_i64()
            && window > 3600
        {
            causes.push(Cause::invalid(
                format!("spec.behavior.{direction}.stabilizationWindowSeconds"),
                &json!(window),
                "must be less than or equal to 3600",
            ));
        }
    }
    causes
}

#[derive(Debug)]
struct V2;

impl Strategy for V2 {
    fn prepare_create(&self, object: &mut Value) {
        default_v2(object);
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        default_v2(object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        validate_v2(object)
    }
}

#[derive(Debug)]
struct V1;

impl Strategy for V1 {
    fn prepare_create(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            crate::apps::set_default(spec, "minReplicas", json!(1));
        }
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        self.prepare_create(object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = validate_v2(&to_v2(object.clone()));
        if let Some(percent) = object
            .pointer("/spec/targetCPUUtilizationPercentage")
            .and_then(Value::as_i64)
            && percent < 1
        {
            causes.retain(|c| !c.field.starts_with("spec.metrics"));
            causes.push(Cause::invalid(
                "spec.targetCPUUtilizationPercentage",
                &json!(percent),
                "must be greater than or equal to 1",
            ));
        }
        causes
    }

    fn to_storage(&self, object: Value) -> Value {
        let mut v2 = to_v2(object);
        default_v2(&mut v2);
        v2
    }

    fn to_view(&self, object: Value) -> Value {
        to_v1(object)
    }

    fn serves_stored_form(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_and_v2_convert_as_kube_converts() {
        let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5,
                     "targetCPUUtilizationPercentage": 50},
            "status": {"currentReplicas": 2, "desiredReplicas": 2, "currentCPUUtilizationPercentage": 70}});
        let v2 = to_v2(v1.clone());
        assert_eq!(v2["spec"]["metrics"], json!([cpu_metric(50)]));
        assert_eq!(
            v2["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"],
            70
        );
        assert_eq!(to_v1(v2), v1);
        // A memory metric rides along in an annotation.
        let mut both = to_v2(v1);
        both["spec"]["metrics"].as_array_mut().unwrap().push(
            json!({"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}}),
        );
        let back = to_v2(to_v1(both.clone()));
        assert_eq!(back["spec"]["metrics"], both["spec"]["metrics"]);
        assert_eq!(targets_cell(&both), "cpu: 70%/50%, memory: <unknown>/100Mi");
    }
}
