//! CustomResourceDefinitions: the CRD resource itself, the checks a CRD must pass, and the
//! resource definitions its served versions become (the endpoints registered at run time).

use std::sync::Arc;

use plinth_core::jsonpath::JsonPath;
use plinth_core::meta::{human_duration, parse_time};
use plinth_core::{Cause, GroupVersion};
use serde_json::{Value, json};

use crate::resources::{Column, Kind, NameRule, ResourceDef, Scale};
use crate::schema::Schema;

/// The finalizer that holds a deleted CRD until its custom resources are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The `customresourcedefinitions` resource.
pub fn crd_resource() -> ResourceDef {
    let created_at: crate::resources::CellFn = Arc::new(|o: &Value, _| {
        o.pointer("/metadata/creationTimestamp")
            .cloned()
            .unwrap_or(Value::Null)
    });
    ResourceDef {
        group_version: GroupVersion::new("apiextensions.k8s.io", "v1"),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
        singular: "customresourcedefinition".into(),
        namespaced: false,
        short_names: vec!["crd".into(), "crds".into()],
        categories: vec!["api-extensions".into()],
        name_rule: NameRule::Subdomain,
        status_subresource: true,
        generation: true,
        allow_create_on_update: false,
        selectable_fields: Vec::new(),
        columns: vec![Column {
            name: "Created At".into(),
            kind: "date".into(),
            format: String::new(),
            description: "The time the CRD was created".into(),
            priority: 0,
            cell: created_at,
        }],
        age_column: false,
        schema: Arc::new(Schema::Object(vec![
            ("apiVersion", Schema::String),
            ("kind", Schema::String),
            ("metadata", Schema::Any),
            ("spec", Schema::Any),
            ("status", Schema::Any),
        ])),
        behaviour: Kind::Crd,
        delete_returns_object: true,
        scale: None,
        terminating: false,
        events_k8s_io: false,
        openapi: None,
        structural: None,
        deprecation: None,
    }
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
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
    match text(crd, "/spec/scope") {
        "Cluster" | "Namespaced" => {}
        "" => causes.push(Cause::required("spec.scope", "")),
        other => causes.push(Cause::new(
            "FieldValueNotSupported",
            "spec.scope",
            format!("Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""),
        )),
    }
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
                causes.push(Cause::new(
                    "FieldValueDuplicate",
                    format!("{path}.name"),
                    format!("Duplicate value: {name:?}"),
                ));
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
        if !versions
            .iter()
            .any(|v| v.get("served") == Some(&json!(true)))
        {
            causes.push(Cause::invalid(
                "spec.versions",
                &Value::Array(versions.clone()),
                "must have at least one served version",
            ));
        }
    }
    if let Some(old) = old {
        if text(old, "/spec/group") != group && !text(old, "/spec/group").is_empty() {
            causes.push(Cause::immutable("spec.group", &json!(group)));
        }
        if text(old, "/spec/names/plural") != plural {
            causes.push(Cause::immutable("spec.names.plural", &json!(plural)));
        }
    }
    causes
}

fn printer_column(column: &Value) -> Option<Column> {
    let path = JsonPath::parse(text(column, "/jsonPath")).ok()?;
    let kind = text(column, "/type").to_owned();
    let is_date = kind == "date";
    let cell: crate::resources::CellFn = Arc::new(move |object: &Value, now: i64| {
        let found = path.select(object);
        let Some(first) = found.first() else {
            return Value::Null;
        };
        if is_date {
            return match first.as_str().and_then(parse_time) {
                Some(t) => json!(human_duration(now - t)),
                None => Value::Null,
            };
        }
        if found.len() == 1 {
            return (*first).clone();
        }
        let joined: Vec<String> = found
            .iter()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .collect();
        json!(joined.join(","))
    });
    Some(Column {
        name: text(column, "/name").to_owned(),
        kind,
        format: text(column, "/format").to_owned(),
        description: text(column, "/description").to_owned(),
        priority: column.get("priority").and_then(Value::as_i64).unwrap_or(0),
        cell,
    })
}

fn scale(version: &Value) -> Option<Scale> {
    let scale = version.pointer("/subresources/scale")?;
    let fields = |key: &str| {
        JsonPath::parse(text(scale, key))
            .ok()
            .and_then(|p| p.fields())
    };
    Some(Scale {
        spec_replicas: fields("/specReplicasPath")?,
        status_replicas: fields("/statusReplicasPath")?,
        label_selector: fields("/labelSelectorPath"),
    })
}

/// The resource definitions of a CRD's served versions.
pub fn served_defs(crd: &Value) -> Vec<ResourceDef> {
    let terminating = crd
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null());
    let group = text(crd, "/spec/group");
    let names = |field: &str| -> Vec<String> {
        crd.pointer(&format!("/spec/names/{field}"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let kind = text(crd, "/spec/names/kind");
    let singular = match text(crd, "/spec/names/singular") {
        "" => kind.to_lowercase(),
        s => s.to_owned(),
    };
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("served") == Some(&json!(true)))
        .map(|version| {
            let columns: Vec<Column> = version
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .map(|c| c.iter().filter_map(printer_column).collect())
                .unwrap_or_default();
            let selectable = version
                .get("selectableFields")
                .and_then(Value::as_array)
                .map(|f| {
                    f.iter()
                        .map(|s| text(s, "/jsonPath").trim_start_matches('.').to_owned())
                        .collect()
                })
                .unwrap_or_default();
            ResourceDef {
                group_version: GroupVersion::new(group, text(version, "/name")),
                kind: kind.to_owned(),
                plural: text(crd, "/spec/names/plural").to_owned(),
                singular: singular.clone(),
                namespaced: text(crd, "/spec/scope") == "Namespaced",
                short_names: names("shortNames"),
                categories: names("categories"),
                name_rule: NameRule::Subdomain,
                status_subresource: version.pointer("/subresources/status").is_some(),
                generation: true,
                allow_create_on_update: false,
                selectable_fields: selectable,
                age_column: columns.is_empty(),
                columns,
                schema: Arc::new(Schema::Any),
                behaviour: Kind::Custom,
                delete_returns_object: true,
                scale: scale(version),
                terminating,
                events_k8s_io: false,
                openapi: version
                    .pointer("/schema/openAPIV3Schema")
                    .map(|s| Arc::new(published_schema(s))),
                structural: version
                    .pointer("/schema/openAPIV3Schema")
                    .and_then(|s| plinth_schema::Schema::compile(s).ok())
                    .map(Arc::new),
                deprecation: (version.get("deprecated") == Some(&json!(true))).then(
                    || match version.get("deprecationWarning").and_then(Value::as_str) {
                        Some(warning) => warning.to_owned(),
                        None => format!("{group}/{} {kind} is deprecated", text(version, "/name")),
                    },
                ),
            }
        })
        .collect()
}

/// A version's schema as published in OpenAPI: with `apiVersion`, `kind` and `metadata` as
/// kube-apiserver adds them.
fn published_schema(schema: &Value) -> Value {
    let mut published = schema.clone();
    if !published.is_object() {
        return json!({"type": "object"});
    }
    let properties = published.as_object_mut().and_then(|o| {
        o.entry("properties").or_insert_with(|| json!({}));
        o.get_mut("properties")
    });
    if let Some(Value::Object(properties)) = properties {
        properties.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
        properties.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
        properties.insert(
            "metadata".into(),
            json!({"type": "object", "description": "Standard object's metadata."}),
        );
    }
    published
}

/// The status the CRD controller maintains: names accepted, established, stored versions.
pub fn desired_status(crd: &Value, now: &str) -> Value {
    let mut status = crd
        .get("status")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut set = |kind: &str, value: &str, reason: &str, message: &str| {
        match conditions.iter_mut().find(|c| c["type"] == kind) {
            Some(existing) if existing["status"] == value => {}
            Some(existing) => *existing = json!({"type": kind, "status": value, "lastTransitionTime": now, "reason": reason, "message": message}),
            None => conditions.push(json!({"type": kind, "status": value, "lastTransitionTime": now, "reason": reason, "message": message})),
        }
    };
    set("NamesAccepted", "True", "NoConflicts", "no conflicts found");
    set(
        "Established",
        "True",
        "InitialNamesAccepted",
        "the initial names have been accepted",
    );
    // A stored CRD whose schema is not structural (one written before these rules, or through
    // storage directly) says so, as kube-apiserver does.
    let violations: Vec<String> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, v)| Some((i, v.pointer("/schema/openAPIV3Schema")?)))
        .flat_map(|(i, schema)| {
            plinth_schema::structural_errors(schema)
                .into_iter()
                .map(move |e| e.cause(&format!("spec.versions[{i}].schema")).line())
        })
        .collect();
    let non_structural = match violations.as_slice() {
        [] => None,
        [one] => Some(one.clone()),
        many => Some(format!("[{}]", many.join(", "))),
    };
    if let Some(message) = &non_structural {
        set("NonStructuralSchema", "True", "Violations", message);
    }
    if crd
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        set(
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        );
    }
    if non_structural.is_none() {
        conditions.retain(|c| c["type"] != "NonStructuralSchema");
    }
    status["conditions"] = Value::Array(conditions);
    status["acceptedNames"] = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let storage = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| vs.iter().find(|v| v.get("storage") == Some(&json!(true))))
        .and_then(|v| v.get("name"))
        .cloned();
    let mut stored: Vec<Value> = status
        .get("storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(storage) = storage
        && !stored.contains(&storage)
    {
        stored.push(storage);
    }
    status["storedVersions"] = Value::Array(stored);
    status
}
