//! A pod's binding (the scheduler's write) and eviction (through its disruption budgets).

use futures::future::BoxFuture;
use plinth_core::{ApiError, Cause};
use serde_json::{Value, json};

use plinth_registry::resources::Asker;

/// `pods/<name>/binding`: the scheduler assigns the pod to `target.name`.
pub(super) fn binding<'a>(
    asker: &'a Asker<'a>,
    pod: Value,
    request: Value,
) -> BoxFuture<'a, Result<Value, ApiError>> {
    Box::pin(async move {
        let name = plinth_core::meta::name(&pod).unwrap_or("").to_owned();
        let namespace = plinth_core::meta::namespace(&pod).unwrap_or("").to_owned();
        let node = request
            .pointer("/target/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if node.is_empty() {
            return Err(ApiError::invalid(
                "",
                "Binding",
                &name,
                vec![Cause::required("target.name", "")],
            ));
        }
        let def = asker
            .objects
            .resource("", "v1", "pods")
            .ok_or_else(|| ApiError::internal("pods are not served"))?;
        let options = plinth_registry::WriteOptions::internal("kube-scheduler");
        asker
            .objects
            .modify(
                &def,
                Some(&namespace),
                &name,
                plinth_registry::Part::Main,
                &options,
                &|current: &mut Value| {
                    if current
                        .pointer("/metadata/deletionTimestamp")
                        .is_some_and(|t| !t.is_null())
                    {
                        return Err(ApiError::conflict(
                            &def.group_resource(),
                            &name,
                            "pod is being deleted, cannot be assigned to a host",
                        ));
                    }
                    if let Some(assigned) = current
                        .pointer("/spec/nodeName")
                        .and_then(Value::as_str)
                        .filter(|n| !n.is_empty())
                    {
                        return Err(ApiError::conflict(
                            &def.group_resource(),
                            &name,
                            &format!("pod {name} is already assigned to node \"{assigned}\""),
                        ));
                    }
                    current["spec"]["nodeName"] = json!(node);
                    Ok(true)
                },
            )
            .await?;
        Ok(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        )
    })
}

/// `bindings` (the older form of `pods/<name>/binding`): the Binding's `metadata.name` names
/// the pod, in the namespace of the path.
pub(super) fn create_binding<'a>(
    asker: &'a Asker<'a>,
    request: Value,
) -> BoxFuture<'a, Result<Value, ApiError>> {
    Box::pin(async move {
        let name = plinth_core::meta::name(&request).unwrap_or("").to_owned();
        if name.is_empty() {
            return Err(ApiError::invalid(
                "",
                "Binding",
                "",
                vec![Cause::required(
                    "metadata.name",
                    "name or generateName is required",
                )],
            ));
        }
        let def = asker
            .objects
            .resource("", "v1", "pods")
            .ok_or_else(|| ApiError::internal("pods are not served"))?;
        let pod = asker
            .objects
            .get(&def, Some(asker.namespace.unwrap_or("default")), &name)
            .await?;
        binding(asker, pod, request).await
    })
}

/// `pods/<name>/eviction`: the pod is deleted with the eviction's delete options.
pub(super) fn eviction<'a>(
    asker: &'a Asker<'a>,
    pod: Value,
    request: Value,
) -> BoxFuture<'a, Result<Value, ApiError>> {
    Box::pin(async move {
        let name = plinth_core::meta::name(&pod).unwrap_or("").to_owned();
        let namespace = plinth_core::meta::namespace(&pod).unwrap_or("").to_owned();
        if let Some(asked) = request.pointer("/metadata/name").and_then(Value::as_str)
            && asked != name
        {
            return Err(ApiError::bad_request(format!(
                "name in URL does not match name in Eviction object: {name} != {asked}"
            )));
        }
        let def = asker
            .objects
            .resource("", "v1", "pods")
            .ok_or_else(|| ApiError::internal("pods are not served"))?;
        spend_budget(asker.objects, &pod).await?;
        // kube's eviction marks the pod first (a Job's pod failure policy can match it).
        let now = plinth_core::meta::format_time(plinth_registry::now());
        asker
            .objects
            .modify(
                &def,
                Some(&namespace),
                &name,
                plinth_registry::Part::Status,
                &plinth_registry::WriteOptions::internal("kube-apiserver"),
                &|current: &mut Value| Ok(mark_disruption(current, &now)),
            )
            .await?;
        let options = plinth_registry::DeleteOptions {
            grace_period_seconds: request
                .pointer("/deleteOptions/gracePeriodSeconds")
                .and_then(Value::as_i64),
            uid: request
                .pointer("/deleteOptions/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_owned),
            user: Some(asker.user.clone()),
            ..plinth_registry::DeleteOptions::default()
        };
        asker
            .objects
            .delete(&def, Some(&namespace), &name, &options)
            .await?;
        Ok(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        )
    })
}

/// Sets the pod's `DisruptionTarget` condition as kube's eviction does; whether it changed.
fn mark_disruption(pod: &mut Value, now: &str) -> bool {
    let condition = json!({"type": "DisruptionTarget", "status": "True", "lastProbeTime": null,
        "lastTransitionTime": now, "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting"});
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let Some(conditions) = pod["status"]["conditions"].as_array_mut() else {
        return false;
    };
    match conditions
        .iter_mut()
        .find(|c| c["type"] == "DisruptionTarget")
    {
        Some(existing)
            if existing["status"] == "True"
                && existing["reason"] == condition["reason"]
                && existing["message"] == condition["message"] =>
        {
            false
        }
        Some(existing) => {
            *existing = condition;
            true
        }
        None => {
            conditions.push(condition);
            true
        }
    }
}

/// The PodDisruptionBudget check of an eviction (kube's `EvictionREST`): a finished or
/// pending pod, or one being deleted, goes regardless; a pod under more than one budget
/// cannot be evicted; under one, the eviction spends one of its allowed disruptions (noted
/// in `status.disruptedPods` until the controller sees the pod go) or is refused with 429.
pub(super) async fn spend_budget(
    objects: &dyn plinth_registry::resources::Objects,
    pod: &Value,
) -> Result<(), ApiError> {
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending");
    let deleting = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    if matches!(phase, "Succeeded" | "Failed" | "Pending") || deleting {
        return Ok(());
    }
    let Some(def) = objects.resource("policy", "v1", "poddisruptionbudgets") else {
        return Ok(());
    };
    let namespace = plinth_core::meta::namespace(pod).unwrap_or("default");
    let labels = plinth_core::meta::labels(pod);
    let budgets = objects
        .list(
            &def,
            Some(namespace),
            &plinth_registry::ListOptions::default(),
        )
        .await?;
    let matching: Vec<&Value> = budgets["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| {
            plinth_core::selector::LabelSelector::from_object(&b["spec"]["selector"])
                .is_ok_and(|s| s.matches(&labels))
        })
        .collect();
    let budget = match matching.as_slice() {
        [] => return Ok(()),
        [one] => *one,
        _ => {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    };
    let ready = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    let status = |f: &str| {
        budget
            .pointer(&format!("/status/{f}"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    if !ready {
        let policy = budget
            .pointer("/spec/unhealthyPodEvictionPolicy")
            .and_then(Value::as_str);
        if policy == Some("AlwaysAllow") || status("currentHealthy") >= status("desiredHealthy") {
            return Ok(());
        }
    }
    let name = plinth_core::meta::name(budget).unwrap_or("").to_owned();
    let pod_name = plinth_core::meta::name(pod).unwrap_or("").to_owned();
    let now = plinth_core::meta::format_time(plinth_registry::now());
    objects
        .modify(
            &def,
            Some(namespace),
            &name,
            plinth_registry::Part::Status,
            &plinth_registry::WriteOptions::internal("kube-apiserver"),
            &|current: &mut Value| {
                let generation = current
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let observed = current
                    .pointer("/status/observedGeneration")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if observed < generation {
                    let mut error = crate::policy::poddisruptionbudget::violated(current);
                    error.details.causes = vec![Cause::new(
                        "DisruptionBudget",
                        "",
                        format!(
                            "The disruption budget {name} is still being processed by the server."
                        ),
                    )];
                    return Err(error);
                }
                let allowed = current
                    .pointer("/status/disruptionsAllowed")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if allowed <= 0 {
                    return Err(crate::policy::poddisruptionbudget::violated(current));
                }
                current["status"]["disruptionsAllowed"] = json!(allowed - 1);
                if !current["status"]["disruptedPods"].is_object() {
                    current["status"]["disruptedPods"] = json!({});
                }
                current["status"]["disruptedPods"][&pod_name] = json!(now);
                Ok(true)
            },
        )
        .await?;
    Ok(())
}
