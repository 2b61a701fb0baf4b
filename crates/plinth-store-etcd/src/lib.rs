//! Plinth's etcd storage backend: [`plinth_store::Store`] over the etcd v3 API (the
//! `etcd-client` crate), for users who outgrow one machine.
//!
//! Plinth's revisions *are* etcd's revisions, and every key lives under a configurable prefix
//! (default `/registry/`, like kube-apiserver), so several Plinth servers can share one etcd
//! cluster — with each other, or with other users of the same cluster under other prefixes.
//!
//! Each write is one etcd transaction whose compare is the operation's precondition
//! (`create_revision == 0` for create, `mod_revision == expected` for update and delete) and whose
//! failure branch reads the key, so a refused write returns the current value in the same round
//! trip.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

#[cfg(feature = "testing")]
pub mod testing;

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, CompactionOptions, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType,
    GetOptions, KvClient, LeaseClient, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
    WatchClient, WatchOptions,
};
use futures::StreamExt;
use plinth_store::note::current_note;
use plinth_store::{
    EventKind, KeyValue, RangeRequest, RangeResponse, Revision, Store, StoreError, StoreResult,
    Version, WatchEvent, WatchStream, prefix_end, validate_key,
};

/// The key prefix used when none is configured, as in kube-apiserver.
pub const DEFAULT_PREFIX: &str = "/registry/";

/// Notes (see [`plinth_store::note`]) live under this byte followed by the object's full key:
/// outside every store prefix, so no range or watch of objects meets them. A write puts its
/// object and its note in one transaction, so both change at the write's revision; the note of
/// revision R is read as the note key at R.
const NOTES: &str = "\u{1}notes";

/// How long the note of a deletion stays a live key: its value at the deletion's revision is
/// history (read at that revision until compaction drops it), the live key would only leak.
const DELETION_NOTE_TTL: i64 = 300;

/// Largest gRPC message accepted from etcd (lists of many objects are large).
const MAX_MESSAGE: usize = 1 << 30;

/// A [`Store`] on an etcd cluster.
#[derive(Clone)]
pub struct EtcdStore {
    kv: KvClient,
    watch: WatchClient,
    maintenance: etcd_client::MaintenanceClient,
    lease: LeaseClient,
    /// The lease the notes of deletions are put with, and when it was granted (one per
    /// minute, outliving its last note by [`DELETION_NOTE_TTL`] at least).
    deletion_lease: std::sync::Arc<tokio::sync::Mutex<Option<(i64, tokio::time::Instant)>>>,
    prefix: String,
    /// Each open watch's task listens here for progress requests to forward to etcd.
    progress: tokio::sync::broadcast::Sender<()>,
    /// The server's progress reports can be trusted (its version has the fix for etcd
    /// issue 15220).
    reliable_progress: bool,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.prefix)
            .finish()
    }
}

fn grpc(step: &'static str) -> impl FnOnce(etcd_client::Error) -> StoreError {
    move |e| {
        let message = match &e {
            etcd_client::Error::GRpcStatus(status) => status.message().to_owned(),
            other => other.to_string(),
        };
        if message.contains("request is too large") || message.contains("message larger than max") {
            return StoreError::ValueTooLarge {
                key: String::new(),
                size: 0,
                limit: None,
            };
        }
        if message.contains("database space exceeded") {
            return StoreError::NoSpace { detail: message };
        }
        StoreError::backend(step, e)
    }
}

/// How long a call is retried while members are unreachable before its error is returned
/// (an election after the leader's loss takes about a second here).
const RETRY_FOR: Duration = Duration::from_secs(10);

/// Whether a failed call may be sent again. A read may always be repeated when etcd is
/// unavailable; a write only when it never left — no connection to the member it was routed
/// to — as etcd's own client retries mutations: a write whose answer was lost may have been
/// applied, and repeating it would turn its success into a failed precondition.
fn retryable(e: &etcd_client::Error, write: bool) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => match status.code() {
            tonic::Code::Unavailable => !write || status.message().contains("connect error"),
            // The connection broke under the call (its member died): tonic says "transport
            // error" with no code of etcd's.
            tonic::Code::Unknown => !write && status.message().contains("transport error"),
            _ => false,
        },
        etcd_client::Error::TransportError(_) => !write,
        _ => false,
    }
}

/// Runs `call` until it succeeds, fails for good, or [`RETRY_FOR`] has passed, backing off
/// from 20 ms to 500 ms between attempts. The client balances over every endpoint, so a call
/// routed to a dead member goes to another when repeated.
async fn with_retries<T, F, Fut>(write: bool, mut call: F) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let deadline = tokio::time::Instant::now() + RETRY_FOR;
    let mut pause = Duration::from_millis(20);
    loop {
        match call().await {
            Err(e) if retryable(&e, write) && tokio::time::Instant::now() + pause < deadline => {
                tracing::debug!(error = %e, "etcd call failed; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

/// Maps etcd's answer for a read at a revision it no longer or not yet has.
fn revision_error(requested: Revision, e: etcd_client::Error) -> StoreError {
    let message = match &e {
        etcd_client::Error::GRpcStatus(status) => status.message(),
        _ => "",
    };
    if message.contains("required revision has been compacted") {
        StoreError::Compacted {
            requested,
            compacted: None,
        }
    } else if message.contains("required revision is a future revision") {
        StoreError::FutureRevision {
            requested,
            current: 0,
        }
    } else {
        grpc("read a range")(e)
    }
}

impl EtcdStore {
    /// Connects to the etcd cluster at `endpoints` (`http://host:port`), keeping keys under
    /// `prefix` (use [`DEFAULT_PREFIX`] unless sharing a cluster).
    ///
    /// # Errors
    /// A backend error if no endpoint answers within 10 s.
    pub async fn connect(endpoints: &[impl AsRef<str>], prefix: &str) -> StoreResult<Self> {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(10))
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(20));
        let client = Client::connect(endpoints, Some(options))
            .await
            .map_err(grpc("connect to etcd"))?;
        let store = Self {
            kv: client
                .kv_client()
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
            watch: client.watch_client().max_decoding_message_size(MAX_MESSAGE),
            maintenance: client.maintenance_client(),
            lease: client.lease_client(),
            deletion_lease: std::sync::Arc::default(),
            prefix: prefix.to_owned(),
            progress: tokio::sync::broadcast::Sender::new(16),
            // Any member answers (with retries: one may be down as this server starts).
            reliable_progress: match with_retries(false, || {
                let mut maintenance = client.maintenance_client();
                async move { maintenance.status().await }
            })
            .await
            {
                Ok(status) => progress_fixed(status.version()),
                Err(_) => false,
            },
        };
        if !store.reliable_progress {
            tracing::warn!(
                "this etcd may report watch progress ahead of its events (etcd issue 15220, fixed in 3.4.31 and 3.5.13): consistent reads are served from etcd, not from the watch cache"
            );
        }
        // Fail now, not on first use, if etcd does not answer.
        let named = endpoints
            .iter()
            .map(AsRef::as_ref)
            .collect::<Vec<_>>()
            .join(",");
        match tokio::time::timeout(Duration::from_secs(10), store.current_revision()).await {
            Ok(Ok(_)) => Ok(store),
            Ok(Err(e)) => Err(StoreError::backend(
                "connect to etcd",
                format!("{named}: {e}"),
            )),
            Err(_) => Err(StoreError::backend(
                "connect to etcd",
                format!("{named}: no answer within 10 s"),
            )),
        }
    }

    /// Writes (and finally deletes) a scratch key under the prefix until etcd's revision is
    /// past `revision`; returns the revision reached. Data moved into this etcd from a store at
    /// `revision` then gets resourceVersions no client can hold from the old store, so after a
    /// compaction an old one is answered 410, never mistaken for a new one.
    ///
    /// # Errors
    /// A backend error if a write fails.
    pub async fn advance_past(&self, revision: Revision) -> StoreResult<Revision> {
        use futures::stream::{self, StreamExt as _};
        let key = self.full("\u{1}advance");
        let mut current = self.current_revision().await?;
        while current <= revision {
            let missing = usize::try_from(revision - current + 1).unwrap_or(usize::MAX);
            let reached = stream::iter(0..missing.min(10_000))
                .map(|_| {
                    let (mut kv, key) = (self.kv.clone(), key.clone());
                    async move { kv.put(key, Vec::new(), None).await }
                })
                .buffer_unordered(64)
                .fold(Ok(current), |reached, put| async move {
                    let reached = reached?;
                    let put = put.map_err(grpc("advance the revision"))?;
                    Ok::<_, StoreError>(reached.max(put.header().map_or(0, |h| h.revision())))
                })
                .await?;
            current = reached;
        }
        let mut kv = self.kv.clone();
        let deleted = kv
            .delete(key, None)
            .await
            .map_err(grpc("advance the revision"))?;
        Ok(deleted.header().map_or(current, |h| h.revision()))
    }

    /// Writes a snapshot of the whole etcd backend — every key, not only this prefix's — to
    /// the new file `to` (mode 0600: it holds Secrets) through etcd's snapshot API, as
    /// `etcdctl snapshot save` does; `etcdctl snapshot restore` makes a data directory of it.
    /// Returns the revision the snapshot holds at least (read as it began).
    ///
    /// # Errors
    /// A backend error if `to` exists or cannot be written, or the stream fails (the partial
    /// file is removed).
    pub async fn snapshot(&self, to: &std::path::Path) -> StoreResult<Revision> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let revision = self.current_revision().await?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(to)
            .map_err(|e| {
                StoreError::backend("create the snapshot file", format!("{}: {e}", to.display()))
            })?;
        let written = async {
            let mut stream = self
                .maintenance
                .clone()
                .snapshot()
                .await
                .map_err(grpc("take a snapshot"))?;
            while let Some(chunk) = stream.message().await.map_err(grpc("take a snapshot"))? {
                file.write_all(chunk.blob())
                    .map_err(|e| StoreError::backend("write the snapshot", e))?;
            }
            file.sync_all()
                .map_err(|e| StoreError::backend("write the snapshot", e))
        }
        .await;
        if let Err(e) = written {
            let _ = std::fs::remove_file(to);
            return Err(e);
        }
        Ok(revision)
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn note_key(&self, key: &str) -> String {
        format!("{NOTES}{}", self.full(key))
    }

    /// The note write that goes with a put of `key`, if the task carries a note.
    fn note_put(&self, key: &str) -> Option<TxnOp> {
        current_note().map(|note| TxnOp::put(self.note_key(key), note.to_vec(), None))
    }

    /// The note write that goes with a deletion of `key`: always made (empty without a note)
    /// so that the key's earlier note does not stay live, and leased to go soon after.
    async fn deletion_note_put(&self, key: &str) -> TxnOp {
        let note = current_note().unwrap_or_default().to_vec();
        let options = self
            .deletion_lease()
            .await
            .map(|id| PutOptions::new().with_lease(id));
        TxnOp::put(self.note_key(key), note, options)
    }

    /// The current lease for deletions' notes, granted anew each minute; `None` if etcd will
    /// not grant one (the note then stays live until the key is written again).
    async fn deletion_lease(&self) -> Option<i64> {
        let mut held = self.deletion_lease.lock().await;
        if let Some((id, granted)) = *held
            && granted.elapsed() < Duration::from_secs(60)
        {
            return Some(id);
        }
        let mut lease = self.lease.clone();
        match lease.grant(DELETION_NOTE_TTL + 60, None).await {
            Ok(granted) => {
                *held = Some((granted.id(), tokio::time::Instant::now()));
                Some(granted.id())
            }
            Err(e) => {
                tracing::warn!(error = %e, "etcd granted no lease for deletion notes");
                None
            }
        }
    }

    /// The note of `key`'s write at `revision`: the note key's value then, if it changed then.
    async fn note_at(&self, key: &str, revision: Revision) -> StoreResult<Option<Bytes>> {
        let (note_key, options) = (
            self.note_key(key),
            GetOptions::new().with_revision(revision),
        );
        let response = with_retries(false, || {
            let (mut kv, note_key, options) = (self.kv.clone(), note_key.clone(), options.clone());
            async move { kv.get(note_key, Some(options)).await }
        })
        .await
        .map_err(|e| revision_error(revision, e))?;
        Ok(response
            .kvs()
            .first()
            .filter(|kv| kv.mod_revision() == revision && !kv.value().is_empty())
            .map(|kv| Bytes::copy_from_slice(kv.value())))
    }

    /// `versions` with their notes, read a few at a time.
    async fn with_notes(&self, mut versions: Vec<Version>) -> StoreResult<Vec<Version>> {
        let wanted: Vec<(String, Revision)> = versions
            .iter()
            .map(|v| (v.kv.key.clone(), v.kv.mod_revision))
            .collect();
        let notes: Vec<StoreResult<Option<Bytes>>> = futures::stream::iter(wanted)
            .map(|(key, revision)| {
                let store = self.clone();
                async move { store.note_at(&key, revision).await }
            })
            .buffered(16)
            .collect()
            .await;
        for (version, note) in versions.iter_mut().zip(notes) {
            version.note = note?;
        }
        Ok(versions)
    }

    fn convert(&self, kv: &etcd_client::KeyValue) -> StoreResult<KeyValue> {
        let key = std::str::from_utf8(kv.key())
            .ok()
            .and_then(|k| k.strip_prefix(&self.prefix))
            .ok_or_else(|| {
                StoreError::backend(
                    "decode a key",
                    format!("key {:?} is outside prefix {:?}", kv.key(), self.prefix),
                )
            })?;
        Ok(KeyValue {
            key: key.to_owned(),
            value: Bytes::copy_from_slice(kv.value()),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
        })
    }

    /// Runs a compare-and-write transaction; on failure, returns the key's current value.
    async fn cas(
        &self,
        step: &'static str,
        compare: Compare,
        writes: Vec<TxnOp>,
        key: &str,
    ) -> StoreResult<Result<TxnResponse, Option<KeyValue>>> {
        let full = self.full(key);
        let txn = Txn::new()
            .when([compare])
            .and_then(writes)
            .or_else([TxnOp::get(full, None)]);
        let response = with_retries(true, || {
            let (mut kv, txn) = (self.kv.clone(), txn.clone());
            async move { kv.txn(txn).await }
        })
        .await
        .map_err(grpc(step))?;
        if response.succeeded() {
            return Ok(Ok(response));
        }
        let current = match response.op_responses().first() {
            Some(TxnOpResponse::Get(get)) => {
                get.kvs().first().map(|kv| self.convert(kv)).transpose()?
            }
            _ => None,
        };
        Ok(Err(current))
    }
}

fn header_revision(response: &TxnResponse) -> Revision {
    response.header().map_or(0, |h| h.revision())
}

#[async_trait]
impl Store for EtcdStore {
    fn progress_is_reliable(&self) -> bool {
        self.reliable_progress
    }

    fn shared(&self) -> bool {
        true
    }

    fn keeps_notes(&self) -> bool {
        true
    }

    async fn versions(&self, key: &str, from: Revision) -> StoreResult<Vec<Version>> {
        let versions = plinth_store::replay::key_versions(self, key, from).await?;
        self.with_notes(versions).await
    }

    async fn journal(
        &self,
        prefix: &str,
        from: Revision,
        limit: usize,
    ) -> StoreResult<Vec<Version>> {
        let versions = plinth_store::replay::replay(self, prefix, from, limit).await?;
        self.with_notes(versions).await
    }

    async fn get(&self, key: &str) -> StoreResult<Option<KeyValue>> {
        validate_key(key)?;
        let full = self.full(key);
        let response = with_retries(false, || {
            let (mut kv, full) = (self.kv.clone(), full.clone());
            async move { kv.get(full, None).await }
        })
        .await
        .map_err(grpc("read a key"))?;
        response
            .kvs()
            .first()
            .map(|kv| self.convert(kv))
            .transpose()
    }

    async fn range(&self, request: RangeRequest) -> StoreResult<RangeResponse> {
        let prefix = self.full(&request.prefix);
        let start = match &request.start {
            Some(start) if start.as_str() > request.prefix.as_str() => self.full(start),
            _ => prefix.clone(),
        };
        let end = prefix_end(prefix.as_bytes()).unwrap_or_else(|| vec![0]);
        let mut options = GetOptions::new().with_range(end);
        if let Some(limit) = request.limit.filter(|l| *l > 0) {
            options = options.with_limit(limit as i64);
        }
        if let Some(revision) = request.revision.filter(|r| *r > 0) {
            options = options.with_revision(revision);
        }
        let response = with_retries(false, || {
            let (mut kv, start, options) = (self.kv.clone(), start.clone(), options.clone());
            async move { kv.get(start, Some(options)).await }
        })
        .await
        .map_err(|e| revision_error(request.revision.unwrap_or_default(), e))?;
        let kvs = response
            .kvs()
            .iter()
            .map(|kv| self.convert(kv))
            .collect::<StoreResult<Vec<_>>>()?;
        let kvs_len = kvs.len();
        let revision = request
            .revision
            .filter(|r| *r > 0)
            .unwrap_or_else(|| response.header().map_or(0, |h| h.revision()));
        Ok(RangeResponse {
            kvs,
            revision,
            more: response.more(),
            remaining: usize::try_from(response.count())
                .unwrap_or(0)
                .saturating_sub(kvs_len),
        })
    }

    async fn create(&self, key: &str, value: Bytes) -> StoreResult<Revision> {
        validate_key(key)?;
        let full = self.full(key);
        let compare = Compare::create_revision(full.clone(), CompareOp::Equal, 0);
        match self
            .cas(
                "create",
                compare,
                [TxnOp::put(full, value.to_vec(), None)]
                    .into_iter()
                    .chain(self.note_put(key))
                    .collect(),
                key,
            )
            .await
        {
            Ok(Ok(response)) => Ok(header_revision(&response)),
            Ok(Err(_)) => Err(StoreError::AlreadyExists {
                key: key.to_owned(),
            }),
            Err(StoreError::ValueTooLarge { .. }) => Err(StoreError::ValueTooLarge {
                key: key.to_owned(),
                size: value.len(),
                limit: None,
            }),
            Err(e) => Err(e),
        }
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> StoreResult<Revision> {
        validate_key(key)?;
        let full = self.full(key);
        let compare = Compare::mod_revision(full.clone(), CompareOp::Equal, expected);
        match self
            .cas(
                "update",
                compare,
                [TxnOp::put(full, value.to_vec(), None)]
                    .into_iter()
                    .chain(self.note_put(key))
                    .collect(),
                key,
            )
            .await
        {
            Ok(Ok(response)) => Ok(header_revision(&response)),
            Ok(Err(None)) => Err(StoreError::NotFound {
                key: key.to_owned(),
            }),
            Ok(Err(Some(current))) => Err(StoreError::Conflict {
                key: key.to_owned(),
                expected,
                current: Some(Box::new(current)),
            }),
            Err(StoreError::ValueTooLarge { .. }) => Err(StoreError::ValueTooLarge {
                key: key.to_owned(),
                size: value.len(),
                limit: None,
            }),
            Err(e) => Err(e),
        }
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> StoreResult<(Revision, KeyValue)> {
        validate_key(key)?;
        let full = self.full(key);
        let compare = match expected {
            Some(expected) => Compare::mod_revision(full.clone(), CompareOp::Equal, expected),
            None => Compare::create_revision(full.clone(), CompareOp::Greater, 0),
        };
        let delete = TxnOp::delete(full, Some(DeleteOptions::new().with_prev_key()));
        let writes = vec![delete.clone(), self.deletion_note_put(key).await];
        let outcome = match self.cas("delete", compare.clone(), writes, key).await {
            // Past its space quota etcd refuses every put, a note's too, but still deletes —
            // how space is freed: then the deletion goes without its note.
            Err(StoreError::NoSpace { .. }) => {
                tracing::warn!(key, "etcd is out of space: a deletion without its note");
                self.cas("delete", compare, vec![delete], key).await?
            }
            other => other?,
        };
        match outcome {
            Ok(response) => {
                let prev = match response.op_responses().first() {
                    Some(TxnOpResponse::Delete(deleted)) => deleted
                        .prev_kvs()
                        .first()
                        .map(|kv| self.convert(kv))
                        .transpose()?,
                    _ => None,
                };
                // The compare held, so the key existed: a missing prev_kv means a concurrent
                // delete cannot have happened (etcd serialises transactions).
                let prev = prev.ok_or_else(|| StoreError::NotFound {
                    key: key.to_owned(),
                })?;
                Ok((header_revision(&response), prev))
            }
            Err(None) => Err(StoreError::NotFound {
                key: key.to_owned(),
            }),
            Err(Some(current)) => Err(StoreError::Conflict {
                key: key.to_owned(),
                expected: expected.unwrap_or_default(),
                current: Some(Box::new(current)),
            }),
        }
    }

    async fn watch(&self, prefix: &str, from: Revision) -> StoreResult<WatchStream> {
        let full = self.full(prefix);
        let end = prefix_end(full.as_bytes()).unwrap_or_else(|| vec![0]);
        let mut options = WatchOptions::new().with_range(end).with_prev_key();
        if from > 0 {
            options = options.with_start_revision(from);
        }
        let stream = with_retries(false, || {
            let (mut watch, full, options) = (self.watch.clone(), full.clone(), options.clone());
            async move { watch.watch(full, Some(options)).await }
        })
        .await
        .map_err(grpc("start a watch"))?;
        let (requests, responses) = stream.split();
        // Dropping the returned stream drops `_watching`, which ends the forwarding task and with
        // it the request side of the gRPC stream: etcd then closes the watch.
        let (_watching, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(forward_progress_requests(
            requests,
            self.progress.subscribe(),
            stopped,
        ));
        let store = self.clone();
        let events = responses
            .map(move |message| -> Vec<StoreResult<WatchEvent>> {
                let _watching = &_watching;
                let response = match message {
                    Ok(response) => response,
                    Err(e) => return vec![Err(grpc("receive watch events")(e))],
                };
                if response.compact_revision() > 0 {
                    return vec![Err(StoreError::Compacted {
                        requested: from,
                        compacted: Some(response.compact_revision()),
                    })];
                }
                if response.canceled() {
                    let reason = format!("etcd cancelled the watch: {}", response.cancel_reason());
                    return vec![Err(StoreError::backend("receive watch events", reason))];
                }
                let revision = response.header().map_or(0, |h| h.revision());
                if response.events().is_empty() && !response.created() && revision > 0 {
                    // etcd's answer to a progress request.
                    return vec![Ok(WatchEvent::progress(revision))];
                }
                response
                    .events()
                    .iter()
                    .map(|event| store.convert_event(event))
                    .collect()
            })
            .flat_map(futures::stream::iter);
        // A compaction or cancellation ends the stream after its error.
        let mut failed = false;
        let events = events.take_while(move |item| {
            let go_on = !failed;
            failed |= item.is_err();
            futures::future::ready(go_on)
        });
        Ok(Box::pin(events))
    }

    async fn compact(&self, revision: Revision) -> StoreResult<()> {
        let options = CompactionOptions::new().with_physical();
        // Compacting twice at one revision is harmless: a read's rule applies.
        with_retries(false, || {
            let (mut kv, options) = (self.kv.clone(), options.clone());
            async move { kv.compact(revision, Some(options)).await }
        })
        .await
        .map(drop)
        .map_err(|e| revision_error(revision, e))
    }

    async fn request_progress(&self) -> StoreResult<()> {
        // No receiver means no open watch: nothing to report.
        let _ = self.progress.send(());
        Ok(())
    }

    async fn current_revision(&self) -> StoreResult<Revision> {
        let (key, options) = (
            self.full("\u{1}revision"),
            GetOptions::new().with_count_only(),
        );
        let response = with_retries(false, || {
            let (mut kv, key, options) = (self.kv.clone(), key.clone(), options.clone());
            async move { kv.get(key, Some(options)).await }
        })
        .await
        .map_err(grpc("read the revision"))?;
        Ok(response.header().map_or(0, |h| h.revision()))
    }
}

/// Whether etcd `version` (`3.4.23`) has the fix for issue 15220: 3.4.31+, 3.5.13+, 3.6+.
fn progress_fixed(version: &str) -> bool {
    let parts: Vec<u64> = version
        .split(['.', '-', '+'])
        .take(3)
        .map(|p| p.parse().unwrap_or(0))
        .collect();
    match parts.as_slice() {
        [3, 4, patch, ..] => *patch >= 31,
        [3, 5, patch, ..] => *patch >= 13,
        [3, minor, ..] => *minor > 5,
        [major, ..] => *major > 3,
        [] => false,
    }
}

/// Forwards the store's progress requests to one watch's gRPC stream until the watch is dropped.
async fn forward_progress_requests(
    mut requests: etcd_client::WatchRequestSender,
    mut asked: tokio::sync::broadcast::Receiver<()>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            asked = asked.recv() => match asked {
                Ok(()) | Err(RecvError::Lagged(_)) => {
                    if requests.request_progress().await.is_err() {
                        return;
                    }
                }
                Err(RecvError::Closed) => return,
            },
        }
    }
}

impl EtcdStore {
    fn convert_event(&self, event: &etcd_client::Event) -> StoreResult<WatchEvent> {
        let kv = event
            .kv()
            .ok_or_else(|| StoreError::backend("decode a watch event", "event without a key"))?;
        let prev = event.prev_kv().map(|kv| self.convert(kv)).transpose()?;
        match event.event_type() {
            EventType::Put => Ok(WatchEvent {
                kind: EventKind::Put,
                kv: self.convert(kv)?,
                prev,
            }),
            EventType::Delete => {
                let mut deleted = self.convert(kv)?;
                deleted.value = Bytes::new();
                deleted.create_revision = 0;
                Ok(WatchEvent {
                    kind: EventKind::Delete,
                    kv: deleted,
                    prev,
                })
            }
        }
    }
}

#[cfg(test)]
mod version_tests {
    #[test]
    fn progress_is_trusted_from_the_fixed_releases_on() {
        for (version, fixed) in [
            ("3.4.23", false),
            ("3.4.31", true),
            ("3.5.12", false),
            ("3.5.13", true),
            ("3.5.17", true),
            ("3.6.0", true),
            ("3.3.27", false),
            ("", false),
        ] {
            assert_eq!(super::progress_fixed(version), fixed, "{version}");
        }
    }
}
