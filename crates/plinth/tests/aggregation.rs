//! API aggregation end to end: a small extension API server (in this test, over TLS, trusting
//! only client certificates of the cluster CA that `extension-apiserver-authentication`
//! publishes) registered by an APIService is reachable through `kubectl get`, appears in
//! discovery, sees the caller's user and groups, and is marked unavailable when stopped; the
//! built-in groups have their local APIServices.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{Backend, Plinth};
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

const GROUP_VERSION: &str = "/apis/wardle.example.com/v1alpha1";

fn answer(request: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let header = |name: &str| -> Vec<String> {
        request
            .headers()
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect()
    };
    let body = if path == GROUP_VERSION {
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "wardle.example.com/v1alpha1",
            "resources": [{"name": "flunders", "singularName": "flunder", "namespaced": true,
                "kind": "Flunder", "verbs": ["get", "list"], "shortNames": ["fl"]}]})
    } else if path.starts_with(&format!("{GROUP_VERSION}/namespaces/"))
        && path.ends_with("/flunders")
    {
        let seen = json!({"user": header("x-remote-user").join(","), "groups": header("x-remote-group").join(",")});
        json!({"kind": "FlunderList", "apiVersion": "wardle.example.com/v1alpha1", "metadata": {"resourceVersion": "1"},
            "items": [{"kind": "Flunder", "apiVersion": "wardle.example.com/v1alpha1",
                "metadata": {"name": "seen", "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z",
                    "annotations": {"seen": seen.to_string()}}}]})
    } else if path == format!("/openapi/v3{GROUP_VERSION}") {
        json!({"openapi": "3.0.0", "info": {"title": "wardle", "version": "v1alpha1"}, "paths": {},
            "components": {"schemas": {"io.example.wardle.v1alpha1.Flunder": {"type": "object",
                "description": "A flunder, from the extension server"}}}})
    } else {
        let mut response = Response::new(Full::new(Bytes::from("not found")));
        *response.status_mut() = hyper::StatusCode::NOT_FOUND;
        return response;
    };
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// The extension server: TLS with a certificate of its own, client certificates of
/// `client_ca` required.
async fn extension_server(
    client_ca: &str,
) -> (std::net::SocketAddr, String, tokio::task::JoinHandle<()>) {
    use rustls::pki_types::pem::PemObject;
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    let cert = params.self_signed(&key).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for ca in rustls::pki_types::CertificateDer::pem_slice_iter(client_ca.as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes())
                .unwrap(),
        )
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            connections.spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper::service::service_fn(|request| async move {
                    Ok::<_, std::convert::Infallible>(answer(&request))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (address, cert.pem(), task)
}

#[test]
fn an_extension_server_behind_an_apiservice() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let plinth = Plinth::start(Backend::Embedded);
    // What extension servers are told to trust.
    let published = plinth.json(&[
        "-n",
        "kube-system",
        "get",
        "configmap",
        "extension-apiserver-authentication",
    ]);
    let client_ca = published["data"]["requestheader-client-ca-file"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        published["data"]["requestheader-username-headers"],
        r#"["X-Remote-User"]"#
    );
    assert_eq!(
        published["data"]["requestheader-allowed-names"],
        r#"["front-proxy-client"]"#
    );
    let (address, serving_ca, server) = runtime.block_on(extension_server(&client_ca));
    let bundle = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &serving_ca);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: v1alpha1.wardle.example.com\n  annotations: {{plinth.dev/url: \"https://{address}\"}}\nspec:\n  group: wardle.example.com\n  version: v1alpha1\n  service: {{namespace: wardle, name: api}}\n  caBundle: {bundle}\n  groupPriorityMinimum: 1000\n  versionPriority: 15\n"
        ),
    );
    let available = |plinth: &Plinth| -> (String, String) {
        let service = plinth.json(&["get", "apiservice", "v1alpha1.wardle.example.com"]);
        let condition = service["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Available").cloned())
            .unwrap_or(Value::Null);
        (
            condition["status"].as_str().unwrap_or("").to_owned(),
            condition["message"].as_str().unwrap_or("").to_owned(),
        )
    };
    plinth.eventually("the APIService is available", || {
        available(&plinth).0 == "True"
    });
    // Through kubectl, as the caller.
    let listed = plinth.json(&["get", "flunders"]);
    let seen: Value = serde_json::from_str(
        listed["items"][0]["metadata"]["annotations"]["seen"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(seen["user"], "plinth-admin");
    assert!(
        seen["groups"].as_str().unwrap().contains("system:masters"),
        "{seen}"
    );
    let impersonated = plinth.json(&[
        "get",
        "fl",
        "--as=jane",
        "--as-group=system:masters",
        "--as-group=devs",
    ]);
    let seen: Value = serde_json::from_str(
        impersonated["items"][0]["metadata"]["annotations"]["seen"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(seen["user"], "jane");
    assert!(seen["groups"].as_str().unwrap().contains("devs"), "{seen}");
    // RBAC applies before the proxy: a user without the right is refused here.
    let refused = plinth.kubectl_output(&["get", "flunders", "--as=nobody"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("flunders.wardle.example.com is forbidden: User \"nobody\" cannot list resource \"flunders\""),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // Discovery: kubectl api-resources lists it; /apis has the group.
    let resources = plinth.kubectl(&["api-resources", "--api-group=wardle.example.com"]);
    assert!(
        resources.contains("flunders") && resources.contains("wardle.example.com/v1alpha1"),
        "{resources}"
    );
    let http = common::http::Http::new(&plinth);
    let groups = http.get("/apis").json();
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "wardle.example.com")
    );
    assert_eq!(
        http.get("/apis/wardle.example.com").json()["preferredVersion"]["version"],
        "v1alpha1"
    );
    // OpenAPI: the root lists the extension's group/version, which the extension serves.
    let root = http.get("/openapi/v3").json();
    let listed = &root["paths"]["apis/wardle.example.com/v1alpha1"]["serverRelativeURL"];
    let document = http.get(listed.as_str().unwrap()).json();
    assert_eq!(
        document["components"]["schemas"]["io.example.wardle.v1alpha1.Flunder"]["description"],
        "A flunder, from the extension server"
    );
    // The extension server takes nobody but the proxy: a request without its certificate is
    // refused at the handshake.
    let direct = std::process::Command::new("curl")
        .args(["-s", "-k", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("https://{address}{GROUP_VERSION}"))
        .output()
        .unwrap();
    assert_ne!(String::from_utf8_lossy(&direct.stdout), "200");
    // The built-in groups: local APIServices.
    let table = plinth.kubectl(&["get", "apiservices"]);
    let local = table
        .lines()
        .find(|l| l.starts_with("v1.rbac.authorization.k8s.io"))
        .unwrap();
    assert!(local.contains("Local") && local.contains("True"), "{table}");

    // Stopped: marked unavailable, and requests get 503.
    server.abort();
    runtime.block_on(async {
        let _ = server.await;
    });
    plinth.eventually("the APIService is unavailable", || {
        let (status, message) = available(&plinth);
        status == "False" && message.contains("failing or missing response from")
    });
    let gone = http.get(&format!("{GROUP_VERSION}/namespaces/default/flunders"));
    assert_eq!(gone.code, 503, "{}", gone.body);
    assert_eq!(gone.json()["reason"], "ServiceUnavailable");
    let table = plinth.kubectl(&["get", "apiservice", "v1alpha1.wardle.example.com"]);
    assert!(
        table.contains("wardle/api") && table.contains("False (FailedDiscoveryCheck)"),
        "{table}"
    );
}

#[test]
fn bad_apiservices_are_refused_with_kubes_messages() {
    let plinth = Plinth::start(Backend::Embedded);
    let out = plinth.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1.wrong.example.com}\nspec:\n  group: wardle.example.com\n  version: v1\n  service: {namespace: a, name: b}\n  insecureSkipTLSVerify: true\n  caBundle: eA==\n  groupPriorityMinimum: 0\n  versionPriority: 5000\n",
    );
    assert!(!out.status.success());
    let message = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "metadata.name: Invalid value: \"v1.wrong.example.com\": must be `spec.version+\".\"+spec.group`",
        "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000",
        "spec.versionPriority: Invalid value: 5000: must be positive and less than 1000",
        "spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present",
    ] {
        assert!(
            message.contains(expected),
            "missing {expected:?} in {message}"
        );
    }
    assert_eq!(
        plinth
            .kubectl_output(&["get", "apiservice", "v1.wrong.example.com"])
            .status
            .code(),
        Some(1),
        "nothing stored"
    );
}
