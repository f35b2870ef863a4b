//! API errors as kube-apiserver reports them: a `meta.k8s.io/v1 Status` with an HTTP code and a
//! machine-readable reason (`NotFound`, `AlreadyExists`, `Conflict`, ...).

use serde_json::{Value, json};

/// The `reason` field of a failed Status, with its HTTP code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// 400: a body the server cannot use (e.g. a server-side apply patch that does not apply)
    BadRequest,
    /// 401: the request carries no valid credentials
    Unauthorized,
    /// 404: the object, namespace or path does not exist
    NotFound,
    /// 409 on create: an object of that name exists
    AlreadyExists,
    /// 409 on a stale resourceVersion or a precondition
    Conflict,
    /// 422: the object breaks its schema or a write rule, or a patch does not apply
    Invalid,
    /// 405: the verb is not served on the path
    MethodNotAllowed,
    /// 410: the requested resourceVersion is older than the watch history
    Expired,
    /// 413: a request body larger than the server reads (kube-apiserver's
    /// `RequestEntityTooLarge`)
    RequestEntityTooLarge,
    /// 415: a patch content type the kind does not support
    UnsupportedMediaType,
    /// 429: e.g. an eviction blocked by a PodDisruptionBudget
    TooManyRequests,
    /// 500: the server cannot answer (or an injected fault)
    InternalError,
    /// 504: the request did not complete in time (kube-apiserver's `Timeout`, e.g. a
    /// resourceVersion the server has not reached yet)
    Timeout,
}

impl Reason {
    /// HTTP status code for this reason.
    pub fn code(self) -> u16 {
        match self {
            Reason::BadRequest => 400,
            Reason::Unauthorized => 401,
            Reason::NotFound => 404,
            Reason::AlreadyExists | Reason::Conflict => 409,
            Reason::Invalid => 422,
            Reason::MethodNotAllowed => 405,
            Reason::Expired => 410,
            Reason::RequestEntityTooLarge => 413,
            Reason::UnsupportedMediaType => 415,
            Reason::TooManyRequests => 429,
            Reason::InternalError => 500,
            Reason::Timeout => 504,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Reason::BadRequest => "BadRequest",
            Reason::Unauthorized => "Unauthorized",
            Reason::NotFound => "NotFound",
            Reason::AlreadyExists => "AlreadyExists",
            Reason::Conflict => "Conflict",
            Reason::Invalid => "Invalid",
            Reason::MethodNotAllowed => "MethodNotAllowed",
            Reason::Expired => "Expired",
            Reason::RequestEntityTooLarge => "RequestEntityTooLarge",
            Reason::UnsupportedMediaType => "UnsupportedMediaType",
            Reason::TooManyRequests => "TooManyRequests",
            Reason::InternalError => "InternalError",
            Reason::Timeout => "Timeout",
        }
    }
}

/// A failed API call.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// Machine-readable reason and HTTP code.
    pub reason: Reason,
    /// Human message, worded like kube-apiserver's.
    pub message: String,
    /// `details` of the Status (name, group, kind, causes), when known.
    pub details: Option<Value>,
}

impl ApiError {
    /// A new error without details.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        ApiError {
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// `<resource> "<name>" not found`.
    pub fn not_found(qualified_resource: &str, name: &str) -> Self {
        ApiError::new(
            Reason::NotFound,
            format!("{qualified_resource} \"{name}\" not found"),
        )
        .with_details(name, qualified_resource)
    }

    /// `<resource> "<name>" already exists`.
    pub fn already_exists(qualified_resource: &str, name: &str) -> Self {
        ApiError::new(
            Reason::AlreadyExists,
            format!("{qualified_resource} \"{name}\" already exists"),
        )
        .with_details(name, qualified_resource)
    }

    /// The stale-resourceVersion conflict message clients retry on.
    pub fn conflict(qualified_resource: &str, name: &str) -> Self {
        ApiError::new(
            Reason::Conflict,
            format!(
                "Operation cannot be fulfilled on {qualified_resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        )
        .with_details(name, qualified_resource)
    }

    /// A validation failure of one field.
    pub fn invalid(kind: &str, name: &str, field: &str, message: &str) -> Self {
        ApiError {
            reason: Reason::Invalid,
            message: format!("{kind} \"{name}\" is invalid: {field}: {message}"),
            details: Some(json!({
                "name": name, "kind": kind,
                "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}],
            })),
        }
    }

    /// A bad request (malformed body, bad selector, ...).
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(Reason::BadRequest, message)
    }

    /// 413 for a body longer than `limit` bytes, worded as k8s.io/apiserver's
    /// `limitedReadBody` words it: `Request entity too large: limit is 3145728`.
    pub fn request_entity_too_large(limit: usize) -> Self {
        ApiError::new(
            Reason::RequestEntityTooLarge,
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 504 for a read at a resourceVersion the store has not reached, as k8s.io/apiserver's
    /// `storage.NewTooLargeResourceVersionError` makes it: a `Timeout` whose cause is
    /// `ResourceVersionTooLarge`, telling the client to retry after `retry_after_seconds`
    /// (left out when 0, as its `omitempty` field is).
    pub fn too_large_resource_version(
        requested: u64,
        current: u64,
        retry_after_seconds: u64,
    ) -> Self {
        let mut details = json!({
            "causes": [{
                "reason": "ResourceVersionTooLarge",
                "message": "Too large resource version",
            }],
        });
        if retry_after_seconds > 0 {
            details["retryAfterSeconds"] = json!(retry_after_seconds);
        }
        ApiError {
            reason: Reason::Timeout,
            message: format!("Too large resource version: {requested}, current: {current}"),
            details: Some(details),
        }
    }

    /// 422 for query parameters that break apimachinery's `ValidateListOptions`, as
    /// k8s.io/apiserver's list handler reports them: `ListOptions.meta.k8s.io "" is invalid:
    /// resourceVersionMatch: Forbidden: ...`. `causes` are `(field, reason, message)`, e.g.
    /// `("resourceVersionMatch", "FieldValueForbidden", "resourceVersionMatch is forbidden
    /// unless resourceVersion is provided")`.
    pub fn invalid_list_options(causes: &[(&str, &str, String)]) -> Self {
        let shown: Vec<String> = causes
            .iter()
            .map(|(field, reason, message)| {
                format!("{field}: {}: {message}", field_error_type(reason))
            })
            .collect();
        let message = match shown.as_slice() {
            [one] => format!("ListOptions.meta.k8s.io \"\" is invalid: {one}"),
            many => format!(
                "ListOptions.meta.k8s.io \"\" is invalid: [{}]",
                many.join(", ")
            ),
        };
        ApiError {
            reason: Reason::Invalid,
            message,
            details: Some(json!({
                "group": "meta.k8s.io",
                "kind": "ListOptions",
                "causes": causes
                    .iter()
                    .map(|(field, reason, message)| json!({
                        "reason": reason,
                        "message": format!("{}: {message}", field_error_type(reason)),
                        "field": field,
                    }))
                    .collect::<Vec<_>>(),
            })),
        }
    }

    fn with_details(mut self, name: &str, qualified_resource: &str) -> Self {
        let (kind, group) = qualified_resource
            .split_once('.')
            .unwrap_or((qualified_resource, ""));
        self.details = Some(json!({"name": name, "group": group, "kind": kind}));
        self
    }

    /// The Status object sent as the response body.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason.as_str(),
            "code": self.reason.code(),
        });
        if let Some(d) = &self.details {
            status["details"] = d.clone();
        }
        status
    }
}

/// How apimachinery's `field.Error` prints a cause reason (`FieldValueForbidden` →
/// `Forbidden`, `FieldValueNotSupported` → `Unsupported value`).
fn field_error_type(reason: &str) -> &str {
    match reason {
        "FieldValueForbidden" => "Forbidden",
        "FieldValueNotSupported" => "Unsupported value",
        "FieldValueInvalid" => "Invalid value",
        "FieldValueRequired" => "Required value",
        other => other,
    }
}

/// Result of a store or handler operation.
pub type ApiResult<T> = Result<T, ApiError>;
