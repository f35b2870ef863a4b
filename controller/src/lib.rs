//! Karpenter in Rust: the controller library behind the `karpenter` binary.

pub mod clock;
pub mod cloudprovider;
pub mod scheduling;
