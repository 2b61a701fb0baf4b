//! The generic registry: every verb on every resource, driven by its [`ResourceDef`], over
//! [`plinth_store::Store`]. The order of steps lives here once — decode, prepare, validate,
//! admit, store — and optimistic concurrency is the store's guaranteed-update loop.
//!
//! Objects are stored as JSON without `metadata.resourceVersion`; it is set on the way out from
//! the store's mod revision, as kube-apiserver's etcd3 storage does.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use plinth_core::meta::{finalizers, format_time, labels, metadata, metadata_mut};
use plinth_core::selector::{FieldSelector, LabelSelector};
use plinth_core::{ApiError, Cause, StatusReason};
use plinth_store::{
    EventKind, KeyValue, RangeRequest, Revision, Store, StoreError, Update, guaranteed_update,
};
use serde_json::{Map, Value, json};

use crate::resources::{Kind, ResourceDef, Resources, name_causes};
use crate::schema;

/// Largest request body accepted (kube-apiserver's limit is 3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// The server's view of the clock, in Unix seconds.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `fieldValidation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Unknown fields are dropped silently.
    Ignore,
    /// Unknown fields are dropped with a warning.
    #[default]
    Warn,
    /// Unknown fields fail the request.
    Strict,
}

impl FieldValidation {
    /// Parses the query parameter.
    ///
    /// # Errors
    /// 400 for anything but `Ignore`, `Warn`, `Strict`.
    pub fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value {
            None | Some("") | Some("Warn") => Ok(Self::Warn),
            Some("Ignore") => Ok(Self::Ignore),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: {other}. Must be one of Ignore, Warn, Strict"
            ))),
        }
    }
}

/// Options of a write.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: everything but storing.
    pub dry_run: bool,
    /// `fieldValidation`.
    pub field_validation: FieldValidation,
    /// `fieldManager`, as given.
    pub field_manager: Option<String>,
    /// The manager recorded when none is given (from the User-Agent).
    pub default_manager: String,
    /// `force`: an apply takes conflicting fields.
    pub force: bool,
}

impl WriteOptions {
    /// Options for the server's own controllers, whose writes are recorded in managedFields
    /// under `manager` (as kube-controller-manager's and kube-apiserver's are under theirs).
    pub fn internal(manager: &str) -> Self {
        Self {
            default_manager: manager.to_owned(),
            ..Self::default()
        }
    }

    /// The manager an ordinary write is recorded under.
    fn manager(&self, def: &ResourceDef, subresource: &str) -> plinth_core::managed::Manager {
        let name = match &self.field_manager {
            Some(m) => m.clone(),
            None => self.default_manager.clone(),
        };
        plinth_core::managed::Manager {
            name,
            operation: plinth_core::managed::Operation::Update,
            api_version: def.group_version.api_version(),
            subresource: subresource.to_owned(),
            time: format_time(now()),
        }
    }
}

/// Options of a list or watch.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `limit` (0: none).
    pub limit: usize,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<String>,
}

/// The outcome of a write: the object and the warnings to send back.
#[derive(Debug)]
pub struct Written {
    /// The object as stored (or as it would be, for a dry run).
    pub object: Value,
    /// `Warning` headers.
    pub warnings: Vec<String>,
    /// Whether it was created (201) rather than updated (200).
    pub created: bool,
}

/// One watch event, ready to be serialised (`{"type": ..., "object": ...}`).
#[derive(Debug, Clone)]
pub struct WatchEvent {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`.
    pub kind: &'static str,
    /// The object (a `Status` for `ERROR`).
    pub object: Value,
}

/// The registry.
#[derive(Clone)]
pub struct Registry {
    /// Where objects live.
    pub store: Arc<dyn Store>,
    /// What is served.
    pub resources: Arc<Resources>,
    /// The watch cache.
    pub caches: Arc<crate::cache::Caches>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

/// Turns a storage error into the API error kube-apiserver gives (the one place this happens).
pub fn store_error(def: &ResourceDef, name: &str, error: StoreError) -> ApiError {
    let resource = def.group_resource();
    match error {
        StoreError::NotFound { .. } => ApiError::not_found(&resource, name),
        StoreError::AlreadyExists { .. } => ApiError::already_exists(&resource, name),
        StoreError::Conflict { .. } => ApiError::stale(&resource, name),
        StoreError::Compacted {
            requested,
            compacted,
        } => ApiError::expired(format!(
            "too old resource version: {requested} ({})",
            compacted.unwrap_or_default()
        )),
        StoreError::FutureRevision { requested, current } => {
            let mut e = ApiError::new(
                StatusReason::Timeout,
                format!("Too large resource version: {requested}, current: {current}"),
            );
            e.details.retry_after_seconds = Some(1);
            e
        }
        StoreError::ValueTooLarge { .. } => ApiError::too_large(MAX_BODY_BYTES),
        StoreError::InvalidKey { key } => {
            ApiError::bad_request(format!("invalid object key {key:?}"))
        }
        other => ApiError::internal(other),
    }
}

/// Decodes a stored object, setting its resourceVersion.
fn decode(kv: &KeyValue) -> Result<Value, ApiError> {
    let mut object: Value = serde_json::from_slice(&kv.value).map_err(|e| {
        ApiError::internal(format!("stored object {} is not valid JSON: {e}", kv.key))
    })?;
    if let Some(meta) = metadata_mut(&mut object) {
        meta.insert("resourceVersion".into(), json!(kv.mod_revision.to_string()));
    }
    Ok(object)
}

/// Encodes an object for storage (without resourceVersion).
fn encode(object: &Value) -> Result<Bytes, ApiError> {
    let mut object = object.clone();
    if let Some(meta) = metadata_mut(&mut object) {
        meta.remove("resourceVersion");
        meta.remove("selfLink");
    }
    serde_json::to_vec(&object)
        .map(Bytes::from)
        .map_err(|e| ApiError::internal(format!("encode an object: {e}")))
}

/// events.k8s.io/v1 field names and their core/v1 Event counterparts: both API versions are
/// one resource, stored in the core form.
const EVENT_FIELDS: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

fn rename_fields(mut object: Value, to_core: bool) -> Value {
    if let Some(map) = object.as_object_mut() {
        for (events, core) in EVENT_FIELDS {
            let (from, to) = if to_core {
                (events, core)
            } else {
                (core, events)
            };
            if let Some(value) = map.remove(from) {
                map.insert(to.to_owned(), value);
            }
        }
    }
    object
}

/// A stored object as `def` presents it.
pub(crate) fn to_view(def: &ResourceDef, object: Value) -> Value {
    if def.events_k8s_io {
        rename_fields(object, false)
    } else {
        object
    }
}

/// An object of `def` as it is stored.
fn to_storage(def: &ResourceDef, object: &Value) -> Value {
    if def.events_k8s_io {
        rename_fields(object.clone(), true)
    } else {
        object.clone()
    }
}

/// A stored object as `def` presents it, apiVersion and kind included.
fn decode_view(def: &ResourceDef, kv: &KeyValue) -> Result<Value, ApiError> {
    let mut object = to_view(def, decode(kv)?);
    set_type_meta(&mut object, def);
    Ok(object)
}

fn encode_view(def: &ResourceDef, object: &Value) -> Result<Bytes, ApiError> {
    encode(&to_storage(def, object))
}

fn rv_of(object: &Value) -> Option<&str> {
    metadata(object)?
        .get("resourceVersion")?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// Parses a resourceVersion the client sent.
fn parse_rv(rv: &str) -> Result<Revision, ApiError> {
    rv.parse::<Revision>()
        .ok()
        .filter(|r| *r >= 0)
        .ok_or_else(|| ApiError::bad_request(format!("invalid resource version: {rv}")))
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4().as_bytes()[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// A continue token: the revision of the first page and the key to resume after.
fn encode_continue(revision: Revision, start: &str) -> String {
    use base64::Engine;
    let token = json!({"v": "meta.k8s.io/v1", "rv": revision, "start": start});
    base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
}

fn decode_continue(token: &str) -> Result<(Revision, String), ApiError> {
    use base64::Engine;
    let invalid = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .or_else(|_| base64::engine::general_purpose::STANDARD.decode(token))
        .map_err(|_| invalid())?;
    let parsed: Value = serde_json::from_slice(&raw).map_err(|_| invalid())?;
    let revision = parsed
        .get("rv")
        .and_then(Value::as_i64)
        .filter(|r| *r > 0)
        .ok_or_else(invalid)?;
    let start = parsed
        .get("start")
        .and_then(Value::as_str)
        .ok_or_else(invalid)?;
    if start.contains("..") || start.starts_with('/') {
        return Err(invalid());
    }
    Ok((revision, start.to_owned()))
}

impl Registry {
    /// 404 unless the object at `key` exists.
    async fn require_exists(
        &self,
        def: &ResourceDef,
        key: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        if self.exists(def, key, name).await? {
            Ok(())
        } else {
            Err(ApiError::not_found(&def.group_resource(), name))
        }
    }

    /// Whether the object stored under `key` exists.
    async fn exists(&self, def: &ResourceDef, key: &str, name: &str) -> Result<bool, ApiError> {
        Ok(self
            .store
            .get(key)
            .await
            .map_err(|e| store_error(def, name, e))?
            .is_some())
    }

    /// The namespace must exist and not be terminating, for creating in it.
    async fn check_namespace(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        let Some(ns_def) = self.resources.get("", "v1", "namespaces") else {
            return Ok(());
        };
        let Some(kv) = self
            .store
            .get(&ns_def.key(None, namespace))
            .await
            .map_err(|e| store_error(&ns_def, namespace, e))?
        else {
            return Err(ApiError::not_found(&ns_def.group_resource(), namespace));
        };
        let ns = decode(&kv)?;
        if ns
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|v| !v.is_null())
        {
            let mut error = ApiError::new(
                StatusReason::Forbidden,
                format!(
                    "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                    def.group_resource()
                ),
            );
            error.details.name = Some(name.to_owned());
            error.details.kind = Some(def.plural.clone());
            error.details.causes = vec![Cause::new(
                "NamespaceTerminating",
                "metadata.namespace",
                format!("namespace {namespace} is being terminated"),
            )];
            return Err(error);
        }
        Ok(())
    }

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
            Some(kv) => decode_view(def, &kv),
            None => Err(ApiError::not_found(&def.group_resource(), name)),
        }
    }

    fn selected(def: &ResourceDef, object: &Value, options: &ListOptions) -> bool {
        (options.labels.is_empty() || options.labels.matches(&labels(object)))
            && options
                .fields
                .matches(|field| def.field_value(object, field))
    }

    /// Checks a field selector against what the resource supports.
    ///
    /// # Errors
    /// 400 naming the first unsupported field.
    pub fn check_field_selector(def: &ResourceDef, fields: &FieldSelector) -> Result<(), ApiError> {
        let Some(term) = fields.terms.iter().find(|t| !def.is_selectable(&t.field)) else {
            return Ok(());
        };
        // Types with field selectors of their own answer as their conversion function does;
        // the others with the scheme's default.
        let message = if def.selectable_fields.is_empty() {
            format!(
                "\"{}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                term.field
            )
        } else {
            format!("field label not supported: {}", term.field)
        };
        Err(ApiError::bad_request(message))
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
        Self::check_field_selector(def, &options.fields)?;
        let prefix = def.list_prefix(namespace);
        if let Some(list) = self.try_list_cached(def, &prefix, options).await? {
            return Ok(list);
        }
        self.caches.count_list(&def.key_prefix(), false);
        let (mut revision, mut start) = match &options.continue_token {
            Some(token) if !token.is_empty() => {
                let (rev, start) = decode_continue(token)?;
                (Some(rev), Some(format!("{prefix}{start}\0")))
            }
            _ => (None, None),
        };
        if revision.is_none() {
            match (
                options.resource_version.as_deref(),
                options.resource_version_match.as_deref(),
            ) {
                (Some(rv), Some("Exact")) => revision = Some(parse_rv(rv)?).filter(|r| *r > 0),
                (Some(rv), Some("NotOlderThan") | None) if !rv.is_empty() && rv != "0" => {
                    let wanted = parse_rv(rv)?;
                    let current = self
                        .store
                        .current_revision()
                        .await
                        .map_err(|e| store_error(def, "", e))?;
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
                }
                (_, Some(other)) if !matches!(other, "Exact" | "NotOlderThan") => {
                    return Err(ApiError::bad_request(format!(
                        "resourceVersionMatch: Unsupported value: \"{other}\": supported values: \"Exact\", \"NotOlderThan\""
                    )));
                }
                _ => {}
            }
        }
        let mut items = Vec::new();
        let mut next: Option<String> = None;
        let limit = options.limit;
        loop {
            let mut request = RangeRequest::prefix(prefix.clone());
            request.start = start.clone();
            request.revision = revision;
            if limit > 0 {
                request.limit = Some((limit - items.len()).max(1));
            }
            let page = self.store.range(request).await.map_err(|e| match e {
                StoreError::Compacted { .. } if options.continue_token.is_some() => ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ),
                other => store_error(def, "", other),
            })?;
            revision = Some(page.revision);
            let last_key = page.kvs.last().map(|kv| kv.key.clone());
            for kv in &page.kvs {
                let object = decode_view(def, kv)?;
                if Self::selected(def, &object, options) {
                    items.push(object);
                }
            }
            match last_key {
                Some(last) if page.more => {
                    if limit > 0 && items.len() >= limit {
                        next = Some(last.trim_start_matches(prefix.as_str()).to_owned());
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
            list_meta["continue"] = json!(encode_continue(revision, &start));
        }
        for item in &mut items {
            set_type_meta(item, def);
        }
        Ok(json!({
            "kind": def.list_kind(),
            "apiVersion": def.group_version.api_version(),
            "metadata": list_meta,
            "items": items,
        }))
    }

    /// Serves a list from the watch cache when kube-apiserver 1.32 would: `resourceVersion=0`
    /// (any state, which may be stale; the limit is ignored), and — without a limit or continue
    /// token — consistent reads (resourceVersion unset: the cache first catches up with the
    /// store's current revision) and `NotOlderThan` reads. `None`: read storage instead (a
    /// paginated or `Exact` list, or a cache that did not catch up in time).
    async fn try_list_cached(
        &self,
        def: &ResourceDef,
        prefix: &str,
        options: &ListOptions,
    ) -> Result<Option<Value>, ApiError> {
        if options
            .continue_token
            .as_deref()
            .is_some_and(|t| !t.is_empty())
        {
            return Ok(None);
        }
        let rv = options.resource_version.as_deref().unwrap_or("");
        let exact = match options.resource_version_match.as_deref() {
            None | Some("NotOlderThan") => false,
            Some("Exact") => true,
            // Refused with the right message on the storage path.
            Some(_) => return Ok(None),
        };
        let cacher = self.caches.get(&def.key_prefix());
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
        Ok(Some(self.list_cached(def, &cacher, prefix, options)))
    }

    /// Whether `cacher` has caught up with resourceVersion `rv` — the store's current revision
    /// when `rv` is empty (a consistent read) — within the freshness wait. A revision the store
    /// has not reached yet is `false`: storage answers it with the right error.
    async fn cache_caught_up(
        &self,
        def: &ResourceDef,
        cacher: &crate::cache::Cacher,
        rv: &str,
    ) -> Result<bool, ApiError> {
        let reached = if rv.is_empty() {
            self.caches.consistent(cacher).await
        } else {
            let wanted = parse_rv(rv)?;
            let current = self
                .store
                .current_revision()
                .await
                .map_err(|e| store_error(def, "", e))?;
            if wanted > current {
                return Ok(false);
            }
            self.caches.reach(cacher, wanted).await
        };
        Ok(reached.map_err(|e| store_error(def, "", e))?.is_some())
    }

    /// A list of the cache's current objects under `prefix`.
    fn list_cached(
        &self,
        def: &ResourceDef,
        cacher: &crate::cache::Cacher,
        prefix: &str,
        options: &ListOptions,
    ) -> Value {
        let (objects, revision) = cacher.snapshot(prefix);
        let items: Vec<Value> = objects
            .iter()
            .filter_map(crate::cache::Stored::decode)
            .map(|o| {
                let mut object = to_view(def, o);
                set_type_meta(&mut object, def);
                object
            })
            .filter(|o| Self::selected(def, o, options))
            .collect();
        json!({
            "kind": def.list_kind(),
            "apiVersion": def.group_version.api_version(),
            "metadata": {"resourceVersion": revision.to_string()},
            "items": items,
        })
    }

    /// Checks the body's apiVersion/kind and unknown fields; returns the warnings to send.
    fn check_body(
        def: &ResourceDef,
        object: &mut Value,
        options: &WriteOptions,
    ) -> Result<Vec<String>, ApiError> {
        let Some(map) = object.as_object_mut() else {
            return Err(ApiError::bad_request(format!(
                "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: expected an object",
                def.kind
            )));
        };
        let expected = def.group_version.api_version();
        match map.get("apiVersion").and_then(Value::as_str) {
            Some(v) if !v.is_empty() && v != expected => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({v}) does not match the expected API version ({expected})"
                )));
            }
            _ => {}
        }
        match map.get("kind").and_then(Value::as_str) {
            Some(k) if !k.is_empty() && k != def.kind => {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    def.kind
                )));
            }
            _ => {}
        }
        let mut findings = schema::check(object, &def.schema, &def.kind);
        if let Some(structural) = &def.structural {
            findings.unknown = structural.prune(object);
            findings.unknown.sort();
            structural.apply_defaults(object);
        }
        let cannot = |detail: String| {
            ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: {detail}",
                def.kind, def.group_version.version, def.kind
            ))
        };
        if let Some(type_error) = findings.type_error {
            return Err(cannot(type_error));
        }
        let mut warnings = Vec::new();
        if !findings.unknown.is_empty() {
            match options.field_validation {
                FieldValidation::Strict => {
                    let fields: Vec<String> = findings
                        .unknown
                        .iter()
                        .map(|f| format!("unknown field \"{f}\""))
                        .collect();
                    return Err(cannot(format!(
                        "strict decoding error: {}",
                        fields.join(", ")
                    )));
                }
                FieldValidation::Warn => warnings.extend(
                    findings
                        .unknown
                        .iter()
                        .map(|f| format!("unknown field \"{f}\"")),
                ),
                FieldValidation::Ignore => {}
            }
            if def.structural.is_none() {
                schema::prune(object, &def.schema);
            }
        }
        set_type_meta(object, def);
        Ok(warnings)
    }

    /// The checks every write makes on the object it would store.
    fn validate(def: &ResourceDef, object: &Value, old: Option<&Value>) -> Result<(), ApiError> {
        let name = plinth_core::meta::name(object).unwrap_or("");
        let mut causes = Vec::new();
        if name.is_empty() {
            causes.push(Cause::required(
                "metadata.name",
                "name or generateName is required",
            ));
        } else {
            causes.extend(name_causes(def.name_rule, name));
        }
        if let Some(meta) = metadata(object) {
            if let Some(Value::Object(l)) = meta.get("labels") {
                causes.extend(plinth_core::validation::labels(l, "metadata.labels"));
            }
            if let Some(Value::Object(a)) = meta.get("annotations") {
                causes.extend(plinth_core::validation::annotations(
                    a,
                    "metadata.annotations",
                ));
            }
            for (i, f) in finalizers(object).iter().enumerate() {
                for message in plinth_core::validation::qualified_name(f) {
                    causes.push(Cause::invalid(
                        format!("metadata.finalizers[{i}]"),
                        &json!(f),
                        &message,
                    ));
                }
            }
        }
        causes.extend(Self::validate_kind(def, object, old));
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(
                &def.group_version.group,
                &def.kind,
                name,
                causes,
            ))
        }
    }

    fn validate_kind(def: &ResourceDef, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        match def.behaviour {
            // A write that leaves the spec as it was (status, metadata) is not held to rules a
            // stored CRD predates.
            Kind::Crd if old.is_some_and(|o| o.get("spec") == object.get("spec")) => {}
            Kind::Crd => causes.extend(crate::crd::validate_crd(object, old)),
            Kind::Custom => {
                if let Some(structural) = &def.structural {
                    causes.extend(structural.validate_update(object, old));
                }
            }
            Kind::ConfigMap | Kind::Secret => {
                let mut total = 0usize;
                for field in ["data", "binaryData"] {
                    if let Some(Value::Object(map)) = object.get(field) {
                        for (key, value) in map {
                            total += key.len() + value.as_str().map_or(0, str::len);
                            if !key.is_empty()
                                && key.len() <= 253
                                && key.bytes().all(|c| {
                                    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')
                                })
                                && key != "."
                                && key != ".."
                                && !key.starts_with("..")
                            {
                                continue;
                            }
                            causes.push(Cause::invalid(field, &json!(key), "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"));
                        }
                    }
                }
                if total > 1024 * 1024 {
                    causes.push(Cause::new(
                        "FieldValueTooLong",
                        "",
                        format!("Too long: must have at most {} bytes", 1024 * 1024),
                    ));
                }
                if let Some(old) = old.filter(|o| o.get("immutable") == Some(&json!(true))) {
                    for field in ["data", "binaryData"] {
                        if object.get(field) != old.get(field) {
                            causes.push(Cause::forbidden(
                                field,
                                "field is immutable when `immutable` is set",
                            ));
                        }
                    }
                    if object.get("immutable") != Some(&json!(true)) {
                        causes.push(Cause::forbidden(
                            "immutable",
                            "field is immutable when `immutable` is set",
                        ));
                    }
                }
                if def.behaviour == Kind::Secret
                    && let Some(old) = old
                    && object.get("type") != old.get("type")
                {
                    causes.push(Cause::immutable(
                        "type",
                        object.get("type").unwrap_or(&Value::Null),
                    ));
                }
            }
            Kind::Namespace | Kind::Plain => {}
        }
        causes
    }

    /// Server-set fields of a new object, and per-type defaults.
    fn prepare_create(
        def: &ResourceDef,
        object: &mut Value,
        namespace: Option<&str>,
    ) -> Result<(), ApiError> {
        let now = now();
        let meta = metadata_mut(object)
            .ok_or_else(|| ApiError::bad_request("the object provided is not a JSON object"))?;
        if meta
            .get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        if def.namespaced {
            claim_namespace(meta, namespace.unwrap_or("default"))?;
        } else {
            meta.remove("namespace");
        }
        let name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if name.is_empty()
            && let Some(generate) = meta
                .get("generateName")
                .and_then(Value::as_str)
                .filter(|g| !g.is_empty())
        {
            let base: String = generate.chars().take(58).collect();
            meta.insert("name".into(), json!(format!("{base}{}", random_suffix())));
        }
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        meta.insert("creationTimestamp".into(), json!(format_time(now)));
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        meta.remove("selfLink");
        if def.generation {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
        match def.behaviour {
            Kind::Namespace => {
                let spec = object
                    .as_object_mut()
                    .map(|o| o.entry("spec").or_insert_with(|| json!({})));
                if let Some(spec) = spec.and_then(Value::as_object_mut)
                    && !spec.contains_key("finalizers")
                {
                    spec.insert("finalizers".into(), json!(["kubernetes"]));
                }
                object["status"] = json!({"phase": "Active"});
            }
            Kind::Secret => Self::prepare_secret(object),
            Kind::Crd => {
                crate::crd::default_crd(object);
                if let Some(meta) = metadata_mut(object) {
                    let finalizers = meta.entry("finalizers").or_insert_with(|| json!([]));
                    if let Some(list) = finalizers.as_array_mut()
                        && !list.iter().any(|f| f == crate::crd::CLEANUP_FINALIZER)
                    {
                        list.push(json!(crate::crd::CLEANUP_FINALIZER));
                    }
                }
                if let Some(map) = object.as_object_mut() {
                    map.remove("status");
                }
            }
            Kind::Custom => {
                if def.status_subresource
                    && let Some(map) = object.as_object_mut()
                {
                    map.remove("status");
                }
            }
            Kind::ConfigMap | Kind::Plain => {}
        }
        Ok(())
    }

    fn prepare_secret(object: &mut Value) {
        use base64::Engine;
        let Some(map) = object.as_object_mut() else {
            return;
        };
        if map
            .get("type")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            map.insert("type".into(), json!("Opaque"));
        }
        if let Some(Value::Object(string_data)) = map.remove("stringData") {
            let data = map.entry("data").or_insert_with(|| json!({}));
            if let Some(data) = data.as_object_mut() {
                for (k, v) in string_data {
                    let encoded = base64::engine::general_purpose::STANDARD
                        .encode(v.as_str().unwrap_or("").as_bytes());
                    data.insert(k, json!(encoded));
                }
            } else {
                *data = json!({});
            }
        }
    }

    /// Creates an object.
    ///
    /// # Errors
    /// 409 if it exists; 404 if its namespace does not; 422 if invalid; 400 for a malformed body.
    pub async fn create(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        object: Value,
        options: &WriteOptions,
    ) -> Result<Written, ApiError> {
        self.create_with(def, namespace, object, options, true)
            .await
    }

    /// Creates an object; `track`: record the creator's fields in `managedFields` (an apply
    /// has recorded them already).
    async fn create_with(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        mut object: Value,
        options: &WriteOptions,
        track: bool,
    ) -> Result<Written, ApiError> {
        if def.terminating {
            return Err(ApiError::method_not_allowed_because(
                "create not allowed while custom resource definition is terminating",
            ));
        }
        let warnings = Self::check_body(def, &mut object, options)?;
        Self::prepare_create(def, &mut object, namespace)?;
        Self::validate(def, &object, None)?;
        if track {
            let mut entries = base_entries(None, &object);
            plinth_core::managed::record_update(
                &mut entries,
                None,
                &object,
                &FieldShape(def),
                &options.manager(def, ""),
            );
            plinth_core::managed::write_entries(&mut object, entries);
        }
        let name = plinth_core::meta::name(&object).unwrap_or("").to_owned();
        let namespace = plinth_core::meta::namespace(&object).map(str::to_owned);
        if def.namespaced
            && let Some(ns) = &namespace
        {
            self.check_namespace(def, ns, &name).await?;
        }
        let key = def.key(namespace.as_deref(), &name);
        if options.dry_run {
            if self
                .store
                .get(&key)
                .await
                .map_err(|e| store_error(def, &name, e))?
                .is_some()
            {
                return Err(ApiError::already_exists(&def.group_resource(), &name));
            }
            return Ok(Written {
                object,
                warnings,
                created: true,
            });
        }
        let revision = self
            .store
            .create(&key, encode_view(def, &object)?)
            .await
            .map_err(|e| store_error(def, &name, e))?;
        if let Some(meta) = metadata_mut(&mut object) {
            meta.insert("resourceVersion".into(), json!(revision.to_string()));
        }
        Ok(Written {
            object,
            warnings,
            created: true,
        })
    }

    /// Replaces an object (PUT), or its status (`status = true`).
    ///
    /// # Errors
    /// 404 if absent (unless the type creates on update); 409 on a stale resourceVersion; 422 if
    /// invalid; 400 for a malformed body or a name that does not match the URL.
    pub async fn update(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        mut object: Value,
        status: bool,
        options: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let warnings = Self::check_body(def, &mut object, options)?;
        match plinth_core::meta::name(&object) {
            Some(given) if !given.is_empty() && given != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({given}) does not match the name on the URL ({name})"
                )));
            }
            _ => {
                if let Some(meta) = metadata_mut(&mut object) {
                    meta.insert("name".into(), json!(name));
                }
            }
        }
        if def.namespaced
            && let (Some(meta), Some(ns)) = (metadata_mut(&mut object), namespace)
        {
            claim_namespace(meta, ns)?;
        }
        let key = def.key(namespace, name);
        let exists = self.exists(def, &key, name).await?;
        if !exists {
            if def.allow_create_on_update && !status {
                if let Some(meta) = metadata_mut(&mut object) {
                    meta.remove("resourceVersion");
                }
                return self.create(def, namespace, object, options).await;
            }
            return Err(ApiError::not_found(&def.group_resource(), name));
        }
        let precondition = rv_of(&object).map(parse_rv).transpose()?;
        let subresource = if status { "status" } else { "" };
        let written = self
            .write_update(
                def,
                &key,
                name,
                options,
                Some(subresource),
                move |current| {
                    if let Some(expected) = precondition
                        && expected != current_rv(current)
                    {
                        return Err(ApiError::stale(&def.group_resource(), name));
                    }
                    Ok(merge_for_update(def, current, object.clone(), status))
                },
            )
            .await?;
        Ok(Written {
            warnings,
            ..written
        })
    }

    /// The guaranteed-update loop shared by update and patch: `next` computes the new object
    /// from the current one; identical objects are not written.
    async fn write_update(
        &self,
        def: &ResourceDef,
        key: &str,
        name: &str,
        options: &WriteOptions,
        tracking: Option<&str>,
        next: impl Fn(&Value) -> Result<Value, ApiError>,
    ) -> Result<Written, ApiError> {
        let mut result: Option<Value> = None;
        let written = guaranteed_update::<_, _, UpdateError>(&*self.store, key, |kv| {
            let current = decode_view(def, kv)?;
            let mut new = next(&current)?;
            Self::validate(def, &new, Some(&current))?;
            finish_update(def, &current, &mut new);
            if let Some(subresource) = tracking {
                let mut entries = base_entries(Some(&current), &new);
                plinth_core::managed::record_update(
                    &mut entries,
                    Some(&current),
                    &new,
                    &FieldShape(def),
                    &options.manager(def, subresource),
                );
                plinth_core::managed::write_entries(&mut new, entries);
            }
            let unchanged = strip_rv(&new) == strip_rv(&current);
            result = Some(new.clone());
            if unchanged || options.dry_run {
                return Ok(Update::Unchanged);
            }
            Ok(Update::Write(encode_view(def, &new)?))
        })
        .await
        .map_err(|e| match e {
            UpdateError::Api(api) => api,
            UpdateError::Store(store) => store_error(def, name, store),
        })?;
        let mut object = result.ok_or_else(|| ApiError::internal("update produced no object"))?;
        if options.dry_run {
            return Ok(Written {
                object,
                warnings: Vec::new(),
                created: false,
            });
        }
        if let Some(meta) = metadata_mut(&mut object) {
            meta.insert(
                "resourceVersion".into(),
                json!(written.mod_revision.to_string()),
            );
        }
        // The last finalizer of a deleted object is gone: the object goes with it.
        if is_deleting(&object)
            && finalizers(&object).is_empty()
            && !(def.behaviour == Kind::Namespace && namespace_finalizers(&object))
        {
            match self.store.delete(key, Some(written.mod_revision)).await {
                // Gone already, or changed again since: the next writer finishes the job.
                Ok(_) | Err(StoreError::NotFound { .. } | StoreError::Conflict { .. }) => {}
                Err(e) => return Err(store_error(def, name, e)),
            }
        }
        Ok(Written {
            object,
            warnings: Vec::new(),
            created: false,
        })
    }

    /// Applies a patch (`application/merge-patch+json`, `application/json-patch+json`,
    /// `application/strategic-merge-patch+json`) to an object or its status.
    ///
    /// # Errors
    /// 404 if absent; 415 for another patch type; 422 if the patch cannot be applied or the
    /// result is invalid; 409 on a resourceVersion precondition in the patch that fails.
    pub async fn patch(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        patch: PatchBody<'_>,
        status: bool,
        options: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let PatchBody {
            content_type: patch_type,
            body: patch,
        } = patch;
        let kind = match patch_type {
            "application/merge-patch+json" => PatchKind::Merge,
            "application/strategic-merge-patch+json" if def.behaviour != Kind::Custom => {
                PatchKind::Strategic
            }
            "application/json-patch+json" => PatchKind::Json,
            other => {
                return Err(ApiError::new(
                    StatusReason::UnsupportedMediaType,
                    format!(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml; got {other}"
                    ),
                ));
            }
        };
        let patch: Value = serde_json::from_slice(patch)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
        let json_patch = match kind {
            PatchKind::Json => Some(
                serde_json::from_value::<json_patch::Patch>(patch.clone()).map_err(|e| {
                    ApiError::bad_request(format!(
                        "the server rejected our request due to an error in our request: {e}"
                    ))
                })?,
            ),
            PatchKind::Merge | PatchKind::Strategic => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request("the patch must be a JSON object"));
                }
                None
            }
        };
        let key = def.key(namespace, name);
        self.require_exists(def, &key, name).await?;
        let warnings = std::sync::Mutex::new(Vec::new());
        let written = self
            .write_update(def, &key, name, options, Some(if status { "status" } else { "" }), |current| {
                let mut patched = current.clone();
                match &json_patch {
                    Some(ops) => json_patch::patch(&mut patched, ops).map_err(|e| {
                        ApiError::new(StatusReason::Invalid, format!("the server rejected our request due to an error in our request: {e}"))
                    })?,
                    None if matches!(kind, PatchKind::Strategic) => plinth_core::smp::apply(&mut patched, &patch, &list_strategies(def))
                        .map_err(|e| ApiError::new(StatusReason::Invalid, e.0))?,
                    None => json_patch::merge(&mut patched, &patch),
                }
                let precondition = rv_of(&patched).map(parse_rv).transpose()?;
                if let Some(expected) = precondition
                    && expected != current_rv(current)
                {
                    return Err(ApiError::stale(&def.group_resource(), name));
                }
                let found = Self::check_body(def, &mut patched, options)?;
                if let Ok(mut w) = warnings.lock() {
                    *w = found;
                }
                if plinth_core::meta::name(&patched) != Some(name) {
                    return Err(ApiError::invalid(
                        &def.group_version.group,
                        &def.kind,
                        name,
                        vec![Cause::invalid("metadata.name", &json!(plinth_core::meta::name(&patched)), "field is immutable")],
                    ));
                }
                Ok(merge_for_update(def, current, patched, status))
            })
            .await?;
        let warnings = warnings.into_inner().unwrap_or_default();
        Ok(Written {
            warnings,
            ..written
        })
    }

    /// Server-side apply (`application/apply-patch+yaml`) of a configuration to an object or its
    /// status, creating the object if it does not exist.
    ///
    /// # Errors
    /// 422 without a field manager; 400 for a malformed configuration; 409 listing the
    /// conflicting managers and fields unless `force`; 422 if the result is invalid.
    pub async fn apply(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        body: &[u8],
        status: bool,
        options: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let Some(manager) = options.field_manager.clone().filter(|m| !m.is_empty()) else {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![Cause::required(
                    "fieldManager",
                    "is required for apply patch",
                )],
            ));
        };
        let mut config: Value = serde_norway::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        if !config.is_object() {
            return Err(ApiError::bad_request(
                "error decoding YAML: the apply configuration must be an object",
            ));
        }
        for field in ["apiVersion", "kind"] {
            if config
                .get(field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return Err(ApiError::bad_request(format!(
                    "{field} must be set in an apply configuration"
                )));
            }
        }
        if config
            .pointer("/metadata/managedFields")
            .is_some_and(|m| !m.is_null())
        {
            return Err(ApiError::bad_request("metadata.managedFields must be nil"));
        }
        // `field:` with nothing after it sets nothing.
        drop_nulls(&mut config);
        // Checks types, apiVersion/kind and unknown fields (warnings, or errors when strict).
        let mut checked = config.clone();
        let warnings = Self::check_body(def, &mut checked, options)?;
        if let Some(structural) = &def.structural {
            structural.prune(&mut config);
        }
        let meta = config
            .as_object_mut()
            .map(|m| m.entry("metadata").or_insert_with(|| json!({})))
            .and_then(Value::as_object_mut)
            .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
        match meta.get("name").and_then(Value::as_str) {
            Some(given) if !given.is_empty() && given != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({given}) does not match the name on the URL ({name})"
                )));
            }
            _ => {
                meta.insert("name".into(), json!(name));
            }
        }
        if def.namespaced
            && let Some(ns) = namespace
        {
            claim_namespace(meta, ns)?;
        }
        // What this endpoint may set: the status through /status, the rest otherwise.
        if let Some(map) = config.as_object_mut() {
            if status {
                map.retain(|k, _| {
                    matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status")
                });
            } else if def.status_subresource {
                map.remove("status");
            }
        }
        let me = plinth_core::managed::Manager {
            name: manager,
            operation: plinth_core::managed::Operation::Apply,
            api_version: def.group_version.api_version(),
            subresource: if status {
                "status".into()
            } else {
                String::new()
            },
            time: format_time(now()),
        };
        let shape = FieldShape(def);
        let key = def.key(namespace, name);
        let exists = self.exists(def, &key, name).await?;
        if !exists {
            if status {
                return Err(ApiError::not_found(&def.group_resource(), name));
            }
            let mut entries = Vec::new();
            let mut object =
                plinth_core::managed::apply(&mut entries, None, &config, &shape, &me, false)
                    .map_err(|c| conflict_error(&c))?;
            plinth_core::managed::write_entries(&mut object, entries);
            let written = self
                .create_with(def, namespace, object, options, false)
                .await?;
            return Ok(Written {
                warnings,
                ..written
            });
        }
        let precondition = rv_of(&config).map(parse_rv).transpose()?;
        let written = self
            .write_update(def, &key, name, options, None, |current| {
                if let Some(expected) = precondition
                    && expected != current_rv(current)
                {
                    return Err(ApiError::stale(&def.group_resource(), name));
                }
                let mut entries = plinth_core::managed::read_entries(current).unwrap_or_default();
                let mut merged = plinth_core::managed::apply(
                    &mut entries,
                    Some(current),
                    &config,
                    &shape,
                    &me,
                    options.force,
                )
                .map_err(|c| conflict_error(&c))?;
                Self::check_body(def, &mut merged, options)?;
                let mut result = merge_for_update(def, current, merged, status);
                plinth_core::managed::write_entries(&mut result, entries);
                Ok(result)
            })
            .await?;
        Ok(Written {
            warnings,
            ..written
        })
    }

    /// The `autoscaling/v1` Scale of a custom resource with a scale subresource.
    ///
    /// # Errors
    /// 404 if the object or the subresource does not exist.
    pub async fn get_scale(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        to_scale(def, &self.get(def, namespace, name).await?)
    }

    /// Writes the replicas of a Scale computed by `next` from the current one back into the
    /// custom resource; returns the new Scale.
    ///
    /// # Errors
    /// 404 if absent; 409 on a stale resourceVersion in the Scale; 422 for invalid replicas.
    pub async fn write_scale(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        options: &WriteOptions,
        next: impl Fn(&Value) -> Result<Value, ApiError>,
    ) -> Result<Value, ApiError> {
        let paths = def
            .scale
            .clone()
            .ok_or_else(|| ApiError::not_found(&def.group_resource(), name))?;
        let key = def.key(namespace, name);
        self.require_exists(def, &key, name).await?;
        let written = self
            .write_update(def, &key, name, options, Some("scale"), |current| {
                let scale = to_scale(def, current)?;
                let wanted = next(&scale)?;
                if let Some(rv) = rv_of(&wanted)
                    && parse_rv(rv)? != current_rv(current)
                {
                    return Err(ApiError::stale(&def.group_resource(), name));
                }
                let replicas = wanted
                    .pointer("/spec/replicas")
                    .cloned()
                    .unwrap_or(json!(0));
                let invalid = |detail: &str| {
                    ApiError::invalid(
                        "autoscaling",
                        "Scale",
                        name,
                        vec![Cause::invalid("spec.replicas", &replicas, detail)],
                    )
                };
                let count = replicas
                    .as_i64()
                    .ok_or_else(|| invalid("must be an integer"))?;
                if count < 0 {
                    return Err(invalid("must be greater than or equal to 0"));
                }
                let mut new = current.clone();
                set_path(&mut new, &paths.spec_replicas, json!(count));
                Ok(new)
            })
            .await?;
        to_scale(def, &written.object)
    }

    /// Deletes an object, or marks it deleted while finalizers remain. Returns the object as
    /// deleted or as marked, and whether it is gone.
    ///
    /// # Errors
    /// 404 if absent; 409 if a precondition fails.
    pub async fn delete(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<(Value, bool), ApiError> {
        let key = def.key(namespace, name);
        loop {
            let Some(kv) = self
                .store
                .get(&key)
                .await
                .map_err(|e| store_error(def, name, e))?
            else {
                return Err(ApiError::not_found(&def.group_resource(), name));
            };
            let current = decode_view(def, &kv)?;
            options.check_preconditions(def, name, &current)?;
            let had = finalizers(&current);
            let wanted = deletion_finalizers(&had, options.propagation);
            let pending = !wanted.is_empty()
                || (def.behaviour == Kind::Namespace && namespace_finalizers(&current));
            if pending {
                let same = had.len() == wanted.len() && wanted.iter().all(|f| had.contains(f));
                if is_deleting(&current) && same {
                    return Ok((current, false));
                }
                let mut marked = current.clone();
                if let Some(meta) = metadata_mut(&mut marked) {
                    if !same {
                        meta.insert("finalizers".into(), json!(wanted));
                    }
                    if !meta.contains_key("deletionTimestamp") {
                        meta.insert("deletionTimestamp".into(), json!(format_time(now())));
                        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
                    }
                }
                if def.behaviour == Kind::Namespace {
                    marked["status"]["phase"] = json!("Terminating");
                }
                if options.dry_run {
                    return Ok((marked, false));
                }
                match self
                    .store
                    .update(&key, encode_view(def, &marked)?, kv.mod_revision)
                    .await
                {
                    Ok(revision) => {
                        if let Some(meta) = metadata_mut(&mut marked) {
                            meta.insert("resourceVersion".into(), json!(revision.to_string()));
                        }
                        return Ok((marked, false));
                    }
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(e) => return Err(store_error(def, name, e)),
                }
            }
            if options.dry_run {
                return Ok((current, true));
            }
            match self.store.delete(&key, Some(kv.mod_revision)).await {
                Ok(_) => return Ok((current, true)),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(store_error(def, name, e)),
            }
        }
    }

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
            match self
                .watch(def.clone(), None, ListOptions::default(), false, false)
                .await
            {
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
        options: ListOptions,
        send_initial_events: bool,
        bookmarks: bool,
    ) -> Result<futures::stream::BoxStream<'static, WatchEvent>, ApiError> {
        Self::check_field_selector(&def, &options.fields)?;
        let rv = options.resource_version.clone().unwrap_or_default();
        let prefix = def.list_prefix(namespace.as_deref());
        let cacher = self.caches.get(&def.key_prefix());
        cacher.wait_for(1).await?;
        let options = Arc::new(options);
        let selected = {
            let (def, options) = (def.clone(), options.clone());
            move |object: &Value| Self::selected(&def, object, &options)
        };
        // The initial state comes from the cache's own snapshot when it may: "any" state
        // (resourceVersion 0), a consistent one once the cache has caught up with the store, or
        // with sendInitialEvents one not older than the resourceVersion given.
        let from_cache = if rv == "0" {
            true
        } else if rv.is_empty() || send_initial_events {
            self.cache_caught_up(&def, &cacher, &rv).await?
        } else {
            false
        };
        let (mut initial, subscription, snapshot) = if from_cache {
            let subscription = cacher.subscribe(&prefix, None)?;
            let initial: Vec<WatchEvent> = subscription
                .initial
                .iter()
                .filter_map(crate::cache::Stored::decode)
                .map(|o| {
                    let mut object = to_view(&def, o);
                    set_type_meta(&mut object, &def);
                    object
                })
                .filter(|o| selected(o))
                .map(|object| WatchEvent {
                    kind: "ADDED",
                    object,
                })
                .collect();
            let snapshot = subscription.revision;
            (initial, Ok(subscription), snapshot)
        } else if rv.is_empty() || send_initial_events {
            // A consistent snapshot from storage (the cache is behind), then the cache's
            // changes after it.
            let mut list_options = (*options).clone();
            list_options.limit = 0;
            list_options.continue_token = None;
            if !send_initial_events {
                list_options.resource_version = None;
            }
            let list = self.list(&def, namespace.as_deref(), &list_options).await?;
            let revision = list
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .map(parse_rv)
                .transpose()?
                .unwrap_or(0);
            let initial: Vec<WatchEvent> = list["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|object| WatchEvent {
                    kind: "ADDED",
                    object,
                })
                .collect();
            (
                initial,
                cacher
                    .subscribe(&prefix, Some(revision))
                    .map_err(|_| revision),
                revision,
            )
        } else {
            let from = parse_rv(&rv)?;
            (
                Vec::new(),
                cacher.subscribe(&prefix, Some(from)).map_err(|_| from),
                from,
            )
        };
        let live: futures::stream::BoxStream<'static, WatchEvent> = match subscription {
            Ok(subscription) => {
                // Only changes after the snapshot (or the resumed revision) are sent.
                let after = snapshot;
                let (def, options) = (def.clone(), options.clone());
                let replay = futures::stream::iter(subscription.replay);
                let live = tokio_stream::wrappers::ReceiverStream::new(subscription.live);
                replay
                    .map(crate::cache::Live::Event)
                    .chain(live)
                    .filter_map(move |item| {
                        let out = match item {
                            crate::cache::Live::Event(event) => (event.revision > after
                                && event.key.starts_with(&prefix))
                            .then(|| {
                                translate(
                                    &def,
                                    &options,
                                    event.kind,
                                    &event.object,
                                    event.prev.as_deref(),
                                )
                            })
                            .flatten(),
                            crate::cache::Live::Bookmark(revision) => (bookmarks
                                && revision >= after)
                                .then(|| bookmark(&def, revision, false)),
                        };
                        futures::future::ready(out)
                    })
                    .boxed()
            }
            Err(from) => {
                match self
                    .watch_storage(def.clone(), prefix, from, options.clone())
                    .await
                {
                    Ok(events) => events,
                    // As kube-apiserver's watch cache answers: the watch starts (200), and its
                    // one event is the 410 — which is what clients relist on.
                    Err(e) if e.reason == StatusReason::Expired => {
                        futures::stream::iter([WatchEvent {
                            kind: "ERROR",
                            object: e.to_status(),
                        }])
                        .boxed()
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        if send_initial_events {
            initial.push(bookmark(&def, snapshot, true));
        }
        Ok(futures::stream::iter(initial).chain(live).boxed())
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
                    Err(error) => Some(WatchEvent {
                        kind: "ERROR",
                        object: store_error(&def, "", error).to_status(),
                    }),
                }
            }
        });
        Ok(ends_after_error(events).boxed())
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
    WatchEvent {
        kind: "BOOKMARK",
        object: json!({"kind": def.kind, "apiVersion": def.group_version.api_version(), "metadata": metadata}),
    }
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
    let typed = |v: &Value| {
        let mut v = to_view(def, v.clone());
        set_type_meta(&mut v, def);
        v
    };
    let prev = prev.map(typed);
    let prev_selected = prev
        .as_ref()
        .is_some_and(|p| Registry::selected(def, p, options));
    match kind {
        EventKind::Progress => None,
        EventKind::Delete => prev_selected.then(|| WatchEvent {
            kind: "DELETED",
            object: typed(object),
        }),
        EventKind::Put => {
            let selected = Registry::selected(def, object, options);
            let kind = match (prev_selected, selected) {
                (true, true) => "MODIFIED",
                (false, true) => "ADDED",
                (true, false) => "DELETED",
                (false, false) => return None,
            };
            Some(WatchEvent {
                kind,
                object: typed(object),
            })
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

/// A patch as sent: its media type and body.
#[derive(Clone, Copy, Debug)]
pub struct PatchBody<'a> {
    /// `application/merge-patch+json` and the like.
    pub content_type: &'a str,
    /// The patch.
    pub body: &'a [u8],
}

/// `DeleteOptions`.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `propagationPolicy` (or the older `orphanDependents`); `None`: the object's own
    /// `orphan`/`foregroundDeletion` finalizer, else background.
    pub propagation: Option<Propagation>,
}

/// How the dependents of a deleted object are treated (`propagationPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// The garbage collector deletes the dependents after the owner is gone.
    Background,
    /// The owner stays (finalizer `foregroundDeletion`) until its blocking dependents are gone.
    Foreground,
    /// The owner stays (finalizer `orphan`) until its dependents no longer reference it.
    Orphan,
}

/// The finalizer that keeps an owner until its dependents are orphaned.
pub const FINALIZER_ORPHAN: &str = "orphan";
/// The finalizer that keeps an owner until its blocking dependents are deleted.
pub const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

impl Propagation {
    /// Parses `propagationPolicy` and `orphanDependents` as kube-apiserver validates them.
    ///
    /// # Errors
    /// 422 for an unknown policy, or both fields set.
    pub fn parse(policy: Option<&str>, orphan: Option<bool>) -> Result<Option<Self>, ApiError> {
        let invalid = |cause| ApiError::invalid("meta.k8s.io", "DeleteOptions", "", vec![cause]);
        if let (Some(policy), Some(_)) = (policy, orphan) {
            return Err(invalid(plinth_core::Cause::invalid(
                "propagationPolicy",
                &json!(policy),
                "orphanDependents and deletionPropagation cannot be both set",
            )));
        }
        match (policy, orphan) {
            (Some("Background"), _) => Ok(Some(Self::Background)),
            (Some("Foreground"), _) => Ok(Some(Self::Foreground)),
            (Some("Orphan"), _) => Ok(Some(Self::Orphan)),
            (Some(other), _) => Err(invalid(plinth_core::Cause::new(
                "FieldValueNotSupported",
                "propagationPolicy",
                format!(
                    "Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            ))),
            (None, Some(true)) => Ok(Some(Self::Orphan)),
            (None, Some(false)) => Ok(Some(Self::Background)),
            (None, None) => Ok(None),
        }
    }
}

/// The finalizers an object gets when deleted with `propagation` (kube-apiserver's
/// `deletionFinalizersForGarbageCollection`): the garbage collector's two finalizers are
/// dropped, and the one the policy asks for added.
fn deletion_finalizers(current: &[String], propagation: Option<Propagation>) -> Vec<String> {
    let propagation = propagation.unwrap_or_else(|| {
        if current.iter().any(|f| f == FINALIZER_ORPHAN) {
            Propagation::Orphan
        } else if current.iter().any(|f| f == FINALIZER_FOREGROUND) {
            Propagation::Foreground
        } else {
            Propagation::Background
        }
    });
    let mut finalizers: Vec<String> = current
        .iter()
        .filter(|f| *f != FINALIZER_ORPHAN && *f != FINALIZER_FOREGROUND)
        .cloned()
        .collect();
    match propagation {
        Propagation::Orphan => finalizers.push(FINALIZER_ORPHAN.to_owned()),
        Propagation::Foreground => finalizers.push(FINALIZER_FOREGROUND.to_owned()),
        Propagation::Background => {}
    }
    finalizers
}

impl DeleteOptions {
    fn check_preconditions(
        &self,
        def: &ResourceDef,
        name: &str,
        current: &Value,
    ) -> Result<(), ApiError> {
        let resource = def.group_resource();
        if let Some(uid) = &self.uid {
            let actual = plinth_core::meta::meta_str(current, "uid").unwrap_or("");
            if uid != actual {
                return Err(ApiError::conflict(
                    &resource,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                    ),
                ));
            }
        }
        if let Some(rv) = &self.resource_version {
            let actual = rv_of(current).unwrap_or("");
            if rv != actual {
                return Err(ApiError::conflict(
                    &resource,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"
                    ),
                ));
            }
        }
        Ok(())
    }
}

enum PatchKind {
    Merge,
    Strategic,
    Json,
}

/// How the lists of a built-in type merge in a strategic merge patch.
fn list_strategies(def: &ResourceDef) -> Vec<(&'static str, plinth_core::smp::ListMerge)> {
    use plinth_core::smp::{ListMerge, OBJECT_META};
    let mut strategies = OBJECT_META.to_vec();
    if def.kind == "ServiceAccount" {
        strategies.extend([
            ("secrets", ListMerge::Keyed("name")),
            ("imagePullSecrets", ListMerge::Keyed("name")),
        ]);
    }
    strategies
}

fn current_rv(object: &Value) -> Revision {
    rv_of(object).and_then(|rv| rv.parse().ok()).unwrap_or(0)
}

fn strip_rv(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(meta) = metadata_mut(&mut object) {
        meta.remove("resourceVersion");
    }
    object
}

fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

fn namespace_finalizers(object: &Value) -> bool {
    object
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

/// The Scale view of a custom resource.
fn to_scale(def: &ResourceDef, object: &Value) -> Result<Value, ApiError> {
    let name = plinth_core::meta::name(object).unwrap_or("");
    let paths = def
        .scale
        .as_ref()
        .ok_or_else(|| ApiError::not_found(&def.group_resource(), name))?;
    let at = |path: &[String]| path.iter().try_fold(object, |v, p| v.get(p.as_str()));
    let mut metadata = json!({});
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = object.pointer(&format!("/metadata/{field}")) {
            metadata[field] = v.clone();
        }
    }
    let mut status =
        json!({"replicas": at(&paths.status_replicas).and_then(Value::as_i64).unwrap_or(0)});
    if let Some(selector) = paths
        .label_selector
        .as_ref()
        .and_then(|p| at(p))
        .and_then(Value::as_str)
    {
        status["selector"] = json!(selector);
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": at(&paths.spec_replicas).and_then(Value::as_i64).unwrap_or(0)},
        "status": status,
    }))
}

/// Sets the value at a field path, creating objects on the way.
fn set_path(object: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = object;
    for step in parents {
        if !current.get(step.as_str()).is_some_and(Value::is_object) {
            current[step.as_str()] = json!({});
        }
        current = &mut current[step.as_str()];
    }
    current[last.as_str()] = value;
}

/// Sets `apiVersion` and `kind` from the resource.
pub fn set_type_meta(object: &mut Value, def: &ResourceDef) {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), json!(def.group_version.api_version()));
        map.insert("kind".into(), json!(def.kind));
    }
}

/// The object an update stores: the new object, with what clients cannot change kept from the
/// current one; for a status update, the current object with the new status.
fn merge_for_update(def: &ResourceDef, current: &Value, new: Value, status: bool) -> Value {
    if status {
        let mut merged = current.clone();
        merged["status"] = new.get("status").cloned().unwrap_or(Value::Null);
        if merged["status"].is_null()
            && let Some(map) = merged.as_object_mut()
        {
            map.remove("status");
        }
        return merged;
    }
    let mut merged = new;
    if def.status_subresource {
        match current.get("status") {
            Some(s) => merged["status"] = s.clone(),
            None => {
                if let Some(map) = merged.as_object_mut() {
                    map.remove("status");
                }
            }
        }
    }
    merged
}

/// Server-owned metadata survives an update; generation follows spec changes.
fn finish_update(def: &ResourceDef, current: &Value, new: &mut Value) {
    let spec_changed = new.get("spec") != current.get("spec");
    let Some(old_meta) = metadata(current).cloned() else {
        return;
    };
    let Some(meta) = metadata_mut(new) else {
        return;
    };
    for field in [
        "uid",
        "creationTimestamp",
        "namespace",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        match old_meta.get(field) {
            Some(v) => {
                meta.insert(field.into(), v.clone());
            }
            None => {
                meta.remove(field);
            }
        }
    }
    meta.remove("selfLink");
    if def.generation {
        let generation = old_meta
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        meta.insert(
            "generation".into(),
            json!(if spec_changed {
                generation + 1
            } else {
                generation
            }),
        );
    } else {
        meta.remove("generation");
    }
    match def.behaviour {
        Kind::Secret => Registry::prepare_secret(new),
        Kind::Crd => crate::crd::default_crd(new),
        _ => {}
    }
    if def.behaviour == Kind::Namespace && new.get("status").is_none() {
        new["status"] = current
            .get("status")
            .cloned()
            .unwrap_or(json!({"phase": "Active"}));
    }
}

/// An error inside the guaranteed-update loop: the API's own, or the store's.
enum UpdateError {
    Api(ApiError),
    Store(StoreError),
}

impl From<StoreError> for UpdateError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<ApiError> for UpdateError {
    fn from(e: ApiError) -> Self {
        Self::Api(e)
    }
}

/// How long a watch lasts when the client gives no `timeoutSeconds` (kube-apiserver picks
/// 30–60 minutes at random).
pub fn default_watch_timeout() -> Duration {
    let jitter = u64::from(uuid::Uuid::new_v4().as_bytes()[0]) * 1800 / 255;
    Duration::from_secs(1800 + jitter)
}

/// The merge rules of a type's fields for managedFields and server-side apply: ObjectMeta's,
/// the built-in types' declared list and map types, and a custom resource's schema.
struct FieldShape<'a>(&'a ResourceDef);

impl plinth_core::managed::Shape for FieldShape<'_> {
    fn list_type(&self, path: &[plinth_core::managed::Element]) -> plinth_core::managed::ListType {
        use plinth_core::managed::ListType as L;
        let names = plinth_core::managed::field_names(path);
        match (self.0.behaviour, names.as_slice()) {
            (_, ["metadata", "finalizers"]) => L::Set,
            (_, ["metadata", "ownerReferences"]) => L::Map(vec!["uid".into()]),
            (_, ["metadata", ..]) => L::Atomic,
            (Kind::Custom, rest) => self
                .0
                .structural
                .as_ref()
                .map_or(L::Atomic, |s| s.list_type_at(rest)),
            (Kind::Crd, ["spec", "versions"]) => L::Map(vec!["name".into()]),
            (_, ["status", "conditions"]) => L::Map(vec!["type".into()]),
            (_, ["secrets"]) if self.0.kind == "ServiceAccount" => L::Map(vec!["name".into()]),
            _ => L::Atomic,
        }
    }

    fn map_type(&self, path: &[plinth_core::managed::Element]) -> plinth_core::managed::MapType {
        use plinth_core::managed::MapType as M;
        let names = plinth_core::managed::field_names(path);
        match (self.0.behaviour, names.as_slice()) {
            (_, ["metadata", "labels" | "annotations"]) => M::Granular,
            (_, ["metadata", ..]) => M::Struct,
            (Kind::Custom, rest) => self
                .0
                .structural
                .as_ref()
                .map_or(M::Struct, |s| s.map_type_at(rest)),
            (_, ["data" | "binaryData" | "stringData"]) => M::Granular,
            _ => M::Struct,
        }
    }
}

/// The managedFields a write starts from: those the client sent when it changed them (`[{}]`
/// clears them all, as in kube-apiserver), else the stored ones.
fn base_entries(current: Option<&Value>, new: &Value) -> Vec<plinth_core::managed::Entry> {
    let sent = new.pointer("/metadata/managedFields");
    let stored = current.and_then(|c| c.pointer("/metadata/managedFields"));
    if let Some(sent) = sent
        && Some(sent) != stored
    {
        if sent.as_array().is_some_and(|items| {
            items
                .iter()
                .all(|i| i.as_object().is_some_and(Map::is_empty))
        }) {
            return Vec::new();
        }
        if let Ok(entries) = plinth_core::managed::read_entries(new) {
            return entries;
        }
    }
    current
        .and_then(|c| plinth_core::managed::read_entries(c).ok())
        .unwrap_or_default()
}

/// kube's 409 for an apply that conflicts with other managers.
fn conflict_error(conflicts: &[plinth_core::managed::Conflict]) -> ApiError {
    let mut error = ApiError::new(
        StatusReason::Conflict,
        plinth_core::managed::conflict_message(conflicts),
    );
    error.details.causes = conflicts
        .iter()
        .map(|c| {
            Cause::new(
                "FieldManagerConflict",
                c.field.clone(),
                format!("conflict with {}", c.manager),
            )
        })
        .collect();
    error
}

/// Removes null-valued fields, recursively.
fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// Sets `metadata.namespace` to the request's namespace, refusing a different one in the body.
fn claim_namespace(meta: &mut Map<String, Value>, ns: &str) -> Result<(), ApiError> {
    match meta.get("namespace").and_then(Value::as_str) {
        Some(given) if !given.is_empty() && given != ns => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => {
            meta.insert("namespace".into(), json!(ns));
            Ok(())
        }
    }
}
