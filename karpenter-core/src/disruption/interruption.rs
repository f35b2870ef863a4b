//! What an interruption of a node asks for (an extension of upstream's AWS interruption
//! controller, which only drains): the replacement for the pods on the interrupted node,
//! computed by the solver as drift's and consolidation's replacements are and never on the
//! interrupted offering, and the time by which the node must start draining whether or not
//! the replacement is ready.
//!
//! The order of events this plans for: the warning arrives; the replacement is launched at
//! once; the interrupted node is drained when the replacement is initialized, or at
//! [`drain_by`] if it is not ready by then, whichever comes first; then its NodeClaim is
//! deleted through the normal termination path.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::pod_view::PodView;
use jiff::{SignedDuration, Timestamp};

use super::consolidation::{Settings, Simulator, Unconsolidatable};
use crate::capacity::{InstanceType, Offering};
use crate::interruption::{Kind, SPOT_WARNING};
use crate::provisioning::plan::{Listing, PlannedNodeClaim};
use crate::snapshot::Snapshot;

/// How much of the two-minute spot warning is kept for the drain: an interrupted spot node
/// starts draining at the latest 60 s after the warning, so its pods (30 s grace by default)
/// have the last minute to move before EC2 reclaims the instance.
pub const SPOT_DRAIN_MARGIN: Duration = Duration::from_secs(60);

/// The offering an interrupted node runs on: instance type, zone, capacity type (its
/// NodeClaim's labels).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterruptedOffering {
    /// Instance type, e.g. `m5.large`.
    pub instance_type: String,
    /// Zone, e.g. `us-east-1a`.
    pub zone: String,
    /// `spot`, `on-demand` or `reserved`.
    pub capacity_type: String,
}

/// When the interrupted node starts draining at the latest, replacement ready or not:
/// - a spot interruption: the warning's time (else `now`) plus the warning (2 minutes) less
///   [`SPOT_DRAIN_MARGIN`];
/// - a scheduled change (maintenance days ahead): `now` plus `initialization_timeout`, the
///   time a replacement is given to initialize;
/// - an instance stopping or terminating: `now` (it is going already).
pub fn drain_by(
    kind: Kind,
    raised: Option<Timestamp>,
    now: Timestamp,
    initialization_timeout: Duration,
) -> Timestamp {
    let after = |t: Timestamp, d: Duration| {
        t.checked_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::ZERO))
            .unwrap_or(t)
    };
    match kind {
        Kind::SpotInterrupted => after(
            raised.unwrap_or(now),
            SPOT_WARNING.saturating_sub(SPOT_DRAIN_MARGIN),
        ),
        Kind::ScheduledChange => after(now, initialization_timeout),
        Kind::InstanceStopped
        | Kind::InstanceTerminated
        | Kind::RebalanceRecommendation
        | Kind::NoOp => now,
    }
}

/// `listings` with `offering` unavailable wherever it is listed, so no replacement is planned
/// onto the offering that was just interrupted (whatever the cloud provider's capacity-error
/// cache says yet).
pub fn without_offering(
    listings: &HashMap<String, Listing>,
    offering: &InterruptedOffering,
) -> HashMap<String, Listing> {
    listings
        .iter()
        .map(|(class, listing)| {
            let listing = listing.as_ref().map(|types| {
                if !types.iter().any(|t| t.name == offering.instance_type) {
                    return Arc::clone(types);
                }
                let edited: Vec<Arc<InstanceType>> = types
                    .iter()
                    .map(|t| {
                        if t.name != offering.instance_type {
                            return Arc::clone(t);
                        }
                        let mut t = InstanceType::clone(t);
                        for o in &mut t.offerings {
                            if is(o, offering) {
                                o.available = false;
                            }
                        }
                        Arc::new(t)
                    })
                    .collect();
                Arc::new(edited)
            });
            (class.clone(), listing.map_err(Clone::clone))
        })
        .collect()
}

fn is(o: &Offering, offering: &InterruptedOffering) -> bool {
    o.zone == offering.zone && o.capacity_type == offering.capacity_type
}

/// The replacement for an interrupted node whose reschedulable `pods` must move: the solver
/// places them alone on the NodePools' current templates (see
/// [`Simulator::replacement_for`]), with `interrupted` unavailable. `Ok(None)`: nothing to
/// move (an empty node, or a NodeClaim whose node never registered).
///
/// Errors: a pod fits no NodePool, or the pods need more than one new NodeClaim; the node is
/// then drained without a replacement, as upstream does, and the provisioner places its pods.
pub fn replacement(
    snap: &Snapshot,
    listings: &HashMap<String, Listing>,
    settings: &Settings,
    pods: &[Arc<PodView>],
    interrupted: Option<&InterruptedOffering>,
) -> Result<Option<PlannedNodeClaim>, Unconsolidatable> {
    if pods.is_empty() {
        return Ok(None);
    }
    let edited;
    let listings = match interrupted {
        Some(o) => {
            edited = without_offering(listings, o);
            &edited
        }
        None => listings,
    };
    Simulator::new(snap, listings, settings).replacement_for(pods)
}

#[cfg(test)]
mod tests;
