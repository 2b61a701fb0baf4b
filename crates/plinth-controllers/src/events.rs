//! Events the built-in controllers record (core/v1, as `kubectl describe` and `kubectl
//! events` show them).

use plinth_core::Tree;
use plinth_registry::{Client, WriteOptions};
use serde_json::json;

/// Records an event of `kind` (`Normal`/`Warning`) about `object`, from `component`.
pub async fn record(
    registry: &Client,
    object: &(impl Tree + ?Sized),
    kind: &str,
    reason: &str,
    message: &str,
    component: &str,
) {
    let Some(events) = registry.resources.get("", "v1", "events") else {
        return;
    };
    let name = plinth_core::meta::name(object).unwrap_or("");
    let namespace = plinth_core::meta::namespace(object).unwrap_or("default");
    let now = plinth_core::meta::format_time(plinth_registry::now());
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": format!("{name}.")},
        "involvedObject": {
            "apiVersion": object.field("apiVersion").and_then(Tree::text),
            "kind": object.field("kind").and_then(Tree::text),
            "name": name,
            "namespace": plinth_core::meta::namespace(object),
            "uid": plinth_core::meta::meta_str(object, "uid"),
            "resourceVersion": plinth_core::meta::meta_str(object, "resourceVersion"),
        },
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    if let Err(e) = registry
        .create(
            &events,
            Some(namespace),
            event,
            &WriteOptions::internal(component),
        )
        .await
    {
        tracing::debug!(error = %e.message, "event not recorded");
    }
}
