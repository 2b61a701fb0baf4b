//! policy/v1 PodDisruptionBudget: `minAvailable` or `maxUnavailable` of the pods a selector
//! matches; its status (kept by the disruption controller) says how many evictions are
//! allowed, which `pods/<name>/eviction` checks and spends.

use plinth_core::{ApiError, Cause, StatusReason};
use serde_json::{Value, json};

use crate::apps::{go_invalid, int_or_percent, label_selector, selector_go};
use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::{Schema, array, obj, strings, top};
use plinth_registry::strategy::Strategy;

/// The `poddisruptionbudgets` resource.
pub fn resource() -> ResourceDef {
    let cell = |field: &'static str| {
        move |o: &Value, _: i64| match o.pointer(&format!("/spec/{field}")) {
            Some(Value::Number(n)) => json!(n.to_string()),
            Some(Value::String(s)) => json!(s),
            _ => json!("N/A"),
        }
    };
    let mut def = ResourceDef::new(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
    )
    .short_names(&["pdb"])
    .with_status()
    .columns(vec![
        column(
            "Min Available",
            "string",
            "The minimum number of pods that must be available.",
            0,
            cell("minAvailable"),
        ),
        column(
            "Max Unavailable",
            "string",
            "The maximum number of pods that may be unavailable.",
            0,
            cell("maxUnavailable"),
        ),
        column(
            "Allowed Disruptions",
            "integer",
            "Calculated number of pods that may be disrupted at this time.",
            0,
            |o, _| {
                json!(
                    o.pointer("/status/disruptionsAllowed")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                )
            },
        ),
    ])
    .schema(top(vec![
        (
            "spec",
            obj(vec![
                ("minAvailable", Schema::IntOrString),
                ("selector", label_selector()),
                ("maxUnavailable", Schema::IntOrString),
                ("unhealthyPodEvictionPolicy", Schema::String),
            ]),
        ),
        (
            "status",
            obj(vec![
                ("observedGeneration", Schema::Int),
                ("disruptedPods", strings()),
                ("disruptionsAllowed", Schema::Int),
                ("currentHealthy", Schema::Int),
                ("desiredHealthy", Schema::Int),
                ("expectedPods", Schema::Int),
                ("conditions", array(Schema::Any)),
            ]),
        ),
    ]))
    .strategy(Budgets);
    def.generation = true;
    def
}

#[derive(Debug)]
struct Budgets;

impl Strategy for Budgets {
    /// kube's status strategy: the request's status and metadata, the stored spec.
    fn merge_status(&self, current: &Value, new: &Value) -> Option<Value> {
        Some(plinth_registry::strategy::with_stored_spec(current, new))
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let spec = &object["spec"];
        let mut causes = Vec::new();
        let min = &spec["minAvailable"];
        let max = &spec["maxUnavailable"];
        if !min.is_null() && !max.is_null() {
            causes.push(Cause::invalid(
                "spec",
                spec,
                "minAvailable and maxUnavailable cannot be both set",
            ));
        }
        causes.extend(int_or_percent(min, "spec.minAvailable", true));
        causes.extend(int_or_percent(max, "spec.maxUnavailable", true));
        if let Err(e) = plinth_core::selector::LabelSelector::from_object(&spec["selector"]) {
            causes.push(go_invalid(
                "spec.selector",
                &selector_go(&spec["selector"]),
                &format!("invalid label selector: {e}"),
            ));
        }
        if let Some(policy) = spec["unhealthyPodEvictionPolicy"].as_str()
            && !["IfHealthyBudget", "AlwaysAllow"].contains(&policy)
        {
            causes.push(Cause::not_supported(
                "spec.unhealthyPodEvictionPolicy",
                &json!(policy),
                &["IfHealthyBudget", "AlwaysAllow"],
            ));
        }
        causes
    }
}

/// The 429 an eviction gets when `budget` allows none.
pub fn violated(budget: &Value) -> ApiError {
    let name = plinth_core::meta::name(budget).unwrap_or("");
    let desired = budget
        .pointer("/status/desiredHealthy")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let current = budget
        .pointer("/status/currentHealthy")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut error = ApiError::new(
        StatusReason::TooManyRequests,
        "Cannot evict pod as it would violate the pod's disruption budget.",
    );
    error.details.causes.push(Cause::new(
        "DisruptionBudget",
        "",
        format!(
            "The disruption budget {name} needs {desired} healthy pods and has {current} currently"
        ),
    ));
    error
}
