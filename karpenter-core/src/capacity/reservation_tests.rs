//! Reservation records, selector terms and status, on upstream's documented shapes.

use std::collections::BTreeMap;

use super::*;

const RECORDS: &str = r#"
- CapacityReservationId: cr-0123456789abcdef0
  InstanceType: m5.large
  AvailabilityZone: us-east-1a
  TotalInstanceCount: 3
  AvailableInstanceCount: 3
  InstanceMatchCriteria: targeted
  ReservationType: default
  OwnerId: "123456789012"
  Tags: [{Key: team, Value: ml}]
- CapacityReservationId: cr-0000000000000block
  InstanceType: p5.48xlarge
  AvailabilityZone: us-east-1b
  TotalInstanceCount: 2
  AvailableInstanceCount: 0
  ReservationType: capacity-block
  EndDate: "2026-01-01T12:00:00Z"
  State: active
"#;

fn now() -> Timestamp {
    "2026-01-01T11:00:00Z".parse().expect("time")
}

#[test]
fn records_parse_as_a_list_or_a_describe_response() {
    let list = parse(RECORDS).expect("list");
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].instance_match_criteria, "targeted");
    assert_eq!(list[1].instance_match_criteria, "open");
    assert!(list[1].is_capacity_block());
    let response = parse(&format!(
        "CapacityReservations:\n{}",
        RECORDS
            .lines()
            .map(|l| format!("  {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    ))
    .expect("response");
    assert_eq!(response, list);
    let err = parse("- InstanceType: m5.large").expect_err("no id");
    assert!(err.contains("CapacityReservationId"), "{err}");
}

#[test]
fn terms_select_by_id_or_by_tags_owner_and_match_criteria() {
    let records = parse(RECORDS).expect("list");
    let by_id = CapacityReservationSelectorTerm {
        id: Some("cr-0000000000000block".into()),
        ..Default::default()
    };
    assert!(matches(&by_id, &records[1]) && !matches(&by_id, &records[0]));
    let tags: BTreeMap<String, String> = [("team".to_string(), "*".to_string())].into();
    let mut by_tags = CapacityReservationSelectorTerm {
        tags,
        owner_id: Some("123456789012".into()),
        ..Default::default()
    };
    assert!(matches(&by_tags, &records[0]));
    by_tags.owner_id = Some("210987654321".into());
    assert!(!matches(&by_tags, &records[0]));
    by_tags.owner_id = None;
    by_tags.instance_match_criteria = Some(InstanceMatchCriteria::Open);
    assert!(!matches(&by_tags, &records[0]));
    // A term with nothing in it selects nothing.
    assert!(!matches(
        &CapacityReservationSelectorTerm::default(),
        &records[0]
    ));
}

#[test]
fn ended_or_inactive_reservations_are_not_selected_and_status_keeps_the_shape() {
    let mut records = parse(RECORDS).expect("list");
    let all = [
        CapacityReservationSelectorTerm {
            id: Some("cr-0123456789abcdef0".into()),
            ..Default::default()
        },
        CapacityReservationSelectorTerm {
            id: Some("cr-0000000000000block".into()),
            ..Default::default()
        },
    ];
    assert_eq!(select(&all, &records, now()).len(), 2);
    let later: Timestamp = "2026-01-01T13:00:00Z".parse().expect("time");
    assert_eq!(select(&all, &records, later).len(), 1);
    records[0].state = "cancelled".into();
    assert_eq!(select(&all, &records, now()).len(), 1);
    let s = status(&records[1], now(), 0);
    assert_eq!(s.reservation_type, CapacityReservationType::CapacityBlock);
    assert_eq!(s.instance_type, "p5.48xlarge");
    assert!(s.end_time.is_some());
    assert_eq!(
        (s.available_instance_count, s.total_instance_count),
        (Some(0), Some(2))
    );
    // Within 40 minutes of its end a capacity block is expiring (upstream's state).
    assert_eq!(s.state, CapacityReservationState::Active);
    let late: Timestamp = "2026-01-01T11:30:00Z".parse().expect("time");
    assert_eq!(
        status(&records[1], late, 0).state,
        CapacityReservationState::Expiring
    );
}

#[test]
fn a_reservation_takes_as_many_new_nodeclaims_as_it_has_room_for() {
    use crate::capacity::catalog::with_reservations;
    use crate::provisioning::plan::reserve;
    use crate::scheduling::requirements::{Requirement, Requirements};
    use crate::scheduling::resources::Resources;
    use crate::scheduling::solver::NewClaim;
    use crate::scheduling::testing::instance_type;
    use crds::labels::CAPACITY_TYPE_LABEL;

    let zones = ["test-zone-a".to_string(), "test-zone-b".to_string()].into();
    let reserved = [ReservedCapacity {
        id: "cr-1".into(),
        instance_type: "gp.large".into(),
        zone: "test-zone-a".into(),
        available: 3,
        reservation_type: "default".into(),
    }];
    let types = with_reservations(
        vec![instance_type("gp.large", 2, 8, 0.10)],
        &zones,
        &reserved,
        |_| Some(0.10),
    );
    let offering = types[0]
        .offerings
        .iter()
        .find(|o| o.reservation_id.is_some())
        .expect("reserved offering");
    assert_eq!(offering.capacity_type, "reserved");
    assert!((offering.price - 0.10 / RESERVED_PRICE_DIVISOR).abs() < 1e-15);
    let mut reqs = Requirements::new();
    reqs.add(Requirement::is_in(
        CAPACITY_TYPE_LABEL,
        ["reserved", "on-demand"],
    ));
    let claim = NewClaim {
        nodepool: "default".into(),
        requirements: reqs,
        instance_types: types.clone(),
        fitting: types,
        requests: Resources::default(),
        pods: Vec::new(),
        min_values_relaxed: false,
    };
    let mut claims = vec![claim; 5];
    let listed = claims[0].instance_types.clone();
    reserve(&mut claims, &listed);
    let capacity_types: Vec<String> = claims
        .iter()
        .map(|c| {
            c.instance_types[0]
                .cheapest_offering(&c.requirements)
                .map(|o| o.capacity_type.clone())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(
        capacity_types,
        ["reserved", "reserved", "reserved", "on-demand", "on-demand"]
    );
}
