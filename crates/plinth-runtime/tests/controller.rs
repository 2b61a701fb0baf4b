//! A controller on plinth-runtime against an in-process Plinth: it keeps a copy of each
//! `src-*` ConfigMap, owned by it, and repairs the copy when someone deletes or edits it.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use plinth_runtime::{Action, Controller, Informer, ObjectKey, ReconcileError};
use plinth_testenv::TestEnv;
use serde_json::json;

mod common;
use common::eventually;

async fn data(api: &Api<ConfigMap>, name: &str) -> Option<BTreeMap<String, String>> {
    api.get_opt(name)
        .await
        .unwrap()
        .map(|cm| cm.data.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_keeps_owned_copies_in_step() {
    let env = TestEnv::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let informer = Informer::spawn(api.clone(), Vec::new());
    let cache = informer.cache();
    let controller = Controller::new(&informer).owns(&informer).concurrency(2);
    let queue = controller.queue();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    // Reads from the cache, writes to the server.
    let client = plinth_runtime::SplitClient::new(cache.clone(), api.clone());
    let reconcile = {
        let client = client.clone();
        move |key: ObjectKey| {
            let client = client.clone();
            Box::pin(async move {
                if !key.name.starts_with("src-") {
                    return Ok(Action::Done);
                }
                let Some(source) = client.get(&key) else {
                    return Ok(Action::Done);
                };
                let copy = json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("{}-copy", key.name),
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                     "name": key.name, "uid": source.metadata.uid,
                                     "controller": true, "blockOwnerDeletion": true}]},
                    "data": source.data.clone().unwrap_or_default(),
                });
                client
                    .apply(&format!("{}-copy", key.name), "copier", &copy)
                    .await
                    .map_err(|e| ReconcileError::Retry(e.to_string()))?;
                Ok(Action::Done)
            }) as plinth_runtime::ReconcileFuture
        }
    };
    let running = tokio::spawn(controller.run(reconcile, async {
        let _ = stop_rx.await;
    }));

    let mut source = ConfigMap::default();
    source.metadata.name = Some("src-a".into());
    source.data = Some(BTreeMap::from([("k".into(), "v1".into())]));
    api.create(&PostParams::default(), &source).await.unwrap();
    let want = |v: &str| Some(BTreeMap::from([("k".to_owned(), v.to_owned())]));
    eventually("the copy", || async {
        data(&api, "src-a-copy").await == want("v1")
    })
    .await;

    // Deleted: it comes back. Edited: it is restored.
    api.delete("src-a-copy", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the copy to come back", || async {
        data(&api, "src-a-copy").await == want("v1")
    })
    .await;
    api.patch(
        "src-a-copy",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "tampered"}})),
    )
    .await
    .unwrap();
    eventually("the copy to be restored", || async {
        data(&api, "src-a-copy").await == want("v1")
    })
    .await;
    // The source changes: the copy follows.
    api.patch(
        "src-a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v2"}})),
    )
    .await
    .unwrap();
    eventually("the copy to follow", || async {
        data(&api, "src-a-copy").await == want("v2")
    })
    .await;
    // Cache reads share objects; the owner index finds the copy.
    let uid = cache
        .get(&ObjectKey {
            namespace: Some("default".into()),
            name: "src-a".into(),
        })
        .unwrap()
        .metadata
        .uid
        .clone()
        .unwrap();
    let owned = cache.by_index("owner", &uid);
    assert_eq!(owned.len(), 1);
    assert_eq!(owned[0].metadata.name.as_deref(), Some("src-a-copy"));
    // The source goes: the garbage collector takes the copy.
    api.delete("src-a", &DeleteParams::default()).await.unwrap();
    eventually("the copy to be collected", || async {
        data(&api, "src-a-copy").await.is_none()
    })
    .await;

    assert!(queue.metrics().adds > 0);
    stopped(stop_tx, running).await;
    env.stop().await;
}

/// Predicates filter primary changes; a periodic resync reconciles everything again; conflict
/// retries re-read and re-apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predicates_resync_and_conflict_retries() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use plinth_runtime::Predicate;
    use plinth_runtime::helpers::retry_on_conflict;

    let env = TestEnv::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let informer = Informer::spawn(api.clone(), Vec::new());
    // Counts the reconciles of the test's object (the namespace also holds the CA bundle the
    // root CA publisher writes, whose creation reconciles too).
    let count = |counter: Arc<AtomicUsize>| {
        move |key: ObjectKey| -> plinth_runtime::ReconcileFuture {
            if key.name == "watched" {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            Box::pin(async { Ok(Action::Done) })
        }
    };
    let labelled = Arc::new(AtomicUsize::new(0));
    let resynced = Arc::new(AtomicUsize::new(0));
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let by_labels = Controller::new(&informer).with_predicate(&informer, Predicate::LabelsChanged);
    let by_resync = Controller::new(&informer)
        .with_predicate(&informer, Predicate::LabelsChanged)
        .resync_every(Duration::from_millis(200));
    let a = tokio::spawn(by_labels.run(count(labelled.clone()), wait(stop_rx.clone())));
    let b = tokio::spawn(by_resync.run(count(resynced.clone()), wait(stop_rx.clone())));

    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("watched".into());
    api.create(&PostParams::default(), &cm).await.unwrap();
    // (At least once: an informer that has to relist under load reconciles everything again.)
    eventually("the creation to be reconciled", || async {
        labelled.load(Ordering::SeqCst) >= 1
    })
    .await;
    let after_create = labelled.load(Ordering::SeqCst);
    api.patch(
        "watched",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        labelled.load(Ordering::SeqCst),
        after_create,
        "a data change does not pass LabelsChanged"
    );
    api.patch(
        "watched",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
    )
    .await
    .unwrap();
    eventually("the label change to be reconciled", || async {
        labelled.load(Ordering::SeqCst) > after_create
    })
    .await;
    eventually("periodic resyncs", || async {
        resynced.load(Ordering::SeqCst) >= 4
    })
    .await;

    // A write from a stale read conflicts once; the retry reads again and succeeds.
    let stale = api.get("watched").await.unwrap();
    api.patch(
        "watched",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "newer"}})),
    )
    .await
    .unwrap();
    let attempts = AtomicUsize::new(0);
    let written = retry_on_conflict(5, || {
        let first = attempts.fetch_add(1, Ordering::SeqCst) == 0;
        let (api, stale) = (api.clone(), stale.clone());
        async move {
            let mut current = if first {
                stale
            } else {
                api.get("watched").await?
            };
            current
                .data
                .get_or_insert_with(Default::default)
                .insert("retried".into(), "yes".into());
            api.replace("watched", &PostParams::default(), &current)
                .await
        }
    })
    .await
    .unwrap();
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(
        written.data.unwrap()["k"],
        "newer",
        "the retry kept the other writer's change"
    );

    stop.send(true).unwrap();
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();
    env.stop().await;
}

/// Keys a reconciler saw, in order.
/// `controller` reconciling with `reconcile` in a task of its own, until the sender is used.
fn started<K, F>(
    controller: Controller<K>,
    reconcile: F,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), plinth_runtime::ControllerError>>,
)
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    F: Fn(ObjectKey) -> plinth_runtime::ReconcileFuture + Send + Sync + 'static,
{
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(controller.run(reconcile, async {
        let _ = stop_rx.await;
    }));
    (stop_tx, running)
}

/// Stops what [`started`] started and waits for it (a hang guard, not a measurement).
async fn stopped(
    stop: tokio::sync::oneshot::Sender<()>,
    running: tokio::task::JoinHandle<Result<(), plinth_runtime::ControllerError>>,
) {
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the controller stops")
        .unwrap()
        .expect("the controller ran without error");
}

fn recorder() -> (
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    impl Fn(&str) -> usize + Clone,
) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let count = {
        let seen = seen.clone();
        move |name: &str| seen.lock().unwrap().iter().filter(|n| *n == name).count()
    };
    (seen, count)
}

/// A reconciler that panics does not wedge the controller: its key is released and retried,
/// the panic counted, other objects reconciled by the one worker, and a stop drains and returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_reconcile_is_caught_and_the_worker_goes_on() {
    let env = TestEnv::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let informer = Informer::spawn(api.clone(), Vec::new());
    let metrics = plinth_runtime::Metrics::default();
    let controller = Controller::new(&informer)
        .concurrency(1)
        .metrics("panicky", &metrics)
        .unwrap();
    let (seen, count) = recorder();
    let reconcile = move |key: ObjectKey| -> plinth_runtime::ReconcileFuture {
        let seen = seen.clone();
        Box::pin(async move {
            seen.lock().unwrap().push(key.name.clone());
            if key.name == "boom" {
                panic!("the reconciler blew up");
            }
            Ok(Action::Done)
        })
    };
    let (stop_tx, running) = started(controller, reconcile);
    for name in ["boom", "fine"] {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    eventually("the other object to be reconciled", || async {
        count("fine") >= 1
    })
    .await;
    eventually("the panicking key to be retried", || async {
        count("boom") >= 2
    })
    .await;
    // The second panic is counted once it is caught, just after the key was recorded.
    let panics = || {
        metrics
            .render()
            .lines()
            .find_map(|l| {
                l.strip_prefix("controller_runtime_reconcile_panics_total{controller=\"panicky\"} ")
            })
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    eventually("both panics to be counted", || async { panics() >= 2 }).await;
    stopped(stop_tx, running).await;
    env.stop().await;
}

/// A stop is honoured while the primary cache cannot sync (its resource is not served).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_whose_cache_cannot_sync_still_stops() {
    use k8s_openapi::api::networking::v1beta1::IPAddress;
    let env = TestEnv::start().await.unwrap();
    // networking.k8s.io/v1beta1 is not served (kube 1.32 serves it only when enabled).
    let api: Api<IPAddress> = Api::all(env.client());
    let informer = Informer::spawn(api, Vec::new());
    let controller = Controller::new(&informer);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(controller.run(
        |_key: ObjectKey| -> plinth_runtime::ReconcileFuture {
            Box::pin(async { Ok(Action::Done) })
        },
        async {
            let _ = stop_rx.await;
        },
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!running.is_finished(), "it waits for the cache");
    assert!(
        !informer.cache().is_synced(),
        "a resource not served never syncs"
    );
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the controller stops without a synced cache")
        .unwrap()
        .expect("a stop before the sync is not an error");
    env.stop().await;
}

/// `owns` follows controller references to the primary kind in the primary's group only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owns_matches_the_owners_group_as_well_as_its_kind() {
    use k8s_openapi::api::core::v1::Secret;
    let env = TestEnv::start().await.unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let secrets: Api<Secret> = Api::namespaced(env.client(), "default");
    let primary = Informer::spawn(configmaps.clone(), Vec::new());
    let owned = Informer::spawn(secrets.clone(), Vec::new());
    let controller = Controller::new(&primary).owns(&owned);
    let (seen, count) = recorder();
    let reconcile = move |key: ObjectKey| -> plinth_runtime::ReconcileFuture {
        let seen = seen.clone();
        Box::pin(async move {
            seen.lock().unwrap().push(key.name);
            Ok(Action::Done)
        })
    };
    let (stop_tx, running) = started(controller, reconcile);
    let mut owner = ConfigMap::default();
    owner.metadata.name = Some("owner".into());
    let owner = configmaps
        .create(&PostParams::default(), &owner)
        .await
        .unwrap();
    eventually("the owner to be reconciled", || async {
        count("owner") >= 1
    })
    .await;
    let owned_by = |name: &str, api_version: &str| {
        let mut secret = Secret::default();
        secret.metadata.name = Some(name.into());
        secret.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: api_version.into(),
                kind: "ConfigMap".into(),
                name: "owner".into(),
                uid: owner.metadata.uid.clone().unwrap(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        secret
    };
    let before = count("owner");
    // A ConfigMap of another group is not the primary.
    secrets
        .create(
            &PostParams::default(),
            &owned_by("other-group", "example.com/v1"),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        count("owner"),
        before,
        "the other group's reference was ignored"
    );
    // The same reference in the core group is.
    secrets
        .create(&PostParams::default(), &owned_by("core-group", "v1"))
        .await
        .unwrap();
    eventually(
        "the owner of the core-group secret to be reconciled",
        || async { count("owner") > before },
    )
    .await;
    stopped(stop_tx, running).await;
    env.stop().await;
}

/// Every cache the controller reads is awaited before it reconciles — an owned type's too —
/// and a cache that never syncs makes `run` give up at the cache-sync timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_caches_are_awaited_and_the_wait_times_out() {
    use k8s_openapi::api::networking::v1beta1::IPAddress;
    let env = TestEnv::start().await.unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("present".into());
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let primary = Informer::spawn(configmaps, Vec::new());
    // networking.k8s.io/v1beta1 IPAddresses are not served: their cache never syncs.
    let owned = Informer::spawn(Api::<IPAddress>::all(env.client()), Vec::new());
    let controller = Controller::new(&primary)
        .owns(&owned)
        .cache_sync_timeout(Duration::from_secs(2));
    let (seen, count) = recorder();
    let reconcile = move |key: ObjectKey| -> plinth_runtime::ReconcileFuture {
        let seen = seen.clone();
        Box::pin(async move {
            seen.lock().unwrap().push(key.name);
            Ok(Action::Done)
        })
    };
    let gave_up = tokio::time::timeout(
        Duration::from_secs(60),
        controller.run(reconcile, std::future::pending()),
    )
    .await
    .expect("run gives up when a cache does not sync");
    assert!(
        matches!(
            gave_up,
            Err(plinth_runtime::ControllerError::CacheSyncTimeout { .. })
        ),
        "{gave_up:?}"
    );
    assert_eq!(
        count("present"),
        0,
        "nothing is reconciled against an unsynced cache"
    );
    env.stop().await;
}

/// Reconcilers can see the controller stopping; one that does not stop is cut off at the
/// shutdown timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_is_visible_to_reconcilers_and_shutdown_is_bounded() {
    let env = TestEnv::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    for name in ["polite", "stubborn"] {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let informer = Informer::spawn(api, Vec::new());
    let controller = Controller::new(&informer)
        .concurrency(2)
        .shutdown_timeout(Duration::from_millis(500));
    let stopping = controller.stopping();
    let (seen, count) = recorder();
    let reconcile = move |key: ObjectKey| -> plinth_runtime::ReconcileFuture {
        let (seen, stopping) = (seen.clone(), stopping.clone());
        Box::pin(async move {
            seen.lock().unwrap().push(key.name.clone());
            if key.name == "polite" {
                stopping.clone().wait().await;
                assert!(stopping.is_stopping());
                seen.lock().unwrap().push("polite-saw-stop".into());
            } else if key.name == "stubborn" {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            // (Anything else in the namespace — its CA bundle — is done at once.)
            Ok(Action::Done)
        })
    };
    let (stop_tx, running) = started(controller, reconcile);
    eventually("both reconciles to be running", || async {
        count("polite") == 1 && count("stubborn") == 1
    })
    .await;
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("run returns at the shutdown timeout")
        .unwrap()
        .expect("a stop is not an error");
    // (Once, or twice when an event re-queued it while it ran: a key queued before the stop
    // is still handed out, as client-go's queue does, and sees the stop at once.)
    assert!(
        count("polite-saw-stop") >= 1,
        "the polite reconcile saw the stop"
    );
    env.stop().await;
}

/// `?` on a `kube` call gives a retried error that keeps its cause; an error policy can answer
/// otherwise (here: a 404 is not retried, anything else is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_errors_convert_and_the_error_policy_decides() {
    use plinth_runtime::ReconcileError;
    let env = TestEnv::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    for name in ["gives-up", "retries"] {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let informer = Informer::spawn(api.clone(), Vec::new());
    let controller = Controller::new(&informer).error_policy(|_key, error| match error {
        ReconcileError::Api(kube::Error::Api(status)) if status.code == 404 => Some(Action::Done),
        _ => None,
    });
    let (seen, count) = recorder();
    let reconcile = move |key: ObjectKey| -> plinth_runtime::ReconcileFuture {
        let (seen, api) = (seen.clone(), api.clone());
        Box::pin(async move {
            seen.lock().unwrap().push(key.name.clone());
            if key.name == "gives-up" {
                api.get("not-there").await?;
            }
            Err(ReconcileError::Retry("try again".into()))
        })
    };
    let (stop_tx, running) = started(controller, reconcile);
    eventually("the retried key to come back", || async {
        count("retries") >= 4
    })
    .await;
    // The initial list and the first watch event may both queue the key (one reconcile each);
    // without the policy it would be retried as often as the other key.
    assert!(
        count("gives-up") <= 2,
        "the policy ended the 404's retries: {}",
        count("gives-up")
    );
    stopped(stop_tx, running).await;
    env.stop().await;
}

/// `helpers::finalizer` adds the finalizer to a live object, applies it, and on deletion runs
/// the cleanup before removing the finalizer so the object can go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_finalizer_helper_adds_applies_cleans_up_and_removes() {
    use plinth_runtime::helpers::{FinalizerEvent, finalizer};
    const FINALIZER: &str = "example.com/cleanup";
    let env = TestEnv::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let informer = Informer::spawn(api.clone(), Vec::new());
    let cache = informer.cache();
    let controller = Controller::new(&informer).concurrency(1);
    let reconcile = {
        let api = api.clone();
        move |key: ObjectKey| -> plinth_runtime::ReconcileFuture {
            let api = api.clone();
            let cache = cache.clone();
            Box::pin(async move {
                if !key.name.starts_with("guarded-") {
                    return Ok(Action::Done);
                }
                let Some(object) = cache.get(&key) else {
                    return Ok(Action::Done);
                };
                let marker_api = api.clone();
                finalizer(&api, FINALIZER, object, |event| async move {
                    let (kind, cm) = match event {
                        FinalizerEvent::Apply(cm) => ("applied", cm),
                        FinalizerEvent::Cleanup(cm) => ("cleaned", cm),
                    };
                    let name = cm.metadata.name.clone().unwrap_or_default();
                    let marker = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("{kind}-{name}")}});
                    marker_api
                        .patch(
                            &format!("{kind}-{name}"),
                            &PatchParams::apply("finalizer-test").force(),
                            &Patch::Apply(&marker),
                        )
                        .await?;
                    Ok(Action::Done)
                })
                .await
            })
        }
    };
    let (stop_tx, running) = started(controller, reconcile);

    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("guarded-a".into());
    api.create(&PostParams::default(), &cm).await.unwrap();
    eventually("the finalizer and the apply", || async {
        let has = api
            .get("guarded-a")
            .await
            .unwrap()
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&FINALIZER.to_owned());
        has && data(&api, "applied-guarded-a").await.is_some()
    })
    .await;
    assert!(data(&api, "cleaned-guarded-a").await.is_none());

    api.delete("guarded-a", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the cleanup, then the object gone", || async {
        data(&api, "guarded-a").await.is_none()
    })
    .await;
    assert!(
        data(&api, "cleaned-guarded-a").await.is_some(),
        "cleanup ran before the finalizer was removed"
    );
    stopped(stop_tx, running).await;
    env.stop().await;
}

/// A clean-up that waits for something outside (a final backup) returns `RequeueAfter`: the
/// finalizer stays and the clean-up runs again — until it returns `Done`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_that_requeues_keeps_the_finalizer_until_it_is_done() {
    use plinth_runtime::helpers::{FinalizerEvent, finalizer};
    use std::sync::atomic::{AtomicUsize, Ordering};
    const FINALIZER: &str = "example.com/final-backup";
    let env = TestEnv::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let informer = Informer::spawn(api.clone(), Vec::new());
    let cache = informer.cache();
    let controller = Controller::new(&informer).concurrency(1);
    let cleanups = Arc::new(AtomicUsize::new(0));
    let reconcile = {
        let (api, cleanups) = (api.clone(), cleanups.clone());
        move |key: ObjectKey| -> plinth_runtime::ReconcileFuture {
            let (api, cache, cleanups) = (api.clone(), cache.clone(), cleanups.clone());
            Box::pin(async move {
                if key.name != "waiting" {
                    return Ok(Action::Done);
                }
                let Some(object) = cache.get(&key) else {
                    return Ok(Action::Done);
                };
                let reader = api.clone();
                finalizer(&api, FINALIZER, object, |event| async move {
                    match event {
                        FinalizerEvent::Apply(_) => Ok(Action::Done),
                        FinalizerEvent::Cleanup(_) => {
                            cleanups.fetch_add(1, Ordering::SeqCst);
                            // Done once the "released" ConfigMap exists.
                            if reader.get_opt("released").await?.is_some() {
                                Ok(Action::Done)
                            } else {
                                Ok(Action::RequeueAfter(Duration::from_millis(50)))
                            }
                        }
                    }
                })
                .await
            })
        }
    };
    let (stop_tx, running) = started(controller, reconcile);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("waiting".into());
    api.create(&PostParams::default(), &cm).await.unwrap();
    eventually("the finalizer is added", || async {
        api.get("waiting")
            .await
            .unwrap()
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&FINALIZER.to_owned())
    })
    .await;
    api.delete("waiting", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the clean-up runs again and again", || async {
        cleanups.load(Ordering::SeqCst) >= 3
    })
    .await;
    let kept = api.get("waiting").await.unwrap();
    assert!(kept.metadata.deletion_timestamp.is_some());
    assert_eq!(
        kept.metadata.finalizers.unwrap_or_default(),
        [FINALIZER.to_owned()],
        "a clean-up that requeues keeps its finalizer"
    );
    let mut released = ConfigMap::default();
    released.metadata.name = Some("released".into());
    api.create(&PostParams::default(), &released).await.unwrap();
    eventually("done: the finalizer goes, and the object", || async {
        data(&api, "waiting").await.is_none()
    })
    .await;
    stopped(stop_tx, running).await;
    env.stop().await;
}

/// An error policy that panics does not end the worker: the panic is caught and counted, the
/// key is retried as without a policy, and the one worker goes on to other keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_error_policy_does_not_end_the_worker() {
    let env = TestEnv::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let informer = Informer::spawn(api.clone(), Vec::new());
    let metrics = plinth_runtime::Metrics::default();
    let controller = Controller::new(&informer)
        .concurrency(1)
        .metrics("policy", &metrics)
        .unwrap()
        .error_policy(|key, _error| {
            assert!(key.name != "bad-policy", "the policy blew up");
            None
        });
    let (seen, count) = recorder();
    let reconcile = move |key: ObjectKey| -> plinth_runtime::ReconcileFuture {
        let seen = seen.clone();
        Box::pin(async move {
            seen.lock().unwrap().push(key.name.clone());
            if key.name == "bad-policy" {
                return Err(ReconcileError::Retry("fails, and its policy panics".into()));
            }
            Ok(Action::Done)
        })
    };
    let (stop_tx, running) = started(controller, reconcile);
    let create = |name: &'static str| {
        let api = api.clone();
        async move {
            let mut cm = ConfigMap::default();
            cm.metadata.name = Some(name.into());
            api.create(&PostParams::default(), &cm).await.unwrap();
        }
    };
    informer.cache().wait_synced().await;
    assert!(informer.cache().is_synced());
    create("bad-policy").await;
    eventually(
        "the failing key to be retried after its policy panicked",
        || async { count("bad-policy") >= 2 },
    )
    .await;
    // The same single worker still takes new keys.
    create("later").await;
    eventually("a later object to be reconciled", || async {
        count("later") >= 1
    })
    .await;
    stopped(stop_tx, running).await;
    env.stop().await;
}

/// A `watches` mapping function that panics does not end that source's feed: the change it
/// panicked on maps to nothing, later changes of that kind still trigger reconciles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_watch_mapping_does_not_end_its_feed() {
    use k8s_openapi::api::core::v1::Secret;
    let env = TestEnv::start().await.unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let secrets: Api<Secret> = Api::namespaced(env.client(), "default");
    let primary = Informer::spawn(configmaps.clone(), Vec::new());
    let watched = Informer::spawn(secrets.clone(), Vec::new());
    let controller = Controller::new(&primary).watches(&watched, |secret: &Secret| {
        let name = secret.metadata.name.clone().unwrap_or_default();
        assert!(name != "boom", "the mapping blew up");
        vec![ObjectKey {
            namespace: secret.metadata.namespace.clone(),
            name: format!("from-{name}"),
        }]
    });
    let (seen, count) = recorder();
    let reconcile = move |key: ObjectKey| -> plinth_runtime::ReconcileFuture {
        let seen = seen.clone();
        Box::pin(async move {
            seen.lock().unwrap().push(key.name.clone());
            Ok(Action::Done)
        })
    };
    let (stop_tx, running) = started(controller, reconcile);
    for name in ["first", "boom", "after"] {
        let mut secret = Secret::default();
        secret.metadata.name = Some(name.into());
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        if name == "first" {
            eventually("the first Secret to map to a reconcile", || async {
                count("from-first") >= 1
            })
            .await;
        }
    }
    eventually("a Secret after the panic to map to a reconcile", || async {
        count("from-after") >= 1
    })
    .await;
    assert_eq!(count("from-boom"), 0);
    stopped(stop_tx, running).await;
    env.stop().await;
}
