//! Runtime validation of NodePools, NodeClaims, EC2NodeClasses and NodeOverlays: the CRD's CEL
//! and pattern rules plus upstream's `RuntimeValidate` webhook rules
//! (`pkg/apis/v1/nodepool_validation.go`, `nodeclaim_validation.go`,
//! `v1alpha1/nodeoverlay_validation.go`, CEL markers in `nodepool.go`/`nodeclaim.go`,
//! `nodeoverlay.go` and `ec2nodeclass.go`). The NodePool validation controller turns a
//! non-empty result into `ValidationSucceeded=False` with reason [`VALIDATION_FAILED_REASON`]
//! and [`summarize`] as the message; the EC2NodeClass controller likewise with
//! [`NODE_CLASS_VALIDATION_FAILED_REASON`], the NodeOverlay controller with
//! [`reason::RUNTIME_VALIDATION`].

use crate::conditions::reason;
use crate::duration;
use crate::labels;
use crate::nodeclaim::{NodeClaimSpec, NodeClassReference};
use crate::nodepool::{NodePool, NodePoolSpec};

mod budgets;
mod metadata;
mod names;
mod node_class;
mod nodeoverlay;
#[cfg(test)]
mod nodeoverlay_tests;
mod requirements;
#[cfg(test)]
mod tests;

pub use budgets::*;
pub use metadata::*;
pub use names::*;
pub use node_class::*;
pub use nodeoverlay::*;
pub use requirements::*;

/// Reason for `ValidationSucceeded=False` on a NodePool.
pub const VALIDATION_FAILED_REASON: &str = reason::NODEPOOL_VALIDATION_FAILED;
/// Most labels a NodePool template may set (CRD `maxProperties`).
pub const MAX_TEMPLATE_LABELS: usize = 100;

/// One validation failure: the JSON path of the offending field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// Path of the field, e.g. `spec.template.spec.requirements[0].values`.
    pub field: String,
    /// What is wrong and what is allowed, e.g. `110 must be between 1 and 100` (`spec.weight`).
    pub message: String,
}

impl FieldError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// All errors as one condition message: `field: message; field: message`.
pub fn summarize(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Validates a NodePool (see [`validate_nodepool_spec`]).
pub fn validate_nodepool(nodepool: &NodePool) -> Vec<FieldError> {
    validate_nodepool_spec(&nodepool.spec)
}

/// Validates a NodePool spec: template labels, requirements, taints, node class reference,
/// durations, disruption budgets, weight, replicas and static-pool rules.
pub fn validate_nodepool_spec(spec: &NodePoolSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let template = &spec.template;
    errs.extend(validate_template_labels(
        &template.metadata.labels,
        "spec.template.metadata.labels",
    ));
    let tspec = &template.spec;
    errs.extend(validate_requirements(
        &tspec.requirements,
        "spec.template.spec.requirements",
        true,
    ));
    errs.extend(validate_taints(
        &tspec.taints,
        &tspec.startup_taints,
        "spec.template.spec",
    ));
    errs.extend(validate_node_class_ref(
        &tspec.node_class_ref,
        "spec.template.spec.nodeClassRef",
    ));
    let expire_after = tspec.expire_after.as_string();
    if !duration::matches_nillable_pattern(&expire_after) {
        errs.push(FieldError::new(
            "spec.template.spec.expireAfter",
            format!("{expire_after:?} must be a duration in whole s, m or h (e.g. 720h) or Never"),
        ));
    }
    if let Some(tgp) = &tspec.termination_grace_period {
        errs.extend(validate_termination_grace_period(
            &tgp.as_string(),
            "spec.template.spec.terminationGracePeriod",
        ));
    }
    let consolidate_after = spec.disruption.consolidate_after.as_string();
    if !duration::matches_nillable_pattern(&consolidate_after) {
        errs.push(FieldError::new(
            "spec.disruption.consolidateAfter",
            format!(
                "{consolidate_after:?} must be a duration in whole s, m or h (e.g. 30s) or Never"
            ),
        ));
    }
    errs.extend(validate_budgets(
        &spec.disruption.budgets,
        "spec.disruption.budgets",
    ));
    if let Some(weight) = spec.weight
        && !(1..=100).contains(&weight)
    {
        errs.push(FieldError::new(
            "spec.weight",
            format!("{weight} must be between 1 and 100"),
        ));
    }
    if let Some(replicas) = spec.replicas {
        if replicas < 0 {
            errs.push(FieldError::new(
                "spec.replicas",
                format!("{replicas} must not be negative"),
            ));
        }
        if spec.limits.keys().any(|k| k != labels::RESOURCE_NODES) {
            errs.push(FieldError::new(
                "spec.limits",
                "only 'limits.nodes' is supported on static NodePools",
            ));
        }
        if spec.weight.is_some() {
            errs.push(FieldError::new(
                "spec.weight",
                "'weight' is not supported on static NodePools",
            ));
        }
    }
    errs
}

/// Rules that compare a NodePool with its previous version (CEL transition rules).
pub fn validate_nodepool_update(old: &NodePoolSpec, new: &NodePoolSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if old.replicas.is_some() != new.replicas.is_some() {
        errs.push(FieldError::new(
            "spec.replicas",
            "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
        ));
    }
    let (o, n) = (
        &old.template.spec.node_class_ref,
        &new.template.spec.node_class_ref,
    );
    if o.group != n.group {
        errs.push(FieldError::new(
            "spec.template.spec.nodeClassRef.group",
            "nodeClassRef.group is immutable",
        ));
    }
    if o.kind != n.kind {
        errs.push(FieldError::new(
            "spec.template.spec.nodeClassRef.kind",
            "nodeClassRef.kind is immutable",
        ));
    }
    errs
}

/// Validates a NodeClaim spec: requirements, taints, node class reference and durations.
pub fn validate_nodeclaim_spec(spec: &NodeClaimSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    errs.extend(validate_requirements(
        &spec.requirements,
        "spec.requirements",
        false,
    ));
    errs.extend(validate_taints(&spec.taints, &spec.startup_taints, "spec"));
    errs.extend(validate_node_class_ref(
        &spec.node_class_ref,
        "spec.nodeClassRef",
    ));
    let expire_after = spec.expire_after.as_string();
    if !duration::matches_nillable_pattern(&expire_after) {
        errs.push(FieldError::new(
            "spec.expireAfter",
            format!("{expire_after:?} must be a duration in whole s, m or h (e.g. 720h) or Never"),
        ));
    }
    if let Some(tgp) = &spec.termination_grace_period {
        errs.extend(validate_termination_grace_period(
            &tgp.as_string(),
            "spec.terminationGracePeriod",
        ));
    }
    errs
}

/// A NodeClaim's spec may not change after creation.
pub fn validate_nodeclaim_update(old: &NodeClaimSpec, new: &NodeClaimSpec) -> Vec<FieldError> {
    if old == new {
        Vec::new()
    } else {
        vec![FieldError::new("spec", "spec is immutable")]
    }
}

/// Validates a node class reference: group, kind and name set; group without `/`.
pub fn validate_node_class_ref(r: &NodeClassReference, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (name, value) in [("group", &r.group), ("kind", &r.kind), ("name", &r.name)] {
        if value.is_empty() {
            errs.push(FieldError::new(
                format!("{path}.{name}"),
                format!("{name} may not be empty"),
            ));
        }
    }
    if r.group.contains('/') {
        errs.push(FieldError::new(
            format!("{path}.group"),
            format!("{:?} must be an API group without a version", r.group),
        ));
    }
    errs
}

fn validate_termination_grace_period(value: &str, path: &str) -> Vec<FieldError> {
    if duration::matches_termination_grace_period_pattern(value) {
        Vec::new()
    } else {
        vec![FieldError::new(
            path,
            format!("{value:?} must be a duration in whole s, m or h, e.g. 24h"),
        )]
    }
}
