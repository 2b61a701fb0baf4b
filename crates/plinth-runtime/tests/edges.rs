//! The runtime at its edges, each driven by `plinth-testenv`'s fault injection: leadership lost
//! while reconciles run, renewals that hang, caches that never sync, a runnable that fails,
//! informers handed out by the manager — what happens in each is what controller-runtime does.
//! (The guide's "What happens when…" names these tests.)

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use plinth_runtime::{Action, LeaderElector, Leadership, Manager, ManagerError, Runs, Timings};
use plinth_testenv::TestEnv;
use plinth_testenv::faults::{Fault, Faults, Rule, Verb};

fn timings() -> Timings {
    Timings {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1000),
        retry_period: Duration::from_millis(100),
    }
}

/// Waits for `check` (plinth-testenv's wait: a hang guard, not a measurement).
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    plinth_testenv::eventually(what, || std::future::ready(check())).await;
}

type Running = tokio::task::JoinHandle<Result<(), ManagerError>>;

/// Stops a manager started with a oneshot stop signal and checks that it ran cleanly.
async fn stopped(stop: tokio::sync::oneshot::Sender<()>, running: Running) {
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("run returns")
        .unwrap()
        .unwrap();
}

async fn config_maps(env: &TestEnv, count: usize) {
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    for i in 0..count {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(format!("cm-{i}"));
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
}

/// The instant leadership flipped to false, as a task following it saw it (never earlier than
/// the flip itself).
fn when_lost(elector: &LeaderElector) -> Arc<Mutex<Option<tokio::time::Instant>>> {
    let lost = Arc::new(Mutex::new(None));
    let mut leading = elector.watch_leadership();
    let seen = lost.clone();
    tokio::spawn(async move {
        let _ = leading.wait_for(|l| *l).await;
        let _ = leading.wait_for(|l| !*l).await;
        *seen.lock().unwrap() = Some(tokio::time::Instant::now());
    });
    lost
}

/// Leadership lost while reconciles run and write: no reconcile starts and no write is sent
/// afterwards beyond the ones already under way (one per worker) — no five-second grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_reconciles_and_writes_at_once() {
    let env = TestEnv::start().await.unwrap();
    config_maps(&env, 20).await;
    let faults = Faults::new();
    let client = faults.client(env.client());
    let elector =
        LeaderElector::new(client.clone(), "default", "edges", "old").with_timings(timings());
    let fenced = elector.fence(client.clone());
    let lost = when_lost(&elector);
    let starts: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
    let mut manager = Manager::new().leader_election(elector.clone());
    let writes = Api::<ConfigMap>::namespaced(fenced, "default");
    let context = Arc::new((writes, starts.clone()));
    manager
        .controller(Api::<ConfigMap>::namespaced(client.clone(), "default"))
        .concurrency(2)
        .run(
            |cm: Arc<ConfigMap>, ctx: Arc<(Api<ConfigMap>, Arc<Mutex<Vec<_>>>)>| async move {
                ctx.1.lock().unwrap().push(tokio::time::Instant::now());
                tokio::time::sleep(Duration::from_millis(5)).await;
                let name = cm.metadata.name.clone().unwrap_or_default();
                let patch = serde_json::json!({"metadata": {"annotations": {
                    "edges/written": format!("{:?}", std::time::SystemTime::now()),
                }}});
                ctx.0
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await?;
                Ok(Action::RequeueAfter(Duration::from_millis(1)))
            },
            context,
        )
        .unwrap();
    let running = tokio::spawn(manager.run(std::future::pending()));
    let writes_sent = || {
        faults
            .requests()
            .iter()
            .filter(|r| r.resource == "configmaps" && r.verb == Verb::Patch)
            .count()
    };
    until("the leader's writes", || writes_sent() > 20).await;
    env.take_lease("default", "edges", "new").await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("run returns")
        .unwrap();
    assert!(
        matches!(result, Err(ManagerError::LostLeadership)),
        "{result:?}"
    );
    let lost = lost.lock().unwrap().expect("leadership was seen lost");
    let late_writes = faults
        .requests()
        .iter()
        .filter(|r| r.resource == "configmaps" && r.verb == Verb::Patch && r.at > lost)
        .count();
    let late_starts = starts.lock().unwrap().iter().filter(|s| **s > lost).count();
    assert!(
        late_writes <= 2,
        "{late_writes} writes were sent after leadership was lost (two were in flight at most)"
    );
    assert!(
        late_starts <= 2,
        "{late_starts} reconciles started after leadership was lost"
    );
    env.stop().await;
}

/// A client fenced by an elector that does not lead refuses writes without sending them;
/// reads go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_client_sends_no_write_without_leadership() {
    let env = TestEnv::start().await.unwrap();
    let faults = Faults::new();
    let client = faults.client(env.client());
    let elector = LeaderElector::new(client.clone(), "default", "fence", "me");
    let api: Api<ConfigMap> = Api::namespaced(elector.fence(client), "default");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("unsent".into());
    let refused = api.create(&PostParams::default(), &cm).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("not the leader of lease fence"),
        "{refused}"
    );
    assert!(api.list(&Default::default()).await.is_ok());
    let sent: Vec<Verb> = faults.requests().iter().map(|r| r.verb).collect();
    assert_eq!(sent, [Verb::List], "only the read reached the server");
    env.stop().await;
}

/// Renewals that hang end leadership at the renew deadline, with no other candidate: the
/// elector cannot tell that it still holds the lease, so it must stop leading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_renewals_end_leadership_at_the_renew_deadline() {
    let env = TestEnv::start().await.unwrap();
    let faults = Faults::new();
    let elector = LeaderElector::new(faults.client(env.client()), "default", "hung", "me")
        .with_timings(timings());
    let running = {
        let elector = elector.clone();
        tokio::spawn(async move {
            elector
                .run(std::future::pending(), std::future::pending())
                .await
        })
    };
    until("leadership", || elector.is_leader()).await;
    let held = faults.inject(Rule::new(Fault::Hang).resource("leases"));
    let outcome = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("leadership ends while renewals hang")
        .unwrap();
    assert_eq!(outcome, Leadership::Lost);
    assert!(!elector.is_leader());
    faults.remove(held);
    env.stop().await;
}

/// Informers the manager handed out never sync (their lists are refused): `run` fails after
/// the manager's cache-sync timeout, with and without leader election, and starts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caches_that_never_sync_fail_the_manager() {
    let env = TestEnv::start().await.unwrap();
    let faults = Faults::new();
    faults.inject(
        Rule::new(Fault::status(503, "ServiceUnavailable", "injected"))
            .verbs(&[Verb::List, Verb::Watch])
            .resource("secrets"),
    );
    let client = faults.client(env.client());
    for election in [false, true] {
        let started = Arc::new(AtomicUsize::new(0));
        let mut manager = Manager::new().cache_sync_timeout(Duration::from_secs(1));
        if election {
            let elector = LeaderElector::new(client.clone(), "default", "never-synced", "me")
                .with_timings(timings());
            manager = manager.leader_election(elector);
        }
        manager
            .controller(Api::<Secret>::namespaced(client.clone(), "default"))
            .run(
                |_s: Arc<Secret>, started: Arc<AtomicUsize>| async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    Ok(Action::Done)
                },
                started.clone(),
            )
            .unwrap();
        let result =
            tokio::time::timeout(Duration::from_secs(60), manager.run(std::future::pending()))
                .await
                .expect("run gives up");
        assert!(
            matches!(result, Err(ManagerError::CacheSyncTimeout(_))),
            "election {election}: {result:?}"
        );
        assert_eq!(started.load(Ordering::SeqCst), 0);
    }
    env.stop().await;
}

/// A runnable that fails stops the manager with its error — the other runnables are stopped
/// and the lease released — instead of a manager that goes on with no controller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_runnable_fails_the_manager() {
    use k8s_openapi::api::coordination::v1::Lease;
    let env = TestEnv::start().await.unwrap();
    let elector =
        LeaderElector::new(env.client(), "default", "failing", "me").with_timings(timings());
    let stopped = Arc::new(AtomicUsize::new(0));
    let manager = Manager::new()
        .leader_election(elector.clone())
        .add(Runs::LeaderOnly, {
            let stopped = stopped.clone();
            move |shutdown| async move {
                shutdown.wait().await;
                stopped.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .add(Runs::Everywhere, {
            let elector = elector.clone();
            move |_shutdown| async move {
                until("leadership", || elector.is_leader()).await;
                Err("the cache never synced".into())
            }
        });
    let result = tokio::time::timeout(Duration::from_secs(60), manager.run(std::future::pending()))
        .await
        .expect("run returns");
    assert_eq!(
        result.map_err(|e| e.to_string()),
        Err("a runnable failed: the cache never synced".to_owned())
    );
    assert_eq!(
        stopped.load(Ordering::SeqCst),
        1,
        "the leader's work stopped"
    );
    let lease = Api::<Lease>::namespaced(env.client(), "default")
        .get("failing")
        .await
        .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity,
        None,
        "the lease was released"
    );
    env.stop().await;
}

/// The handed-out cache a reconcile reads, and whether it had synced at each reconcile.
type SecretsSeen = (plinth_runtime::Cache<Secret>, Arc<Mutex<Vec<bool>>>);

/// An informer the manager handed out (not one a controller watches) has synced before any
/// controller reconciles: the reconcile that reads it never sees it unsynced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informers_handed_out_sync_before_controllers_start() {
    let env = TestEnv::start().await.unwrap();
    config_maps(&env, 1).await;
    let faults = Faults::new();
    let held = faults.inject(
        Rule::new(Fault::Hang)
            .verbs(&[Verb::List, Verb::Watch])
            .resource("secrets"),
    );
    let mut manager = Manager::new();
    let secrets =
        manager.informer(|| Api::<Secret>::namespaced(faults.client(env.client()), "default"));
    let primary = manager.informer(|| Api::<ConfigMap>::namespaced(env.client(), "default"));
    // (synced?) for each reconcile.
    let seen: Arc<Mutex<Vec<bool>>> = Arc::default();
    let context = Arc::new((secrets.cache(), seen.clone()));
    manager
        .controller(Api::<ConfigMap>::namespaced(env.client(), "default"))
        .run(
            |_cm: Arc<ConfigMap>, ctx: Arc<SecretsSeen>| async move {
                ctx.1.lock().unwrap().push(ctx.0.is_synced());
                Ok(Action::Done)
            },
            context,
        )
        .unwrap();
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(manager.run(async {
        let _ = stop_rx.await;
    }));
    until("the controller's own cache", || primary.cache().is_synced()).await;
    // Give a controller that starts too early the chance to reconcile (a wait, not a
    // measurement: with the fix nothing happens in it).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while seen.lock().unwrap().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    faults.remove(held);
    until("a reconcile", || !seen.lock().unwrap().is_empty()).await;
    assert!(
        seen.lock().unwrap().iter().all(|synced| *synced),
        "a reconcile ran against the handed-out cache before it synced: {:?}",
        seen.lock().unwrap()
    );
    stopped(stop, running).await;
    env.stop().await;
}

/// Asking again for an informer with options merges what can be merged — indexes, built over
/// the objects cached already — and refuses the rest, whatever the order of the calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informer_options_merge_or_are_refused() {
    use plinth_runtime::{BuildError, InformerOptions};
    let env = TestEnv::start().await.unwrap();
    config_maps(&env, 3).await;
    let api = || Api::<ConfigMap>::namespaced(env.client(), "default");
    let mut manager = Manager::new();
    let first = manager.informer(api);
    until("the cache", || first.cache().is_synced()).await;
    let by_name = InformerOptions::default().index("name", |cm: &ConfigMap| {
        cm.metadata.name.clone().into_iter().collect()
    });
    let again = manager.informer_with(api, by_name).unwrap();
    assert!(Arc::ptr_eq(&first, &again), "one informer");
    assert_eq!(
        first.cache().by_index("name", "cm-1").len(),
        1,
        "the added index covers objects cached before it"
    );
    let same_name = InformerOptions::default().index("name", |_: &ConfigMap| Vec::new());
    let refused = manager.informer_with(api, same_name).unwrap_err();
    assert!(refused.reason.contains("index named name"), "{refused}");
    let transform = InformerOptions::default().transform(|cm: &mut ConfigMap| cm.data = None);
    assert!(manager.informer_with(api, transform).is_err());
    // Through the builder: `run` reports the conflict.
    let built = manager
        .controller_with(
            api(),
            InformerOptions::default().transform(|cm: &mut ConfigMap| cm.data = None),
        )
        .run(
            |_cm: Arc<ConfigMap>, _ctx: Arc<()>| async { Ok(Action::Done) },
            Arc::new(()),
        );
    assert!(matches!(built, Err(BuildError::Informer(_))), "{built:?}");
    env.stop().await;
}

/// The finalizer helper for an object that no longer wants clean-up: a live object loses the
/// finalizer (no clean-up), is then applied without one, and a deleted one is let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_object_that_no_longer_wants_the_finalizer_loses_it() {
    use kube::api::DeleteParams;
    use plinth_runtime::helpers::{FinalizerEvent, finalizer_when};
    const FINALIZER: &str = "example.com/cleanup";
    let env = TestEnv::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("retained".into());
    cm.metadata.finalizers = Some(vec![FINALIZER.into()]);
    api.create(&PostParams::default(), &cm).await.unwrap();
    let events: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let step = |object: ConfigMap, wanted: bool| {
        let (api, events) = (api.clone(), events.clone());
        async move {
            finalizer_when(
                &api,
                FINALIZER,
                wanted,
                Arc::new(object),
                |event| async move {
                    events.lock().unwrap().push(match event {
                        FinalizerEvent::Apply(_) => "apply",
                        FinalizerEvent::Cleanup(_) => "cleanup",
                    });
                    Ok(Action::Done)
                },
            )
            .await
            .unwrap()
        }
    };
    let finalizers = |cm: &ConfigMap| cm.metadata.finalizers.clone().unwrap_or_default();
    step(api.get("retained").await.unwrap(), false).await;
    let live = api.get("retained").await.unwrap();
    assert!(finalizers(&live).is_empty(), "removed while live");
    step(live, false).await;
    assert!(
        finalizers(&api.get("retained").await.unwrap()).is_empty(),
        "not added back"
    );
    assert_eq!(*events.lock().unwrap(), ["apply"]);

    // Deleted while it still carries the finalizer (it was wanted then): let go unclean.
    let mut again = api.get("retained").await.unwrap();
    again.metadata.finalizers = Some(vec![FINALIZER.into()]);
    api.replace("retained", &PostParams::default(), &again)
        .await
        .unwrap();
    api.delete("retained", &DeleteParams::default())
        .await
        .unwrap();
    step(api.get("retained").await.unwrap(), false).await;
    assert!(api.get_opt("retained").await.unwrap().is_none(), "gone");
    assert_eq!(*events.lock().unwrap(), ["apply"], "no clean-up ran");
    env.stop().await;
}

/// A `DynamicObject` primary (its resource known only at run time) through the builder: its
/// objects are reconciled, and so is the owner of a typed object it owns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamic_primary_is_reconciled_with_what_it_owns() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::core::{ApiResource, DynamicObject};
    use plinth_runtime::InformerOptions;
    let env = TestEnv::start().await.unwrap();
    config_maps(&env, 1).await;
    let resource = ApiResource::erase::<ConfigMap>(&());
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut manager = Manager::new();
    manager
        .controller_for(
            Api::<DynamicObject>::namespaced_with(env.client(), "default", &resource),
            &resource,
            InformerOptions::default(),
        )
        .owns(Api::<Secret>::namespaced(env.client(), "default"))
        .run(
            |cm: Arc<DynamicObject>, seen: Arc<Mutex<Vec<String>>>| async move {
                seen.lock()
                    .unwrap()
                    .push(cm.metadata.name.clone().unwrap_or_default());
                Ok(Action::Done)
            },
            seen.clone(),
        )
        .unwrap();
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(manager.run(async {
        let _ = stop_rx.await;
    }));
    until("the dynamic primary reconciled", || {
        seen.lock().unwrap().contains(&"cm-0".to_owned())
    })
    .await;
    let count =
        |seen: &Mutex<Vec<String>>| seen.lock().unwrap().iter().filter(|n| *n == "cm-0").count();
    let before = count(&seen);
    let owner = Api::<ConfigMap>::namespaced(env.client(), "default")
        .get("cm-0")
        .await
        .unwrap();
    let mut secret = Secret::default();
    secret.metadata.name = Some("owned".into());
    secret.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "cm-0".into(),
        uid: owner.metadata.uid.unwrap(),
        controller: Some(true),
        ..OwnerReference::default()
    }]);
    Api::<Secret>::namespaced(env.client(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    until("the owner reconciled for its Secret", || {
        count(&seen) > before
    })
    .await;
    stopped(stop, running).await;
    env.stop().await;
}

/// A leader paused past its lease (SIGSTOP, a stalled machine) while a standby takes over:
/// when it wakes, its overdue reconciles begin no write — its lease is not surely its own any
/// more — even before its elector, whose renewals now hang, learns of the takeover. (The old
/// leader runs on a runtime of its own thread; blocking that thread pauses it whole.)
#[test]
fn a_leader_paused_past_its_lease_writes_nothing_when_it_wakes() {
    let outer = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let env = outer.block_on(TestEnv::start()).unwrap();
    outer.block_on(config_maps(&env, 5));
    let faults = Faults::new();
    let old = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let handle = old.handle().clone();
    let (elector_tx, elector_rx) = std::sync::mpsc::channel();
    let running = std::thread::spawn({
        let (faults, client) = (faults.clone(), env.client());
        move || {
            old.block_on(async move {
                let client = faults.client(client);
                let elector = LeaderElector::new(client.clone(), "default", "paused", "old")
                    .with_timings(timings());
                let writes = Api::<ConfigMap>::namespaced(elector.fence(client.clone()), "default");
                let mut manager = Manager::new().leader_election(elector.clone());
                manager
                    .controller(Api::<ConfigMap>::namespaced(client, "default"))
                    .run(
                        |cm: Arc<ConfigMap>, writes: Arc<Api<ConfigMap>>| async move {
                            let name = cm.metadata.name.clone().unwrap_or_default();
                            let patch = serde_json::json!({"metadata": {"annotations": {
                                "edges/written": format!("{:?}", std::time::SystemTime::now()),
                            }}});
                            writes
                                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                                .await?;
                            Ok(Action::RequeueAfter(Duration::from_millis(1)))
                        },
                        Arc::new(writes),
                    )
                    .unwrap();
                elector_tx.send(elector).unwrap();
                manager.run(std::future::pending()).await
            })
        }
    });
    let old_elector = elector_rx.recv().unwrap();
    let patches_after = |at: Option<tokio::time::Instant>| {
        faults
            .requests()
            .iter()
            .filter(|r| r.resource == "configmaps" && r.verb == Verb::Patch)
            .filter(|r| at.is_none_or(|at| r.at > at))
            .count()
    };
    outer.block_on(until("the old leader's writes", || {
        old_elector.is_leader() && patches_after(None) > 10
    }));

    // Pause the old leader; its renewals hang from now on.
    faults.inject(Rule::new(Fault::Hang).resource("leases"));
    let (paused_tx, paused_rx) = std::sync::mpsc::channel();
    handle.spawn(async move {
        paused_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_secs(6));
    });
    paused_rx.recv().unwrap();

    // The standby takes over once it has seen the lease unrenewed for its duration.
    let standby =
        LeaderElector::new(env.client(), "default", "paused", "new").with_timings(timings());
    let (stop_standby, standby_stopped) = tokio::sync::oneshot::channel::<()>();
    let standby_run = outer.spawn({
        let standby = standby.clone();
        async move {
            standby
                .run(std::future::pending(), async {
                    let _ = standby_stopped.await;
                })
                .await
        }
    });
    outer.block_on(until("the standby's takeover", || standby.is_leader()));
    let taken = tokio::time::Instant::now();

    // The old leader wakes, and ends when its renewal gives up.
    let result = running.join().unwrap();
    assert!(
        matches!(result, Err(ManagerError::LostLeadership)),
        "{result:?}"
    );
    let late = patches_after(Some(taken));
    assert!(
        late <= 1,
        "the old leader sent {late} writes after the takeover (one may have been under way)"
    );
    faults.clear();
    stop_standby.send(()).unwrap();
    let _ = outer.block_on(standby_run).unwrap();
    outer.block_on(env.stop());
}

/// A stop while the API server no longer answers (every Lease request held back): the
/// release is bounded by the renew deadline, so `run` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_returns_when_the_release_hangs() {
    let env = TestEnv::start().await.unwrap();
    let faults = Faults::new();
    let elector = LeaderElector::new(faults.client(env.client()), "default", "held", "me")
        .with_timings(timings());
    // Leader work that lasts until the stop (leadership ends when it does).
    let manager = Manager::new().leader_election(elector.clone()).add(
        Runs::LeaderOnly,
        |shutdown| async move {
            shutdown.wait().await;
            Ok(())
        },
    );
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(manager.run(async {
        let _ = stop_rx.await;
    }));
    until("leadership", || elector.is_leader()).await;
    let held = faults.inject(Rule::new(Fault::Hang).resource("leases"));
    stopped(stop, running).await;
    assert!(!elector.is_leader());
    faults.remove(held);
    env.stop().await;
}
