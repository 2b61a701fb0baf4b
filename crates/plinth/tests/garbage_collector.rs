//! The garbage collector through the `kube` crate: each propagation policy as an operator sets
//! it, and 10,000 owners with 5 dependents each deleted at once while the server keeps
//! answering.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Backend, Plinth};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

async fn client(plinth: &Plinth) -> Client {
    plinth.kube_client().await
}

fn config_map(name: &str, group: &str, owner: Option<&ConfigMap>, block: bool) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.labels = Some(BTreeMap::from([("group".to_owned(), group.to_owned())]));
    cm.metadata.owner_references = owner.map(|o| {
        vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: o.metadata.name.clone().unwrap(),
            uid: o.metadata.uid.clone().unwrap(),
            block_owner_deletion: Some(block),
            controller: Some(true),
        }]
    });
    cm
}

async fn names(api: &Api<ConfigMap>, group: &str) -> Vec<String> {
    api.list(&ListParams::default().labels(&format!("group={group}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect()
}

use plinth_testenv::eventually;

/// An owner with two dependents, in group `group`.
async fn family(api: &Api<ConfigMap>, group: &str) -> ConfigMap {
    let pp = PostParams::default();
    let owner = api
        .create(
            &pp,
            &config_map(&format!("{group}-owner"), group, None, false),
        )
        .await
        .unwrap();
    for i in 0..2 {
        api.create(
            &pp,
            &config_map(&format!("{group}-dep{i}"), group, Some(&owner), true),
        )
        .await
        .unwrap();
    }
    owner
}

async fn propagation_policies(plinth: &Plinth) {
    let api: Api<ConfigMap> = Api::namespaced(client(plinth).await, "default");

    // Background: the owner goes at once; the collector removes the dependents after it.
    family(&api, "bg").await;
    let gone = api
        .delete("bg-owner", &DeleteParams::background())
        .await
        .unwrap();
    assert!(gone.is_right(), "deleted at once: {gone:?}");
    eventually("background dependents to go", || async {
        names(&api, "bg").await.is_empty()
    })
    .await;

    // Foreground: the owner is returned marked, and goes after its dependents.
    family(&api, "fg").await;
    let marked = api
        .delete("fg-owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let marked = marked
        .left()
        .expect("the owner stays while its dependents go");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(
        marked.metadata.finalizers,
        Some(vec!["foregroundDeletion".to_owned()])
    );
    eventually("the foreground owner and dependents to go", || async {
        names(&api, "fg").await.is_empty()
    })
    .await;

    // Orphan: the dependents stay, without the reference.
    family(&api, "or").await;
    let marked = api
        .delete("or-owner", &DeleteParams::orphan())
        .await
        .unwrap();
    assert_eq!(
        marked.left().unwrap().metadata.finalizers,
        Some(vec!["orphan".to_owned()])
    );
    eventually("the orphaning owner to go", || async {
        names(&api, "or").await.len() == 2
    })
    .await;
    for name in ["or-dep0", "or-dep1"] {
        let kept = api.get(name).await.unwrap();
        assert!(
            kept.metadata
                .owner_references
                .unwrap_or_default()
                .is_empty()
        );
        assert!(kept.metadata.deletion_timestamp.is_none());
    }

    // A circle of blocking owners (1 owned by 3, 2 by 1, 3 by 2), one deleted in the
    // foreground: all go (the conformance suite's "not blocked by dependency circle").
    let pp = PostParams::default();
    let mut circle = Vec::new();
    for i in 1..=3 {
        let cm = config_map(&format!("ring-{i}"), "ring", None, false);
        circle.push(api.create(&pp, &cm).await.unwrap());
    }
    for (dependent, owner) in [(0, 2), (1, 0), (2, 1)] {
        let mut cm = circle[dependent].clone();
        cm.metadata.owner_references = config_map("x", "ring", Some(&circle[owner]), true)
            .metadata
            .owner_references;
        let name = cm.metadata.name.clone().unwrap();
        circle[dependent] = api.replace(&name, &pp, &cm).await.unwrap();
    }
    api.delete("ring-1", &DeleteParams::foreground())
        .await
        .unwrap();
    eventually("the whole circle to go", || async {
        names(&api, "ring").await.is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagation_policies_on_embedded_storage() {
    propagation_policies(&Plinth::start(Backend::Embedded)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagation_policies_on_etcd() {
    propagation_policies(&Plinth::start_etcd().await).await;
}

/// 10,000 owners × 5 dependents, the owners deleted in one deletecollection: every dependent
/// is collected, and reads keep being answered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_owners_with_five_dependents_each() {
    const OWNERS: usize = 10_000;
    const DEPENDENTS: usize = 5;
    let plinth = Plinth::start(Backend::Embedded);
    let api: Api<ConfigMap> = Api::namespaced(client(&plinth).await, "default");
    let started = Instant::now();
    futures::stream::iter(0..OWNERS)
        .map(|i| {
            let api = api.clone();
            async move {
                let pp = PostParams::default();
                let owner = api
                    .create(
                        &pp,
                        &config_map(&format!("owner-{i}"), "owners", None, false),
                    )
                    .await?;
                for d in 0..DEPENDENTS {
                    let name = format!("dep-{i}-{d}");
                    api.create(&pp, &config_map(&name, "dependents", Some(&owner), false))
                        .await?;
                }
                Ok::<_, kube::Error>(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
    eprintln!(
        "created {} objects in {:?}",
        OWNERS * (DEPENDENTS + 1),
        started.elapsed()
    );

    // A reader keeps reading while the collector works: every GET is answered (how fast is
    // `plinth-bench gc`'s business, not a test's).
    let answered = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let probing = {
        let (api, answered, failed) = (api.clone(), answered.clone(), failed.clone());
        tokio::spawn(async move {
            loop {
                match api.get_opt("dep-0-0").await {
                    Ok(_) => answered.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let started = Instant::now();
    api.delete_collection(
        &DeleteParams::background(),
        &ListParams::default().labels("group=owners"),
    )
    .await
    .unwrap();
    // Fifty thousand dependents take a debug build minutes: this wait has a guard of its own.
    let collected = tokio::time::timeout(Duration::from_secs(600), async {
        loop {
            let left = api
                .list_metadata(&ListParams::default().labels("group=dependents").limit(1))
                .await
                .unwrap();
            let remaining =
                left.metadata.remaining_item_count.unwrap_or(0) + left.items.len() as i64;
            if remaining == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    assert!(
        collected.is_ok(),
        "the dependents were never all collected (hang guard)"
    );
    probing.abort();
    let (answered, failed) = (
        answered.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    eprintln!(
        "{} dependents collected in {:?}; {answered} GETs answered meanwhile",
        OWNERS * DEPENDENTS,
        started.elapsed()
    );
    assert!(answered > 0, "reads were answered while the collector ran");
    assert_eq!(failed, 0, "no read failed while the collector ran");
}
