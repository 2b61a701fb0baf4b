//! A store on a three-member etcd cluster keeps working while any one member is down: every
//! write is acknowledged (the client uses every endpoint), and a watch that breaks when its
//! member dies resumes from the last revision it delivered without a gap.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use plinth_store::{EventKind, Store};
use plinth_store_etcd::testing::EtcdCluster;

/// Waits up to `deadline` for the next event, re-watching from `next` when the stream breaks.
async fn next_event(
    store: &dyn Store,
    watch: &mut plinth_store::WatchStream,
    next: &mut i64,
) -> plinth_store::WatchEvent {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(tokio::time::Instant::now() < deadline, "no event at {next}");
        match tokio::time::timeout(Duration::from_secs(5), watch.next()).await {
            Ok(Some(Ok(event))) if event.kind == EventKind::Progress => {}
            Ok(Some(Ok(event))) => {
                *next = event.revision() + 1;
                return event;
            }
            // Broken (its member died) or quiet for too long: watch again from where it was.
            Ok(Some(Err(_)) | None) | Err(_) => loop {
                match store.watch("/k/", *next).await {
                    Ok(stream) => {
                        *watch = stream;
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            },
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_and_watches_survive_the_loss_of_any_one_member() {
    let mut cluster = EtcdCluster::start(3).await.expect("start a 3-member etcd");
    let store = cluster.store("/loss/").await.unwrap();
    let mut next = store.current_revision().await.unwrap() + 1;
    let mut watch = store.watch("/k/", next).await.unwrap();
    let mut acknowledged = Vec::new();
    let mut retries = 0;
    for round in 0..3 {
        for victim in 0..cluster.members.len() {
            cluster.members[victim].kill();
            for i in 0..10 {
                let key = format!("/k/{round}-{victim}-{i}");
                // A write whose answer was lost (the leader died with it) may or may not have
                // happened: the caller tries again, as an API client would, and finds it.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                let revision = loop {
                    match store.create(&key, Bytes::from(key.clone())).await {
                        Ok(revision) => break revision,
                        Err(plinth_store::StoreError::AlreadyExists { .. }) => {
                            break store.get(&key).await.unwrap().unwrap().mod_revision;
                        }
                        Err(e) => {
                            retries += 1;
                            // Only an answer lost in an election comes back: a write
                            // that found no connection went to another member.
                            let text = format!("{e:?}");
                            assert!(
                                !text.contains("connect error"),
                                "{key}: the store gave up on a write that never left: {text}"
                            );
                            assert!(
                                tokio::time::Instant::now() < deadline,
                                "{key} never acknowledged with member {victim} down: {e}"
                            );
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                };
                acknowledged.push((key, revision));
            }
            cluster.members[victim].restart().await.unwrap();
        }
    }
    eprintln!("{} writes, {retries} retried", acknowledged.len());
    // Every acknowledged write arrives, in revision order, exactly once.
    for (key, revision) in &acknowledged {
        let event = next_event(&store, &mut watch, &mut next).await;
        assert_eq!(
            (event.kv.key.as_str(), event.revision()),
            (key.as_str(), *revision),
            "the watch's next event"
        );
    }
}
