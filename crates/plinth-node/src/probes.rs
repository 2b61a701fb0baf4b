//! Probes as the kubelet runs them: `tcpSocket` (a connection), `httpGet` (a status from 200
//! to 399; over HTTPS without checking the pod's certificate, as the kubelet does), `exec`
//! (exit code 0, run inside the container's namespaces), `grpc` (the health protocol's
//! `SERVING`), each bounded by `timeoutSeconds`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A probe's result: `Err` carries the kubelet-style message of a failure.
pub(crate) type Outcome = Result<(), String>;

/// Where a probe runs: the pod's address, the container (its ports), and the way to run a
/// command in it.
pub(crate) struct Target<'a> {
    pub(crate) pod_ip: &'a str,
    pub(crate) container: &'a Value,
    /// The PID whose namespaces an exec probe enters (the sandbox's init), if any.
    pub(crate) sandbox_pid: Option<u32>,
    pub(crate) env: &'a [(String, String)],
    /// The image's clients, pointed at the pod ([`crate::images::Entry::clients`]).
    pub(crate) clients: &'a [(String, Vec<String>)],
    /// Who commands run in the container run as (its `securityContext`).
    pub(crate) security: Option<&'a crate::security::Security>,
}

fn port_of(target: &Target<'_>, port: &Value) -> Result<u16, String> {
    match port {
        Value::Number(n) => n
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| format!("invalid port {n}")),
        Value::String(name) => {
            if let Ok(n) = name.parse::<u16>() {
                return Ok(n);
            }
            target
                .container
                .get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|p| p["name"] == name.as_str())
                .and_then(|p| p["containerPort"].as_u64())
                .and_then(|p| u16::try_from(p).ok())
                .ok_or_else(|| format!("unable to find port {name:?}"))
        }
        _ => Err("no port".into()),
    }
}

/// Runs `probe` once.
pub(crate) async fn run(probe: &Value, target: &Target<'_>) -> Outcome {
    let timeout = Duration::from_secs(probe["timeoutSeconds"].as_u64().unwrap_or(1).max(1));
    let attempt = async {
        if let Some(tcp) = probe.get("tcpSocket").filter(|v| v.is_object()) {
            let port = port_of(target, &tcp["port"])?;
            let host = tcp["host"]
                .as_str()
                .filter(|h| !h.is_empty())
                .unwrap_or(target.pod_ip);
            tokio::net::TcpStream::connect((host, port))
                .await
                .map(|_| ())
                .map_err(|e| format!("dial tcp {host}:{port}: connect: {}", short(&e)))
        } else if let Some(get) = probe.get("httpGet").filter(|v| v.is_object()) {
            http_get(get, target).await
        } else if let Some(exec) = probe.get("exec").filter(|v| v.is_object()) {
            let command: Vec<String> = exec["command"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c.as_str().map(str::to_owned))
                .collect();
            exec_probe(&command, target).await
        } else if let Some(grpc) = probe.get("grpc").filter(|v| v.is_object()) {
            grpc_check(grpc, target, timeout).await
        } else {
            Err("no probe handler".into())
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!("probe timed out after {}s", timeout.as_secs())),
    }
}

fn short(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        _ => e.to_string(),
    }
}

/// The gRPC health protocol's `Check` (`grpc.health.v1.Health`) over HTTP/2 without TLS, as
/// the kubelet calls it: `SERVING` passes.
async fn grpc_check(grpc: &Value, target: &Target<'_>, timeout: Duration) -> Outcome {
    use http_body_util::BodyExt;
    let port = port_of(target, &grpc["port"])?;
    let host = target.pod_ip;
    let service = grpc["service"].as_str().unwrap_or("");
    let unreachable = |why: String| {
        format!(
            "timeout: failed to connect service \"{host}:{port}\" within {}s: {why}",
            timeout.as_secs()
        )
    };
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .map_err(|e| unreachable(e.to_string()))?;
    tokio::spawn(connection);
    // HealthCheckRequest { service = 1 }, in a gRPC message (not compressed, its length).
    let mut message = Vec::new();
    if !service.is_empty() {
        message.push(0x0a);
        message.push(u8::try_from(service.len()).map_err(|_| "service name too long")?);
        message.extend_from_slice(service.as_bytes());
    }
    let mut body = vec![0u8];
    body.extend_from_slice(&u32::try_from(message.len()).unwrap_or(0).to_be_bytes());
    body.extend_from_slice(&message);
    let request = http::Request::post(format!("http://{host}:{port}/grpc.health.v1.Health/Check"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("user-agent", "kube-probe/1.32")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let status_of = |headers: &http::HeaderMap| {
        headers
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let early = status_of(response.headers());
    let collected = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("rpc error: {e}"))?;
    let grpc_status = early.or_else(|| collected.trailers().and_then(status_of));
    if grpc_status.as_deref() != Some("0") {
        return Err(format!(
            "rpc error: code = {}",
            grpc_status.unwrap_or_else(|| "Unknown".into())
        ));
    }
    // HealthCheckResponse { status = 1 }: a varint after the 5-byte prefix.
    let bytes = collected.to_bytes();
    let status = match bytes.get(5..) {
        Some([0x08, value, ..]) => *value,
        _ => 0,
    };
    match status {
        1 => Ok(()),
        2 => Err("service unhealthy (responded with \"NOT_SERVING\")".into()),
        3 => Err("service unhealthy (responded with \"SERVICE_UNKNOWN\")".into()),
        _ => Err("service unhealthy (responded with \"UNKNOWN\")".into()),
    }
}

async fn http_get(get: &Value, target: &Target<'_>) -> Outcome {
    let port = port_of(target, &get["port"])?;
    let host = get["host"]
        .as_str()
        .filter(|h| !h.is_empty())
        .unwrap_or(target.pod_ip);
    let path = get["path"]
        .as_str()
        .filter(|p| !p.is_empty())
        .unwrap_or("/");
    let https = get["scheme"]
        .as_str()
        .is_some_and(|s| s.eq_ignore_ascii_case("https"));
    let scheme = if https { "https" } else { "http" };
    let url = format!("{scheme}://{host}:{port}{path}");
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| {
            format!(
                "Get \"{url}\": dial tcp {host}:{port}: connect: {}",
                short(&e)
            )
        })?;
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.32\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for header in get["httpHeaders"].as_array().into_iter().flatten() {
        request.push_str(&format!(
            "{}: {}\r\n",
            header["name"].as_str().unwrap_or(""),
            header["value"].as_str().unwrap_or("")
        ));
    }
    request.push_str("\r\n");
    let head = if https {
        // As the kubelet: the pod's certificate is not checked.
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate))
        .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .map_err(|e| format!("Get \"{url}\": {e}"))?;
        let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("Get \"{url}\": {e}"))?;
        exchange(stream, &request).await
    } else {
        exchange(tcp, &request).await
    }
    .map_err(|e| format!("Get \"{url}\": {e}"))?;
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("Get \"{url}\": malformed HTTP response"))?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

/// Sends `request` and reads the start of the answer (its status line).
async fn exchange<S>(mut stream: S, request: &str) -> std::io::Result<String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    stream.write_all(request.as_bytes()).await?;
    let mut head = vec![0u8; 1024];
    let n = stream.read(&mut head).await?;
    Ok(String::from_utf8_lossy(&head[..n]).into_owned())
}

/// Accepts any server certificate (the kubelet's probes do not verify the pod's).
#[derive(Debug)]
struct AnyCertificate;

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
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
        _message: &[u8],
        _cert: &rustls::pki_types::CertificateDer<'_>,
        _dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &rustls::pki_types::CertificateDer<'_>,
        _dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The command line that runs `command` inside the sandbox of `pid` (its user namespace if
/// it has one, its network, mount, PID and UTS namespaces and root), or as it is without a sandbox;
/// an image's client is pointed at the pod; as the container's user, with its capabilities,
/// where the agent can change them.
pub(crate) fn in_sandbox(
    command: &[String],
    pid: Option<u32>,
    clients: &[(String, Vec<String>)],
    security: Option<&crate::security::Security>,
) -> Vec<String> {
    let command = crate::images::pointed(command, clients);
    let command = match security {
        Some(s) if crate::sandbox::in_user_namespace() && pid.is_some() => {
            s.without_identity().wrap(&command)
        }
        Some(s) if nix::unistd::geteuid().is_root() => s.wrap(&command),
        _ => command,
    };
    match pid {
        Some(pid) => {
            let mut argv = vec!["nsenter".to_owned(), format!("--target={pid}")];
            if crate::sandbox::in_user_namespace() {
                // Its credentials already are root's there; nsenter's own switch to root
                // would call setgroups, which a user namespace without root refuses.
                argv.extend(["--user", "--preserve-credentials"].map(String::from));
            }
            if !crate::sandbox::in_user_namespace() {
                // The pod's network (the machine's, for a pod without one of its own).
                argv.push("--net".to_owned());
            }
            argv.extend(
                ["--mount", "--pid", "--uts", "--ipc", "--root", "--wd", "--"].map(String::from),
            );
            argv.extend(command.iter().cloned());
            argv
        }
        None => command.to_vec(),
    }
}

async fn exec_probe(command: &[String], target: &Target<'_>) -> Outcome {
    let argv = in_sandbox(command, target.sandbox_pid, target.clients, target.security);
    let Some((program, args)) = argv.split_first() else {
        return Err("no command".into());
    };
    let output = tokio::process::Command::new(program)
        .args(args)
        .env_clear()
        .envs(target.env.iter().cloned())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("exec {program}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        Err(text.trim().to_owned())
    }
}
