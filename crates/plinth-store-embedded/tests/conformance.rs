//! The shared conformance suite, run against the embedded store.

use std::any::Any;
use std::sync::Arc;

use plinth_store::Store;
use plinth_store_embedded::EmbeddedStore;

async fn fresh() -> (Arc<dyn Store>, Box<dyn Any + Send>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = EmbeddedStore::open(dir.path().join("store")).expect("open store");
    (Arc::new(store), Box::new(dir))
}

plinth_store::conformance_tests!(fresh);
