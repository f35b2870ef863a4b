//! What happens to nodes in a capacity reservation as the reservation ends, as upstream's AWS
//! provider does it (`aws:pkg/controllers/capacityreservation/capacitytype` and
//! `.../expiration`, each a singleton run every minute):
//!
//! - **Demotion.** When an On-Demand Capacity Reservation ends or is cancelled, EC2 keeps its
//!   instances running as plain on-demand ones. A NodeClaim labelled
//!   `karpenter.sh/capacity-type: reserved` whose instance the cloud now reports as on-demand
//!   is relabelled `on-demand` and loses `karpenter.k8s.aws/capacity-reservation-id`, and so
//!   is its registered Node; consolidation and `status` then price it as on-demand.
//! - **Capacity Block drain.** EC2 reclaims a Capacity Block's instances 30 minutes before it
//!   ends. From [`CAPACITY_BLOCK_DRAIN_LEAD`](crate::capacity::reservation::CAPACITY_BLOCK_DRAIN_LEAD) (40 minutes) before the end the block is
//!   `expiring`: its NodeClaims are deleted, so their nodes drain gracefully and their pods
//!   are provisioned elsewhere before EC2 takes the instances back.
//!
//! Deleting NodeClaims are left alone: they are draining already.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crds::NodeClaim;
use crds::labels::{
    CAPACITY_RESERVATION_ID_LABEL, CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
};
use jiff::Timestamp;

use crate::capacity::reservation::Record;
use crate::cloud::Instance;

/// What one pass decided, NodeClaims in input order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Changes {
    /// NodeClaims (and their Nodes) to relabel `on-demand`: labelled `reserved`, their
    /// instance no longer in a reservation.
    pub demote: Vec<Arc<NodeClaim>>,
    /// NodeClaims to delete, each with the id of its expiring Capacity Block.
    pub expire: Vec<(Arc<NodeClaim>, String)>,
}

fn label<'a>(claim: &'a NodeClaim, key: &str) -> Option<&'a str> {
    claim.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The reservation ids the NodeClaims are labelled with (`karpenter.k8s.aws/
/// capacity-reservation-id`), sorted and once each: what the cloud is asked to describe.
pub fn reservation_ids(claims: &[Arc<NodeClaim>]) -> Vec<String> {
    let mut ids: Vec<String> = claims
        .iter()
        .filter_map(|c| label(c, CAPACITY_RESERVATION_ID_LABEL).map(str::to_string))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Decide demotions and Capacity Block drains from the NodeClaims, the cloud's instances and
/// the reservations the NodeClaims are labelled with (as described now). Pure.
///
/// A NodeClaim whose instance is not listed is not demoted (garbage collection deals with
/// it); a reservation not described (deleted, or the description failed) drains nothing.
pub fn decide(
    claims: &[Arc<NodeClaim>],
    instances: &[Instance],
    records: &[Record],
    now: Timestamp,
) -> Changes {
    let by_provider_id: HashMap<&str, &Instance> = instances
        .iter()
        .map(|i| (i.provider_id.as_str(), i))
        .collect();
    let expiring: HashSet<&str> = records
        .iter()
        .filter(|r| r.expiring(now))
        .map(|r| r.capacity_reservation_id.as_str())
        .collect();
    let mut out = Changes::default();
    for claim in claims {
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(id) = label(claim, CAPACITY_RESERVATION_ID_LABEL)
            && expiring.contains(id)
        {
            out.expire.push((Arc::clone(claim), id.to_string()));
            continue;
        }
        let provider_id = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .unwrap_or_default();
        let demoted = by_provider_id
            .get(provider_id)
            .is_some_and(|i| i.capacity_type == CAPACITY_TYPE_ON_DEMAND);
        if label(claim, CAPACITY_TYPE_LABEL) == Some(CAPACITY_TYPE_RESERVED) && demoted {
            out.demote.push(Arc::clone(claim));
        }
    }
    out
}

#[cfg(test)]
#[path = "reservations_tests.rs"]
mod tests;
