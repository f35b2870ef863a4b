//! Validation of requirements (`ValidateRequirement` in `pkg/apis/v1/nodeclaim_validation.go`
//! plus the CEL rules on `requirements`).

use super::{FieldError, label_value_errors, qualified_name_errors};
use crate::labels;
use crate::requirements::{
    MAX_REQUIREMENTS, MIN_VALUES_MAX, MIN_VALUES_MIN, NodeSelectorRequirementWithMinValues,
    Operator,
};

/// Validates a requirement list at `path`; with `forbid_nodepool_key`, `karpenter.sh/nodepool`
/// is rejected (NodePools may not set it; NodeClaims carry it).
pub fn validate_requirements(
    requirements: &[NodeSelectorRequirementWithMinValues],
    path: &str,
    forbid_nodepool_key: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if requirements.len() > MAX_REQUIREMENTS {
        errs.push(FieldError::new(
            path,
            format!(
                "{} requirements exceed the maximum of {MAX_REQUIREMENTS}",
                requirements.len()
            ),
        ));
    }
    for (i, req) in requirements.iter().enumerate() {
        let item = format!("{path}[{i}]");
        if forbid_nodepool_key && labels::normalize_label_key(&req.key) == labels::NODEPOOL_LABEL {
            errs.push(FieldError::new(
                format!("{item}.key"),
                format!("label {:?} is restricted", labels::NODEPOOL_LABEL),
            ));
        }
        errs.extend(validate_requirement(req, &item));
    }
    errs
}

/// Validates one requirement (upstream `ValidateRequirement` plus the CEL rules); `path` is the
/// requirement's own path, e.g. `spec.template.spec.requirements[0]`.
pub fn validate_requirement(
    req: &NodeSelectorRequirementWithMinValues,
    path: &str,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let key = labels::normalize_label_key(&req.key);
    let key_path = format!("{path}.key");
    let values_path = format!("{path}.values");
    let min_values_path = format!("{path}.minValues");
    for msg in qualified_name_errors(key) {
        errs.push(FieldError::new(
            &key_path,
            format!("{key:?} is not a qualified name: {msg}"),
        ));
    }
    if labels::is_restricted_label(key) {
        errs.push(FieldError::new(&key_path, restricted_label_message(key)));
    }
    for (j, value) in req.values.iter().enumerate() {
        for msg in label_value_errors(value) {
            errs.push(FieldError::new(
                format!("{values_path}[{j}]"),
                format!("{value:?} is not a valid label value: {msg}"),
            ));
        }
    }
    let n = req.values.len();
    match req.operator {
        Operator::In if n == 0 => {
            errs.push(FieldError::new(
                &values_path,
                "requirements with operator 'In' must have a value defined",
            ));
        }
        op if op.is_numeric() => {
            let single_int = n == 1 && req.values[0].parse::<i64>().is_ok_and(|v| v >= 0);
            if !single_int {
                errs.push(FieldError::new(
                    &values_path,
                    format!("operator {op} requires exactly one non-negative integer value"),
                ));
            }
        }
        op if op.is_existence() && n > 0 => {
            errs.push(FieldError::new(
                &values_path,
                format!("operator {op} must not have values"),
            ));
        }
        _ => {}
    }
    if let Some(min) = req.min_values {
        if !(MIN_VALUES_MIN..=MIN_VALUES_MAX).contains(&min) {
            errs.push(FieldError::new(
                &min_values_path,
                format!("{min} must be between {MIN_VALUES_MIN} and {MIN_VALUES_MAX}"),
            ));
        }
        if req.operator == Operator::In && (n as i64) < min {
            errs.push(FieldError::new(
                &min_values_path,
                format!("requirements with 'minValues' must have at least that many values specified in the 'values' field ({min} > {n})"),
            ));
        }
    }
    if req.operator == Operator::In
        && let Some(known) = labels::well_known_values(key)
    {
        let valid = req
            .values
            .iter()
            .filter(|v| known.contains(&v.as_str()))
            .count();
        if valid == 0 && n > 0 {
            errs.push(FieldError::new(
                &values_path,
                format!(
                    "no valid values found in {:?} for {key}, expected one of: {known:?}",
                    req.values
                ),
            ));
        } else if let Some(min) = req.min_values
            && n > 0
            && (valid as i64) < min
        {
            errs.push(FieldError::new(
                &values_path,
                format!("not enough valid values found in {:?} for {key}, expected at least {min} from: {known:?}", req.values),
            ));
        }
    }
    errs
}

pub(super) fn restricted_label_message(key: &str) -> String {
    format!(
        "label {key:?} is restricted as it might interfere with provisioning; use a well-known label or a label outside the restricted domains {:?}",
        labels::RESTRICTED_LABEL_DOMAINS
    )
}
