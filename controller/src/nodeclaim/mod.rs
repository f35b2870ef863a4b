//! NodeClaim controllers: the lifecycle (launch, registration by providerID, initialization,
//! liveness, expiration), the termination finalizer, garbage collection against the cloud, and
//! nodes whose capacity reservation ends ([`capacity_reservation`]);
//! every NodeClaim write goes through [`writes`]; every removal is recorded in the disruption
//! history by [`history`].

pub mod capacity_reservation;
pub mod garbagecollection;
pub mod history;
mod initialization;
mod launch;
pub mod lifecycle;
mod registration;
pub mod termination;
pub mod writes;
