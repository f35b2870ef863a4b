//! NodeClaim controllers: the lifecycle (launch, registration by providerID, initialization,
//! liveness) and the termination finalizer.

mod initialization;
mod launch;
pub mod lifecycle;
pub mod liveness;
mod registration;
mod termination;
