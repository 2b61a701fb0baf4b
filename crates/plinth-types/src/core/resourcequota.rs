//! core/v1 ResourceQuota: limits on what a namespace may hold — here object counts
//! (`count/<resource>.<group>`, `configmaps`, `secrets`, …). Creates are checked and counted at
//! admission ([`plinth_admission::quota`]); the quota controller keeps `status.used` true.

use plinth_core::Cause;
use serde_json::{Value, json};

use plinth_registry::resources::{ResourceDef, age_cell, column};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::strategy::Strategy;

/// The `resourcequotas` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("", "v1", "ResourceQuota", "resourcequotas")
        .short_names(&["quota"])
        .with_status()
        .columns(vec![
            column(
                "Age",
                "string",
                "Time since creation",
                0,
                |o: &Value, now| age_cell(o, "metadata.creationTimestamp", now),
            ),
            column(
                "Request",
                "string",
                "Used of hard, by resource",
                0,
                |o: &Value, _| usage(o, false),
            ),
            column(
                "Limit",
                "string",
                "Used of hard, limits",
                0,
                |o: &Value, _| usage(o, true),
            ),
        ])
        .no_age_column()
        .schema(top(vec![
            (
                "spec",
                obj(vec![
                    ("hard", Schema::Map(Box::new(Schema::Quantity))),
                    ("scopes", array(Schema::String)),
                    ("scopeSelector", Schema::Any),
                ]),
            ),
            (
                "status",
                obj(vec![
                    ("hard", Schema::Map(Box::new(Schema::Quantity))),
                    ("used", Schema::Map(Box::new(Schema::Quantity))),
                ]),
            ),
        ]))
        .strategy(ResourceQuotas)
}

/// kubectl's `configmaps: 1/2, count/widgets.example.com: 0/3` (the `limits.*` ones apart).
fn usage(quota: &Value, limits: bool) -> Value {
    let hard = quota.pointer("/status/hard").and_then(Value::as_object);
    let used = quota.pointer("/status/used");
    let shown: Vec<String> = hard
        .into_iter()
        .flatten()
        .filter(|(name, _)| name.starts_with("limits.") == limits)
        .map(|(name, limit)| {
            let text = |v: Option<&Value>| match v {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => "0".into(),
            };
            format!(
                "{name}: {}/{}",
                text(used.and_then(|u| u.get(name))),
                text(Some(limit))
            )
        })
        .collect();
    json!(shown.join(", "))
}

#[derive(Debug)]
struct ResourceQuotas;

impl Strategy for ResourceQuotas {
    /// kube's status strategy: the request's status and metadata, the stored spec.
    fn merge_status(&self, current: &Value, new: &Value) -> Option<Value> {
        Some(plinth_registry::strategy::with_stored_spec(current, new))
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        for (name, value) in object
            .pointer("/spec/hard")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                other => other.to_string(),
            };
            let field = format!("spec.hard[{name}]");
            if plinth_core::quantity::parse(&text).is_none() {
                causes.push(Cause::invalid(
                    field,
                    &json!(text),
                    plinth_core::quantity::INVALID,
                ));
            } else if text.starts_with('-') {
                causes.push(Cause::invalid(
                    field,
                    &json!(text),
                    "must be greater than or equal to 0",
                ));
            }
        }
        causes
    }
}
