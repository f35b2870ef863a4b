//! Node controllers: the termination finalizer that drains a Karpenter node before its instance
//! goes away, and the drain decisions it executes.

pub mod drain;
pub mod termination;
