//! Node controllers: the termination finalizer that drains a Karpenter node before its instance
//! goes away, executing the drain decisions of `karpenter_core::lifecycle::drain`, then waits
//! for its volumes to detach ([`volume_detachment`]).

pub mod termination;
pub mod volume_detachment;
