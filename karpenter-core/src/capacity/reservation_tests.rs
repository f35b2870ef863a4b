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

/// The solver's input for `pods` (cpu millicores, memory MiB each) on gp.large/xlarge/4xlarge
/// with `room` instances of gp.large reserved in zone a, in a pool that allows `capacity_types`.
fn reserved_input(
    pods: usize,
    room: i64,
    capacity_types: &[&str],
) -> crate::scheduling::solver::Input {
    use crate::capacity::catalog::with_reservations;
    use crate::scheduling::requirements::Requirement;
    use crate::scheduling::testing::{pod, pool, small_medium_large, well_known};
    use crds::labels::CAPACITY_TYPE_LABEL;

    let zones = ["test-zone-a".to_string(), "test-zone-b".to_string()].into();
    let reserved = [ReservedCapacity {
        id: "cr-1".into(),
        instance_type: "gp.large".into(),
        zone: "test-zone-a".into(),
        available: room,
        reservation_type: "default".into(),
    }];
    let types = with_reservations(small_medium_large(), &zones, &reserved, |name| {
        Some(match name {
            "gp.large" => 0.10,
            "gp.xlarge" => 0.20,
            _ => 0.80,
        })
    });
    let mut p = pool("default", types);
    p.requirements.add(Requirement::is_in(
        CAPACITY_TYPE_LABEL,
        capacity_types.iter().copied(),
    ));
    crate::scheduling::solver::Input {
        pods: (0..pods)
            .map(|i| pod(&format!("p{i}"), 1500, 6 * 1024, serde_json::json!({})))
            .collect(),
        nodepools: vec![p],
        well_known_labels: well_known(),
        repack: true,
        ..Default::default()
    }
}

/// Each new NodeClaim's launch: its first instance type's cheapest offering that its
/// requirements admit, as `type/capacity-type`.
fn launches(out: &crate::scheduling::solver::Output) -> Vec<String> {
    out.new_claims
        .iter()
        .map(|c| {
            let t = &c.instance_types[0];
            let o = t.cheapest_offering(&c.requirements).expect("an offering");
            format!("{}/{}", t.name, o.capacity_type)
        })
        .collect()
}

#[test]
fn a_reservation_takes_as_many_new_nodeclaims_as_it_has_room_for() {
    use crate::scheduling::solver::solve;

    let offering_price = with_reserved_price();
    assert!((offering_price - 0.10 / RESERVED_PRICE_DIVISOR).abs() < 1e-15);
    // Five pods that each need a gp.large of their own: three take the reservation, and the
    // other two launch on-demand (the re-pack may put them on one gp.xlarge, at the same price).
    let out = solve(&reserved_input(5, 3, &["reserved", "on-demand"]));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let launched = launches(&out);
    let reserved = launched
        .iter()
        .filter(|l| *l == "gp.large/reserved")
        .count();
    assert_eq!(reserved, 3, "{launched:?}");
    assert!(
        launched
            .iter()
            .filter(|l| *l != "gp.large/reserved")
            .all(|l| l.ends_with("/on-demand")),
        "{launched:?}"
    );
    let placed: usize = out.new_claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed, 5);
    // The NodeClaims beyond the reservation's room do not list `reserved` at all.
    let without: Vec<bool> = out
        .new_claims
        .iter()
        .map(|c| {
            c.requirements
                .get(crds::labels::CAPACITY_TYPE_LABEL)
                .is_some_and(|r| r.has("reserved"))
        })
        .collect();
    assert_eq!(without.iter().filter(|r| **r).count(), 3, "{without:?}");
}

#[test]
fn reserved_capacity_never_makes_the_fleet_dearer_than_without_it() {
    use crate::scheduling::solver::solve;

    // Sixteen pods pack onto gp.4xlarge nodes without reservations. With two gp.large reserved,
    // the re-pack must not split them onto near-free gp.large nodes far beyond the two the
    // reservation holds (the defect this guards: every such node beyond the room launched
    // on-demand, a fleet 40% dearer).
    let cost = |room: i64| {
        let out = solve(&reserved_input(16, room, &["reserved", "on-demand"]));
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let launched = launches(&out);
        let reserved = launched.iter().filter(|l| l.ends_with("/reserved")).count();
        let dollars: f64 = out
            .new_claims
            .iter()
            .map(|c| {
                c.instance_types[0]
                    .cheapest_offering(&c.requirements)
                    .expect("an offering")
                    .price
            })
            .sum();
        (reserved, dollars, out.new_claims.len())
    };
    let (none_reserved, without, _) = cost(0);
    let (reserved, with, claims) = cost(2);
    assert_eq!(none_reserved, 0);
    assert!(
        reserved <= 2,
        "{reserved} reserved NodeClaims for a room of 2"
    );
    assert!(
        with <= without + 1e-9,
        "${with}/h with the reservation, ${without}/h without"
    );
    assert!(claims <= 8, "{claims} NodeClaims for 16 pods");
}

#[test]
fn a_reserved_only_nodepool_leaves_pods_pending_once_its_reservations_are_full() {
    use crate::scheduling::solver::{RESERVATIONS_FULL, solve};

    let out = solve(&reserved_input(5, 3, &["reserved"]));
    assert_eq!(launches(&out), ["gp.large/reserved"; 3]);
    assert_eq!(out.errors.len(), 2);
    for e in &out.errors {
        assert!(e.to_string().contains(RESERVATIONS_FULL), "{e}");
    }
}

/// The price of gp.large's reserved offering.
fn with_reserved_price() -> f64 {
    reserved_input(1, 3, &["reserved"]).nodepools[0].instance_types[0]
        .offerings
        .iter()
        .find(|o| o.reservation_id.is_some())
        .expect("reserved offering")
        .price
}
