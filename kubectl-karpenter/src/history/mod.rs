//! `kubectl karpenter history`: every NodeClaim Karpenter removed (and every disruption it
//! rolled back), when, why, the pods moved and the cost change, from the durable disruption
//! history the controller keeps in the ConfigMap `karpenter-disruption-history`
//! ([`crds::history`]). The core is pure: [`report`] selects and orders the records, [`render`]
//! prints them; [`command`] reads the cluster.

pub mod args;
pub mod command;
pub mod render;
pub mod report;
