//! kube-apiserver's validation of the objects written to the sandbox: field errors worded as
//! apimachinery words them (`spec.replicas: Invalid value: -5: must be greater than or equal to
//! 0`) and refused together in one 422 `Invalid` Status whose `details.causes` name each field.
//! Covered: object metadata (names by kind, label and annotation syntax and sizes) of every
//! kind; for pods and the pod templates of workloads, containers, resource quantities and
//! requests against limits; for workloads, replica counts, selectors and template labels. Not covered: most other
//! per-field rules of `pkg/apis/*/validation` (volumes, probes, services, RBAC, ...).

mod meta;
mod pod;
mod workloads;

use serde_json::{Value, json};

use crate::error::{ApiError, Reason};
use crate::registry::ResourceType;

/// The kind of a field error (apimachinery's `field.ErrorType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorType {
    /// A malformed value: `Invalid value: <value>: <detail>`.
    Invalid,
    /// A missing value: `Required value[: <detail>]`.
    Required,
    /// A repeated value: `Duplicate value: <value>`.
    Duplicate,
    /// A value outside an enumeration: `Unsupported value: <value>: supported values: ...`.
    NotSupported,
    /// A value not allowed here: `Forbidden: <detail>`.
    Forbidden,
    /// A value too long to repeat: `Too long: <detail>`.
    TooLong,
}

impl ErrorType {
    fn reason(self) -> &'static str {
        match self {
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
        }
    }

    fn words(self) -> &'static str {
        match self {
            ErrorType::Invalid => "Invalid value",
            ErrorType::Required => "Required value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
        }
    }
}

/// One field's validation failure.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// What is wrong.
    pub kind: ErrorType,
    /// The field's path, e.g. `spec.containers[0].resources.requests[cpu]`.
    pub field: String,
    /// The offending value (strings are quoted, numbers bare, objects as JSON).
    pub value: Option<Value>,
    /// The explanation after the value.
    pub detail: String,
}

impl FieldError {
    /// `Invalid value: <value>: <detail>`.
    pub fn invalid(
        field: impl Into<String>,
        value: impl Into<Value>,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            kind: ErrorType::Invalid,
            field: field.into(),
            value: Some(value.into()),
            detail: detail.into(),
        }
    }

    /// `Required value[: <detail>]`.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            kind: ErrorType::Required,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    /// `Duplicate value: <value>`.
    pub fn duplicate(field: impl Into<String>, value: impl Into<Value>) -> Self {
        FieldError {
            kind: ErrorType::Duplicate,
            field: field.into(),
            value: Some(value.into()),
            detail: String::new(),
        }
    }

    /// `Unsupported value: <value>: supported values: "a", "b"`.
    pub fn not_supported(
        field: impl Into<String>,
        value: impl Into<Value>,
        supported: &[&str],
    ) -> Self {
        let quoted: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        FieldError {
            kind: ErrorType::NotSupported,
            field: field.into(),
            value: Some(value.into()),
            detail: format!("supported values: {}", quoted.join(", ")),
        }
    }

    /// `Forbidden: <detail>`.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            kind: ErrorType::Forbidden,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    /// `Too long: may not be more than <max> bytes`.
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        FieldError {
            kind: ErrorType::TooLong,
            field: field.into(),
            value: None,
            detail: format!("may not be more than {max} bytes"),
        }
    }

    /// The message without the field (`ErrorBody`): what a Status cause carries.
    pub fn body(&self) -> String {
        let mut s = self.kind.words().to_string();
        if let Some(v) = &self.value {
            s.push_str(": ");
            match v {
                Value::String(text) => s.push_str(&format!("{text:?}")),
                Value::Number(_) | Value::Bool(_) => s.push_str(&v.to_string()),
                other => s.push_str(&other.to_string()),
            }
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// The 422 kube-apiserver answers for these errors (`errors.NewInvalid`): the message
/// `<Kind>[.<group>] "<name>" is invalid: <error>` (several in brackets, repeats once) and one
/// cause per error.
pub fn invalid(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> ApiError {
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    let mut seen: Vec<String> = Vec::new();
    for e in errors {
        let text = e.to_string();
        if !seen.contains(&text) {
            seen.push(text);
        }
    }
    let summary = match seen.len() {
        0 => String::new(),
        1 => format!(": {}", seen[0]),
        _ => format!(": [{}]", seen.join(", ")),
    };
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| json!({"reason": e.kind.reason(), "message": e.body(), "field": e.field}))
        .collect();
    ApiError {
        reason: Reason::Invalid,
        message: format!("{qualified} {name:?} is invalid{summary}"),
        details: Some(json!({"name": name, "group": group, "kind": kind, "causes": causes})),
    }
}

/// Why `name` cannot name an object of type `rt` (the name rule of the kind's
/// `ValidateObjectMeta`): a DNS label for Namespaces, a DNS-1035 label for Services, a DNS
/// subdomain for every other kind. Empty when it can.
pub fn name_errors(rt: &ResourceType, name: &str) -> Vec<String> {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Namespace") => pod::dns_label_errors(name),
        ("", "Service") => meta::dns1035_label_errors(name),
        _ => meta::dns_subdomain_errors(name),
    }
}

/// Validate an object of a served type as kube-apiserver's strategy for it does on create (and,
/// with the same rules, on update). Custom resources get the metadata rules only: their schema
/// is checked separately.
///
/// Errors: every field error found, as one 422.
pub fn validate(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    let mut errors = meta::object_meta(obj.get("metadata").unwrap_or(&Value::Null), "metadata");
    if rt.crd.is_none() {
        let spec = obj.get("spec").unwrap_or(&Value::Null);
        match (rt.group.as_str(), rt.kind.as_str()) {
            ("", "Pod") => pod::pod_spec(spec, "spec", &mut errors),
            ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") => {
                workloads::replicated(&rt.kind, spec, &mut errors)
            }
            ("batch", "Job") => workloads::job(spec, &mut errors),
            _ => {}
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Err(invalid(&rt.group, &rt.kind, name, &errors))
}

/// Append `[i]` to a path.
fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// Append `.child` to a path.
fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_error_reads_as_kube_apiserver_writes_it() {
        let e = invalid(
            "apps",
            "Deployment",
            "web",
            &[FieldError::invalid(
                "spec.replicas",
                -5,
                "must be greater than or equal to 0",
            )],
        );
        assert_eq!(e.reason.code(), 422);
        assert_eq!(
            e.message,
            "Deployment.apps \"web\" is invalid: spec.replicas: Invalid value: -5: must be greater than or equal to 0"
        );
        let status = e.status();
        assert_eq!(status["reason"], "Invalid");
        assert_eq!(
            status["details"]["causes"],
            json!([{"reason": "FieldValueInvalid", "field": "spec.replicas",
                "message": "Invalid value: -5: must be greater than or equal to 0"}])
        );
    }

    #[test]
    fn several_errors_are_bracketed_and_repeats_collapse() {
        let twice = FieldError::invalid("metadata.labels", "x!", "bad");
        let e = invalid(
            "",
            "Pod",
            "p",
            &[
                twice.clone(),
                twice,
                FieldError::required("spec.containers", ""),
            ],
        );
        assert_eq!(
            e.message,
            "Pod \"p\" is invalid: [metadata.labels: Invalid value: \"x!\": bad, spec.containers: Required value]"
        );
        assert_eq!(
            e.details
                .as_ref()
                .map(|d| d["causes"].as_array().map(Vec::len)),
            Some(Some(3))
        );
    }

    #[test]
    fn bodies_of_each_error_type() {
        assert_eq!(
            FieldError::not_supported("spec.restartPolicy", "Sometimes", &["Always", "Never"])
                .body(),
            "Unsupported value: \"Sometimes\": supported values: \"Always\", \"Never\""
        );
        assert_eq!(
            FieldError::too_long("metadata.annotations", 262144).body(),
            "Too long: may not be more than 262144 bytes"
        );
        assert_eq!(
            FieldError::duplicate("x", "c").body(),
            "Duplicate value: \"c\""
        );
        assert_eq!(FieldError::forbidden("x", "no").body(), "Forbidden: no");
        assert_eq!(
            FieldError::invalid("x", json!({"app": "a"}), "bad").body(),
            "Invalid value: {\"app\":\"a\"}: bad"
        );
    }
}
