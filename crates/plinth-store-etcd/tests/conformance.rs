//! The shared conformance suite, run against a real etcd (Debian's etcd-server) started for each
//! case.

use std::any::Any;
use std::sync::Arc;

use plinth_store::Store;
use plinth_store_etcd::testing::EtcdProcess;

async fn fresh() -> (Arc<dyn Store>, Box<dyn Any + Send>) {
    let etcd = EtcdProcess::start().await.expect("start etcd");
    let store = etcd.store("/registry/").await.expect("connect to etcd");
    (Arc::new(store), Box::new(etcd))
}

plinth_store::conformance_tests!(fresh);
