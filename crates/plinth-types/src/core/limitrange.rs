//! core/v1 LimitRange, and the LimitRanger admission plugin it drives: a new pod's
//! containers get the namespace's `default` limits and `defaultRequest` requests where they
//! name none, and are refused past `min`/`max` with kube's messages.

use futures::future::BoxFuture;
use plinth_core::{ApiError, Cause};
use serde_json::{Map, Value, json};

use plinth_registry::ListOptions;
use plinth_registry::resources::ResourceDef;
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::strategy::Strategy;

const TYPES: &[&str] = &["Container", "Pod", "PersistentVolumeClaim"];

/// The `limitranges` resource.
pub fn resource() -> ResourceDef {
    let quantities = || Schema::Map(Box::new(Schema::Quantity));
    ResourceDef::new("", "v1", "LimitRange", "limitranges")
        .short_names(&["limits"])
        .schema(top(vec![(
            "spec",
            obj(vec![(
                "limits",
                array(obj(vec![
                    ("type", Schema::String),
                    ("max", quantities()),
                    ("min", quantities()),
                    ("default", quantities()),
                    ("defaultRequest", quantities()),
                    ("maxLimitRequestRatio", quantities()),
                ])),
            )]),
        )]))
        .strategy(LimitRanges)
}

#[derive(Debug)]
struct LimitRanges;

/// kube's defaults of a Container item: the default limit from `max`, the default request from
/// the default limit, then from `min`.
fn set_defaults(object: &mut Value) {
    for limit in object
        .pointer_mut("/spec/limits")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if limit["type"] != "Container" {
            continue;
        }
        for (from, to) in [
            ("max", "default"),
            ("default", "defaultRequest"),
            ("min", "defaultRequest"),
        ] {
            if let Some(values) = limit[from].as_object().cloned()
                && !values.is_empty()
            {
                set_missing(&mut limit[to], &values);
            }
        }
    }
}

impl Strategy for LimitRanges {
    fn prepare_create(&self, object: &mut Value) {
        set_defaults(object);
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        set_defaults(object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        for (i, limit) in object
            .pointer("/spec/limits")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let kind = limit["type"].as_str().unwrap_or("");
            if !TYPES.contains(&kind) {
                causes.push(Cause::not_supported(
                    format!("spec.limits[{i}].type"),
                    &json!(kind),
                    TYPES,
                ));
            }
            for field in [
                "max",
                "min",
                "default",
                "defaultRequest",
                "maxLimitRequestRatio",
            ] {
                for (resource, q) in limit[field].as_object().into_iter().flatten() {
                    if plinth_core::quantity::of(q).is_none() {
                        causes.push(Cause::invalid(
                            format!("spec.limits[{i}].{field}[{resource}]"),
                            q,
                            "must be a valid quantity",
                        ));
                    }
                }
            }
            for (resource, min) in limit["min"].as_object().into_iter().flatten() {
                let max = limit["max"]
                    .get(resource)
                    .and_then(plinth_core::quantity::of);
                if let (Some(min_v), Some(max_v)) = (plinth_core::quantity::of(min), max)
                    && min_v > max_v
                {
                    causes.push(Cause::invalid(
                        format!("spec.limits[{i}].min[{resource}]"),
                        min,
                        &format!(
                            "min value {} is greater than max value {}",
                            text(min),
                            text(&limit["max"][resource])
                        ),
                    ));
                }
            }
        }
        causes
    }
}

fn text(q: &Value) -> String {
    match q {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn set_missing(target: &mut Value, values: &Map<String, Value>) {
    if !target.is_object() {
        *target = json!({});
    }
    if let Some(map) = target.as_object_mut() {
        for (k, v) in values {
            map.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

/// LimitRanger for a new pod (run when it is created, with the namespace's LimitRanges).
pub fn admit<'a>(
    objects: &'a dyn plinth_registry::resources::Objects,
    pod: &'a mut Value,
) -> BoxFuture<'a, Result<(), ApiError>> {
    Box::pin(async move {
        let Some(def) = objects.resource("", "v1", "limitranges") else {
            return Ok(());
        };
        let namespace = plinth_core::meta::namespace(pod)
            .unwrap_or("default")
            .to_owned();
        let ranges = objects
            .list(&def, Some(&namespace), &ListOptions::default())
            .await?;
        let limits: Vec<Value> = ranges["items"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| {
                r.pointer("/spec/limits")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|l| l["type"] == "Container")
            .collect();
        if limits.is_empty() {
            return Ok(());
        }
        let name = plinth_core::meta::name(pod).unwrap_or("").to_owned();
        let mut problems = Vec::new();
        for list in ["containers", "initContainers"] {
            for container in pod
                .pointer_mut(&format!("/spec/{list}"))
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                // Requests the container's own limits imply come first (kube defaults them as
                // it decodes the pod, before admission).
                if let Some(given) = container
                    .pointer("/resources/limits")
                    .and_then(Value::as_object)
                    .cloned()
                {
                    set_missing(&mut container["resources"]["requests"], &given);
                }
                for limit in &limits {
                    if let Some(defaults) = limit["default"].as_object() {
                        set_missing(&mut container["resources"]["limits"], defaults);
                    }
                    // Then `defaultRequest`, which itself defaults to `default`, then `min` (as
                    // kube defaults a LimitRange's items; ranges stored before that defaulting
                    // are read the same way).
                    for defaults in [&limit["defaultRequest"], &limit["default"], &limit["min"]] {
                        if let Some(defaults) = defaults.as_object() {
                            set_missing(&mut container["resources"]["requests"], defaults);
                        }
                    }
                    for (resource, max) in limit["max"].as_object().into_iter().flatten() {
                        let value = container.pointer(&format!("/resources/limits/{resource}"));
                        match value.and_then(plinth_core::quantity::of) {
                            Some(v) if plinth_core::quantity::of(max).is_some_and(|m| v > m) => problems.push(format!(
                                "maximum {resource} usage per Container is {}, but limit is {}",
                                text(max),
                                text(value.unwrap_or(&Value::Null))
                            )),
                            None => problems.push(format!("maximum {resource} usage per Container is {}.  No limit is specified", text(max))),
                            _ => {
                                // A request above the maximum too (kube's maxConstraint).
                                let request = container.pointer(&format!("/resources/requests/{resource}"));
                                if let Some(r) = request.and_then(plinth_core::quantity::of)
                                    && plinth_core::quantity::of(max).is_some_and(|m| r > m)
                                {
                                    problems.push(format!(
                                        "maximum {resource} usage per Container is {}, but request is {}",
                                        text(max),
                                        text(request.unwrap_or(&Value::Null))
                                    ));
                                }
                            }
                        }
                    }
                    for (resource, min) in limit["min"].as_object().into_iter().flatten() {
                        let value = container.pointer(&format!("/resources/requests/{resource}"));
                        match value.and_then(plinth_core::quantity::of) {
                            Some(v) if plinth_core::quantity::of(min).is_some_and(|m| v < m) => problems.push(format!(
                                "minimum {resource} usage per Container is {}, but request is {}",
                                text(min),
                                text(value.unwrap_or(&Value::Null))
                            )),
                            None => problems.push(format!("minimum {resource} usage per Container is {}.  No request is specified", text(min))),
                            _ => {
                                // A limit below the minimum too (kube's minConstraint).
                                let limit = container.pointer(&format!("/resources/limits/{resource}"));
                                if let Some(l) = limit.and_then(plinth_core::quantity::of)
                                    && plinth_core::quantity::of(min).is_some_and(|m| l < m)
                                {
                                    problems.push(format!(
                                        "minimum {resource} usage per Container is {}, but limit is {}",
                                        text(min),
                                        text(limit.unwrap_or(&Value::Null))
                                    ));
                                }
                            }
                        }
                    }
                }
            }
        }
        if !problems.is_empty() {
            return Err(ApiError::forbidden(
                Some(&plinth_core::GroupResource::new("", "pods")),
                &name,
                &if problems.len() == 1 {
                    problems.join(", ")
                } else {
                    format!("[{}]", problems.join(", "))
                },
            ));
        }
        let qos = super::pod::qos_class(pod.get("spec").unwrap_or(&Value::Null));
        pod["status"]["qosClass"] = json!(qos);
        Ok(())
    })
}
