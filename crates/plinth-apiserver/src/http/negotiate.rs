//! Content negotiation: which format an answer is written in, from `Accept`, and writing it.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use plinth_core::{ApiError, StatusReason};
use serde_json::{Value, json};

/// How a response body is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Json,
    Yaml,
    Table,
    /// `meta.k8s.io` PartialObjectMetadata (metadata-only clients and informers).
    Metadata,
    /// `apidiscovery.k8s.io` aggregated discovery, v2 or v2beta1.
    Aggregated(&'static str),
    /// `/openapi/v2` in gnostic's protobuf, under the media type asked for.
    OpenApiV2Protobuf(&'static str),
    /// `meta.k8s.io/v1` PartialObjectMetadata in Kubernetes' protobuf (client-go's metadata
    /// informers ask for it first, for every resource, custom ones too).
    MetadataProtobuf,
    /// Kubernetes' protobuf (built-in types); `or_json` when the client accepts JSON as well,
    /// which answers what has no protobuf form (custom resources, Status, Scale).
    Protobuf {
        /// JSON is acceptable too.
        or_json: bool,
    },
}

/// Picks the response format from `Accept`, as kube-apiserver negotiates it.
pub(crate) fn negotiate(headers: &HeaderMap) -> Result<Format, ApiError> {
    let Some(accept) = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .filter(|a| !a.trim().is_empty())
    else {
        return Ok(Format::Json);
    };
    let clauses: Vec<&str> = accept.split(',').collect();
    for (i, clause) in clauses.iter().enumerate() {
        let mut parts = clause.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let params: Vec<(String, String)> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| {
                (
                    k.trim().to_ascii_lowercase(),
                    v.trim().trim_matches('"').to_owned(),
                )
            })
            .collect();
        let param = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        match media.as_str() {
            "application/json" | "*/*" | "application/*" => {
                match (param("as"), param("g"), param("v")) {
                    (Some("Table"), Some("meta.k8s.io"), Some("v1" | "v1beta1")) => {
                        return Ok(Format::Table);
                    }
                    (
                        Some("PartialObjectMetadata" | "PartialObjectMetadataList"),
                        Some("meta.k8s.io"),
                        Some("v1" | "v1beta1"),
                    ) => {
                        return Ok(Format::Metadata);
                    }
                    (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2")) => {
                        return Ok(Format::Aggregated("apidiscovery.k8s.io/v2"));
                    }
                    (
                        Some("APIGroupDiscoveryList"),
                        Some("apidiscovery.k8s.io"),
                        Some("v2beta1"),
                    ) => {
                        return Ok(Format::Aggregated("apidiscovery.k8s.io/v2beta1"));
                    }
                    (Some(_), _, _) => continue,
                    _ => return Ok(Format::Json),
                }
            }
            "application/yaml" => return Ok(Format::Yaml),
            "application/vnd.kubernetes.protobuf" => {
                match (param("as"), param("g"), param("v")) {
                    (None, _, _) => {}
                    (
                        Some("PartialObjectMetadata" | "PartialObjectMetadataList"),
                        Some("meta.k8s.io"),
                        Some("v1"),
                    ) => return Ok(Format::MetadataProtobuf),
                    // Tables (and v1beta1's differently numbered list) only in JSON.
                    (Some(_), _, _) => continue,
                }
                let or_json = clauses[i + 1..].iter().any(|c| {
                    let media = c
                        .split(';')
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_ascii_lowercase();
                    matches!(media.as_str(), "application/json" | "*/*" | "application/*")
                });
                return Ok(Format::Protobuf { or_json });
            }
            media => {
                if let Some(proto) = crate::openapi_v2_proto::MEDIA_TYPES
                    .iter()
                    .find(|m| **m == media)
                {
                    return Ok(Format::OpenApiV2Protobuf(proto));
                }
                continue;
            }
        }
    }
    Err(not_acceptable())
}

/// The answer to an `Accept` that allows nothing this server writes (for the resource asked
/// for: a protobuf-only `Accept` of a custom resource, say).
pub(crate) fn not_acceptable() -> ApiError {
    ApiError::new(
        StatusReason::NotAcceptable,
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/json;as=Table;v=v1;g=meta.k8s.io",
    )
}

/// A body already encoded, under `content_type`.
pub(crate) fn respond_bytes(
    code: StatusCode,
    body: bytes::Bytes,
    content_type: &'static str,
) -> Response {
    with_body(code, content_type, body, &[])
}

/// A response of `body` under `content_type`, with a `Warning` header per warning.
pub(crate) fn with_body(
    code: StatusCode,
    content_type: &str,
    body: impl Into<axum::body::Body>,
    warnings: &[String],
) -> Response {
    let mut response = (code, body.into()).into_response();
    if let Ok(value) = HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    for warning in warnings {
        let text = format!(
            "299 - {}",
            serde_json::to_string(warning).unwrap_or_default()
        );
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

pub(crate) fn respond(
    code: StatusCode,
    body: &Value,
    format: Format,
    warnings: &[String],
) -> Response {
    let (content_type, bytes) = match format {
        Format::Yaml => (
            "application/yaml".to_owned(),
            serde_norway::to_string(body)
                .map(String::into_bytes)
                .unwrap_or_default(),
        ),
        Format::Aggregated(version) => (
            format!(
                "application/json;g=apidiscovery.k8s.io;v={};as=APIGroupDiscoveryList",
                version.trim_start_matches("apidiscovery.k8s.io/")
            ),
            serde_json::to_vec(body).unwrap_or_default(),
        ),
        Format::Json
        | Format::Table
        | Format::Metadata
        | Format::MetadataProtobuf
        | Format::OpenApiV2Protobuf(_)
        | Format::Protobuf { .. } => (
            "application/json".to_owned(),
            plinth_protobuf::to_json(body),
        ),
    };
    with_body(code, &content_type, bytes, warnings)
}

/// The `PartialObjectMetadata` view of an object.
pub(crate) fn partial(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or(json!({})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_negotiate_like_kube_apiserver() {
        let with = |accept: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
            negotiate(&headers)
        };
        assert_eq!(with("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json").unwrap(), Format::Table);
        assert_eq!(
            with("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json").unwrap(),
            Format::Aggregated("apidiscovery.k8s.io/v2")
        );
        assert_eq!(
            with("application/vnd.kubernetes.protobuf, */*").unwrap(),
            Format::Protobuf { or_json: true }
        );
        assert_eq!(
            with("application/vnd.kubernetes.protobuf").unwrap(),
            Format::Protobuf { or_json: false }
        );
        assert_eq!(
            with("application/json, application/vnd.kubernetes.protobuf").unwrap(),
            Format::Json
        );
        assert_eq!(with("application/yaml").unwrap(), Format::Yaml);
        assert_eq!(
            with("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").unwrap(),
            Format::Metadata
        );
        assert_eq!(
            with("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json").unwrap(),
            Format::MetadataProtobuf
        );
        assert_eq!(
            with("application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1,application/json;as=Table;v=v1;g=meta.k8s.io").unwrap(),
            Format::Table
        );
        assert_eq!(with("text/html").unwrap_err().code(), 406);
    }
}
