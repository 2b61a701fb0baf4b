//! API aggregation (kube-aggregator): a group/version an APIService assigns to an extension
//! API server is proxied there — to one of its Service's ready endpoints (as kube-apiserver
//! with `--enable-aggregator-routing`; the TLS name is `<svc>.<ns>.svc`), or to the URL of
//! Plinth's annotation when the server runs outside the cluster — over TLS trusting the
//! APIService's `caBundle`, the server
//! presenting its own client certificate (`front-proxy-client`, signed by the cluster CA that
//! `extension-apiserver-authentication` publishes as `requestheader-client-ca-file`) and the
//! caller's identity in `X-Remote-User`/`-Group`/`-Extra-*`. Each extension server's discovery
//! is read every few seconds into the APIService's `Available` condition and into this
//! server's discovery documents.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request as HttpRequest, Uri, header};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use plinth_core::ApiError;
use serde_json::{Value, json};
use tokio::sync::watch;

use plinth_auth::User;
use plinth_registry::callout::{Endpoint, address};
use plinth_registry::services::{ServiceResolver, Unresolved};
use plinth_registry::{Client, Part, WriteOptions};
use plinth_types::apiregistration::apiservice::URL_ANNOTATION;

/// How often extension servers' discovery is checked.
const CHECK_EVERY: Duration = Duration::from_secs(3);
/// How long a discovery check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// The common name of this server's proxy client certificate.
pub const PROXY_CLIENT: &str = "front-proxy-client";

/// An extension API server serving one group/version.
pub struct Remote {
    /// The APIService's name (`v1alpha1.wardle.example.com`).
    pub name: String,
    /// The group.
    pub group: String,
    /// The version.
    pub version: String,
    /// Where it is: its Service, or the URL of the annotation.
    at: Endpoint,
    tls: Arc<rustls::ClientConfig>,
    /// Its `APIResourceList`, from the last discovery check that passed.
    pub resources: RwLock<Option<Value>>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("name", &self.name)
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

/// The extension servers in force and this server's identity toward them.
#[derive(Debug, Default)]
pub struct Aggregator {
    remotes: RwLock<HashMap<(String, String), Arc<Remote>>>,
}

impl Aggregator {
    /// The extension server of `group`/`version`, if an APIService assigns one.
    pub fn remote(&self, group: &str, version: &str) -> Option<Arc<Remote>> {
        self.remotes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(group.to_owned(), version.to_owned()))
            .cloned()
    }

    /// Every extension server, by group and version.
    pub fn remotes(&self) -> Vec<Arc<Remote>> {
        let mut all: Vec<Arc<Remote>> = self
            .remotes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| (&a.group, &a.version).cmp(&(&b.group, &b.version)));
        all
    }

    fn set(&self, remotes: HashMap<(String, String), Arc<Remote>>) {
        *self.remotes.write().unwrap_or_else(PoisonError::into_inner) = remotes;
    }
}

fn remote_of(service: &Value, identity: &(String, String)) -> Option<Remote> {
    let spec = service.get("spec")?;
    spec.get("service").filter(|s| s.is_object())?;
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    let at = match service
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(URL_ANNOTATION))
        .and_then(Value::as_str)
    {
        Some(url) => Endpoint::Url(url.trim_end_matches('/').to_owned()),
        None => Endpoint::Service {
            namespace: text(&spec["service"], "namespace"),
            name: text(&spec["service"], "name"),
            path: String::new(),
            port: spec["service"]
                .get("port")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(443),
        },
    };
    let tls = match plinth_registry::callout::client_tls(
        &text(spec, "caBundle"),
        spec.get("insecureSkipTLSVerify") == Some(&json!(true)),
        identity,
    ) {
        Ok(tls) => Arc::new(tls),
        Err(e) => {
            tracing::warn!(apiservice = ?plinth_core::meta::name(service), error = %e, "APIService left out");
            return None;
        }
    };
    Some(Remote {
        name: plinth_core::meta::name(service)?.to_owned(),
        group: text(spec, "group"),
        version: text(spec, "version"),
        at,
        tls,
        resources: RwLock::new(None),
    })
}

/// Why a request did not reach an extension server.
enum Unreached {
    /// Its Service has no endpoint to call.
    Unresolved(Unresolved),
    /// The call failed.
    Failed(String),
}

/// Sends one request to `remote` and returns its response (streamed: watches go through).
async fn send(
    remote: &Remote,
    services: &dyn ServiceResolver,
    method: Method,
    path_and_query: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Result<axum::http::Response<hyper::body::Incoming>, Unreached> {
    let at = address(&remote.at, services)
        .await
        .map_err(Unreached::Unresolved)?;
    send_at(remote, at, method, path_and_query, headers, body)
        .await
        .map_err(Unreached::Failed)
}

async fn send_at(
    remote: &Remote,
    at: Option<std::net::SocketAddr>,
    method: Method,
    path_and_query: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Result<axum::http::Response<hyper::body::Incoming>, String> {
    let base = remote.at.base();
    let uri: Uri = format!("{base}{path_and_query}")
        .parse()
        .map_err(|e| format!("invalid URL: {e}"))?;
    let mut sender = plinth_registry::callout::dial_at(&remote.tls, &uri, at).await?;
    sender.ready().await.map_err(|e| e.to_string())?;
    let mut request = HttpRequest::builder()
        .method(method)
        .uri(path_and_query)
        .body(Body::from(body))
        .map_err(|e| e.to_string())?;
    *request.headers_mut() = headers;
    if let Some(authority) = uri.authority()
        && let Ok(value) = HeaderValue::from_str(authority.as_str())
    {
        request.headers_mut().insert(header::HOST, value);
    }
    sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())
}

/// Proxies a request for `remote`'s group/version, as `user`.
///
/// # Errors
/// 503 when the extension server cannot be reached.
pub(crate) async fn proxy(
    remote: &Remote,
    services: &dyn ServiceResolver,
    method: &Method,
    uri: &Uri,
    incoming: &HeaderMap,
    body: Bytes,
    user: &User,
) -> Result<Response, ApiError> {
    let mut headers = HeaderMap::new();
    for (name, value) in incoming {
        let lower = name.as_str();
        if lower == "authorization"
            || lower.starts_with("impersonate-")
            || lower.starts_with("x-remote-")
            || lower == "host"
            || lower == "connection"
        {
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    let put = |headers: &mut HeaderMap, name: String, value: &str| {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.append(name, value);
        }
    };
    put(&mut headers, "x-remote-user".into(), &user.name);
    for group in &user.groups {
        put(&mut headers, "x-remote-group".into(), group);
    }
    for (key, values) in &user.extra {
        for value in values {
            put(
                &mut headers,
                format!("x-remote-extra-{}", key.to_ascii_lowercase()),
                value,
            );
        }
    }
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let response = send(remote, services, method.clone(), path, headers, body)
        .await
        .map_err(|why| match why {
            // kube's proxy answers an unresolvable Service with a bare 503.
            Unreached::Unresolved(e) => {
                tracing::debug!(apiservice = %remote.name, error = %e, "error resolving the service");
                ApiError::unavailable("service unavailable")
            }
            Unreached::Failed(why) => {
                ApiError::unavailable(format!("error trying to reach service: {why}"))
            }
        })?;
    let (parts, body) = response.into_parts();
    Ok(Response::from_parts(parts, Body::new(body)))
}

/// The condition an APIService's check gives.
fn condition(available: bool, reason: &str, message: &str) -> Value {
    json!({"type": "Available", "status": if available { "True" } else { "False" },
        "reason": reason, "message": message,
        "lastTransitionTime": plinth_core::meta::format_time(plinth_registry::now())})
}

async fn write_condition(registry: &Client, name: &str, wanted: Value) {
    let Some(def) = registry
        .resources
        .get("apiregistration.k8s.io", "v1", "apiservices")
    else {
        return;
    };
    let options = WriteOptions::internal("kube-apiserver");
    let written = registry
        .modify(&def, None, name, Part::Status, &options, |current| {
            let existing = current
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "Available"));
            if existing.is_some_and(|c| {
                c["status"] == wanted["status"]
                    && c["reason"] == wanted["reason"]
                    && c["message"] == wanted["message"]
            }) {
                return Ok(false);
            }
            current["status"] = json!({"conditions": [wanted.clone()]});
            Ok(true)
        })
        .await;
    if let Err(e) = written
        && e.reason != plinth_core::StatusReason::NotFound
    {
        tracing::warn!(apiservice = name, error = %e.message, "could not write the APIService's status");
    }
}

/// Checks one extension server's discovery; records what it serves.
async fn check(registry: &Client, remote: &Remote) {
    let path = format!("/apis/{}/{}", remote.group, remote.version);
    let base = remote.at.base();
    let at = match address(&remote.at, &**registry).await {
        Ok(at) => at,
        Err(why) => {
            *remote
                .resources
                .write()
                .unwrap_or_else(PoisonError::into_inner) = None;
            let (reason, message) = unresolved_condition(&remote.at, &why);
            write_condition(registry, &remote.name, condition(false, reason, &message)).await;
            return;
        }
    };
    let outcome = tokio::time::timeout(CHECK_TIMEOUT, async {
        let response = send_at(
            remote,
            at,
            Method::GET,
            &path,
            HeaderMap::new(),
            Bytes::new(),
        )
        .await?;
        let status = response.status();
        let bytes = axum::body::to_bytes(Body::new(response.into_body()), 16 << 20)
            .await
            .map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("bad status from {base}{path}: {}", status.as_u16()));
        }
        serde_json::from_slice::<Value>(&bytes).map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|_| Err("context deadline exceeded".into()));
    let wanted = match outcome {
        Ok(list) => {
            *remote
                .resources
                .write()
                .unwrap_or_else(PoisonError::into_inner) = Some(list);
            condition(true, "Passed", "all checks passed")
        }
        Err(why) => {
            *remote
                .resources
                .write()
                .unwrap_or_else(PoisonError::into_inner) = None;
            let shown = match at {
                Some(at) => format!("https://{at}"),
                None => base,
            };
            let why = format!("failing or missing response from {shown}{path}: {why}");
            condition(false, "FailedDiscoveryCheck", &why)
        }
    };
    write_condition(registry, &remote.name, wanted).await;
}

/// The Available condition's reason and message for a Service with nothing to call, in
/// kube's availability controller's words.
fn unresolved_condition(at: &Endpoint, why: &Unresolved) -> (&'static str, String) {
    let (namespace, name, port) = match at {
        Endpoint::Service {
            namespace,
            name,
            port,
            ..
        } => (namespace.as_str(), name.as_str(), *port),
        Endpoint::Url(_) => ("", "", 0),
    };
    match why {
        Unresolved::NotFound(_) => (
            "ServiceNotFound",
            format!("service/{name} in {namespace:?} is not present"),
        ),
        Unresolved::NoPort(..) => (
            "ServicePortError",
            format!("service/{name} in {namespace:?} is not listening on port {port}"),
        ),
        Unresolved::EndpointsNotFound(_) => (
            "EndpointsNotFound",
            format!("cannot find endpoints for service/{name} in {namespace:?}"),
        ),
        Unresolved::NoEndpoints(_, port_name) => (
            "MissingEndpoints",
            format!(
                "endpoints for service/{name} in {namespace:?} have no addresses with port name {port_name:?}"
            ),
        ),
        Unresolved::UnsupportedType(_) => ("FailedDiscoveryCheck", why.to_string()),
    }
}

/// Follows the APIServices, checks the extension servers every few seconds, and marks the
/// local ones available.
pub(crate) fn spawn(
    registry: Client,
    aggregator: Arc<Aggregator>,
    identity: (String, String),
    stopping: watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let services: Arc<std::sync::Mutex<HashMap<String, Value>>> = Arc::default();
        let checker = {
            let (registry, aggregator, mut stopping) =
                (registry.clone(), aggregator.clone(), stopping.clone());
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(CHECK_EVERY);
                loop {
                    tokio::select! {
                        _ = ticks.tick() => {}
                        _ = stopping.wait_for(|s| *s) => return,
                    }
                    for remote in aggregator.remotes() {
                        check(&registry, &remote).await;
                    }
                }
            })
        };
        loop {
            let Some((_, mut events)) = registry
                .watch_until_stopped(
                    ("apiregistration.k8s.io", "apiservices"),
                    &stopping,
                    "aggregator",
                )
                .await
            else {
                break;
            };
            while let Some(event) = events.next().await {
                let object = event.object();
                let Some(name) = plinth_core::meta::name(&object).map(str::to_owned) else {
                    continue;
                };
                let local = object.pointer("/spec/service").is_none_or(Value::is_null);
                {
                    let mut all = services.lock().unwrap_or_else(PoisonError::into_inner);
                    match event.kind {
                        "ADDED" | "MODIFIED" => {
                            all.insert(name.clone(), (*object).clone());
                        }
                        "DELETED" => {
                            all.remove(&name);
                        }
                        _ => continue,
                    }
                }
                if event.kind != "DELETED" && local {
                    write_condition(
                        &registry,
                        &name,
                        condition(true, "Local", "Local APIServices are always available"),
                    )
                    .await;
                }
                let remotes = {
                    let all = services.lock().unwrap_or_else(PoisonError::into_inner);
                    all.values()
                        .filter_map(|s| remote_of(s, &identity))
                        .map(|r| ((r.group.clone(), r.version.clone()), Arc::new(r)))
                        .collect()
                };
                aggregator.set(remotes);
                if !local
                    && event.kind != "DELETED"
                    && let Some(remote) = aggregator.remotes().into_iter().find(|r| r.name == name)
                {
                    check(&registry, &remote).await;
                }
            }
            if *stopping.borrow() {
                break;
            }
        }
        checker.abort();
    });
}

/// The local APIServices (one per built-in group/version) and the
/// `extension-apiserver-authentication` ConfigMap, created at start.
pub(crate) async fn bootstrap(registry: &Client, ca_pem: &str) -> Result<(), ApiError> {
    let options = WriteOptions::internal("kube-apiserver");
    if let Some(def) = registry
        .resources
        .get("apiregistration.k8s.io", "v1", "apiservices")
    {
        let mut seen = std::collections::BTreeSet::new();
        for served in registry.resources.all() {
            let (group, version) = (
                served.group_version.group.clone(),
                served.group_version.version.clone(),
            );
            if !seen.insert((group.clone(), version.clone())) {
                continue;
            }
            let object = plinth_types::apiregistration::apiservice::local(&group, &version);
            match registry.create(&def, None, object, &options).await {
                Ok(_) => {}
                Err(e) if e.reason == plinth_core::StatusReason::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
    }
    if let Some(def) = registry.resources.get("", "v1", "configmaps") {
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"},
        "data": {
            "client-ca-file": ca_pem,
            "requestheader-client-ca-file": ca_pem,
            "requestheader-allowed-names": json!([PROXY_CLIENT]).to_string(),
            "requestheader-username-headers": json!(["X-Remote-User"]).to_string(),
            "requestheader-group-headers": json!(["X-Remote-Group"]).to_string(),
            "requestheader-extra-headers-prefix": json!(["X-Remote-Extra-"]).to_string(),
        }});
        match registry
            .create(&def, Some("kube-system"), config, &options)
            .await
        {
            Ok(_) => {}
            Err(e) if e.reason == plinth_core::StatusReason::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// An `APIResourceList` as aggregated discovery lists it (subresources left out).
pub fn aggregated_versions(remote: &Remote) -> Option<Value> {
    let list = remote
        .resources
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()?;
    let resources: Vec<Value> = list
        .get("resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| r.get("name").and_then(Value::as_str).is_some_and(|n| !n.contains('/')))
        .map(|r| {
            let mut entry = json!({
                "resource": r["name"],
                "responseKind": {"group": remote.group, "version": remote.version, "kind": r["kind"]},
                "scope": if r["namespaced"] == json!(true) { "Namespaced" } else { "Cluster" },
                "singularResource": r.get("singularName").cloned().unwrap_or(json!("")),
                "verbs": r.get("verbs").cloned().unwrap_or(json!([])),
            });
            if let Some(short) = r.get("shortNames").filter(|s| s.is_array()) {
                entry["shortNames"] = short.clone();
            }
            entry
        })
        .collect();
    Some(json!({"version": remote.version, "resources": resources, "freshness": "Current"}))
}
