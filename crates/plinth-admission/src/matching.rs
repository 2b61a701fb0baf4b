//! Which writes a webhook or policy sees: rules (operations, groups, versions, resources with
//! subresources, names, scope), excluded rules, `matchPolicy`, `namespaceSelector`,
//! `objectSelector` — kube's admission matchers.

use std::collections::BTreeMap;

use plinth_core::selector::LabelSelector;
use serde_json::Value;

use super::{Operation, Request};
use plinth_registry::resources::Objects;

/// One rule of `rules` / `resourceRules`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Rule {
    operations: Vec<String>,
    groups: Vec<String>,
    versions: Vec<String>,
    resources: Vec<String>,
    resource_names: Vec<String>,
    scope: String,
}

/// The strings of the list at `key` (none when absent).
pub(super) fn strings(value: &Value, key: &str) -> Vec<String> {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn rules(value: Option<&Value>) -> Vec<Rule> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| Rule {
            operations: strings(r, "operations"),
            groups: strings(r, "apiGroups"),
            versions: strings(r, "apiVersions"),
            resources: strings(r, "resources"),
            resource_names: strings(r, "resourceNames"),
            scope: match r.get("scope").and_then(Value::as_str).unwrap_or("") {
                "" => "*".to_owned(),
                s => s.to_owned(),
            },
        })
        .collect()
}

fn selector(value: Option<&Value>) -> LabelSelector {
    value
        .and_then(|v| LabelSelector::from_object(v).ok())
        .unwrap_or_default()
}

/// A parsed set of match criteria.
#[derive(Clone, Debug, Default)]
pub(crate) struct Matcher {
    rules: Vec<Rule>,
    exclude: Vec<Rule>,
    equivalent: bool,
    namespace_selector: LabelSelector,
    object_selector: LabelSelector,
    /// No rules constrain nothing (a policy's `matchResources`) rather than match nothing (a
    /// webhook's `rules`).
    all_without_rules: bool,
}

impl Matcher {
    /// From the fields of a webhook or a policy's `matchConstraints`.
    pub(crate) fn parse(
        rules_value: Option<&Value>,
        exclude: Option<&Value>,
        match_policy: &str,
        namespace_selector: Option<&Value>,
        object_selector: Option<&Value>,
    ) -> Self {
        Self {
            rules: rules(rules_value),
            exclude: rules(exclude),
            equivalent: match_policy != "Exact",
            namespace_selector: selector(namespace_selector),
            object_selector: selector(object_selector),
            all_without_rules: false,
        }
    }

    /// A policy binding's `matchResources` (or a policy's `matchConstraints`).
    /// Without `resourceRules` it matches every resource, as kube's policy matcher does.
    pub(crate) fn of_resources(resources: Option<&Value>) -> Self {
        let field = |key: &str| resources.and_then(|r| r.get(key));
        Self {
            all_without_rules: true,
            ..Self::parse(
                field("resourceRules"),
                field("excludeResourceRules"),
                field("matchPolicy").and_then(Value::as_str).unwrap_or(""),
                field("namespaceSelector"),
                field("objectSelector"),
            )
        }
    }

    /// Whether nothing is asked (an absent `matchResources`: everything the policy matches).
    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty()
            && self.exclude.is_empty()
            && self.namespace_selector.is_empty()
            && self.object_selector.is_empty()
    }

    /// The version the write is seen in when it matches (another served version of the same
    /// resource under `matchPolicy: Equivalent`), else `None`.
    pub(crate) fn matches(
        &self,
        objects: &dyn Objects,
        request: &Request<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
        namespace_labels: &Option<BTreeMap<String, String>>,
    ) -> Option<String> {
        let def = request.def;
        let group = def.group_version.group.as_str();
        let version = def.group_version.version.as_str();
        let hit = |rules: &[Rule], v: &str| {
            rules
                .iter()
                .any(|r| r.matches(request.operation, group, v, request))
        };
        if hit(&self.exclude, version) {
            return None;
        }
        let version =
            if hit(&self.rules, version) || (self.all_without_rules && self.rules.is_empty()) {
                version.to_owned()
            } else if self.equivalent {
                objects
                    .resources()
                    .into_iter()
                    .filter(|d| {
                        d.group_version.group == group
                            && d.plural == def.plural
                            && d.group_version.version != version
                    })
                    .map(|d| d.group_version.version.clone())
                    .find(|v| hit(&self.rules, v))?
            } else {
                return None;
            };
        if let Some(ns_labels) = namespace_labels
            && !self.namespace_selector.matches(ns_labels)
        {
            return None;
        }
        if !self.object_selector.is_empty()
            && !self.object_selector.matches(&labels(object))
            && !self.object_selector.matches(&labels(old))
        {
            return None;
        }
        Some(version)
    }
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

/// Whether `entry` of a rule's `resources` names `resource` with `subresource`: `pods`,
/// `pods/status`, `pods/*` (the resource and its subresources), `*/status`, `*` (every
/// resource, no subresource), `*/*` — kube's rule matcher.
fn names_resource(entry: &str, resource: &str, subresource: &str) -> bool {
    let (r, s) = entry.split_once('/').unwrap_or((entry, ""));
    (r == "*" || r == resource) && (s == "*" || s == subresource)
}

impl Rule {
    fn matches(
        &self,
        operation: Operation,
        group: &str,
        version: &str,
        request: &Request<'_>,
    ) -> bool {
        let namespaced = request.def.namespaced;
        let scope_ok = match self.scope.as_str() {
            "Cluster" => !namespaced,
            "Namespaced" => namespaced,
            _ => true,
        };
        scope_ok
            && listed(&self.operations, operation.as_str())
            && listed(&self.groups, group)
            && listed(&self.versions, version)
            && self
                .resources
                .iter()
                .any(|r| names_resource(r, &request.def.plural, request.subresource))
            && (self.resource_names.is_empty()
                || self.resource_names.iter().any(|n| n == request.name))
    }
}

/// An object's labels (none for no object).
pub(crate) fn labels(object: Option<&Value>) -> BTreeMap<String, String> {
    object
        .and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_entries_name_subresources_as_kube_does() {
        assert!(names_resource("pods", "pods", ""));
        assert!(!names_resource("pods", "pods", "status"));
        assert!(names_resource("pods/status", "pods", "status"));
        assert!(names_resource("pods/*", "pods", "status"));
        assert!(names_resource("pods/*", "pods", ""));
        assert!(names_resource("*/status", "widgets", "status"));
        assert!(names_resource("*", "widgets", ""));
        assert!(!names_resource("*", "widgets", "status"));
        assert!(names_resource("*/*", "widgets", "status"));
        assert!(names_resource("*/*", "widgets", ""));
    }
}
