//! The tenant operator: for each cluster-scoped `Tenant` it keeps a namespace `tenant-<name>`,
//! a ServiceAccount `tenant-admin` and a ConfigMap `tenant-config` (the tenant's `config`) in it,
//! all owned by the Tenant; its status says where and whether it is ready; a finalizer writes a
//! record of each deleted tenant to the archive directory. Every piece of plinth-runtime shows
//! here: informers, an owning controller, server-side apply, finalizers, conditions, events,
//! and (in `main.rs`) the manager with leader election and metrics; [`webhooks`] defaults and
//! validates Tenants at admission.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, Patch, PatchParams};
use kube::{CustomResource, CustomResourceExt, Resource, ResourceExt};
use plinth_runtime::BuildError;
use plinth_runtime::helpers::{
    Condition, EventRecorder, FinalizerEvent, controller_reference, finalizer, set_condition,
};
use plinth_runtime::{Action, InformerOptions, Manager, ReconcileError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

pub mod v1beta1;
pub mod webhooks;

/// The finalizer that archives a deleted tenant.
pub const FINALIZER: &str = "platform.plinth.dev/archive";
/// The field manager of everything this operator applies.
pub const MANAGER: &str = "tenant-operator";

// ANCHOR: types
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
// ANCHOR_END: types

/// The Tenant CRD, generated from the types above (v1alpha1 only).
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    Tenant::crd()
}

/// The Tenant CRD with both versions, stored in v1beta1 and converted by the operator's
/// webhook at `server` (`https://host:port`, or a Service; served by `tenant-operator
/// webhook`).
///
/// # Errors
/// The two versions' CRDs do not merge (they always do; kube's merge checks it).
pub fn crd_with_conversion<'a>(
    server: impl Into<plinth_runtime::webhook::WebhookEndpoint<'a>>,
) -> Result<
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    String,
> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    let mut crd =
        kube::core::crd::merge_crds(vec![Tenant::crd(), v1beta1::Tenant::crd()], "v1beta1")
            .map_err(|e| e.to_string())?;
    crd.spec.conversion = Some(ext::CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(ext::WebhookConversion {
            client_config: Some(
                serde_json::from_value(server.into().client_config(webhooks::CONVERT_PATH))
                    .map_err(|e| e.to_string())?,
            ),
            conversion_review_versions: vec!["v1".into()],
        }),
    });
    Ok(crd)
}

/// The RBAC the operator needs, and no more, for running as ServiceAccount
/// `tenant-operator` in `namespace`: the account, a ClusterRole for what it manages
/// (Tenants and their status, the namespaces, ServiceAccounts and ConfigMaps it keeps, the
/// events it records) bound to it, and a Role for its leader-election Lease in `namespace`.
pub fn rbac(namespace: &str) -> Vec<serde_json::Value> {
    use serde_json::json;
    let all = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let group = "rbac.authorization.k8s.io";
    let subject =
        json!([{"kind": "ServiceAccount", "name": "tenant-operator", "namespace": namespace}]);
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "tenant-operator", "namespace": namespace}}),
        json!({"apiVersion": format!("{group}/v1"), "kind": "ClusterRole",
        "metadata": {"name": "tenant-operator"},
        "rules": [
            {"apiGroups": ["platform.plinth.dev"], "resources": ["tenants"],
                "verbs": ["get", "list", "watch", "update", "patch"]},
            {"apiGroups": ["platform.plinth.dev"], "resources": ["tenants/status"],
                "verbs": ["get", "update", "patch"]},
            {"apiGroups": [""], "resources": ["namespaces", "serviceaccounts", "configmaps"],
                "verbs": all},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"],
                "verbs": ["create", "patch"]},
        ]}),
        json!({"apiVersion": format!("{group}/v1"), "kind": "ClusterRoleBinding",
            "metadata": {"name": "tenant-operator"},
            "roleRef": {"apiGroup": group, "kind": "ClusterRole", "name": "tenant-operator"},
            "subjects": subject}),
        json!({"apiVersion": format!("{group}/v1"), "kind": "Role",
            "metadata": {"name": "tenant-operator-leader-election", "namespace": namespace},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                "verbs": ["get", "create", "update"]}]}),
        json!({"apiVersion": format!("{group}/v1"), "kind": "RoleBinding",
            "metadata": {"name": "tenant-operator-leader-election", "namespace": namespace},
            "roleRef": {"apiGroup": group, "kind": "Role", "name": "tenant-operator-leader-election"},
            "subjects": subject}),
    ]
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
        .map_err(ReconcileError::from)
    }
}

// ANCHOR: reconcile
/// Reconciles one tenant (level-triggered): the finalizer first, then its objects and status;
/// a deleted tenant is archived before the finalizer goes (the garbage collector removes what
/// it owns).
///
/// # Errors
/// A retryable error when a write fails.
pub async fn reconcile(tenant: Arc<Tenant>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let tenants: Api<Tenant> = Api::all(ctx.client.clone());
    let writer = tenants.clone();
    finalizer(&tenants, FINALIZER, tenant, |event| async move {
        match event {
            FinalizerEvent::Apply(tenant) => provision(&tenant, &ctx, &writer).await,
            FinalizerEvent::Cleanup(tenant) => archive(&ctx, &tenant).map(|()| Action::Done),
        }
    })
    .await
}
// ANCHOR_END: reconcile

/// Applies the tenant's namespace, ServiceAccount and ConfigMap, and reports its status.
async fn provision(
    tenant: &Tenant,
    ctx: &Context,
    tenants: &Api<Tenant>,
) -> Result<Action, ReconcileError> {
    let name = tenant.name_any();
    let owner = controller_reference(tenant)
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
        .await?;
    if changed {
        let _ = ctx
            .recorder
            .publish(
                tenant,
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

/// Cache options dropping `managedFields`.
fn lean<K: kube::Resource + 'static>() -> InformerOptions<K> {
    InformerOptions::default().strip_managed_fields()
}

// ANCHOR: register
/// Registers the tenant controller on `manager`: Tenants, and the namespaces, ConfigMaps and
/// ServiceAccounts they own — cached without `managedFields`, which the operator never reads.
///
/// # Errors
/// If a `tenant` controller is registered on `manager` already.
pub fn register(manager: &mut Manager, context: Context) -> Result<(), BuildError> {
    let client = context.client.clone();
    manager
        .controller_with(Api::<Tenant>::all(client.clone()), lean())
        .owns_with(Api::<Namespace>::all(client.clone()), lean())
        .owns_with(Api::<ConfigMap>::all(client.clone()), lean())
        .owns_with(Api::<ServiceAccount>::all(client), lean())
        .named("tenant")
        .concurrency(4)
        .run(reconcile, Arc::new(context))
}
// ANCHOR_END: register
