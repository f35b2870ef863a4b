//! Selector terms to DescribeCapacityReservations queries, the capacity type of an instance in a
//! reservation, and which reservation a reserved launch goes into.

use std::collections::BTreeMap;

use super::*;

fn now() -> Timestamp {
    "2026-03-10T12:00:00Z".parse().expect("time")
}

fn term(json: serde_json::Value) -> CapacityReservationSelectorTerm {
    serde_json::from_value(json).expect("term")
}

fn names(q: &CapacityReservationQuery) -> Vec<(String, String)> {
    q.filters
        .iter()
        .map(|f| (f.name.clone(), f.values.join(",")))
        .collect()
}

#[test]
fn every_term_becomes_an_active_only_query_by_id_or_by_tags() {
    let qs = queries(&[
        term(serde_json::json!({"id": "cr-0abc"})),
        term(serde_json::json!({
            "tags": {"team": "ml", "any": "*"},
            "ownerID": "111122223333",
            "instanceMatchCriteria": "targeted"
        })),
    ]);
    assert_eq!(qs.len(), 2);
    assert_eq!(qs[0].ids, ["cr-0abc"]);
    assert_eq!(names(&qs[0]), [("state".into(), "active".into())]);
    assert!(qs[1].ids.is_empty());
    assert_eq!(
        names(&qs[1]),
        [
            ("state".to_string(), "active".to_string()),
            ("owner-id".into(), "111122223333".into()),
            ("tag-key".into(), "any".into()),
            ("tag:team".into(), "ml".into()),
            ("instance-match-criteria".into(), "targeted".into()),
        ]
    );
    assert!(queries(&[term(serde_json::json!({}))]).is_empty());
}

fn instance(reservation: Option<&str>, preference: Option<&str>) -> InstanceInfo {
    InstanceInfo {
        id: "i-0abc".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        state: "running".into(),
        spot: false,
        image_id: "ami-0abc".into(),
        launched_at: now(),
        private_ip: "10.0.0.7".into(),
        private_dns: "ip-10-0-0-7.ec2.internal".into(),
        subnet_id: "subnet-0a".into(),
        security_group_ids: vec![],
        architecture: "x86_64".into(),
        tags: BTreeMap::new(),
        capacity_reservation_id: reservation.map(str::to_string),
        capacity_reservation_preference: preference.map(str::to_string),
    }
}

fn odcr(state: &str, end: Option<&str>) -> Record {
    Record {
        capacity_reservation_id: "cr-0abc".into(),
        instance_type: "m5.large".into(),
        availability_zone: "us-east-1a".into(),
        total_instance_count: 2,
        available_instance_count: 1,
        instance_match_criteria: "targeted".into(),
        reservation_type: "default".into(),
        end_date: end.map(|e| e.parse().expect("time")),
        owner_id: "111122223333".into(),
        tags: vec![],
        state: state.into(),
    }
}

#[test]
fn an_instance_is_reserved_while_its_reservation_is_active_and_never_demoted_on_a_guess() {
    let only = Some("capacity-reservations-only");
    let inside = instance(Some("cr-0abc"), only);
    let active = odcr("active", None);
    assert_eq!(
        capacity_type(&inside, Some(Some(&active)), now()),
        "reserved"
    );
    // Not described yet, or the describe failed: still reserved.
    assert_eq!(capacity_type(&inside, None, now()), "reserved");
    // EC2 ended it, or no longer knows it: on-demand from then on.
    let cancelled = odcr("cancelled", None);
    assert_eq!(
        capacity_type(&inside, Some(Some(&cancelled)), now()),
        "on-demand"
    );
    let ended = odcr("active", Some("2026-03-10T11:59:00Z"));
    assert_eq!(
        capacity_type(&inside, Some(Some(&ended)), now()),
        "on-demand"
    );
    assert_eq!(capacity_type(&inside, Some(None), now()), "on-demand");
    // An emulator that reports no preference: the id alone decides.
    let unsaid = instance(Some("cr-0abc"), None);
    assert_eq!(
        capacity_type(&unsaid, Some(Some(&active)), now()),
        "reserved"
    );
    // Landed in an open reservation without naming it: on-demand capacity, as upstream counts it.
    let open = instance(Some("cr-0abc"), Some("open"));
    assert_eq!(
        capacity_type(&open, Some(Some(&active)), now()),
        "on-demand"
    );
    assert_eq!(
        capacity_type(&instance(None, None), None, now()),
        "on-demand"
    );
    let spot = InstanceInfo {
        spot: true,
        ..instance(None, None)
    };
    assert_eq!(capacity_type(&spot, None, now()), "spot");
}

fn status_entry(id: &str, available: i64, state: CapacityReservationState) -> CapacityReservation {
    CapacityReservation {
        availability_zone: "us-east-1a".into(),
        end_time: None,
        id: id.into(),
        instance_match_criteria: InstanceMatchCriteria::Targeted,
        instance_type: "m5.large".into(),
        owner_id: "111122223333".into(),
        reservation_type: CapacityReservationType::Default,
        interruptible: false,
        state,
        available_instance_count: Some(available),
        total_instance_count: Some(4),
    }
}

#[test]
fn reserved_offerings_take_the_described_room_else_the_status_and_none_when_expiring() {
    let resolved = [
        status_entry("cr-described", 3, CapacityReservationState::Active),
        status_entry("cr-from-status", 2, CapacityReservationState::Active),
        status_entry("cr-expiring", 2, CapacityReservationState::Expiring),
        status_entry("cr-gone", 2, CapacityReservationState::Active),
    ];
    let described = |id: &str| match id {
        "cr-described" => Some(Some(Record {
            capacity_reservation_id: id.into(),
            // One launched since the status was written.
            available_instance_count: 2,
            ..odcr("active", None)
        })),
        "cr-gone" => Some(None),
        _ => None,
    };
    let reserved = reserved_for(&resolved, described, now());
    let room: Vec<(&str, i64)> = reserved
        .iter()
        .map(|r| (r.id.as_str(), r.available))
        .collect();
    assert_eq!(
        room,
        [
            ("cr-described", 2),
            ("cr-from-status", 2),
            ("cr-expiring", 0),
            ("cr-gone", 0)
        ]
    );
    assert!(reserved.iter().all(|r| r.instance_type == "m5.large"));
}

#[test]
fn a_reserved_launch_goes_into_the_reservation_with_most_room() {
    let r = |id: &str, zone: &str, available: i64| ReservedCapacity {
        id: id.into(),
        instance_type: "m5.large".into(),
        zone: zone.into(),
        available,
        reservation_type: "default".into(),
    };
    let reserved = [
        r("cr-1", "us-east-1a", 1),
        r("cr-2", "us-east-1a", 3),
        r("cr-3", "us-east-1b", 5),
        r("cr-4", "us-east-1a", 0),
    ];
    assert_eq!(
        pick(&reserved, "m5.large", "us-east-1a").map(|r| r.id.as_str()),
        Some("cr-2")
    );
    assert_eq!(pick(&reserved, "m5.xlarge", "us-east-1a"), None);
    assert_eq!(pick(&reserved[3..], "m5.large", "us-east-1a"), None);
    assert_eq!(fleet_capacity_type("capacity-block"), "capacity-block");
    assert_eq!(fleet_capacity_type("default"), "on-demand");
}

#[test]
fn a_reserved_launch_keeps_one_reservation_type_and_one_override_per_type_and_zone() {
    use karpenter_core::scheduling::testing::instance_type;
    let m5 = instance_type("m5.large", 2, 8, 0.096);
    let c5 = instance_type("c5.large", 2, 4, 0.085);
    let r = |id: &str, ty: &str, zone: &str, kind: &str| ReservedCapacity {
        id: id.into(),
        instance_type: ty.into(),
        zone: zone.into(),
        available: 1,
        reservation_type: kind.into(),
    };
    let reserved = [
        r("cr-m5-a", "m5.large", "us-east-1a", "default"),
        r("cr-m5-a2", "m5.large", "us-east-1a", "default"),
        r("cr-c5-block", "c5.large", "us-east-1a", "capacity-block"),
        r("cr-m5-b", "m5.large", "us-east-1b", "default"),
    ];
    let offer = |price: f64, t, zone: &str| (price, t, zone.to_string(), "reserved".to_string());
    // Equal prices: the On-Demand Capacity Reservations go first, the Capacity Block waits.
    let offers = vec![
        offer(1e-8, &c5, "us-east-1a"),
        offer(1e-8, &m5, "us-east-1a"),
        offer(1e-8, &m5, "us-east-1a"),
        offer(1e-8, &m5, "us-east-1b"),
        offer(1e-8, &m5, "us-east-1c"),
    ];
    let (kept, into) = into_reservations(offers, &reserved);
    let kept: Vec<(&str, &str)> = kept
        .iter()
        .map(|o| (o.1.name.as_str(), o.2.as_str()))
        .collect();
    assert_eq!(
        kept,
        [("m5.large", "us-east-1a"), ("m5.large", "us-east-1b")]
    );
    assert_eq!(into.len(), 2);
    assert!(into.values().all(|r| r.reservation_type == "default"));
    // A cheaper Capacity Block wins the launch alone.
    let (kept, into) = into_reservations(
        vec![
            offer(1e-9, &c5, "us-east-1a"),
            offer(1e-8, &m5, "us-east-1a"),
        ],
        &reserved,
    );
    assert_eq!(kept.len(), 1);
    assert_eq!(
        into.values().next().map(|r| r.id.as_str()),
        Some("cr-c5-block")
    );
}
