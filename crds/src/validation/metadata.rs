//! Validation of NodePool template labels and of taints (`validateLabels`, `validateTaints` in
//! `pkg/apis/v1/nodepool_validation.go` and `nodeclaim_validation.go`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Taint;

use super::requirements::restricted_label_message;
use super::{FieldError, MAX_TEMPLATE_LABELS, label_value_errors, qualified_name_errors};
use crate::labels;

/// Validates NodePool template labels (upstream `validateLabels` plus the CRD rules).
pub fn validate_template_labels(
    labels_map: &BTreeMap<String, String>,
    path: &str,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if labels_map.len() > MAX_TEMPLATE_LABELS {
        errs.push(FieldError::new(
            path,
            format!(
                "{} labels exceed the maximum of {MAX_TEMPLATE_LABELS}",
                labels_map.len()
            ),
        ));
    }
    for (key, value) in labels_map {
        let field = format!("{path}[{key}]");
        if key == labels::NODEPOOL_LABEL {
            errs.push(FieldError::new(
                &field,
                format!("label {key:?} is restricted"),
            ));
        } else if labels::is_restricted_label(key) {
            errs.push(FieldError::new(&field, restricted_label_message(key)));
        }
        for msg in qualified_name_errors(key) {
            errs.push(FieldError::new(
                &field,
                format!("{key:?} is not a qualified name: {msg}"),
            ));
        }
        for msg in label_value_errors(value) {
            errs.push(FieldError::new(
                &field,
                format!("{value:?} is not a valid label value: {msg}"),
            ));
        }
    }
    errs
}

/// Validates `taints` and `startupTaints` under `path` (e.g. `spec.template.spec`): valid keys,
/// values and effects, and no key/effect pair twice across both lists.
pub fn validate_taints(taints: &[Taint], startup_taints: &[Taint], path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen: BTreeSet<(&str, &str)> = BTreeSet::new();
    for (field, list) in [("taints", taints), ("startupTaints", startup_taints)] {
        for (i, taint) in list.iter().enumerate() {
            let item = format!("{path}.{field}[{i}]");
            if taint.key.is_empty() {
                errs.push(FieldError::new(
                    format!("{item}.key"),
                    "taint key must not be empty",
                ));
            } else {
                for msg in qualified_name_errors(&taint.key) {
                    errs.push(FieldError::new(
                        format!("{item}.key"),
                        format!("{:?} is not a qualified name: {msg}", taint.key),
                    ));
                }
            }
            if let Some(value) = taint.value.as_deref().filter(|v| !v.is_empty()) {
                for msg in qualified_name_errors(value) {
                    errs.push(FieldError::new(
                        format!("{item}.value"),
                        format!("{value:?} is not a valid taint value: {msg}"),
                    ));
                }
            }
            if !labels::TAINT_EFFECTS.contains(&taint.effect.as_str()) {
                errs.push(FieldError::new(
                    format!("{item}.effect"),
                    format!(
                        "{:?} must be one of NoSchedule, PreferNoSchedule, NoExecute",
                        taint.effect
                    ),
                ));
            }
            if !seen.insert((taint.key.as_str(), taint.effect.as_str())) {
                errs.push(FieldError::new(
                    item,
                    format!(
                        "duplicate taint Key/Effect pair {}={}",
                        taint.key, taint.effect
                    ),
                ));
            }
        }
    }
    errs
}
