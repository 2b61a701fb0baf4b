//! `plinth migrate`: every object of one storage copied into another at one revision, with
//! the servers stopped.
//!
//! - **embedded → etcd**: etcd assigns new revisions. Before copying, etcd's revision is
//!   carried past the embedded store's, and after copying it is compacted, so a
//!   resourceVersion a client kept from the old store is older than any history etcd has: its
//!   watch is answered 410 and it relists — never served events from another history.
//! - **etcd → embedded**: the embedded store is built with etcd's revisions, so every object
//!   keeps its resourceVersion and clients go on; it starts compacted at the copy's revision.
//!
//! Values are copied as stored (encrypted ones stay encrypted: the encryption configuration
//! travels with the data directory's other files).

use std::path::Path;

use futures::stream::{self, TryStreamExt};
use plinth_store::{KeyValue, RangeRequest, Revision, Store, StoreError, StoreResult};
use plinth_store_etcd::EtcdStore;

/// Keys read per page.
const PAGE: usize = 500;

/// Every live key of `store` at one revision (its current one); returns them and the revision.
async fn read_all(store: &dyn Store) -> StoreResult<(Vec<KeyValue>, Revision)> {
    let mut kvs = Vec::new();
    let mut revision = None;
    let mut start: Option<String> = None;
    loop {
        let mut request = RangeRequest::prefix("").limit(PAGE);
        if let Some(revision) = revision {
            request = request.at_revision(revision);
        }
        if let Some(start) = start.take() {
            request = request.continue_after(&start);
        }
        let page = store.range(request).await?;
        revision = Some(page.revision);
        let more = page.more;
        start = page.kvs.last().map(|kv| kv.key.clone());
        kvs.extend(page.kvs);
        if !more || start.is_none() {
            break;
        }
    }
    Ok((kvs, revision.unwrap_or_default()))
}

/// What a migration did.
#[derive(Debug)]
pub(crate) struct Migrated {
    /// Objects copied.
    pub(crate) objects: usize,
    /// The source's revision they were read at.
    pub(crate) from_revision: Revision,
    /// The target's revision afterwards.
    pub(crate) to_revision: Revision,
}

/// Copies the embedded store in `store_dir` (its server stopped) into etcd under `prefix`,
/// which must hold no key.
pub(crate) async fn to_etcd(
    store_dir: &Path,
    endpoints: &[String],
    prefix: &str,
) -> StoreResult<Migrated> {
    let source = plinth_store_embedded::EmbeddedStore::open(store_dir)?;
    let read = read_all(&source).await;
    source.close().await;
    let (kvs, from_revision) = read?;
    let target = EtcdStore::connect(endpoints, prefix).await?;
    let present = target.range(RangeRequest::prefix("").limit(1)).await?;
    if let Some(kv) = present.kvs.first() {
        return Err(StoreError::backend(
            "migrate",
            format!(
                "etcd holds keys under {prefix} already (such as {}): migrate into an empty prefix",
                kv.key
            ),
        ));
    }
    target.advance_past(from_revision).await?;
    let target = &target;
    stream::iter(kvs.iter().map(Ok))
        .try_for_each_concurrent(32, |kv: &KeyValue| async move {
            target.create(&kv.key, kv.value.clone()).await.map(drop)
        })
        .await?;
    let to_revision = target.current_revision().await?;
    target.compact(to_revision).await?;
    Ok(Migrated {
        objects: kvs.len(),
        from_revision,
        to_revision,
    })
}

/// Copies every key under `prefix` of etcd (its servers stopped) into a new embedded store in
/// `store_dir`, at etcd's revisions.
pub(crate) async fn from_etcd(
    endpoints: &[String],
    prefix: &str,
    store_dir: &Path,
) -> StoreResult<Migrated> {
    if store_dir.join(plinth_store_embedded::DB_FILE).exists() {
        return Err(StoreError::BadDataDir {
            path: store_dir.to_owned(),
            reason: "it holds a store already; migrate into a data directory without one".into(),
        });
    }
    let source = EtcdStore::connect(endpoints, prefix).await?;
    let (kvs, revision) = read_all(&source).await?;
    plinth_store_embedded::backup::import(store_dir, &kvs, revision)?;
    Ok(Migrated {
        objects: kvs.len(),
        from_revision: revision,
        to_revision: revision,
    })
}

/// Runs `work` to the line `plinth migrate` prints.
pub(crate) async fn report(
    work: impl std::future::Future<Output = StoreResult<Migrated>>,
) -> Result<String, String> {
    match work.await {
        Ok(done) => Ok(format!(
            "copied {} objects at revision {}; the target is at revision {}",
            done.objects, done.from_revision, done.to_revision
        )),
        Err(e) => Err(e.to_string()),
    }
}
