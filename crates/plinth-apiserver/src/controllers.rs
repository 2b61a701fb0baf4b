//! The control loops the API server needs to behave like a cluster from the first request:
//! every namespace gets its `default` ServiceAccount, and a deleted namespace is emptied and
//! then removed; every CRD's versions are served as soon as it is established, and a deleted
//! CRD takes its custom resources with it. (The namespace loops move to `plinth-controllers`
//! with the garbage collector.)

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use plinth_core::StatusReason;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::registry::{DeleteOptions, ListOptions, Registry, WatchEvent, WriteOptions};
use crate::resources::ResourceDef;

/// Starts the loops; they end when `stopping` becomes true.
pub(crate) fn spawn(registry: Registry, stopping: watch::Receiver<bool>, served: ServedCrds) {
    tokio::spawn(namespaces(registry.clone(), stopping.clone()));
    tokio::spawn(crds(registry, stopping, served));
}

/// A watch of every object of a v1 resource, from a fresh list, that ends when the server stops;
/// retried after a failure. `None` once the server is stopping or the resource is gone.
async fn watch_until_stopped(
    registry: &Registry,
    (group, plural): (&str, &str),
    stopping: &watch::Receiver<bool>,
    who: &str,
) -> Option<(
    Arc<ResourceDef>,
    futures::stream::BoxStream<'static, WatchEvent>,
)> {
    loop {
        if *stopping.borrow() {
            return None;
        }
        let def = registry.resources.get(group, "v1", plural)?;
        match registry
            .watch(def.clone(), None, ListOptions::default(), false, false)
            .await
        {
            Ok(events) => {
                let mut stop = stopping.clone();
                let events = events.take_until(Box::pin(async move {
                    let _ = stop.wait_for(|s| *s).await;
                }));
                return Some((def, events.boxed()));
            }
            Err(e) => {
                tracing::warn!(error = %e.message, "{who}: watch failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Which resources each CRD (by name) has registered.
pub(crate) type ServedCrds = Arc<Mutex<HashMap<String, Vec<(String, String, String)>>>>;

/// Serves the versions of every stored CRD; called once before the server accepts requests.
pub(crate) async fn register_existing_crds(registry: &Registry, served: &ServedCrds) {
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

fn register(registry: &Registry, served: &ServedCrds, name: &str, crd: &Value) {
    let defs = crate::crd::served_defs(crd);
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

fn unregister(registry: &Registry, served: &ServedCrds, name: &str) {
    let removed = served
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(name);
    for (group, version, plural) in removed.into_iter().flatten() {
        registry.resources.remove(&group, &version, &plural);
    }
}

async fn crds(registry: Registry, stopping: watch::Receiver<bool>, served: ServedCrds) {
    let cleaning: Arc<Mutex<HashSet<String>>> = Arc::default();
    loop {
        let Some((def, mut events)) = watch_until_stopped(
            &registry,
            ("apiextensions.k8s.io", "customresourcedefinitions"),
            &stopping,
            "CRD controller",
        )
        .await
        else {
            return;
        };
        while let Some(event) = events.next().await {
            let Some(name) = plinth_core::meta::name(&event.object).map(str::to_owned) else {
                continue;
            };
            match event.kind {
                "ADDED" | "MODIFIED" => {
                    register(&registry, &served, &name, &event.object);
                    ensure_crd_status(&registry, &def, &name, &event.object).await;
                    let deleting = event
                        .object
                        .pointer("/metadata/deletionTimestamp")
                        .is_some_and(|v| !v.is_null());
                    if deleting
                        && cleaning
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert(name.clone())
                    {
                        let (registry, cleaning, crd) =
                            (registry.clone(), cleaning.clone(), event.object.clone());
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

async fn ensure_crd_status(registry: &Registry, def: &ResourceDef, name: &str, crd: &Value) {
    let status =
        crate::crd::desired_status(crd, &plinth_core::meta::format_time(crate::registry::now()));
    if crd.get("status") == Some(&status) {
        return;
    }
    let mut updated = crd.clone();
    updated["status"] = status;
    match registry
        .update(def, None, name, updated, true, &WriteOptions::default())
        .await
    {
        Ok(_) => {}
        Err(e) if matches!(e.reason, StatusReason::Conflict | StatusReason::NotFound) => {}
        Err(e) => tracing::warn!(crd = name, error = %e.message, "could not update CRD status"),
    }
}

/// Deletes every custom resource of a deleted CRD, then releases its cleanup finalizer.
async fn clean_up_crd(registry: &Registry, name: &str, crd: &Value) {
    if let Some(def) = crate::crd::served_defs(crd).into_iter().next() {
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
                            Ok((_, true)) => {}
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
        .filter(|f| f != crate::crd::CLEANUP_FINALIZER)
        .collect();
    let patch = json!({"metadata": {"finalizers": kept}}).to_string();
    let body = crate::registry::PatchBody {
        content_type: "application/merge-patch+json",
        body: patch.as_bytes(),
    };
    if let Err(e) = registry
        .patch(&crd_def, None, name, body, false, &WriteOptions::default())
        .await
        && e.reason != StatusReason::NotFound
    {
        tracing::warn!(crd = name, error = %e.message, "could not release the CRD cleanup finalizer");
    }
}

async fn namespaces(registry: Registry, stopping: watch::Receiver<bool>) {
    let finalizing: Arc<Mutex<HashSet<String>>> = Arc::default();
    loop {
        let Some((_, mut events)) = watch_until_stopped(
            &registry,
            ("", "namespaces"),
            &stopping,
            "namespace controller",
        )
        .await
        else {
            return;
        };
        while let Some(event) = events.next().await {
            if !matches!(event.kind, "ADDED" | "MODIFIED") {
                continue;
            }
            let Some(name) = plinth_core::meta::name(&event.object).map(str::to_owned) else {
                continue;
            };
            let deleting = event
                .object
                .pointer("/metadata/deletionTimestamp")
                .is_some_and(|v| !v.is_null());
            if deleting {
                if finalizing
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(name.clone())
                {
                    let (registry, finalizing) = (registry.clone(), finalizing.clone());
                    tokio::spawn(async move {
                        finalize(&registry, &name).await;
                        finalizing
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .remove(&name);
                    });
                }
            } else {
                ensure_default_service_account(&registry, &name).await;
            }
        }
        if *stopping.borrow() {
            return;
        }
    }
}

async fn ensure_default_service_account(registry: &Registry, namespace: &str) {
    let Some(def) = registry.resources.get("", "v1", "serviceaccounts") else {
        return;
    };
    if registry.get(&def, Some(namespace), "default").await.is_ok() {
        return;
    }
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": namespace}});
    match registry
        .create(&def, Some(namespace), sa, &WriteOptions::default())
        .await
    {
        Ok(_) => {}
        Err(e)
            if matches!(
                e.reason,
                StatusReason::AlreadyExists | StatusReason::Forbidden | StatusReason::NotFound
            ) => {}
        Err(e) => {
            tracing::warn!(namespace, error = %e.message, "could not create the default service account")
        }
    }
}

/// Deletes everything in a terminating namespace, waits for finalizers, then releases the
/// namespace's own `kubernetes` finalizer so that it goes.
async fn finalize(registry: &Registry, namespace: &str) {
    loop {
        let mut remaining = 0usize;
        for def in registry.resources.namespaced() {
            let Ok(list) = registry
                .list(&def, Some(namespace), &ListOptions::default())
                .await
            else {
                remaining += 1;
                continue;
            };
            for item in list["items"].as_array().cloned().unwrap_or_default() {
                let name = plinth_core::meta::name(&item).unwrap_or("").to_owned();
                match registry
                    .delete(&def, Some(namespace), &name, &DeleteOptions::default())
                    .await
                {
                    Ok((_, true)) => {}
                    Ok((_, false)) => remaining += 1,
                    Err(e) if e.reason == StatusReason::NotFound => {}
                    Err(e) => {
                        tracing::warn!(namespace, name, error = %e.message, "could not delete namespace content");
                        remaining += 1;
                    }
                }
            }
        }
        if remaining == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let Some(def) = registry.resources.get("", "v1", "namespaces") else {
        return;
    };
    let Ok(ns) = registry.get(&def, None, namespace).await else {
        return;
    };
    let kept: Vec<Value> = ns
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter(|v| *v != "kubernetes").cloned().collect())
        .unwrap_or_default();
    let patch = json!({"spec": {"finalizers": kept}}).to_string();
    if let Err(e) = registry
        .patch(
            &def,
            None,
            namespace,
            crate::registry::PatchBody {
                content_type: "application/merge-patch+json",
                body: patch.as_bytes(),
            },
            false,
            &WriteOptions::default(),
        )
        .await
        && e.reason != StatusReason::NotFound
    {
        tracing::warn!(namespace, error = %e.message, "could not finalize the namespace");
    }
}
