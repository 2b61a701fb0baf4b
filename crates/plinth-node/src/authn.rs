//! Who may use the agent's server, as the kubelet decides with its webhook authentication and
//! authorization: the API server (its client certificate) always; anyone else the API server
//! vouches for — a bearer token it reviews (TokenReview), or a client certificate of the
//! cluster CA — and authorizes for `nodes/<this node>/<subresource>` (SubjectAccessReview).

use serde_json::{Value, json};

use crate::agent::Agent;

/// Who is calling, as the TLS layer saw it.
#[derive(Debug, Clone)]
pub(crate) enum Peer {
    /// The API server's client certificate.
    ApiServer,
    /// Another client certificate of the cluster CA: its common name and organizations.
    Certificate(String, Vec<String>),
    /// No client certificate.
    None,
}

/// Why a request is refused: 401 or 403, with the kubelet's text.
pub(crate) struct Refused {
    pub(crate) forbidden: bool,
    pub(crate) message: String,
}

/// The subresource of `nodes` a kubelet path is authorized as (the kubelet's `auth.go`).
fn subresource(path: &str) -> &'static str {
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    match first {
        "stats" => "stats",
        "metrics" => "metrics",
        "logs" => "log",
        "spec" => "spec",
        "checkpoint" => "checkpoint",
        _ => "proxy",
    }
}

fn verb(method: &hyper::Method) -> &'static str {
    match *method {
        hyper::Method::POST => "create",
        hyper::Method::PUT => "update",
        hyper::Method::PATCH => "patch",
        hyper::Method::DELETE => "delete",
        _ => "get",
    }
}

async fn post(agent: &Agent, path: &str, body: &Value) -> Result<Value, String> {
    let request = http::Request::post(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap_or_default())
        .map_err(|e| e.to_string())?;
    agent
        .client
        .request::<Value>(request)
        .await
        .map_err(|e| e.to_string())
}

/// Whether the caller may make this request.
pub(crate) async fn check(
    agent: &Agent,
    peer: &Peer,
    method: &hyper::Method,
    path: &str,
    authorization: Option<&str>,
) -> Result<(), Refused> {
    let unauthorized = || Refused {
        forbidden: false,
        message: "Unauthorized".to_owned(),
    };
    let user = match (peer, authorization.and_then(|a| a.strip_prefix("Bearer "))) {
        (Peer::ApiServer, _) => return Ok(()),
        (_, Some(token)) => {
            let review = post(
                agent,
                "/apis/authentication.k8s.io/v1/tokenreviews",
                &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                        "spec": {"token": token.trim()}}),
            )
            .await
            .map_err(|_| unauthorized())?;
            if review["status"]["authenticated"] != true {
                return Err(unauthorized());
            }
            review["status"]["user"].clone()
        }
        (Peer::Certificate(name, groups), None) => json!({"username": name, "groups": groups}),
        (Peer::None, None) => return Err(unauthorized()),
    };
    let (verb, subresource) = (verb(method), subresource(path));
    let node = &agent.config.name;
    let mut spec = json!({
        "user": user["username"],
        "groups": user["groups"],
        "resourceAttributes": {"verb": verb, "resource": "nodes", "subresource": subresource, "name": node},
    });
    for field in ["uid", "extra"] {
        if let Some(value) = user.get(field).filter(|v| !v.is_null()) {
            spec[field] = value.clone();
        }
    }
    let review = post(
        agent,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}),
    )
    .await
    .map_err(|e| Refused {
        forbidden: true,
        message: format!("Authorization error: {e}"),
    })?;
    if review["status"]["allowed"] == true {
        Ok(())
    } else {
        Err(Refused {
            forbidden: true,
            message: format!(
                "Forbidden (user={}, verb={verb}, resource=nodes, subresource={subresource})",
                user["username"].as_str().unwrap_or("")
            ),
        })
    }
}
