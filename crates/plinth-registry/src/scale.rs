//! The `/scale` subresource of custom resources that declare one and of the built-in
//! workloads: the autoscaling/v1 Scale view, and writes of its replicas back into the object.

use crate::admit::Admit;
use plinth_core::{ApiError, Cause};
use serde_json::{Value, json};

use super::codec::{current_rv, parse_rv, rv_of};
use super::patch::apply_patch;
use super::{Part, Patch, Registry, WriteOptions};
use crate::resources::{ResourceDef, ScaleSelector};

/// A write of the Scale.
#[derive(Debug)]
pub enum ScaleWrite {
    /// PUT of a whole Scale.
    Replace(Value),
    /// PATCH of the Scale (strategic merge patches merge as merge patches: Scale has no lists).
    Patch(Patch),
}

impl Registry {
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
        admit: &dyn Admit,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        change: ScaleWrite,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let paths = def
            .scale
            .clone()
            .ok_or_else(|| ApiError::not_found(&def.group_resource(), name))?;
        let key = def.key(namespace, name);
        self.require_exists(def, &key, name).await?;
        let written = self
            .write_update(
                admit,
                def,
                &key,
                name,
                options,
                Some(Part::Scale),
                |current| {
                    let wanted = match &change {
                        ScaleWrite::Replace(scale) => scale.clone(),
                        ScaleWrite::Patch(patch) => {
                            let mut scale = to_scale(def, current)?;
                            apply_patch(&mut scale, patch, &[])?;
                            scale
                        }
                    };
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
                },
            )
            .await?;
        to_scale(def, &written.object)
    }
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
    let selector = match &paths.label_selector {
        Some(ScaleSelector::Text(path)) => at(path).and_then(Value::as_str).map(str::to_owned),
        Some(ScaleSelector::Object(path)) => at(path)
            .and_then(|s| plinth_core::selector::LabelSelector::from_object(s).ok())
            .map(|s| s.to_string()),
        Some(ScaleSelector::Map(path)) => at(path)
            .map(|labels| json!({"matchLabels": labels}))
            .and_then(|s| plinth_core::selector::LabelSelector::from_object(&s).ok())
            .map(|s| s.to_string()),
        None => None,
    };
    if let Some(selector) = selector {
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
