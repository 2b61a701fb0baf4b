//! Reads: one object, and lists — from the watch cache when kube-apiserver 1.32 would serve
//! them from its cache, else from storage, consistent at one revision and paginated.

use plinth_core::ApiError;
use plinth_core::meta::labels;
use plinth_store::{RangeRequest, StoreError};
use serde_json::{Value, json};

use super::codec::{
    continue_position, decode_continue, decode_view, encode_continue, parse_rv, store_error, view,
};
use super::{ListOptions, Registry, ResourceVersionMatch};
use crate::resources::ResourceDef;

impl Registry {
    /// Reads one object.
    ///
    /// # Errors
    /// 404 if absent.
    pub async fn get(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let key = def.key(namespace, name);
        match self
            .store
            .get(&key)
            .await
            .map_err(|e| store_error(def, name, e))?
        {
            Some(kv) => super::codec::converted(self, def, decode_view(def, &kv)?).await,
            None => Err(ApiError::not_found(&def.group_resource(), name)),
        }
    }

    /// The store's current revision.
    async fn current_revision(
        &self,
        def: &ResourceDef,
    ) -> Result<plinth_store::Revision, ApiError> {
        self.store
            .current_revision()
            .await
            .map_err(|e| store_error(def, "", e))
    }

    /// Whether `object` matches the options' selectors.
    /// Whether a list selects every object (no label or field selector): only then does a
    /// page say how many objects follow it, as kube's storage does.
    fn selects_all(options: &ListOptions) -> bool {
        options.labels.is_empty() && options.fields.terms.is_empty()
    }

    pub(super) fn selected(def: &ResourceDef, object: &Value, options: &ListOptions) -> bool {
        (options.labels.is_empty() || options.labels.matches(&labels(object)))
            && options
                .fields
                .matches(|field| def.field_value(object, field))
    }

    /// Checks a field selector against the labels the resource accepts and maps each to the
    /// stored field it reads (kube's field label conversion).
    ///
    /// # Errors
    /// 400 naming the first unsupported label.
    pub fn resolve_field_selector<'o>(
        def: &ResourceDef,
        options: &'o ListOptions,
    ) -> Result<std::borrow::Cow<'o, ListOptions>, ApiError> {
        let mut resolved = std::borrow::Cow::Borrowed(options);
        for (i, term) in options.fields.terms.iter().enumerate() {
            let Some(field) = def.field_label(&term.field) else {
                // Types with a conversion of their own answer as it does; the others with
                // the scheme's default.
                let message = if def.field_labels.is_none() && def.selectable_fields.is_empty() {
                    format!(
                        "\"{}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                        term.field
                    )
                } else {
                    (def.unsupported_field)(&term.field)
                };
                return Err(ApiError::bad_request(message));
            };
            if field != term.field {
                resolved.to_mut().fields.terms[i].field = field.to_owned();
            }
        }
        Ok(resolved)
    }

    /// Lists objects, paginated and filtered, consistent at one revision.
    ///
    /// # Errors
    /// 410 for a continue token or exact resourceVersion older than history; 400 for bad options.
    pub async fn list(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<Value, ApiError> {
        Ok(self
            .list_encoded(def, namespace, options)
            .await?
            .into_value())
    }

    /// How many objects of `def` there are (in `namespace`): counted in the watch cache once
    /// it has caught up with storage's current revision (a consistent read that decodes
    /// nothing), else from a storage list.
    ///
    /// # Errors
    /// As [`Registry::list`].
    pub async fn count(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
    ) -> Result<usize, ApiError> {
        let prefix = def.list_prefix(namespace);
        if def.lists_from_cache() {
            let cacher = self.caches.get(&def.key_prefix(), &def.selector_fields());
            if self.cache_caught_up(def, &cacher, "").await? {
                return Ok(cacher.count(&prefix));
            }
        }
        let list = self.list(def, namespace, &ListOptions::default()).await?;
        Ok(list["items"].as_array().map_or(0, Vec::len))
    }

    /// [`Registry::list`], as the HTTP layer answers it: a list served from the watch cache
    /// comes as the cached objects' encoded bytes, which a JSON answer concatenates.
    ///
    /// # Errors
    /// As [`Registry::list`].
    pub async fn list_encoded(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<Listed, ApiError> {
        let options = &*Self::resolve_field_selector(def, options)?;
        let prefix = def.list_prefix(namespace);
        // Objects a conversion webhook converts are read from storage and converted together;
        // an uncached resource's are read from storage.
        if def.lists_from_cache() {
            if let Some(list) = self.try_list_cached(def, &prefix, options).await? {
                return Ok(Listed::Encoded(list));
            }
            if let Some(page) = self.try_page_cached(def, &prefix, options).await? {
                return Ok(Listed::Encoded(page));
            }
        }
        self.caches.count_list(&def.key_prefix(), false);
        let mut resume_at = None;
        let (mut revision, mut start) = match &options.continue_token {
            Some(token) if !token.is_empty() => {
                let (rev, start) = decode_continue(token)?;
                resume_at = Some(start.clone());
                let rev = Some(rev).filter(|r| *r != super::codec::LATEST);
                (rev, Some(format!("{prefix}{start}\0")))
            }
            _ => (None, None),
        };
        if revision.is_none() {
            revision = self.list_revision(def, options).await?;
        }
        let mut items = Vec::new();
        let mut next: Option<String> = None;
        let mut remaining = 0;
        let limit = options.limit;
        loop {
            let mut request = RangeRequest::prefix(prefix.clone());
            request.start = start.clone();
            request.revision = revision;
            if limit > 0 {
                request.limit = Some((limit - items.len()).max(1));
            }
            let page = self.store.range(request).await.map_err(|e| match e {
                StoreError::Compacted { .. } if options.continue_token.is_some() => {
                    // kube's answer carries a token that continues from the same key at the
                    // latest revision (an inconsistent list, which the client may choose).
                    let mut expired = ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                    );
                    expired.details.continue_token = resume_at
                        .as_deref()
                        .map(|key| encode_continue(super::codec::LATEST, key, None));
                    expired
                }
                other => store_error(def, "", other),
            })?;
            revision = Some(page.revision);
            let last_key = page.kvs.last().map(|kv| kv.key.clone());
            let mut objects = page
                .kvs
                .iter()
                .map(|kv| decode_view(def, kv))
                .collect::<Result<Vec<_>, _>>()?;
            // Selected as served: a webhook-converted object after its conversion (its
            // version's selectable fields may read fields the stored version lacks).
            objects = super::codec::converted_all(self, def, objects).await?;
            items.extend(
                objects
                    .into_iter()
                    .filter(|object| Self::selected(def, object, options)),
            );
            match last_key {
                Some(last) if page.more => {
                    if limit > 0 && items.len() >= limit {
                        next = Some(last.trim_start_matches(prefix.as_str()).to_owned());
                        remaining = page.remaining;
                        break;
                    }
                    start = Some(format!("{last}\0"));
                }
                _ => break,
            }
        }
        let revision = revision.unwrap_or_default();
        let mut list_meta = json!({"resourceVersion": revision.to_string()});
        if let Some(start) = next {
            list_meta["continue"] = json!(encode_continue(revision, &start, None));
            if Self::selects_all(options) {
                list_meta["remainingItemCount"] = json!(remaining);
            }
        }
        let mut list = json!({
            "kind": def.list_kind(),
            "apiVersion": def.group_version.api_version(),
            "metadata": list_meta,
        });
        // Moved in, not through `json!`, which would copy every decoded item (a restarted
        // server's first lists go to storage while the caches load: 5,000 pods held twice).
        list["items"] = Value::Array(items);
        Ok(Listed::Value(list))
    }

    /// The revision a storage list reads at: the exact one asked for, else the current one
    /// (after checking that a `NotOlderThan` revision is not in the future).
    async fn list_revision(
        &self,
        def: &ResourceDef,
        options: &ListOptions,
    ) -> Result<Option<plinth_store::Revision>, ApiError> {
        let rv = options.resource_version.as_deref().unwrap_or("");
        match options.resource_version_match {
            Some(ResourceVersionMatch::Exact) => Ok(Some(parse_rv(rv)?).filter(|r| *r > 0)),
            Some(ResourceVersionMatch::NotOlderThan) | None if !rv.is_empty() && rv != "0" => {
                let wanted = parse_rv(rv)?;
                let current = self.current_revision(def).await?;
                if wanted > current {
                    return Err(store_error(
                        def,
                        "",
                        StoreError::FutureRevision {
                            requested: wanted,
                            current,
                        },
                    ));
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    /// Serves a list from the watch cache when kube-apiserver 1.32 would: `resourceVersion=0`
    /// (any state, which may be stale; the limit is ignored), and — without a limit or continue
    /// token — consistent reads (resourceVersion unset: the cache first catches up with the
    /// store's current revision), `NotOlderThan` reads and `Exact` reads within the cache's
    /// history. `None`: read storage instead (a paginated list, an older `Exact` one, or a
    /// cache that did not catch up in time).
    async fn try_list_cached(
        &self,
        def: &ResourceDef,
        prefix: &str,
        options: &ListOptions,
    ) -> Result<Option<EncodedList>, ApiError> {
        if options
            .continue_token
            .as_deref()
            .is_some_and(|t| !t.is_empty())
        {
            return Ok(None);
        }
        let rv = options.resource_version.as_deref().unwrap_or("");
        let exact = options.resource_version_match == Some(ResourceVersionMatch::Exact);
        let cacher = self.caches.get(&def.key_prefix(), &def.selector_fields());
        if exact && options.limit == 0 {
            return self
                .try_list_cached_at(def, prefix, options, &cacher, rv)
                .await;
        }
        let reached = if rv == "0" {
            cacher.wait_for(1).await?;
            true
        } else if options.limit > 0 || exact {
            false
        } else {
            self.cache_caught_up(def, &cacher, rv).await?
        };
        if !reached {
            return Ok(None);
        }
        self.caches.count_list(&def.key_prefix(), true);
        let (objects, revision) = cacher.snapshot(prefix);
        let (def, options) = (def.clone(), options.clone());
        // Decoding and filtering a large list is CPU work of up to hundreds of milliseconds:
        // off the async workers, so that the requests they carry meanwhile are not held up.
        tokio::task::spawn_blocking(move || Self::list_cached(&def, objects, revision, &options))
            .await
            .map(Some)
            .map_err(|e| ApiError::internal(format!("list: {e}")))
    }

    /// An `Exact` list at a past revision from the watch cache, while the revision is within
    /// the cache's history (its last changes, [`plinth_watchcache::Cacher::page`] puts the
    /// keys changed since back as they were): the cached bytes, as a current list's, instead
    /// of every object decoded from storage. `None`: older than that history, or the cache did
    /// not reach the revision in time — storage answers.
    async fn try_list_cached_at(
        &self,
        def: &ResourceDef,
        prefix: &str,
        options: &ListOptions,
        cacher: &plinth_watchcache::Cacher,
        rv: &str,
    ) -> Result<Option<EncodedList>, ApiError> {
        if rv.is_empty() || rv == "0" {
            return Ok(None);
        }
        let at = parse_rv(rv)?;
        if at <= 0 || !self.cache_caught_up(def, cacher, rv).await? {
            return Ok(None);
        }
        let item = |stored: &plinth_watchcache::Stored| Self::list_item(def, stored, options);
        let Some(page) = cacher.page(prefix, Some(at), None, None, 0, item) else {
            return Ok(None);
        };
        self.caches.count_list(&def.key_prefix(), true);
        Ok(Some(Self::encoded_page(def, prefix, options, page)))
    }

    /// Serves a page of a paginated list from the watch cache, at the revision of its first
    /// page (the cache's, once caught up with the store), when the resource serves its stored
    /// form and no field selector needs objects decoded. `None`: read storage instead (a
    /// resourceVersion given, or a continue token older than the cache's history).
    async fn try_page_cached(
        &self,
        def: &ResourceDef,
        prefix: &str,
        options: &ListOptions,
    ) -> Result<Option<EncodedList>, ApiError> {
        let token = options.continue_token.as_deref().filter(|t| !t.is_empty());
        let rv = options.resource_version.as_deref().unwrap_or("");
        let cacher = self.caches.get(&def.key_prefix(), &def.selector_fields());
        if options.limit == 0
            || !options
                .fields
                .terms
                .iter()
                .all(|t| cacher.extracts(&t.field))
            || !def.serves_stored_form()
            || (token.is_none() && !rv.is_empty())
        {
            return Ok(None);
        }
        let (at, after, before) = match token {
            Some(token) => {
                let (revision, start) = decode_continue(token)?;
                let before = continue_position(token);
                (Some(revision), Some(format!("{prefix}{start}")), before)
            }
            None if self.cache_caught_up(def, &cacher, "").await? => (None, None, None),
            None => return Ok(None),
        };
        let item = |stored: &plinth_watchcache::Stored| Self::list_item(def, stored, options);
        let Some(page) = cacher.page(prefix, at, after.as_deref(), before, options.limit, item)
        else {
            return Ok(None);
        };
        self.caches.count_list(&def.key_prefix(), true);
        Ok(Some(Self::encoded_page(def, prefix, options, page)))
    }

    /// A page from the watch cache as a list: a continue token and the count of what follows
    /// when more does (the count only when every object is selected, as kube gives it).
    fn encoded_page(
        def: &ResourceDef,
        prefix: &str,
        options: &ListOptions,
        page: plinth_watchcache::Page<crate::ListItem>,
    ) -> EncodedList {
        EncodedList {
            kind: def.list_kind(),
            api_version: def.group_version.api_version(),
            revision: page.revision,
            remaining: page
                .next
                .as_ref()
                .filter(|_| Self::selects_all(options))
                .map(|_| page.remaining),
            continue_token: page.next.map(|last| {
                encode_continue(
                    page.revision,
                    last.trim_start_matches(prefix),
                    page.position,
                )
            }),
            items: page.items,
        }
    }

    /// Whether `cacher` has caught up with resourceVersion `rv` — the store's current revision
    /// when `rv` is empty (a consistent read) — within the freshness wait. A revision the store
    /// has not reached yet is `false`: storage answers it with the right error.
    pub(super) async fn cache_caught_up(
        &self,
        def: &ResourceDef,
        cacher: &plinth_watchcache::Cacher,
        rv: &str,
    ) -> Result<bool, ApiError> {
        let reached = if rv.is_empty() {
            self.caches.consistent(cacher).await
        } else {
            if parse_rv(rv)? > self.current_revision(def).await? {
                return Ok(false);
            }
            let wanted = parse_rv(rv)?;
            self.caches.reach(cacher, wanted).await
        };
        Ok(reached.map_err(|e| store_error(def, "", e))?.is_some())
    }

    /// A list of `objects`, the cache's at `revision`: each object's cached bytes when this
    /// resource serves the stored form and the selectors need no decoding (no field selector:
    /// labels were extracted when the change arrived), else the object decoded, viewed,
    /// filtered and encoded.
    fn list_cached(
        def: &ResourceDef,
        objects: Vec<plinth_watchcache::Stored>,
        revision: plinth_store::Revision,
        options: &ListOptions,
    ) -> EncodedList {
        let items = objects
            .iter()
            .filter_map(|stored| Self::list_item(def, stored, options))
            .collect();
        EncodedList {
            kind: def.list_kind(),
            api_version: def.group_version.api_version(),
            revision,
            continue_token: None,
            remaining: None,
            items,
        }
    }

    /// A cached object as a list item, if the options' selectors select it: the cached object
    /// itself when it goes out as it is, else its view encoded.
    fn list_item(
        def: &ResourceDef,
        stored: &plinth_watchcache::Stored,
        options: &ListOptions,
    ) -> Option<ListItem> {
        if Self::wire_servable(def, stored, options) {
            return Self::cached_selected(stored, options)
                .then(|| ListItem::Cached(stored.clone()));
        }
        let object = view(def, stored.decode()?);
        Self::selected(def, &object, options)
            .then(|| bytes::Bytes::from(plinth_protobuf::to_json(&object)))
            .map(ListItem::Encoded)
    }

    /// Whether the options' selectors select a cached object, from its extracted labels and
    /// fields (see [`Registry::wire_servable`]).
    pub(super) fn cached_selected(
        stored: &plinth_watchcache::Stored,
        options: &ListOptions,
    ) -> bool {
        (options.labels.is_empty() || options.labels.matches(stored.labels()))
            && options
                .fields
                .matches(|field| stored.field(field).map(str::to_owned))
    }

    /// Whether `stored` goes out as the cache encoded it: `def` serves the stored form, the
    /// object was stored as this resource's kind and version, and the cache extracted every
    /// field the field selector names.
    pub(super) fn wire_servable(
        def: &ResourceDef,
        stored: &plinth_watchcache::Stored,
        options: &ListOptions,
    ) -> bool {
        let meta = stored.type_meta();
        options
            .fields
            .terms
            .iter()
            .all(|t| stored.field(&t.field).is_some())
            && def.serves_stored_form()
            && meta.kind == def.kind
            && meta.api_version == def.group_version.api_version()
    }
}

/// A list as the registry answers it.
#[derive(Debug)]
pub enum Listed {
    /// Built as a value (a storage list).
    Value(Value),
    /// From the watch cache: its items already encoded.
    Encoded(EncodedList),
}

impl Listed {
    /// The list as a value.
    pub fn into_value(self) -> Value {
        match self {
            Self::Value(list) => list,
            Self::Encoded(list) => list.to_value(),
        }
    }

    /// The list's resourceVersion and its items, each decoded as the iterator reaches it, with
    /// no list value around them: an in-process follower that keeps the items (an informer,
    /// an authorizer's graph) holds one decoded item at a time beside what it keeps.
    pub fn into_parts(self) -> (Option<String>, Items) {
        match self {
            Self::Value(mut list) => {
                let revision = list
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let items = match list.get_mut("items").map(Value::take) {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                };
                (revision, Items(ItemsInner::Values(items.into_iter())))
            }
            Self::Encoded(list) => (
                Some(list.revision.to_string()),
                Items(ItemsInner::Encoded(list.items.into_iter())),
            ),
        }
    }
}

/// The items of a [`Listed`], decoded one at a time ([`Listed::into_parts`]); an item that is
/// not JSON is left out.
#[derive(Debug)]
pub struct Items(ItemsInner);

#[derive(Debug)]
enum ItemsInner {
    Values(std::vec::IntoIter<Value>),
    Encoded(std::vec::IntoIter<ListItem>),
}

impl Iterator for Items {
    type Item = Value;

    fn next(&mut self) -> Option<Value> {
        match &mut self.0 {
            ItemsInner::Values(items) => items.next(),
            ItemsInner::Encoded(items) => {
                items.find_map(|item| serde_json::from_slice(item.json()).ok())
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.0 {
            ItemsInner::Values(items) => items.size_hint(),
            ItemsInner::Encoded(items) => (0, Some(items.len())),
        }
    }
}

/// A list whose items are JSON bytes: its JSON is the envelope around them, concatenated.
#[derive(Debug)]
pub struct EncodedList {
    /// The list's kind (`ConfigMapList`).
    pub kind: String,
    /// Its apiVersion.
    pub api_version: String,
    /// The revision it is at.
    pub revision: plinth_store::Revision,
    /// The continue token of the next page, if there is one.
    pub continue_token: Option<String>,
    /// How many objects follow the page, when the list selects all (kube's
    /// `remainingItemCount`).
    pub remaining: Option<usize>,
    /// The items.
    pub items: Vec<ListItem>,
}

/// One item of an [`EncodedList`].
#[derive(Debug)]
pub enum ListItem {
    /// A cached object that goes out as the cache keeps it (JSON, protobuf once asked for).
    Cached(plinth_watchcache::Stored),
    /// An object's JSON, encoded for this list (its view differs from the stored form).
    Encoded(bytes::Bytes),
}

impl ListItem {
    /// The item's JSON.
    pub fn json(&self) -> &bytes::Bytes {
        match self {
            Self::Cached(stored) => stored.wire(),
            Self::Encoded(bytes) => bytes,
        }
    }

    /// The item's protobuf message.
    ///
    /// # Errors
    /// [`plinth_protobuf::Unmapped`] when it has no protobuf form.
    fn protobuf(&self) -> Result<bytes::Bytes, plinth_protobuf::Unmapped> {
        let unmapped = || plinth_protobuf::Unmapped("items".into());
        match self {
            Self::Cached(stored) => stored.protobuf().cloned().ok_or_else(unmapped),
            Self::Encoded(json) => {
                let object: Value = serde_json::from_slice(json).map_err(|_| unmapped())?;
                plinth_protobuf::encode_message(&object).map(bytes::Bytes::from)
            }
        }
    }
}

impl EncodedList {
    /// The list as a value (for tables, metadata lists, YAML and in-process callers).
    pub fn to_value(&self) -> Value {
        let mut list = json!({
            "kind": self.kind,
            "apiVersion": self.api_version,
            "metadata": self.metadata(),
        });
        // Moved in, not through `json!` (which would copy every decoded item once more).
        list["items"] = Value::Array(self.decoded_items());
        list
    }

    /// Each item decoded (an item that is not JSON left out).
    fn decoded_items(&self) -> Vec<Value> {
        self.items
            .iter()
            .filter_map(|item| serde_json::from_slice(item.json()).ok())
            .collect()
    }

    /// The list in protobuf: each cached item's message as encoded once.
    ///
    /// # Errors
    /// [`plinth_protobuf::Unmapped`] for an item without a protobuf form.
    pub fn to_protobuf(&self) -> Result<Vec<u8>, plinth_protobuf::Unmapped> {
        let items = self
            .items
            .iter()
            .map(ListItem::protobuf)
            .collect::<Result<Vec<_>, _>>()?;
        plinth_protobuf::encode_list_of(&self.api_version, &self.kind, &self.metadata(), &items)
    }

    /// Whether every item is the watch cache's own (its messages encoded once, not per list).
    pub fn all_cached(&self) -> bool {
        self.items.iter().all(|i| matches!(i, ListItem::Cached(_)))
    }

    /// The list's `ListMeta`.
    pub fn metadata(&self) -> Value {
        let mut metadata = json!({"resourceVersion": self.revision.to_string()});
        if let Some(token) = &self.continue_token {
            metadata["continue"] = json!(token);
        }
        if let Some(remaining) = self.remaining {
            metadata["remainingItemCount"] = json!(remaining);
        }
        metadata
    }

    /// The list in protobuf ([`EncodedList::to_protobuf`]) in pieces of about `chunk` bytes:
    /// the envelope and metadata first, then the items' messages as cached (an item without a
    /// cached message is encoded before the first piece). What is held beside the cache is one
    /// piece and a handle per item.
    ///
    /// # Errors
    /// [`plinth_protobuf::Unmapped`] for an item without a protobuf form.
    pub fn protobuf_chunks(
        &self,
        chunk: usize,
    ) -> Result<impl Iterator<Item = bytes::Bytes> + use<>, plinth_protobuf::Unmapped> {
        let items = self
            .items
            .iter()
            .map(ListItem::protobuf)
            .collect::<Result<Vec<_>, _>>()?;
        let head = plinth_protobuf::list_head(
            &self.api_version,
            &self.kind,
            &self.metadata(),
            items.iter().map(bytes::Bytes::len),
        )?;
        let mut head = Some(bytes::Bytes::from(head));
        let mut at = 0usize;
        Ok(std::iter::from_fn(move || {
            if let Some(head) = head.take() {
                return Some(head);
            }
            if at >= items.len() {
                return None;
            }
            let mut out = Vec::new();
            while at < items.len() && (out.is_empty() || out.len() < chunk) {
                plinth_protobuf::list_item_prefix(items[at].len(), &mut out);
                out.extend_from_slice(&items[at]);
                at += 1;
            }
            Some(bytes::Bytes::from(out))
        }))
    }

    /// The list's JSON, byte for byte what [`plinth_protobuf::to_json`] writes of
    /// [`EncodedList::to_value`]: a built-in list as Go writes it (`kind`, `apiVersion`,
    /// `metadata`, `items`), a custom resource's with its keys sorted.
    pub fn to_json(&self) -> bytes::Bytes {
        let size: usize = self.items.iter().map(|i| i.json().len() + 1).sum();
        let mut out = Vec::with_capacity(size + 128);
        let (mut part, mut at) = (Part::Head, 0);
        while let Some(piece) = json_piece(self, &mut part, &mut at, usize::MAX) {
            out.extend_from_slice(&piece);
        }
        out.into()
    }

    /// The list's JSON ([`EncodedList::to_json`]) in pieces of about `chunk` bytes, each made
    /// when asked for: the envelope's head at once, then the items, then the tail — what a
    /// streamed response writes, holding no more than one piece beside the cached items.
    pub fn json_chunks(
        self: std::sync::Arc<Self>,
        chunk: usize,
    ) -> impl Iterator<Item = bytes::Bytes> {
        let mut at = 0usize;
        let mut part = Part::Head;
        std::iter::from_fn(move || json_piece(&self, &mut part, &mut at, chunk))
    }
}

/// Where [`json_piece`] is in a list.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Head,
    Items,
    Tail,
    Done,
}

/// The next piece of `list`'s JSON: the head, up to `chunk` bytes of items (at least one
/// item), the tail; `None` after the tail. `part` and `at` (the next item) say where it is.
fn json_piece(
    list: &EncodedList,
    part: &mut Part,
    at: &mut usize,
    chunk: usize,
) -> Option<bytes::Bytes> {
    let quoted = |text: &str| serde_json::to_string(text).unwrap_or_default();
    let item_kind = list.kind.strip_suffix("List").unwrap_or_default();
    // Built-in lists as Go writes them; custom resources' with their keys sorted.
    let go = plinth_protobuf::has_message(&list.api_version, item_kind);
    let mut out = Vec::new();
    match *part {
        Part::Head => {
            if go {
                out.extend_from_slice(b"{\"kind\":");
                out.extend_from_slice(quoted(&list.kind).as_bytes());
                out.extend_from_slice(b",\"apiVersion\":");
                out.extend_from_slice(quoted(&list.api_version).as_bytes());
                out.extend_from_slice(b",\"metadata\":{\"resourceVersion\":\"");
                out.extend_from_slice(list.revision.to_string().as_bytes());
                out.push(b'"');
                if let Some(token) = &list.continue_token {
                    out.extend_from_slice(b",\"continue\":");
                    out.extend_from_slice(quoted(token).as_bytes());
                }
                if let Some(remaining) = list.remaining {
                    out.extend_from_slice(b",\"remainingItemCount\":");
                    out.extend_from_slice(remaining.to_string().as_bytes());
                }
                out.extend_from_slice(b"},\"items\":[");
            } else {
                out.extend_from_slice(b"{\"apiVersion\":");
                out.extend_from_slice(quoted(&list.api_version).as_bytes());
                out.extend_from_slice(b",\"items\":[");
            }
            *part = if list.items.is_empty() {
                Part::Tail
            } else {
                Part::Items
            };
        }
        Part::Items => {
            while *at < list.items.len() && (out.is_empty() || out.len() < chunk) {
                if *at > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(list.items[*at].json());
                *at += 1;
            }
            if *at == list.items.len() {
                *part = Part::Tail;
            }
        }
        Part::Tail => {
            if go {
                out.extend_from_slice(b"]}");
            } else {
                out.extend_from_slice(b"],\"kind\":");
                out.extend_from_slice(quoted(&list.kind).as_bytes());
                out.extend_from_slice(b",\"metadata\":{");
                if let Some(token) = &list.continue_token {
                    out.extend_from_slice(b"\"continue\":");
                    out.extend_from_slice(quoted(token).as_bytes());
                    out.push(b',');
                }
                if let Some(remaining) = list.remaining {
                    out.extend_from_slice(b"\"remainingItemCount\":");
                    out.extend_from_slice(remaining.to_string().as_bytes());
                    out.push(b',');
                }
                out.extend_from_slice(b"\"resourceVersion\":\"");
                out.extend_from_slice(list.revision.to_string().as_bytes());
                out.extend_from_slice(b"\"}}");
            }
            *part = Part::Done;
        }
        Part::Done => return None,
    }
    Some(out.into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::sync::Arc;

    fn list(api_version: &str, kind: &str, n: usize, token: bool) -> EncodedList {
        let items = (0..n)
            .map(|i| {
                let object = json!({
                    "apiVersion": api_version,
                    "kind": kind.strip_suffix("List").unwrap(),
                    "metadata": {"name": format!("item-{i}"), "namespace": "default"},
                    "data": {"key": "x".repeat(i % 300)},
                });
                ListItem::Encoded(bytes::Bytes::from(plinth_protobuf::to_json(&object)))
            })
            .collect();
        EncodedList {
            kind: kind.into(),
            api_version: api_version.into(),
            revision: 42,
            continue_token: token.then(|| "next\"page".into()),
            remaining: token.then_some(7),
            items,
        }
    }

    #[test]
    fn a_streamed_list_is_the_buffered_one_byte_for_byte() {
        for (api_version, kind) in [("v1", "ConfigMapList"), ("example.com/v1", "WidgetList")] {
            for n in [0, 1, 2, 57] {
                for token in [false, true] {
                    let list = Arc::new(list(api_version, kind, n, token));
                    let buffered = list.to_json();
                    assert_eq!(
                        buffered,
                        bytes::Bytes::from(plinth_protobuf::to_json(&list.to_value())),
                        "{kind}, {n} items"
                    );
                    for chunk in [1, 100, 4096, usize::MAX] {
                        let pieces: Vec<bytes::Bytes> = list.clone().json_chunks(chunk).collect();
                        // The head alone first (it leaves at once), then pieces of items
                        // of about `chunk` bytes, then the tail.
                        assert!(pieces.len() >= 2, "{kind}, {n} items, chunk {chunk}");
                        if n > 0 && chunk == 1 {
                            assert_eq!(pieces.len(), n + 2);
                        }
                        assert_eq!(pieces.concat(), buffered.to_vec(), "{kind}, {n}, {chunk}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_lists_parts_are_its_revision_and_items_as_the_list_value_has_them() {
        for n in [0, 1, 57] {
            let value = list("v1", "ConfigMapList", n, true).to_value();
            let expected = (
                value["metadata"]["resourceVersion"]
                    .as_str()
                    .map(str::to_owned),
                value["items"].as_array().unwrap().clone(),
            );
            assert_eq!(expected.0.as_deref(), Some("42"));
            assert_eq!(expected.1.len(), n);
            let parts = |listed: Listed| {
                let (revision, items) = listed.into_parts();
                (revision, items.collect::<Vec<_>>())
            };
            let encoded = Listed::Encoded(list("v1", "ConfigMapList", n, true));
            assert_eq!(parts(encoded), expected, "{n} items, encoded");
            assert_eq!(
                parts(Listed::Value(value)),
                expected,
                "{n} items, as a value"
            );
        }
        let empty = Listed::Value(json!({"kind": "ConfigMapList", "metadata": {}}));
        assert_eq!(empty.into_parts().0, None);
        let (_, mut items) = Listed::Value(json!({"metadata": {}})).into_parts();
        assert_eq!(items.next(), None);
    }

    #[test]
    fn a_streamed_protobuf_list_is_the_buffered_one_byte_for_byte() {
        for n in [0, 1, 2, 57, 300] {
            for token in [false, true] {
                let list = list("v1", "ConfigMapList", n, token);
                let buffered = list.to_protobuf().unwrap();
                for chunk in [1, 100, 4096, usize::MAX] {
                    let pieces: Vec<bytes::Bytes> = list.protobuf_chunks(chunk).unwrap().collect();
                    // The envelope first, alone; then the items.
                    assert_eq!(pieces.len() > 1, n > 0, "{n} items, chunk {chunk}");
                    if n > 0 && chunk == 1 {
                        assert_eq!(pieces.len(), n + 1);
                    }
                    assert_eq!(pieces.concat(), buffered, "{n} items, chunk {chunk}");
                }
            }
        }
    }
}
