//! flowcontrol.apiserver.k8s.io/v1 PriorityLevelConfiguration: how many of the server's seats
//! a priority level gets, and whether its excess requests queue or are refused.

use plinth_core::Cause;
use serde_json::{Value, json};

use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::strategy::Strategy;

/// The `prioritylevelconfigurations` resource.
pub fn resource() -> ResourceDef {
    let limited = |path: &'static str| {
        move |object: &Value, _now: i64| {
            object
                .pointer("/spec/limited")
                .and_then(|l| l.pointer(path))
                .cloned()
                .unwrap_or_else(|| json!("<none>"))
        }
    };
    ResourceDef::new(
        super::GROUP,
        "v1",
        "PriorityLevelConfiguration",
        "prioritylevelconfigurations",
    )
    .cluster_scoped()
    .with_status()
    .columns(vec![
        column(
            "Type",
            "string",
            "Exempt or Limited",
            0,
            |object: &Value, _| object.pointer("/spec/type").cloned().unwrap_or(Value::Null),
        ),
        column(
            "NominalConcurrencyShares",
            "string",
            "Its share of the server's seats",
            0,
            limited("/nominalConcurrencyShares"),
        ),
        column(
            "Queues",
            "string",
            "Queues its flows are shuffled into",
            0,
            limited("/limitResponse/queuing/queues"),
        ),
        column(
            "HandSize",
            "string",
            "Queues a flow may use",
            0,
            limited("/limitResponse/queuing/handSize"),
        ),
        column(
            "QueueLengthLimit",
            "string",
            "Requests a queue holds at most",
            0,
            limited("/limitResponse/queuing/queueLengthLimit"),
        ),
    ])
    .schema(schema())
    .strategy(PriorityLevels)
}

/// A status condition.
pub(super) fn condition() -> Schema {
    obj(vec![
        ("type", Schema::String),
        ("status", Schema::String),
        ("lastTransitionTime", Schema::String),
        ("reason", Schema::String),
        ("message", Schema::String),
    ])
}

fn schema() -> Schema {
    top(vec![
        (
            "spec",
            obj(vec![
                ("type", Schema::String),
                (
                    "limited",
                    obj(vec![
                        ("nominalConcurrencyShares", Schema::Int),
                        ("lendablePercent", Schema::Int),
                        ("borrowingLimitPercent", Schema::Int),
                        (
                            "limitResponse",
                            obj(vec![
                                ("type", Schema::String),
                                (
                                    "queuing",
                                    obj(vec![
                                        ("queues", Schema::Int),
                                        ("handSize", Schema::Int),
                                        ("queueLengthLimit", Schema::Int),
                                    ]),
                                ),
                            ]),
                        ),
                    ]),
                ),
                (
                    "exempt",
                    obj(vec![
                        ("nominalConcurrencyShares", Schema::Int),
                        ("lendablePercent", Schema::Int),
                    ]),
                ),
            ]),
        ),
        ("status", obj(vec![("conditions", array(condition()))])),
    ])
}

#[derive(Debug)]
struct PriorityLevels;

fn positive(causes: &mut Vec<Cause>, value: Option<&Value>, field: &str) -> i64 {
    let Some(value) = value else {
        return 0;
    };
    let n = value.as_i64().unwrap_or(0);
    if n <= 0 {
        causes.push(Cause::invalid(field, value, "must be positive"));
    }
    n
}

impl Strategy for PriorityLevels {
    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let spec = object.get("spec").unwrap_or(&Value::Null);
        let kind = spec.get("type").cloned().unwrap_or(Value::Null);
        match kind.as_str() {
            Some("Exempt") => {
                if spec.get("limited").is_some_and(|l| !l.is_null()) {
                    causes.push(Cause::forbidden(
                        "spec.limited",
                        "must be nil if the type is not Limited",
                    ));
                }
            }
            Some("Limited") => {
                let Some(limited) = spec.get("limited").filter(|l| l.is_object()) else {
                    causes.push(Cause::required(
                        "spec.limited",
                        "must not be empty when type is Limited",
                    ));
                    return causes;
                };
                for field in ["lendablePercent", "borrowingLimitPercent"] {
                    if let Some(value) = limited.get(field)
                        && !(0..=100).contains(&value.as_i64().unwrap_or(-1))
                        && !(field == "borrowingLimitPercent"
                            && value.as_i64().is_some_and(|n| n > 100))
                    {
                        causes.push(Cause::invalid(
                            format!("spec.limited.{field}"),
                            value,
                            "must be between 0 and 100, inclusive",
                        ));
                    }
                }
                let response = limited.get("limitResponse").unwrap_or(&Value::Null);
                let how = response.get("type").cloned().unwrap_or(Value::Null);
                let queuing = response.get("queuing").filter(|q| !q.is_null());
                match how.as_str() {
                    Some("Queue") => {
                        let Some(queuing) = queuing else {
                            causes.push(Cause::required(
                                "spec.limited.limitResponse.queuing",
                                "must not be empty if the type is Queue",
                            ));
                            return causes;
                        };
                        let at = "spec.limited.limitResponse.queuing";
                        let queues =
                            positive(&mut causes, queuing.get("queues"), &format!("{at}.queues"));
                        let hand = positive(
                            &mut causes,
                            queuing.get("handSize"),
                            &format!("{at}.handSize"),
                        );
                        positive(
                            &mut causes,
                            queuing.get("queueLengthLimit"),
                            &format!("{at}.queueLengthLimit"),
                        );
                        if queues > 0 && hand > queues {
                            causes.push(Cause::invalid(
                                format!("{at}.handSize"),
                                &json!(hand),
                                &format!("should not be greater than queues ({queues})"),
                            ));
                        }
                    }
                    Some("Reject") => {
                        if queuing.is_some() {
                            causes.push(Cause::forbidden(
                                "spec.limited.limitResponse.queuing",
                                "must be nil if limited.limitResponse.type is not Limited",
                            ));
                        }
                    }
                    _ => causes.push(Cause::not_supported(
                        "spec.limited.limitResponse.type",
                        &how,
                        &["Queue", "Reject"],
                    )),
                }
            }
            _ => causes.push(Cause::not_supported(
                "spec.type",
                &kind,
                &["Exempt", "Limited"],
            )),
        }
        causes
    }
}
