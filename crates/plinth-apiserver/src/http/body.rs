//! Request bodies: read within the size limit, decoded once (JSON, YAML, protobuf; patches by
//! their media type) into what the registry takes.

use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use futures::StreamExt;
use plinth_core::{ApiError, StatusReason};
use serde_json::Value;

use plinth_registry::{MAX_BODY_BYTES, Patch};

/// How much of an oversized body is read and discarded before answering 413, so that the
/// request completes normally (an HTTP/2 stream reset mid-upload makes clients drop the answer).
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;

pub(crate) async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    let mut stream = body.into_data_stream();
    let mut buffer = bytes::BytesMut::new();
    let mut total = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::bad_request(format!("unable to read the request body: {e}")))?;
        total += chunk.len();
        if total <= MAX_BODY_BYTES {
            buffer.extend_from_slice(&chunk);
        } else if total > DRAIN_LIMIT {
            break;
        }
    }
    if total > MAX_BODY_BYTES {
        return Err(ApiError::too_large(MAX_BODY_BYTES));
    }
    Ok(buffer.freeze())
}

pub(crate) fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// Decodes a JSON or YAML body into an object.
pub(crate) fn decode_body(headers: &HeaderMap, bytes: &[u8]) -> Result<Value, ApiError> {
    let kind = content_type(headers);
    let value: Value = match kind.as_str() {
        "" | "application/json" => serde_json::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the object provided is unrecognized: couldn't get version/kind; json parse error: {e}")))?,
        plinth_protobuf::MEDIA_TYPE => plinth_protobuf::decode(bytes)?,
        "application/yaml" | "application/x-yaml" | "text/yaml" => serde_norway::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the object provided is unrecognized: yaml parse error: {e}")))?,
        other => return Err(ApiError::unsupported_media_type(other)),
    };
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "the object provided is unrecognized: couldn't get version/kind; the body is not a JSON object",
        ));
    }
    Ok(value)
}

/// Decodes a PATCH body by its media type.
///
/// # Errors
/// 415 for another media type; 400 for a body that does not decode.
pub(crate) fn decode_patch(headers: &HeaderMap, bytes: &[u8]) -> Result<Patch, ApiError> {
    let media = content_type(headers);
    let json = |bytes: &[u8]| -> Result<Value, ApiError> {
        serde_json::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
    };
    match media.as_str() {
        "application/json-patch+json" => {
            let value = json(bytes)?;
            serde_json::from_value::<json_patch::Patch>(value)
                .map(Patch::Json)
                .map_err(|e| {
                    ApiError::bad_request(format!(
                        "the server rejected our request due to an error in our request: {e}"
                    ))
                })
        }
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            let value = json(bytes)?;
            if !value.is_object() {
                return Err(ApiError::bad_request("the patch must be a JSON object"));
            }
            Ok(if media == "application/merge-patch+json" {
                Patch::Merge(value)
            } else {
                Patch::Strategic(value)
            })
        }
        "application/apply-patch+yaml" => serde_norway::from_slice::<Value>(bytes)
            .map(Patch::Apply)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}"))),
        _ => Err(ApiError::new(
            StatusReason::UnsupportedMediaType,
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml",
        )),
    }
}
