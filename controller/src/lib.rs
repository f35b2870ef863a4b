//! Karpenter in Rust: the controller library behind the `karpenter` binary.

pub mod clock;
pub mod cloudprovider;
pub mod disruption;
pub mod node;
pub mod nodeclaim;
pub mod nodeclass;
pub mod nodepool;
pub mod operator;
pub mod provisioning;
pub mod scheduling;
pub mod simulate;
pub mod state;
