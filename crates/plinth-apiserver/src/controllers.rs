//! The CRD controller, part of the API server because it changes what the server serves: every
//! CRD's versions are served as soon as it is established, and a deleted CRD takes its custom
//! resources with it. (The other built-in controllers live in `plinth-controllers`.)

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use plinth_core::StatusReason;
use serde_json::{Value, json};
use tokio::sync::watch;

use plinth_registry::resources::ResourceDef;
use plinth_registry::{Client, DeleteOptions, ListOptions, Part, Patch, WriteOptions};

/// Starts the loops; they end when `stopping` becomes true.
pub(crate) fn spawn(registry: Client, stopping: watch::Receiver<bool>, served: ServedCrds) {
    tokio::spawn(crds(registry, stopping, served));
}

/// Which resources each CRD (by name) has registered.
pub(crate) type ServedCrds = Arc<Mutex<HashMap<String, Vec<(String, String, String)>>>>;

/// Serves the versions of every stored CRD; called once before the server accepts requests.
pub(crate) async fn register_existing_crds(registry: &Client, served: &ServedCrds) {
    let Some(def) =
        registry
            .resources
            .get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    else {
        return;
    };
    match registry.list(&def, None, &ListOptions::default()).await {
        Ok(list) => {
            for crd in list["items"].as_array().into_iter().flatten() {
                let name = plinth_core::meta::name(crd).unwrap_or("").to_owned();
                register(registry, served, &name, crd);
            }
        }
        Err(e) => tracing::warn!(error = %e.message, "could not list CRDs at start"),
    }
}

fn register(registry: &Client, served: &ServedCrds, name: &str, crd: &Value) {
    let defs = plinth_types::apiextensions::served_defs(crd);
    let keys: Vec<(String, String, String)> = defs
        .iter()
        .map(|d| {
            (
                d.group_version.group.clone(),
                d.group_version.version.clone(),
                d.plural.clone(),
            )
        })
        .collect();
    let mut served = served.lock().unwrap_or_else(PoisonError::into_inner);
    for old in served
        .get(name)
        .into_iter()
        .flatten()
        .filter(|k| !keys.contains(k))
    {
        registry.resources.remove(&old.0, &old.1, &old.2);
    }
    for def in defs {
        registry.resources.add(def);
    }
    served.insert(name.to_owned(), keys);
}

fn unregister(registry: &Client, served: &ServedCrds, name: &str) {
    let removed = served
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(name);
    for (group, version, plural) in removed.into_iter().flatten() {
        registry.resources.remove(&group, &version, &plural);
    }
}

async fn crds(registry: Client, stopping: watch::Receiver<bool>, served: ServedCrds) {
    let cleaning: Arc<Mutex<HashSet<String>>> = Arc::default();
    loop {
        let Some((def, mut events)) = registry
            .watch_until_stopped(
                ("apiextensions.k8s.io", "customresourcedefinitions"),
                &stopping,
                "CRD controller",
            )
            .await
        else {
            return;
        };
        while let Some(event) = events.next().await {
            let object = event.object();
            let Some(name) = plinth_core::meta::name(&object).map(str::to_owned) else {
                continue;
            };
            match event.kind {
                "ADDED" | "MODIFIED" => {
                    register(&registry, &served, &name, &object);
                    ensure_crd_status(&registry, &def, &name, &object).await;
                    let deleting = object
                        .pointer("/metadata/deletionTimestamp")
                        .is_some_and(|v| !v.is_null());
                    if deleting
                        && cleaning
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert(name.clone())
                    {
                        let (registry, cleaning, crd) =
                            (registry.clone(), cleaning.clone(), object.clone());
                        tokio::spawn(async move {
                            clean_up_crd(&registry, &name, &crd).await;
                            cleaning
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .remove(&name);
                        });
                    }
                }
                "DELETED" => unregister(&registry, &served, &name),
                _ => {}
            }
        }
        if *stopping.borrow() {
            return;
        }
    }
}

async fn ensure_crd_status(registry: &Client, def: &ResourceDef, name: &str, crd: &Value) {
    let status = plinth_types::apiextensions::desired_status(
        crd,
        &plinth_core::meta::format_time(plinth_registry::now()),
    );
    if crd.get("status") == Some(&status) {
        return;
    }
    let mut updated = crd.clone();
    updated["status"] = status;
    match registry
        .update(
            def,
            None,
            name,
            updated,
            Part::Status,
            &WriteOptions::internal("kube-apiserver"),
        )
        .await
    {
        Ok(_) => {}
        Err(e) if matches!(e.reason, StatusReason::Conflict | StatusReason::NotFound) => {}
        Err(e) => tracing::warn!(crd = name, error = %e.message, "could not update CRD status"),
    }
}

/// Deletes every custom resource of a deleted CRD, then releases its cleanup finalizer.
async fn clean_up_crd(registry: &Client, name: &str, crd: &Value) {
    if let Some(def) = plinth_types::apiextensions::served_defs(crd)
        .into_iter()
        .next()
    {
        loop {
            let mut remaining = 0usize;
            match registry.list(&def, None, &ListOptions::default()).await {
                Ok(list) => {
                    for item in list["items"].as_array().cloned().unwrap_or_default() {
                        let item_name = plinth_core::meta::name(&item).unwrap_or("").to_owned();
                        let ns = plinth_core::meta::namespace(&item).map(str::to_owned);
                        match registry
                            .delete(&def, ns.as_deref(), &item_name, &DeleteOptions::default())
                            .await
                        {
                            Ok(deleted) if deleted.gone => {}
                            Err(e) if e.reason == StatusReason::NotFound => {}
                            _ => remaining += 1,
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(crd = name, error = %e.message, "could not list custom resources to delete");
                    remaining += 1;
                }
            }
            if remaining == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let Some(crd_def) =
        registry
            .resources
            .get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    else {
        return;
    };
    let Ok(current) = registry.get(&crd_def, None, name).await else {
        return;
    };
    let kept: Vec<String> = plinth_core::meta::finalizers(&current)
        .into_iter()
        .filter(|f| f != plinth_types::apiextensions::CLEANUP_FINALIZER)
        .collect();
    let patch = Patch::merge(json!({"metadata": {"finalizers": kept}}));
    if let Err(e) = registry
        .patch(
            &crd_def,
            None,
            name,
            patch,
            Part::Main,
            &WriteOptions::internal("kube-apiserver"),
        )
        .await
        && e.reason != StatusReason::NotFound
    {
        tracing::warn!(crd = name, error = %e.message, "could not release the CRD cleanup finalizer");
    }
}
