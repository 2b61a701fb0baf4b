//! The control loops the API server needs to behave like a cluster from the first request:
//! every namespace gets its `default` ServiceAccount, and a deleted namespace is emptied and
//! then removed. (They move to `plinth-controllers` with the garbage collector.)

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use plinth_core::StatusReason;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::registry::{DeleteOptions, ListOptions, Registry, WriteOptions};

/// Starts the loops; they end when `stopping` becomes true.
pub(crate) fn spawn(registry: Registry, stopping: watch::Receiver<bool>) {
    tokio::spawn(namespaces(registry, stopping));
}

async fn namespaces(registry: Registry, stopping: watch::Receiver<bool>) {
    let finalizing: Arc<Mutex<HashSet<String>>> = Arc::default();
    loop {
        let Some(def) = registry.resources.get("", "v1", "namespaces") else {
            return;
        };
        let events = match registry
            .watch(def, None, ListOptions::default(), false, false)
            .await
        {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(error = %e.message, "namespace controller: watch failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut stop = stopping.clone();
        let mut events = events.take_until(Box::pin(async move {
            let _ = stop.wait_for(|s| *s).await;
        }));
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
