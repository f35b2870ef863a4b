//! NodeClaim controllers: the lifecycle (launch, registration by providerID, initialization,
//! liveness, expiration), the termination finalizer, and garbage collection against the cloud;
//! every NodeClaim write goes through [`writes`].

pub mod garbagecollection;
mod initialization;
mod launch;
pub mod lifecycle;
mod registration;
pub mod termination;
pub mod writes;
