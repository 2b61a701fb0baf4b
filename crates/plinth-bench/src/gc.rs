//! `plinth-bench gc`: how reads fare while the garbage collector works. Creates `owners`
//! ConfigMaps with `dependents` dependents each (owner references), deletes the owners
//! (background propagation), and while the collector deletes the dependents a reader GETs one
//! object every 10 ms: its latency p50/p99/max, and the time until every dependent is gone.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

use crate::common::{Error, percentile, run_id};

fn config_map(name: &str, group: &str, owner: Option<&ConfigMap>) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_owned());
    cm.metadata.labels = Some([("bench-gc".to_owned(), group.to_owned())].into());
    cm.metadata.owner_references = owner.map(|o| {
        vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: o.metadata.name.clone().unwrap_or_default(),
            uid: o.metadata.uid.clone().unwrap_or_default(),
            ..OwnerReference::default()
        }]
    });
    cm
}

/// Runs the measurement and prints one table.
///
/// # Errors
/// Any API failure.
pub(crate) async fn run(
    client: Client,
    namespace: &str,
    owners: usize,
    dependents: usize,
) -> Result<(), Error> {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let tag = run_id();
    let owners_label = format!("{tag}-owners");
    let dependents_label = format!("{tag}-dependents");
    let started = Instant::now();
    futures::stream::iter(0..owners)
        .map(|i| {
            let (api, owners_label, dependents_label) =
                (api.clone(), owners_label.clone(), dependents_label.clone());
            async move {
                let pp = PostParams::default();
                let owner = api
                    .create(
                        &pp,
                        &config_map(&format!("{tag}-o{i}"), &owners_label, None),
                    )
                    .await?;
                for d in 0..dependents {
                    let name = format!("{tag}-d{i}-{d}");
                    api.create(&pp, &config_map(&name, &dependents_label, Some(&owner)))
                        .await?;
                }
                Ok::<_, kube::Error>(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    let created = started.elapsed();
    let probe = format!("{tag}-probe");
    api.create(&PostParams::default(), &config_map(&probe, "probe", None))
        .await?;

    let reading = {
        let api = api.clone();
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let t = Instant::now();
                if api.get(&probe).await.is_err() {
                    break;
                }
                latencies.push(t.elapsed());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            latencies
        })
    };
    let collecting = Instant::now();
    api.delete_collection(
        &DeleteParams::background(),
        &ListParams::default().labels(&format!("bench-gc={owners_label}")),
    )
    .await?;
    loop {
        let left = api
            .list_metadata(
                &ListParams::default()
                    .labels(&format!("bench-gc={dependents_label}"))
                    .limit(1),
            )
            .await?;
        if left.items.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let collected = collecting.elapsed();
    api.delete(&format!("{tag}-probe"), &DeleteParams::default())
        .await?;
    let mut latencies = reading.await?;
    latencies.sort();
    println!("| measurement | result |");
    println!("|---|---|");
    println!(
        "| objects created ({owners} owners x {dependents} dependents + owners) | {} in {:.1} s |",
        owners * (dependents + 1),
        created.as_secs_f64()
    );
    println!(
        "| dependents collected | {} in {:.1} s ({:.0}/s) |",
        owners * dependents,
        collected.as_secs_f64(),
        (owners * dependents) as f64 / collected.as_secs_f64()
    );
    println!(
        "| GET latency during the collection p50 / p99 / max ({} reads) | {:.2} ms / {:.2} ms / {:.2} ms |",
        latencies.len(),
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
    Ok(())
}
