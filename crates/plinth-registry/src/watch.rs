//! Watches: served from the watch cache (a consistent or "any" snapshot, then its changes),
//! from storage for a resourceVersion older than the cache's window and for resources kept in
//! no cache (Events), with selectors applied per watcher and bookmarks.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use plinth_core::meta::metadata_mut;
use plinth_core::{ApiError, StatusReason};
use plinth_store::{EventKind, KeyValue, RangeRequest, Revision, StoreError};
use serde_json::{Value, json};

use super::codec::{decode_view, parse_rv, store_error, view};
use super::{ListOptions, Registry, WatchOptions};
use crate::resources::ResourceDef;

/// One watch event, ready to be serialised (`{"type": ..., "object": ...}`).
#[derive(Debug, Clone)]
pub struct WatchEvent {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`.
    pub kind: &'static str,
    body: Body,
}

/// A watch event's object: built for this event, or the watch cache's encoded form, which
/// goes out as it is — the same bytes (JSON, or protobuf once encoded) for every watcher —
/// and is decoded only for a consumer that reads the object itself.
#[derive(Debug, Clone)]
enum Body {
    Object(Arc<Value>),
    Cached(plinth_watchcache::Stored),
}

impl WatchEvent {
    /// An event of `object`, to be encoded when sent.
    pub fn new(kind: &'static str, object: Value) -> Self {
        Self {
            kind,
            body: Body::Object(Arc::new(object)),
        }
    }

    /// The event with its object in `def`'s version (an ERROR event if it cannot be).
    async fn converted(self, registry: &crate::Registry, def: &ResourceDef) -> Self {
        if matches!(self.kind, "BOOKMARK" | "ERROR") {
            return self;
        }
        let object = (*self.object()).clone();
        match super::codec::converted(registry, def, object).await {
            Ok(object) => Self::new(self.kind, object),
            Err(e) => Self::new("ERROR", e.to_status()),
        }
    }

    /// An event of an object as the watch cache keeps it.
    pub(crate) fn cached(kind: &'static str, stored: plinth_watchcache::Stored) -> Self {
        Self {
            kind,
            body: Body::Cached(stored),
        }
    }

    /// The object (a `Status` for `ERROR`); decoded from the cached bytes when the event
    /// carries those (`null` if they are not JSON, which the cache never stores).
    pub fn object(&self) -> Arc<Value> {
        match &self.body {
            Body::Object(object) => object.clone(),
            Body::Cached(stored) => Arc::new(stored.decode().unwrap_or(Value::Null)),
        }
    }

    /// The event as a protobuf watch frame, the object's message from the cache when it
    /// keeps it.
    ///
    /// # Errors
    /// [`plinth_protobuf::Unmapped`] for an object without a protobuf form.
    pub fn to_protobuf_frame(&self) -> Result<Vec<u8>, plinth_protobuf::Unmapped> {
        if let Body::Cached(stored) = &self.body
            && let Some(raw) = stored.protobuf()
        {
            let meta = stored.type_meta();
            let object = plinth_protobuf::envelope(&meta.api_version, &meta.kind, raw);
            return Ok(plinth_protobuf::watch_frame(self.kind, &object));
        }
        plinth_protobuf::encode_watch_event(self.kind, &self.object())
    }

    /// The event's JSON line (`{"type":…,"object":…}` and a newline), from the cached bytes
    /// when there are any.
    pub fn to_json_line(&self) -> bytes::Bytes {
        let mut line = Vec::new();
        line.extend_from_slice(b"{\"type\":\"");
        line.extend_from_slice(self.kind.as_bytes());
        line.extend_from_slice(b"\",\"object\":");
        match &self.body {
            Body::Cached(stored) => line.extend_from_slice(stored.wire()),
            Body::Object(object) => {
                line.extend_from_slice(&plinth_protobuf::to_json(object));
            }
        }
        line.extend_from_slice(b"}\n");
        line.into()
    }
}

/// How long a watch lasts when the client gives no `timeoutSeconds` (kube-apiserver picks
/// 30–60 minutes at random).
pub fn default_watch_timeout() -> Duration {
    let jitter = u64::from(uuid::Uuid::new_v4().as_bytes()[0]) * 1800 / 255;
    Duration::from_secs(1800 + jitter)
}

impl Registry {
    /// For a control loop: a watch of every object of a v1 resource, from a fresh list, that ends when the server stops;
    /// retried after a failure. `None` once the server is stopping or the resource is gone.
    pub async fn watch_until_stopped(
        &self,
        (group, plural): (&str, &str),
        stopping: &tokio::sync::watch::Receiver<bool>,
        who: &str,
    ) -> Option<(
        Arc<ResourceDef>,
        futures::stream::BoxStream<'static, WatchEvent>,
    )> {
        loop {
            if *stopping.borrow() {
                return None;
            }
            let def = self.resources.get(group, "v1", plural)?;
            match self.watch(def.clone(), None, WatchOptions::default()).await {
                Ok(events) => {
                    let mut stop = stopping.clone();
                    let events = events.take_until(Box::pin(async move {
                        let _ = stop.wait_for(|s| *s).await;
                    }));
                    return Some((def, events.boxed()));
                }
                Err(e) => {
                    tracing::warn!(error = %e.message, "{who}: watch failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Watches objects: the events after `options.resource_version`, or — when it is unset or
    /// `0`, or `send_initial_events` — the current objects as ADDED first. Served from the watch
    /// cache; a resourceVersion older than the cache's window is served from storage if the
    /// store still has it.
    ///
    /// # Errors
    /// 410 if the resourceVersion is older than history.
    pub async fn watch(
        &self,
        def: Arc<ResourceDef>,
        namespace: Option<String>,
        options: WatchOptions,
    ) -> Result<futures::stream::BoxStream<'static, WatchEvent>, ApiError> {
        let WatchOptions {
            list: options,
            send_initial_events,
            bookmarks,
            ..
        } = options;
        let mut options = Self::resolve_field_selector(&def, &options)?.into_owned();
        // A webhook-converted resource's field selector reads the converted objects (its
        // version's selectable fields): the watch runs unselected by fields, and they are
        // selected after conversion. A watch from a resourceVersion (an informer's, after its
        // list) starts knowing what the client was shown then: the objects selected at that
        // revision, which leave as DELETED when they stop matching.
        let selects_converted = def.conversion.is_some() && !options.fields.terms.is_empty();
        let shown_before = match options.resource_version.as_deref() {
            Some(rv)
                if selects_converted && !send_initial_events && !rv.is_empty() && rv != "0" =>
            {
                match self
                    .selected_uids_at(&def, namespace.as_deref(), &options)
                    .await
                {
                    Ok(uids) => uids,
                    // Too old: the watch answers that itself (its one event is the 410).
                    Err(e) if e.reason == StatusReason::Expired => std::collections::HashSet::new(),
                    Err(e) => return Err(e),
                }
            }
            _ => std::collections::HashSet::new(),
        };
        let converted_fields = selects_converted.then(|| {
            let fields = ListOptions {
                fields: std::mem::take(&mut options.fields),
                ..ListOptions::default()
            };
            Arc::new(fields)
        });
        let prefix = def.list_prefix(namespace.as_deref());
        let options = Arc::new(options);
        let events = if def.watch_cached {
            self.watch_cache(
                &def,
                namespace.as_deref(),
                prefix,
                &options,
                send_initial_events,
                bookmarks,
            )
            .await?
        } else {
            self.watch_uncached(
                &def,
                namespace.as_deref(),
                prefix,
                &options,
                send_initial_events,
            )
            .await?
        };
        if def.conversion.is_none() {
            return Ok(events.boxed());
        }
        // Each object in the watched version, through the CRD's conversion webhook; a failed
        // conversion ends the watch with its error (the client relists).
        let registry = self.clone();
        let selecting_def = def.clone();
        let converting = events.then(move |event| {
            let (def, registry) = (def.clone(), registry.clone());
            async move { event.converted(&registry, &def).await }
        });
        let Some(fields) = converted_fields else {
            return Ok(ends_after_error(converting).boxed());
        };
        // Which objects (by uid) the watcher has been shown: an object that stops matching
        // leaves as DELETED, one that starts matching arrives as ADDED.
        let shown = Arc::new(std::sync::Mutex::new(shown_before));
        let selected = converting.filter_map(move |event| {
            let (def, fields, shown) = (selecting_def.clone(), fields.clone(), shown.clone());
            async move {
                if matches!(event.kind, "BOOKMARK" | "ERROR") {
                    return Some(event);
                }
                let object = event.object();
                let uid = plinth_core::meta::meta_str(&object, "uid")
                    .unwrap_or("")
                    .to_owned();
                let mut shown = shown
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let was = shown.contains(&uid);
                let now = event.kind != "DELETED" && Registry::selected(&def, &object, &fields);
                let kind = match (was, now) {
                    (true, true) => event.kind,
                    (false, true) => "ADDED",
                    (true, false) => "DELETED",
                    (false, false) => return None,
                };
                if now {
                    shown.insert(uid);
                } else {
                    shown.remove(&uid);
                }
                Some(WatchEvent::new(kind, (*object).clone()))
            }
        });
        Ok(ends_after_error(selected).boxed())
    }

    /// A watch served from the resource's watch cache: its snapshot (or storage's, while the
    /// cache is behind) and its changes after it, or storage's changes for a resourceVersion
    /// older than its window.
    async fn watch_cache(
        &self,
        def: &Arc<ResourceDef>,
        namespace: Option<&str>,
        prefix: String,
        options: &Arc<ListOptions>,
        send_initial_events: bool,
        bookmarks: bool,
    ) -> Result<futures::stream::BoxStream<'static, WatchEvent>, ApiError> {
        let cacher = self.caches.get(&def.key_prefix(), &def.selector_fields());
        cacher.wait_for(1).await?;
        let start = self
            .watch_start(
                def,
                namespace,
                &prefix,
                &cacher,
                options,
                send_initial_events,
            )
            .await?;
        let Start {
            mut initial,
            subscription,
            snapshot,
        } = start;
        let live = match subscription {
            Ok(subscription) => {
                live_events(def, options, prefix, subscription, snapshot, bookmarks)
            }
            // Older than the cache's window: storage replays it unless it is older than
            // storage should replay too (then kube's answer, as for a compacted revision).
            Err(from) => {
                let replayed = if self.caches.replays(&cacher, from) {
                    self.watch_storage(def.clone(), prefix, from, options.clone())
                        .await
                } else {
                    Err(cacher.too_old(from))
                };
                expired_as_event(replayed)?
            }
        };
        if send_initial_events {
            initial.push(bookmark(def, snapshot, true));
        }
        Ok(futures::stream::iter(initial).chain(live).boxed())
    }

    /// A watch of a resource kept in no watch cache (Events), served by storage as
    /// kube-apiserver's etcd watcher serves one: without a resourceVersion (or with `0`, or
    /// with `sendInitialEvents`) a consistent list's objects as ADDED events first, then
    /// storage's changes after that list; from a resourceVersion, storage's changes after it
    /// (410 when storage no longer has them). No progress bookmarks: nothing tracks the
    /// watcher's revision between its events.
    async fn watch_uncached(
        &self,
        def: &Arc<ResourceDef>,
        namespace: Option<&str>,
        prefix: String,
        options: &Arc<ListOptions>,
        send_initial_events: bool,
    ) -> Result<futures::stream::BoxStream<'static, WatchEvent>, ApiError> {
        let rv = options.resource_version.as_deref().unwrap_or("");
        let (initial, from) = if rv.is_empty() || rv == "0" || send_initial_events {
            let keep_rv = send_initial_events && rv != "0";
            let (mut initial, revision) = self
                .initial_from_storage(def, namespace, options, keep_rv)
                .await?;
            if send_initial_events {
                initial.push(bookmark(def, revision, true));
            }
            (initial, revision)
        } else {
            (Vec::new(), parse_rv(rv)?)
        };
        let live = expired_as_event(
            self.watch_storage(def.clone(), prefix, from, options.clone())
                .await,
        )?;
        Ok(futures::stream::iter(initial).chain(live).boxed())
    }

    /// The uids of the objects `options` selects (labels and fields, in `def`'s version) at
    /// exactly its resourceVersion: what a client that listed there was shown.
    async fn selected_uids_at(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<std::collections::HashSet<String>, ApiError> {
        let at = ListOptions {
            labels: options.labels.clone(),
            fields: options.fields.clone(),
            resource_version: options.resource_version.clone(),
            resource_version_match: Some(crate::options::ResourceVersionMatch::Exact),
            ..ListOptions::default()
        };
        let list = self.list(def, namespace, &at).await?;
        Ok(list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|item| plinth_core::meta::meta_str(item, "uid"))
            .map(str::to_owned)
            .collect())
    }

    /// Where a watch starts: its initial events and the cache subscription after them (or the
    /// revision to watch storage from, when the cache no longer has it).
    async fn watch_start(
        &self,
        def: &Arc<ResourceDef>,
        namespace: Option<&str>,
        prefix: &str,
        cacher: &plinth_watchcache::Cacher,
        options: &Arc<ListOptions>,
        send_initial_events: bool,
    ) -> Result<Start, ApiError> {
        let rv = options.resource_version.clone().unwrap_or_default();
        // The initial state comes from the cache's own snapshot when it may: "any" state
        // (resourceVersion 0), a consistent one once the cache has caught up with the store, or
        // with sendInitialEvents one not older than the resourceVersion given.
        let from_cache = if rv == "0" {
            true
        } else if rv.is_empty() || send_initial_events {
            self.cache_caught_up(def, cacher, &rv).await?
        } else {
            false
        };
        if from_cache {
            let mut subscription = cacher.subscribe(prefix, None)?;
            let objects = std::mem::take(&mut subscription.initial);
            let (def, options) = (def.clone(), options.clone());
            // CPU work proportional to the objects: off the async workers (as a list).
            let initial = tokio::task::spawn_blocking(move || {
                objects
                    .iter()
                    .filter_map(|stored| initial_event(&def, &options, stored))
                    .collect()
            })
            .await
            .map_err(|e| ApiError::internal(format!("watch: {e}")))?;
            let snapshot = subscription.revision;
            return Ok(Start {
                initial,
                subscription: Ok(subscription),
                snapshot,
            });
        }
        if rv.is_empty() || send_initial_events {
            // A consistent snapshot from storage (the cache is behind), then the cache's
            // changes after it.
            let (initial, revision) = self
                .initial_from_storage(def, namespace, options, send_initial_events)
                .await?;
            return Ok(Start {
                initial,
                subscription: cacher
                    .subscribe(prefix, Some(revision))
                    .map_err(|_| revision),
                snapshot: revision,
            });
        }
        let from = parse_rv(&rv)?;
        Ok(Start {
            initial: Vec::new(),
            subscription: cacher.subscribe(prefix, Some(from)).map_err(|_| from),
            snapshot: from,
        })
    }

    /// A watch's initial state read from storage: a whole list (no limit, no continue token)
    /// with the watch's selectors — consistent, or not older than its resourceVersion when
    /// `keep_rv` — as ADDED events, and the list's revision.
    async fn initial_from_storage(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        options: &ListOptions,
        keep_rv: bool,
    ) -> Result<(Vec<WatchEvent>, Revision), ApiError> {
        let mut list_options = options.clone();
        list_options.limit = 0;
        list_options.continue_token = None;
        if !keep_rv {
            list_options.resource_version = None;
        }
        let mut list = self.list(def, namespace, &list_options).await?;
        let revision = list
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(parse_rv)
            .transpose()?
            .unwrap_or(0);
        let initial = match list.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => items.into_iter().map(added).collect(),
            _ => Vec::new(),
        };
        Ok((initial, revision))
    }

    /// A watch served straight from storage, from revision `from + 1`.
    async fn watch_storage(
        &self,
        def: Arc<ResourceDef>,
        prefix: String,
        from: Revision,
        options: Arc<ListOptions>,
    ) -> Result<futures::stream::BoxStream<'static, WatchEvent>, ApiError> {
        // A resourceVersion older than history is answered at once with 410.
        let probe = RangeRequest::prefix(prefix.clone())
            .limit(1)
            .at_revision(from);
        match self.store.range(probe).await {
            Err(StoreError::Compacted {
                requested,
                compacted,
            }) => {
                return Err(ApiError::expired(format!(
                    "too old resource version: {requested} ({})",
                    compacted.unwrap_or_default()
                )));
            }
            Err(StoreError::FutureRevision { .. }) | Ok(_) => {}
            Err(e) => return Err(store_error(&def, "", e)),
        }
        let stream = self
            .store
            .watch(&prefix, from + 1)
            .await
            .map_err(|e| store_error(&def, "", e))?;
        let events = stream.filter_map(move |item| {
            let (def, options) = (def.clone(), options.clone());
            async move {
                match item {
                    Ok(event) => translate_stored(&def, &options, event),
                    Err(error) => Some(WatchEvent::new(
                        "ERROR",
                        store_error(&def, "", error).to_status(),
                    )),
                }
            }
        });
        Ok(ends_after_error(events).boxed())
    }
}

/// Where a watch starts.
struct Start {
    /// The ADDED events of the initial state.
    initial: Vec<WatchEvent>,
    /// The cache's events after `snapshot`, or the revision to watch storage from.
    subscription: Result<plinth_watchcache::Subscription, Revision>,
    /// The revision of the initial state (or the one resumed from).
    snapshot: Revision,
}

/// An ADDED event of `object`.
fn added(object: Value) -> WatchEvent {
    WatchEvent::new("ADDED", object)
}

/// The ADDED event of a cached object for this watcher, if its selectors select it: with the
/// cached bytes when they can go out as they are.
fn initial_event(
    def: &ResourceDef,
    options: &ListOptions,
    stored: &plinth_watchcache::Stored,
) -> Option<WatchEvent> {
    if Registry::wire_servable(def, stored, options) {
        return Registry::cached_selected(stored, options)
            .then(|| WatchEvent::cached("ADDED", stored.clone()));
    }
    let object = view(def, stored.decode()?);
    Registry::selected(def, &object, options).then(|| added(object))
}

/// The cache's events after `after` under `prefix`, as this watcher sees them (selectors,
/// bookmarks when allowed).
fn live_events(
    def: &Arc<ResourceDef>,
    options: &Arc<ListOptions>,
    prefix: String,
    subscription: plinth_watchcache::Subscription,
    after: Revision,
    bookmarks: bool,
) -> futures::stream::BoxStream<'static, WatchEvent> {
    let (def, options) = (def.clone(), options.clone());
    let replay = futures::stream::iter(subscription.replay);
    let live = tokio_stream::wrappers::ReceiverStream::new(subscription.live);
    replay
        .map(plinth_watchcache::Live::Event)
        .chain(live)
        .filter_map(move |item| {
            let out = match item {
                plinth_watchcache::Live::Event(event) => (event.revision > after
                    && event.key.starts_with(&prefix))
                .then(|| translate_cached(&def, &options, &event))
                .flatten(),
                plinth_watchcache::Live::Bookmark(revision) => {
                    (bookmarks && revision >= after).then(|| bookmark(&def, revision, false))
                }
            };
            futures::future::ready(out)
        })
        .boxed()
}

/// A storage watch, or the answer kube-apiserver gives a watch from a revision that is gone:
/// the watch starts (200), and its one event is the 410 — which is what clients relist on.
/// Other errors fail the request.
fn expired_as_event(
    watch: Result<futures::stream::BoxStream<'static, WatchEvent>, ApiError>,
) -> Result<futures::stream::BoxStream<'static, WatchEvent>, ApiError> {
    match watch {
        Err(e) if e.reason == StatusReason::Expired => {
            Ok(futures::stream::iter([WatchEvent::new("ERROR", e.to_status())]).boxed())
        }
        other => other,
    }
}

/// Ends a stream right after its first ERROR event.
fn ends_after_error(
    stream: impl futures::Stream<Item = WatchEvent> + Send + 'static,
) -> impl futures::Stream<Item = WatchEvent> + Send + 'static {
    let mut done = false;
    stream.take_while(move |event| {
        let go_on = !done;
        done |= event.kind == "ERROR";
        futures::future::ready(go_on)
    })
}

/// A BOOKMARK event at `revision`.
pub fn bookmark(def: &ResourceDef, revision: Revision, initial_events_end: bool) -> WatchEvent {
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    WatchEvent::new(
        "BOOKMARK",
        json!({"kind": def.kind, "apiVersion": def.group_version.api_version(), "metadata": metadata}),
    )
}

/// A cached change as this watcher's event: the shared object and its cached bytes when they
/// can go out as they are (labels were extracted when the change arrived), else as
/// [`translate`] makes it.
fn translate_cached(
    def: &ResourceDef,
    options: &ListOptions,
    event: &plinth_watchcache::CacheEvent,
) -> Option<WatchEvent> {
    if !Registry::wire_servable(def, &event.stored, options) {
        let prev = event
            .prev_stored
            .as_ref()
            .and_then(plinth_watchcache::Stored::decode);
        return translate(
            def,
            options,
            event.kind,
            &event.stored.decode()?,
            prev.as_ref(),
        );
    }
    let prev_selected = event
        .prev_stored
        .as_ref()
        .is_some_and(|p| Registry::cached_selected(p, options));
    let kind = match event.kind {
        EventKind::Progress => return None,
        EventKind::Delete if prev_selected => "DELETED",
        EventKind::Delete => return None,
        EventKind::Put => match (
            prev_selected,
            Registry::cached_selected(&event.stored, options),
        ) {
            (true, true) => "MODIFIED",
            (false, true) => "ADDED",
            (true, false) => "DELETED",
            (false, false) => return None,
        },
    };
    Some(WatchEvent::cached(kind, event.stored.clone()))
}

/// A change as the API's watch event, honouring selectors: an object that stops matching is
/// DELETED for this watcher, one that starts matching is ADDED.
fn translate(
    def: &ResourceDef,
    options: &ListOptions,
    kind: EventKind,
    object: &Value,
    prev: Option<&Value>,
) -> Option<WatchEvent> {
    let typed = |v: &Value| view(def, v.clone());
    let prev = prev.map(typed);
    let prev_selected = prev
        .as_ref()
        .is_some_and(|p| Registry::selected(def, p, options));
    match kind {
        EventKind::Progress => None,
        EventKind::Delete => prev_selected.then(|| WatchEvent::new("DELETED", typed(object))),
        EventKind::Put => {
            let object = typed(object);
            let selected = Registry::selected(def, &object, options);
            let kind = match (prev_selected, selected) {
                (true, true) => "MODIFIED",
                (false, true) => "ADDED",
                (true, false) => "DELETED",
                (false, false) => return None,
            };
            Some(WatchEvent::new(kind, object))
        }
    }
}

/// A storage event as the API's watch event (the path for watches older than the cache).
fn translate_stored(
    def: &ResourceDef,
    options: &ListOptions,
    event: plinth_store::WatchEvent,
) -> Option<WatchEvent> {
    let revision = event.revision();
    let decode_at = |kv: &KeyValue| -> Option<Value> {
        let mut object = decode_view(def, kv).ok()?;
        metadata_mut(&mut object)?.insert("resourceVersion".into(), json!(revision.to_string()));
        Some(object)
    };
    let prev = event.prev.as_ref().and_then(decode_at);
    let object = match event.kind {
        EventKind::Put => decode_at(&event.kv)?,
        EventKind::Delete => prev.clone()?,
        EventKind::Progress => return None,
    };
    translate(def, options, event.kind, &object, prev.as_ref())
}
