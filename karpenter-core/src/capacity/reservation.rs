//! Capacity reservations (On-Demand Capacity Reservations and Capacity Blocks for ML) as upstream's
//! AWS provider turns them into offerings (`aws:pkg/providers/instancetype/offering/
//! reserved_capacity_resolver.go`, `pkg/providers/capacityreservation`): a reservation an
//! EC2NodeClass selects (`capacityReservationSelectorTerms`) gives its instance type one more
//! offering per reservation, capacity type `reserved`, in the reservation's zone, priced at the
//! on-demand price divided by 10,000,000 (already paid for, so it wins, while equal reservations
//! still order like their instance types), available while the reservation has room.
//!
//! [`Record`] is DescribeCapacityReservations' own shape (the `--capacity-reservations` file of
//! `karpenter sandbox` and `simulate`); [`matches`] applies one selector term; [`status`] is the
//! EC2NodeClass's `status.capacityReservations` entry.

use std::collections::BTreeMap;

use crds::ec2nodeclass::{CapacityReservation, CapacityReservationState, CapacityReservationType};
use crds::ec2nodeclass::{CapacityReservationSelectorTerm, InstanceMatchCriteria};
use jiff::Timestamp;
use serde::Deserialize;

/// What a reserved offering costs relative to on-demand: `on_demand / RESERVED_PRICE_DIVISOR`
/// (upstream's constant).
pub const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;

/// How long before a Capacity Block ends its nodes are drained: EC2 reclaims its instances 30
/// minutes before the end, and upstream deletes their NodeClaims 10 minutes before that, when
/// EC2 also sends its interruption notice (`aws:pkg/controllers/capacityreservation/
/// expiration`). From then on the reservation's `state` is `expiring` and it is not offered.
pub const CAPACITY_BLOCK_DRAIN_LEAD: jiff::SignedDuration = jiff::SignedDuration::from_mins(40);

/// How long before a Capacity Block ends EC2 reclaims (terminates) the instances still in it.
pub const CAPACITY_BLOCK_RECLAIM_LEAD: jiff::SignedDuration = jiff::SignedDuration::from_mins(30);

/// One EC2 tag, as the EC2 API writes it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct Tag {
    /// Tag key.
    pub key: String,
    /// Tag value.
    #[serde(default)]
    pub value: String,
}

/// A capacity reservation as DescribeCapacityReservations returns it (the fields Karpenter
/// reads).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "PascalCase")]
pub struct Record {
    /// `cr-...`.
    pub capacity_reservation_id: String,
    /// The one instance type it holds, e.g. `m5.large`.
    pub instance_type: String,
    /// Its zone, e.g. `us-east-1a`.
    pub availability_zone: String,
    /// Instances it holds in all.
    pub total_instance_count: i64,
    /// Instances that can still launch into it.
    pub available_instance_count: i64,
    /// `open` (any matching launch uses it) or `targeted` (only launches naming it).
    #[serde(default = "open")]
    pub instance_match_criteria: String,
    /// `default` (an On-Demand Capacity Reservation) or `capacity-block` (Capacity Blocks for
    /// ML).
    #[serde(default = "default_type")]
    pub reservation_type: String,
    /// When it ends (a capacity block always ends; an ODCR may be open-ended).
    #[serde(default)]
    pub end_date: Option<Timestamp>,
    /// 12-digit owning account.
    #[serde(default)]
    pub owner_id: String,
    /// Its tags.
    #[serde(default)]
    pub tags: Vec<Tag>,
    /// `active`, `expired`, `cancelled`, ... (only `active` ones are offered).
    #[serde(default = "active")]
    pub state: String,
}

fn open() -> String {
    "open".into()
}

fn default_type() -> String {
    "default".into()
}

fn active() -> String {
    "active".into()
}

/// Reservations from a `--capacity-reservations` file: a YAML (or JSON) list of [`Record`]s, or
/// a DescribeCapacityReservations response (`{CapacityReservations: [...]}`).
///
/// Errors: the text is neither, naming the record and field at fault.
pub fn parse(text: &str) -> Result<Vec<Record>, String> {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Response {
        capacity_reservations: Vec<Record>,
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        List(Vec<Record>),
        Response(Response),
    }
    match serde_saphyr::from_str::<Either>(text) {
        Ok(Either::List(records)) => Ok(records),
        Ok(Either::Response(r)) => Ok(r.capacity_reservations),
        Err(e) => Err(format!(
            "not a list of DescribeCapacityReservations records (CapacityReservationId, \
             InstanceType, AvailabilityZone, TotalInstanceCount, AvailableInstanceCount, ...): {e}"
        )),
    }
}

impl Record {
    /// Whether instances can launch into it at `now`: `active` and not ended.
    pub fn usable(&self, now: Timestamp) -> bool {
        self.state == "active" && self.end_date.is_none_or(|end| end > now)
    }

    /// Whether it is a Capacity Block within [`CAPACITY_BLOCK_DRAIN_LEAD`] of its end at `now`
    /// (upstream's `expiring` state): its nodes are drained and it takes no more launches.
    pub fn expiring(&self, now: Timestamp) -> bool {
        self.is_capacity_block()
            && self
                .end_date
                .is_some_and(|end| now >= end - CAPACITY_BLOCK_DRAIN_LEAD)
    }

    /// Whether new instances may launch into it at `now`: usable and not expiring (upstream
    /// offers no expiring reservation).
    pub fn offered(&self, now: Timestamp) -> bool {
        self.usable(now) && !self.expiring(now)
    }

    /// The reservation as an instance-type listing offers it at `now`: `room` more instances
    /// (never below 0) while it is [`Record::offered`], none otherwise. `room` is what the
    /// caller counts as free: EC2's `AvailableInstanceCount`, or the simulated cloud's own count.
    pub fn reserved_capacity(&self, room: i64, now: Timestamp) -> ReservedCapacity {
        ReservedCapacity {
            id: self.capacity_reservation_id.clone(),
            instance_type: self.instance_type.clone(),
            zone: self.availability_zone.clone(),
            available: if self.offered(now) { room.max(0) } else { 0 },
            reservation_type: self.reservation_type.clone(),
        }
    }

    /// `karpenter.k8s.aws/capacity-reservation-type`: `default` or `capacity-block`.
    pub fn is_capacity_block(&self) -> bool {
        self.reservation_type == "capacity-block"
    }

    fn tag_map(&self) -> BTreeMap<&str, &str> {
        self.tags
            .iter()
            .map(|t| (t.key.as_str(), t.value.as_str()))
            .collect()
    }
}

/// Whether `term` selects `r`: by `id`, or by every tag (value `*` matches any) with the
/// optional `ownerID` and `instanceMatchCriteria` (upstream `CapacityReservationSelectorTerm`).
pub fn matches(term: &CapacityReservationSelectorTerm, r: &Record) -> bool {
    if let Some(id) = &term.id {
        return *id == r.capacity_reservation_id;
    }
    if term.tags.is_empty() {
        return false;
    }
    let tags = r.tag_map();
    let tagged = term.tags.iter().all(|(k, v)| {
        tags.get(k.as_str())
            .is_some_and(|have| v == "*" || have == v)
    });
    let owner = term.owner_id.as_ref().is_none_or(|o| *o == r.owner_id);
    let criteria = term.instance_match_criteria.is_none_or(|c| {
        let want = match c {
            InstanceMatchCriteria::Open => "open",
            InstanceMatchCriteria::Targeted => "targeted",
        };
        want == r.instance_match_criteria
    });
    tagged && owner && criteria
}

/// The usable reservations at `now` (expiring ones included, so their status says so) that any
/// of `terms` selects, in id order.
pub fn select<'a>(
    terms: &[CapacityReservationSelectorTerm],
    records: &'a [Record],
    now: Timestamp,
) -> Vec<&'a Record> {
    let mut out: Vec<&Record> = records
        .iter()
        .filter(|r| r.usable(now) && terms.iter().any(|t| matches(t, r)))
        .collect();
    out.sort_by(|a, b| a.capacity_reservation_id.cmp(&b.capacity_reservation_id));
    out
}

/// The node class's `status.capacityReservations` entry for `r` at `now`: `state` is
/// `expiring` for a Capacity Block within [`CAPACITY_BLOCK_DRAIN_LEAD`] of its end, else
/// `active`; `available` (instances that can still launch into it, as EC2's
/// `AvailableInstanceCount` reports it once this cluster's own instances are counted) and its
/// total are this project's additions, so `kubectl get ec2nodeclass -o yaml` shows the room left.
pub fn status(r: &Record, now: Timestamp, available: i64) -> CapacityReservation {
    CapacityReservation {
        availability_zone: r.availability_zone.clone(),
        end_time: r
            .end_date
            .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
        id: r.capacity_reservation_id.clone(),
        instance_match_criteria: if r.instance_match_criteria == "targeted" {
            InstanceMatchCriteria::Targeted
        } else {
            InstanceMatchCriteria::Open
        },
        instance_type: r.instance_type.clone(),
        owner_id: r.owner_id.clone(),
        reservation_type: if r.is_capacity_block() {
            CapacityReservationType::CapacityBlock
        } else {
            CapacityReservationType::Default
        },
        interruptible: false,
        state: if r.expiring(now) {
            CapacityReservationState::Expiring
        } else {
            CapacityReservationState::Active
        },
        available_instance_count: Some(available.max(0)),
        total_instance_count: Some(r.total_instance_count),
    }
}

/// A reservation as an instance-type listing offers it: id, type, zone, how many more
/// instances it takes now, and its type label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservedCapacity {
    /// `cr-...`.
    pub id: String,
    /// The instance type it holds.
    pub instance_type: String,
    /// Its zone.
    pub zone: String,
    /// Instances that can still launch into it (never below 0).
    pub available: i64,
    /// `default` or `capacity-block`.
    pub reservation_type: String,
}

#[cfg(test)]
#[path = "reservation_tests.rs"]
mod tests;
