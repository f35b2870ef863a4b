//! Capacity reservations on EC2 (upstream `aws:pkg/providers/capacityreservation`,
//! `aws:pkg/controllers/nodeclass/capacityreservation.go`, `aws:pkg/providers/instance/types.go`):
//! an EC2NodeClass's `capacityReservationSelectorTerms` become DescribeCapacityReservations
//! queries, what they find becomes [`Record`]s (the shape the simulated cloud and
//! `karpenter_core::capacity::reservation` use), and an instance's `CapacityReservationId`
//! decides whether it still counts as `reserved`.
//!
//! - **Queries** ([`queries`]): one per selector term, always `state=active`; a term with an `id`
//!   asks for that id, one with `tags` (value `*` = any) asks by `tag:KEY`/`tag-key` with the
//!   optional `owner-id` and `instance-match-criteria` filters.
//! - **Describing** ([`describe`], [`describe_ids`]): an id EC2 does not know
//!   (`InvalidCapacityReservationId.NotFound`) is left out instead of failing the rest.
//! - **Capacity type** ([`capacity_type`]): an instance launched into a reservation is `reserved`
//!   while that reservation is active; `on-demand` once EC2 reports it ended or no longer knows
//!   it, never on a guess (an id not described yet keeps `reserved`).

use std::collections::{BTreeMap, BTreeSet};

use crds::ec2nodeclass::{
    CapacityReservation, CapacityReservationSelectorTerm, CapacityReservationState,
    CapacityReservationType, InstanceMatchCriteria,
};
use crds::labels as l;
use ec2api::{
    CAPACITY_BLOCK, CapacityReservationInfo, CapacityReservationQuery, Ec2, Ec2Error, Filter,
    InstanceInfo,
};
use jiff::{SignedDuration, Timestamp};
use karpenter_core::capacity::LaunchOffering;
use karpenter_core::capacity::reservation::{Record, ReservedCapacity, Tag};

/// How long a reservation described for an instance's capacity type stays trusted before it is
/// described again (upstream polls reservations every minute).
pub const RESERVATION_TTL: SignedDuration = SignedDuration::from_secs(60);

/// A reservation as last described: the record, `None` when EC2 did not know the id, and when.
#[derive(Clone, Debug, PartialEq)]
pub struct Described {
    /// The reservation, or `None`: EC2 answered that the id does not exist.
    pub record: Option<Record>,
    /// When it was described.
    pub at: Timestamp,
}

fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(k, v)| {
            if v == "*" {
                Filter::new("tag-key", k.clone())
            } else {
                Filter::new(format!("tag:{k}"), v.clone())
            }
        })
        .collect()
}

/// The DescribeCapacityReservations queries for selector terms (upstream
/// `QueriesFromSelectorTerms`): per term, its `id` as `CapacityReservationIds`, and/or, when it
/// has tags or an `instanceMatchCriteria`, the filters `tag:KEY` (`tag-key` for the value `*`),
/// `owner-id` and `instance-match-criteria`; every query filters `state=active`.
pub fn queries(terms: &[CapacityReservationSelectorTerm]) -> Vec<CapacityReservationQuery> {
    let active = || Filter::new("state", "active");
    let mut out = Vec::new();
    for term in terms {
        if let Some(id) = &term.id {
            out.push(CapacityReservationQuery {
                ids: vec![id.clone()],
                filters: vec![active()],
            });
        }
        if !term.tags.is_empty() || term.instance_match_criteria.is_some() {
            let mut filters = vec![active()];
            if let Some(owner) = &term.owner_id {
                filters.push(Filter::new("owner-id", owner.clone()));
            }
            filters.extend(tag_filters(&term.tags));
            if let Some(c) = term.instance_match_criteria {
                let c = match c {
                    InstanceMatchCriteria::Open => "open",
                    InstanceMatchCriteria::Targeted => "targeted",
                };
                filters.push(Filter::new("instance-match-criteria", c));
            }
            out.push(CapacityReservationQuery {
                ids: vec![],
                filters,
            });
        }
    }
    out
}

/// A described reservation in the shape the rest of Karpenter reads.
pub fn record(info: CapacityReservationInfo) -> Record {
    Record {
        capacity_reservation_id: info.id,
        instance_type: info.instance_type,
        availability_zone: info.zone,
        total_instance_count: info.total_instance_count,
        available_instance_count: info.available_instance_count,
        instance_match_criteria: info.instance_match_criteria,
        reservation_type: info.reservation_type,
        end_date: info.end_date,
        owner_id: info.owner_id,
        tags: info
            .tags
            .into_iter()
            .map(|(key, value)| Tag { key, value })
            .collect(),
        state: info.state,
    }
}

/// A node class's `status.capacityReservations` entry as a [`Record`] (for a reservation this
/// provider has not described since it started): state `active` unless the entry says
/// `expiring`, room as the entry last reported it.
pub fn record_from_status(c: &CapacityReservation) -> Record {
    Record {
        capacity_reservation_id: c.id.clone(),
        instance_type: c.instance_type.clone(),
        availability_zone: c.availability_zone.clone(),
        total_instance_count: c.total_instance_count.unwrap_or(0),
        available_instance_count: c.available_instance_count.unwrap_or(0),
        instance_match_criteria: match c.instance_match_criteria {
            InstanceMatchCriteria::Open => "open",
            InstanceMatchCriteria::Targeted => "targeted",
        }
        .into(),
        reservation_type: match c.reservation_type {
            CapacityReservationType::CapacityBlock => CAPACITY_BLOCK,
            _ => "default",
        }
        .into(),
        end_date: c.end_time.as_ref().map(|t| t.0),
        owner_id: c.owner_id.clone(),
        tags: vec![],
        state: "active".into(),
    }
}

/// Every reservation the selector terms find (each query of [`queries`]), deduplicated by id;
/// an id term whose reservation EC2 does not know finds nothing.
///
/// Errors: the first DescribeCapacityReservations call that failed otherwise.
pub async fn describe(
    ec2: &dyn Ec2,
    terms: &[CapacityReservationSelectorTerm],
) -> Result<Vec<Record>, Ec2Error> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for query in queries(terms) {
        let found = match ec2.describe_capacity_reservations(query).await {
            Ok(found) => found,
            Err(e) if e.is_not_found() => vec![],
            Err(e) => return Err(e),
        };
        out.extend(
            found
                .into_iter()
                .filter(|r| seen.insert(r.id.clone()))
                .map(record),
        );
    }
    Ok(out)
}

/// The reservations `ids` in any state (so an ended one shows as `expired` or `cancelled`):
/// one call, or one per id when EC2 refuses the batch because some id does not exist (those are
/// left out).
///
/// Errors: a DescribeCapacityReservations call failed other than with a not-found error.
pub async fn describe_ids(ec2: &dyn Ec2, ids: &[String]) -> Result<Vec<Record>, Ec2Error> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let by_ids = |ids: Vec<String>| CapacityReservationQuery {
        ids,
        filters: vec![],
    };
    match ec2
        .describe_capacity_reservations(by_ids(ids.to_vec()))
        .await
    {
        Ok(found) => return Ok(found.into_iter().map(record).collect()),
        Err(e) if e.is_not_found() && ids.len() > 1 => {}
        Err(e) if e.is_not_found() => return Ok(vec![]),
        Err(e) => return Err(e),
    }
    let mut out = Vec::new();
    for id in ids {
        match ec2
            .describe_capacity_reservations(by_ids(vec![id.clone()]))
            .await
        {
            Ok(found) => out.extend(found.into_iter().map(record)),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Whether the instance was launched into a named reservation: it has a `CapacityReservationId`
/// and its preference is `capacity-reservations-only` (or not reported). One that merely landed
/// in an `open` reservation is on-demand capacity, as upstream counts it
/// (`capacityTypeFromInstance`).
pub fn targeted_reservation(info: &InstanceInfo) -> Option<&str> {
    let targeted = info
        .capacity_reservation_preference
        .as_deref()
        .is_none_or(|p| p == "capacity-reservations-only");
    info.capacity_reservation_id
        .as_deref()
        .filter(|_| targeted && !info.spot)
}

/// The capacity type of an instance (`karpenter.sh/capacity-type`): `spot` for a spot instance;
/// for one launched into a reservation ([`targeted_reservation`]), `reserved` while `known`
/// says the reservation is usable at `now`, `on-demand` once it says the reservation ended or
/// EC2 no longer knows it (`Some(None)`), and `reserved` while it is not known (`None`: not
/// described yet, or the describe failed), so a reserved node is never reported on-demand on a
/// guess; `on-demand` otherwise.
pub fn capacity_type(
    info: &InstanceInfo,
    known: Option<Option<&Record>>,
    now: Timestamp,
) -> &'static str {
    if info.spot {
        return l::CAPACITY_TYPE_SPOT;
    }
    if targeted_reservation(info).is_none() {
        return l::CAPACITY_TYPE_ON_DEMAND;
    }
    match known {
        None => l::CAPACITY_TYPE_RESERVED,
        Some(Some(r)) if r.usable(now) => l::CAPACITY_TYPE_RESERVED,
        Some(_) => l::CAPACITY_TYPE_ON_DEMAND,
    }
}

/// The reservations a node class resolved (`status.capacityReservations`) as a listing offers
/// them at `now`: each as `described` last saw it (`Some(None)`: EC2 did not know it, so no
/// room), else from its status entry; room is its `AvailableInstanceCount` (less launches
/// since), 0 when it is not offered (ended, or a Capacity Block about to end).
pub fn reserved_for(
    resolved: &[CapacityReservation],
    described: impl Fn(&str) -> Option<Option<Record>>,
    now: Timestamp,
) -> Vec<ReservedCapacity> {
    resolved
        .iter()
        .map(|c| {
            let r = match described(&c.id) {
                Some(Some(r)) => r,
                Some(None) => Record {
                    state: "cancelled".into(),
                    ..record_from_status(c)
                },
                None => record_from_status(c),
            };
            // A reservation the status already calls expiring is not offered either.
            let expiring = c.state == CapacityReservationState::Expiring;
            let room = if expiring {
                0
            } else {
                r.available_instance_count
            };
            r.reserved_capacity(room, now)
        })
        .collect()
}

/// The reservation a reserved launch of `instance_type` in `zone` goes into: the one of
/// `reserved` with the most room (ties by id), if any has room.
pub fn pick<'a>(
    reserved: &'a [ReservedCapacity],
    instance_type: &str,
    zone: &str,
) -> Option<&'a ReservedCapacity> {
    reserved
        .iter()
        .filter(|r| r.instance_type == instance_type && r.zone == zone && r.available > 0)
        .min_by(|a, b| b.available.cmp(&a.available).then(a.id.cmp(&b.id)))
}

/// The reserved offerings a launch tries, keeping `offers`' order, with the reservation each
/// (type, zone) goes into ([`pick`]): only offerings of one reservation type, the cheapest
/// offering's (an On-Demand Capacity Reservation before a Capacity Block at the same price), as
/// upstream's `CapacityReservationTypeFilter` (`aws:pkg/providers/instance/filter`) partitions
/// them, since one fleet request has one target capacity type. Offerings with no reservation
/// with room are left out, and a (type, zone) is offered once however many reservations it has.
pub fn into_reservations<'a>(
    offers: Vec<LaunchOffering<'a>>,
    reserved: &[ReservedCapacity],
) -> (
    Vec<LaunchOffering<'a>>,
    BTreeMap<(String, String), ReservedCapacity>,
) {
    let picked: Vec<(LaunchOffering<'a>, &ReservedCapacity)> = offers
        .into_iter()
        .filter_map(|o| pick(reserved, &o.1.name, &o.2).map(|r| (o, r)))
        .collect();
    let kind = picked
        .iter()
        .min_by(|a, b| {
            a.0.0.total_cmp(&b.0.0).then(
                (a.1.reservation_type == CAPACITY_BLOCK)
                    .cmp(&(b.1.reservation_type == CAPACITY_BLOCK)),
            )
        })
        .map(|(_, r)| r.reservation_type.clone());
    let mut into = BTreeMap::new();
    let offers = picked
        .into_iter()
        .filter(|(_, r)| Some(&r.reservation_type) == kind.as_ref())
        // Two reservations of one type and zone are two offerings but one override.
        .filter(|(o, r)| {
            into.insert((o.1.name.clone(), o.2.clone()), (*r).clone())
                .is_none()
        })
        .map(|(o, _)| o)
        .collect();
    (offers, into)
}

/// The CreateFleet `DefaultTargetCapacityType` for a launch into reservations of
/// `reservation_type` (upstream `CreateFleetInputBuilder`): `capacity-block` for a Capacity
/// Block, else `on-demand` (the launch template names the reservation).
pub fn fleet_capacity_type(reservation_type: &str) -> &'static str {
    if reservation_type == CAPACITY_BLOCK {
        CAPACITY_BLOCK
    } else {
        l::CAPACITY_TYPE_ON_DEMAND
    }
}

#[cfg(test)]
#[path = "reservation_tests.rs"]
mod tests;
