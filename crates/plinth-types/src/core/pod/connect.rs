//! A pod's connect subresources — log, exec, attach, portforward — passed to its node's agent.

use futures::future::BoxFuture;
use plinth_core::{ApiError, Cause};
use serde_json::{Value, json};

use plinth_registry::resources::ConnectRequest;

/// The container a `/log` (or `/exec`, `/attach`) request means: `container=`, or the only
/// one, or the `kubectl.kubernetes.io/default-container` annotation's.
///
/// # Errors
/// 400 with kube's messages when none or an unknown one is named.
pub(super) fn container_of(pod: &Value, asked: Option<&str>) -> Result<String, ApiError> {
    let name = plinth_core::meta::name(pod).unwrap_or("");
    let names = |key: &str| -> Vec<String> {
        pod.pointer(&format!("/spec/{key}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect()
    };
    let containers = names("containers");
    let init = names("initContainers");
    let ephemeral = names("ephemeralContainers");
    match asked.filter(|a| !a.is_empty()) {
        Some(asked) => {
            if containers
                .iter()
                .chain(&init)
                .chain(&ephemeral)
                .any(|c| c == asked)
            {
                Ok(asked.to_owned())
            } else {
                Err(ApiError::bad_request(format!(
                    "container {asked} is not valid for pod {name}"
                )))
            }
        }
        None => {
            if let Some(default) = pod
                .pointer("/metadata/annotations/kubectl.kubernetes.io~1default-container")
                .and_then(Value::as_str)
                .filter(|d| containers.iter().any(|c| c == d))
            {
                return Ok(default.to_owned());
            }
            match containers.as_slice() {
                [one] => Ok(one.clone()),
                _ => {
                    let mut message = format!(
                        "a container name must be specified for pod {name}, choose one of: [{}]",
                        containers.join(" ")
                    );
                    if !init.is_empty() {
                        message.push_str(&format!(
                            " or one of the init containers: [{}]",
                            init.join(" ")
                        ));
                    }
                    Err(ApiError::bad_request(message))
                }
            }
        }
    }
}

/// The query parameters of `PodLogOptions` passed on to the node agent.
pub(super) const LOG_PARAMETERS: &[&str] = &[
    "follow",
    "previous",
    "sinceSeconds",
    "sinceTime",
    "timestamps",
    "tailLines",
    "limitBytes",
];

/// `pods/<name>/log`: the container's log, from the node agent that runs it.
pub(super) fn log(
    request: ConnectRequest<'_>,
) -> BoxFuture<'_, Result<axum::response::Response, ApiError>> {
    Box::pin(async move {
        if request.method != axum::http::Method::GET {
            return Err(ApiError::method_not_allowed());
        }
        let pod = &request.object;
        let container = container_of(pod, request.query("container"))?;
        for key in ["sinceSeconds", "tailLines", "limitBytes"] {
            if let Some(v) = request.query(key) {
                let ok = v.parse::<i64>().is_ok_and(|n| {
                    if key == "sinceSeconds" || key == "limitBytes" {
                        n > 0
                    } else {
                        n >= 0
                    }
                });
                if !ok {
                    return Err(ApiError::invalid(
                        "",
                        "PodLogOptions",
                        "",
                        vec![Cause::invalid(key, &json!(v), "must be greater than 0")],
                    ));
                }
            }
        }
        if request.query("sinceSeconds").is_some() && request.query("sinceTime").is_some() {
            return Err(ApiError::invalid(
                "",
                "PodLogOptions",
                "",
                vec![Cause::forbidden(
                    "",
                    "at most one of `sinceTime` or `sinceSeconds` may be specified",
                )],
            ));
        }
        let node = node_of(pod, &container)?;
        let namespace = plinth_core::meta::namespace(pod).unwrap_or("");
        let name = plinth_core::meta::name(pod).unwrap_or("");
        let mut path = format!("/containerLogs/{namespace}/{name}/{container}");
        let params: Vec<String> = LOG_PARAMETERS
            .iter()
            .filter_map(|k| {
                request
                    .query(k)
                    .map(|v| format!("{k}={}", crate::core::urlencode(v)))
            })
            .collect();
        if !params.is_empty() {
            path.push('?');
            path.push_str(&params.join("&"));
        }
        // A WebSocket client (kube's `binary.k8s.io` and `base64.binary.k8s.io` log
        // streams) is joined to the agent's WebSocket log stream.
        let websocket = request
            .headers
            .get(axum::http::header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
        if websocket {
            return request
                .nodes
                .upgrade(
                    request.objects,
                    &node,
                    &path,
                    &request.headers,
                    request.upgrade,
                )
                .await;
        }
        request.nodes.get(request.objects, &node, &path).await
    })
}

/// The node a pod runs on, or kube's answer for one that runs nowhere yet.
pub(super) fn node_of(pod: &Value, container: &str) -> Result<String, ApiError> {
    pod.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "container \"{container}\" in pod \"{}\" is waiting to start: ContainerCreating",
                plinth_core::meta::name(pod).unwrap_or("")
            ))
        })
}

/// The query string of a streaming request, as passed on to the node agent.
pub(super) fn query_string(request: &ConnectRequest<'_>, keys: &[&str]) -> String {
    request
        .query
        .iter()
        .filter(|(k, _)| keys.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={}", crate::core::urlencode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

pub(super) fn stream_flags_ok(request: &ConnectRequest<'_>) -> bool {
    ["stdin", "stdout", "stderr"]
        .iter()
        .any(|k| request.query(k).is_some_and(|v| v == "true" || v == "1"))
}

/// `pods/<name>/exec`: a command in a container, over the connection the client upgrades
/// (WebSocket, `v5.channel.k8s.io`), served by the node agent.
pub(super) fn exec(
    request: ConnectRequest<'_>,
) -> BoxFuture<'_, Result<axum::response::Response, ApiError>> {
    Box::pin(streamed(request, "exec"))
}

/// `pods/<name>/attach`: the streams of a running container's process.
pub(super) fn attach(
    request: ConnectRequest<'_>,
) -> BoxFuture<'_, Result<axum::response::Response, ApiError>> {
    Box::pin(streamed(request, "attach"))
}

/// `pods/<name>/portforward`: connections to the pod's ports, over the connection the client
/// upgrades (SPDY/3.1, `portforward.k8s.io`), served by the node agent.
pub(super) fn port_forward(
    request: ConnectRequest<'_>,
) -> BoxFuture<'_, Result<axum::response::Response, ApiError>> {
    Box::pin(streamed(request, "portforward"))
}

/// An exec, attach or port-forward, checked and handed to the pod's node agent.
pub(super) async fn streamed(
    request: ConnectRequest<'_>,
    kind: &str,
) -> Result<axum::response::Response, ApiError> {
    let pod = request.object.clone();
    let namespace = plinth_core::meta::namespace(&pod).unwrap_or("");
    let name = plinth_core::meta::name(&pod).unwrap_or("");
    if kind == "portforward" {
        let node = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "unable to forward ports: pod {name} is not running on a node yet"
                ))
            })?;
        let path = format!("/portforward/{namespace}/{name}");
        return request
            .nodes
            .upgrade(
                request.objects,
                node,
                &path,
                &request.headers,
                request.upgrade,
            )
            .await;
    }
    let container = container_of(&pod, request.query("container"))?;
    if kind == "exec" && request.query_all("command").is_empty() {
        return Err(ApiError::bad_request("you must specify at least 1 command"));
    }
    if !stream_flags_ok(&request) {
        return Err(ApiError::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    let node = node_of(&pod, &container)?;
    let path = format!(
        "/{kind}/{namespace}/{name}/{container}?{}",
        query_string(&request, &["command", "stdin", "stdout", "stderr", "tty"])
    );
    request
        .nodes
        .upgrade(
            request.objects,
            &node,
            &path,
            &request.headers,
            request.upgrade,
        )
        .await
}
