//! NodeClaim controllers: the lifecycle (launch, registration by providerID, initialization,
//! liveness), the termination finalizer, and garbage collection against the cloud.

pub mod garbagecollection;
mod initialization;
mod launch;
pub mod lifecycle;
pub mod liveness;
mod registration;
mod termination;
