//! HTTP: the URL space of kube-apiserver, authentication, content negotiation, and the one
//! place where an [`ApiError`] becomes a `Status` response.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use plinth_core::selector::{FieldSelector, LabelSelector};
use plinth_core::{ApiError, StatusReason};
use serde_json::{Value, json};

use crate::discovery;
use crate::registry::{
    DeleteOptions, FieldValidation, ListOptions, MAX_BODY_BYTES, Propagation, Registry,
    WriteOptions, default_watch_timeout,
};
use crate::resources::ResourceDef;
use crate::table::{self, IncludeObject};

/// What every request handler shares.
pub(crate) struct AppState {
    /// The registry.
    pub(crate) registry: Registry,
    /// The admin bearer token.
    pub(crate) token: String,
    /// `host:port` clients reach the server at.
    pub(crate) server_address: String,
    /// Becomes `true` when the server is shutting down; open watches end.
    pub(crate) shutdown: tokio::sync::watch::Receiver<bool>,
    /// Request metrics.
    pub(crate) metrics: crate::metrics::Metrics,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("server_address", &self.server_address)
            .finish_non_exhaustive()
    }
}

/// The router: every request goes through [`dispatch`].
pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new().fallback(dispatch).with_state(state)
}

/// An [`ApiError`] as a response: the one place errors become `Status` bodies.
struct ErrorResponse(ApiError);

impl IntoResponse for ErrorResponse {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.0.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if code.is_server_error() {
            tracing::error!(code = code.as_u16(), message = %self.0.message, "request failed");
        }
        let body = serde_json::to_vec(&self.0.to_status()).unwrap_or_default();
        let mut response =
            (code, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        if let Some(after) = self.0.details.retry_after_seconds
            && let Ok(value) = HeaderValue::from_str(&after.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}

/// How a response body is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Json,
    Yaml,
    Table,
    /// `meta.k8s.io` PartialObjectMetadata (metadata-only clients and informers).
    Metadata,
    /// `apidiscovery.k8s.io` aggregated discovery, v2 or v2beta1.
    Aggregated(&'static str),
}

/// Picks the response format from `Accept`, as kube-apiserver negotiates it.
fn negotiate(headers: &HeaderMap) -> Result<Format, ApiError> {
    let Some(accept) = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .filter(|a| !a.trim().is_empty())
    else {
        return Ok(Format::Json);
    };
    for clause in accept.split(',') {
        let mut parts = clause.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let params: Vec<(String, String)> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| {
                (
                    k.trim().to_ascii_lowercase(),
                    v.trim().trim_matches('"').to_owned(),
                )
            })
            .collect();
        let param = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        match media.as_str() {
            "application/json" | "*/*" | "application/*" => {
                match (param("as"), param("g"), param("v")) {
                    (Some("Table"), Some("meta.k8s.io"), Some("v1" | "v1beta1")) => {
                        return Ok(Format::Table);
                    }
                    (
                        Some("PartialObjectMetadata" | "PartialObjectMetadataList"),
                        Some("meta.k8s.io"),
                        Some("v1" | "v1beta1"),
                    ) => {
                        return Ok(Format::Metadata);
                    }
                    (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2")) => {
                        return Ok(Format::Aggregated("apidiscovery.k8s.io/v2"));
                    }
                    (
                        Some("APIGroupDiscoveryList"),
                        Some("apidiscovery.k8s.io"),
                        Some("v2beta1"),
                    ) => {
                        return Ok(Format::Aggregated("apidiscovery.k8s.io/v2beta1"));
                    }
                    (Some(_), _, _) => continue,
                    _ => return Ok(Format::Json),
                }
            }
            "application/yaml" => return Ok(Format::Yaml),
            _ => continue,
        }
    }
    Err(ApiError::new(
        StatusReason::NotAcceptable,
        "only the following media types are accepted: application/json, application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io",
    ))
}

fn respond(code: StatusCode, body: &Value, format: Format, warnings: &[String]) -> Response {
    let (content_type, bytes) = match format {
        Format::Yaml => (
            "application/yaml".to_owned(),
            serde_norway::to_string(body)
                .map(String::into_bytes)
                .unwrap_or_default(),
        ),
        Format::Aggregated(version) => (
            format!(
                "application/json;g=apidiscovery.k8s.io;v={};as=APIGroupDiscoveryList",
                version.trim_start_matches("apidiscovery.k8s.io/")
            ),
            serde_json::to_vec(body).unwrap_or_default(),
        ),
        Format::Json | Format::Table | Format::Metadata => (
            "application/json".to_owned(),
            serde_json::to_vec(body).unwrap_or_default(),
        ),
    };
    let mut response = (code, bytes).into_response();
    if let Ok(value) = HeaderValue::from_str(&content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    for warning in warnings {
        let text = format!(
            "299 - {}",
            serde_json::to_string(warning).unwrap_or_default()
        );
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

/// The `PartialObjectMetadata` view of an object.
fn partial(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// The parsed query string.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(uri: &Uri) -> Self {
        Self(
            form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
                .into_owned()
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some("true" | "1"))
    }

    fn list_options(&self) -> Result<ListOptions, ApiError> {
        let labels =
            LabelSelector::parse(self.get("labelSelector").unwrap_or("")).map_err(|e| {
                ApiError::bad_request(format!(
                    "unable to parse requirement: {}",
                    e.0.trim_start_matches("unable to parse requirement: ")
                ))
            })?;
        let fields = FieldSelector::parse(self.get("fieldSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.0))?;
        let limit = match self.get("limit") {
            None | Some("") => 0,
            Some(l) => l
                .parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit: {l}")))?
                .max(0) as usize,
        };
        Ok(ListOptions {
            labels,
            fields,
            limit,
            continue_token: self
                .get("continue")
                .filter(|c| !c.is_empty())
                .map(str::to_owned),
            resource_version: self.get("resourceVersion").map(str::to_owned),
            resource_version_match: self
                .get("resourceVersionMatch")
                .filter(|m| !m.is_empty())
                .map(str::to_owned),
        })
    }

    fn write_options(&self) -> Result<WriteOptions, ApiError> {
        let field_manager = self.get("fieldManager").map(str::to_owned);
        if let Some(manager) = &field_manager
            && manager.chars().count() > 128
        {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![plinth_core::Cause::invalid(
                    "fieldManager",
                    &json!(manager),
                    "must be less than 128 characters",
                )],
            ));
        }
        let force = match self.get("force") {
            None => false,
            Some(v) => v
                .parse::<bool>()
                .map_err(|_| ApiError::bad_request(format!("invalid force: {v}")))?,
        };
        Ok(WriteOptions {
            dry_run: self.dry_run()?,
            field_validation: FieldValidation::parse(self.get("fieldValidation"))?,
            field_manager,
            force,
            ..WriteOptions::default()
        })
    }

    fn dry_run(&self) -> Result<bool, ApiError> {
        let values: Vec<&str> = self
            .0
            .iter()
            .filter(|(k, _)| k == "dryRun")
            .map(|(_, v)| v.as_str())
            .collect();
        match values.as_slice() {
            [] => Ok(false),
            ["All"] => Ok(true),
            other => Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: \"{}\": supported values: \"All\"",
                other.iter().find(|v| **v != "All").unwrap_or(&"")
            ))),
        }
    }
}

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    Version,
    Health,
    Metrics,
    Api,
    Apis,
    Group(String),
    ResourceList {
        group: String,
        version: String,
    },
    OpenApiV3(Option<String>),
    OpenApiV2,
    Resource {
        group: String,
        version: String,
        namespace: Option<String>,
        resource: String,
        name: Option<String>,
        subresource: Option<String>,
    },
    NotFound,
}

fn parse_target(path: &str) -> Target {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Target::Version,
        ["metrics"] => return Target::Metrics,
        ["healthz" | "livez" | "readyz", ..] => return Target::Health,
        ["api"] => return Target::Api,
        ["openapi", "v3"] => return Target::OpenApiV3(None),
        ["openapi", "v3", rest @ ..] => return Target::OpenApiV3(Some(rest.join("/"))),
        ["openapi", "v2"] => return Target::OpenApiV2,
        ["apis"] => return Target::Apis,
        ["apis", group] => return Target::Group((*group).to_owned()),
        ["api", version] => {
            return Target::ResourceList {
                group: String::new(),
                version: (*version).to_owned(),
            };
        }
        ["apis", group, version] => {
            return Target::ResourceList {
                group: (*group).to_owned(),
                version: (*version).to_owned(),
            };
        }
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Target::NotFound,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..]
            if !tail.is_empty() && !matches!(tail[0], "status" | "finalize") =>
        {
            (Some((*ns).to_owned()), tail)
        }
        other => (None, other),
    };
    let resource = |resource: &str, name: Option<&str>, sub: Option<&str>| Target::Resource {
        group: group.to_owned(),
        version: version.to_owned(),
        namespace: namespace.clone(),
        resource: resource.to_owned(),
        name: name.map(str::to_owned),
        subresource: sub.map(str::to_owned),
    };
    match rest {
        [res] => resource(res, None, None),
        [res, name] => resource(res, Some(name), None),
        [res, name, sub] => resource(res, Some(name), Some(sub)),
        _ => Target::NotFound,
    }
}

fn authorized(state: &AppState, headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|token| constant_time_eq(token.trim().as_bytes(), state.token.as_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Every request.
async fn dispatch(
    State(state): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = std::time::Instant::now();
    let target = parse_target(uri.path());
    let labels = request_labels(&target, &method, &uri, &headers);
    // The body is read (or, past the limit, drained) before anything else, so that no answer
    // leaves a request half-read.
    let result = match read_body(body).await {
        Ok(bytes) => handle(&state, &method, &uri, &headers, bytes, target).await,
        Err(error) => Err(error),
    };
    let response = match result {
        Ok(response) => response,
        Err(error) => ErrorResponse(error).into_response(),
    };
    state
        .metrics
        .record(labels, response.status().as_u16(), started.elapsed());
    tracing::debug!(method = %method, path = %uri.path(), code = response.status().as_u16(), elapsed_ms = started.elapsed().as_millis() as u64, "request");
    response
}

/// The metric labels of a request, as kube-apiserver's RequestInfo derives them.
fn request_labels(
    target: &Target,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> crate::metrics::RequestLabels {
    let mut labels = crate::metrics::RequestLabels {
        verb: method.as_str().to_owned(),
        ..Default::default()
    };
    if let Target::Resource {
        group,
        version,
        namespace,
        resource,
        name,
        subresource,
    } = target
    {
        let watch = Query::parse(uri).flag("watch");
        labels.verb = match (method.as_str(), name.is_some()) {
            ("GET", false) if watch => "WATCH",
            ("GET", false) => "LIST",
            ("DELETE", false) => "DELETECOLLECTION",
            ("PATCH", _) if content_type(headers) == "application/apply-patch+yaml" => "APPLY",
            (other, _) => other,
        }
        .to_owned();
        labels.group = group.clone();
        labels.version = version.clone();
        labels.resource = resource.clone();
        labels.subresource = subresource.clone().unwrap_or_default();
        labels.scope = if name.is_some() {
            "resource"
        } else if namespace.is_some() {
            "namespace"
        } else {
            "cluster"
        }
        .to_owned();
    }
    labels
}

/// How much of an oversized body is read and discarded before answering 413, so that the
/// request completes normally (an HTTP/2 stream reset mid-upload makes clients drop the answer).
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;

async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    let mut stream = body.into_data_stream();
    let mut buffer = bytes::BytesMut::new();
    let mut total = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::bad_request(format!("unable to read the request body: {e}")))?;
        total += chunk.len();
        if total <= MAX_BODY_BYTES {
            buffer.extend_from_slice(&chunk);
        } else if total > DRAIN_LIMIT {
            break;
        }
    }
    if total > MAX_BODY_BYTES {
        return Err(ApiError::too_large(MAX_BODY_BYTES));
    }
    Ok(buffer.freeze())
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// Decodes a JSON or YAML body into an object.
fn decode_body(headers: &HeaderMap, bytes: &[u8]) -> Result<Value, ApiError> {
    let kind = content_type(headers);
    let value: Value = match kind.as_str() {
        "" | "application/json" => serde_json::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the object provided is unrecognized: couldn't get version/kind; json parse error: {e}")))?,
        crate::protobuf::MEDIA_TYPE => crate::protobuf::decode(bytes)?,
        "application/yaml" | "application/x-yaml" | "text/yaml" => serde_norway::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the object provided is unrecognized: yaml parse error: {e}")))?,
        other => return Err(ApiError::unsupported_media_type(other)),
    };
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "the object provided is unrecognized: couldn't get version/kind; the body is not a JSON object",
        ));
    }
    Ok(value)
}

async fn handle(
    state: &AppState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
    target: Target,
) -> Result<Response, ApiError> {
    if target == Target::Health {
        return Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "ok",
        )
            .into_response());
    }
    if target == Target::Version {
        return Ok(respond(
            StatusCode::OK,
            &discovery::version(),
            Format::Json,
            &[],
        ));
    }
    if !authorized(state, headers) {
        return Err(ApiError::unauthorized());
    }
    if target == Target::Metrics {
        let mut text = state.metrics.render();
        text.push_str(&state.registry.caches.render_metrics());
        return Ok((
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response());
    }
    let resources = &state.registry.resources;
    let format = negotiate(headers)?;
    let get_only = |value: Option<Value>| -> Result<Response, ApiError> {
        if method != Method::GET {
            return Err(ApiError::method_not_allowed());
        }
        let value = value.ok_or_else(|| {
            ApiError::new(
                StatusReason::NotFound,
                "the server could not find the requested resource",
            )
        })?;
        let format = if format == Format::Table {
            Format::Json
        } else {
            format
        };
        Ok(respond(StatusCode::OK, &value, format, &[]))
    };
    match target {
        Target::Api => match format {
            Format::Aggregated(v) => get_only(Some(discovery::aggregated(resources, true, v))),
            _ => get_only(Some(discovery::core_versions(&state.server_address))),
        },
        Target::Apis => match format {
            Format::Aggregated(v) => get_only(Some(discovery::aggregated(resources, false, v))),
            _ => get_only(Some(discovery::groups(resources))),
        },
        Target::Group(group) => get_only(discovery::group(resources, &group)),
        Target::OpenApiV3(None) => get_only(Some(crate::openapi::root(resources))),
        Target::OpenApiV3(Some(path)) => get_only(crate::openapi::document(resources, &path)),
        // The protobuf form kubectl asks for first is not served; JSON is.
        Target::OpenApiV2 if matches!(format, Format::Json | Format::Yaml) => {
            get_only(Some(crate::openapi::swagger(resources)))
        }
        Target::OpenApiV2 => Err(ApiError::new(
            StatusReason::NotAcceptable,
            "/openapi/v2 is served as application/json",
        )),
        Target::ResourceList { group, version } => {
            get_only(discovery::resource_list(resources, &group, &version))
        }
        Target::Resource {
            group,
            version,
            namespace,
            resource,
            name,
            subresource,
        } => {
            let def = resources.get(&group, &version, &resource).ok_or_else(|| {
                ApiError::new(
                    StatusReason::NotFound,
                    "the server could not find the requested resource",
                )
            })?;
            let deprecation = def.deprecation.clone();
            let call = Call {
                state,
                def,
                namespace,
                name,
                subresource,
                format,
                query: Query::parse(uri),
                headers,
            };
            let mut response = call.run(method, body).await;
            // Every answer from a deprecated version carries its warning.
            if let (Some(warning), Ok(r)) = (deprecation, &mut response) {
                let text = format!(
                    "299 - {}",
                    serde_json::to_string(&warning).unwrap_or_default()
                );
                if let Ok(value) = HeaderValue::from_str(&text) {
                    r.headers_mut().append(header::WARNING, value);
                }
            }
            response
        }
        Target::NotFound => Err(ApiError::new(
            StatusReason::NotFound,
            "the server could not find the requested resource",
        )),
        Target::Health | Target::Version | Target::Metrics => Err(ApiError::method_not_allowed()),
    }
}

/// One request on a resource.
struct Call<'a> {
    state: &'a AppState,
    def: Arc<ResourceDef>,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
    format: Format,
    query: Query,
    headers: &'a HeaderMap,
}

impl Call<'_> {
    /// The request's write options; the field manager defaults to the client's User-Agent up
    /// to its first `/`, as kube-apiserver does.
    fn write_options(&self) -> Result<WriteOptions, ApiError> {
        let mut options = self.query.write_options()?;
        let agent = self
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        options.default_manager = agent
            .split('/')
            .next()
            .unwrap_or("")
            .chars()
            .take(128)
            .collect();
        Ok(options)
    }

    fn registry(&self) -> &Registry {
        &self.state.registry
    }

    /// The namespace of the request: required for namespaced objects, none for cluster-scoped.
    fn namespace(&self) -> Result<Option<&str>, ApiError> {
        match (&self.namespace, self.def.namespaced) {
            (Some(_), false) => Err(ApiError::new(
                StatusReason::NotFound,
                "the server could not find the requested resource",
            )),
            (ns, _) => Ok(ns.as_deref()),
        }
    }

    /// JSON or YAML as asked, for answers that are not the resource (Status, Scale).
    fn plain_format(&self) -> Format {
        if self.format == Format::Yaml {
            Format::Yaml
        } else {
            Format::Json
        }
    }

    fn object_response(&self, code: StatusCode, object: &Value, warnings: &[String]) -> Response {
        match self.format {
            Format::Metadata => respond(code, &partial(object), Format::Json, warnings),
            Format::Table => respond(
                code,
                &table::of_object(
                    &self.def,
                    object,
                    IncludeObject::parse(self.query.get("includeObject")),
                    true,
                ),
                Format::Json,
                warnings,
            ),
            format => respond(code, object, format, warnings),
        }
    }

    async fn run(self, method: &Method, body: Bytes) -> Result<Response, ApiError> {
        let status = match self.subresource.as_deref() {
            None => false,
            Some("status") if self.def.status_subresource => true,
            Some("scale") if self.def.scale.is_some() => return self.scale(method, body).await,
            Some(_) => {
                return Err(ApiError::new(
                    StatusReason::NotFound,
                    "the server could not find the requested resource",
                ));
            }
        };
        let namespace = self.namespace()?.map(str::to_owned);
        let ns = namespace.as_deref();
        let registry = self.registry();
        match (method.clone(), self.name.clone()) {
            (Method::GET, Some(name)) => {
                let object = registry.get(&self.def, ns, &name).await?;
                Ok(self.object_response(StatusCode::OK, &object, &[]))
            }
            (Method::GET, None) if self.query.flag("watch") => self.watch(namespace).await,
            (Method::GET, None) => {
                let options = self.query.list_options()?;
                let list = registry.list(&self.def, ns, &options).await?;
                match self.format {
                    Format::Table => Ok(respond(
                        StatusCode::OK,
                        &table::of_list(
                            &self.def,
                            &list,
                            IncludeObject::parse(self.query.get("includeObject")),
                        ),
                        Format::Json,
                        &[],
                    )),
                    Format::Metadata => {
                        let items: Vec<Value> = list["items"]
                            .as_array()
                            .map(|i| i.iter().map(partial).collect())
                            .unwrap_or_default();
                        let metadata_list = json!({
                            "kind": "PartialObjectMetadataList",
                            "apiVersion": "meta.k8s.io/v1",
                            "metadata": list["metadata"],
                            "items": items,
                        });
                        Ok(respond(StatusCode::OK, &metadata_list, Format::Json, &[]))
                    }
                    format => Ok(respond(StatusCode::OK, &list, format, &[])),
                }
            }
            (Method::POST, None) => {
                let options = self.write_options()?;
                let object = decode_body(self.headers, &body)?;
                let written = registry
                    .create(
                        &self.def,
                        ns.or(Some("default")).filter(|_| self.def.namespaced),
                        object,
                        &options,
                    )
                    .await?;
                Ok(self.object_response(StatusCode::CREATED, &written.object, &written.warnings))
            }
            (Method::PUT, Some(name)) => {
                let options = self.write_options()?;
                let object = decode_body(self.headers, &body)?;
                let written = registry
                    .update(&self.def, ns, &name, object, status, &options)
                    .await?;
                let code = if written.created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                Ok(self.object_response(code, &written.object, &written.warnings))
            }
            (Method::PATCH, Some(name)) => {
                let options = self.write_options()?;
                let patch_type = content_type(self.headers);
                let bytes = body;
                if patch_type == "application/apply-patch+yaml" {
                    let written = registry
                        .apply(&self.def, ns, &name, &bytes, status, &options)
                        .await?;
                    let code = if written.created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    };
                    return Ok(self.object_response(code, &written.object, &written.warnings));
                }
                if options.force {
                    return Err(ApiError::invalid(
                        "meta.k8s.io",
                        "PatchOptions",
                        "",
                        vec![plinth_core::Cause::forbidden(
                            "force",
                            "may not be specified for non-apply patch",
                        )],
                    ));
                }
                let written = registry
                    .patch(
                        &self.def,
                        ns,
                        &name,
                        crate::registry::PatchBody {
                            content_type: &patch_type,
                            body: &bytes,
                        },
                        status,
                        &options,
                    )
                    .await?;
                Ok(self.object_response(StatusCode::OK, &written.object, &written.warnings))
            }
            (Method::DELETE, Some(name)) => {
                let options = self.delete_options(body).await?;
                let (object, gone) = registry.delete(&self.def, ns, &name, &options).await?;
                if gone && !self.def.delete_returns_object {
                    let uid = plinth_core::meta::meta_str(&object, "uid").unwrap_or("");
                    let mut details = json!({"name": name, "kind": self.def.plural, "uid": uid});
                    if !self.def.group_version.group.is_empty() {
                        details["group"] = json!(self.def.group_version.group);
                    }
                    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details});
                    return Ok(respond(StatusCode::OK, &status, self.plain_format(), &[]));
                }
                Ok(self.object_response(StatusCode::OK, &object, &[]))
            }
            (Method::DELETE, None) => {
                let options = self.delete_options(body).await?;
                let list_options = self.query.list_options()?;
                let list = registry.list(&self.def, ns, &list_options).await?;
                for item in list["items"].as_array().cloned().unwrap_or_default() {
                    let item_ns = plinth_core::meta::namespace(&item).map(str::to_owned);
                    let item_name = plinth_core::meta::name(&item).unwrap_or("").to_owned();
                    match registry
                        .delete(&self.def, item_ns.as_deref(), &item_name, &options)
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if e.reason == StatusReason::NotFound => {}
                        Err(e) => return Err(e),
                    }
                }
                let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
                Ok(respond(StatusCode::OK, &status, Format::Json, &[]))
            }
            _ => Err(ApiError::method_not_allowed()),
        }
    }

    /// `/scale`: GET, PUT and PATCH of the autoscaling/v1 Scale.
    async fn scale(&self, method: &Method, body: Bytes) -> Result<Response, ApiError> {
        let name = self.name.clone().ok_or_else(ApiError::method_not_allowed)?;
        let ns = self.namespace()?;
        let registry = self.registry();
        let scale = match *method {
            Method::GET => registry.get_scale(&self.def, ns, &name).await?,
            Method::PUT => {
                let options = self.write_options()?;
                let wanted = decode_body(self.headers, &body)?;
                registry
                    .write_scale(&self.def, ns, &name, &options, |_| Ok(wanted.clone()))
                    .await?
            }
            Method::PATCH => {
                let options = self.write_options()?;
                let kind = content_type(self.headers);
                let patch: Value = serde_json::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
                registry
                    .write_scale(&self.def, ns, &name, &options, |current| {
                        let mut patched = current.clone();
                        match kind.as_str() {
                            "application/merge-patch+json"
                            | "application/strategic-merge-patch+json" => {
                                json_patch::merge(&mut patched, &patch)
                            }
                            "application/json-patch+json" => {
                                let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                                    .map_err(|e| {
                                        ApiError::bad_request(format!("invalid JSON patch: {e}"))
                                    })?;
                                json_patch::patch(&mut patched, &ops).map_err(|e| {
                                    ApiError::new(StatusReason::Invalid, e.to_string())
                                })?;
                            }
                            other => return Err(ApiError::unsupported_media_type(other)),
                        }
                        Ok(patched)
                    })
                    .await?
            }
            _ => return Err(ApiError::method_not_allowed()),
        };
        Ok(respond(StatusCode::OK, &scale, self.plain_format(), &[]))
    }

    async fn delete_options(&self, bytes: Bytes) -> Result<DeleteOptions, ApiError> {
        let mut options = DeleteOptions {
            dry_run: self.query.dry_run()?,
            ..DeleteOptions::default()
        };
        if !bytes.iter().all(u8::is_ascii_whitespace) {
            let parsed = decode_body(self.headers, &bytes)?;
            if parsed
                .get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|d| d.iter().any(|v| v == "All"))
            {
                options.dry_run = true;
            }
            options.uid = parsed
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_owned);
            options.resource_version = parsed
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if parsed.get("propagationPolicy").is_some() || parsed.get("orphanDependents").is_some()
            {
                options.propagation = Propagation::parse(
                    parsed.get("propagationPolicy").and_then(Value::as_str),
                    parsed.get("orphanDependents").and_then(Value::as_bool),
                )?;
            }
        }
        if options.propagation.is_none() {
            let orphan = match self.query.get("orphanDependents") {
                Some(v) => Some(v.parse::<bool>().map_err(|_| {
                    ApiError::bad_request(format!("invalid orphanDependents: {v}"))
                })?),
                None => None,
            };
            options.propagation = Propagation::parse(self.query.get("propagationPolicy"), orphan)?;
        }
        Ok(options)
    }

    async fn watch(&self, namespace: Option<String>) -> Result<Response, ApiError> {
        let options = self.query.list_options()?;
        let send_initial = self.query.flag("sendInitialEvents");
        if send_initial && !self.query.flag("allowWatchBookmarks") {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "ListOptions",
                "",
                vec![plinth_core::Cause::forbidden(
                    "allowWatchBookmarks",
                    "allowWatchBookmarks must be set to true when sendInitialEvents is true",
                )],
            ));
        }
        let timeout = match self.query.get("timeoutSeconds") {
            Some(t) => Duration::from_secs(
                t.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {t}")))?,
            ),
            None => default_watch_timeout(),
        };
        let events = self
            .registry()
            .watch(
                self.def.clone(),
                namespace,
                options,
                send_initial,
                self.query.flag("allowWatchBookmarks"),
            )
            .await?;
        let mut shutdown = self.state.shutdown.clone();
        let stop = async move {
            tokio::select! {
                () = tokio::time::sleep(timeout) => {}
                _ = shutdown.wait_for(|stopping| *stopping) => {}
            }
        };
        let (def, table, metadata_only) = (
            self.def.clone(),
            self.format == Format::Table,
            self.format == Format::Metadata,
        );
        let include = IncludeObject::parse(self.query.get("includeObject"));
        let mut first = true;
        let body = events.take_until(Box::pin(stop)).map(move |event| {
            let object = if table && matches!(event.kind, "ADDED" | "MODIFIED" | "DELETED") {
                let headers = std::mem::replace(&mut first, false);
                table::of_object(&def, &event.object, include, headers)
            } else if metadata_only && event.kind != "ERROR" {
                partial(&event.object)
            } else {
                event.object
            };
            let mut line = serde_json::to_vec(&json!({"type": event.kind, "object": object}))
                .unwrap_or_default();
            line.push(b'\n');
            Ok::<_, std::convert::Infallible>(Bytes::from(line))
        });
        let mut response = Response::new(Body::from_stream(body));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response.headers_mut().insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache, private"),
        );
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_follow_kube_apiserver_paths() {
        assert_eq!(parse_target("/api"), Target::Api);
        assert_eq!(
            parse_target("/apis/coordination.k8s.io"),
            Target::Group("coordination.k8s.io".into())
        );
        let cm = parse_target("/api/v1/namespaces/default/configmaps/a");
        assert_eq!(
            cm,
            Target::Resource {
                group: "".into(),
                version: "v1".into(),
                namespace: Some("default".into()),
                resource: "configmaps".into(),
                name: Some("a".into()),
                subresource: None
            }
        );
        let ns_status = parse_target("/api/v1/namespaces/default/status");
        assert!(
            matches!(ns_status, Target::Resource { ref resource, ref name, ref subresource, .. }
            if resource == "namespaces" && name.as_deref() == Some("default") && subresource.as_deref() == Some("status"))
        );
        let ns = parse_target("/api/v1/namespaces/default");
        assert!(
            matches!(ns, Target::Resource { ref resource, namespace: None, .. } if resource == "namespaces")
        );
        let leases = parse_target("/apis/coordination.k8s.io/v1/namespaces/x/leases");
        assert!(
            matches!(leases, Target::Resource { ref group, name: None, .. } if group == "coordination.k8s.io")
        );
        assert_eq!(parse_target("/nothing/here"), Target::NotFound);
    }

    #[test]
    fn accept_headers_negotiate_like_kube_apiserver() {
        let with = |accept: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
            negotiate(&headers)
        };
        assert_eq!(with("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json").unwrap(), Format::Table);
        assert_eq!(
            with("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json").unwrap(),
            Format::Aggregated("apidiscovery.k8s.io/v2")
        );
        assert_eq!(
            with("application/vnd.kubernetes.protobuf, */*").unwrap(),
            Format::Json
        );
        assert_eq!(with("application/yaml").unwrap(), Format::Yaml);
        assert_eq!(
            with("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").unwrap(),
            Format::Metadata
        );
        assert_eq!(with("text/html").unwrap_err().code(), 406);
    }
}
