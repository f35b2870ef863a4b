//! A NodeClaim's life as pure decisions, one file per phase as upstream's
//! `nodeclaim/lifecycle` and `node/termination` are laid out: what registration writes onto the
//! Node, when a node is initialized, when a NodeClaim has not launched or registered in time
//! (liveness) or has expired, whether it has drifted and what a launch stamps on it, in what
//! order a node drains, when its volumes have detached, when a deleting NodeClaim must be
//! gone, and which unhealthy nodes to repair. The controllers that act on
//! these live in `controller::nodeclaim`, `controller::node` and `controller::drift`.

pub mod drain;
pub mod drift;
pub mod expiration;
pub mod initialization;
pub mod liveness;
pub mod registration;
pub mod registration_health;
pub mod repair;
pub mod reservations;
pub mod stamp;
pub mod termination;
pub mod volume_detachment;
