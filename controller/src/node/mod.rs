//! Node controllers: the termination finalizer that drains a Karpenter node before its instance
//! goes away, executing the drain decisions of `karpenter_core::lifecycle::drain`.

pub mod termination;
