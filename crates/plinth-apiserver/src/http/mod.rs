//! HTTP: the URL space of kube-apiserver, authentication, content negotiation, and the one
//! place where an [`ApiError`] becomes a `Status` response.
//!
//! Rooms: this file (routing, authentication, the error response), `negotiate` (formats),
//! `query` (every query parameter, parsed once into typed options), `body` (reading and
//! decoding bodies and patches), `call` (one request on a resource → the registry).

mod body;
mod call;
pub(crate) mod inflight;

pub(crate) use inflight::Inflight;
mod health;
mod history;
mod negotiate;
mod query;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use plinth_core::{ApiError, StatusReason};
use serde_json::Value;

use crate::discovery;
use body::{content_type, read_body};
use call::Call;
use negotiate::{Format, negotiate, respond};
use plinth_auth::Authorizer;
use plinth_registry::Registry;
use query::Query;

/// What every request handler shares.
pub(crate) struct AppState {
    /// The registry.
    pub(crate) registry: Registry,
    /// The admission chain every write passes (an argument of each registry write).
    pub(crate) admission: Arc<dyn plinth_registry::admit::Admit>,
    /// Who is asking.
    pub(crate) authenticator: plinth_auth::Authenticator,
    /// Whether they may.
    pub(crate) rbac: Arc<plinth_auth::rbac::Rbac>,
    /// `host:port` clients reach the server at.
    pub(crate) server_address: String,
    /// Becomes `true` when the server is shutting down; open watches end.
    pub(crate) shutdown: tokio::sync::watch::Receiver<bool>,
    /// Request metrics.
    pub(crate) metrics: crate::metrics::Metrics,
    /// Metrics of others in the process (the built-in controllers').
    pub(crate) metric_sources: Arc<crate::metrics::MetricSources>,
    /// The OpenAPI documents of the current resources.
    pub(crate) openapi: crate::openapi::Cache,
    /// Concurrency limits.
    pub(crate) inflight: inflight::Inflight,
    /// The audit log, when one is configured.
    pub(crate) audit: Option<crate::audit::Audit>,
    /// The extension API servers of aggregated group/versions.
    pub(crate) aggregator: Arc<crate::aggregator::Aggregator>,
    /// The way to node agents.
    pub(crate) nodes: Arc<crate::nodes::NodeProxy>,
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
        let body = plinth_protobuf::to_json(&self.0.to_status());
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
    /// The OIDC discovery documents of the ServiceAccount token issuer (no credentials
    /// needed).
    Oidc(Oidc),
    Resource {
        group: String,
        version: String,
        namespace: Option<String>,
        resource: String,
        name: Option<String>,
        subresource: Option<String>,
        /// The path after a `proxy` subresource (`pods` of `nodes/<name>/proxy/pods`).
        tail: Option<String>,
    },
    /// The web console's page and assets (`/ui/…`, [`plinth_console`]); `None` for `/ui`.
    Console(Option<String>),
    /// The history API ([`history`]): a view and the path of what it is about.
    History {
        view: String,
        inner: Option<Box<Target>>,
    },
    NotFound,
}

#[derive(Debug, PartialEq, Eq)]
enum Oidc {
    Configuration,
    Keys,
}

fn parse_target(path: &str) -> Target {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Target::Version,
        [".well-known", "openid-configuration"] => return Target::Oidc(Oidc::Configuration),
        ["openid", "v1", "jwks"] => return Target::Oidc(Oidc::Keys),
        ["metrics"] => return Target::Metrics,
        ["healthz" | "livez" | "readyz", ..] => return Target::Health,
        ["api"] => return Target::Api,
        ["openapi", "v3"] => return Target::OpenApiV3(None),
        ["openapi", "v3", rest @ ..] => return Target::OpenApiV3(Some(rest.join("/"))),
        ["openapi", "v2"] => return Target::OpenApiV2,
        ["apis"] => return Target::Apis,
        ["ui"] if !path.ends_with('/') => return Target::Console(None),
        ["ui", rest @ ..] => return Target::Console(Some(rest.join("/"))),
        ["apis", history::GROUP, history::VERSION, view, rest @ ..]
            if history::verb_of(view).is_some() =>
        {
            return Target::History {
                view: (*view).to_owned(),
                inner: (!rest.is_empty()).then(|| Box::new(parse_target(&rest.join("/")))),
            };
        }
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
        tail: None,
    };
    match rest {
        [res] => resource(res, None, None),
        [res, name] => resource(res, Some(name), None),
        // A proxy's tail keeps a trailing slash; `proxy/` has an empty one, `proxy` none.
        [res, name, "proxy"] if path.ends_with('/') => {
            let mut target = resource(res, Some(name), Some("proxy"));
            if let Target::Resource { tail: t, .. } = &mut target {
                *t = Some(String::new());
            }
            target
        }
        [res, name, sub] => resource(res, Some(name), Some(sub)),
        [res, name, "proxy", tail @ ..] => {
            let mut target = resource(res, Some(name), Some("proxy"));
            if let Target::Resource { tail: t, .. } = &mut target {
                let slash = if path.ends_with('/') { "/" } else { "" };
                *t = Some(format!("{}{slash}", tail.join("/")));
            }
            target
        }
        _ => Target::NotFound,
    }
}

/// Every request.
async fn dispatch(State(state): State<Arc<AppState>>, request: axum::extract::Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let peer = parts.extensions.remove::<plinth_auth::PeerCertificate>();
    let address = parts
        .extensions
        .get::<PeerAddress>()
        .map(|PeerAddress(a)| *a);
    // A connection upgrade (exec, attach: WebSocket) is handed on to the node agent.
    let upgrade = std::sync::Mutex::new(parts.extensions.remove::<hyper::upgrade::OnUpgrade>());
    let (method, uri, headers) = (parts.method, parts.uri, parts.headers);
    let audit_id = audit_id(&headers);
    let mut audited = None;
    let started = std::time::Instant::now();
    let target = parse_target(uri.path());
    // The query is parsed once: metrics labels, authorization attributes and the call read it.
    let query = Query::parse(&uri);
    let labels = request_labels(&target, &method, &query, &headers);
    // The body is read (or, past the limit, drained) before anything else, so that no answer
    // leaves a request half-read.
    let result = match read_body(body).await {
        Ok(bytes) => {
            let request = Request {
                method: &method,
                uri: &uri,
                query: &query,
                headers: &headers,
                peer: peer.as_ref(),
                address,
                upgrade: &upgrade,
                audit_id: &audit_id,
            };
            let scoped = async {
                let result = handle(&state, &request, bytes, target, &mut audited).await;
                let annotations = plinth_admission::AUDIT_ANNOTATIONS.with(|a| {
                    std::mem::take(
                        &mut *a.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
                    )
                });
                (result, annotations)
            };
            let (result, annotations) = plinth_admission::AUDIT_ANNOTATIONS
                .scope(std::sync::Mutex::new(Vec::new()), scoped)
                .await;
            if let Some((record, _)) = &mut audited {
                record.annotate(annotations);
            }
            result
        }
        Err(error) => Err(error),
    };
    let mut response = match result {
        Ok(response) => response,
        Err(error) => ErrorResponse(error).into_response(),
    };
    if let Ok(value) = HeaderValue::from_str(&audit_id) {
        response.headers_mut().insert(AUDIT_ID, value);
    }
    if let (Some(audit), Some((record, long_running))) = (&state.audit, audited) {
        response = audited_response(&state, audit, record, long_running, response).await;
    }
    state
        .metrics
        .record(labels, response.status().as_u16(), started.elapsed());
    tracing::debug!(method = %method, path = %uri.path(), code = response.status().as_u16(), elapsed_ms = started.elapsed().as_millis() as u64, "request");
    response
}

/// The header naming a request's audit ID, given by the client or made by the server, and
/// returned on every response (kube-apiserver's `Audit-Id`).
const AUDIT_ID: &str = "audit-id";

/// The request's audit ID: the client's, when it gives a usable one (as kube-apiserver takes
/// it), else a new UUID.
fn audit_id(headers: &HeaderMap) -> String {
    headers
        .get(AUDIT_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|id| !id.is_empty() && id.len() <= 128)
        .map_or_else(new_audit_id, str::to_owned)
}

/// A new audit ID: a version-4 UUID from a counter mixed with a random seed drawn once —
/// unique in this process and across processes, without a system call per request (drawing
/// each from the kernel cost GETs a tenth of their rate).
fn new_audit_id() -> String {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: OnceLock<(u64, u64)> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let (a, b) = *SEED.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // splitmix64: a bijection of the counter, so no two requests share an ID.
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let high = mix(n ^ a);
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&high.to_be_bytes());
    bytes[8..].copy_from_slice(&(b ^ n).to_be_bytes());
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// The client's address, which every request of a connection carries.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeerAddress(pub(crate) std::net::SocketAddr);

/// Writes a request's last audit stages: for a watch `ResponseStarted` now and
/// `ResponseComplete` when its stream ends; else `ResponseComplete`, with the body at
/// `RequestResponse` level.
async fn audited_response(
    state: &Arc<AppState>,
    audit: &crate::audit::Audit,
    record: crate::audit::Record,
    long_running: bool,
    response: Response,
) -> Response {
    let code = response.status().as_u16();
    if long_running && code < 300 {
        audit.stage(&record, "ResponseStarted", code, None);
        let (parts, body) = response.into_parts();
        let done = AuditOnEnd {
            state: state.clone(),
            record: Some(record),
            code,
        };
        let stream = futures::StreamExt::map(body.into_data_stream(), move |chunk| {
            let _keep = &done;
            chunk
        });
        return Response::from_parts(parts, Body::from_stream(stream));
    }
    if !crate::audit::Audit::wants_response(&record) {
        audit.stage(&record, "ResponseComplete", code, None);
        return response;
    }
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => {
            audit.stage(&record, "ResponseComplete", code, Some(&bytes));
            Response::from_parts(parts, Body::from(bytes))
        }
        Err(_) => {
            audit.stage(&record, "ResponseComplete", code, None);
            Response::from_parts(parts, Body::empty())
        }
    }
}

/// Writes a watch's `ResponseComplete` when its stream is dropped (ended or disconnected).
struct AuditOnEnd {
    state: Arc<AppState>,
    record: Option<crate::audit::Record>,
    code: u16,
}

impl Drop for AuditOnEnd {
    fn drop(&mut self) {
        if let (Some(audit), Some(record)) = (&self.state.audit, self.record.take()) {
            audit.stage(&record, "ResponseComplete", self.code, None);
        }
    }
}

/// The metric labels of a request, as kube-apiserver's RequestInfo derives them.
fn request_labels(
    target: &Target,
    method: &Method,
    query: &Query,
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
        ..
    } = target
    {
        let watch = query.flag("watch");
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

/// What a request came with, besides its body.
struct Request<'a> {
    method: &'a Method,
    uri: &'a Uri,
    query: &'a Query,
    headers: &'a HeaderMap,
    peer: Option<&'a plinth_auth::PeerCertificate>,
    address: Option<std::net::SocketAddr>,
    /// The connection's upgrade, taken by the one who serves it.
    upgrade: &'a std::sync::Mutex<Option<hyper::upgrade::OnUpgrade>>,
    /// Its audit ID.
    audit_id: &'a str,
}

fn received<'a>(
    request: &'a Request<'_>,
    user: &'a plinth_auth::User,
    impersonator: Option<&'a plinth_auth::User>,
    attributes: &'a plinth_auth::Attributes,
    body: &'a (dyn Fn() -> Option<Value> + Sync),
) -> crate::audit::Received<'a> {
    crate::audit::Received {
        user,
        impersonator,
        attributes,
        uri: request
            .uri
            .path_and_query()
            .map_or(request.uri.path(), |p| p.as_str()),
        source: request.address.map(|a| a.ip()),
        user_agent: request
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
        audit_id: request.audit_id,
        body,
    }
}

/// The authorization attributes of a request for `target`.
fn attributes(target: &Target, request: &Request<'_>) -> plinth_auth::Attributes {
    // A history view is a read of what it is about.
    if let Target::History {
        inner: Some(inner), ..
    } = target
    {
        let read = Request {
            method: &Method::GET,
            ..*request
        };
        return attributes(inner, &read);
    }
    match target {
        Target::Resource {
            group,
            version,
            namespace,
            resource,
            name,
            subresource,
            ..
        } => plinth_auth::Attributes::resource(&plinth_registry::authz::ResourceRequest {
            method: request.method.as_str(),
            watch: request.query.flag("watch"),
            group,
            version,
            namespace: namespace.as_deref(),
            resource,
            name: name.as_deref(),
            subresource: subresource.as_deref(),
            field_selector: request.query.get("fieldSelector").unwrap_or(""),
        }),
        _ => plinth_auth::Attributes::path(request.method.as_str(), request.uri.path()),
    }
}

async fn handle(
    state: &AppState,
    request: &Request<'_>,
    body: Bytes,
    target: Target,
    audited: &mut Option<(crate::audit::Record, bool)>,
) -> Result<Response, ApiError> {
    let (method, headers) = (request.method, request.headers);
    let public = matches!(target, Target::Health | Target::Version | Target::Oidc(_));
    if public && headers.contains_key(header::AUTHORIZATION) {
        // Anyone may read these, but credentials that fail are refused, as kube does.
        state
            .authenticator
            .authenticate(
                headers,
                request.peer,
                &state.registry.admitted(&*state.admission),
            )
            .await?;
    }
    if target == Target::Health {
        let (status, text) = health::answer(
            request.uri.path(),
            request.query,
            state.registry.store.as_ref(),
            &state.shutdown,
        )
        .await;
        return Ok((
            status,
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            text,
        )
            .into_response());
    }
    if let Target::Console(asset) = &target {
        return console(method, asset.as_deref());
    }
    if target == Target::Version {
        return Ok(respond(
            StatusCode::OK,
            &discovery::version(),
            Format::Json,
            &[],
        ));
    }
    if let Target::Oidc(document) = &target {
        let tokens = &state.authenticator.service_accounts;
        let body = match document {
            Oidc::Configuration => tokens.openid_configuration(),
            Oidc::Keys => tokens.jwks(),
        };
        return Ok(respond(StatusCode::OK, &body, Format::Json, &[]));
    }
    let user = state
        .authenticator
        .authenticate(
            headers,
            request.peer,
            &state.registry.admitted(&*state.admission),
        )
        .await?;
    let sender = user.clone();
    let attributes = attributes(&target, request);
    let object = || {
        (!body.is_empty())
            .then(|| body::decode_body(headers, &body).ok())
            .flatten()
    };
    let user = match plinth_auth::impersonate(user, headers, &state.rbac) {
        Ok(user) => user,
        Err(e) => {
            if let Some(audit) = &state.audit {
                *audited = audit
                    .received(&received(request, &sender, None, &attributes, &object))
                    .map(|r| (r, false));
            }
            return Err(e);
        }
    };
    if let Some(audit) = &state.audit {
        let impersonator = (sender != user).then_some(&sender);
        *audited = audit
            .received(&received(
                request,
                &user,
                impersonator,
                &attributes,
                &object,
            ))
            .map(|r| (r, attributes.verb == "watch"));
    }
    // `revision` (the store's revision at a time) is for every authenticated user.
    let open = matches!(&target, Target::History { inner: None, .. });
    if !open && let plinth_auth::Decision::Deny(reason) = state.rbac.authorize(&user, &attributes) {
        return Err(attributes.forbidden(&user, &reason));
    }
    let long_running = attributes.verb == "watch";
    let _place = state.inflight.admit(&user, method, long_running).await?;
    if target == Target::Metrics {
        let mut text = state.metrics.render();
        text.push_str(&state.registry.caches.render_metrics());
        text.push_str(&state.inflight.render_metrics());
        text.push_str(&state.metric_sources.render());
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
    if let Target::History { view, inner } = &target {
        let about = match inner.as_deref() {
            None => None,
            Some(Target::Resource {
                group,
                version,
                namespace,
                resource,
                name,
                subresource,
                ..
            }) => Some(history::About {
                group: group.clone(),
                version: version.clone(),
                namespace: namespace.clone(),
                resource: resource.clone(),
                name: name.clone(),
                subresource: subresource.clone(),
            }),
            Some(_) => return Err(not_found()),
        };
        // A timeline shows only what the user may read.
        let visible = |o: &plinth_registry::timeline::ObjectRef| {
            let read = plinth_registry::authz::ResourceRequest {
                method: "GET",
                watch: false,
                group: &o.group,
                version: "",
                namespace: Some(o.namespace.as_str()).filter(|n| !n.is_empty()),
                resource: &o.resource,
                name: Some(&o.name),
                subresource: None,
                field_selector: "",
            };
            let attributes = plinth_auth::Attributes::resource(&read);
            matches!(
                state.rbac.authorize(&user, &attributes),
                plinth_auth::Decision::Allow(_)
            )
        };
        return history::serve(
            &state.registry,
            method,
            headers,
            request.query,
            view,
            about.as_ref(),
            &visible,
        )
        .await;
    }
    // A group/version an APIService gives to an extension server goes there, as is.
    let aggregated = match &target {
        Target::Resource { group, version, .. } | Target::ResourceList { group, version } => {
            state.aggregator.remote(group, version)
        }
        // An extension server's OpenAPI is its own to serve.
        Target::OpenApiV3(Some(path)) => match path.split('/').collect::<Vec<_>>().as_slice() {
            ["apis", group, version] => state.aggregator.remote(group, version),
            _ => None,
        },
        _ => None,
    };
    if let Some(remote) = aggregated {
        return crate::aggregator::proxy(
            &remote,
            &state.registry,
            method,
            request.uri,
            headers,
            body,
            &user,
        )
        .await;
    }
    let format = match negotiate(headers) {
        // A pod's log is text whatever the client accepts (kube-apiserver produces
        // `text/plain` for it).
        Err(_) if matches!(&target, Target::Resource { subresource: Some(s), .. } if s == "log") => {
            Format::Json
        }
        other => other?,
    };
    if let Format::OpenApiV2Protobuf(media) = format
        && target != Target::OpenApiV2
    {
        return Err(ApiError::new(
            StatusReason::NotAcceptable,
            format!("{media} is served for /openapi/v2 only"),
        ));
    }
    match target {
        Target::Resource {
            group,
            version,
            namespace,
            resource,
            name,
            subresource,
            tail,
        } => {
            let def = state
                .registry
                .resources
                .get(&group, &version, &resource)
                .ok_or_else(not_found)?;
            let deprecation = def.deprecation.clone();
            // Protobuf for the built-in types; the others in JSON when the client takes it.
            let format = match format {
                Format::Protobuf { or_json }
                    if !plinth_protobuf::has_message(
                        &def.group_version.api_version(),
                        &def.kind,
                    ) =>
                {
                    if !or_json {
                        return Err(negotiate::not_acceptable());
                    }
                    Format::Json
                }
                other => other,
            };
            let provenance = provenance(
                request,
                &user,
                (sender != user).then_some(&sender),
                subresource.as_deref(),
                name.is_some(),
            );
            let call = Call {
                state,
                def,
                namespace,
                name,
                subresource,
                tail,
                format,
                query: request.query,
                headers,
                user: &user,
                upgrade: request.upgrade,
            };
            let mut response = match provenance {
                Some(provenance) => provenance.scope(call.run(method, body)).await,
                None => call.run(method, body).await,
            };
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
        other => document(state, method, format, other),
    }
}

/// The provenance of a write request's writes (`None` for a read): who, as whom, which
/// operation on which subresource, through which client and request.
fn provenance(
    request: &Request<'_>,
    user: &plinth_auth::User,
    impersonator: Option<&plinth_auth::User>,
    subresource: Option<&str>,
    named: bool,
) -> Option<plinth_registry::provenance::Provenance> {
    let operation = match *request.method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH if body::content_type(request.headers) == "application/apply-patch+yaml" => {
            "apply"
        }
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => return None,
    };
    let user_agent = request
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut provenance = plinth_registry::provenance::Provenance::of(user, operation);
    provenance.impersonator = impersonator.map(|sender| sender.name.clone());
    // A deletion manages no fields.
    if !operation.starts_with("delete") {
        provenance.field_manager = request
            .query
            .get("fieldManager")
            .map_or_else(|| call::default_manager(user_agent), str::to_owned);
    }
    provenance.subresource = subresource.unwrap_or_default().to_owned();
    provenance.user_agent = user_agent.chars().take(256).collect();
    provenance.audit_id = request.audit_id.to_owned();
    Some(provenance)
}

/// The console's assets: for anyone (they hold no data; what the page shows it reads with the
/// user's credentials), under a policy that keeps the page to this server.
fn console(method: &Method, asset: Option<&str>) -> Result<Response, ApiError> {
    if !matches!(*method, Method::GET | Method::HEAD) {
        return Err(ApiError::method_not_allowed());
    }
    let Some(path) = asset else {
        return Ok((StatusCode::MOVED_PERMANENTLY, [(header::LOCATION, "/ui/")]).into_response());
    };
    let asset = plinth_console::asset(path).ok_or_else(not_found)?;
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, asset.content_type),
            (
                header::CONTENT_SECURITY_POLICY,
                plinth_console::CONTENT_SECURITY_POLICY,
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        asset.body,
    )
        .into_response())
}

fn not_found() -> ApiError {
    ApiError::new(
        StatusReason::NotFound,
        "the server could not find the requested resource",
    )
}

/// The read-only documents: discovery and OpenAPI.
fn document(
    state: &AppState,
    method: &Method,
    format: Format,
    target: Target,
) -> Result<Response, ApiError> {
    if method != Method::GET {
        return Err(ApiError::method_not_allowed());
    }
    let resources = &state.registry.resources;
    // Documents are JSON for tables and protobuf asked for too (client-go takes JSON).
    let format = match format {
        Format::Table | Format::Protobuf { .. } | Format::MetadataProtobuf => Format::Json,
        other => other,
    };
    let answer = |value: Option<&Value>| -> Result<Response, ApiError> {
        Ok(respond(
            StatusCode::OK,
            value.ok_or_else(not_found)?,
            format,
            &[],
        ))
    };
    let owned = |value: Option<Value>| answer(value.as_ref());
    match target {
        Target::Api => match format {
            Format::Aggregated(v) => owned(Some(discovery::aggregated(resources, true, v))),
            _ => owned(Some(discovery::core_versions(&state.server_address))),
        },
        Target::Apis => {
            let remotes = state.aggregator.remotes();
            match format {
                Format::Aggregated(v) => owned(Some(discovery::with_remotes_aggregated(
                    discovery::aggregated(resources, false, v),
                    &remotes,
                ))),
                _ => owned(Some(discovery::with_remotes(
                    discovery::groups(resources),
                    &remotes,
                ))),
            }
        }
        Target::Group(group) => owned(
            discovery::group(resources, &group)
                .or_else(|| discovery::remote_group(&state.aggregator.remotes(), &group)),
        ),
        Target::ResourceList { group, version } => {
            owned(discovery::resource_list(resources, &group, &version))
        }
        Target::OpenApiV3(None) => {
            let mut root = state.openapi.documents(resources).root.clone();
            if let Some(paths) = root.get_mut("paths").and_then(Value::as_object_mut) {
                for remote in state.aggregator.remotes() {
                    let path = format!("apis/{}/{}", remote.group, remote.version);
                    paths.insert(
                        path.clone(),
                        serde_json::json!({"serverRelativeURL": format!("/openapi/v3/{path}")}),
                    );
                }
            }
            owned(Some(root))
        }
        Target::OpenApiV3(Some(path)) => {
            let documents = state.openapi.documents(resources);
            answer(documents.by_path.get(&path).map(|d| &**d))
        }
        Target::OpenApiV2 => match format {
            Format::OpenApiV2Protobuf(_) => {
                let documents = state.openapi.documents(resources);
                let mut response =
                    (StatusCode::OK, documents.swagger_protobuf().to_vec()).into_response();
                // The dotted form, whichever was asked for (the `@` one is not a valid media
                // type in a response: client-go's MIME parser refuses it).
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(crate::openapi_v2_proto::MEDIA_TYPES[0]),
                );
                Ok(response)
            }
            Format::Json | Format::Yaml => {
                answer(Some(state.openapi.documents(resources).swagger()))
            }
            _ => Err(ApiError::new(
                StatusReason::NotAcceptable,
                "/openapi/v2 is served as application/json and application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            )),
        },
        Target::NotFound
        | Target::Resource { .. }
        | Target::History { .. }
        | Target::Console(_) => Err(not_found()),
        Target::Health | Target::Version | Target::Metrics | Target::Oidc(_) => {
            Err(ApiError::method_not_allowed())
        }
    }
}

#[cfg(test)]
mod tests;

/// Property tests over what a request reaches before the registry: query strings, bodies of
/// every media type, patches. Nothing panics; every refusal is a 4xx.
#[cfg(test)]
mod properties;
