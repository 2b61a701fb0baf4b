//! Server-side apply and managedFields: the field shape of each type (from ObjectMeta, the
//! strategy and the type's schema), conflicts, and creating through apply.

use crate::admit::Admit;
use plinth_core::managed::{Element, ListType, MapType};
use plinth_core::meta::format_time;
use plinth_core::{ApiError, Cause, StatusReason};
use serde_json::{Map, Value, json};

use super::codec::{current_rv, parse_rv, rv_of};
use super::write::{claim_namespace, merge_for_update};
use super::{Part, Registry, WriteOptions, Written, now};
use crate::resources::ResourceDef;
use crate::schema::Schema;
use crate::strategy::list_merge;

/// The merge rules of a type's fields for managedFields and server-side apply: ObjectMeta's,
/// the strategy's declared lists and maps, and the type's shape.
pub(super) struct FieldShape<'a>(pub(super) &'a ResourceDef);

impl plinth_core::managed::Shape for FieldShape<'_> {
    fn list_type(&self, path: &[Element]) -> ListType {
        let names = plinth_core::managed::field_names(path);
        match names.as_slice() {
            ["metadata", "finalizers"] => return ListType::Set,
            ["metadata", "ownerReferences"] => return ListType::Map(vec!["uid".into()]),
            ["metadata", ..] => return ListType::Atomic,
            _ => {}
        }
        if let Some(declared) = self.0.strategy.list_type(&names) {
            return declared;
        }
        match list_merge(self.0.strategy.lists(), &dotted(&names)) {
            Some(plinth_core::smp::ListMerge::Set) => ListType::Set,
            Some(plinth_core::smp::ListMerge::Keyed(key)) => ListType::Map(vec![key.to_owned()]),
            None if names == ["status", "conditions"] => ListType::Map(vec!["type".into()]),
            None => ListType::Atomic,
        }
    }

    fn map_type(&self, path: &[Element]) -> MapType {
        let names = plinth_core::managed::field_names(path);
        match names.as_slice() {
            ["metadata", "labels" | "annotations"] => return MapType::Granular,
            ["metadata", ..] => return MapType::Struct,
            _ => {}
        }
        if let Some(declared) = self.0.strategy.map_type(&names) {
            return declared;
        }
        match schema_at(&self.0.schema, &names) {
            Some(Schema::Map(_)) => MapType::Granular,
            _ => MapType::Struct,
        }
    }
}

/// Field names as the strategies' tables spell a path: `spec.containers[].ports`.
fn dotted(names: &[&str]) -> String {
    let mut out = String::new();
    for name in names {
        if *name == "[]" {
            out.push_str("[]");
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(name);
        }
    }
    out
}

/// The part of `schema` at `names` (list items as `[]`).
fn schema_at<'a>(schema: &'a Schema, names: &[&str]) -> Option<&'a Schema> {
    names.iter().try_fold(schema, |schema, name| match schema {
        Schema::Object(fields) => fields.iter().find(|(f, _)| f == name).map(|(_, s)| s),
        Schema::Array(inner) if *name == "[]" => Some(&**inner),
        Schema::Map(inner) => Some(&**inner),
        _ => None,
    })
}

/// The managedFields a write starts from: those the client sent when it changed them (`[{}]`
/// clears them all, as in kube-apiserver), else the stored ones.
pub(super) fn base_entries(
    current: Option<&Value>,
    new: &Value,
) -> Vec<plinth_core::managed::Entry> {
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

/// Checks an apply configuration's own rules: a field manager, an object with apiVersion and
/// kind, no managedFields.
fn check_config(config: &Value, options: &WriteOptions) -> Result<String, ApiError> {
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
    Ok(manager)
}

/// Names the configuration after the URL (refusing another name or namespace) and keeps what
/// the endpoint may set: the status through `/status`, the rest otherwise.
fn claim_config(
    def: &ResourceDef,
    namespace: Option<&str>,
    name: &str,
    part: Part,
    config: &mut Value,
) -> Result<(), ApiError> {
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
        match part {
            Part::Status => map
                .retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status")),
            Part::Field { pointer, .. } => {
                let top = pointer.split('/').nth(1).unwrap_or_default();
                map.retain(|k, _| {
                    matches!(k.as_str(), "apiVersion" | "kind" | "metadata") || k == top
                });
            }
            Part::Main | Part::Scale if def.status_subresource => {
                map.remove("status");
            }
            Part::Main | Part::Scale => {}
        }
    }
    Ok(())
}

impl Registry {
    /// Server-side apply of a configuration to an object or its status, creating the object if
    /// it does not exist.
    ///
    /// # Errors
    /// 422 without a field manager; 400 for a malformed configuration; 409 listing the
    /// conflicting managers and fields unless `force`; 422 if the result is invalid.
    #[allow(
        clippy::too_many_arguments,
        reason = "the admission of a write is an argument, as kube passes it to rest.Updater"
    )]
    pub(super) async fn apply(
        &self,
        admit: &dyn Admit,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        mut config: Value,
        part: Part,
        options: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let manager = check_config(&config, options)?;
        // `field:` with nothing after it sets nothing.
        drop_nulls(&mut config);
        // Fields the type does not declare, under Strict: refused as kube's typed conversion of
        // the applied configuration words it.
        if options.field_validation == crate::FieldValidation::Strict {
            let findings = def.strategy.decode(def, &mut config.clone());
            if findings.type_error.is_none() && !findings.unknown.is_empty() {
                return Err(undeclared_fields(def, &config, name, &findings.unknown));
            }
        }
        // Checks types, apiVersion/kind and unknown fields (warnings, or errors when strict).
        let mut checked = config.clone();
        let warnings = Self::check_body(def, &mut checked, options)?;
        def.strategy.prune(def, &mut config);
        claim_config(def, namespace, name, part, &mut config)?;
        let me = plinth_core::managed::Manager {
            name: manager,
            operation: plinth_core::managed::Operation::Apply,
            api_version: def.group_version.api_version(),
            subresource: part.subresource().to_owned(),
            time: format_time(now()),
        };
        let shape = FieldShape(def);
        let key = def.key(namespace, name);
        if !self.exists(def, &key, name).await? {
            if part == Part::Status {
                return Err(ApiError::not_found(&def.group_resource(), name));
            }
            let mut entries = Vec::new();
            let mut object =
                plinth_core::managed::apply(&mut entries, None, &config, &shape, &me, false)
                    .map_err(|c| conflict_error(&c))?;
            plinth_core::managed::write_entries(&mut object, entries);
            let written = self
                .create_with(admit, def, namespace, object, options, false)
                .await?;
            let mut warnings = warnings;
            warnings.extend(written.warnings);
            return Ok(Written {
                warnings,
                ..written
            });
        }
        let precondition = rv_of(&config).map(parse_rv).transpose()?;
        let written = self
            .write_update(admit, def, &key, name, options, None, |current| {
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
                let mut result = merge_for_update(def, current, merged, part);
                plinth_core::managed::write_entries(&mut result, entries);
                Ok(result)
            })
            .await?;
        let mut warnings = warnings;
        warnings.extend(written.warnings);
        Ok(Written {
            warnings,
            ..written
        })
    }
}

/// structured-merge-diff's refusal of an applied configuration with fields its type does not
/// declare: `failed to create typed patch object (ns/name; group/version, Kind=Kind): .path:
/// field not declared in schema`, several as `errors:` lines.
fn undeclared_fields(
    def: &ResourceDef,
    config: &Value,
    name: &str,
    unknown: &[String],
) -> ApiError {
    let errors: Vec<String> = unknown
        .iter()
        .map(|path| format!(".{path}: field not declared in schema"))
        .collect();
    let detail = if let [one] = errors.as_slice() {
        one.clone()
    } else {
        let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
        format!("errors:\n{}", lines.join("\n"))
    };
    let namespace = plinth_core::meta::namespace(config).unwrap_or("");
    ApiError::bad_request(format!(
        "failed to create typed patch object ({namespace}/{name}; {}/{}, Kind={}): {detail}",
        def.group_version.group, def.group_version.version, def.kind
    ))
}
