//! A store on a three-member etcd cluster keeps working while any one member is down: every
//! write is acknowledged (the client uses every endpoint), and a watch that breaks when its
//! member dies resumes from the last revision it delivered without a gap.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use plinth_store::{EventKind, Store};
use plinth_store_etcd::testing::EtcdCluster;

/// The next event, re-watching from `next` when the stream breaks; gives up (panics) if none
/// comes within a generous minute — a condition waited for, not a duration measured.
async fn next_event(
    store: &dyn Store,
    watch: &mut plinth_store::WatchStream,
    next: &mut i64,
) -> plinth_store::WatchEvent {
    let at = *next;
    let wait = async {
        loop {
            match tokio::time::timeout(Duration::from_secs(5), watch.next()).await {
                Ok(Some(Ok(event))) if event.kind == EventKind::Progress => {}
                Ok(Some(Ok(event))) => {
                    *next = event.revision() + 1;
                    return event;
                }
                // Broken (its member died) or quiet for a while: watch again from where it was.
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
    };
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .unwrap_or_else(|_| panic!("no event from revision {at}: gave up waiting"))
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
                let mut attempts = 0;
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
                            attempts += 1;
                            assert!(
                                attempts < 300,
                                "{key} never acknowledged in 300 attempts with member {victim} down: {e}"
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
