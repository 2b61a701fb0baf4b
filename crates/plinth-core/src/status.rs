//! API errors as `metav1.Status`, with the codes, reasons and messages of apimachinery's
//! `errors` package.

use serde_json::{Map, Value, json};

use crate::GroupResource;

/// `metav1.StatusReason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusReason {
    /// 400.
    BadRequest,
    /// 401.
    Unauthorized,
    /// 403.
    Forbidden,
    /// 404.
    NotFound,
    /// 405.
    MethodNotAllowed,
    /// 406.
    NotAcceptable,
    /// 409, object exists.
    AlreadyExists,
    /// 409, write conflict.
    Conflict,
    /// 410, a resource version too old for a watch or continue token.
    Expired,
    /// 410.
    Gone,
    /// 413.
    RequestEntityTooLarge,
    /// 415.
    UnsupportedMediaType,
    /// 422.
    Invalid,
    /// 429.
    TooManyRequests,
    /// 500.
    InternalError,
    /// 503.
    ServiceUnavailable,
    /// 504.
    Timeout,
}

impl StatusReason {
    /// The reason as it appears in a `Status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "BadRequest",
            Self::Unauthorized => "Unauthorized",
            Self::Forbidden => "Forbidden",
            Self::NotFound => "NotFound",
            Self::MethodNotAllowed => "MethodNotAllowed",
            Self::NotAcceptable => "NotAcceptable",
            Self::AlreadyExists => "AlreadyExists",
            Self::Conflict => "Conflict",
            Self::Expired => "Expired",
            Self::Gone => "Gone",
            Self::RequestEntityTooLarge => "RequestEntityTooLarge",
            Self::UnsupportedMediaType => "UnsupportedMediaType",
            Self::Invalid => "Invalid",
            Self::TooManyRequests => "TooManyRequests",
            Self::InternalError => "InternalError",
            Self::ServiceUnavailable => "ServiceUnavailable",
            Self::Timeout => "Timeout",
        }
    }

    /// The reason a `Status` names, when it is one of these.
    pub fn from_name(name: &str) -> Option<Self> {
        ALL_REASONS.into_iter().find(|r| r.as_str() == name)
    }

    /// The reason that goes with an HTTP code (for a `Status` that names none): the first of
    /// these with that code, else `BadRequest` below 500 and `InternalError` from it.
    pub fn for_code(code: u16) -> Self {
        ALL_REASONS
            .into_iter()
            .find(|r| r.code() == code)
            .unwrap_or(if code < 500 {
                Self::BadRequest
            } else {
                Self::InternalError
            })
    }

    /// The HTTP status code kube-apiserver answers with.
    pub fn code(self) -> u16 {
        match self {
            Self::BadRequest => 400,
            Self::Unauthorized => 401,
            Self::Forbidden => 403,
            Self::NotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::NotAcceptable => 406,
            Self::AlreadyExists | Self::Conflict => 409,
            Self::Expired | Self::Gone => 410,
            Self::RequestEntityTooLarge => 413,
            Self::UnsupportedMediaType => 415,
            Self::Invalid => 422,
            Self::TooManyRequests => 429,
            Self::InternalError => 500,
            Self::ServiceUnavailable => 503,
            Self::Timeout => 504,
        }
    }
}

const ALL_REASONS: [StatusReason; 17] = [
    StatusReason::BadRequest,
    StatusReason::Unauthorized,
    StatusReason::Forbidden,
    StatusReason::NotFound,
    StatusReason::MethodNotAllowed,
    StatusReason::NotAcceptable,
    StatusReason::AlreadyExists,
    StatusReason::Conflict,
    StatusReason::Expired,
    StatusReason::Gone,
    StatusReason::RequestEntityTooLarge,
    StatusReason::UnsupportedMediaType,
    StatusReason::Invalid,
    StatusReason::TooManyRequests,
    StatusReason::InternalError,
    StatusReason::ServiceUnavailable,
    StatusReason::Timeout,
];

/// One cause of an error (`metav1.StatusCause`), e.g. one invalid field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueDuplicate`, `FieldValueNotSupported`,
    /// `FieldValueForbidden`, `FieldValueTooLong`, `FieldValueTypeInvalid`...
    pub reason: String,
    /// The message, e.g. `Invalid value: "X": ...`.
    pub message: String,
    /// The field path, e.g. `metadata.name`.
    pub field: String,
}

impl Cause {
    /// A cause.
    pub fn new(reason: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// `field: Invalid value: <value>: <detail>`, as field.Invalid words it.
    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        let message = if detail.is_empty() {
            format!("Invalid value: {}", render_value(value))
        } else {
            format!("Invalid value: {}: {detail}", render_value(value))
        };
        Self::new("FieldValueInvalid", field, message)
    }

    /// `field: Required value`, as field.Required words it.
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_owned()
        } else {
            format!("Required value: {detail}")
        };
        Self::new("FieldValueRequired", field, message)
    }

    /// `field: Unsupported value: <value>: supported values: "a", "b"`, as field.NotSupported
    /// words it.
    pub fn not_supported(field: impl Into<String>, value: &Value, supported: &[&str]) -> Self {
        let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        Self::new(
            "FieldValueNotSupported",
            field,
            format!(
                "Unsupported value: {}: supported values: {}",
                render_value(value),
                supported.join(", ")
            ),
        )
    }

    /// `field: Duplicate value: <value>`, as field.Duplicate words it (a string value).
    pub fn duplicate(field: impl Into<String>, value: &str) -> Self {
        Self::new(
            "FieldValueDuplicate",
            field,
            format!("Duplicate value: {value:?}"),
        )
    }

    /// `field: Not found: <value>`, as field.NotFound words it (a string value).
    pub fn not_found(field: impl Into<String>, value: &str) -> Self {
        Self::new("FieldValueNotFound", field, format!("Not found: {value:?}"))
    }

    /// `field: Too long: may not be more than <max> bytes`, as field.TooLong words it.
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self::new(
            "FieldValueTooLong",
            field,
            format!("Too long: may not be more than {max} bytes"),
        )
    }

    /// `field: Forbidden: <detail>`, as field.Forbidden words it.
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Self::new("FieldValueForbidden", field, format!("Forbidden: {detail}"))
    }

    /// `field: Invalid value: <value>: field is immutable`.
    pub fn immutable(field: impl Into<String>, value: &Value) -> Self {
        Self::invalid(field, value, "field is immutable")
    }

    /// The line this cause adds to an Invalid error's message: `field: message`.
    pub fn line(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// How apimachinery's field errors print a value: strings quoted, numbers and booleans bare,
/// objects and lists as Go would print them (here, as compact JSON).
pub fn render_value(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// `metav1.StatusDetails`, and the code when it differs from the reason's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Details {
    /// `details.name`.
    pub name: Option<String>,
    /// `details.group`.
    pub group: Option<String>,
    /// `details.kind` (a resource or a kind, as upstream puts it).
    pub kind: Option<String>,
    /// `details.causes`.
    pub causes: Vec<Cause>,
    /// `details.retryAfterSeconds`.
    pub retry_after_seconds: Option<u32>,
    /// Overrides the code of the reason (kube-apiserver answers some reasons with other codes).
    pub code: Option<u16>,
    /// The Status's `metadata.continue`: a list whose continue token expired is answered with
    /// a token that continues it inconsistently (from the latest revision).
    pub continue_token: Option<String>,
}

impl Details {
    /// The details of a `metav1.Status` another server sent (a webhook's), as far as they go.
    pub fn from_status(status: &Value) -> Self {
        let details = status.get("details").unwrap_or(&Value::Null);
        let text = |key: &str| {
            details
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let causes = details
            .get("causes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let field = |key: &str| c.get(key).and_then(Value::as_str).unwrap_or("");
                Cause::new(field("reason"), field("field"), field("message"))
            })
            .collect();
        Self {
            name: text("name"),
            group: text("group"),
            kind: text("kind"),
            causes,
            retry_after_seconds: details
                .get("retryAfterSeconds")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok()),
            code: None,
            continue_token: None,
        }
    }
}

/// An error of the API, rendered as a `metav1.Status` body with its HTTP code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// The reason.
    pub reason: StatusReason,
    /// The human-readable message.
    pub message: String,
    /// The details.
    pub details: Box<Details>,
}

impl ApiError {
    /// An error with a reason and message and no details.
    pub fn new(reason: StatusReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            details: Box::default(),
        }
    }

    fn about(mut self, resource: &GroupResource, name: &str) -> Self {
        self.details.name = Some(name.to_owned()).filter(|n| !n.is_empty());
        self.details.group = Some(resource.group.clone()).filter(|g| !g.is_empty());
        self.details.kind = Some(resource.resource.clone());
        self
    }

    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        self.details.code.unwrap_or_else(|| self.reason.code())
    }

    /// `configmaps "x" not found`.
    pub fn not_found(resource: &GroupResource, name: &str) -> Self {
        Self::new(
            StatusReason::NotFound,
            format!("{resource} \"{name}\" not found"),
        )
        .about(resource, name)
    }

    /// `configmaps "x" already exists`.
    pub fn already_exists(resource: &GroupResource, name: &str) -> Self {
        Self::new(
            StatusReason::AlreadyExists,
            format!("{resource} \"{name}\" already exists"),
        )
        .about(resource, name)
    }

    /// `Operation cannot be fulfilled on configmaps "x": <why>`.
    pub fn conflict(resource: &GroupResource, name: &str, why: &str) -> Self {
        Self::new(
            StatusReason::Conflict,
            format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
        )
        .about(resource, name)
    }

    /// The conflict of a stale resourceVersion.
    pub fn stale(resource: &GroupResource, name: &str) -> Self {
        Self::conflict(
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// `ConfigMap "x" is invalid: <causes>` (422), `kind` being the object's kind, qualified
    /// by its group as apimachinery's `GroupKind` prints (`Widget.example.com "x" is invalid`).
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let detail = match causes.as_slice() {
            [] => String::new(),
            [one] => one.line(),
            many => format!(
                "[{}]",
                many.iter().map(Cause::line).collect::<Vec<_>>().join(", ")
            ),
        };
        let mut error = Self::new(
            StatusReason::Invalid,
            if group.is_empty() {
                format!("{kind} \"{name}\" is invalid: {detail}")
            } else {
                format!("{kind}.{group} \"{name}\" is invalid: {detail}")
            },
        );
        error.details.name = Some(name.to_owned()).filter(|n| !n.is_empty());
        error.details.group = Some(group.to_owned()).filter(|g| !g.is_empty());
        error.details.kind = Some(kind.to_owned());
        error.details.causes = causes;
        error
    }

    /// 400 with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusReason::BadRequest, message)
    }

    /// 405: `the server does not allow this method on the requested resource`.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusReason::MethodNotAllowed,
            "the server does not allow this method on the requested resource",
        )
    }

    /// 405 with a specific message.
    pub fn method_not_allowed_because(message: impl Into<String>) -> Self {
        Self::new(StatusReason::MethodNotAllowed, message)
    }

    /// 415 for a content type the endpoint does not take.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            StatusReason::UnsupportedMediaType,
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf; got {content_type}"
            ),
        )
    }

    /// 413.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusReason::RequestEntityTooLarge,
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 410 Expired: a watch or list from a resourceVersion no longer in history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(StatusReason::Expired, message)
    }

    /// 403, as apimachinery's `NewForbidden` words it: `configmaps "x" is forbidden: <why>`,
    /// `configmaps is forbidden: <why>` without a name, `forbidden: <why>` without a resource
    /// (a non-resource path).
    pub fn forbidden(resource: Option<&GroupResource>, name: &str, why: &str) -> Self {
        match resource {
            None => Self::new(StatusReason::Forbidden, format!("forbidden: {why}")),
            Some(resource) if name.is_empty() => Self::new(
                StatusReason::Forbidden,
                format!("{resource} is forbidden: {why}"),
            )
            .about(resource, name),
            Some(resource) => Self::new(
                StatusReason::Forbidden,
                format!("{resource} \"{name}\" is forbidden: {why}"),
            )
            .about(resource, name),
        }
    }

    /// 401.
    pub fn unauthorized() -> Self {
        Self::new(StatusReason::Unauthorized, "Unauthorized")
    }

    /// 500, wrapping what failed.
    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(
            StatusReason::InternalError,
            format!("Internal error occurred: {message}"),
        )
    }

    /// 503.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusReason::ServiceUnavailable, message)
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut details = Map::new();
        let d = &self.details;
        if let Some(name) = &d.name {
            details.insert("name".into(), json!(name));
        }
        if let Some(group) = &d.group {
            details.insert("group".into(), json!(group));
        }
        if let Some(kind) = &d.kind {
            details.insert("kind".into(), json!(kind));
        }
        if !d.causes.is_empty() {
            let causes: Vec<Value> = d
                .causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let Some(after) = d.retry_after_seconds {
            details.insert("retryAfterSeconds".into(), json!(after));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason.as_str(),
            "code": self.code(),
        });
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        if let Some(token) = &d.continue_token {
            status["metadata"] = json!({"continue": token});
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_matches_kube_apiserver() {
        let status = ApiError::not_found(&GroupResource::new("", "configmaps"), "x").to_status();
        assert_eq!(
            status,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "configmaps \"x\" not found", "reason": "NotFound",
                   "details": {"name": "x", "kind": "configmaps"}, "code": 404})
        );
        let lease =
            ApiError::already_exists(&GroupResource::new("coordination.k8s.io", "leases"), "l");
        assert_eq!(
            lease.message,
            "leases.coordination.k8s.io \"l\" already exists"
        );
        assert_eq!(lease.to_status()["details"]["group"], "coordination.k8s.io");
        assert_eq!(lease.code(), 409);
    }

    #[test]
    fn invalid_lists_every_cause() {
        let one = ApiError::invalid(
            "",
            "ConfigMap",
            "X",
            vec![Cause::invalid("metadata.name", &json!("X"), "bad")],
        );
        assert_eq!(
            one.message,
            "ConfigMap \"X\" is invalid: metadata.name: Invalid value: \"X\": bad"
        );
        let two = ApiError::invalid(
            "",
            "ConfigMap",
            "X",
            vec![
                Cause::required("metadata.name", "name or generateName is required"),
                Cause::invalid("data", &json!(3), ""),
            ],
        );
        assert_eq!(
            two.message,
            "ConfigMap \"X\" is invalid: [metadata.name: Required value: name or generateName is required, data: Invalid value: 3]"
        );
        let grouped = ApiError::invalid(
            "example.com",
            "Widget",
            "w",
            vec![Cause::required("spec", "")],
        );
        assert_eq!(
            grouped.message,
            "Widget.example.com \"w\" is invalid: spec: Required value"
        );
        let status = two.to_status();
        assert_eq!(status["code"], 422);
        assert_eq!(status["details"]["causes"][0]["field"], "metadata.name");
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "FieldValueRequired"
        );
    }
}
