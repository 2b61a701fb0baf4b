//! The volume controller (kube-controller-manager's `persistentvolume-binder`, with a local
//! provisioner): a pending claim is bound to an available volume that fits it (class,
//! access modes, size, the volume it names), or — when its StorageClass's provisioner is
//! Plinth's — to a new volume, a directory under the volumes directory. A volume whose claim
//! is gone is deleted (`Delete`) or `Released` (`Retain`). It reads claims, volumes and
//! classes from the shared informers; a bind is decided again on the stored objects.

use plinth_core::At as _;
use std::path::PathBuf;
use std::time::Duration;

use plinth_core::ApiError;
use plinth_registry::{Client, DeleteOptions, Part, WriteOptions};
use plinth_types::storage::storageclass::LOCAL_PROVISIONER;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::informer::{Change, Informer, Queue, SharedInformers};

const MANAGER: &str = "persistentvolume-binder";

/// The one key the controller's queue holds: every pass looks at every claim and volume.
const PASS: &str = "pass";
/// How long after a pass the next one comes without a change heard of.
const RESYNC: Duration = Duration::from_secs(5);

/// What a pass reads: the shared informers of claims, volumes and classes.
struct Caches {
    claims: Informer,
    volumes: Informer,
    classes: Informer,
}

impl Caches {
    fn values(informer: &Informer) -> Vec<Value> {
        informer.all_values().iter().map(|v| v.to_value()).collect()
    }
}

/// Starts the controller on the shared informers of claims, volumes and StorageClasses;
/// provisioned volumes live under `dir`. It ends with `stopping`.
pub fn spawn_volume_controller(
    registry: Client,
    informers: &SharedInformers,
    dir: PathBuf,
    mut stopping: watch::Receiver<bool>,
) {
    let queue = Queue::default();
    let pass = |queue: &Queue| {
        let queue = queue.clone();
        move |_: Change<'_>| queue.add(PASS.to_owned())
    };
    let caches = Caches {
        claims: informers.start(("", "persistentvolumeclaims"), pass(&queue)),
        volumes: informers.start(("", "persistentvolumes"), pass(&queue)),
        classes: informers.start(("storage.k8s.io", "storageclasses"), pass(&queue)),
    };
    tokio::spawn(async move {
        for cache in [&caches.claims, &caches.volumes, &caches.classes] {
            cache.synced().await;
        }
        queue.add(PASS.to_owned());
        while queue.next(&mut stopping).await.is_some() {
            sync(&registry, &caches, &dir).await;
            queue.add_after(PASS.to_owned(), RESYNC);
        }
    });
}

fn text<'a>(o: &'a Value, pointer: &str) -> &'a str {
    o.at(pointer).and_then(Value::as_str).unwrap_or("")
}

fn bytes(o: &Value, pointer: &str) -> i64 {
    o.at(pointer)
        .and_then(plinth_core::quantity::bytes)
        .unwrap_or(0)
}

/// Whether `volume` can take `claim`.
fn fits(volume: &Value, claim: &Value) -> bool {
    let free = volume.at("/spec/claimRef").is_none_or(Value::is_null)
        && text(volume, "/status/phase") == "Available";
    let class = text(volume, "/spec/storageClassName") == text(claim, "/spec/storageClassName");
    let modes = claim["spec"]["accessModes"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|m| {
            volume["spec"]["accessModes"]
                .as_array()
                .is_some_and(|v| v.contains(m))
        });
    let size =
        bytes(volume, "/spec/capacity/storage") >= bytes(claim, "/spec/resources/requests/storage");
    let named = text(claim, "/spec/volumeName");
    let by_name = named.is_empty() || named == text(volume, "/metadata/name");
    free && class && modes && size && by_name
}

async fn sync(registry: &Client, caches: &Caches, dir: &std::path::Path) {
    let (Some(pvs), Some(pvcs)) = (
        registry.resources.get("", "v1", "persistentvolumes"),
        registry.resources.get("", "v1", "persistentvolumeclaims"),
    ) else {
        return;
    };
    // The caches may be a moment behind this controller's own writes: a bind is decided again
    // on the stored objects (see `bind`), so a stale cache cannot bind twice.
    let classes = Caches::values(&caches.classes);
    let claims = Caches::values(&caches.claims);
    let mut volumes = Caches::values(&caches.volumes);
    let options = WriteOptions::internal(MANAGER);
    // New volumes become available.
    for volume in &mut volumes {
        if text(volume, "/status/phase") == "Pending"
            && volume.at("/spec/claimRef").is_none_or(Value::is_null)
        {
            let name = text(volume, "/metadata/name").to_owned();
            if let Ok(Some(written)) = registry
                .modify(&pvs, None, &name, Part::Status, &options, |current| {
                    current["status"] = json!({"phase": "Available"});
                    Ok(true)
                })
                .await
            {
                *volume = written.object;
            }
        }
    }
    for claim in &claims {
        if text(claim, "/status/phase") != "Pending"
            || claim
                .at("/metadata/deletionTimestamp")
                .is_some_and(|t| !t.is_null())
        {
            continue;
        }
        let existing = volumes.iter().find(|v| fits(v, claim)).cloned();
        let volume = match existing {
            Some(volume) => Some(volume),
            None => provision(registry, &pvs, &classes, claim, dir).await,
        };
        if let Some(volume) = volume {
            bind(registry, &pvs, &pvcs, &volume, claim).await;
            volumes.retain(|v| v["metadata"]["name"] != volume["metadata"]["name"]);
        }
    }
    // Volumes whose claim is gone.
    for volume in &volumes {
        let Some(reference) = volume.at("/spec/claimRef").filter(|r| !r.is_null()) else {
            continue;
        };
        let present = claims.iter().any(|c| {
            c.at("/metadata/uid") == reference.get("uid")
                || (reference.get("uid").is_none_or(Value::is_null)
                    && c.at("/metadata/name") == reference.get("name")
                    && c.at("/metadata/namespace") == reference.get("namespace"))
        });
        if present || text(volume, "/status/phase") == "Released" {
            continue;
        }
        let name = text(volume, "/metadata/name").to_owned();
        if text(volume, "/spec/persistentVolumeReclaimPolicy") == "Delete" {
            let _ = registry
                .delete(&pvs, None, &name, &DeleteOptions::default())
                .await;
            if let Some(path) = volume.at("/spec/hostPath/path").and_then(Value::as_str)
                && std::path::Path::new(path).starts_with(dir)
            {
                let _ = std::fs::remove_dir_all(path);
            }
        } else {
            let _ = registry
                .modify(&pvs, None, &name, Part::Status, &options, |current| {
                    current["status"] = json!({"phase": "Released"});
                    Ok(true)
                })
                .await;
        }
    }
}

/// A new volume for `claim`, when its class is provisioned here.
async fn provision(
    registry: &Client,
    pvs: &plinth_registry::resources::ResourceDef,
    classes: &[Value],
    claim: &Value,
    dir: &std::path::Path,
) -> Option<Value> {
    let class_name = text(claim, "/spec/storageClassName");
    let class = classes
        .iter()
        .find(|c| text(c, "/metadata/name") == class_name)?;
    if text(class, "/provisioner") != LOCAL_PROVISIONER
        || !text(claim, "/spec/volumeName").is_empty()
    {
        return None;
    }
    let uid = text(claim, "/metadata/uid");
    let name = format!("pvc-{uid}");
    let path = dir.join(&name);
    let volume = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": LOCAL_PROVISIONER}},
        "spec": {
            "capacity": {"storage": claim.at("/spec/resources/requests/storage")},
            "accessModes": claim.at("/spec/accessModes"),
            "persistentVolumeReclaimPolicy": class.get("reclaimPolicy").cloned().unwrap_or(json!("Delete")),
            "storageClassName": class_name,
            "volumeMode": claim.at("/spec/volumeMode"),
            "hostPath": {"path": path.display().to_string(), "type": "DirectoryOrCreate"},
        },
    });
    match registry
        .create(pvs, None, volume, &WriteOptions::internal(MANAGER))
        .await
    {
        Ok(written) => Some(written.object),
        Err(e) if e.reason == plinth_core::StatusReason::AlreadyExists => {
            registry.get(pvs, None, &format!("pvc-{uid}")).await.ok()
        }
        Err(e) => {
            tracing::warn!(claim = text(claim, "/metadata/name"), error = %e.message, "volume not provisioned");
            None
        }
    }
}

async fn bind(
    registry: &Client,
    pvs: &plinth_registry::resources::ResourceDef,
    pvcs: &plinth_registry::resources::ResourceDef,
    volume: &Value,
    claim: &Value,
) {
    let options = WriteOptions::internal(MANAGER);
    let volume_name = text(volume, "/metadata/name").to_owned();
    let claim_name = text(claim, "/metadata/name").to_owned();
    let namespace = text(claim, "/metadata/namespace").to_owned();
    let reference = json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1",
        "namespace": namespace, "name": claim_name, "uid": claim.at("/metadata/uid")});
    let claim_uid = claim.at("/metadata/uid").cloned().unwrap_or(Value::Null);
    let bound = registry
        .modify(pvs, None, &volume_name, Part::Main, &options, |current| {
            // Bound meanwhile (to another claim): not this one's.
            if let Some(held) = current.at("/spec/claimRef").filter(|r| !r.is_null())
                && held.get("uid") != Some(&claim_uid)
            {
                return Err(ApiError::conflict(
                    &plinth_core::GroupResource::new("", "persistentvolumes"),
                    &volume_name,
                    "the volume is bound to another claim",
                ));
            }
            current["spec"]["claimRef"] = reference.clone();
            Ok(true)
        })
        .await;
    if bound.is_err() {
        return;
    }
    let _ = registry
        .modify(pvs, None, &volume_name, Part::Status, &options, |current| {
            current["status"] = json!({"phase": "Bound"});
            Ok(true)
        })
        .await;
    let _ = registry
        .modify(
            pvcs,
            Some(&namespace),
            &claim_name,
            Part::Main,
            &options,
            |current| {
                // Bound meanwhile (to another volume): left as it is.
                let held = current
                    .at("/spec/volumeName")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if !held.is_empty() && held != volume_name {
                    return Ok(false);
                }
                current["spec"]["volumeName"] = json!(volume_name);
                let annotations = &mut current["metadata"]["annotations"];
                if !annotations.is_object() {
                    *annotations = json!({});
                }
                annotations["pv.kubernetes.io/bind-completed"] = json!("yes");
                annotations["pv.kubernetes.io/bound-by-controller"] = json!("yes");
                Ok(true)
            },
        )
        .await;
    let capacity = volume.at("/spec/capacity").cloned().unwrap_or(json!({}));
    let modes = volume.at("/spec/accessModes").cloned().unwrap_or(json!([]));
    let _ = registry
        .modify(
            pvcs,
            Some(&namespace),
            &claim_name,
            Part::Status,
            &options,
            |current| {
                current["status"] =
                    json!({"phase": "Bound", "capacity": capacity, "accessModes": modes});
                Ok(true)
            },
        )
        .await;
}
