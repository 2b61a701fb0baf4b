//! `plinth-bench reconcile`: the throughput and latency of a controller — from the create
//! request of a custom resource to its status being written — and the memory its cache takes
//! per object, for the same reconciler on plinth-runtime or on kube-runtime's `Controller`,
//! against whatever server the kubeconfig points at.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::common::Error;

/// The benchmark's resource.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "bench.plinth.dev",
    version = "v1",
    kind = "BenchWidget",
    namespaced,
    status = "BenchWidgetStatus"
)]
pub(crate) struct BenchWidgetSpec {
    /// Some payload.
    pub(crate) size: i64,
}

/// What the reconciler writes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub(crate) struct BenchWidgetStatus {
    /// The generation seen.
    pub(crate) observed: Option<i64>,
}

/// Create times by name, and the latency of each object's first status write.
#[derive(Default)]
struct Clock {
    created: HashMap<String, Instant>,
    latencies: Vec<Duration>,
}

async fn write_status(
    api: &Api<BenchWidget>,
    widget: &BenchWidget,
    clock: &Mutex<Clock>,
) -> Result<(), kube::Error> {
    let generation = widget.metadata.generation;
    if widget.status.as_ref().and_then(|s| s.observed) == generation {
        return Ok(());
    }
    api.patch_status(
        &widget.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"observed": generation}})),
    )
    .await?;
    if let Ok(mut clock) = clock.lock()
        && let Some(start) = clock.created.remove(&widget.name_any())
    {
        clock.latencies.push(start.elapsed());
    }
    Ok(())
}

/// This process's anonymous resident memory, KiB.
pub(crate) fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("RssAnon:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Runs the benchmark for `objects` objects on `runtime` (`plinth` or `kube`).
pub(crate) async fn run(client: Client, runtime: &str, objects: usize) -> Result<(), Error> {
    if !["plinth", "plinth-stripped", "kube"].contains(&runtime) {
        return Err(format!("unknown runtime {runtime:?}: plinth, plinth-stripped or kube").into());
    }
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    match crds
        .create(&PostParams::default(), &BenchWidget::crd())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let namespace = format!("bench-{runtime}-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": namespace}}))?,
        )
        .await?;
    let api: Api<BenchWidget> = Api::namespaced(client.clone(), &namespace);
    // The CRD's endpoint is served within a moment.
    for _ in 0..100 {
        if api.list(&Default::default()).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let clock = Arc::new(Mutex::new(Clock::default()));
    let baseline = rss_kib();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let controller = match runtime {
        "plinth" | "plinth-stripped" => {
            // `plinth-stripped`: the cache drops managedFields (a transform), as an operator
            // that never reads them should.
            let options = if runtime == "plinth-stripped" {
                plinth_runtime::InformerOptions::default().strip_managed_fields()
            } else {
                plinth_runtime::InformerOptions::default()
            };
            let informer = plinth_runtime::Informer::spawn_with(api.clone(), options);
            let cache = informer.cache();
            // kube-runtime reconciles without a concurrency limit by default; so many workers
            // keep this side from queueing behind a fixed pool.
            let controller = plinth_runtime::Controller::new(&informer).concurrency(64);
            let (api, clock) = (api.clone(), clock.clone());
            let mut stop_rx = stop_rx.clone();
            tokio::spawn(async move {
                controller
                    .run(
                        move |key: plinth_runtime::ObjectKey| -> plinth_runtime::ReconcileFuture {
                            let (api, clock, cache) = (api.clone(), clock.clone(), cache.clone());
                            Box::pin(async move {
                                if let Some(widget) = cache.get(&key) {
                                    write_status(&api, &widget, &clock).await.map_err(|e| {
                                        plinth_runtime::ReconcileError::Retry(e.to_string())
                                    })?;
                                }
                                Ok(plinth_runtime::Action::Done)
                            })
                        },
                        async move {
                            let _ = stop_rx.wait_for(|s| *s).await;
                        },
                    )
                    .await
                    .expect("the controller's cache synced");
            })
        }
        _ => {
            let (api, clock) = (api.clone(), clock.clone());
            let mut stop_rx = stop_rx.clone();
            tokio::spawn(async move {
                let context = Arc::new((api.clone(), clock));
                kube::runtime::Controller::new(api, kube::runtime::watcher::Config::default())
                    .graceful_shutdown_on(async move {
                        let _ = stop_rx.wait_for(|s| *s).await;
                    })
                    .run(
                        |widget: Arc<BenchWidget>,
                         ctx: Arc<(Api<BenchWidget>, Arc<Mutex<Clock>>)>| async move {
                            write_status(&ctx.0, &widget, &ctx.1).await?;
                            Ok::<_, kube::Error>(kube::runtime::controller::Action::await_change())
                        },
                        |_widget, _error: &kube::Error, _ctx| {
                            kube::runtime::controller::Action::requeue(Duration::from_millis(100))
                        },
                        context,
                    )
                    .for_each(|_| async {})
                    .await;
            })
        }
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    futures::stream::iter(0..objects)
        .map(|i| {
            let (api, clock) = (api.clone(), clock.clone());
            async move {
                let name = format!("w{i}");
                if let Ok(mut clock) = clock.lock() {
                    clock.created.insert(name.clone(), Instant::now());
                }
                api.create(
                    &PostParams::default(),
                    &BenchWidget::new(&name, BenchWidgetSpec { size: i as i64 }),
                )
                .await
            }
        })
        .buffer_unordered(32)
        .for_each(|r| async {
            if let Err(e) = r {
                eprintln!("create failed: {e}");
            }
        })
        .await;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let done = clock.lock().map(|c| c.latencies.len()).unwrap_or(0);
        if done >= objects {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("only {done} of {objects} reconciled within 600 s").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let total = started.elapsed();
    let memory = rss_kib().saturating_sub(baseline);
    stop.send_replace(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), controller).await;
    let mut latencies = clock
        .lock()
        .map(|c| c.latencies.clone())
        .unwrap_or_default();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    println!(
        "| {runtime} | {objects} | {:.0}/s | {:.1} ms / {:.1} ms | {:.2} KiB |",
        objects as f64 / total.as_secs_f64(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        memory as f64 / objects as f64
    );
    let _ = namespaces
        .delete(&namespace, &DeleteParams::background())
        .await;
    Ok(())
}
