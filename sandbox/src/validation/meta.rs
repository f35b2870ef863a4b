//! Object metadata rules every kind shares (apimachinery's `ValidateObjectMeta`): label keys and
//! values, annotation keys and their total size; and label selectors (`ValidateLabelSelector`).

use std::sync::OnceLock;

use regex::Regex;
use serde_json::Value;

use super::{FieldError, child, index};

/// kube-apiserver's cap on the summed size of an object's annotation keys and values.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;
const LABEL_VALUE_MAX: usize = 63;
const QUALIFIED_NAME_MAX: usize = 63;
const SUBDOMAIN_MAX: usize = 253;

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_MAX: usize = 63;
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

fn anchored(fmt: &str) -> Regex {
    // The patterns are constants: a failure here is a bug caught by the unit tests.
    Regex::new(&format!("^{fmt}$")).unwrap_or_else(|e| panic!("pattern {fmt}: {e}"))
}

fn qualified_name_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| anchored(QUALIFIED_NAME_FMT))
}

fn label_value_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| anchored(&format!("({QUALIFIED_NAME_FMT})?")))
}

fn subdomain_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| anchored(SUBDOMAIN_FMT))
}

/// apimachinery's `RegexError`: the message, examples and the pattern.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{fmt}')",
        examples.join(" or ")
    )
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// Why a string is not a DNS subdomain (`IsDNS1123Subdomain`).
pub fn dns_subdomain_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > SUBDOMAIN_MAX {
        errs.push(max_len_error(SUBDOMAIN_MAX));
    }
    if !subdomain_re().is_match(value) {
        errs.push(regex_error(SUBDOMAIN_MSG, SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// Why a string is not a DNS-1035 label (`IsDNS1035Label`), e.g. a Service name: at most 63
/// characters, lowercase alphanumerics and `-`, starting with a letter.
pub fn dns1035_label_errors(value: &str) -> Vec<String> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| anchored(DNS1035_LABEL_FMT));
    let mut errs = Vec::new();
    if value.len() > DNS1035_LABEL_MAX {
        errs.push(max_len_error(DNS1035_LABEL_MAX));
    }
    if !re.is_match(value) {
        errs.push(regex_error(
            DNS1035_LABEL_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// Why a string is not a qualified name, i.e. a label key (`IsQualifiedName`).
pub fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns_subdomain_errors(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errs.push(format!("name part {}", max_len_error(QUALIFIED_NAME_MAX)));
    }
    if !qualified_name_re().is_match(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Why a string is not a label value (`IsValidLabelValue`).
pub fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        errs.push(max_len_error(LABEL_VALUE_MAX));
    }
    if !label_value_re().is_match(value) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            &format!("({QUALIFIED_NAME_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Label keys and values (`ValidateLabels`); every error names the map, not the key.
pub fn labels(labels: Option<&Value>, path: &str, errors: &mut Vec<FieldError>) {
    let Some(map) = labels.and_then(Value::as_object) else {
        return;
    };
    for (key, value) in map {
        for msg in qualified_name_errors(key) {
            errors.push(FieldError::invalid(path, key.as_str(), msg));
        }
        let value = value.as_str().unwrap_or_default();
        for msg in label_value_errors(value) {
            errors.push(FieldError::invalid(path, value, msg));
        }
    }
}

/// Annotation keys (qualified names, any case) and the total size (`ValidateAnnotations`).
pub fn annotations(annotations: Option<&Value>, path: &str, errors: &mut Vec<FieldError>) {
    let Some(map) = annotations.and_then(Value::as_object) else {
        return;
    };
    let mut total = 0usize;
    for (key, value) in map {
        for msg in qualified_name_errors(&key.to_lowercase()) {
            errors.push(FieldError::invalid(path, key.as_str(), msg));
        }
        total += key.len() + value.as_str().map_or(0, str::len);
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errors.push(FieldError::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
}

/// The metadata of any object: its labels and annotations.
pub fn object_meta(meta: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    labels(meta.get("labels"), &child(path, "labels"), &mut errors);
    annotations(
        meta.get("annotations"),
        &child(path, "annotations"),
        &mut errors,
    );
    errors
}

/// A label selector's keys, values and operators (`ValidateLabelSelector`).
pub fn label_selector(selector: &Value, path: &str, errors: &mut Vec<FieldError>) {
    labels(
        selector.get("matchLabels"),
        &child(path, "matchLabels"),
        errors,
    );
    let expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, expr) in expressions.iter().enumerate() {
        let at = index(&child(path, "matchExpressions"), i);
        let op = expr
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let values = expr
            .get("values")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        match op {
            "In" | "NotIn" if values == 0 => errors.push(FieldError::required(
                child(&at, "values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if values > 0 => errors.push(FieldError::forbidden(
                child(&at, "values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errors.push(FieldError::invalid(
                child(&at, "operator"),
                other,
                "not a valid selector operator",
            )),
        }
        let key = expr.get("key").and_then(Value::as_str).unwrap_or_default();
        for msg in qualified_name_errors(key) {
            errors.push(FieldError::invalid(child(&at, "key"), key, msg));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_keys_and_values_follow_apimachinery() {
        assert!(qualified_name_errors("app").is_empty());
        assert!(qualified_name_errors("karpenter.sh/nodepool").is_empty());
        assert_eq!(
            qualified_name_errors("bad key!"),
            vec!["name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".to_string()]
        );
        assert_eq!(
            qualified_name_errors("/x"),
            vec!["prefix part must be non-empty".to_string()]
        );
        assert_eq!(qualified_name_errors("a/b/c").len(), 1);
        assert!(label_value_errors("").is_empty());
        assert_eq!(
            label_value_errors(&"a".repeat(64)),
            vec!["must be no more than 63 characters".to_string()]
        );
    }

    #[test]
    fn a_megabyte_label_value_is_refused_on_length() {
        let meta = json!({"labels": {"big": "a".repeat(1 << 20)}});
        let errors = object_meta(&meta, "metadata");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "metadata.labels");
        assert_eq!(errors[0].detail, "must be no more than 63 characters");
    }

    #[test]
    fn annotations_are_capped_in_total() {
        let fine = json!({"annotations": {"Upper.Case/Key": "x", "note": "a".repeat(1000)}});
        assert!(object_meta(&fine, "metadata").is_empty());
        let huge = json!({"annotations": {"a": "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT)}});
        let errors = object_meta(&huge, "metadata");
        assert_eq!(
            errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec!["metadata.annotations: Too long: may not be more than 262144 bytes".to_string()]
        );
    }

    #[test]
    fn selectors_check_operators_and_values() {
        let mut errors = Vec::new();
        label_selector(
            &json!({"matchExpressions": [{"key": "a", "operator": "In"}, {"key": "b", "operator": "Near", "values": ["x"]}]}),
            "spec.selector",
            &mut errors,
        );
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].field, "spec.selector.matchExpressions[0].values");
        assert_eq!(
            errors[1].field,
            "spec.selector.matchExpressions[1].operator"
        );
    }
}
