//! Calls out to webhooks (admission and conversion): where they are (`clientConfig`), the
//! TLS trust of their `caBundle`, and one POST over HTTPS — a connection a call, the caller
//! bounding it with its timeout. A webhook named by a Service is called at one of the
//! Service's ready endpoints, with the Service's DNS name (`<svc>.<ns>.svc`) as the TLS
//! server name, as kube-apiserver's endpoint resolver does.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request as HttpRequest, Uri, header};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// Largest answer read from a webhook.
const MAX_RESPONSE: usize = 16 * 1024 * 1024;

/// Where a webhook is (`clientConfig`).
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// `clientConfig.url`.
    Url(String),
    /// `clientConfig.service` (namespace, name, path, port).
    Service {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
        /// The path on it.
        path: String,
        /// Its port.
        port: u16,
    },
}

impl Endpoint {
    /// The endpoint of a `clientConfig` (a Service reference, else the URL).
    pub fn of(client: &Value) -> Self {
        let text =
            |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
        match client.get("service").filter(|s| s.is_object()) {
            Some(service) => Self::Service {
                namespace: text(service, "namespace"),
                name: text(service, "name"),
                path: text(service, "path"),
                port: service
                    .get("port")
                    .and_then(Value::as_u64)
                    .and_then(|p| u16::try_from(p).ok())
                    .unwrap_or(443),
            },
            None => Self::Url(text(client, "url")),
        }
    }
}

/// The TLS client configuration trusting `ca_bundle` (base64 PEM), or the system's roots.
pub fn tls(ca_bundle: &str) -> Result<rustls::ClientConfig, String> {
    let mut config = trusting(ca_bundle, false)?.with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A client configuration that trusts `ca_bundle` as kube does ([`BundleVerifier`]), the
/// system's roots when it is empty, or anything with `skip_verify`.
fn trusting(
    ca_bundle: &str,
    skip_verify: bool,
) -> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    if skip_verify {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider))));
    }
    if ca_bundle.is_empty() {
        return Ok(builder.with_root_certificates(roots(ca_bundle)?));
    }
    let bundle = bundle(ca_bundle)?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in &bundle {
        roots
            .add(cert.clone())
            .map_err(|e| format!("caBundle: {e}"))?;
    }
    let webpki =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| format!("caBundle: {e}"))?;
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(BundleVerifier { webpki, bundle })))
}

/// The certificates a `caBundle` (base64 PEM) trusts, or the system's when it is empty.
pub fn roots(ca_bundle: &str) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    if ca_bundle.is_empty() {
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
    } else {
        for cert in bundle(ca_bundle)? {
            roots.add(cert).map_err(|e| format!("caBundle: {e}"))?;
        }
    }
    Ok(roots)
}

/// The certificates of a (base64) `caBundle`.
fn bundle(ca_bundle: &str) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    let pem = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, ca_bundle)
        .map_err(|e| format!("caBundle is not base64: {e}"))?;
    rustls::pki_types::pem::PemObject::pem_slice_iter(&pem)
        .map(|cert| cert.map_err(|e| format!("caBundle: {e}")))
        .collect()
}

impl Endpoint {
    /// Where requests go, as a URL: the given one, or a Service's
    /// `https://<svc>.<ns>.svc:<port><path>` (its DNS name is the TLS server name).
    /// The path is cleaned as kube-apiserver's REST client joins it (`//failing` is
    /// `/failing`, a trailing `/` goes).
    pub fn base(&self) -> String {
        match self {
            Endpoint::Url(url) => {
                let after_scheme = url.find("://").map_or(0, |i| i + 3);
                let path_at = url[after_scheme..]
                    .find(['/', '?'])
                    .map_or(url.len(), |i| after_scheme + i);
                let (origin, rest) = url.split_at(path_at);
                let (path, query) = rest.split_at(rest.find('?').unwrap_or(rest.len()));
                format!("{origin}{}{query}", joined(path))
            }
            Endpoint::Service {
                namespace,
                name,
                path,
                port,
            } => format!("https://{name}.{namespace}.svc:{port}{}", joined(path)),
        }
    }
}

/// `path` as Go's `path.Join` leaves it: no empty or `.` segments, `..` applied, no trailing
/// `/`; empty stays empty.
fn joined(path: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                kept.pop();
            }
            other => kept.push(other),
        }
    }
    if kept.is_empty() {
        return if path.is_empty() {
            String::new()
        } else {
            "/".into()
        };
    }
    format!("/{}", kept.join("/"))
}

/// The webhook's URL ([`Endpoint::base`]), with kube's `timeout` query parameter.
pub fn url(endpoint: &Endpoint, timeout: Duration) -> String {
    let base = endpoint.base();
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}timeout={}s", timeout.as_secs())
}

/// The address to dial for `endpoint`: a Service's endpoint, `None` for a URL (its host).
///
/// # Errors
/// Why the Service has nothing to call.
pub async fn address(
    endpoint: &Endpoint,
    services: &dyn crate::services::ServiceResolver,
) -> Result<Option<SocketAddr>, crate::services::Unresolved> {
    match endpoint {
        Endpoint::Url(_) => Ok(None),
        Endpoint::Service {
            namespace,
            name,
            port,
            ..
        } => services.resolve(namespace, name, *port).await.map(Some),
    }
}

/// Idle connections kept per webhook (its TLS trust and authority) for the next calls.
const IDLE_PER_WEBHOOK: usize = 32;

/// One idle HTTP/1 connection's sending half.
pub type Sender = hyper::client::conn::http1::SendRequest<Body>;

/// Idle HTTP/1 connections by webhook: a call takes one (or dials), and gives it back when
/// the answer was read whole — a TLS handshake per connection, not per call.
/// (Each entry holds the TLS configuration it was dialled with, so that its address, the
/// key, cannot be reused by another configuration while the entry lives.)
type Pool = std::collections::HashMap<(usize, String), Vec<(Arc<rustls::ClientConfig>, Sender)>>;

fn idle() -> &'static std::sync::Mutex<Pool> {
    static IDLE: std::sync::OnceLock<std::sync::Mutex<Pool>> = std::sync::OnceLock::new();
    IDLE.get_or_init(Default::default)
}

/// A TLS connection to `uri`'s host (at `at`, when given: a Service's endpoint), trusting
/// (and presenting) what `tls` says.
async fn connect(
    tls: &Arc<rustls::ClientConfig>,
    uri: &Uri,
    at: Option<SocketAddr>,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let host = uri.host().ok_or("the URL has no host")?.to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let address = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let tcp = match at {
        Some(at) => tokio::net::TcpStream::connect(at)
            .await
            .map_err(|e| format!("dial tcp {at}: {e}")),
        None => tokio::net::TcpStream::connect((address.as_str(), port))
            .await
            .map_err(|e| format!("dial tcp {host}:{port}: {e}")),
    }?;
    let _ = tcp.set_nodelay(true);
    let server_name = rustls::pki_types::ServerName::try_from(address.clone())
        .map_err(|e| format!("invalid server name {host}: {e}"))?;
    tokio_rustls::TlsConnector::from(tls.clone())
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))
}

/// An HTTP/1 connection over TLS to `uri`'s host, trusting (and presenting) what `tls` says.
pub async fn dial(tls: &Arc<rustls::ClientConfig>, uri: &Uri) -> Result<Sender, String> {
    dial_at(tls, uri, None).await
}

/// As [`dial`], to `at` when given (a Service's endpoint; `uri`'s host stays the TLS name).
pub async fn dial_at(
    tls: &Arc<rustls::ClientConfig>,
    uri: &Uri,
    at: Option<SocketAddr>,
) -> Result<Sender, String> {
    let stream = connect(tls, uri, at).await?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// As [`dial`], on a connection that may switch protocols (`101`).
pub async fn dial_upgradable(tls: &Arc<rustls::ClientConfig>, uri: &Uri) -> Result<Sender, String> {
    let stream = connect(tls, uri, None).await?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    Ok(sender)
}

/// POSTs `body` (JSON) to `url` (at `at`, when given) over TLS trusting `tls`; returns the
/// answer's body.
pub async fn post(
    tls: &Arc<rustls::ClientConfig>,
    url: &str,
    at: Option<SocketAddr>,
    body: Vec<u8>,
) -> Result<Vec<u8>, String> {
    let uri: Uri = url.parse().map_err(|e| format!("invalid URL: {e}"))?;
    let authority = uri.authority().map_or("", |a| a.as_str()).to_owned();
    let pooled = match at {
        Some(at) => format!("{authority}@{at}"),
        None => authority.clone(),
    };
    let key = (Arc::as_ptr(tls) as usize, pooled);
    let reused = {
        let mut idle = idle()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut found = None;
        if let Some(senders) = idle.get_mut(&key) {
            while let Some((_, sender)) = senders.pop() {
                if !sender.is_closed() {
                    found = Some(sender);
                    break;
                }
            }
        }
        found
    };
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let request = || {
        HttpRequest::post(path.clone())
            .header(header::HOST, authority.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json")
            .body(Body::from(body.clone()))
            .map_err(|e| e.to_string())
    };
    // A kept connection the server closed meanwhile fails at once: then a fresh one.
    let mut attempt = match reused {
        Some(mut sender) => match sender.ready().await {
            Ok(()) => match sender.send_request(request()?).await {
                Ok(response) => Some((sender, response)),
                Err(_) => None,
            },
            Err(_) => None,
        },
        None => None,
    };
    if attempt.is_none() {
        let mut sender = dial_at(tls, &uri, at).await?;
        sender.ready().await.map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request()?)
            .await
            .map_err(|e| e.to_string())?;
        attempt = Some((sender, response));
    }
    let Some((sender, response)) = attempt else {
        return Err("no connection".into());
    };
    let status = response.status();
    let bytes = axum::body::to_bytes(Body::new(response.into_body()), MAX_RESPONSE)
        .await
        .map_err(|e| format!("reading the response: {e}"))?;
    if !sender.is_closed() {
        let mut idle = idle()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let senders = idle.entry(key).or_default();
        if senders.len() < IDLE_PER_WEBHOOK {
            senders.push((tls.clone(), sender));
        }
    }
    if !status.is_success() {
        return Err(format!(
            "the server responded with the status code {}: {}",
            status.as_u16(),
            String::from_utf8_lossy(&bytes).trim()
        ));
    }
    Ok(bytes.to_vec())
}

/// Accepts any server certificate (`insecureSkipTLSVerify: true`).
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Verifies a server as Go's `crypto/x509` does for kube-apiserver: a chain to the caBundle
/// (webpki), or else the caBundle's own certificate presented as the server's — a self-signed
/// `CA:TRUE` certificate, as `openssl req -x509` makes by default, which webpki refuses as an
/// end entity ("CaUsedAsEndEntity") and Go accepts — when it names the server and is current.
/// Anything else webpki refuses stays refused.
#[derive(Debug)]
struct BundleVerifier {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    bundle: Vec<rustls::pki_types::CertificateDer<'static>>,
}

impl rustls::client::danger::ServerCertVerifier for BundleVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let refused =
            match self
                .webpki
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
            {
                Ok(verified) => return Ok(verified),
                Err(e) => e,
            };
        if !self
            .bundle
            .iter()
            .any(|trusted| trusted.as_ref() == end_entity.as_ref())
        {
            return Err(refused);
        }
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&parsed, server_name)?;
        let bad = || rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding);
        let (_, cert) =
            x509_parser::parse_x509_certificate(end_entity.as_ref()).map_err(|_| bad())?;
        let at = i64::try_from(now.as_secs())
            .ok()
            .and_then(|secs| x509_parser::time::ASN1Time::from_timestamp(secs).ok())
            .ok_or_else(bad)?;
        if at < cert.validity().not_before {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidYet,
            ));
        }
        if at > cert.validity().not_after {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Expired,
            ));
        }
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// The TLS configuration toward an extension server or a node agent: `ca_bundle` trusted (or
/// nothing checked), `identity` (PEM certificate and key) presented.
pub fn client_tls(
    ca_bundle: &str,
    skip_verify: bool,
    identity: &(String, String),
) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject;
    let builder = trusting(ca_bundle, skip_verify)?;
    let chain: Vec<rustls::pki_types::CertificateDer<'static>> =
        rustls::pki_types::CertificateDer::pem_slice_iter(identity.0.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(identity.1.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut config = builder
        .with_client_auth_cert(chain, key)
        .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Sends `request` over HTTP/1 to `address` (`ip:port`: a pod, as the API server's pod and
/// Service proxies reach one), over TLS without verifying the pod's certificate when `tls`
/// (an `https:` proxy: kube-apiserver's proxy does not verify pods either), and returns the
/// answer as it comes.
///
/// # Errors
/// kube's wording of a failed dial or exchange (`dial tcp …: connection refused`).
pub async fn forward(
    address: &str,
    tls: bool,
    request: HttpRequest<Body>,
) -> Result<axum::http::Response<hyper::body::Incoming>, String> {
    let tcp = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| format!("dial tcp {address}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    if !tls {
        return exchange(TokioIo::new(tcp), request).await;
    }
    let mut config = trusting("", true)?.with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let host = address
        .rsplit_once(':')
        .map_or(address, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let server_name = rustls::pki_types::ServerName::try_from(host)
        .map_err(|e| format!("invalid server name {address}: {e}"))?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    exchange(TokioIo::new(stream), request).await
}

/// One request over `io`, an HTTP/1 connection.
async fn exchange<T>(
    io: TokioIo<T>,
    request: HttpRequest<Body>,
) -> Result<axum::http::Response<hyper::body::Incoming>, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_paths_are_joined_as_kube_joins_them() {
        let url = |u: &str| Endpoint::Url(u.to_owned()).base();
        assert_eq!(
            url("https://127.0.0.1:9443//failing"),
            "https://127.0.0.1:9443/failing"
        );
        assert_eq!(url("https://h/validate/"), "https://h/validate");
        assert_eq!(url("https://h/a/./b/../c"), "https://h/a/c");
        assert_eq!(url("https://h"), "https://h");
        assert_eq!(url("https://h/"), "https://h/");
        let service = Endpoint::Service {
            namespace: "system".into(),
            name: "hooks".into(),
            path: "//mutate".into(),
            port: 443,
        };
        assert_eq!(service.base(), "https://hooks.system.svc:443/mutate");
    }
}
