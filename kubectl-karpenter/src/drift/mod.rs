//! `kubectl karpenter drift explain`: why a NodeClaim is drifted or not — the `Drifted`
//! condition the controller wrote, the NodePool and EC2NodeClass hashes it was stamped with
//! against the current ones (and the hash versions), and the exact fields that changed.
//!
//! The core is pure: [`resolve`] finds the NodeClaim a name means, [`explain`] builds a
//! [`report`] with the controller's own drift checks, [`render`] prints it; [`args`] is the
//! command line and [`command`] reads the cluster.

pub mod args;
pub mod command;
pub mod explain;
pub mod render;
pub mod report;
pub mod resolve;

#[cfg(test)]
pub mod fixtures;
