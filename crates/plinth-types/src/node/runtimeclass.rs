//! node.k8s.io/v1 RuntimeClass: a named container runtime configuration. The RuntimeClass
//! admission plugin ([`admit_pod`]) gives a pod that names one the class's overhead, node
//! selector and tolerations. The node agent runs every class's pods the same way.

use plinth_core::gvk::GroupResource;
use plinth_core::validation::dns1123_label;
use plinth_core::{ApiError, Cause};
use serde_json::{Map, Value, json};

use plinth_registry::resources::{Objects, ResourceDef, column};
use plinth_registry::schema::{Schema, array, obj, strings, top};
use plinth_registry::strategy::Strategy;

/// The `runtimeclasses` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses")
        .cluster_scoped()
        .columns(vec![column("Handler", "string", "", 0, |o, _| {
            o["handler"].clone()
        })])
        .schema(top(vec![
            ("handler", Schema::String),
            ("overhead", obj(vec![("podFixed", Schema::Any)])),
            (
                "scheduling",
                obj(vec![
                    ("nodeSelector", strings()),
                    ("tolerations", array(Schema::Any)),
                ]),
            ),
        ]))
        .strategy(RuntimeClasses)
}

#[derive(Debug)]
struct RuntimeClasses;

impl Strategy for RuntimeClasses {
    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        if let Some(old) = old {
            if old["handler"] != object["handler"] {
                causes.push(Cause::immutable("handler", &object["handler"]));
            }
            return causes;
        }
        let handler = object["handler"].as_str().unwrap_or("");
        for msg in dns1123_label(handler) {
            causes.push(Cause::invalid("handler", &json!(handler), &msg));
        }
        if let Some(fixed) = object
            .pointer("/overhead/podFixed")
            .and_then(Value::as_object)
        {
            for (name, quantity) in fixed {
                let parsed = quantity
                    .as_str()
                    .map(str::to_owned)
                    .or_else(|| quantity.as_i64().map(|n| n.to_string()))
                    .and_then(|q| plinth_core::quantity::parse(&q));
                if parsed.is_none() {
                    causes.push(Cause::invalid(
                        format!("overhead.podFixed[{name}]"),
                        quantity,
                        plinth_core::quantity::INVALID,
                    ));
                }
            }
        }
        if let Some(selector) = object
            .pointer("/scheduling/nodeSelector")
            .and_then(Value::as_object)
        {
            causes.extend(plinth_core::validation::labels(
                selector,
                "scheduling.nodeSelector",
            ));
        }
        causes
    }
}

/// The RuntimeClass admission plugin for a new pod that names a class: the class's overhead
/// (a pod's own overhead must equal it), node selector (merged; a conflicting key refuses the
/// pod) and tolerations (added).
///
/// # Errors
/// 403 for a class that does not exist, a different overhead, a conflicting node selector.
pub async fn admit_pod(objects: &dyn Objects, pod: &mut Value) -> Result<(), ApiError> {
    let pods = GroupResource::new("", "pods");
    let name = plinth_core::meta::name(pod).unwrap_or("").to_owned();
    let forbid = |why: String| ApiError::forbidden(Some(&pods), &name, &why);
    let Some(class_name) = pod
        .pointer("/spec/runtimeClassName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
    else {
        if pod.pointer("/spec/overhead").is_some_and(|o| !o.is_null()) {
            return Err(forbid(
                "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead".into(),
            ));
        }
        return Ok(());
    };
    let Some(def) = objects.resource("node.k8s.io", "v1", "runtimeclasses") else {
        return Ok(());
    };
    let class = match objects.cached(&def, None, &class_name) {
        Some(Some(class)) => Some(class),
        _ => objects.get(&def, None, &class_name).await.ok(),
    };
    let Some(class) = class else {
        return Err(forbid(format!(
            "pod rejected: RuntimeClass {class_name:?} not found"
        )));
    };
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    match class.pointer("/overhead/podFixed").filter(|o| !o.is_null()) {
        Some(fixed) => {
            let given = spec
                .get("overhead")
                .filter(|o| o.as_object().is_some_and(|m| !m.is_empty()));
            if given.is_some_and(|g| !same_quantities(g, fixed)) {
                return Err(forbid(
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
                        .into(),
                ));
            }
            spec.insert("overhead".into(), fixed.clone());
        }
        None => {
            if spec.get("overhead").is_some_and(|o| !o.is_null()) {
                return Err(forbid(
                    "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead".into(),
                ));
            }
        }
    }
    if let Some(selector) = class
        .pointer("/scheduling/nodeSelector")
        .and_then(Value::as_object)
    {
        let mut merged = spec
            .get("nodeSelector")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_else(Map::new);
        for (key, value) in selector {
            if let Some(own) = merged.get(key)
                && own != value
            {
                return Err(forbid(format!(
                    "conflict: runtimeClass.scheduling.nodeSelector[{key}] = {}; pod.spec.nodeSelector[{key}] = {}",
                    value.as_str().unwrap_or(""),
                    own.as_str().unwrap_or("")
                )));
            }
            merged.insert(key.clone(), value.clone());
        }
        spec.insert("nodeSelector".into(), Value::Object(merged));
    }
    if let Some(extra) = class
        .pointer("/scheduling/tolerations")
        .and_then(Value::as_array)
    {
        let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
        if let Some(list) = tolerations.as_array_mut() {
            for toleration in extra {
                if !list.contains(toleration) {
                    list.push(toleration.clone());
                }
            }
        }
    }
    Ok(())
}

/// Whether two resource lists hold the same quantities (`1000m` equals `1`).
fn same_quantities(a: &Value, b: &Value) -> bool {
    let parse = |v: &Value| {
        v.as_object().map(|m| {
            m.iter()
                .map(|(k, q)| {
                    let text = q
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| q.to_string());
                    (k.clone(), plinth_core::quantity::parse(&text))
                })
                .collect::<std::collections::BTreeMap<_, _>>()
        })
    };
    parse(a) == parse(b)
}
