//! Tests of interruption planning: when the drain starts at the latest, and a replacement that
//! is sized from the pods and never lands on the interrupted offering.

use std::collections::HashMap;
use std::sync::Arc;

use crds::labels::{CAPACITY_TYPE_LABEL, TOPOLOGY_ZONE_LABEL};
use jiff::Timestamp;
use testutil::ec2nodeclass;

use super::*;
use crate::disruption::candidates::tests::{karpenter_node, pool};
use crate::scheduling::testing::small_medium_large;

fn at(s: &str) -> Timestamp {
    s.parse().expect("time")
}

#[test]
fn the_drain_starts_at_the_latest_per_kind() {
    let now = at("2026-01-01T01:00:10Z");
    let raised = Some(at("2026-01-01T01:00:00Z"));
    let init = Duration::from_secs(600);
    assert_eq!(
        drain_by(Kind::SpotInterrupted, raised, now, init),
        at("2026-01-01T01:01:00Z"),
        "60 s after the warning: the last minute of the two is the drain's"
    );
    assert_eq!(
        drain_by(Kind::SpotInterrupted, None, now, init),
        at("2026-01-01T01:01:10Z")
    );
    assert_eq!(
        drain_by(Kind::ScheduledChange, raised, now, init),
        at("2026-01-01T01:10:10Z")
    );
    for k in [Kind::InstanceStopped, Kind::InstanceTerminated] {
        assert_eq!(drain_by(k, raised, now, init), now, "{k}");
    }
}

fn offering() -> InterruptedOffering {
    InterruptedOffering {
        instance_type: "gp.large".into(),
        zone: "test-zone-a".into(),
        capacity_type: "spot".into(),
    }
}

#[test]
fn without_offering_takes_away_exactly_the_interrupted_offering() {
    let listings = HashMap::from([
        ("default".to_string(), Ok(Arc::new(small_medium_large()))),
        ("broken".to_string(), Err("no subnets".to_string())),
    ]);
    let edited = without_offering(&listings, &offering());
    let types = edited["default"].as_ref().expect("listed");
    let unavailable: Vec<(String, String, String)> = types
        .iter()
        .flat_map(|t| {
            t.offerings
                .iter()
                .filter(|o| !o.available)
                .map(|o| (t.name.clone(), o.zone.clone(), o.capacity_type.clone()))
        })
        .collect();
    assert_eq!(
        unavailable,
        vec![("gp.large".into(), "test-zone-a".into(), "spot".into())]
    );
    assert_eq!(edited["broken"], Err("no subnets".to_string()));
    // The original listing is untouched.
    assert!(
        listings["default"]
            .as_ref()
            .expect("listed")
            .iter()
            .all(|t| t.offerings.iter().all(|o| o.available))
    );
}

fn snapshot(pods: Vec<Arc<crate::pod_view::PodView>>) -> Snapshot {
    let (claim, node) = karpenter_node("spot-1", "gp.large", "spot");
    Snapshot {
        nodeclaims: vec![claim],
        nodes: vec![node],
        pods,
        nodepools: vec![pool(serde_json::json!({}))],
        nodeclasses: vec![ec2nodeclass("default").arc()],
        ..Snapshot::default()
    }
}

fn settings() -> Settings {
    Settings {
        now: at("2026-01-01T01:00:00Z"),
        spot_to_spot: false,
        hash_versions: Default::default(),
        min_values_policy: Default::default(),
    }
}

/// A pod on the interrupted node that must stay in test-zone-a on spot.
fn pinned(name: &str, cpu: &str) -> Arc<crate::pod_view::PodView> {
    testutil::pod(name)
        .cpu(cpu)
        .memory("256Mi")
        .on_node("spot-1")
        .phase("Running")
        .node_selector(TOPOLOGY_ZONE_LABEL, "test-zone-a")
        .node_selector(CAPACITY_TYPE_LABEL, "spot")
        .owner("apps/v1", "ReplicaSet", "web-abc", "rs-uid")
        .arc()
}

#[test]
fn the_replacement_is_sized_from_the_pods_and_avoids_the_interrupted_offering() {
    let pods = vec![pinned("a", "500m"), pinned("b", "500m")];
    let snap = snapshot(pods.clone());
    let listings = HashMap::from([("default".to_string(), Ok(Arc::new(small_medium_large())))]);
    let s = settings();
    // Without the interruption, the pods' cheapest home is the offering they are on.
    let free = replacement(&snap, &listings, &s, &pods, None)
        .expect("schedulable")
        .expect("a replacement");
    assert_eq!(free.decision.instance_types[0].name, "gp.large");
    // Interrupted: gp.large spot in test-zone-a is gone, so the next type is chosen.
    let planned = replacement(&snap, &listings, &s, &pods, Some(&offering()))
        .expect("schedulable")
        .expect("a replacement");
    let names: Vec<&str> = planned
        .decision
        .instance_types
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names.first(), Some(&"gp.xlarge"), "{names:?}");
    assert_eq!(planned.decision.nodepool, "default");
}

#[test]
fn nothing_to_move_needs_no_replacement_and_an_unschedulable_pod_is_an_error() {
    let snap = snapshot(vec![]);
    let listings = HashMap::from([("default".to_string(), Ok(Arc::new(small_medium_large())))]);
    let s = settings();
    assert!(
        replacement(&snap, &listings, &s, &[], Some(&offering()))
            .expect("nothing to place")
            .is_none()
    );
    let huge = vec![pinned("huge", "64")];
    let err =
        replacement(&snap, &listings, &s, &huge, Some(&offering())).expect_err("fits nowhere");
    assert!(
        matches!(err, Unconsolidatable::PodWouldNotSchedule { .. }),
        "{err}"
    );
}
