//! The server's credentials: a CA and admin token generated into the data directory on first
//! start and kept across restarts; a serving certificate signed by that CA at every start (for
//! the addresses it listens on); the kubeconfig that trusts the CA and carries the token.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::error::CredentialsError;

/// The CA certificate, inside the data directory.
pub const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const TOKEN: &str = "admin.token";
/// The kubeconfig, inside the data directory.
pub const KUBECONFIG: &str = "kubeconfig";

/// What the server needs to speak TLS and check callers.
pub struct Credentials {
    /// rustls configuration with the serving certificate.
    pub tls: Arc<rustls::ServerConfig>,
    /// The admin bearer token.
    pub token: String,
    /// The CA certificate (PEM).
    pub ca_pem: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").finish_non_exhaustive()
    }
}

fn pki(step: &'static str) -> impl FnOnce(rcgen::Error) -> CredentialsError {
    move |e| CredentialsError {
        step,
        reason: e.to_string(),
    }
}

fn io(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CredentialsError {
    let path = path.to_owned();
    move |e| CredentialsError {
        step,
        reason: format!("{}: {e}", path.display()),
    }
}

/// Writes `contents` to `path` readable by the owner only.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<(), CredentialsError> {
    use std::os::unix::fs::OpenOptionsExt;
    let temp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .map_err(io("write a credential", &temp))?;
    file.write_all(contents)
        .and_then(|()| file.sync_all())
        .map_err(io("write a credential", &temp))?;
    std::fs::rename(&temp, path).map_err(io("write a credential", path))
}

fn ca_params() -> Result<CertificateParams, CredentialsError> {
    let mut params = CertificateParams::new(Vec::new()).map_err(pki("describe the CA"))?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "plinth-ca");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    params.not_after = rcgen::date_time_ymd(2124, 1, 1);
    Ok(params)
}

/// Certificates given from outside, as kube-apiserver takes them: a serving certificate and
/// key (`--tls-cert-file`, `--tls-private-key-file`, or `--cert-dir`'s `apiserver.crt`) in
/// place of the one signed at start, and a CA whose client certificates are trusted beside the
/// cluster CA's (`--client-ca-file`).
#[derive(Clone, Debug, Default)]
pub struct ServingFiles {
    /// The serving certificate (PEM, the chain) and its key (PEM: PKCS#8, SEC1 or PKCS#1).
    pub cert_and_key: Option<(PathBuf, PathBuf)>,
    /// More CAs for client certificates (PEM).
    pub client_ca: Option<PathBuf>,
}

/// Loads the CA and token from `dir`, creating them on first start, and signs a serving
/// certificate for `listen` (plus localhost and the loopback addresses), unless `files`
/// gives one.
///
/// # Errors
/// [`CredentialsError`] naming the step and file that failed.
pub fn load_or_create(
    dir: &Path,
    listen: SocketAddr,
    files: &ServingFiles,
) -> Result<Credentials, CredentialsError> {
    let (ca_cert_path, ca_key_path, token_path) =
        (dir.join(CA_CERT), dir.join(CA_KEY), dir.join(TOKEN));
    let ca_params = ca_params()?;
    let (ca_pem, ca_key) = if ca_cert_path.exists() && ca_key_path.exists() {
        let pem =
            std::fs::read_to_string(&ca_cert_path).map_err(io("read the CA", &ca_cert_path))?;
        let key_pem =
            std::fs::read_to_string(&ca_key_path).map_err(io("read the CA key", &ca_key_path))?;
        (
            pem,
            KeyPair::from_pem(&key_pem).map_err(pki("parse the CA key"))?,
        )
    } else {
        let key = KeyPair::generate().map_err(pki("generate the CA key"))?;
        let cert = ca_params.self_signed(&key).map_err(pki("sign the CA"))?;
        write_private(&ca_key_path, key.serialize_pem().as_bytes())?;
        write_private(&ca_cert_path, cert.pem().as_bytes())?;
        (cert.pem(), key)
    };
    let token = if token_path.exists() {
        std::fs::read_to_string(&token_path)
            .map_err(io("read the token", &token_path))?
            .trim()
            .to_owned()
    } else {
        let token = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        write_private(&token_path, token.as_bytes())?;
        token
    };

    // The in-cluster names too: pods reach the server through the `kubernetes` Service.
    let mut names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
        plinth_registry::service_range::kubernetes_ip(),
        "kubernetes".to_owned(),
        "kubernetes.default".to_owned(),
        "kubernetes.default.svc".to_owned(),
        "kubernetes.default.svc.cluster.local".to_owned(),
    ];
    let host = listen.ip();
    if !host.is_unspecified() && !names.contains(&host.to_string()) {
        names.push(host.to_string());
    }
    if host.is_unspecified() {
        names.push("plinth".to_owned());
    }
    let mut params =
        CertificateParams::new(names).map_err(pki("describe the serving certificate"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "plinth-apiserver");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate().map_err(pki("generate the serving key"))?;
    let issuer = Issuer::new(ca_params, &ca_key);
    let server_cert = params
        .signed_by(&server_key, &issuer)
        .map_err(pki("sign the serving certificate"))?;

    let (chain, key) = match &files.cert_and_key {
        Some((cert, key)) => given_pair(cert, key)?,
        None => (
            vec![server_cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(server_key.serialize_der()).map_err(
                |e| CredentialsError {
                    step: "load the serving key",
                    reason: e.to_string(),
                },
            )?,
        ),
    };
    let mut trusted = ca_pem.clone();
    if let Some(path) = &files.client_ca {
        let extra = std::fs::read_to_string(path).map_err(io("read the client CA", path))?;
        trusted.push('\n');
        trusted.push_str(&extra);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CredentialsError {
            step: "configure TLS",
            reason: e.to_string(),
        })?
        .with_client_cert_verifier(client_verifier(&trusted)?)
        .with_single_cert(chain, key)
        .map_err(|e| CredentialsError {
            step: "configure TLS",
            reason: e.to_string(),
        })?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Credentials {
        tls: Arc::new(tls),
        token,
        ca_pem,
    })
}

/// A serving certificate chain and key read from PEM files.
fn given_pair(
    cert: &Path,
    key: &Path,
) -> Result<
    (
        Vec<rustls::pki_types::CertificateDer<'static>>,
        rustls::pki_types::PrivateKeyDer<'static>,
    ),
    CredentialsError,
> {
    use rustls::pki_types::pem::PemObject;
    let bad = |step: &'static str, path: &Path, e: String| CredentialsError {
        step,
        reason: format!("{}: {e}", path.display()),
    };
    let chain = rustls::pki_types::CertificateDer::pem_file_iter(cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| bad("read the serving certificate", cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(bad(
            "read the serving certificate",
            cert,
            "no certificate in it".into(),
        ));
    }
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key)
        .map_err(|e| bad("read the serving key", key, e.to_string()))?;
    Ok((chain, key))
}

/// Writes to `out` (mode 0600) a kubeconfig for `user` in `groups`, with a client
/// certificate signed by the CA in `dir` (valid a year) and the server of `dir/kubeconfig`.
///
/// # Errors
/// [`CredentialsError`] if the CA or the kubeconfig cannot be read, or the name is
/// empty.
pub fn write_user_kubeconfig(
    dir: &Path,
    user: &str,
    groups: &[&str],
    out: &Path,
) -> Result<(), CredentialsError> {
    write_cluster_kubeconfig(dir, &[], Some((user, groups)), out)
}

/// Writes to `out` (mode 0600) a kubeconfig trusting the CA in `dir`: for `user` in `groups`
/// with a client certificate signed by that CA (valid a year), or, without one, as the admin
/// with `dir`'s admin token. With several `servers` (URLs, or `host:port` for HTTPS) it has one
/// context per server — `plinth-1`, `plinth-2`, … — and the context `plinth`, the default, on
/// the first; with none, the server of `dir/kubeconfig`. Servers that share `dir`'s
/// credential files (its CA, admin token and ServiceAccount key) accept it alike.
///
/// # Errors
/// [`CredentialsError`] if the CA, the token or the kubeconfig cannot be read, a
/// server is not a URL, or the name is empty.
pub fn write_cluster_kubeconfig(
    dir: &Path,
    servers: &[String],
    user: Option<(&str, &[&str])>,
    out: &Path,
) -> Result<(), CredentialsError> {
    let ca_cert_path = dir.join(CA_CERT);
    let ca_pem =
        std::fs::read_to_string(&ca_cert_path).map_err(io("read the CA", &ca_cert_path))?;
    let servers = if servers.is_empty() {
        let admin = dir.join(KUBECONFIG);
        let admin_config =
            std::fs::read_to_string(&admin).map_err(io("read the server's kubeconfig", &admin))?;
        let server = admin_config
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .ok_or_else(|| CredentialsError {
                step: "find the server in the kubeconfig",
                reason: format!("{} names no server", admin.display()),
            })?
            .to_owned();
        vec![server]
    } else {
        servers
            .iter()
            .map(|s| named_server(s))
            .collect::<Result<Vec<_>, _>>()?
    };
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let (user_name, credential) = match user {
        Some((user, groups)) => {
            let (cert, key) = client_certificate(dir, user, groups)?;
            (
                user.to_owned(),
                format!(
                    "    client-certificate-data: {}\n    client-key-data: {}\n",
                    b64(&cert),
                    b64(&key)
                ),
            )
        }
        None => {
            let path = dir.join(TOKEN);
            let token = std::fs::read_to_string(&path).map_err(io("read the token", &path))?;
            (
                "plinth-admin".to_owned(),
                format!("    token: {}\n", token.trim()),
            )
        }
    };
    // One server: the layout `plinth serve` and earlier releases wrote (cluster `plinth`).
    let named: Vec<(String, &str)> = if servers.len() == 1 {
        vec![("plinth".to_owned(), servers[0].as_str())]
    } else {
        std::iter::once(("plinth".to_owned(), servers[0].as_str()))
            .chain(
                servers
                    .iter()
                    .enumerate()
                    .map(|(i, server)| (format!("plinth-{}", i + 1), server.as_str())),
            )
            .collect()
    };
    let context_name = |cluster: &str| match user {
        Some((user, _)) => format!("{user}@{cluster}"),
        None => cluster.to_owned(),
    };
    let mut config = String::from("apiVersion: v1\nkind: Config\nclusters:\n");
    for (cluster, server) in &named {
        config.push_str(&format!(
            "- name: {cluster}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n",
            ca = b64(&ca_pem)
        ));
    }
    config.push_str(&format!(
        "users:\n- name: {}\n  user:\n{credential}contexts:\n",
        quote(&user_name)
    ));
    for (cluster, _) in &named {
        config.push_str(&format!(
            "- name: {}\n  context:\n    cluster: {cluster}\n    user: {}\n    namespace: default\n",
            quote(&context_name(cluster)),
            quote(&user_name)
        ));
    }
    config.push_str(&format!(
        "current-context: {}\npreferences: {{}}\n",
        quote(&context_name("plinth"))
    ));
    write_private(out, config.as_bytes())
}

/// `server` as a URL: `https://` is assumed when it names none; anything but an `http(s)`
/// URL with a host is refused.
fn named_server(server: &str) -> Result<String, CredentialsError> {
    let url = if server.contains("://") {
        server.to_owned()
    } else {
        format!("https://{server}")
    };
    let refused = || CredentialsError {
        step: "read the servers",
        reason: format!("{server:?} is not a server URL (https://HOST:PORT or HOST:PORT)"),
    };
    let uri: hyper::Uri = url.parse().map_err(|_| refused())?;
    match (uri.scheme_str(), uri.host()) {
        (Some("https" | "http"), Some(host)) if !host.is_empty() => {
            Ok(url.trim_end_matches('/').to_owned())
        }
        _ => Err(refused()),
    }
}

/// A client certificate and its key (PEM) for `user` in `groups`, signed by the CA in `dir`.
fn client_certificate(
    dir: &Path,
    user: &str,
    groups: &[&str],
) -> Result<(String, String), CredentialsError> {
    if user.trim().is_empty() {
        return Err(CredentialsError {
            step: "name the user",
            reason: "the user name must not be empty".into(),
        });
    }
    let ca_key_path = dir.join(CA_KEY);
    let key_pem =
        std::fs::read_to_string(&ca_key_path).map_err(io("read the CA key", &ca_key_path))?;
    let ca_key = KeyPair::from_pem(&key_pem).map_err(pki("parse the CA key"))?;
    let mut params = CertificateParams::new(Vec::new()).map_err(pki("describe the client"))?;
    params.distinguished_name.push(DnType::CommonName, user);
    for group in groups {
        params
            .distinguished_name
            .push(DnType::OrganizationName, *group);
    }
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::days(365);
    let key = KeyPair::generate().map_err(pki("generate the client key"))?;
    let issuer = Issuer::new(ca_params()?, &ca_key);
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(pki("sign the client certificate"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The cluster CA as a signer of client certificates (the `kubernetes.io/kube-apiserver-client`
/// signer of the CertificateSigningRequest API).
pub struct ClusterSigner {
    ca_key: KeyPair,
}

impl std::fmt::Debug for ClusterSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSigner")
    }
}

impl ClusterSigner {
    /// The CA of the data directory `dir`.
    ///
    /// # Errors
    /// [`CredentialsError`] if its key cannot be read.
    pub fn load(dir: &Path) -> Result<Self, CredentialsError> {
        let path = dir.join(CA_KEY);
        let pem = std::fs::read_to_string(&path).map_err(io("read the CA key", &path))?;
        Ok(Self {
            ca_key: KeyPair::from_pem(&pem).map_err(pki("parse the CA key"))?,
        })
    }

    /// A new key and a client certificate for `user` signed with it (PEM: certificate, key),
    /// valid `seconds` — the API server's own identity toward extension API servers.
    ///
    /// # Errors
    /// A key or certificate that cannot be made.
    pub fn client_identity(&self, user: &str, seconds: i64) -> Result<(String, String), String> {
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params = CertificateParams::new(Vec::new()).map_err(|e| e.to_string())?;
        params.distinguished_name.push(DnType::CommonName, user);
        let request = params
            .serialize_request(&key)
            .and_then(|r| r.pem())
            .map_err(|e| e.to_string())?;
        Ok((self.sign_client(&request, seconds)?, key.serialize_pem()))
    }

    /// A client certificate (PEM) for the PEM certificate request `request`, valid
    /// `seconds`: its subject as requested (CN the user, O the groups), usable for client
    /// authentication only.
    ///
    /// # Errors
    /// Why the request cannot be signed: not a valid request, its signature wrong, no common
    /// name, or extensions a client certificate must not carry.
    pub fn sign_client(&self, request: &str, seconds: i64) -> Result<String, String> {
        let mut csr = rcgen::CertificateSigningRequestParams::from_pem(request)
            .map_err(|e| format!("the certificate request cannot be used: {e}"))?;
        let has_name = csr.params.distinguished_name.iter().any(|(t, v)| {
            *t == DnType::CommonName && !matches!(v, rcgen::DnValue::Utf8String(s) if s.is_empty())
        });
        if !has_name {
            return Err("the certificate request has no common name (the user)".into());
        }
        if !csr.params.subject_alt_names.is_empty() {
            return Err("a client certificate carries no subject alternative names".into());
        }
        let now = time::OffsetDateTime::now_utc();
        let params = &mut csr.params;
        params.is_ca = rcgen::IsCa::ExplicitNoCa;
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.not_before = now - time::Duration::minutes(5);
        params.not_after = now + time::Duration::seconds(seconds);
        params.serial_number = Some(rcgen::SerialNumber::from_slice(
            uuid::Uuid::new_v4().as_bytes(),
        ));
        let issuer = Issuer::new(ca_params().map_err(|e| e.to_string())?, &self.ca_key);
        csr.signed_by(&issuer)
            .map(|cert| cert.pem())
            .map_err(|e| format!("signing failed: {e}"))
    }
}

/// Client certificates are optional (tokens authenticate too), and checked against the
/// cluster CA when presented.
fn client_verifier(
    ca_pem: &str,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, CredentialsError> {
    let fail = |reason: String| CredentialsError {
        step: "trust the CA for client certificates",
        reason,
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca_pem.as_bytes()) {
        let cert: rustls::pki_types::CertificateDer<'_> = cert.map_err(|e| fail(e.to_string()))?;
        roots.add(cert).map_err(|e| fail(e.to_string()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .allow_unauthenticated()
        .build()
        .map_err(|e| fail(e.to_string()))
}

/// The server URL clients use for `listen` (an unspecified address becomes loopback).
pub fn server_url(listen: SocketAddr) -> String {
    let host = match listen.ip() {
        ip if ip.is_unspecified() => IpAddr::from([127, 0, 0, 1]),
        ip => ip,
    };
    format!("https://{}", SocketAddr::new(host, listen.port()))
}

/// Writes `dir/kubeconfig` (mode 0600) for `server` and returns its path.
///
/// # Errors
/// [`CredentialsError`] if it cannot be written.
pub fn write_kubeconfig(
    dir: &Path,
    server: &str,
    credentials: &Credentials,
) -> Result<PathBuf, CredentialsError> {
    let ca = base64::engine::general_purpose::STANDARD.encode(credentials.ca_pem.as_bytes());
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: plinth\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: plinth-admin\n  user:\n    token: {token}\ncontexts:\n- name: plinth\n  context:\n    cluster: plinth\n    user: plinth-admin\n    namespace: default\ncurrent-context: plinth\npreferences: {{}}\n",
        token = credentials.token
    );
    let path = dir.join(KUBECONFIG);
    write_private(&path, config.as_bytes())?;
    Ok(path)
}
