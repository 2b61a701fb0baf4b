//! Writes: create and update (PUT), and the guaranteed-update step every change of a stored
//! object goes through — the order of the strategy's calls lives here once.

use crate::admit::Admit;
use plinth_core::meta::{finalizers, format_time, metadata, metadata_mut};
use plinth_core::{ApiError, Cause};
use plinth_store::{StoreError, Update, guaranteed_update};
use serde_json::{Map, Value, json};

use super::apply::{FieldShape, base_entries};
use super::codec::{
    current_rv, decode_view, encode_converted, normalize, parse_rv, random_suffix, rv_of,
    set_type_meta, store_error, strip_rv,
};
use super::{FieldValidation, Part, Registry, WriteOptions, Written, now};
use crate::resources::{ResourceDef, name_causes};

/// The manager an ordinary write is recorded under.
pub(super) fn manager(
    options: &WriteOptions,
    def: &ResourceDef,
    part: Part,
) -> plinth_core::managed::Manager {
    plinth_core::managed::Manager {
        name: options
            .field_manager
            .clone()
            .unwrap_or_else(|| options.default_manager.clone()),
        operation: plinth_core::managed::Operation::Update,
        api_version: def.group_version.api_version(),
        subresource: part.subresource().to_owned(),
        time: format_time(now()),
    }
}

/// The verb's options as a webhook sees them (`CreateOptions`, `UpdateOptions`).
pub(super) fn admission_options(kind: &str, options: &WriteOptions) -> Value {
    let mut out = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if let Some(manager) = &options.field_manager {
        out["fieldManager"] = json!(manager);
    }
    if options.dry_run {
        out["dryRun"] = json!(["All"]);
    }
    out
}

/// Who a write is admitted as: its requester, or the server itself.
pub(super) fn admission_user(options: &WriteOptions) -> super::user::User {
    options
        .requester
        .as_ref()
        .map_or_else(super::admit::server_user, |r| r.user.clone())
}

impl Registry {
    /// Decodes an object a mutating webhook changed as the body was decoded (types checked,
    /// fields the type does not declare dropped).
    fn check_mutated(def: &ResourceDef, object: &mut Value) -> Result<(), ApiError> {
        let quiet = WriteOptions {
            field_validation: FieldValidation::Ignore,
            ..WriteOptions::default()
        };
        Self::check_body(def, object, &quiet).map(drop)
    }

    /// Checks the body's apiVersion/kind and decodes it as the type's decoder would (type
    /// errors, unknown fields per `fieldValidation`, a custom resource's pruning and
    /// defaults); returns the warnings to send.
    pub fn check_body(
        def: &ResourceDef,
        object: &mut Value,
        options: &WriteOptions,
    ) -> Result<Vec<String>, ApiError> {
        let Some(map) = object.as_object() else {
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
        let findings = def.strategy.decode(def, object);
        let cannot = |detail: String| {
            ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: {detail}",
                def.kind, def.group_version.version, def.kind
            ))
        };
        if let Some(type_error) = findings.type_error {
            return Err(cannot(type_error));
        }
        let unknown = findings
            .unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .chain(
                options
                    .duplicates
                    .iter()
                    .map(|f| format!("duplicate field \"{f}\"")),
            );
        let warnings = match options.field_validation {
            FieldValidation::Strict
                if !findings.unknown.is_empty() || !options.duplicates.is_empty() =>
            {
                let fields: Vec<String> = unknown.collect();
                return Err(cannot(format!(
                    "strict decoding error: {}",
                    fields.join(", ")
                )));
            }
            FieldValidation::Strict | FieldValidation::Ignore => Vec::new(),
            FieldValidation::Warn => unknown.collect(),
        };
        set_type_meta(object, def);
        Ok(warnings)
    }

    /// The checks every write makes on the object it would store: metadata for every type,
    /// then the strategy's (for an update through `subresource`, the strategy's own check of
    /// it when it has one).
    pub fn validate(
        def: &ResourceDef,
        object: &Value,
        old: Option<&Value>,
        subresource: &str,
    ) -> Result<(), ApiError> {
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
        let own = old.and_then(|old| def.strategy.validate_subresource(subresource, object, old));
        causes.extend(own.unwrap_or_else(|| def.strategy.validate(object, old)));
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

    /// Server-set fields of a new object, then the type's defaults.
    pub fn prepare_create(
        def: &ResourceDef,
        object: &mut Value,
        namespace: Option<&str>,
    ) -> Result<(), ApiError> {
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
        let name = meta.get("name").and_then(Value::as_str).unwrap_or("");
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
        meta.insert("creationTimestamp".into(), json!(format_time(now())));
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        meta.remove("selfLink");
        if def.generation {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
        // What a /status subresource owns is not set by a create.
        if def.status_subresource
            && let Some(map) = object.as_object_mut()
        {
            map.remove("status");
        }
        def.strategy.prepare_create(object);
        normalize(object);
        Ok(())
    }

    /// Creates an object.
    ///
    /// # Errors
    /// 409 if it exists; 404 if its namespace does not; 422 if invalid; 400 for a malformed body.
    pub async fn create(
        &self,
        admit: &dyn Admit,
        def: &ResourceDef,
        namespace: Option<&str>,
        object: Value,
        options: &WriteOptions,
    ) -> Result<Written, ApiError> {
        self.create_with(admit, def, namespace, object, options, true)
            .await
    }

    /// Creates an object; `track`: record the creator's fields in `managedFields` (an apply
    /// has recorded them already).
    pub(super) async fn create_with(
        &self,
        admit: &dyn Admit,
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
        let mut warnings = Self::check_body(def, &mut object, options)?;
        if let Some(requester) = &options.requester {
            def.strategy.stamp(&mut object, requester);
        }
        let user = admission_user(options);
        let given_name = plinth_core::meta::name(&object).unwrap_or("").to_owned();
        let admitted_namespace = namespace
            .filter(|_| def.namespaced)
            .or(def.namespaced.then_some("default"));
        // The namespace, read once (from the watch cache) for admission and the final check.
        let namespace_object = match admitted_namespace.filter(|_| def.namespaced) {
            Some(ns) => crate::resources::Objects::namespace(&self.admitted(admit), ns).await,
            None => None,
        };
        let mut admission = super::admit::Request {
            operation: super::admit::Operation::Create,
            def,
            subresource: "",
            namespace: admitted_namespace,
            name: &given_name,
            namespace_object: namespace_object.as_ref(),
            user: &user,
            dry_run: options.dry_run,
            options: admission_options("CreateOptions", options),
        };
        let before = object.clone();
        warnings.extend(
            admit
                .mutate(&self.admitted(admit), &admission, &mut object, None)
                .await?,
        );
        if object != before {
            Self::check_mutated(def, &mut object)?;
        }
        // A dry run never reaches storage, where kube-apiserver refuses a resourceVersion:
        // one copied from an existing object is let through (controller-runtime's dry-run
        // client relies on it).
        if options.dry_run
            && let Some(meta) = metadata_mut(&mut object)
        {
            meta.remove("resourceVersion");
        }
        Self::prepare_create(def, &mut object, namespace)?;
        Self::validate(def, &object, None, "")?;
        if let Some(requester) = &options.requester {
            def.strategy.admit(&object, None, requester)?;
        }
        if let Some(allocate) = def.allocate {
            allocate(&self.admitted(admit), &mut object).await?;
        }
        let final_name = plinth_core::meta::name(&object).unwrap_or("").to_owned();
        admission.name = &final_name;
        warnings.extend(
            admit
                .validate(&self.admitted(admit), &admission, Some(&object), None)
                .await?,
        );
        if track {
            let mut entries = base_entries(None, &object);
            plinth_core::managed::record_update(
                &mut entries,
                None,
                &object,
                &FieldShape(def),
                &manager(options, def, Part::Main),
            );
            plinth_core::managed::write_entries(&mut object, entries);
        }
        let name = plinth_core::meta::name(&object).unwrap_or("").to_owned();
        let namespace = plinth_core::meta::namespace(&object).map(str::to_owned);
        if def.namespaced
            && let Some(ns) = &namespace
        {
            self.check_namespace(def, ns, &name, namespace_object.as_ref())
                .await?;
        }
        let key = def.key(namespace.as_deref(), &name);
        if options.dry_run {
            if self.exists(def, &key, &name).await? {
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
            .create(&key, encode_converted(self, def, &object).await?)
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

    /// Replaces an object (PUT), or its status.
    ///
    /// # Errors
    /// 404 if absent (unless the type creates on update); 409 on a stale resourceVersion; 422 if
    /// invalid; 400 for a malformed body or a name that does not match the URL.
    #[allow(
        clippy::too_many_arguments,
        reason = "the admission of a write is an argument, as kube passes it to rest.Updater"
    )]
    pub async fn update(
        &self,
        admit: &dyn Admit,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        mut object: Value,
        part: Part,
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
        if !self.exists(def, &key, name).await? {
            if def.allow_create_on_update && part == Part::Main {
                if let Some(meta) = metadata_mut(&mut object) {
                    meta.remove("resourceVersion");
                }
                return self.create(admit, def, namespace, object, options).await;
            }
            return Err(ApiError::not_found(&def.group_resource(), name));
        }
        let precondition = rv_of(&object).map(parse_rv).transpose()?;
        let written = self
            .write_update(
                admit,
                def,
                &key,
                name,
                options,
                Some(part),
                move |current| {
                    if let Some(expected) = precondition
                        && expected != current_rv(current)
                    {
                        return Err(ApiError::stale(&def.group_resource(), name));
                    }
                    Ok(merge_for_update(def, current, object.clone(), part))
                },
            )
            .await?;
        let mut warnings = warnings;
        warnings.extend(written.warnings);
        Ok(Written {
            warnings,
            ..written
        })
    }

    /// Changes a stored object in place, for in-process controllers: `change` edits the
    /// current object and says whether it changed anything (and may refuse with an error);
    /// conflicts are retried by the store's guaranteed-update loop with the fresh object.
    /// Returns `None` when `change` changed nothing.
    ///
    /// # Errors
    /// 404 if absent; `change`'s own error; 422 if the result is invalid.
    #[allow(
        clippy::too_many_arguments,
        reason = "the admission of a write is an argument, as kube passes it to rest.Updater"
    )]
    pub async fn modify(
        &self,
        admit: &dyn Admit,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        part: Part,
        options: &WriteOptions,
        change: impl Fn(&mut Value) -> Result<bool, ApiError> + Sync,
    ) -> Result<Option<Written>, ApiError> {
        let key = def.key(namespace, name);
        let changed = std::sync::atomic::AtomicBool::new(false);
        let written = self
            .write_update(admit, def, &key, name, options, Some(part), |current| {
                let mut object = current.clone();
                let did = change(&mut object)?;
                changed.store(did, std::sync::atomic::Ordering::Relaxed);
                Ok(if did {
                    merge_for_update(def, current, object, part)
                } else {
                    current.clone()
                })
            })
            .await?;
        Ok(changed
            .load(std::sync::atomic::Ordering::Relaxed)
            .then_some(written))
    }

    /// The guaranteed-update step shared by update, patch, apply and scale: `next` computes the
    /// new object from the current one; it is then prepared, validated, its managedFields
    /// recorded (`tracking`: as an Update of that part; `None`: the caller recorded them), and
    /// written unless unchanged. An object whose deletion waited only for the finalizers this
    /// write removed goes.
    #[allow(
        clippy::too_many_arguments,
        reason = "the admission of a write is an argument, as kube passes it to rest.Updater"
    )]
    pub(super) async fn write_update(
        &self,
        admit: &dyn Admit,
        def: &ResourceDef,
        key: &str,
        name: &str,
        options: &WriteOptions,
        tracking: Option<Part>,
        next: impl Fn(&Value) -> Result<Value, ApiError> + Sync,
    ) -> Result<Written, ApiError> {
        let result: std::sync::Mutex<Option<Value>> = std::sync::Mutex::new(None);
        let admitted: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
        let user = admission_user(options);
        let written = guaranteed_update::<_, _, UpdateError>(&*self.store, key, |kv| {
            let decoded = decode_view(def, kv);
            let stale = self.store.stale(kv);
            let (next, result) = (&next, &result);
            let (admitted, user) = (&admitted, &user);
            Box::pin(async move {
                let current = super::codec::converted(self, def, decoded?).await?;
                let mut new = next(&current)?;
                let part = tracking.unwrap_or(Part::Main);
                let mut warnings = Vec::new();
                // `/scale` writes are not sent to webhooks (they would expect a Scale).
                let admission = (part != Part::Scale).then(|| super::admit::Request {
                    operation: super::admit::Operation::Update,
                    def,
                    subresource: part.subresource(),
                    namespace: plinth_core::meta::namespace(&current),
                    name,
                    namespace_object: None,
                    user,
                    dry_run: options.dry_run,
                    options: admission_options("UpdateOptions", options),
                });
                if let Some(admission) = &admission {
                    let before = new.clone();
                    warnings.extend(
                        admit
                            .mutate(&self.admitted(admit), admission, &mut new, Some(&current))
                            .await?,
                    );
                    if new != before {
                        Self::check_mutated(def, &mut new)?;
                        new = merge_for_update(def, &current, new, part);
                    }
                }
                finish_update(def, &current, &mut new);
                Self::validate(def, &new, Some(&current), part.subresource())?;
                if let Some(requester) = &options.requester {
                    def.strategy.admit(&new, Some(&current), requester)?;
                }
                // An update that leaves a deleting object nothing to wait for deletes it, in
                // its writer's name (kube's `shouldDeleteDuringUpdate`): the object goes
                // instead of being written, so no later writer finishes the job.
                if emptied(def, &current, &new) && !options.dry_run {
                    *result
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(new);
                    return Ok(Update::Delete);
                }
                // What a changed object needs allocated (a Service turned from ExternalName
                // to ClusterIP: an address), as on create.
                if let (Some(allocate), Part::Main, true) =
                    (def.allocate, part, def.allocate_on_update)
                {
                    allocate(&self.admitted(admit), &mut new).await?;
                }
                if let Some(part) = tracking {
                    let mut entries = base_entries(Some(&current), &new);
                    plinth_core::managed::record_update(
                        &mut entries,
                        Some(&current),
                        &new,
                        &FieldShape(def),
                        &manager(options, def, part),
                    );
                    plinth_core::managed::write_entries(&mut new, entries);
                }
                if let Some(admission) = &admission {
                    warnings.extend(
                        admit
                            .validate(&self.admitted(admit), admission, Some(&new), Some(&current))
                            .await?,
                    );
                }
                *admitted
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = warnings;
                let unchanged = strip_rv(&new) == strip_rv(&current) && !stale;
                let encoded = if unchanged || options.dry_run {
                    None
                } else {
                    Some(encode_converted(self, def, &new).await?)
                };
                *result
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(new);
                Ok(encoded.map_or(Update::Unchanged, Update::Write))
            })
        })
        .await
        .map_err(|e| match e {
            UpdateError::Api(api) => api,
            UpdateError::Store(store) => store_error(def, name, store),
        })?;
        let result = result
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut object = result.ok_or_else(|| ApiError::internal("update produced no object"))?;
        let warnings = admitted
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if options.dry_run {
            return Ok(Written {
                object,
                warnings,
                created: false,
            });
        }
        if let Some(meta) = metadata_mut(&mut object) {
            meta.insert(
                "resourceVersion".into(),
                json!(written.mod_revision.to_string()),
            );
        }
        Ok(Written {
            object,
            warnings,
            created: false,
        })
    }
}

/// Whether `new`, replacing `current`, leaves a deleting object with nothing to wait for — no
/// finalizers, nothing pending for its type (kube's `ShouldDeleteDuringUpdate`): then the
/// update deletes it. Unlike kube, also while a grace period runs: the node agent's status
/// write for a pod it will not run again finishes the pod's deletion (as before).
fn emptied(def: &ResourceDef, current: &Value, new: &Value) -> bool {
    super::is_deleting(current) && finalizers(new).is_empty() && !def.strategy.deletion_pending(new)
}

/// The object an update stores, by part: for the main resource, the new object with the
/// status kept (when `/status` owns it); for `/status`, the current object with the new status.
pub(super) fn merge_for_update(
    def: &ResourceDef,
    current: &Value,
    new: Value,
    part: Part,
) -> Value {
    if let Part::Field { pointer, .. } = part {
        let mut merged = current.clone();
        let value = new.pointer(pointer).cloned().unwrap_or(Value::Null);
        let mut at = &mut merged;
        let mut keys = pointer.split('/').skip(1).peekable();
        while let Some(key) = keys.next() {
            if !at.is_object() {
                *at = json!({});
            }
            if keys.peek().is_none() {
                at[key] = value;
                break;
            }
            at = &mut at[key];
        }
        // A status field's subresource (a CSR's `/approval`) keeps the request's metadata
        // too, as kube's approval strategy does; a namespace's `/finalize` changes only the
        // finalizers.
        let keeps_metadata = pointer.starts_with("/status/");
        for key in ["labels", "annotations", "finalizers", "ownerReferences"] {
            if !keeps_metadata {
                break;
            }
            let wanted = new.pointer(&format!("/metadata/{key}")).cloned();
            if let Some(meta) = merged.get_mut("metadata").and_then(Value::as_object_mut) {
                match wanted {
                    Some(value) if !value.is_null() => {
                        meta.insert(key.to_owned(), value);
                    }
                    _ => {
                        meta.remove(key);
                    }
                }
            }
        }
        return merged;
    }
    if part == Part::Status {
        if let Some(merged) = def.strategy.merge_status(current, &new) {
            return merged;
        }
        let mut merged = current.clone();
        match new.get("status") {
            Some(status) if !status.is_null() => merged["status"] = status.clone(),
            _ => {
                if let Some(map) = merged.as_object_mut() {
                    map.remove("status");
                }
            }
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

/// Server-owned metadata survives an update; generation follows spec changes; then the type's
/// defaults and kube's round-trip normalization.
fn finish_update(def: &ResourceDef, current: &Value, new: &mut Value) {
    let spec_changed = new.get("spec") != current.get("spec");
    if let (Some(old_meta), Some(meta)) = (metadata(current).cloned(), metadata_mut(new)) {
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
            let next = if spec_changed {
                generation + 1
            } else {
                generation
            };
            meta.insert("generation".into(), json!(next));
        } else {
            meta.remove("generation");
        }
    }
    def.strategy.prepare_update(new, current);
    normalize(new);
}

/// An error inside the guaranteed-update loop: the API's own, or the store's.
pub(super) enum UpdateError {
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

/// Sets `metadata.namespace` to the request's namespace, refusing a different one in the body.
pub(super) fn claim_namespace(meta: &mut Map<String, Value>, ns: &str) -> Result<(), ApiError> {
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
