//! Patches: JSON patch, merge patch and strategic merge patch applied in the guaranteed-update
//! loop; apply patches go to server-side apply.

use crate::admit::Admit;
use plinth_core::{ApiError, Cause, StatusReason};
use serde_json::{Value, json};

use super::codec::{current_rv, parse_rv, rv_of};
use super::write::merge_for_update;
use super::{Part, Patch, Registry, WriteOptions, Written};
use crate::resources::ResourceDef;
use crate::strategy::FieldPath;

/// Applies a (non-apply) patch to `target`, with `lists` as the strategic merge patch's list
/// metadata.
///
/// # Errors
/// 415 for strategic merge patch where the type has no patch metadata; kube's 400/422 for a
/// patch that cannot be applied.
pub fn apply_patch(
    target: &mut Value,
    patch: &Patch,
    lists: &[(FieldPath, plinth_core::smp::ListMerge)],
) -> Result<(), ApiError> {
    match patch {
        Patch::Json(ops) => json_patch::patch(target, ops).map_err(|e| {
            ApiError::new(
                StatusReason::Invalid,
                format!("the server rejected our request due to an error in our request: {e}"),
            )
        }),
        Patch::Merge(merge) => {
            json_patch::merge(target, merge);
            Ok(())
        }
        Patch::Strategic(smp) => plinth_core::smp::apply(target, smp, lists).map_err(|e| match e {
            plinth_core::smp::PatchError::BadRequest(m) => ApiError::bad_request(m),
            plinth_core::smp::PatchError::Invalid(m) => ApiError::new(StatusReason::Invalid, m),
        }),
        Patch::Apply(_) => Err(ApiError::internal(
            "an apply patch is not applied as a patch",
        )),
    }
}

/// The list metadata strategic merge patches of `def` use: ObjectMeta's, then the type's.
pub fn patch_lists(def: &ResourceDef) -> Vec<(FieldPath, plinth_core::smp::ListMerge)> {
    let mut lists = plinth_core::smp::OBJECT_META.to_vec();
    lists.extend_from_slice(def.strategy.lists());
    lists
}

impl Registry {
    /// Patches an object or its status; an apply patch is server-side apply.
    ///
    /// # Errors
    /// 404 if absent (not for apply, which creates); 415 for strategic merge patch of a custom
    /// resource; 422 if the patch cannot be applied or the result is invalid; 409 on a
    /// resourceVersion precondition in the patch that fails.
    #[allow(
        clippy::too_many_arguments,
        reason = "the admission of a write is an argument, as kube passes it to rest.Updater"
    )]
    pub async fn patch(
        &self,
        admit: &dyn Admit,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        patch: Patch,
        part: Part,
        options: &WriteOptions,
    ) -> Result<Written, ApiError> {
        if let Patch::Apply(config) = patch {
            return self
                .apply(admit, def, namespace, name, config, part, options)
                .await;
        }
        if matches!(patch, Patch::Strategic(_)) && !def.strategy.strategic_merge_patch() {
            return Err(ApiError::new(
                StatusReason::UnsupportedMediaType,
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
        if options.force {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![Cause::forbidden(
                    "force",
                    "may not be specified for non-apply patch",
                )],
            ));
        }
        let key = def.key(namespace, name);
        self.require_exists(def, &key, name).await?;
        let lists = patch_lists(def);
        let warnings = std::sync::Mutex::new(Vec::new());
        let written = self
            .write_update(admit, def, &key, name, options, Some(part), |current| {
                let mut patched = current.clone();
                apply_patch(&mut patched, &patch, &lists)?;
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
                        vec![Cause::invalid(
                            "metadata.name",
                            &json!(plinth_core::meta::name(&patched)),
                            "field is immutable",
                        )],
                    ));
                }
                Ok(merge_for_update(def, current, patched, part))
            })
            .await?;
        let mut warnings = warnings.into_inner().unwrap_or_default();
        warnings.extend(written.warnings);
        Ok(Written {
            warnings,
            ..written
        })
    }
}
