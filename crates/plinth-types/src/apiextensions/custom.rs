//! Custom resources: the resources a CRD's served versions become (endpoints registered at run
//! time), and their strategy — built from the version's structural schema.

use std::sync::Arc;

use plinth_core::Cause;
use plinth_core::jsonpath::JsonPath;
use plinth_core::managed::{ListType, MapType};
use plinth_core::meta::{human_duration, parse_time};
use serde_json::{Value, json};

use super::crd::text;
use plinth_registry::resources::{CellFn, Column, NameRule, ResourceDef, Scale, ScaleSelector};
use plinth_registry::schema::Findings;
use plinth_registry::strategy::Strategy;

/// A custom resource version's behaviour: its structural schema prunes, defaults and validates
/// (CEL rules included); no strategic merge patch.
#[derive(Debug)]
pub struct CustomResources {
    /// The version's structural schema, compiled once.
    pub structural: Option<Arc<plinth_schema::Schema>>,
    /// Whether the schema declares defaults: then objects read from storage are defaulted
    /// as they are served (kube defaults on read too, so a default added to a CRD shows on
    /// the objects stored before it), and lists and watches cannot send the stored bytes.
    pub defaults_on_read: bool,
}

/// Whether a schema declares a `default` anywhere.
pub fn declares_defaults(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => map.contains_key("default") || map.values().any(declares_defaults),
        Value::Array(items) => items.iter().any(declares_defaults),
        _ => false,
    }
}

impl Strategy for CustomResources {
    fn decode(&self, _def: &ResourceDef, object: &mut Value) -> Findings {
        let mut findings = Findings::default();
        if let Some(structural) = &self.structural {
            findings.unknown = structural.prune(object);
            findings.unknown.sort();
            structural.apply_defaults(object);
        }
        findings
    }

    fn prune(&self, _def: &ResourceDef, object: &mut Value) {
        if let Some(structural) = &self.structural {
            structural.prune(object);
        }
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        self.structural
            .as_ref()
            .map(|s| s.validate_update(object, old))
            .unwrap_or_default()
    }

    fn list_type(&self, path: &[&str]) -> Option<ListType> {
        Some(
            self.structural
                .as_ref()
                .map_or(ListType::Atomic, |s| s.list_type_at(path)),
        )
    }

    fn map_type(&self, path: &[&str]) -> Option<MapType> {
        Some(
            self.structural
                .as_ref()
                .map_or(MapType::Struct, |s| s.map_type_at(path)),
        )
    }

    fn strategic_merge_patch(&self) -> bool {
        false
    }

    fn to_view(&self, mut object: Value) -> Value {
        if self.defaults_on_read
            && let Some(structural) = &self.structural
        {
            structural.apply_defaults(&mut object);
        }
        object
    }

    fn serves_stored_form(&self) -> bool {
        !self.defaults_on_read
    }
}

fn printer_column(column: &Value) -> Option<Column> {
    let path = JsonPath::parse(text(column, "/jsonPath")).ok()?;
    let kind = text(column, "/type").to_owned();
    let is_date = kind == "date";
    let cell: CellFn = Arc::new(move |object: &Value, now: i64| {
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
        label_selector: fields("/labelSelectorPath").map(ScaleSelector::Text),
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
    let conversion = plinth_registry::conversion::ConversionWebhook::of(crd);
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
            let structural = version
                .pointer("/schema/openAPIV3Schema")
                .and_then(|s| plinth_schema::Schema::compile(s).ok())
                .map(Arc::new);
            let mut def = ResourceDef::new(
                group,
                text(version, "/name"),
                kind,
                text(crd, "/spec/names/plural"),
            )
            .name_rule(NameRule::Subdomain)
            .strategy(CustomResources {
                structural: structural.clone(),
                defaults_on_read: version
                    .pointer("/schema/openAPIV3Schema")
                    .is_some_and(declares_defaults),
            });
            def.cel_schema = structural;
            def.singular = singular.clone();
            def.namespaced = text(crd, "/spec/scope") == "Namespaced";
            def.short_names = names("shortNames");
            def.categories = names("categories");
            def.status_subresource = version.pointer("/subresources/status").is_some();
            def.generation = true;
            def.selectable_fields = selectable;
            def.age_column = columns.is_empty();
            def.columns = columns;
            def.delete_returns_object = true;
            def.scale = scale(version);
            def.terminating = terminating;
            def.conversion = conversion.clone();
            def.openapi = version
                .pointer("/schema/openAPIV3Schema")
                .map(|s| Arc::new(published_schema(s)));
            def.deprecation = (version.get("deprecated") == Some(&json!(true))).then(|| {
                match version.get("deprecationWarning").and_then(Value::as_str) {
                    Some(warning) => warning.to_owned(),
                    None => format!("{group}/{} {kind} is deprecated", text(version, "/name")),
                }
            });
            def
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
            json!({"description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
                "allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]}),
        );
    }
    published
}
