//! The agent's own HTTPS server, which the API server's `pods/<name>/log` reaches: the API
//! server's node client identity (a certificate of the cluster CA, which comes from the
//! agent's kubeconfig) may use it all; anyone else as the kubelet lets them (see `authn`).

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;

use crate::agent::Agent;
use crate::logs;

/// The common name of the API server's client certificate toward node agents.
pub(crate) const API_SERVER_CLIENT: &str = "kube-apiserver-kubelet-client";

type Body = BoxBody<Bytes, std::io::Error>;

/// The TLS configuration: a self-signed serving certificate, client certificates from
/// `roots` (DER) taken, none also (then a bearer token must say who calls).
pub(crate) fn tls(name: &str, roots: &[Vec<u8>]) -> Result<Arc<rustls::ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut store = rustls::RootCertStore::empty();
    for der in roots {
        store
            .add(rustls::pki_types::CertificateDer::from(der.clone()))
            .map_err(|e| format!("cluster CA: {e}"))?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(store),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .map_err(|e| format!("client verifier: {e}"))?;
    let names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        name.to_owned(),
    ];
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = rcgen::CertificateParams::new(names)
        .and_then(|p| p.self_signed(&key))
        .map_err(|e| e.to_string())?;
    let key_der = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der())
        .map_err(|e| e.to_string())?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert.der().clone()], key_der)
        .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Who a client certificate names: its common name and organizations.
fn peer(der: Option<&[u8]>) -> crate::authn::Peer {
    let Some((_, cert)) = der.and_then(|d| x509_parser::parse_x509_certificate(d).ok()) else {
        return crate::authn::Peer::None;
    };
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or("")
        .to_owned();
    if name == API_SERVER_CLIENT {
        return crate::authn::Peer::ApiServer;
    }
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    crate::authn::Peer::Certificate(name, groups)
}

/// Serves until `stopping`.
pub(crate) async fn serve(
    agent: Arc<Agent>,
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let port = listener.local_addr().map_or(0, |a| a.port());
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopping.wait_for(|s| *s) => return,
        };
        let Ok((tcp, _)) = accepted else { continue };
        let acceptor = acceptor.clone();
        let agent = agent.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let caller = peer(
                stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| c.as_ref()),
            );
            let service = hyper::service::service_fn(move |request| {
                let agent = agent.clone();
                let caller = caller.clone();
                async move {
                    Ok::<_, std::convert::Infallible>(route(&agent, request, &caller, port).await)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

fn plain(code: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(text))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = code;
    response
}

/// `101 Switching Protocols` to `protocol`.
fn switching(protocol: &'static str) -> Response<Body> {
    let mut response = plain(StatusCode::SWITCHING_PROTOCOLS, String::new());
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("Upgrade"),
    );
    headers.insert(
        hyper::header::UPGRADE,
        hyper::header::HeaderValue::from_static(protocol),
    );
    response
}

/// A kube `Status` error, as the kubelet answers.
fn status(code: StatusCode, message: &str) -> Response<Body> {
    let reason = match code {
        StatusCode::BAD_REQUEST => "BadRequest",
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::FORBIDDEN => "Forbidden",
        _ => "InternalError",
    };
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16()});
    let mut response = plain(code, body.to_string());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// A response of `content_type`.
fn typed(code: StatusCode, text: String, content_type: &'static str) -> Response<Body> {
    let mut response = plain(code, text);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

/// The kubelet's read-only paths ([`crate::kubelet`]), if `path` is one.
async fn kubelet_path(agent: &Agent, path: &str, port: u16) -> Option<Response<Body>> {
    Some(match path {
        "/pods" | "/pods/" => match crate::kubelet::pods(agent).await {
            Ok(list) => typed(StatusCode::OK, list.to_string(), "application/json"),
            Err(e) => status(StatusCode::INTERNAL_SERVER_ERROR, &e),
        },
        "/configz" => typed(
            StatusCode::OK,
            crate::kubelet::configz(agent, port).to_string(),
            "application/json",
        ),
        "/metrics" => typed(
            StatusCode::OK,
            crate::kubelet::metrics(agent),
            "text/plain; version=0.0.4",
        ),
        "/logs" | "/logs/" => typed(
            StatusCode::OK,
            crate::kubelet::logs(agent),
            "text/html; charset=utf-8",
        ),
        _ => return None,
    })
}

async fn route(
    agent: &Agent,
    mut request: Request<Incoming>,
    caller: &crate::authn::Peer,
    port: u16,
) -> Response<Body> {
    let path = request.uri().path().to_owned();
    let authorization = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if let Err(refused) =
        crate::authn::check(agent, caller, request.method(), &path, authorization).await
    {
        let code = if refused.forbidden {
            StatusCode::FORBIDDEN
        } else {
            StatusCode::UNAUTHORIZED
        };
        // The kubelet answers these in plain text.
        return plain(code, refused.message);
    }
    let query: Vec<(String, String)> = request
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let get = |key: &str| {
        query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let flag = |key: &str| get(key).is_some_and(|v| v == "true" || v == "1");
    if path == "/healthz" {
        return plain(StatusCode::OK, "ok".into());
    }
    if path == "/stats/summary" {
        let mut response = plain(
            StatusCode::OK,
            agent.stats.summary(&agent.config.name).to_string(),
        );
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        return response;
    }
    if let Some(response) = kubelet_path(agent, &path, port).await {
        return response;
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if let ["portforward", namespace, pod] = parts.as_slice() {
        return port_forward(agent, &mut request, namespace, pod);
    }
    if let [kind @ ("exec" | "attach"), namespace, pod, container] = parts.as_slice() {
        let running = match agent.pods.running(namespace, pod, container) {
            Ok(running) => running,
            Err(message) => return status(StatusCode::BAD_REQUEST, &message),
        };
        // The API server passes its own names on; the kubelet's API has `input`, `output`,
        // `error` (what a client calling the kubelet itself sends).
        let streams = crate::exec::Streams {
            stdin: flag("stdin") || flag("input"),
            stdout: flag("stdout") || flag("output"),
            stderr: flag("stderr") || flag("error"),
            tty: flag("tty"),
        };
        let command: Vec<String> = query
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.clone())
            .collect();
        // client-go's SPDY executor (the e2e suite's `ExecWithOptions`).
        let spdy = request
            .headers()
            .get(hyper::header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("SPDY/3.1"));
        if spdy && *kind == "exec" {
            let versions: Vec<String> = request
                .headers()
                .get_all("x-stream-protocol-version")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .map(|v| v.trim().to_owned())
                .collect();
            let offered: Vec<&str> = versions.iter().map(String::as_str).collect();
            let Some(protocol) = crate::spdy_exec::pick(&offered) else {
                return status(
                    StatusCode::FORBIDDEN,
                    "no supported remotecommand version (v4.channel.k8s.io, v3.channel.k8s.io, v2.channel.k8s.io, channel.k8s.io) was offered",
                );
            };
            let upgrade = hyper::upgrade::on(&mut request);
            let argv = crate::probes::in_sandbox(
                &command,
                running.sandbox_pid,
                &running.clients,
                running.security.as_ref(),
            );
            let env = running.env.clone();
            tokio::spawn(async move {
                let Ok(upgraded) = upgrade.await else { return };
                crate::spdy_exec::serve(upgraded, protocol, argv, command, env, streams).await;
            });
            let mut response = switching("SPDY/3.1");
            response.headers_mut().insert(
                "x-stream-protocol-version",
                hyper::header::HeaderValue::from_static(protocol),
            );
            return response;
        }
        let offered = header_text(&request, "sec-websocket-protocol");
        let key = websocket_accept(&request);
        let (Some(protocol), Some(accept)) = (crate::exec::pick_protocol(&offered), key) else {
            return status(
                StatusCode::BAD_REQUEST,
                "a WebSocket upgrade with one of the subprotocols v5.channel.k8s.io, v4.channel.k8s.io is required",
            );
        };
        let upgrade = hyper::upgrade::on(&mut request);
        let kind = (*kind).to_owned();
        let log = running.dir.join(format!("{}.log", running.run));
        tokio::spawn(async move {
            let Ok(upgraded) = upgrade.await else { return };
            if kind == "exec" {
                let argv = crate::probes::in_sandbox(
                    &command,
                    running.sandbox_pid,
                    &running.clients,
                    running.security.as_ref(),
                );
                crate::exec::exec(upgraded, protocol, argv, command, running.env, streams).await;
            } else {
                crate::exec::attach(upgraded, log, running.stdin, running.stdin_once, streams)
                    .await;
            }
        });
        let mut response = switching("websocket");
        let headers = response.headers_mut();
        if let Ok(v) = hyper::header::HeaderValue::from_str(&accept) {
            headers.insert("sec-websocket-accept", v);
        }
        headers.insert(
            "sec-websocket-protocol",
            hyper::header::HeaderValue::from_static(protocol),
        );
        return response;
    }
    let ["containerLogs", namespace, pod, container] = parts.as_slice() else {
        return status(StatusCode::NOT_FOUND, &format!("no such path: {path}"));
    };
    let log = match agent
        .pods
        .log_file(namespace, pod, container, flag("previous"))
    {
        Ok(log) => log,
        Err(message) => return status(StatusCode::BAD_REQUEST, &message),
    };
    let number = |key: &str| get(key).and_then(|v| v.parse::<i64>().ok());
    let since = number("sinceSeconds")
        .map(|s| {
            let at = crate::clock::now() - s;
            plinth_core::meta::format_time(at)
        })
        .or_else(|| get("sinceTime").map(str::to_owned));
    let options = logs::Options {
        follow: flag("follow"),
        timestamps: flag("timestamps"),
        tail_lines: number("tailLines").and_then(|n| usize::try_from(n).ok()),
        limit_bytes: number("limitBytes").and_then(|n| usize::try_from(n).ok()),
        since,
    };
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    tokio::spawn(logs::read(log, options, sender));
    let websocket = request
        .headers()
        .get(hyper::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if websocket {
        return log_websocket(&mut request, receiver);
    }
    // The last piece is sent before the body's end (a pause between them, as the kubelet's
    // flushed writes have): kube-apiserver's WebSocket log stream drops the bytes of a read
    // that also reports the end, which the two arriving together make Go's reader do.
    let stream = futures::stream::unfold(Some(receiver), |receiver| async move {
        let mut receiver = receiver?;
        match receiver.recv().await {
            Some(chunk) => Some((chunk.map(Frame::data), Some(receiver))),
            None => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                None
            }
        }
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    response
}

/// The text of a request's header (empty when missing or not text).
fn header_text(request: &Request<Incoming>, name: &str) -> String {
    request
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// The `Sec-WebSocket-Accept` answering a WebSocket upgrade's key, if it has one.
fn websocket_accept(request: &Request<Incoming>) -> Option<String> {
    request
        .headers()
        .get("sec-websocket-key")
        .map(|k| accept_key(k.as_bytes()))
}

/// A log over a WebSocket, as kube-apiserver streams one: each chunk a binary message
/// (`binary.k8s.io`, also when no subprotocol is asked for) or base64 text
/// (`base64.binary.k8s.io`), then a close.
fn log_websocket(
    request: &mut Request<Incoming>,
    mut chunks: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, std::io::Error>>,
) -> Response<Body> {
    use base64::Engine;
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let offered = header_text(request, "sec-websocket-protocol");
    let Some(accept) = websocket_accept(request) else {
        return status(
            StatusCode::BAD_REQUEST,
            "a WebSocket upgrade needs a Sec-WebSocket-Key",
        );
    };
    let chosen = offered
        .split(',')
        .map(str::trim)
        .find(|p| *p == "binary.k8s.io" || *p == "base64.binary.k8s.io");
    let base64 = chosen == Some("base64.binary.k8s.io");
    let upgrade = hyper::upgrade::on(request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            TokioIo::new(upgraded),
            tokio_tungstenite::tungstenite::protocol::Role::Server,
            None,
        )
        .await;
        while let Some(Ok(chunk)) = chunks.recv().await {
            let message = if base64 {
                Message::Text(
                    base64::engine::general_purpose::STANDARD
                        .encode(&chunk)
                        .into(),
                )
            } else {
                Message::Binary(chunk)
            };
            if ws.send(message).await.is_err() {
                return;
            }
        }
        let _ = ws.close(None).await;
    });
    let mut response = switching("websocket");
    let headers = response.headers_mut();
    if let Ok(v) = hyper::header::HeaderValue::from_str(&accept) {
        headers.insert("sec-websocket-accept", v);
    }
    if let Some(protocol) = chosen
        && let Ok(v) = hyper::header::HeaderValue::from_str(protocol)
    {
        headers.insert("sec-websocket-protocol", v);
    }
    response
}

/// `kubectl port-forward`: SPDY/3.1 for `portforward.k8s.io`, either as the connection's
/// upgrade or tunnelled in WebSocket binary messages (subprotocol
/// `SPDY/3.1+portforward.k8s.io`, what kubectl 1.31+ asks for first).
fn port_forward(
    agent: &Agent,
    request: &mut Request<Incoming>,
    namespace: &str,
    pod: &str,
) -> Response<Body> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let upgrade = header("upgrade");
    let tunnelled = upgrade.eq_ignore_ascii_case("websocket")
        && header("sec-websocket-protocol")
            .split(',')
            .any(|p| p.trim() == crate::spdy::TUNNEL_PROTOCOL);
    let key = websocket_accept(request);
    let spdy = upgrade.eq_ignore_ascii_case("SPDY/3.1");
    if !(spdy || tunnelled && key.is_some()) {
        return status(
            StatusCode::BAD_REQUEST,
            "port forwarding needs an upgrade to SPDY/3.1, or to a WebSocket with the subprotocol SPDY/3.1+portforward.k8s.io",
        );
    }
    let Some(reach) = agent.pods.reach(namespace, pod) else {
        return status(
            StatusCode::NOT_FOUND,
            &format!("pod {namespace}/{pod} does not run on this node"),
        );
    };
    let ip = std::sync::Arc::new(reach);
    let upgraded = hyper::upgrade::on(request);
    let label = format!("{pod}_{namespace}");
    tokio::spawn(async move {
        let Ok(upgraded) = upgraded.await else { return };
        if tunnelled {
            crate::spdy::serve_tunnelled(upgraded, ip, label).await;
        } else {
            crate::spdy::serve(TokioIo::new(upgraded), ip, label).await;
        }
    });
    let mut response = switching(if tunnelled { "websocket" } else { "SPDY/3.1" });
    let headers = response.headers_mut();
    if tunnelled {
        if let Some(Ok(accept)) = key.map(|k| hyper::header::HeaderValue::from_str(&k)) {
            headers.insert("sec-websocket-accept", accept);
        }
        headers.insert(
            "sec-websocket-protocol",
            hyper::header::HeaderValue::from_static(crate::spdy::TUNNEL_PROTOCOL),
        );
    } else {
        headers.insert(
            "x-stream-protocol-version",
            hyper::header::HeaderValue::from_static(crate::spdy::PROTOCOL),
        );
    }
    response
}

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key` (RFC 6455).
fn accept_key(key: &[u8]) -> String {
    use base64::Engine;
    let mut input = key.to_vec();
    input.extend_from_slice(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}
