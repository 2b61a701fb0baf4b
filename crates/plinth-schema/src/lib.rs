//! Structural OpenAPI v3 schemas of CustomResourceDefinitions: compiled once per CRD version,
//! then used to prune unknown fields, apply defaults and validate custom resources with the
//! messages apiextensions-apiserver gives (`spec.replicas: Invalid value: -1: spec.replicas in
//! body should be greater than or equal to 0`).
//!
//! This crate does no I/O. Causes are returned as [`plinth_core::Cause`]s for the API server to
//! put in a 422 `Status`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub(crate) mod cel;
mod cel_lib;
mod compile;
mod error;
mod format;
mod node;
mod prune;
mod stack;
mod structural;
mod validate;

pub use cel::{Evaluated, Expression};
pub use error::{SchemaError, SchemaErrorKind};
pub use structural::structural_errors;

use compile::compile_node;
use node::{Additional, ListType, Node};
use prune::{default_node, prune_node};
use validate::{Found, blocking, validate_node};

use plinth_core::Cause;
use serde_json::Value;

/// A compiled CRD version schema.
#[derive(Clone, Debug)]
pub struct Schema {
    root: Node,
    /// Whether any node has `x-kubernetes-validations` (then kube runs its CEL validator).
    has_rules: bool,
}

impl Schema {
    /// The root node.
    pub(crate) fn root(&self) -> &Node {
        &self.root
    }
}

/// Whether `node` or anything below it has CEL rules.
fn any_rules(node: &Node) -> bool {
    !node.rules.is_empty()
        || node.properties.values().any(any_rules)
        || node.items.as_deref().is_some_and(any_rules)
        || matches!(node.additional.as_deref(), Some(Additional::Schema(sub)) if any_rules(sub))
}

impl Schema {
    /// The node at `path` (field names; `[]` for a list's items), if the schema declares it.
    fn node_at(&self, path: &[&str]) -> Option<&Node> {
        path.iter().try_fold(&self.root, |node, step| {
            if *step == "[]" {
                return node.items.as_deref();
            }
            match node.properties.get(*step) {
                Some(child) => Some(child),
                None => match node.additional.as_deref() {
                    Some(Additional::Schema(child)) => Some(child),
                    _ => None,
                },
            }
        })
    }

    /// How the list at `path` merges in server-side apply (`x-kubernetes-list-type`; atomic
    /// when unset, as in kube-apiserver).
    pub fn list_type_at(&self, path: &[&str]) -> plinth_core::managed::ListType {
        use plinth_core::managed::ListType as L;
        match self.node_at(path).and_then(|n| n.list_type.as_ref()) {
            Some(ListType::Set) => L::Set,
            Some(ListType::Map(keys)) => L::Map(keys.clone()),
            Some(ListType::Atomic) | None => L::Atomic,
        }
    }

    /// How the object at `path` merges in server-side apply: atomic
    /// (`x-kubernetes-map-type: atomic`), a granular map (`additionalProperties`), or a struct.
    pub fn map_type_at(&self, path: &[&str]) -> plinth_core::managed::MapType {
        use plinth_core::managed::MapType as M;
        match self.node_at(path) {
            Some(node) if node.map_atomic => M::Atomic,
            Some(node)
                if node.properties.is_empty()
                    && matches!(node.additional.as_deref(), Some(Additional::Schema(_))) =>
            {
                M::Granular
            }
            _ => M::Struct,
        }
    }

    /// Compiles an `openAPIV3Schema`.
    ///
    /// # Errors
    /// A [`SchemaError`] naming the place in the schema that cannot be used.
    pub fn compile(openapi_v3_schema: &Value) -> Result<Self, SchemaError> {
        // CEL parsing recurses as deep as a rule's text nests: see `stack`.
        let root = stack::on_stack(stack::COMPILE_STACK, || {
            compile_node(openapi_v3_schema, "openAPIV3Schema", Some(1.0))
        })
        .ok_or_else(|| SchemaError {
            path: "openAPIV3Schema".into(),
            reason: "the schema could not be compiled: no thread could be started".into(),
            kind: SchemaErrorKind::Forbidden,
        })??;
        Ok(Self {
            has_rules: any_rules(&root),
            root,
        })
    }

    /// Removes fields the schema does not declare (unless preserved), returning their paths
    /// (`spec.foo`). `apiVersion`, `kind` and `metadata` at the root are always kept.
    pub fn prune(&self, object: &mut Value) -> Vec<String> {
        let mut pruned = Vec::new();
        if let Value::Object(map) = object {
            for (key, value) in map.iter_mut() {
                if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(node) = self.root.properties.get(key) {
                    prune_node(node, value, key, &mut pruned);
                }
            }
            if !self.root.preserve_unknown {
                map.retain(|k, _| {
                    let keep = matches!(k.as_str(), "apiVersion" | "kind" | "metadata")
                        || self.root.properties.contains_key(k);
                    if !keep {
                        pruned.push(k.clone());
                    }
                    keep
                });
            }
        }
        pruned
    }

    /// Fills in defaults (`default` of absent fields, in objects, list items and map values).
    pub fn apply_defaults(&self, object: &mut Value) {
        default_node(&self.root, object);
    }

    /// Every cause that makes `object` invalid, with apiextensions' field paths and messages.
    pub fn validate(&self, object: &Value) -> Vec<Cause> {
        self.validate_update(object, None)
    }

    /// Validates an update: as [`Schema::validate`], plus the transition rules
    /// (`x-kubernetes-validations` using `oldSelf`) against the stored version `old`.
    pub fn validate_update(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Found::default();
        if let Value::Object(map) = object {
            for (key, node) in &self.root.properties {
                if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(value) = map.get(key) {
                    let before = old.and_then(|o| o.get(key));
                    validate_node(node, value, before, key, &mut causes);
                }
            }
            for rule in &self.root.rules {
                rule.check(&self.root, object, old, "", &mut causes.rules);
            }
            for required in &self.root.required {
                if !map.contains_key(required)
                    && !matches!(required.as_str(), "apiVersion" | "kind" | "metadata")
                {
                    causes.push(Cause::required(required.clone(), ""));
                }
            }
        }
        let Found {
            schema: mut all,
            rules,
        } = causes;
        if self.has_rules && all.iter().any(blocking) {
            // kube's message, on a nil field path.
            all.push(Cause::invalid(
                "<nil>",
                &Value::String("null".into()),
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            ));
        } else {
            all.extend(rules);
        }
        all
    }
}

#[cfg(test)]
mod tests;
