//! apiextensions.k8s.io/v1 CustomResourceDefinition: the resource, its defaults and the checks
//! a CRD must pass (names, scope, versions, structural schemas, CEL rules, printer columns).

use std::sync::Arc;

use plinth_core::Cause;
use plinth_core::jsonpath::JsonPath;
use plinth_core::managed::ListType;
use serde_json::{Value, json};

use plinth_registry::resources::{CellFn, Column, ResourceDef};
use plinth_registry::schema::Schema;
use plinth_registry::strategy::Strategy;

/// The finalizer that holds a deleted CRD until its custom resources are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The `customresourcedefinitions` resource.
pub fn resource() -> ResourceDef {
    let created_at: CellFn = Arc::new(|o: &Value, _| {
        o.pointer("/metadata/creationTimestamp")
            .cloned()
            .unwrap_or(Value::Null)
    });
    let mut def = ResourceDef::new(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    )
    .cluster_scoped()
    .short_names(&["crd", "crds"])
    .with_status()
    .columns(vec![Column {
        name: "Created At".into(),
        kind: "date".into(),
        format: String::new(),
        description: "The time the CRD was created".into(),
        priority: 0,
        cell: created_at,
    }])
    .schema(Schema::Object(vec![
        ("apiVersion", Schema::String),
        ("kind", Schema::String),
        ("metadata", Schema::Any),
        ("spec", Schema::Any),
        ("status", Schema::Any),
    ]))
    .strategy(Crds);
    def.categories = vec!["api-extensions".into()];
    def.generation = true;
    def.age_column = false;
    def.delete_returns_object = true;
    def
}

/// CRDs: names defaulted and checked, schemas structural and compilable, held by the cleanup
/// finalizer until their custom resources are gone.
#[derive(Debug)]
struct Crds;

impl Strategy for Crds {
    fn prepare_create(&self, object: &mut Value) {
        default_crd(object);
        if let Some(meta) = plinth_core::meta::metadata_mut(object) {
            let finalizers = meta.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(list) = finalizers.as_array_mut()
                && !list.iter().any(|f| f == CLEANUP_FINALIZER)
            {
                list.push(json!(CLEANUP_FINALIZER));
            }
        }
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        default_crd(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        // A write that leaves the spec as it was (status, metadata) is not held to rules a
        // stored CRD predates (compared as defaulted: stored objects are read with defaults).
        if let Some(old) = old {
            let mut old = old.clone();
            default_crd(&mut old);
            if old.get("spec") == object.get("spec") {
                return Vec::new();
            }
        }
        validate_crd(object, old)
    }

    fn list_type(&self, path: &[&str]) -> Option<ListType> {
        (path == ["spec", "versions"]).then(|| ListType::Map(vec!["name".into()]))
    }
}

pub(crate) fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// Fills in what a CRD may leave out: `names.singular`, `names.listKind`.
pub fn default_crd(crd: &mut Value) {
    let kind = text(crd, "/spec/names/kind").to_owned();
    if let Some(names) = crd
        .pointer_mut("/spec/names")
        .and_then(Value::as_object_mut)
    {
        if names
            .get("singular")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            names.insert("singular".into(), json!(kind.to_lowercase()));
        }
        if names
            .get("listKind")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            names.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
}

/// The checks of a CRD (the names, scope and versions rules of apiextensions' validation).
pub fn validate_crd(crd: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    validate_names(crd, &mut causes);
    validate_scope(crd, &mut causes);
    validate_versions(crd, &mut causes);
    validate_conversion(crd, &mut causes);
    if let Some(old) = old {
        validate_immutable(crd, old, &mut causes);
    }
    causes
}

/// `spec.conversion`: `None`, or `Webhook` with where to call and which review versions.
fn validate_conversion(crd: &Value, causes: &mut Vec<Cause>) {
    let Some(conversion) = crd.pointer("/spec/conversion").filter(|c| !c.is_null()) else {
        return;
    };
    let webhook = conversion.get("webhook").filter(|w| !w.is_null());
    match conversion
        .get("strategy")
        .and_then(Value::as_str)
        .unwrap_or("None")
    {
        "None" => {
            if webhook.is_some() {
                causes.push(Cause::forbidden(
                    "spec.conversion.webhook",
                    "should not be set when strategy is not set to Webhook",
                ));
            }
        }
        "Webhook" => {
            let Some(webhook) = webhook else {
                causes.push(Cause::required(
                    "spec.conversion.webhook",
                    "required when strategy is set to Webhook",
                ));
                return;
            };
            let client = webhook.get("clientConfig").filter(|c| c.is_object());
            let url = client.and_then(|c| c.get("url")).and_then(Value::as_str);
            let service = client
                .and_then(|c| c.get("service"))
                .filter(|s| s.is_object());
            match (url, service) {
                (None, None) | (Some(_), Some(_)) => causes.push(Cause::required(
                    "spec.conversion.webhook.clientConfig",
                    "exactly one of url or service is required",
                )),
                (Some(url), None) if !url.starts_with("https://") => causes.push(Cause::invalid(
                    "spec.conversion.webhook.clientConfig.url",
                    &json!(url),
                    "'https' is the only allowed URL scheme",
                )),
                _ => {}
            }
            let versions: Vec<&str> = webhook
                .get("conversionReviewVersions")
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if versions.is_empty() {
                causes.push(Cause::required(
                    "spec.conversion.webhook.conversionReviewVersions",
                    "must specify one of v1, v1beta1",
                ));
            } else if !versions.iter().any(|v| *v == "v1" || *v == "v1beta1") {
                causes.push(Cause::invalid(
                    "spec.conversion.webhook.conversionReviewVersions",
                    &json!(versions),
                    "must include at least one of v1, v1beta1",
                ));
            }
        }
        other => causes.push(Cause::not_supported(
            "spec.conversion.strategy",
            &json!(other),
            &["None", "Webhook"],
        )),
    }
}

/// `metadata.name`, `spec.group` and `spec.names`.
fn validate_names(crd: &Value, causes: &mut Vec<Cause>) {
    let group = text(crd, "/spec/group");
    let plural = text(crd, "/spec/names/plural");
    let name = plinth_core::meta::name(crd).unwrap_or("");
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if group.is_empty() {
        causes.push(Cause::required("spec.group", ""));
    } else {
        for message in plinth_core::validation::dns1123_subdomain(group) {
            causes.push(Cause::invalid("spec.group", &json!(group), &message));
        }
        if !group.contains('.') {
            causes.push(Cause::invalid(
                "spec.group",
                &json!(group),
                "should be a domain with at least one dot",
            ));
        }
    }
    for (field, value) in [
        ("plural", plural),
        ("singular", text(crd, "/spec/names/singular")),
        ("kind", text(crd, "/spec/names/kind")),
    ] {
        let path = format!("spec.names.{field}");
        if value.is_empty() {
            if field != "singular" {
                causes.push(Cause::required(path, ""));
            }
        } else if field != "kind" {
            for message in plinth_core::validation::dns1123_label(value) {
                causes.push(Cause::invalid(&path, &json!(value), &message));
            }
        }
    }
}

/// `spec.scope`.
fn validate_scope(crd: &Value, causes: &mut Vec<Cause>) {
    match text(crd, "/spec/scope") {
        "Cluster" | "Namespaced" => {}
        "" => causes.push(Cause::required("spec.scope", "")),
        other => causes.push(Cause::not_supported(
            "spec.scope",
            &Value::String(other.to_owned()),
            &["Cluster", "Namespaced"],
        )),
    }
}

/// `spec.versions`: one storage version, at least one served, names unique, schemas structural
/// and compilable, printer columns' JSONPaths.
fn validate_versions(crd: &Value, causes: &mut Vec<Cause>) {
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::invalid(
            "spec.versions",
            &json!([]),
            "must have exactly one version marked as storage version",
        ));
    } else {
        let storage = versions
            .iter()
            .filter(|v| v.get("storage") == Some(&json!(true)))
            .count();
        if storage != 1 {
            causes.push(Cause::invalid(
                "spec.versions",
                &Value::Array(versions.clone()),
                "must have exactly one version marked as storage version",
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        let shared_schema = versions
            .iter()
            .all(|v| v.get("schema") == versions[0].get("schema"));
        for (i, version) in versions.iter().enumerate() {
            let name = text(version, "/name");
            let path = format!("spec.versions[{i}]");
            if name.is_empty() {
                causes.push(Cause::required(format!("{path}.name"), ""));
            } else if !seen.insert(name.to_owned()) {
                causes.push(Cause::duplicate(format!("{path}.name"), name));
            }
            match version.pointer("/schema/openAPIV3Schema") {
                None => causes.push(Cause::required(
                    format!("{path}.schema.openAPIV3Schema"),
                    "schemas are required",
                )),
                Some(schema) => {
                    // kube-apiserver reports a schema all versions share under spec.validation
                    // (its internal form hoists it there).
                    let prefix = if shared_schema {
                        "spec.validation".to_owned()
                    } else {
                        format!("{path}.schema")
                    };
                    let mut errors = plinth_schema::structural_errors(schema);
                    if errors.is_empty()
                        && let Err(e) = plinth_schema::Schema::compile(schema)
                    {
                        errors.push(e);
                    }
                    for e in errors {
                        let cause = e.cause(&prefix);
                        if !causes.contains(&cause) {
                            causes.push(cause);
                        }
                    }
                }
            }
            for (j, column) in version
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let json_path = text(column, "/jsonPath");
                if let Err(e) = JsonPath::parse(json_path) {
                    causes.push(Cause::invalid(
                        format!("{path}.additionalPrinterColumns[{j}].jsonPath"),
                        &json!(json_path),
                        &e.reason,
                    ));
                }
            }
        }
        // No served version is allowed (kube-apiserver stores such a CRD and serves nothing
        // of it; controller-runtime's envtest installs one).
    }
}

/// What may not change: the group and the plural.
fn validate_immutable(crd: &Value, old: &Value, causes: &mut Vec<Cause>) {
    let group = text(crd, "/spec/group");
    let plural = text(crd, "/spec/names/plural");
    if text(old, "/spec/group") != group && !text(old, "/spec/group").is_empty() {
        causes.push(Cause::immutable("spec.group", &json!(group)));
    }
    if text(old, "/spec/names/plural") != plural {
        causes.push(Cause::immutable("spec.names.plural", &json!(plural)));
    }
}
