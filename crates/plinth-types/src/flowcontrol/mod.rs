//! flowcontrol.apiserver.k8s.io/v1: FlowSchemas (which requests go to which priority level)
//! and PriorityLevelConfigurations (how a level shares the server). The defaults written at
//! start describe what the server's fair queuing does ([`crate::http`]'s inflight limits):
//! `system:masters` exempt, health probes exempt, everyone else queued per user.

pub mod flowschema;
pub mod prioritylevel;

use serde_json::{Value, json};

const GROUP: &str = "flowcontrol.apiserver.k8s.io";
const API_VERSION: &str = "flowcontrol.apiserver.k8s.io/v1";

fn everything() -> Value {
    json!([{
        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
            "clusterScope": true, "namespaces": ["*"]}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
    }])
}

fn groups(names: &[&str]) -> Value {
    Value::Array(
        names
            .iter()
            .map(|name| json!({"kind": "Group", "group": {"name": name}}))
            .collect(),
    )
}

fn meta(name: &str) -> Value {
    json!({"name": name, "annotations": {"apf.kubernetes.io/autoupdate-spec": "true"}})
}

fn flow_schema(
    name: &str,
    level: &str,
    precedence: i64,
    by_user: bool,
    subjects: Value,
    rules: Value,
) -> Value {
    let mut spec = json!({
        "priorityLevelConfiguration": {"name": level},
        "matchingPrecedence": precedence,
        "rules": rules.as_array().map(|r| {
            r.iter().map(|rule| {
                let mut rule = rule.clone();
                rule["subjects"] = subjects.clone();
                rule
            }).collect::<Vec<_>>()
        }),
    });
    if by_user {
        spec["distinguisherMethod"] = json!({"type": "ByUser"});
    }
    json!({"apiVersion": API_VERSION, "kind": "FlowSchema", "metadata": meta(name), "spec": spec})
}

/// Requests of one user waiting at most: the server's fair queuing (`plinth-apiserver`'s
/// inflight limits) enforces what `catch-all` declares.
pub const QUEUE_LENGTH: usize = 64;

/// The priority levels and flow schemas every server starts with (kube's mandatory ones,
/// and `probes`), each FlowSchema's `Dangling` condition already set.
pub fn defaults() -> Vec<(&'static str, Value)> {
    let all = [
        plinth_registry::user::AUTHENTICATED,
        plinth_registry::user::UNAUTHENTICATED,
    ];
    let levels = vec![
        json!({"apiVersion": API_VERSION, "kind": "PriorityLevelConfiguration",
            "metadata": meta("exempt"),
            "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}}),
        json!({"apiVersion": API_VERSION, "kind": "PriorityLevelConfiguration",
            "metadata": meta("catch-all"),
            "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": 100,
                "lendablePercent": 0,
                "limitResponse": {"type": "Queue", "queuing": {
                    // A queue per user: shuffle sharding with one queue a hand, as many
                    // queues as there are users waiting (the nearest v1 can say: 128).
                    "queues": 128, "handSize": 1,
                    "queueLengthLimit": QUEUE_LENGTH}}}}}),
    ];
    let health = json!([{"nonResourceRules": [{"verbs": ["get"],
        "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}]}]);
    let schemas = vec![
        flow_schema(
            "exempt",
            "exempt",
            1,
            false,
            groups(&[plinth_registry::user::MASTERS]),
            everything(),
        ),
        flow_schema("probes", "exempt", 2, false, groups(&all), health),
        flow_schema(
            "catch-all",
            "catch-all",
            10000,
            true,
            groups(&all),
            everything(),
        ),
    ];
    levels
        .into_iter()
        .map(|level| ("prioritylevelconfigurations", level))
        .chain(schemas.into_iter().map(|mut schema| {
            schema["status"] = json!({"conditions": [{
                "type": "Dangling", "status": "False", "reason": "Found",
                "message": format!("This FlowSchema references the PriorityLevelConfiguration object named {:?} and it exists",
                    schema["spec"]["priorityLevelConfiguration"]["name"].as_str().unwrap_or("")),
                "lastTransitionTime": plinth_core::meta::format_time(plinth_registry::now()),
            }]});
            ("flowschemas", schema)
        }))
        .collect()
}
