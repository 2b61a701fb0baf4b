//! The mirror operator: a `ConfigMirror` copies one ConfigMap of its namespace into the
//! namespaces it lists and keeps the copies in step (edits to the source or to a copy, targets
//! added or dropped); its finalizer deletes the copies when the mirror goes (owner references
//! cannot cross namespaces). Written only against plinth-runtime's controller builder.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch};
use kube::{CustomResource, ResourceExt};
use plinth_runtime::BuildError;
use plinth_runtime::helpers::{FinalizerEvent, finalizer};
use plinth_runtime::{Action, Cache, Manager, ObjectClient, ObjectKey, ReconcileError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Removes a mirror's copies before the mirror goes.
pub const FINALIZER: &str = "examples.plinth.dev/copies";
/// The field manager of the copies.
pub const MANAGER: &str = "mirror-operator";
/// On each copy: `<namespace>/<name>` of its mirror.
pub const MIRROR: &str = "examples.plinth.dev/mirror";

/// Copy ConfigMap `source` (of the mirror's namespace) into each of `targets`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "examples.plinth.dev",
    version = "v1",
    kind = "ConfigMirror",
    namespaced
)]
#[kube(status = "ConfigMirrorStatus")]
pub struct ConfigMirrorSpec {
    /// The ConfigMap copied.
    pub source: String,
    /// The namespaces copied into.
    #[serde(default)]
    pub targets: Vec<String>,
}

/// How many copies are in step.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct ConfigMirrorStatus {
    /// Copies written by the last reconcile (0 while the source is missing).
    pub copies: usize,
}

/// What every reconcile shares.
pub struct Context {
    client: kube::Client,
    writer: ObjectClient,
    configmaps: Cache<ConfigMap>,
}

/// Registers the controller on `manager`: mirrors, and every ConfigMap (sources and copies).
///
/// # Errors
/// If a `configmirror` controller is registered on `manager` already.
pub fn register(manager: &mut Manager, client: &kube::Client) -> Result<(), BuildError> {
    let mirrors = manager
        .informer(|| Api::<ConfigMirror>::all(client.clone()))
        .cache();
    let configmaps = manager
        .informer(|| Api::<ConfigMap>::all(client.clone()))
        .cache();
    let context = Context {
        client: client.clone(),
        writer: ObjectClient::new(client.clone()),
        configmaps,
    };
    manager
        .controller(Api::<ConfigMirror>::all(client.clone()))
        .watches(Api::<ConfigMap>::all(client.clone()), move |cm| {
            mirrors_of(&mirrors, cm)
        })
        .run(reconcile, Arc::new(context))
}

/// The mirrors a ConfigMap change concerns: the mirror of a copy, the mirrors of a source.
fn mirrors_of(mirrors: &Cache<ConfigMirror>, cm: &ConfigMap) -> Vec<ObjectKey> {
    if let Some((namespace, name)) = cm.annotations().get(MIRROR).and_then(|m| m.split_once('/')) {
        return vec![ObjectKey {
            namespace: Some(namespace.into()),
            name: name.into(),
        }];
    }
    let sources =
        |m: &&Arc<ConfigMirror>| m.namespace() == cm.namespace() && m.spec.source == cm.name_any();
    mirrors
        .list()
        .iter()
        .filter(sources)
        .map(|m| ObjectKey::of(&**m))
        .collect()
}

async fn reconcile(mirror: Arc<ConfigMirror>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let api = Api::<ConfigMirror>::namespaced(
        ctx.client.clone(),
        &mirror.namespace().unwrap_or_default(),
    );
    finalizer(&api, FINALIZER, mirror, |event| async move {
        match event {
            FinalizerEvent::Apply(mirror) => copy(&mirror, &ctx).await,
            FinalizerEvent::Cleanup(mirror) => remove_copies(&mirror, &ctx, &[]).await,
        }
    })
    .await
}

/// Writes a copy into each target, removes copies from namespaces no longer targeted,
/// reports the count.
async fn copy(mirror: &ConfigMirror, ctx: &Context) -> Result<Action, ReconcileError> {
    let namespace = mirror.namespace().unwrap_or_default();
    let source_key = ObjectKey {
        namespace: Some(namespace.clone()),
        name: mirror.spec.source.clone(),
    };
    let mut copies = 0;
    if let Some(source) = ctx.configmaps.get(&source_key) {
        for target in &mirror.spec.targets {
            let copy = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(mirror.name_any()),
                    namespace: Some(target.clone()),
                    annotations: Some(
                        [(
                            MIRROR.to_owned(),
                            format!("{namespace}/{}", mirror.name_any()),
                        )]
                        .into(),
                    ),
                    ..ObjectMeta::default()
                },
                data: source.data.clone(),
                binary_data: source.binary_data.clone(),
                ..ConfigMap::default()
            };
            ctx.writer.apply(&copy, MANAGER).await?;
            copies += 1;
        }
    }
    remove_copies(mirror, ctx, &mirror.spec.targets).await?;
    let status = serde_json::json!({"status": ConfigMirrorStatus { copies }});
    ctx.writer
        .patch_status(mirror, &Patch::Merge(status))
        .await?;
    Ok(Action::Done)
}

/// Deletes the mirror's copies outside `keep`.
async fn remove_copies(
    mirror: &ConfigMirror,
    ctx: &Context,
    keep: &[String],
) -> Result<Action, ReconcileError> {
    let owner = format!(
        "{}/{}",
        mirror.namespace().unwrap_or_default(),
        mirror.name_any()
    );
    for cm in ctx.configmaps.list() {
        let stale = !keep.contains(&cm.namespace().unwrap_or_default());
        if cm.annotations().get(MIRROR) == Some(&owner) && stale {
            match ctx.writer.delete(&*cm).await {
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                other => other?,
            }
        }
    }
    Ok(Action::Done)
}
