//! core/v1 ComponentStatus (deprecated in kube, still served): read-only, computed when
//! asked — `etcd-0` (the storage answers a read), `controller-manager` and `scheduler` (the
//! built-in controllers, the scheduler among them, hold a current Lease).

use futures::future::BoxFuture;
use plinth_core::ApiError;
use plinth_core::gvk::GroupResource;
use serde_json::{Value, json};

use plinth_registry::resources::{Reading, ResourceDef, column};

/// The Lease the built-in controllers hold while they run.
const CONTROLLERS_LEASE: (&str, &str) = ("kube-system", "kube-controller-manager");

/// The `componentstatuses` resource.
pub fn resource() -> ResourceDef {
    let condition = |field: &'static str| {
        move |o: &Value, _: i64| {
            json!(
                o.pointer(&format!("/conditions/0/{field}"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
            )
        }
    };
    let mut def = ResourceDef::new("", "v1", "ComponentStatus", "componentstatuses")
        .cluster_scoped()
        .short_names(&["cs"])
        .no_age_column()
        .columns(vec![
            column(
                "Status",
                "string",
                "Status of the component conditions",
                0,
                |o, _| {
                    let healthy = o.pointer("/conditions/0/status") == Some(&json!("True"));
                    json!(if healthy { "Healthy" } else { "Unhealthy" })
                },
            ),
            column(
                "Message",
                "string",
                "Message of the component conditions",
                0,
                condition("message"),
            ),
            column(
                "Error",
                "string",
                "Error of the component conditions",
                0,
                condition("error"),
            ),
        ]);
    def.computed = Some(statuses);
    def
}

fn status(name: &str, healthy: Result<String, String>) -> Value {
    let condition = match healthy {
        Ok(message) => json!({"type": "Healthy", "status": "True", "message": message}),
        Err(error) => json!({"type": "Healthy", "status": "False", "error": error}),
    };
    json!({"kind": "ComponentStatus", "apiVersion": "v1",
        "metadata": {"name": name, "creationTimestamp": null}, "conditions": [condition]})
}

/// Whether the controllers' Lease is held and renewed within its duration.
async fn controllers(reading: &Reading<'_>) -> Result<String, String> {
    let Some(def) = reading
        .objects
        .resource("coordination.k8s.io", "v1", "leases")
    else {
        return Err("leases are not served".into());
    };
    let lease = reading
        .objects
        .get(&def, Some(CONTROLLERS_LEASE.0), CONTROLLERS_LEASE.1)
        .await
        .map_err(|e| e.message)?;
    let holder = lease
        .pointer("/spec/holderIdentity")
        .and_then(Value::as_str)
        .unwrap_or("");
    let duration = lease
        .pointer("/spec/leaseDurationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(15);
    let renewed = lease
        .pointer("/spec/renewTime")
        .and_then(Value::as_str)
        .and_then(plinth_core::meta::parse_time)
        .unwrap_or(0);
    if holder.is_empty() {
        return Err("no controller manager holds the lease".into());
    }
    if plinth_registry::now() - renewed > duration {
        return Err(format!("the lease of {holder} expired"));
    }
    Ok("ok".into())
}

fn statuses(reading: Reading<'_>) -> BoxFuture<'_, Result<Value, ApiError>> {
    Box::pin(async move {
        let storage = match reading.objects.resource("", "v1", "namespaces") {
            Some(def) => reading
                .objects
                .get(&def, None, "default")
                .await
                .map(|_| r#"{"health":"true","reason":""}"#.to_owned())
                .map_err(|e| e.message),
            None => Err("namespaces are not served".into()),
        };
        let controllers = controllers(&reading).await;
        let items = vec![
            status("controller-manager", controllers.clone()),
            status("scheduler", controllers),
            status("etcd-0", storage),
        ];
        match reading.name {
            Some(name) => items
                .into_iter()
                .find(|i| i["metadata"]["name"] == name)
                .ok_or_else(|| {
                    ApiError::not_found(&GroupResource::new("", "componentstatuses"), name)
                }),
            None => Ok(json!({"kind": "ComponentStatusList", "apiVersion": "v1",
                "metadata": {}, "items": items})),
        }
    })
}
