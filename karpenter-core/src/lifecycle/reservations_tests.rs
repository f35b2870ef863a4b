//! Demotion and Capacity Block drain, on upstream's cases: an ended reservation's nodes become
//! on-demand, an expiring block's nodes are deleted 40 minutes before it ends, and deleting or
//! unlisted NodeClaims are left alone.

use std::sync::Arc;

use crds::NodeClaim;
use testutil::nodeclaim;

use super::*;
use crate::capacity::reservation::parse;

const BLOCK: &str = "cr-0000000000000block";
const ODCR: &str = "cr-0123456789abcdef0";

const RECORDS: &str = r#"
- CapacityReservationId: cr-0123456789abcdef0
  InstanceType: m5.large
  AvailabilityZone: us-east-1a
  TotalInstanceCount: 3
  AvailableInstanceCount: 0
- CapacityReservationId: cr-0000000000000block
  InstanceType: p5.48xlarge
  AvailabilityZone: us-east-1a
  TotalInstanceCount: 2
  AvailableInstanceCount: 0
  ReservationType: capacity-block
  EndDate: "2026-01-01T12:00:00Z"
"#;

fn at(time: &str) -> Timestamp {
    time.parse().expect("time")
}

fn reserved(name: &str, id: &str) -> Arc<NodeClaim> {
    nodeclaim(name)
        .label(CAPACITY_TYPE_LABEL, CAPACITY_TYPE_RESERVED)
        .label(CAPACITY_RESERVATION_ID_LABEL, id)
        .provider_id(format!("aws:///us-east-1a/i-{name}"))
        .arc()
}

fn instance(name: &str, capacity_type: &str) -> Instance {
    Instance {
        provider_id: format!("aws:///us-east-1a/i-{name}"),
        id: format!("i-{name}"),
        nodeclaim: Some(name.into()),
        nodepool: Some("default".into()),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: capacity_type.into(),
        price: 0.096,
        launched_at: Timestamp::UNIX_EPOCH,
        image_id: "ami-1".into(),
        subnet_id: "subnet-a".into(),
        security_group_ids: vec![],
    }
}

fn names(claims: &[Arc<NodeClaim>]) -> Vec<&str> {
    claims
        .iter()
        .map(|c| c.metadata.name.as_deref().unwrap_or_default())
        .collect()
}

#[test]
fn a_node_whose_instance_left_its_reservation_is_demoted() {
    let records = parse(RECORDS).expect("records");
    let claims = vec![
        reserved("a", ODCR),
        reserved("b", ODCR),
        nodeclaim("c")
            .label(CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND)
            .provider_id("aws:///us-east-1a/i-c")
            .arc(),
        reserved("d", ODCR),
        nodeclaim("e")
            .label(CAPACITY_TYPE_LABEL, CAPACITY_TYPE_RESERVED)
            .provider_id("aws:///us-east-1a/i-e")
            .deleting("2026-01-01T10:00:00Z")
            .arc(),
    ];
    let instances = vec![
        instance("a", "on-demand"),
        instance("b", "reserved"),
        instance("c", "on-demand"),
        instance("e", "on-demand"),
    ];
    let changes = decide(&claims, &instances, &records, at("2026-01-01T10:00:00Z"));
    // b still in its reservation; c was never reserved; d's instance is not listed; e is
    // deleting already.
    assert_eq!(names(&changes.demote), ["a"]);
    assert!(changes.expire.is_empty());
}

#[test]
fn a_capacity_block_drains_forty_minutes_before_it_ends() {
    let records = parse(RECORDS).expect("records");
    let claims = vec![reserved("gpu", BLOCK), reserved("web", ODCR)];
    let instances = vec![instance("gpu", "reserved"), instance("web", "reserved")];
    let early = decide(&claims, &instances, &records, at("2026-01-01T11:19:59Z"));
    assert!(
        early.expire.is_empty() && early.demote.is_empty(),
        "{early:?}"
    );
    let due = decide(&claims, &instances, &records, at("2026-01-01T11:20:00Z"));
    let expired: Vec<(&str, &str)> = due
        .expire
        .iter()
        .map(|(c, id)| (c.metadata.name.as_deref().unwrap_or_default(), id.as_str()))
        .collect();
    assert_eq!(expired, [("gpu", BLOCK)]);
    assert!(records[1].expiring(at("2026-01-01T11:20:00Z")));
    assert!(!records[1].offered(at("2026-01-01T11:20:00Z")));
    assert!(records[0].offered(at("2026-01-01T11:20:00Z")));
}

#[test]
fn the_described_reservations_are_those_the_nodeclaims_carry() {
    let claims = vec![
        reserved("a", ODCR),
        reserved("b", BLOCK),
        reserved("c", ODCR),
        nodeclaim("d").arc(),
    ];
    assert_eq!(reservation_ids(&claims), [BLOCK, ODCR]);
}
