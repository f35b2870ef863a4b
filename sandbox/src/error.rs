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
    /// 415: a patch content type the kind does not support
    UnsupportedMediaType,
    /// 429: e.g. an eviction blocked by a PodDisruptionBudget
    TooManyRequests,
    /// 500: the server cannot answer (or an injected fault)
    InternalError,
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
            Reason::UnsupportedMediaType => 415,
            Reason::TooManyRequests => 429,
            Reason::InternalError => 500,
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
            Reason::UnsupportedMediaType => "UnsupportedMediaType",
            Reason::TooManyRequests => "TooManyRequests",
            Reason::InternalError => "InternalError",
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

/// Result of a store or handler operation.
pub type ApiResult<T> = Result<T, ApiError>;
