//! OpenAPI v3 documents, generated from the resource definitions: the root index at
//! `/openapi/v3` and one document per group-version at `/openapi/v3/<api|apis/g>/<v>`.
//!
//! kubectl reads them to decide whether the server validates fields itself (a PATCH operation
//! tagged with the kind's `x-kubernetes-group-version-kind` that takes a `fieldValidation`
//! query parameter), and `kubectl explain` reads the schemas.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use plinth_registry::resources::{ResourceDef, Resources};
use plinth_registry::schema::Schema;

/// The path of a group-version's document, relative to the server: `api/v1`, `apis/g/v`.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn by_group_version(resources: &Resources) -> BTreeMap<(String, String), Vec<Arc<ResourceDef>>> {
    let mut out: BTreeMap<(String, String), Vec<Arc<ResourceDef>>> = BTreeMap::new();
    for def in resources.all() {
        out.entry((
            def.group_version.group.clone(),
            def.group_version.version.clone(),
        ))
        .or_default()
        .push(def);
    }
    out
}

/// Every OpenAPI document of one state of the served resources.
#[derive(Debug)]
pub struct Documents {
    /// `/openapi/v3`.
    pub root: Value,
    /// `/openapi/v3/<path>` by path.
    pub by_path: BTreeMap<String, Arc<Value>>,
    /// `/openapi/v2`, made when first asked for.
    swagger: std::sync::OnceLock<Value>,
    /// `/openapi/v2` in protobuf, made when first asked for.
    swagger_protobuf: std::sync::OnceLock<Vec<u8>>,
}

impl Documents {
    /// The documents of what `resources` serves, reusing the group-version documents in
    /// `built` whose resources have not changed.
    fn build(resources: &Resources, built: &mut BTreeMap<String, Built>) -> Self {
        let mut paths = Map::new();
        let mut by_path = BTreeMap::new();
        let mut kept = BTreeMap::new();
        for ((group, version), defs) in by_group_version(resources) {
            let path = gv_path(&group, &version);
            let identity: Vec<usize> = defs.iter().map(|d| Arc::as_ptr(d) as usize).collect();
            let entry = match built.remove(&path) {
                Some(entry) if entry.identity == identity => entry,
                _ => {
                    let document = group_version(&group, &version, &defs);
                    let mut hasher = DefaultHasher::new();
                    document.to_string().hash(&mut hasher);
                    Built {
                        identity,
                        document: Arc::new(document),
                        hash: hasher.finish(),
                    }
                }
            };
            paths.insert(path.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={:016X}", entry.hash)}));
            by_path.insert(path.clone(), entry.document.clone());
            kept.insert(path, entry);
        }
        *built = kept;
        Self {
            root: json!({"paths": paths}),
            by_path,
            swagger: std::sync::OnceLock::new(),
            swagger_protobuf: std::sync::OnceLock::new(),
        }
    }

    /// `/openapi/v2` in gnostic's protobuf.
    pub fn swagger_protobuf(&self) -> &[u8] {
        self.swagger_protobuf
            .get_or_init(|| crate::openapi_v2_proto::encode(self.swagger()))
    }

    /// `/openapi/v2`.
    pub fn swagger(&self) -> &Value {
        self.swagger
            .get_or_init(|| swagger(self.by_path.values().map(|d| &**d)))
    }
}

/// The documents, built once per state of the served resources (kube-apiserver also serves
/// them from a cache: building them is the expensive part of a request for them).
#[derive(Debug, Default)]
pub struct Cache {
    current: std::sync::Mutex<Current>,
}

/// The documents of the last state seen, and how each group-version's was made.
#[derive(Debug, Default)]
struct Current {
    generation: Option<u64>,
    documents: Option<Arc<Documents>>,
    built: BTreeMap<String, Built>,
}

/// A group-version's document, and the resource definitions it was made from.
#[derive(Debug)]
struct Built {
    identity: Vec<usize>,
    document: Arc<Value>,
    hash: u64,
}

impl Cache {
    /// The documents for what `resources` serves now.
    pub fn documents(&self, resources: &Resources) -> Arc<Documents> {
        let generation = resources.generation();
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.generation == Some(generation)
            && let Some(documents) = &current.documents
        {
            return documents.clone();
        }
        let documents = Arc::new(Documents::build(resources, &mut current.built));
        current.generation = Some(generation);
        current.documents = Some(documents.clone());
        documents
    }
}

/// `/openapi/v2`: one Swagger 2.0 document for everything served, made from the v3 documents
/// (schemas under `definitions`, references and responses rewritten).
fn swagger<'a>(documents: impl Iterator<Item = &'a Value>) -> Value {
    let mut paths = Map::new();
    let mut definitions = Map::new();
    for document in documents {
        if let Some(schemas) = document
            .pointer("/components/schemas")
            .and_then(Value::as_object)
        {
            for (name, schema) in schemas {
                definitions.insert(name.clone(), v2_root(v2_refs(schema.clone())));
            }
        }
        for (path, item) in document["paths"].as_object().into_iter().flatten() {
            let mut operations = Map::new();
            for (method, op) in item.as_object().into_iter().flatten() {
                let mut op = op.clone();
                let response = op
                    .pointer("/responses/200/content/application~1json/schema")
                    .cloned()
                    .unwrap_or(json!({}));
                op["responses"] = json!({"200": {"description": "OK", "schema": v2_refs(response)}, "401": {"description": "Unauthorized"}});
                let mut parameters: Vec<Value> = op
                    .get("parameters")
                    .and_then(Value::as_array)
                    .map(|ps| ps.iter().map(|p| json!({"name": p["name"], "in": "query", "type": "string", "uniqueItems": true, "description": p["description"]})).collect())
                    .unwrap_or_default();
                if let Some(body) = op
                    .pointer("/requestBody/content/application~1json/schema")
                    .cloned()
                {
                    parameters.push(json!({"name": "body", "in": "body", "required": true, "schema": v2_refs(body)}));
                }
                if let Some(map) = op.as_object_mut() {
                    map.remove("requestBody");
                    map.insert("parameters".into(), Value::Array(parameters));
                    map.insert("consumes".into(), json!(["*/*"]));
                    map.insert(
                        "produces".into(),
                        json!(["application/json", "application/yaml"]),
                    );
                }
                operations.insert(method.clone(), op);
            }
            paths.insert(path.clone(), Value::Object(operations));
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": format!("v{}.{}.0", crate::discovery::KUBE_MAJOR, crate::discovery::KUBE_MINOR)},
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    })
}

/// A definition as Swagger 2.0 can say it (kube's `ToStructuralOpenAPIV2` and the v2 builder):
/// an object that keeps unknown fields at its root is published as `{type: object}` and its
/// kind, as kubectl would otherwise refuse every field it does not list.
fn v2_root(schema: Value) -> Value {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        let mut out = json!({"type": "object"});
        if let Some(gvk) = schema.get("x-kubernetes-group-version-kind") {
            out["x-kubernetes-group-version-kind"] = gvk.clone();
        }
        return out;
    }
    v2_node(schema)
}

/// A schema node without what OpenAPI v2 (or kubectl reading it) cannot take: `allOf`,
/// `oneOf`, `anyOf`, `not`; a nullable node's type and fields; the fields of a node that keeps
/// unknown ones; an array's type once it has no item schema; nullable properties from
/// `required`; a nullable `additionalProperties` schema (`true` instead).
fn v2_node(schema: Value) -> Value {
    let Value::Object(mut map) = schema else {
        return schema;
    };
    // A single reference wrapped in allOf (v3's way to give it a description) is the
    // reference itself in v2.
    if let Some(Value::Array(all)) = map.get("allOf")
        && let [only] = all.as_slice()
        && let Some(reference) = only.get("$ref").cloned()
    {
        return json!({"$ref": reference});
    }
    for key in ["allOf", "oneOf", "anyOf", "not"] {
        map.remove(key);
    }
    if map.remove("nullable") == Some(Value::Bool(true)) {
        for key in ["type", "items", "properties"] {
            map.remove(key);
        }
    }
    if map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        map.remove("items");
        map.remove("properties");
    }
    if map.get("type").and_then(Value::as_str) == Some("array") && !map.contains_key("items") {
        map.remove("type");
    }
    if let Some(Value::Object(properties)) = map.get("properties") {
        let nullable: Vec<String> = properties
            .iter()
            .filter(|(_, p)| p.get("nullable") == Some(&Value::Bool(true)))
            .map(|(name, _)| name.clone())
            .collect();
        if let Some(Value::Array(required)) = map.get_mut("required") {
            required.retain(|r| !r.as_str().is_some_and(|r| nullable.iter().any(|n| n == r)));
            if required.is_empty() {
                map.remove("required");
            }
        }
    }
    if map
        .get("additionalProperties")
        .and_then(|a| a.get("nullable"))
        == Some(&Value::Bool(true))
    {
        map.insert("additionalProperties".into(), Value::Bool(true));
    }
    for key in ["properties", "patternProperties", "definitions"] {
        if let Some(Value::Object(children)) = map.remove(key) {
            let children = children.into_iter().map(|(k, v)| (k, v2_node(v))).collect();
            map.insert(key.into(), Value::Object(children));
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = map.remove(key) {
            map.insert(key.into(), v2_node(child));
        }
    }
    Value::Object(map)
}

/// Rewrites `#/components/schemas/` references to `#/definitions/`.
fn v2_refs(value: Value) -> Value {
    match value {
        Value::String(s) if s.starts_with("#/components/schemas/") => {
            Value::String(s.replacen("#/components/schemas/", "#/definitions/", 1))
        }
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, v2_refs(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(v2_refs).collect()),
        other => other,
    }
}

/// The component name of a kind, as upstream names it.
fn component(def: &ResourceDef) -> String {
    let group = &def.group_version.group;
    let package = match group.as_str() {
        "" => "io.k8s.api.core".to_owned(),
        g if g.ends_with(".k8s.io") => format!("io.k8s.api.{}", g.trim_end_matches(".k8s.io")),
        g => g.split('.').rev().collect::<Vec<_>>().join("."),
    };
    format!("{package}.{}.{}", def.group_version.version, def.kind)
}

fn to_openapi(schema: &Schema) -> Value {
    match schema {
        Schema::Any => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        // kube's `io.k8s.apimachinery.pkg.util.intstr.IntOrString` (kubectl's client-side
        // validation takes numbers for a string).
        Schema::IntOrString => json!({"type": "string", "format": "int-or-string"}),
        // kube's `io.k8s.apimachinery.pkg.api.resource.Quantity`.
        Schema::Quantity => json!({"type": "string"}),
        Schema::String => json!({"type": "string"}),
        Schema::Int => json!({"type": "integer", "format": "int64"}),
        Schema::Bool => json!({"type": "boolean"}),
        Schema::Bytes => json!({"type": "string", "format": "byte"}),
        Schema::Map(inner) => json!({"type": "object", "additionalProperties": to_openapi(inner)}),
        Schema::Array(inner) => json!({"type": "array", "items": to_openapi(inner)}),
        Schema::Object(fields) => {
            let properties: Map<String, Value> = fields
                .iter()
                .map(|(name, s)| ((*name).to_owned(), to_openapi(s)))
                .collect();
            json!({"type": "object", "properties": properties})
        }
    }
}

fn parameter(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn write_parameters() -> Vec<Value> {
    vec![
        parameter(
            "dryRun",
            "When present, indicates that modifications should not be persisted. Valid values: All.",
        ),
        parameter(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        parameter(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn (default), Strict.",
        ),
    ]
}

fn operation(def: &ResourceDef, action: &str, id: &str, response: Value) -> Value {
    let gvk = json!({"group": def.group_version.group, "version": def.group_version.version, "kind": def.kind});
    let mut op = json!({
        "operationId": id,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": response}}}},
    });
    if matches!(action, "post" | "put" | "patch") {
        op["parameters"] = Value::Array(write_parameters());
        let body = if action == "patch" {
            json!({"type": "object"})
        } else {
            json!({"$ref": format!("#/components/schemas/{}", component(def))})
        };
        op["requestBody"] =
            json!({"content": {"application/json": {"schema": body}}, "required": true});
    }
    op
}

/// The name of apimachinery's ObjectMeta component, which custom resources' `metadata`
/// refers to.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// apimachinery's `ObjectMeta`, with the first sentence of each field's documentation.
fn object_meta_schema() -> Value {
    let time = |description: &str| json!({"type": "string", "format": "date-time", "description": description});
    let text = |description: &str| json!({"type": "string", "description": description});
    let map = |description: &str| json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": description});
    json!({
        "type": "object",
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
        "properties": {
            "annotations": map("Annotations is an unstructured key value map stored with a resource that may be set by external tools to store and retrieve arbitrary metadata."),
            "creationTimestamp": time("CreationTimestamp is a timestamp representing the server time when this object was created."),
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64", "description": "Number of seconds allowed for this object to gracefully terminate before it will be removed from the system."},
            "deletionTimestamp": time("DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted."),
            "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "description": "Must be empty before the object is deleted from the registry.", "x-kubernetes-list-type": "set"},
            "generateName": text("GenerateName is an optional prefix, used by the server, to generate a unique name ONLY IF the Name field has not been provided."),
            "generation": {"type": "integer", "format": "int64", "description": "A sequence number representing a specific generation of the desired state."},
            "labels": map("Map of string keys and values that can be used to organize and categorize (scope and select) objects."),
            "managedFields": {"type": "array", "items": {"type": "object"}, "description": "ManagedFields maps workflow-id and version to the set of fields that are managed by that workflow.", "x-kubernetes-list-type": "atomic"},
            "name": text("Name must be unique within a namespace."),
            "namespace": text("Namespace defines the space within which each name must be unique."),
            "ownerReferences": {"type": "array", "items": {"type": "object"}, "description": "List of objects depended by this object.", "x-kubernetes-list-map-keys": ["uid"], "x-kubernetes-list-type": "map", "x-kubernetes-patch-merge-key": "uid", "x-kubernetes-patch-strategy": "merge"},
            "resourceVersion": text("An opaque value that represents the internal version of this object that can be used by clients to determine when objects have changed."),
            "selfLink": text("Deprecated: selfLink is a legacy read-only field that is no longer populated by the system."),
            "uid": text("UID is the unique in time and space value for this object."),
        },
    })
}

fn group_version(group: &str, version: &str, defs: &[Arc<ResourceDef>]) -> Value {
    let prefix = format!("/{}", gv_path(group, version));
    let mut paths = Map::new();
    let mut schemas = Map::new();
    if defs.iter().any(|d| d.openapi.is_some()) {
        schemas.insert(OBJECT_META.to_owned(), object_meta_schema());
    }
    for def in defs {
        let name = component(def);
        let reference = json!({"$ref": format!("#/components/schemas/{name}")});
        let mut schema = match &def.openapi {
            Some(published) => (**published).clone(),
            None => to_openapi(&def.schema),
        };
        schema["x-kubernetes-group-version-kind"] = json!([{"group": def.group_version.group, "version": def.group_version.version, "kind": def.kind}]);
        schemas.insert(name.clone(), schema);
        let list_name = format!("{name}List");
        schemas.insert(
            list_name.clone(),
            json!({"type": "object", "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"type": "object"}, "items": {"type": "array", "items": reference}},
                "x-kubernetes-group-version-kind": [{"group": def.group_version.group, "version": def.group_version.version, "kind": def.list_kind()}]}),
        );
        let list_ref = json!({"$ref": format!("#/components/schemas/{list_name}")});
        let base = if def.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", def.plural)
        } else {
            format!("{prefix}/{}", def.plural)
        };
        let id = format!("{}{}", def.kind, def.group_version.version);
        paths.insert(
            base.clone(),
            json!({
                "get": operation(def, "list", &format!("list{id}"), list_ref.clone()),
                "post": operation(def, "post", &format!("create{id}"), reference.clone()),
                "delete": operation(def, "deletecollection", &format!("deleteCollection{id}"), json!({"type": "object"})),
            }),
        );
        paths.insert(
            format!("{base}/{{name}}"),
            json!({
                "get": operation(def, "get", &format!("read{id}"), reference.clone()),
                "put": operation(def, "put", &format!("replace{id}"), reference.clone()),
                "patch": operation(def, "patch", &format!("patch{id}"), reference.clone()),
                "delete": operation(def, "delete", &format!("delete{id}"), json!({"type": "object"})),
            }),
        );
        if def.namespaced {
            paths.insert(format!("{prefix}/{}", def.plural), json!({"get": operation(def, "list", &format!("list{id}ForAllNamespaces"), list_ref)}));
        }
        if def.status_subresource {
            paths.insert(
                format!("{base}/{{name}}/status"),
                json!({
                    "get": operation(def, "get", &format!("read{id}Status"), reference.clone()),
                    "put": operation(def, "put", &format!("replace{id}Status"), reference.clone()),
                    "patch": operation(def, "patch", &format!("patch{id}Status"), reference),
                }),
            );
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v{}.{}.0", crate::discovery::KUBE_MAJOR, crate::discovery::KUBE_MINOR)},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_definitions_leave_out_what_swagger_cannot_say() {
        let gvk = json!([{"group": "example.com", "version": "v1", "kind": "Foo"}]);
        let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"spec": {"type": "object"}}, "x-kubernetes-group-version-kind": gvk});
        assert_eq!(
            v2_root(open),
            json!({"type": "object", "x-kubernetes-group-version-kind": gvk})
        );
        let shaped = json!({"type": "object", "required": ["a"], "properties": {
            "a": {"type": "string", "nullable": true},
            "b": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                  "properties": {"c": {"type": "string"}}},
            "d": {"type": "array", "nullable": true, "items": {"type": "string"}},
            "e": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true},
            "f": {"type": "object", "additionalProperties": {"type": "string", "nullable": true}}}});
        assert_eq!(
            v2_root(shaped),
            json!({"type": "object", "properties": {
                "a": {},
                "b": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "d": {},
                "e": {"x-kubernetes-int-or-string": true},
                "f": {"type": "object", "additionalProperties": true}}})
        );
    }

    #[test]
    fn every_group_version_has_a_document_with_patch_and_field_validation() {
        let resources = Resources::with(plinth_types::builtin());
        let cache = Cache::default();
        let docs = cache.documents(&resources);
        assert!(
            Arc::ptr_eq(&docs, &cache.documents(&resources)),
            "built once"
        );
        let paths = docs.root["paths"].as_object().unwrap();
        assert!(paths.contains_key("api/v1") && paths.contains_key("apis/coordination.k8s.io/v1"));
        let core = &docs.by_path["api/v1"];
        let patch = &core["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "ConfigMap"
        );
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
        );
        assert_eq!(
            core["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"]["properties"]["data"]["type"],
            "object"
        );
        assert!(!docs.by_path.contains_key("apis/nothing/v1"));
        let v2 = docs.swagger();
        assert_eq!(v2["swagger"], "2.0");
        assert_eq!(
            v2["definitions"]["io.k8s.api.core.v1.ConfigMap"]["x-kubernetes-group-version-kind"][0]
                ["kind"],
            "ConfigMap"
        );
        let post = &v2["paths"]["/api/v1/namespaces/{namespace}/configmaps"]["post"];
        assert_eq!(
            post["responses"]["200"]["schema"]["$ref"],
            "#/definitions/io.k8s.api.core.v1.ConfigMap"
        );
        assert!(
            post["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["in"] == "body")
        );
        // A change to what is served makes new documents.
        resources.remove("coordination.k8s.io", "v1", "leases");
        let after = cache.documents(&resources);
        assert!(!Arc::ptr_eq(&docs, &after));
        assert!(!after.by_path.contains_key("apis/coordination.k8s.io/v1"));
    }
}
