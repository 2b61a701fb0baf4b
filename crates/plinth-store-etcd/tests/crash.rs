//! Crash safety on etcd: many concurrent writers, etcd killed with SIGKILL mid-stream, restarted
//! on the same data directory — every acknowledged write is there and revisions go on increasing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use plinth_store::{Revision, Store};
use plinth_store_etcd::testing::EtcdProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_killing_etcd() {
    let mut etcd = EtcdProcess::start().await.expect("start etcd");
    let acked: Arc<Mutex<BTreeMap<String, Revision>>> = Arc::default();
    for round in 0..2 {
        let store = Arc::new(etcd.store("/registry/").await.expect("connect"));
        let mut writers = Vec::new();
        for w in 0..64 {
            let (store, acked) = (store.clone(), acked.clone());
            writers.push(tokio::spawn(async move {
                for i in 0u64.. {
                    let key = format!("/crash/{round}/{w}/{i}");
                    let write = store.create(&key, Bytes::from(format!("{round}-{w}-{i}")));
                    match tokio::time::timeout(Duration::from_secs(5), write).await {
                        Ok(Ok(rev)) => drop(acked.lock().unwrap().insert(key, rev)),
                        _ => return,
                    }
                }
            }));
        }
        while acked.lock().unwrap().len() < 2000 * (round + 1) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        etcd.kill();
        for w in writers {
            w.await.unwrap();
        }
        etcd.restart().await.expect("restart etcd on the same data");

        let store = etcd.store("/registry/").await.expect("reconnect");
        let acked = acked.lock().unwrap().clone();
        let max = *acked.values().max().unwrap();
        let current = store.current_revision().await.unwrap();
        assert!(
            current >= max,
            "revision went back: {current} < acknowledged {max}"
        );
        for (key, rev) in &acked {
            let kv = store
                .get(key)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("acknowledged {key} lost"));
            assert_eq!(kv.create_revision, *rev, "{key}");
            assert_eq!(
                kv.value,
                key.trim_start_matches("/crash/")
                    .replace('/', "-")
                    .as_bytes()
            );
        }
        let next = store
            .create(&format!("/crash/after-{round}"), Bytes::from_static(b"x"))
            .await
            .unwrap();
        assert!(next > current);
    }
}
