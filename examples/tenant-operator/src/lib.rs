//! The tenant operator: for each cluster-scoped `Tenant` it keeps a namespace `tenant-<name>`,
//! a ServiceAccount `tenant-admin` and a ConfigMap `tenant-config` (the tenant's `config`) in it,
//! all owned by the Tenant; its status says where and whether it is ready; a finalizer writes a
//! record of each deleted tenant to the archive directory. Every piece of plinth-runtime shows
//! here: informers, an owning controller, server-side apply, finalizers, conditions, events,
//! and (in `main.rs`) the manager with leader election and metrics.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, Patch, PatchParams};
use kube::{CustomResource, CustomResourceExt, Resource, ResourceExt};
use plinth_runtime::helpers::{
    Condition, EventRecorder, controller_reference, ensure_finalizer, remove_finalizer,
    set_condition,
};
use plinth_runtime::{Action, Cache, Controller, Informer, ObjectKey, ReconcileError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The finalizer that archives a deleted tenant.
pub const FINALIZER: &str = "platform.plinth.dev/archive";
/// The field manager of everything this operator applies.
pub const MANAGER: &str = "tenant-operator";

/// What a tenant asks for.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "platform.plinth.dev",
    version = "v1alpha1",
    kind = "Tenant",
    status = "TenantStatus",
    shortname = "tn",
    printcolumn = r#"{"name":"Namespace","type":"string","jsonPath":".status.namespace"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#
)]
pub struct TenantSpec {
    /// The tenant's owners (user names).
    #[serde(default)]
    pub owners: Vec<String>,
    /// Configuration handed to the tenant's workloads (the `tenant-config` ConfigMap).
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

/// What the operator reports.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantStatus {
    /// The tenant's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// `Active` once everything exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `Ready`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The generation last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The Tenant CRD, generated from the types above.
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    Tenant::crd()
}

/// The namespace of tenant `name`.
pub fn namespace_of(name: &str) -> String {
    format!("tenant-{name}")
}

/// Everything the reconciler uses.
#[derive(Clone)]
pub struct Context {
    /// The client.
    pub client: kube::Client,
    /// Tenants, from the cache.
    pub tenants: Cache<Tenant>,
    /// Where deleted tenants are archived.
    pub archive_dir: PathBuf,
    /// Events.
    pub recorder: EventRecorder,
}

fn apply<K>(
    name: &str,
    api: &Api<K>,
    object: serde_json::Value,
) -> impl std::future::Future<Output = Result<K, ReconcileError>> + Send
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let (api, name) = (api.clone(), name.to_owned());
    async move {
        api.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
        .map_err(|e| ReconcileError::Retry(e.to_string()))
    }
}

/// Reconciles one tenant (by key: level-triggered).
///
/// # Errors
/// A retryable error when a write fails.
pub async fn reconcile(key: ObjectKey, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let Some(tenant) = ctx.tenants.get(&key) else {
        return Ok(Action::Done);
    };
    let tenants: Api<Tenant> = Api::all(ctx.client.clone());
    let name = tenant.name_any();
    if tenant.meta().deletion_timestamp.is_some() {
        if tenant.finalizers().iter().any(|f| f == FINALIZER) {
            archive(&ctx, &tenant)?;
            remove_finalizer(&tenants, &*tenant, FINALIZER).await?;
        }
        // The garbage collector removes what the tenant owns.
        return Ok(Action::Done);
    }
    if ensure_finalizer(&tenants, &*tenant, FINALIZER).await? {
        // The update comes back as an event; the next pass does the rest.
        return Ok(Action::Done);
    }
    let owner = controller_reference(&*tenant)
        .ok_or_else(|| ReconcileError::Terminal("the tenant has no uid".into()))?;
    let namespace = namespace_of(&name);
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    apply(
        &namespace,
        &namespaces,
        json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {"platform.plinth.dev/tenant": name},
                         "ownerReferences": [owner]},
        }),
    )
    .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &namespace);
    apply("tenant-admin", &accounts, json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "tenant-admin", "namespace": namespace,
                     "annotations": {"platform.plinth.dev/owners": tenant.spec.owners.join(",")},
                     "ownerReferences": [owner]},
    }))
    .await?;
    let configs: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    apply("tenant-config", &configs, json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "tenant-config", "namespace": namespace, "ownerReferences": [owner]},
        "data": tenant.spec.config,
    }))
    .await?;
    let generation = tenant.meta().generation;
    let old = tenant.status.clone().unwrap_or_default();
    let mut status = old.clone();
    status.namespace = Some(namespace.clone());
    status.phase = Some("Active".into());
    status.observed_generation = generation;
    set_condition(
        &mut status.conditions,
        "Ready",
        true,
        "Reconciled",
        "namespace, service account and config are in place",
        generation,
    );
    let changed = old.observed_generation != generation || old.phase.as_deref() != Some("Active");
    tenants
        .patch_status(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": "platform.plinth.dev/v1alpha1", "kind": "Tenant",
                "status": status,
            })),
        )
        .await
        .map_err(|e| ReconcileError::Retry(e.to_string()))?;
    if changed {
        let _ = ctx
            .recorder
            .publish(
                &*tenant,
                false,
                "Reconciled",
                "Reconcile",
                &format!("tenant ready in namespace {namespace}"),
            )
            .await;
    }
    Ok(Action::Done)
}

/// Writes `<archive dir>/<name>.json`: the deleted tenant's spec and when it went.
fn archive(ctx: &Context, tenant: &Tenant) -> Result<(), ReconcileError> {
    let record = json!({
        "name": tenant.name_any(),
        "uid": tenant.meta().uid,
        "spec": tenant.spec,
        "deletedAt": tenant.meta().deletion_timestamp,
    });
    std::fs::create_dir_all(&ctx.archive_dir)
        .and_then(|()| {
            std::fs::write(
                ctx.archive_dir.join(format!("{}.json", tenant.name_any())),
                record.to_string(),
            )
        })
        .map_err(|e| ReconcileError::Retry(format!("archive: {e}")))
}

/// The informers and controller of the operator, ready to run.
pub fn controller(
    client: &kube::Client,
    metrics: Option<&plinth_runtime::Metrics>,
) -> (Controller<Tenant>, Cache<Tenant>) {
    let tenants = Informer::spawn(Api::<Tenant>::all(client.clone()), Vec::new());
    let namespaces = Informer::spawn(Api::<Namespace>::all(client.clone()), Vec::new());
    let configs = Informer::spawn(Api::<ConfigMap>::all(client.clone()), Vec::new());
    let accounts = Informer::spawn(Api::<ServiceAccount>::all(client.clone()), Vec::new());
    let mut controller = Controller::new(&tenants)
        .owns(&namespaces)
        .owns(&configs)
        .owns(&accounts)
        .concurrency(4);
    if let Some(metrics) = metrics {
        // The operator registers one controller named `tenant` on each fresh metrics set.
        controller = match controller.metrics("tenant", metrics) {
            Ok(named) => named,
            Err(duplicate) => panic!("{duplicate}"),
        };
    }
    (controller, tenants.cache())
}
