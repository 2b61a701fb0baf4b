//! `pods/<name>[:port]/proxy/<path>` and `services/<name>[:port]/proxy/<path>`: the API
//! server forwards the request to the pod's address (for a Service, to one of its ready
//! endpoints) over HTTP (HTTPS for an `https:` scheme) and streams the answer back, as kube-apiserver's proxies do.

use axum::body::Body;
use axum::http::{HeaderValue, Request as HttpRequest, header};
use plinth_core::ApiError;
use serde_json::Value;

use plinth_registry::ListOptions;
use plinth_registry::resources::ConnectRequest;

/// Headers not passed on: hop-by-hop ones and the client's credentials for this server.
const DROPPED: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "host",
    "authorization",
];

/// The largest HTML page whose links the proxy rewrites (larger ones pass as they are).
const MAX_REWRITTEN: usize = 16 << 20;

/// The path of the proxy `request` came through, `/api/v1/namespaces/<ns>/<plural>/<name>/proxy`
/// (the name as given: `[scheme:]name[:port]`).
fn proxy_prefix(request: &ConnectRequest<'_>, plural: &str) -> String {
    let object = &request.object;
    let mut name = plinth_core::meta::name(object).unwrap_or("").to_owned();
    if !request.scheme.is_empty() {
        name = format!("{}:{name}", request.scheme);
    }
    if !request.port.is_empty() {
        name = format!("{name}:{}", request.port);
    }
    format!(
        "/api/v1/namespaces/{}/{plural}/{name}/proxy",
        plinth_core::meta::namespace(object).unwrap_or("default")
    )
}

/// Forwards `request` to `address` (`ip:port`), its path the proxy's tail and its query;
/// links of an HTML answer and a redirect lead back through the proxy at `prefix`.
async fn forward(
    request: &ConnectRequest<'_>,
    address: &str,
    prefix: &str,
) -> Result<axum::response::Response, ApiError> {
    let tls = match request.scheme.as_str() {
        "" | "http" => false,
        "https" => true,
        other => {
            return Err(ApiError::bad_request(format!(
                "unsupported scheme {other:?}: the proxy reaches pods over http or https"
            )));
        }
    };
    let path = super::proxied_path(request);
    let mut outgoing = HttpRequest::builder()
        .method(request.method.clone())
        .uri(&path)
        .body(Body::from(request.body.clone()))
        .map_err(|e| ApiError::bad_request(format!("invalid proxy path: {e}")))?;
    for (name, value) in &request.headers {
        let lower = name.as_str();
        if !DROPPED.contains(&lower) && !lower.starts_with("impersonate-") {
            outgoing.headers_mut().append(name.clone(), value.clone());
        }
    }
    if let Ok(host) = HeaderValue::from_str(address) {
        outgoing.headers_mut().insert(header::HOST, host);
    }
    let answer = plinth_registry::callout::forward(address, tls, outgoing)
        .await
        .map_err(|e| ApiError::unavailable(format!("error trying to reach service: {e}")))?;
    let (mut parts, body) = answer.into_parts();
    if let Some(location) = parts
        .headers
        .get(header::LOCATION)
        .and_then(|l| l.to_str().ok())
        .map(|l| super::proxy_rewrite::url(l, prefix))
        && let Ok(location) = HeaderValue::from_str(&location)
    {
        parts.headers.insert(header::LOCATION, location);
    }
    let html = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .and_then(|t| t.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/html"));
    let encoded = parts
        .headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|e| e.as_bytes() != b"identity");
    let small = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|l| l.to_str().ok()?.parse::<usize>().ok())
        .is_none_or(|l| l <= MAX_REWRITTEN);
    if !html || encoded || !small {
        return Ok(axum::response::Response::from_parts(parts, Body::new(body)));
    }
    let page = axum::body::to_bytes(Body::new(body), MAX_REWRITTEN)
        .await
        .map_err(|e| ApiError::unavailable(format!("error trying to reach service: {e}")))?;
    let page = match std::str::from_utf8(&page) {
        Ok(text) => axum::body::Bytes::from(super::proxy_rewrite::html(text, prefix)),
        Err(_) => page,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::TRANSFER_ENCODING);
    Ok(axum::response::Response::from_parts(
        parts,
        Body::from(page),
    ))
}

/// `pods/<name>[:port]/proxy/<path>`: to the pod's IP, at the port given, else its first
/// container port, else 80.
pub(crate) fn pod(
    request: ConnectRequest<'_>,
) -> futures::future::BoxFuture<'_, Result<axum::response::Response, ApiError>> {
    Box::pin(async move {
        let pod = &request.object;
        let ip = pod["status"]["podIP"].as_str().unwrap_or("");
        if ip.parse::<std::net::IpAddr>().is_err() {
            return Err(ApiError::bad_request("address not allowed"));
        }
        let port = if request.port.is_empty() {
            pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|c| c.pointer("/ports/0/containerPort").and_then(Value::as_i64))
                .unwrap_or(80)
                .to_string()
        } else {
            request.port.clone()
        };
        let prefix = proxy_prefix(&request, "pods");
        forward(&request, &format!("{ip}:{port}"), &prefix).await
    })
}

/// `services/<name>[:port]/proxy/<path>`: to one of the Service's ready endpoints for the
/// port named (by name or number; the only port when not given).
pub(crate) fn service(
    request: ConnectRequest<'_>,
) -> futures::future::BoxFuture<'_, Result<axum::response::Response, ApiError>> {
    Box::pin(async move {
        let service = &request.object;
        let name = plinth_core::meta::name(service).unwrap_or("").to_owned();
        let namespace = plinth_core::meta::namespace(service)
            .unwrap_or("")
            .to_owned();
        let ports = service["spec"]["ports"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let wanted = request.port.as_str();
        let port = ports.iter().find(|p| {
            wanted.is_empty() && ports.len() == 1
                || p["name"].as_str() == Some(wanted)
                || p["port"].as_i64().map(|n| n.to_string()).as_deref() == Some(wanted)
        });
        let Some(port) = port else {
            return Err(ApiError::unavailable(format!(
                "no endpoints available for service {name:?}"
            )));
        };
        let port_name = port["name"].as_str().unwrap_or("");
        let slices = request
            .objects
            .resource("discovery.k8s.io", "v1", "endpointslices")
            .ok_or_else(|| ApiError::internal("endpointslices are not served"))?;
        let options = ListOptions {
            labels: plinth_core::selector::LabelSelector::parse(&format!(
                "kubernetes.io/service-name={name}"
            ))
            .map_err(|e| ApiError::internal(e.to_string()))?,
            ..ListOptions::default()
        };
        let list = request
            .objects
            .list(&slices, Some(&namespace), &options)
            .await?;
        let mut addresses = Vec::new();
        for slice in list["items"].as_array().into_iter().flatten() {
            let Some(target) = slice["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"].as_str().unwrap_or("") == port_name)
                .and_then(|p| p["port"].as_i64())
            else {
                continue;
            };
            for endpoint in slice["endpoints"].as_array().into_iter().flatten() {
                if endpoint.pointer("/conditions/ready") == Some(&Value::Bool(false)) {
                    continue;
                }
                for ip in endpoint["addresses"].as_array().into_iter().flatten() {
                    if let Some(ip) = ip.as_str() {
                        addresses.push(format!("{ip}:{target}"));
                    }
                }
            }
        }
        if addresses.is_empty() {
            return Err(ApiError::unavailable(format!(
                "no endpoints available for service {name:?}"
            )));
        }
        // Round robin over the ready endpoints.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let pick = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % addresses.len();
        forward(
            &request,
            &addresses[pick],
            &proxy_prefix(&request, "services"),
        )
        .await
    })
}
