//! Builders of the objects Karpenter's tests feed its decisions and its API server: Pods, Nodes,
//! NodePools, NodeClaims, EC2NodeClasses and PodDisruptionBudgets, each from a one-word default
//! (what most tests want) plus fluent setters, e.g.
//!
//! ```
//! use crds::Operator;
//! use serde_json::json;
//! use testutil::{nodeclaim, nodepool, pod};
//!
//! let web = pod("web-1").cpu("100m").memory("128Mi").on_node("n1").label("app", "web").build();
//! let spot = nodepool("default")
//!     .requirement("karpenter.sh/capacity-type", Operator::In, ["spot"])
//!     .build();
//! let claim = nodeclaim("default-abc")
//!     .nodepool("default")
//!     .provider_id("aws:///us-east-1a/i-1")
//!     .condition("Launched", "True")
//!     .merge(json!({"spec": {"expireAfter": "720h"}}))
//!     .build();
//! # let _ = (web, spot, claim);
//! ```
//!
//! Every builder holds the object as JSON until `build()` (the typed object), `arc()` (the same in
//! an `Arc`, as snapshots hold them) or `json()` (the manifest, for an API server's store). For a
//! field no setter covers, `.merge(json!({...}))` applies a JSON merge patch ([`merge`]).
//!
//! This crate is a dev-dependency only. It depends on `crds` and no other crate of this workspace,
//! so that karpenter-core's own unit tests can use it without linking two copies of that crate.
//! Builders of karpenter-core's own types (`InstanceType`, `NodePoolTemplate`, `PodInfo`) live in
//! `karpenter_core::scheduling::testing`.

#[macro_use]
mod meta;
mod node;
mod nodeclaim;
mod nodeclass;
mod nodepool;
mod pdb;
mod pod;

pub use meta::{ConditionBuilder, T0, condition, merge};
pub use node::{NodeBuilder, node};
pub use nodeclaim::{NodeClaimBuilder, nodeclaim};
pub use nodeclass::{EC2NodeClassBuilder, ec2nodeclass};
pub use nodepool::{NodePoolBuilder, nodepool};
pub use pdb::{PdbBuilder, pdb};
pub use pod::{PodBuilder, pod};

/// The `nodeClassRef` NodePools and NodeClaims get unless told: the EC2NodeClass `default`.
pub(crate) fn default_node_class_ref() -> serde_json::Value {
    serde_json::json!({"group": crds::labels::AWS_GROUP, "kind": "EC2NodeClass", "name": "default"})
}

#[cfg(test)]
mod tests;
