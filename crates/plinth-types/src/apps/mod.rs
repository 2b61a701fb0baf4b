//! The `apps` API group (`v1`): the workloads — Deployments, ReplicaSets, StatefulSets,
//! DaemonSets — and the ControllerRevisions that record their templates. What they share
//! lives here: the label selector and its match with the pod template, the template's
//! defaults and rules, int-or-percent fields, the `/scale` view and the table cells.

pub mod controllerrevision;
pub mod daemonset;
pub mod deployment;
pub mod replicaset;
pub mod statefulset;

use plinth_core::Cause;
use plinth_core::selector::LabelSelector;
use serde_json::{Map, Value, json};

use super::core::podspec::{default_pod_spec, validate_pod_spec};
use plinth_registry::resources::{Column, Scale, ScaleSelector, column};
use plinth_registry::schema::{Schema, array, obj, strings};
use plinth_registry::strategy::{FieldPath, ListMerge};

/// `metav1.LabelSelector`.
pub(crate) fn label_selector() -> Schema {
    obj(vec![
        ("matchLabels", strings()),
        (
            "matchExpressions",
            array(obj(vec![
                ("key", Schema::String),
                ("operator", Schema::String),
                ("values", array(Schema::String)),
            ])),
        ),
    ])
}

/// A workload resource of `apps/v1`: in the `all` category, with `/status`, a generation,
/// `columns` (their own `Age`), and `/scale` when `scales`.
pub(crate) fn workload(
    kind: &str,
    plural: &str,
    short: &str,
    columns: Vec<Column>,
    scales: bool,
) -> plinth_registry::resources::ResourceDef {
    let mut def = plinth_registry::resources::ResourceDef::new("apps", "v1", kind, plural)
        .short_names(&[short])
        .categories(&["all"])
        .with_status()
        .columns(columns)
        .no_age_column();
    def.generation = true;
    if scales {
        def.scale = Some(scale());
    }
    def
}

/// A strategy of `type` and a `rollingUpdate` of `maxUnavailable` and `maxSurge`
/// (Deployments', DaemonSets').
pub(crate) fn surge_strategy() -> Schema {
    obj(vec![
        ("type", Schema::String),
        (
            "rollingUpdate",
            obj(vec![
                ("maxUnavailable", Schema::IntOrString),
                ("maxSurge", Schema::IntOrString),
            ]),
        ),
    ])
}

/// `appsv1.*Condition` (Deployments' also have `lastUpdateTime`).
pub(crate) fn conditions() -> Schema {
    array(obj(vec![
        ("type", Schema::String),
        ("status", Schema::String),
        ("lastUpdateTime", Schema::String),
        ("lastTransitionTime", Schema::String),
        ("reason", Schema::String),
        ("message", Schema::String),
    ]))
}

/// The merge keys of a pod template at `spec.template` (for `kubectl set image` and other
/// strategic merge patches), and of the status conditions.
pub(crate) const TEMPLATE_LISTS: &[(FieldPath, ListMerge)] = &[
    ("spec.template.spec.containers", ListMerge::Keyed("name")),
    (
        "spec.template.spec.initContainers",
        ListMerge::Keyed("name"),
    ),
    ("spec.template.spec.volumes", ListMerge::Keyed("name")),
    (
        "spec.template.spec.containers[].env",
        ListMerge::Keyed("name"),
    ),
    (
        "spec.template.spec.initContainers[].env",
        ListMerge::Keyed("name"),
    ),
    (
        "spec.template.spec.containers[].ports",
        ListMerge::Keyed("containerPort"),
    ),
    (
        "spec.template.spec.containers[].volumeMounts",
        ListMerge::Keyed("mountPath"),
    ),
    (
        "spec.template.spec.initContainers[].volumeMounts",
        ListMerge::Keyed("mountPath"),
    ),
    ("status.conditions", ListMerge::Keyed("type")),
];

/// The `/scale` of a workload: `spec.replicas`, `status.replicas`, `spec.selector`.
pub(crate) fn scale() -> Scale {
    let fields = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    Scale {
        spec_replicas: fields(&["spec", "replicas"]),
        status_replicas: fields(&["status", "replicas"]),
        label_selector: Some(ScaleSelector::Object(fields(&["spec", "selector"]))),
    }
}

/// Sets `key` to `value` unless it has a value.
pub(crate) fn set_default(object: &mut Map<String, Value>, key: &str, value: Value) {
    if object.get(key).is_none_or(Value::is_null) {
        object.insert(key.to_owned(), value);
    }
}

/// The defaults of a pod template at `spec.template`.
pub(crate) fn default_template(object: &mut Value) {
    if let Some(spec) = object.pointer_mut("/spec/template/spec") {
        default_pod_spec(spec);
    }
}

/// `labelSelector.String()` of the generated Go code, as validation messages show a
/// selector: `&LabelSelector{MatchLabels:map[string]string{app: web,},MatchExpressions:[]LabelSelectorRequirement{},}`.
pub(crate) fn selector_go(selector: &Value) -> String {
    let mut labels = String::from("map[string]string{");
    let mut keys: Vec<(&String, &Value)> = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .collect();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    for (k, v) in keys {
        labels.push_str(&format!("{k}: {},", v.as_str().unwrap_or("")));
    }
    labels.push('}');
    let mut expressions = String::from("[]LabelSelectorRequirement{");
    for e in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        expressions.push_str(&format!(
            "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
            e["key"].as_str().unwrap_or(""),
            e["operator"].as_str().unwrap_or(""),
            values.join(" ")
        ));
    }
    expressions.push('}');
    format!("&LabelSelector{{MatchLabels:{labels},MatchExpressions:{expressions},}}")
}

/// `%#v` of a `map[string]string`: `map[string]string{"app":"web"}`.
pub(crate) fn labels_go(labels: &Value) -> String {
    let mut pairs: Vec<(&String, &Value)> = labels.as_object().into_iter().flatten().collect();
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or("")))
        .collect();
    if labels.is_null() {
        "map[string]string(nil)".into()
    } else {
        format!("map[string]string{{{}}}", inner.join(", "))
    }
}

/// The labels of `object` at `pointer` as a map for matching.
pub(crate) fn labels_at(
    object: &Value,
    pointer: &str,
) -> std::collections::BTreeMap<String, String> {
    object
        .pointer(pointer)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
        .collect()
}

/// What the apps workloads check alike: `spec.replicas` (when `replicas`) not negative, a
/// selector that is present, valid and not empty (`kind`: "deployment" in kube's "empty
/// selector is invalid for deployment"), a template whose labels it selects, whose pods
/// restart `Always` and have no deadline, and `minReadySeconds` not negative.
pub(crate) fn validate_workload(object: &Value, kind: &str, replicas: bool) -> Vec<Cause> {
    let spec = &object["spec"];
    let mut causes = Vec::new();
    if replicas {
        causes.extend(nonnegative(spec, "replicas", "spec"));
    }
    causes.extend(nonnegative(spec, "minReadySeconds", "spec"));
    let selector = &spec["selector"];
    let parsed = if selector.is_null() {
        causes.push(Cause::required("spec.selector", ""));
        None
    } else {
        match LabelSelector::from_object(selector) {
            Ok(parsed) if parsed.is_empty() => {
                causes.push(go_invalid(
                    "spec.selector",
                    &selector_go(selector),
                    &format!("empty selector is invalid for {kind}"),
                ));
                None
            }
            Ok(parsed) => Some(parsed),
            Err(e) => {
                causes.push(go_invalid(
                    "spec.selector",
                    &selector_go(selector),
                    &format!("invalid label selector: {e}"),
                ));
                None
            }
        }
    };
    let template = &spec["template"];
    let selected = parsed.is_none_or(|p| p.matches(&labels_at(template, "/metadata/labels")));
    causes.extend(validate_template(template, selected, "ReplicaSet"));
    causes
}

/// The pod template of a controller that keeps pods running (`owner`: `ReplicaSet`, as kube
/// names it for every apps workload, or `ReplicationController`): present, its labels valid
/// and `selected` by the owner's selector (as the caller found), a valid pod spec that
/// restarts `Always` and has no deadline.
pub(crate) fn validate_template(template: &Value, selected: bool, owner: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if template.is_null() {
        causes.push(Cause::required("spec.template", ""));
        return causes;
    }
    let labels = &template["metadata"]["labels"];
    if let Some(map) = labels.as_object() {
        causes.extend(plinth_core::validation::labels(
            map,
            "spec.template.metadata.labels",
        ));
    }
    if !selected {
        causes.push(go_invalid(
            "spec.template.metadata.labels",
            &labels_go(labels),
            "`selector` does not match template `labels`",
        ));
    }
    let pod = &template["spec"];
    causes.extend(validate_pod_spec(pod, "spec.template.spec"));
    let restart = pod["restartPolicy"].as_str().unwrap_or("Always");
    if restart != "Always" {
        causes.push(Cause::not_supported(
            "spec.template.spec.restartPolicy",
            &json!(restart),
            &["Always"],
        ));
    }
    if !pod["activeDeadlineSeconds"].is_null() {
        causes.push(Cause::forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            &format!("activeDeadlineSeconds in {owner} is not Supported"),
        ));
    }
    causes
}

/// `field.Invalid` with a value already written as Go writes it.
pub(crate) fn go_invalid(field: &str, value: &str, detail: &str) -> Cause {
    Cause::new(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {value}: {detail}"),
    )
}

/// `spec.selector` may not change (apps/v1).
pub(crate) fn selector_immutable(object: &Value, old: Option<&Value>) -> Vec<Cause> {
    match old {
        Some(old) if old["spec"]["selector"] != object["spec"]["selector"] => {
            vec![go_invalid(
                "spec.selector",
                &selector_go(&object["spec"]["selector"]),
                "field is immutable",
            )]
        }
        _ => Vec::new(),
    }
}

/// `ValidateNonnegativeField` of `parent.field` (absent is fine).
pub(crate) fn nonnegative(parent: &Value, field: &str, path: &str) -> Vec<Cause> {
    match parent[field].as_i64() {
        Some(n) if n < 0 => vec![Cause::invalid(
            if path.is_empty() {
                field.to_owned()
            } else {
                format!("{path}.{field}")
            },
            &json!(n),
            "must be greater than or equal to 0",
        )],
        _ => Vec::new(),
    }
}

/// `%#v` of an `intstr.IntOrString`, as kube's messages show one.
pub(crate) fn int_or_string_go(value: &Value) -> String {
    match value {
        Value::String(s) => format!("intstr.IntOrString{{Type:1, IntVal:0, StrVal:{s:?}}}"),
        other => format!(
            "intstr.IntOrString{{Type:0, IntVal:{}, StrVal:\"\"}}",
            other.as_i64().unwrap_or(0)
        ),
    }
}

/// The value of an int-or-percent field against `total` (percentages rounded up when
/// `round_up`, as `GetScaledValueFromIntOrPercent`); `None` if it is neither.
pub fn scaled(value: &Value, total: i64, round_up: bool) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let percent: i64 = s.strip_suffix('%')?.parse().ok()?;
            let product = percent * total;
            Some(if round_up {
                (product + 99) / 100
            } else {
                product / 100
            })
        }
        _ => None,
    }
}

/// `ValidatePositiveIntOrPercent` (and, with `at_most_100`, `IsNotMoreThan100Percent`).
pub(crate) fn int_or_percent(value: &Value, path: &str, at_most_100: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    match value {
        Value::Null => {}
        Value::String(s) => {
            let valid = s
                .strip_suffix('%')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if !valid {
                causes.push(go_invalid(
                    path,
                    &int_or_string_go(value),
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                ));
            } else if at_most_100 && scaled(value, 100, false).is_some_and(|p| p > 100) {
                causes.push(go_invalid(
                    path,
                    &int_or_string_go(value),
                    "must not be greater than 100%",
                ));
            }
        }
        Value::Number(n) if n.as_i64().is_some_and(|n| n < 0) => {
            causes.push(Cause::invalid(
                path,
                value,
                "must be greater than or equal to 0",
            ));
        }
        _ => {}
    }
    causes
}

/// `Ready` as `ready/desired` (`status.readyReplicas` of `spec.replicas`).
pub(crate) fn ready_column() -> Column {
    column(
        "Ready",
        "string",
        "Number of the pod with ready state",
        0,
        |o, _| {
            json!(format!(
                "{}/{}",
                o.pointer("/status/readyReplicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(0),
                o.pointer("/spec/replicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
            ))
        },
    )
}

/// `Age`, placed before the wide columns (as kubectl's workload tables have it).
pub(crate) fn age_column() -> Column {
    column(
        "Age",
        "string",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        0,
        |o, now| plinth_registry::resources::age_cell(o, "metadata.creationTimestamp", now),
    )
}

/// The wide columns every workload table ends with: containers, images and (`selector`)
/// the selector.
pub(crate) fn wide_columns(selector: bool) -> Vec<Column> {
    let mut columns = vec![
        column(
            "Containers",
            "string",
            "Names of each container in the template.",
            1,
            |o, _| json!(template_list(o, "name")),
        ),
        column(
            "Images",
            "string",
            "Images referenced by each container in the template.",
            1,
            |o, _| json!(template_list(o, "image")),
        ),
    ];
    if selector {
        columns.push(column(
            "Selector",
            "string",
            "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
            1,
            |o, _| json!(selector_cell(&o["spec"]["selector"])),
        ));
    }
    columns
}

fn template_list(object: &Value, key: &str) -> String {
    super::core::podtemplate::container_list(&object["spec"]["template"], key)
}

/// `metav1.FormatLabelSelector`: the selector's string, `<none>` when empty.
pub(crate) fn selector_cell(selector: &Value) -> String {
    match LabelSelector::from_object(selector) {
        Ok(s) if s.is_empty() => "<none>".into(),
        Ok(s) => s.to_string(),
        Err(_) => "<error>".into(),
    }
}

/// An integer cell of the field at `pointer` (0 when absent, as Go's zero value).
pub(crate) fn int_cell(pointer: &'static str) -> impl Fn(&Value, i64) -> Value + Send + Sync {
    move |o, _| json!(o.pointer(pointer).and_then(Value::as_i64).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_scale_as_kube_rounds_them() {
        assert_eq!(scaled(&json!("25%"), 3, true), Some(1));
        assert_eq!(scaled(&json!("25%"), 3, false), Some(0));
        assert_eq!(scaled(&json!(2), 3, false), Some(2));
        assert_eq!(scaled(&json!("x"), 3, false), None);
        assert!(
            int_or_percent(&json!("150%"), "p", true)[0]
                .message
                .contains("100%")
        );
        assert!(
            int_or_percent(&json!("1x"), "p", true)[0]
                .message
                .contains("StrVal:\"1x\"")
        );
        assert!(
            int_or_percent(&json!(-1), "p", true)[0]
                .message
                .contains("greater than or equal")
        );
    }

    #[test]
    fn selectors_and_labels_read_as_gos() {
        assert_eq!(
            selector_go(&json!({})),
            "&LabelSelector{MatchLabels:map[string]string{},MatchExpressions:[]LabelSelectorRequirement{},}"
        );
        assert_eq!(
            labels_go(&json!({"b": "2", "a": "1"})),
            r#"map[string]string{"a":"1", "b":"2"}"#
        );
    }
}
