//! NodeClaim controllers: the lifecycle (launch, registration by providerID, initialization,
//! liveness, expiration), the termination finalizer, and garbage collection against the cloud;
//! every NodeClaim write goes through [`writes`]; every removal is recorded in the disruption
//! history by [`history`].

pub mod garbagecollection;
pub mod history;
mod initialization;
mod launch;
pub mod lifecycle;
mod registration;
pub mod termination;
pub mod writes;
