//! `/openapi/v2` in protobuf, which client-go asks for first
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`): the Swagger document as
//! gnostic's `openapi.v2.Document` (`openapiv2/OpenAPIv2.proto`). The messages below declare the
//! fields of that proto that a Swagger document of this server uses, with the same numbers;
//! values without a schema of their own (`default`, `enum`, vendor extensions) are `Any` holding
//! their YAML, as gnostic writes them.

use prost::Message;
use serde_json::{Map, Value};

/// The media types of the protobuf form (the newer one, and the one client-go sends).
pub const MEDIA_TYPES: [&str; 2] = [
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
];

/// `openapi.v2.Any`: a value as YAML.
#[derive(Clone, PartialEq, Message)]
pub struct Any {
    /// `yaml`.
    #[prost(string, tag = "2")]
    pub yaml: String,
}

/// `openapi.v2.NamedAny`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedAny {
    /// The key.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The value.
    #[prost(message, optional, tag = "2")]
    pub value: Option<Any>,
}

/// `openapi.v2.Document`.
#[derive(Clone, PartialEq, Message)]
pub struct Document {
    /// `swagger`.
    #[prost(string, tag = "1")]
    pub swagger: String,
    /// `info`.
    #[prost(message, optional, tag = "2")]
    pub info: Option<Info>,
    /// `paths`.
    #[prost(message, optional, tag = "8")]
    pub paths: Option<Paths>,
    /// `definitions`.
    #[prost(message, optional, tag = "9")]
    pub definitions: Option<Definitions>,
    /// `security`.
    #[prost(message, repeated, tag = "12")]
    pub security: Vec<SecurityRequirement>,
    /// `securityDefinitions`.
    #[prost(message, optional, tag = "13")]
    pub security_definitions: Option<SecurityDefinitions>,
}

/// `openapi.v2.Info`.
#[derive(Clone, PartialEq, Message)]
pub struct Info {
    /// `title`.
    #[prost(string, tag = "1")]
    pub title: String,
    /// `version`.
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `openapi.v2.Paths`.
#[derive(Clone, PartialEq, Message)]
pub struct Paths {
    /// Each path.
    #[prost(message, repeated, tag = "2")]
    pub path: Vec<NamedPathItem>,
}

/// `openapi.v2.NamedPathItem`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedPathItem {
    /// The path.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its operations.
    #[prost(message, optional, tag = "2")]
    pub value: Option<PathItem>,
}

/// `openapi.v2.PathItem`.
#[derive(Clone, PartialEq, Message)]
pub struct PathItem {
    /// `get`.
    #[prost(message, optional, tag = "2")]
    pub get: Option<Operation>,
    /// `put`.
    #[prost(message, optional, tag = "3")]
    pub put: Option<Operation>,
    /// `post`.
    #[prost(message, optional, tag = "4")]
    pub post: Option<Operation>,
    /// `delete`.
    #[prost(message, optional, tag = "5")]
    pub delete: Option<Operation>,
    /// `patch`.
    #[prost(message, optional, tag = "8")]
    pub patch: Option<Operation>,
}

/// `openapi.v2.Operation`.
#[derive(Clone, PartialEq, Message)]
pub struct Operation {
    /// `tags`.
    #[prost(string, repeated, tag = "1")]
    pub tags: Vec<String>,
    /// `description`.
    #[prost(string, tag = "3")]
    pub description: String,
    /// `operationId`.
    #[prost(string, tag = "5")]
    pub operation_id: String,
    /// `produces`.
    #[prost(string, repeated, tag = "6")]
    pub produces: Vec<String>,
    /// `consumes`.
    #[prost(string, repeated, tag = "7")]
    pub consumes: Vec<String>,
    /// `parameters`.
    #[prost(message, repeated, tag = "8")]
    pub parameters: Vec<ParametersItem>,
    /// `responses`.
    #[prost(message, optional, tag = "9")]
    pub responses: Option<Responses>,
    /// `x-*`.
    #[prost(message, repeated, tag = "13")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.ParametersItem` (only its `parameter` case).
#[derive(Clone, PartialEq, Message)]
pub struct ParametersItem {
    /// `parameter`.
    #[prost(message, optional, tag = "1")]
    pub parameter: Option<Parameter>,
}

/// `openapi.v2.Parameter`.
#[derive(Clone, PartialEq, Message)]
pub struct Parameter {
    /// `body_parameter`.
    #[prost(message, optional, tag = "1")]
    pub body_parameter: Option<BodyParameter>,
    /// `non_body_parameter`.
    #[prost(message, optional, tag = "2")]
    pub non_body_parameter: Option<NonBodyParameter>,
}

/// `openapi.v2.BodyParameter`.
#[derive(Clone, PartialEq, Message)]
pub struct BodyParameter {
    /// `description`.
    #[prost(string, tag = "1")]
    pub description: String,
    /// `name`.
    #[prost(string, tag = "2")]
    pub name: String,
    /// `in`.
    #[prost(string, tag = "3")]
    pub r#in: String,
    /// `required`.
    #[prost(bool, tag = "4")]
    pub required: bool,
    /// `schema`.
    #[prost(message, optional, tag = "5")]
    pub schema: Option<Schema>,
}

/// `openapi.v2.NonBodyParameter` (only its query case).
#[derive(Clone, PartialEq, Message)]
pub struct NonBodyParameter {
    /// `query_parameter_sub_schema`.
    #[prost(message, optional, tag = "3")]
    pub query_parameter_sub_schema: Option<QueryParameterSubSchema>,
}

/// `openapi.v2.QueryParameterSubSchema`.
#[derive(Clone, PartialEq, Message)]
pub struct QueryParameterSubSchema {
    /// `required`.
    #[prost(bool, tag = "1")]
    pub required: bool,
    /// `in`.
    #[prost(string, tag = "2")]
    pub r#in: String,
    /// `description`.
    #[prost(string, tag = "3")]
    pub description: String,
    /// `name`.
    #[prost(string, tag = "4")]
    pub name: String,
    /// `type`.
    #[prost(string, tag = "6")]
    pub r#type: String,
    /// `uniqueItems`.
    #[prost(bool, tag = "20")]
    pub unique_items: bool,
}

/// `openapi.v2.Responses`.
#[derive(Clone, PartialEq, Message)]
pub struct Responses {
    /// By status code.
    #[prost(message, repeated, tag = "1")]
    pub response_code: Vec<NamedResponseValue>,
}

/// `openapi.v2.NamedResponseValue`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedResponseValue {
    /// The status code.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The response.
    #[prost(message, optional, tag = "2")]
    pub value: Option<ResponseValue>,
}

/// `openapi.v2.ResponseValue` (only its `response` case).
#[derive(Clone, PartialEq, Message)]
pub struct ResponseValue {
    /// `response`.
    #[prost(message, optional, tag = "1")]
    pub response: Option<Response>,
}

/// `openapi.v2.Response`.
#[derive(Clone, PartialEq, Message)]
pub struct Response {
    /// `description`.
    #[prost(string, tag = "1")]
    pub description: String,
    /// `schema`.
    #[prost(message, optional, tag = "2")]
    pub schema: Option<SchemaItem>,
}

/// `openapi.v2.SchemaItem` (only its `schema` case).
#[derive(Clone, PartialEq, Message)]
pub struct SchemaItem {
    /// `schema`.
    #[prost(message, optional, tag = "1")]
    pub schema: Option<Schema>,
}

/// `openapi.v2.Schema`.
#[derive(Clone, PartialEq, Message)]
pub struct Schema {
    /// `$ref`.
    #[prost(string, tag = "1")]
    pub r#ref: String,
    /// `format`.
    #[prost(string, tag = "2")]
    pub format: String,
    /// `title`.
    #[prost(string, tag = "3")]
    pub title: String,
    /// `description`.
    #[prost(string, tag = "4")]
    pub description: String,
    /// `default`.
    #[prost(message, optional, tag = "5")]
    pub default: Option<Any>,
    /// `multipleOf`.
    #[prost(double, tag = "6")]
    pub multiple_of: f64,
    /// `maximum`.
    #[prost(double, tag = "7")]
    pub maximum: f64,
    /// `exclusiveMaximum`.
    #[prost(bool, tag = "8")]
    pub exclusive_maximum: bool,
    /// `minimum`.
    #[prost(double, tag = "9")]
    pub minimum: f64,
    /// `exclusiveMinimum`.
    #[prost(bool, tag = "10")]
    pub exclusive_minimum: bool,
    /// `maxLength`.
    #[prost(int64, tag = "11")]
    pub max_length: i64,
    /// `minLength`.
    #[prost(int64, tag = "12")]
    pub min_length: i64,
    /// `pattern`.
    #[prost(string, tag = "13")]
    pub pattern: String,
    /// `maxItems`.
    #[prost(int64, tag = "14")]
    pub max_items: i64,
    /// `minItems`.
    #[prost(int64, tag = "15")]
    pub min_items: i64,
    /// `uniqueItems`.
    #[prost(bool, tag = "16")]
    pub unique_items: bool,
    /// `maxProperties`.
    #[prost(int64, tag = "17")]
    pub max_properties: i64,
    /// `minProperties`.
    #[prost(int64, tag = "18")]
    pub min_properties: i64,
    /// `required`.
    #[prost(string, repeated, tag = "19")]
    pub required: Vec<String>,
    /// `enum`.
    #[prost(message, repeated, tag = "20")]
    pub r#enum: Vec<Any>,
    /// `additionalProperties`.
    #[prost(message, optional, boxed, tag = "21")]
    pub additional_properties: Option<Box<AdditionalPropertiesItem>>,
    /// `type`.
    #[prost(message, optional, tag = "22")]
    pub r#type: Option<TypeItem>,
    /// `items`.
    #[prost(message, optional, tag = "23")]
    pub items: Option<ItemsItem>,
    /// `allOf`.
    #[prost(message, repeated, tag = "24")]
    pub all_of: Vec<Schema>,
    /// `properties`.
    #[prost(message, optional, tag = "25")]
    pub properties: Option<Properties>,
    /// `x-*`.
    #[prost(message, repeated, tag = "31")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.AdditionalPropertiesItem`.
#[derive(Clone, PartialEq, Message)]
pub struct AdditionalPropertiesItem {
    /// `schema`.
    #[prost(message, optional, tag = "1")]
    pub schema: Option<Schema>,
    /// `boolean`.
    #[prost(bool, optional, tag = "2")]
    pub boolean: Option<bool>,
}

/// `openapi.v2.TypeItem`.
#[derive(Clone, PartialEq, Message)]
pub struct TypeItem {
    /// The types.
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

/// `openapi.v2.ItemsItem`.
#[derive(Clone, PartialEq, Message)]
pub struct ItemsItem {
    /// The item schemas.
    #[prost(message, repeated, tag = "1")]
    pub schema: Vec<Schema>,
}

/// `openapi.v2.Properties` and `openapi.v2.Definitions` (the same shape).
#[derive(Clone, PartialEq, Message)]
pub struct Properties {
    /// Each named schema.
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

/// `openapi.v2.Definitions`.
pub type Definitions = Properties;

/// `openapi.v2.NamedSchema`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedSchema {
    /// The name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The schema.
    #[prost(message, optional, tag = "2")]
    pub value: Option<Schema>,
}

/// `openapi.v2.SecurityRequirement`.
#[derive(Clone, PartialEq, Message)]
pub struct SecurityRequirement {
    /// Each scheme and its scopes.
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedStringArray>,
}

/// `openapi.v2.NamedStringArray`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedStringArray {
    /// The name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The strings.
    #[prost(message, optional, tag = "2")]
    pub value: Option<StringArray>,
}

/// `openapi.v2.StringArray`.
#[derive(Clone, PartialEq, Message)]
pub struct StringArray {
    /// The strings.
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

/// `openapi.v2.SecurityDefinitions`.
#[derive(Clone, PartialEq, Message)]
pub struct SecurityDefinitions {
    /// Each named scheme.
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSecurityDefinitionsItem>,
}

/// `openapi.v2.NamedSecurityDefinitionsItem`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedSecurityDefinitionsItem {
    /// The name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The scheme.
    #[prost(message, optional, tag = "2")]
    pub value: Option<SecurityDefinitionsItem>,
}

/// `openapi.v2.SecurityDefinitionsItem` (only its API-key case).
#[derive(Clone, PartialEq, Message)]
pub struct SecurityDefinitionsItem {
    /// `api_key_security`.
    #[prost(message, optional, tag = "2")]
    pub api_key_security: Option<ApiKeySecurity>,
}

/// `openapi.v2.ApiKeySecurity`.
#[derive(Clone, PartialEq, Message)]
pub struct ApiKeySecurity {
    /// `type`.
    #[prost(string, tag = "1")]
    pub r#type: String,
    /// `name`.
    #[prost(string, tag = "2")]
    pub name: String,
    /// `in`.
    #[prost(string, tag = "3")]
    pub r#in: String,
}

fn text(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

fn strings(value: &Value, key: &str) -> Vec<String> {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A value as gnostic keeps what it has no schema for: its YAML.
fn any(value: &Value) -> Any {
    Any {
        yaml: serde_norway::to_string(value).unwrap_or_default(),
    }
}

/// The `x-*` entries of an object.
fn extensions(value: &Value) -> Vec<NamedAny> {
    value
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, v)| NamedAny {
            name: k.clone(),
            value: Some(any(v)),
        })
        .collect()
}

fn named_schemas(map: Option<&Map<String, Value>>) -> Vec<NamedSchema> {
    map.into_iter()
        .flatten()
        .map(|(name, s)| NamedSchema {
            name: name.clone(),
            value: Some(schema(s)),
        })
        .collect()
}

/// A Swagger schema.
fn schema(value: &Value) -> Schema {
    let number = |key: &str| value.get(key).and_then(Value::as_f64).unwrap_or(0.0);
    let integer = |key: &str| value.get(key).and_then(Value::as_i64).unwrap_or(0);
    let flag = |key: &str| value.get(key).and_then(Value::as_bool).unwrap_or(false);
    let types = match value.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    Schema {
        r#ref: text(value, "$ref"),
        format: text(value, "format"),
        title: text(value, "title"),
        description: text(value, "description"),
        default: value.get("default").map(any),
        multiple_of: number("multipleOf"),
        maximum: number("maximum"),
        exclusive_maximum: flag("exclusiveMaximum"),
        minimum: number("minimum"),
        exclusive_minimum: flag("exclusiveMinimum"),
        max_length: integer("maxLength"),
        min_length: integer("minLength"),
        pattern: text(value, "pattern"),
        max_items: integer("maxItems"),
        min_items: integer("minItems"),
        unique_items: flag("uniqueItems"),
        max_properties: integer("maxProperties"),
        min_properties: integer("minProperties"),
        required: strings(value, "required"),
        r#enum: value
            .get("enum")
            .and_then(Value::as_array)
            .map(|e| e.iter().map(any).collect())
            .unwrap_or_default(),
        additional_properties: match value.get("additionalProperties") {
            Some(Value::Bool(b)) => Some(Box::new(AdditionalPropertiesItem {
                schema: None,
                boolean: Some(*b),
            })),
            Some(s @ Value::Object(_)) => Some(Box::new(AdditionalPropertiesItem {
                schema: Some(schema(s)),
                boolean: None,
            })),
            _ => None,
        },
        r#type: (!types.is_empty()).then_some(TypeItem { value: types }),
        items: match value.get("items") {
            Some(Value::Array(items)) => Some(ItemsItem {
                schema: items.iter().map(schema).collect(),
            }),
            Some(item @ Value::Object(_)) => Some(ItemsItem {
                schema: vec![schema(item)],
            }),
            _ => None,
        },
        all_of: value
            .get("allOf")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(schema).collect())
            .unwrap_or_default(),
        properties: value
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| Properties {
                additional_properties: named_schemas(Some(p)),
            }),
        vendor_extension: extensions(value),
    }
}

fn parameter(value: &Value) -> ParametersItem {
    let parameter = if value.get("in").and_then(Value::as_str) == Some("body") {
        Parameter {
            body_parameter: Some(BodyParameter {
                description: text(value, "description"),
                name: text(value, "name"),
                r#in: "body".into(),
                required: value
                    .get("required")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                schema: value.get("schema").map(schema),
            }),
            non_body_parameter: None,
        }
    } else {
        Parameter {
            body_parameter: None,
            non_body_parameter: Some(NonBodyParameter {
                query_parameter_sub_schema: Some(QueryParameterSubSchema {
                    required: value
                        .get("required")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    r#in: text(value, "in"),
                    description: text(value, "description"),
                    name: text(value, "name"),
                    r#type: text(value, "type"),
                    unique_items: value
                        .get("uniqueItems")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                }),
            }),
        }
    };
    ParametersItem {
        parameter: Some(parameter),
    }
}

fn operation(value: &Value) -> Operation {
    Operation {
        tags: strings(value, "tags"),
        description: text(value, "description"),
        operation_id: text(value, "operationId"),
        produces: strings(value, "produces"),
        consumes: strings(value, "consumes"),
        parameters: value
            .get("parameters")
            .and_then(Value::as_array)
            .map(|ps| ps.iter().map(parameter).collect())
            .unwrap_or_default(),
        responses: value
            .get("responses")
            .and_then(Value::as_object)
            .map(|codes| Responses {
                response_code: codes
                    .iter()
                    .map(|(code, r)| NamedResponseValue {
                        name: code.clone(),
                        value: Some(ResponseValue {
                            response: Some(Response {
                                description: text(r, "description"),
                                schema: r.get("schema").map(|s| SchemaItem {
                                    schema: Some(schema(s)),
                                }),
                            }),
                        }),
                    })
                    .collect(),
            }),
        vendor_extension: extensions(value),
    }
}

/// The Swagger document `swagger` (as [`crate::openapi`] makes it) in gnostic's protobuf.
pub fn document(swagger: &Value) -> Document {
    let paths = swagger
        .get("paths")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(path, item)| {
            let op = |method: &str| item.get(method).map(operation);
            NamedPathItem {
                name: path.clone(),
                value: Some(PathItem {
                    get: op("get"),
                    put: op("put"),
                    post: op("post"),
                    delete: op("delete"),
                    patch: op("patch"),
                }),
            }
        })
        .collect();
    let security = swagger
        .get("security")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|requirement| SecurityRequirement {
            additional_properties: requirement
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, scopes)| NamedStringArray {
                    name: name.clone(),
                    value: Some(StringArray {
                        value: scopes
                            .as_array()
                            .map(|s| {
                                s.iter()
                                    .filter_map(|v| v.as_str().map(str::to_owned))
                                    .collect()
                            })
                            .unwrap_or_default(),
                    }),
                })
                .collect(),
        })
        .collect();
    let security_definitions = swagger
        .get("securityDefinitions")
        .and_then(Value::as_object)
        .map(|defs| SecurityDefinitions {
            additional_properties: defs
                .iter()
                .map(|(name, def)| NamedSecurityDefinitionsItem {
                    name: name.clone(),
                    value: Some(SecurityDefinitionsItem {
                        api_key_security: Some(ApiKeySecurity {
                            r#type: text(def, "type"),
                            name: text(def, "name"),
                            r#in: text(def, "in"),
                        }),
                    }),
                })
                .collect(),
        });
    Document {
        swagger: text(swagger, "swagger"),
        info: swagger.get("info").map(|info| Info {
            title: text(info, "title"),
            version: text(info, "version"),
        }),
        paths: Some(Paths { path: paths }),
        definitions: Some(Properties {
            additional_properties: named_schemas(
                swagger.get("definitions").and_then(Value::as_object),
            ),
        }),
        security,
        security_definitions,
    }
}

/// The protobuf bytes of `swagger`.
pub fn encode(swagger: &Value) -> Vec<u8> {
    document(swagger).encode_to_vec()
}

#[cfg(test)]
mod tests;
