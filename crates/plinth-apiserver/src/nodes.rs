//! The way from the API server to node agents (kube-apiserver's kubelet client): HTTPS to
//! the address and port a Node reports (`status.addresses`, `status.daemonEndpoints`),
//! presenting the client certificate of [`NODE_CLIENT`] signed by the cluster CA — the
//! identity a node agent trusts. The agent's serving certificate is not checked, as
//! kube-apiserver does not check it without `--kubelet-certificate-authority`.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderValue, Request as HttpRequest, Uri, header};
use axum::response::Response;
use plinth_core::ApiError;
use serde_json::Value;

use plinth_registry::resources::{NodeDialer, Objects};

/// The common name of the API server's client certificate toward node agents.
pub const NODE_CLIENT: &str = "kube-apiserver-kubelet-client";

/// Connections to node agents.
pub struct NodeProxy {
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for NodeProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeProxy").finish_non_exhaustive()
    }
}

impl NodeProxy {
    /// A proxy presenting `identity` (PEM certificate and key).
    ///
    /// # Errors
    /// An identity rustls cannot use.
    pub fn new(identity: &(String, String)) -> Result<Self, String> {
        let tls = plinth_registry::callout::client_tls("", true, identity)?;
        Ok(Self {
            tls: Some(Arc::new(tls)),
        })
    }

    /// A proxy that reaches no node (an API server without a CA key).
    pub fn none() -> Self {
        Self { tls: None }
    }

    /// `https://address:port` of the node agent of `node`.
    ///
    /// # Errors
    /// 404 for an unknown node, 400 for one that reports no address.
    pub async fn base(&self, objects: &dyn Objects, node: &str) -> Result<String, ApiError> {
        let def = objects
            .resource("", "v1", "nodes")
            .ok_or_else(|| ApiError::internal("nodes are not served"))?;
        let object = objects.get(&def, None, node).await?;
        address_of(&object).ok_or_else(|| {
            ApiError::bad_request(format!("node {node:?} reports no address for its agent"))
        })
    }

    /// GETs `path` from the agent of `node` with `headers`, on a connection that may switch
    /// protocols when `upgradable`.
    async fn send(
        &self,
        objects: &dyn Objects,
        node: &str,
        path: &str,
        headers: &[(axum::http::HeaderName, HeaderValue)],
        upgradable: bool,
    ) -> Result<axum::http::Response<hyper::body::Incoming>, ApiError> {
        let tls = self
            .tls
            .as_ref()
            .ok_or_else(|| ApiError::internal("this server has no identity toward nodes"))?;
        let base = self.base(objects, node).await?;
        let uri: Uri = format!("{base}{path}")
            .parse()
            .map_err(|e| ApiError::bad_request(format!("invalid node path: {e}")))?;
        let unreachable = |why: String| ApiError::internal(format!("Get \"{base}{path}\": {why}"));
        let dialled = if upgradable {
            plinth_registry::callout::dial_upgradable(tls, &uri).await
        } else {
            plinth_registry::callout::dial(tls, &uri).await
        };
        let mut sender = dialled.map_err(unreachable)?;
        sender
            .ready()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let mut request = HttpRequest::get(path)
            .body(Body::empty())
            .map_err(|e| ApiError::internal(e.to_string()))?;
        for (name, value) in headers {
            request.headers_mut().append(name.clone(), value.clone());
        }
        if let Some(authority) = uri.authority()
            && let Ok(value) = HeaderValue::from_str(authority.as_str())
        {
            request.headers_mut().insert(header::HOST, value);
        }
        sender
            .send_request(request)
            .await
            .map_err(|e| unreachable(e.to_string()))
    }

    /// Sends a request for `path` to the agent of `node` with the client's upgrade headers
    /// (`Connection`, `Upgrade`, `Sec-WebSocket-*`); when the agent switches protocols, so
    /// does the client's connection, and the bytes flow through both ways until either end
    /// closes. Any other answer goes back as it is.
    ///
    /// # Errors
    /// As [`NodeProxy::get`]; 400 when the client asked for no upgrade.
    pub async fn upgrade(
        &self,
        objects: &dyn Objects,
        node: &str,
        path: &str,
        incoming: &axum::http::HeaderMap,
        upgrade: Option<hyper::upgrade::OnUpgrade>,
    ) -> Result<Response, ApiError> {
        let Some(client_side) = upgrade.filter(|_| incoming.contains_key(header::UPGRADE)) else {
            return Err(ApiError::bad_request("Upgrade request required"));
        };
        let passed: Vec<_> = incoming
            .iter()
            .filter(|(name, _)| {
                let lower = name.as_str();
                lower == "connection"
                    || lower == "upgrade"
                    || lower.starts_with("sec-websocket-")
                    || lower == "x-stream-protocol-version"
            })
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        let mut response = self.send(objects, node, path, &passed, true).await?;
        if response.status() != axum::http::StatusCode::SWITCHING_PROTOCOLS {
            let (parts, body) = response.into_parts();
            return Ok(Response::from_parts(parts, Body::new(body)));
        }
        let agent_side = hyper::upgrade::on(&mut response);
        let mut answer = Response::new(Body::empty());
        *answer.status_mut() = axum::http::StatusCode::SWITCHING_PROTOCOLS;
        *answer.headers_mut() = response.headers().clone();
        tokio::spawn(async move {
            let (Ok(client), Ok(agent)) = (client_side.await, agent_side.await) else {
                return;
            };
            let mut client = hyper_util::rt::TokioIo::new(client);
            let mut agent = hyper_util::rt::TokioIo::new(agent);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut agent).await;
        });
        Ok(answer)
    }

    /// GETs `path` from the agent of `node` and streams its answer back as it is.
    ///
    /// # Errors
    /// As [`NodeProxy::base`]; 500 when the agent cannot be reached.
    pub async fn get(
        &self,
        objects: &dyn Objects,
        node: &str,
        path: &str,
    ) -> Result<Response, ApiError> {
        let response = self.send(objects, node, path, &[], false).await?;
        let (parts, body) = response.into_parts();
        Ok(Response::from_parts(parts, Body::new(body)))
    }
}

#[async_trait::async_trait]
impl NodeDialer for NodeProxy {
    async fn get(
        &self,
        objects: &dyn Objects,
        node: &str,
        path: &str,
    ) -> Result<Response, ApiError> {
        NodeProxy::get(self, objects, node, path).await
    }

    async fn upgrade(
        &self,
        objects: &dyn Objects,
        node: &str,
        path: &str,
        headers: &axum::http::HeaderMap,
        upgrade: Option<hyper::upgrade::OnUpgrade>,
    ) -> Result<Response, ApiError> {
        NodeProxy::upgrade(self, objects, node, path, headers, upgrade).await
    }
}

/// `https://<InternalIP>:<kubelet port>` of a Node object: its loopback InternalIP when it
/// has one (Plinth's agents serve there; the first may be the node's address on the pods'
/// network), else its first.
pub fn address_of(node: &Value) -> Option<String> {
    let addresses = node.pointer("/status/addresses")?.as_array()?;
    let pick = |kind: &str, loopback: bool| {
        addresses
            .iter()
            .filter(|a| a["type"] == kind)
            .filter_map(|a| a["address"].as_str())
            .find(|a| {
                !loopback
                    || a.parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            })
    };
    let address = pick("InternalIP", true)
        .or_else(|| pick("InternalIP", false))
        .or_else(|| pick("Hostname", false))?;
    let port = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_u64)
        .filter(|p| *p > 0)?;
    let host = if address.contains(':') {
        format!("[{address}]")
    } else {
        address.to_owned()
    };
    Some(format!("https://{host}:{port}"))
}
