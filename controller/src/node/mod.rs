//! Node controllers: the termination finalizer that drains a Karpenter node before its instance
//! goes away, executing the drain decisions of `karpenter_core::lifecycle::drain`, then waits
//! for its volumes to detach ([`volume_detachment`]); and node repair ([`health`]), which
//! replaces nodes that stay unhealthy.

pub mod health;
pub mod termination;
pub mod volume_detachment;
