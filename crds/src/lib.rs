//! Karpenter's `karpenter.sh/v1`, `karpenter.sh/v1alpha1` and `karpenter.k8s.aws/v1` API types:
//! NodePool, NodeClaim, EC2NodeClass and NodeOverlay, their well-known labels and condition
//! types, pure validation, and the CRD manifests generated from the types. This crate does no
//! I/O.

pub mod conditions;
pub mod disruption;
pub mod duration;
pub mod ec2nodeclass;
pub mod generate;
pub mod hash;
pub mod history;
pub mod labels;
pub mod nodeclaim;
pub mod nodeoverlay;
pub mod nodepool;
pub mod requirements;
pub mod sandbox;
mod schema;
pub mod support;
pub mod upgrade;
pub mod validation;

pub use conditions::{Condition, ConditionStatus, HasConditions, StatusConditions};
pub use duration::{GoDuration, NillableDuration};
pub use ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus};
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus, NodeClassReference};
pub use nodeoverlay::{NodeOverlay, NodeOverlaySpec, NodeOverlayStatus, OverlayRequirement};
pub use nodepool::{
    Budget, ConsolidationPolicy, Disruption, DisruptionReason, NodeClaimTemplate,
    NodeClaimTemplateSpec, NodePool, NodePoolSpec, NodePoolStatus,
};
pub use requirements::{NodeSelectorRequirementWithMinValues, Operator};
