//! Provisioning decisions: from NodePools to the solver's templates and from its decisions back
//! to NodeClaims ([`template`]), each NodePool's instance types with NodeOverlays applied
//! ([`listing`]), and one pass over a snapshot as a [`plan::Plan`] (NodeClaims to
//! create, nominations, failures). The batcher and the executor that creates NodeClaims live in
//! `controller::provisioning`.

pub mod listing;
pub mod nomination;
pub mod plan;
pub mod static_capacity;
pub mod template;

/// The reason of the Event that tells a pod where it will go (upstream's `Nominated`).
pub const NOMINATED_REASON: &str = "Nominated";

/// The message of a `Nominated` Event is this, then `nodeclaim/NAME` or `node/NAME` (upstream's
/// wording; `kubectl karpenter why-pending` reads it back through
/// [`explain::nominated_target`](crate::scheduling::explain::nominated_target)).
pub const NOMINATION_PREFIX: &str = "Pod should schedule on: ";
