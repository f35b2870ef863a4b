//! Node controllers: the termination finalizer that drains a Karpenter node before its instance
//! goes away.

pub mod termination;
