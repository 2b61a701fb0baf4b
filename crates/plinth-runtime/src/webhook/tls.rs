//! The serving certificate: from PEM files (read again when they change — cert-manager and
//! kubelet rotate by rewriting them) or from a `kubernetes.io/tls` Secret (read again every
//! few seconds), swapped in for new connections without a restart.

use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::WebhookError;

/// How often a Secret is read again.
const SECRET_REFRESH: Duration = Duration::from_secs(10);

/// Where the serving certificate comes from.
///
/// # Example
///
/// ```no_run
/// use plinth_runtime::webhook::TlsSource;
/// // Files a Secret volume mounts (re-read when they change: a renewed certificate is served
/// // without a restart) ...
/// let mounted = TlsSource::files("/tls/tls.crt", "/tls/tls.key");
/// // ... or the Secret itself, read through the API.
/// # fn client() -> kube::Client { unimplemented!() }
/// let read = TlsSource::Secret {
///     client: client(),
///     namespace: "my-operator".into(),
///     name: "webhook-tls".into(),
/// };
/// ```
#[derive(Clone)]
pub enum TlsSource {
    /// PEM files: the certificate chain and its private key.
    Files {
        /// `tls.crt`.
        cert: PathBuf,
        /// `tls.key`.
        key: PathBuf,
    },
    /// A Secret with `tls.crt` and `tls.key`.
    Secret {
        /// A client that may read it.
        client: kube::Client,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl std::fmt::Debug for TlsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Files { cert, key } => f
                .debug_struct("Files")
                .field("cert", cert)
                .field("key", key)
                .finish(),
            Self::Secret {
                namespace, name, ..
            } => f
                .debug_struct("Secret")
                .field("namespace", namespace)
                .field("name", name)
                .finish_non_exhaustive(),
        }
    }
}

impl TlsSource {
    /// PEM files.
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::webhook::TlsSource;
    /// let source = TlsSource::files("/tls/tls.crt", "/tls/tls.key");
    /// assert!(matches!(source, TlsSource::Files { .. }));
    /// ```
    pub fn files(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        Self::Files {
            cert: cert.into(),
            key: key.into(),
        }
    }

    /// The rustls configuration serving the current certificate, kept current.
    pub(super) async fn server_config(self) -> Result<Arc<rustls::ServerConfig>, WebhookError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (cert, key) = self.read().await?;
        let resolver = Arc::new(Resolver {
            current: RwLock::new(certified(&provider, &cert, &key)?),
            files: match &self {
                Self::Files { cert, key } => Some(FilesState {
                    cert: cert.clone(),
                    key: key.clone(),
                    seen: RwLock::new(modified(cert, key)),
                }),
                Self::Secret { .. } => None,
            },
            provider: provider.clone(),
        });
        if let Self::Secret { .. } = &self {
            let (resolver, source) = (resolver.clone(), self.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(SECRET_REFRESH).await;
                    match source.read().await {
                        Ok((cert, key)) => resolver.replace(&cert, &key),
                        Err(e) => tracing::warn!(error = %e, "cannot read the serving Secret"),
                    }
                }
            });
        }
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| WebhookError::Certificate(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    async fn read(&self) -> Result<(Vec<u8>, Vec<u8>), WebhookError> {
        match self {
            Self::Files { cert, key } => {
                let read = |path: &PathBuf| {
                    std::fs::read(path)
                        .map_err(|e| WebhookError::Certificate(format!("{}: {e}", path.display())))
                };
                Ok((read(cert)?, read(key)?))
            }
            Self::Secret {
                client,
                namespace,
                name,
            } => {
                let secret = Api::<Secret>::namespaced(client.clone(), namespace)
                    .get(name)
                    .await
                    .map_err(|e| {
                        WebhookError::Certificate(format!("Secret {namespace}/{name}: {e}"))
                    })?;
                let data = secret.data.unwrap_or_default();
                let field = |key: &str| {
                    data.get(key).map(|b| b.0.clone()).ok_or_else(|| {
                        WebhookError::Certificate(format!("Secret {namespace}/{name} has no {key}"))
                    })
                };
                Ok((field("tls.crt")?, field("tls.key")?))
            }
        }
    }
}

fn modified(cert: &PathBuf, key: &PathBuf) -> Option<(SystemTime, SystemTime)> {
    let time = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some((time(cert)?, time(key)?))
}

fn certified(
    provider: &rustls::crypto::CryptoProvider,
    cert: &[u8],
    key: &[u8],
) -> Result<Arc<CertifiedKey>, WebhookError> {
    use rustls::pki_types::pem::PemObject;
    let bad =
        |what: &str, e: &dyn std::fmt::Display| WebhookError::Certificate(format!("{what}: {e}"));
    let chain: Vec<rustls::pki_types::CertificateDer<'static>> =
        rustls::pki_types::CertificateDer::pem_slice_iter(cert)
            .collect::<Result<_, _>>()
            .map_err(|e| bad("the certificate", &e))?;
    if chain.is_empty() {
        return Err(WebhookError::Certificate(
            "no certificate in the PEM".into(),
        ));
    }
    let key =
        rustls::pki_types::PrivateKeyDer::from_pem_slice(key).map_err(|e| bad("the key", &e))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| bad("the key", &e))?;
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

struct FilesState {
    cert: PathBuf,
    key: PathBuf,
    seen: RwLock<Option<(SystemTime, SystemTime)>>,
}

struct Resolver {
    current: RwLock<Arc<CertifiedKey>>,
    files: Option<FilesState>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver").finish_non_exhaustive()
    }
}

impl Resolver {
    fn replace(&self, cert: &[u8], key: &[u8]) {
        match certified(&self.provider, cert, key) {
            Ok(new) => *self.current.write().unwrap_or_else(PoisonError::into_inner) = new,
            Err(e) => tracing::warn!(error = %e, "keeping the serving certificate"),
        }
    }

    /// Files changed since last read (a stat per handshake): read them again.
    fn refresh_files(&self) {
        let Some(files) = &self.files else {
            return;
        };
        let now = modified(&files.cert, &files.key);
        if *files.seen.read().unwrap_or_else(PoisonError::into_inner) == now {
            return;
        }
        *files.seen.write().unwrap_or_else(PoisonError::into_inner) = now;
        if let (Ok(cert), Ok(key)) = (std::fs::read(&files.cert), std::fs::read(&files.key)) {
            self.replace(&cert, &key);
        }
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.refresh_files();
        Some(
            self.current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// A self-managed serving certificate: a CA of the operator's own and a certificate it signed.
///
/// # Example
///
/// ```
/// let dir = std::env::temp_dir().join(format!("self-signed-{}", std::process::id()));
/// let made = plinth_runtime::webhook::self_signed(&dir, &["webhook.my-operator.svc"]).unwrap();
/// assert!(String::from_utf8_lossy(&made.ca_pem).starts_with("-----BEGIN CERTIFICATE-----"));
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct SelfSigned {
    /// The CA (PEM), for the webhook configurations' `caBundle`.
    pub ca_pem: Vec<u8>,
    /// The serving certificate's files.
    pub source: TlsSource,
}

/// A CA and a serving certificate it signed, in PEM.
///
/// # Example
///
/// ```
/// let issued = plinth_runtime::webhook::issue(&["localhost", "127.0.0.1"]).unwrap();
/// assert!(issued.ca.starts_with("-----BEGIN CERTIFICATE-----"));
/// assert!(issued.cert.starts_with("-----BEGIN CERTIFICATE-----"));
/// assert!(issued.key.contains("PRIVATE KEY"));
/// assert_ne!(issued.ca, issued.cert);
/// ```
#[derive(Clone, Debug)]
pub struct Issued {
    /// The CA's certificate (`ca.crt`).
    pub ca: String,
    /// The serving certificate (`tls.crt`).
    pub cert: String,
    /// Its key (`tls.key`).
    pub key: String,
}

/// A new CA and a serving certificate for `hosts` (names or IP addresses) signed by it.
///
/// # Errors
/// A host is not a valid name.
///
/// # Example
///
/// ```
/// use plinth_runtime::webhook::issue;
/// let issued = issue(&["webhook.my-operator.svc", "10.96.0.12"]).unwrap();
/// assert!(issued.cert.starts_with("-----BEGIN CERTIFICATE-----"));
/// assert!(issued.key.contains("PRIVATE KEY"));
/// ```
pub fn issue(hosts: &[&str]) -> Result<Issued, WebhookError> {
    let fail = |e: &dyn std::fmt::Display| WebhookError::Certificate(e.to_string());
    let ca_key = rcgen::KeyPair::generate().map_err(|e| fail(&e))?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::new()).map_err(|e| fail(&e))?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "webhook CA");
    let ca_cert = ca_params.self_signed(&ca_key).map_err(|e| fail(&e))?;
    let issuer = rcgen::Issuer::new(ca_params, &ca_key);
    let serving_key = rcgen::KeyPair::generate().map_err(|e| fail(&e))?;
    let names: Vec<String> = hosts.iter().map(|h| (*h).to_owned()).collect();
    let params = rcgen::CertificateParams::new(names).map_err(|e| fail(&e))?;
    let serving = params
        .signed_by(&serving_key, &issuer)
        .map_err(|e| fail(&e))?;
    Ok(Issued {
        ca: ca_cert.pem(),
        cert: serving.pem(),
        key: serving_key.serialize_pem(),
    })
}

/// A `kubernetes.io/tls` Secret `namespace/name` holding a new certificate for `hosts` and
/// its CA (`ca.crt`, `tls.crt`, `tls.key`), for every replica of a webhook server to mount as
/// its certificate directory (what cert-manager would otherwise provide).
///
/// # Errors
/// As [`issue`].
///
/// # Example
///
/// ```
/// let secret = plinth_runtime::webhook::certificate_secret(
///     "my-operator", "webhook-tls", &["webhook.my-operator.svc"],
/// ).unwrap();
/// assert_eq!(secret["type"], "kubernetes.io/tls");
/// assert!(secret["data"]["tls.key"].is_string() && secret["data"]["ca.crt"].is_string());
/// ```
pub fn certificate_secret(
    namespace: &str,
    name: &str,
    hosts: &[&str],
) -> Result<serde_json::Value, WebhookError> {
    use base64::Engine as _;
    let issued = issue(hosts)?;
    let encode = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    Ok(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "kubernetes.io/tls",
        "data": {
            "ca.crt": encode(&issued.ca),
            "tls.crt": encode(&issued.cert),
            "tls.key": encode(&issued.key),
        }
    }))
}

/// The certificate in `dir` (`ca.crt`, `tls.crt`, `tls.key`), made there first if missing:
/// a CA and a serving certificate for `hosts` (names or IP addresses) signed by it (see
/// [`issue`]). For operators that manage their own certificates (no cert-manager).
///
/// # Errors
/// The directory cannot be written, or a host is not a valid name.
///
/// # Example
///
/// ```
/// use plinth_runtime::webhook::self_signed;
/// let dir = std::env::temp_dir().join(format!("certs-{}", std::process::id()));
/// let first = self_signed(&dir, &["localhost"]).unwrap();
/// // Made once; a restart finds and keeps it.
/// let again = self_signed(&dir, &["localhost"]).unwrap();
/// assert_eq!(first.ca_pem, again.ca_pem);
/// assert!(dir.join("tls.key").exists());
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn self_signed(dir: &std::path::Path, hosts: &[&str]) -> Result<SelfSigned, WebhookError> {
    let (ca, cert, key) = (dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key"));
    let fail = |e: &dyn std::fmt::Display| WebhookError::Certificate(e.to_string());
    if !(ca.exists() && cert.exists() && key.exists()) {
        std::fs::create_dir_all(dir).map_err(|e| fail(&e))?;
        let issued = issue(hosts)?;
        let write = |path: &std::path::Path, text: &str| {
            std::fs::write(path, text).map_err(|e| fail(&format!("{}: {e}", path.display())))
        };
        write(&key, &issued.key)?;
        write(&cert, &issued.cert)?;
        write(&ca, &issued.ca)?;
    }
    let ca_pem = std::fs::read(&ca).map_err(|e| fail(&e))?;
    Ok(SelfSigned {
        ca_pem,
        source: TlsSource::files(cert, key),
    })
}
