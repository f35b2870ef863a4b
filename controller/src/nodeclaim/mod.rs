//! NodeClaim controllers: the lifecycle (launch, registration by providerID, initialization,
//! liveness, expiration), the termination finalizer, and garbage collection against the cloud.

pub mod expiration;
pub mod garbagecollection;
mod initialization;
mod launch;
pub mod lifecycle;
pub mod liveness;
mod registration;
pub mod termination;
