//! Copies of cluster-wide objects the agent follows (Services and EndpointSlices for its
//! proxy; pods, namespaces and NetworkPolicies for its policy rules): one watch per
//! resource, each kept in a map by namespace and name, replaced whole when a watch restarts.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::runtime::watcher;
use serde_json::Value;

/// Objects by namespace and name.
pub(crate) type Objects = BTreeMap<(String, String), Value>;

/// One resource's events, as JSON.
pub(crate) type Events = BoxStream<'static, Result<watcher::Event<Value>, watcher::Error>>;

/// The events of a watch of every `K`, as JSON.
pub(crate) fn watch<K>(api: kube::Api<K>) -> Events
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
    K: Send + 'static,
{
    watcher(api, watcher::Config::default())
        .map(|e| e.map(as_json))
        .boxed()
}

/// A watch event with its object as JSON.
fn as_json<K: serde::Serialize>(event: watcher::Event<K>) -> watcher::Event<Value> {
    let json = |k: K| serde_json::to_value(k).unwrap_or(Value::Null);
    match event {
        watcher::Event::Apply(k) => watcher::Event::Apply(json(k)),
        watcher::Event::Delete(k) => watcher::Event::Delete(json(k)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(k) => watcher::Event::InitApply(json(k)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

fn key(object: &Value) -> (String, String) {
    (
        plinth_core::meta::namespace(object)
            .unwrap_or("")
            .to_owned(),
        plinth_core::meta::name(object).unwrap_or("").to_owned(),
    )
}

/// The objects of `store`, as they are now.
pub(crate) fn values(store: &Mutex<Objects>) -> Vec<Value> {
    store
        .lock()
        .map(|s| s.values().cloned().collect())
        .unwrap_or_default()
}

/// Follows `watches` (each with the map it fills) until `stopping`, calling `changed` after
/// every event that changed a map.
pub(crate) async fn follow(
    watches: Vec<(Events, &Mutex<Objects>)>,
    mut changed: impl FnMut(),
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let (streams, stores): (Vec<_>, Vec<_>) = watches
        .into_iter()
        .enumerate()
        .map(|(i, (events, store))| (events.map(move |e| (i, e)).boxed(), store))
        .unzip();
    let mut events = futures::stream::select_all(streams);
    let mut staging: Vec<Objects> = vec![Objects::new(); stores.len()];
    loop {
        let next = tokio::select! {
            next = events.next() => next,
            _ = stopping.wait_for(|s| *s) => break,
        };
        let Some((i, event)) = next else {
            break;
        };
        let store = stores[i];
        match event {
            Ok(watcher::Event::Apply(v)) => {
                if let Ok(mut s) = store.lock() {
                    s.insert(key(&v), v);
                }
            }
            Ok(watcher::Event::Delete(v)) => {
                if let Ok(mut s) = store.lock() {
                    s.remove(&key(&v));
                }
            }
            Ok(watcher::Event::Init) => {
                staging[i].clear();
                continue;
            }
            Ok(watcher::Event::InitApply(v)) => {
                staging[i].insert(key(&v), v);
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                if let Ok(mut s) = store.lock() {
                    *s = std::mem::take(&mut staging[i]);
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "watch failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        }
        changed();
    }
}
