//! Classification over the sample cluster: one orphan of each kind, what each detail says,
//! thresholds, and what changes without a cloud view.

use super::*;
use crate::orphans::fixtures::{self, World, at, checked, ids, instance, orphans, world};

fn kinds_and_names(orphans: &[Orphan]) -> Vec<(Kind, &str)> {
    orphans.iter().map(|o| (o.kind, o.name.as_str())).collect()
}

fn find(orphans: &[Orphan], kind: Kind) -> &Orphan {
    orphans
        .iter()
        .find(|o| o.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} in {orphans:#?}"))
}

#[test]
fn one_orphan_of_each_kind_in_table_order() {
    let w = world();
    let found = orphans(&w, &checked(&w));
    assert_eq!(
        kinds_and_names(&found),
        [
            (Kind::NotLaunched, "default-unlaunched"),
            (Kind::NotRegistered, "default-unregistered"),
            (Kind::StuckTerminating, "gpu-stuck"),
            (Kind::NodeWithoutNodeClaim, "ip-10-0-2-5"),
            (Kind::InstanceWithoutNodeClaim, "i-0a1b2c3d4e5f60005"),
            (Kind::InstanceGone, "default-lost"),
        ]
    );
}

#[test]
fn details_say_what_each_is_stuck_on_and_since_when() {
    let w = world();
    let found = orphans(&w, &checked(&w));
    let cases: [(Kind, &str, &[&str]); 6] = [
        (
            Kind::NotLaunched,
            "11:50:00",
            &[
                "not launched after 10m (launch timeout 5m)",
                "Launched=Unknown: InsufficientCapacity: no offering available",
            ],
        ),
        (
            Kind::NotRegistered,
            "11:40:00",
            &[
                "launched 20m ago, not registered (registration TTL 15m)",
                "node ip-10-0-1-2 joined but the NodeClaim is not marked Registered",
                "instance i-0a1b2c3d4e5f60002 running",
            ],
        ),
        (
            Kind::StuckTerminating,
            "11:50:00",
            &[
                "deleting for 10m",
                "waiting on: node ip-10-0-3-3 still present (finalizers: karpenter.sh/termination, \
                 3 pods), instance i-0a1b2c3d4e5f60003 running, finalizers karpenter.sh/termination",
            ],
        ),
        (
            Kind::NodeWithoutNodeClaim,
            "10:01:00",
            &[
                "no NodeClaim has providerID aws:///us-east-1a/i-0a1b2c3d4e5f60005",
                "instance i-0a1b2c3d4e5f60005 running",
                "1 pod",
            ],
        ),
        (
            Kind::InstanceWithoutNodeClaim,
            "11:00:00",
            &[
                "tagged for nodeclaim default-gone, which does not exist",
                "node ip-10-0-2-5 registered for it",
            ],
        ),
        (
            Kind::InstanceGone,
            "10:00:30",
            &[
                "instance aws:///us-east-1a/i-0a1b2c3d4e5f60009 no longer exists",
                "node ip-10-0-1-9 still present (finalizers: karpenter.sh/termination)",
            ],
        ),
    ];
    for (kind, since, detail) in cases {
        let o = find(&found, kind);
        assert_eq!(o.since, Some(at(since)), "{kind}");
        assert_eq!(o.detail, detail, "{kind}");
    }
    let stuck = find(&found, Kind::StuckTerminating);
    assert_eq!(stuck.nodepool.as_deref(), Some("gpu"));
    assert_eq!(stuck.pods, Some(3));
    assert_eq!(
        stuck.node.as_ref().map(|n| n.has_termination_finalizer()),
        Some(true)
    );
    assert_eq!(
        stuck.instance.running().map(|i| i.id.as_str()),
        Some("i-0a1b2c3d4e5f60003")
    );
    let gone = find(&found, Kind::InstanceGone);
    assert_eq!(gone.instance.id(), Some("i-0a1b2c3d4e5f60009"));
    assert_eq!(
        find(&found, Kind::NotLaunched).instance,
        InstanceState::None
    );
}

#[test]
fn without_a_cloud_view_only_api_kinds_are_found() {
    let w = world();
    let cloud = CloudView::Unchecked {
        reason: "--no-cloud".into(),
    };
    let found = orphans(&w, &cloud);
    assert_eq!(
        kinds_and_names(&found),
        [
            (Kind::NotLaunched, "default-unlaunched"),
            (Kind::NotRegistered, "default-unregistered"),
            (Kind::StuckTerminating, "gpu-stuck"),
            (Kind::NodeWithoutNodeClaim, "ip-10-0-2-5"),
        ]
    );
    let stuck = find(&found, Kind::StuckTerminating);
    assert!(
        stuck.detail[1].contains(", instance not checked, "),
        "{:?}",
        stuck.detail
    );
    assert_eq!(
        stuck.instance,
        InstanceState::Unchecked {
            provider_id: Some(ids(3).0)
        }
    );
    assert_eq!(
        find(&found, Kind::NodeWithoutNodeClaim).detail[1],
        "instance not checked"
    );
}

fn with(thresholds: Thresholds, w: &World) -> Vec<Orphan> {
    classify(&Inputs {
        claims: &w.claims,
        nodes: &w.nodes,
        pods_by_node: &w.pods,
        cloud: &checked(w),
        now: crate::fixtures::now(),
        thresholds,
    })
}

#[test]
fn thresholds_are_inclusive_and_configurable() {
    let w = world();
    // default-unlaunched is exactly 10m old; default-young 2m.
    let exact = Thresholds {
        launch_timeout: Duration::from_secs(600),
        ..Thresholds::default()
    };
    assert!(
        with(exact, &w)
            .iter()
            .any(|o| o.name == "default-unlaunched")
    );
    let longer = Thresholds {
        launch_timeout: Duration::from_secs(601),
        ..Thresholds::default()
    };
    assert!(
        !with(longer, &w)
            .iter()
            .any(|o| o.name == "default-unlaunched")
    );
    let eager = Thresholds {
        launch_timeout: Duration::ZERO,
        registration_ttl: Duration::from_secs(60),
        stuck_after: Duration::from_secs(30),
        min_instance_age: Duration::ZERO,
    };
    let found = with(eager, &w);
    let look_alikes: Vec<(Kind, &str)> = found
        .iter()
        .filter(|o| {
            ["default-young", "default-registering", "gpu-deleting"].contains(&o.name.as_str())
        })
        .map(|o| (o.kind, o.name.as_str()))
        .collect();
    assert_eq!(
        look_alikes,
        [
            (Kind::NotLaunched, "default-young"),
            (Kind::NotRegistered, "default-registering"),
            (Kind::StuckTerminating, "gpu-deleting"),
        ]
    );
}

#[test]
fn young_instances_and_fresh_launches_are_left_alone() {
    let mut w = world();
    // An instance without a NodeClaim, launched 10s ago: maybe a launch in progress.
    w.instances
        .push(instance(11, Some("default-new"), "11:59:50"));
    // A NodeClaim launched 10s ago whose instance the (lagging) list does not show yet.
    let mut fresh = fixtures::launched("default-fresh", "default", 12, None);
    fixtures::set_true_at(&mut fresh, "Launched", "11:59:50");
    w.claims.push(fresh);
    let found = orphans(&w, &checked(&w));
    assert!(
        !found
            .iter()
            .any(|o| o.name.ends_with("60011") || o.name == "default-fresh"),
        "{found:#?}"
    );
    let eager = Thresholds {
        min_instance_age: Duration::ZERO,
        ..Thresholds::default()
    };
    let found = with(eager, &w);
    assert!(
        found
            .iter()
            .any(|o| o.kind == Kind::InstanceGone && o.name == "default-fresh")
    );
    assert!(
        found
            .iter()
            .any(|o| o.kind == Kind::InstanceWithoutNodeClaim && o.name == "i-0a1b2c3d4e5f600011")
    );
}

#[test]
fn an_unlaunched_claim_finds_its_instance_by_tag() {
    let mut w = world();
    w.instances
        .push(instance(13, Some("default-unlaunched"), "11:51:00"));
    let found = orphans(&w, &checked(&w));
    let o = find(&found, Kind::NotLaunched);
    assert_eq!(
        o.detail.last().map(String::as_str),
        Some("instance i-0a1b2c3d4e5f600013 running, tagged for it")
    );
    assert!(!found.iter().any(|o| o.name == "i-0a1b2c3d4e5f600013"));
}

#[test]
fn nodes_without_provider_ids_and_unlabelled_nodes() {
    let mut w = world();
    let mut bare = fixtures::node("ip-10-0-4-4", Some("default"), 0, &[]);
    if let Some(spec) = bare.spec.as_mut() {
        spec.provider_id = None;
    }
    w.nodes.push(bare);
    let found = orphans(&w, &checked(&w));
    let o = found
        .iter()
        .find(|o| o.name == "ip-10-0-4-4")
        .expect("reported");
    assert_eq!(o.detail, ["no spec.providerID"]);
    assert_eq!(o.instance, InstanceState::None);
    assert!(!found.iter().any(|o| o.name == "ip-10-0-9-9"));
}

#[test]
fn durations_print_like_ages() {
    assert_eq!(format_duration(Duration::from_secs(300)), "5m");
    assert_eq!(format_duration(Duration::from_secs(30)), "30s");
    assert_eq!(format_duration(Duration::from_secs(5400)), "90m");
}

/// A registered NodeClaim and a hand-made copy carrying its providerID: one instance, one
/// Node, two records.
fn copied_claim(w: &mut World) {
    let mut copy = fixtures::launched("default-copy", "default", 1, Some("ip-10-0-1-1"));
    copy.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        at("11:30:00"),
    ));
    fixtures::set_true_at(&mut copy, "Registered", "11:30:05");
    w.claims.push(copy);
}

#[test]
fn a_nodeclaim_claiming_anothers_provider_id_is_flagged() {
    let mut w = world();
    copied_claim(&mut w);
    let found = orphans(&w, &checked(&w));
    let dupes: Vec<&Orphan> = found
        .iter()
        .filter(|o| o.kind == Kind::DuplicateProviderID)
        .collect();
    assert_eq!(
        dupes.len(),
        1,
        "only the copy: the instance is tagged for the original"
    );
    let copy = dupes[0];
    assert_eq!(copy.name, "default-copy");
    assert_eq!(copy.since, Some(at("11:30:00")));
    assert_eq!(
        copy.node.as_ref().map(|n| n.name.as_str()),
        Some("ip-10-0-1-1")
    );
    assert_eq!(
        copy.detail,
        [
            "providerID aws:///us-east-1a/i-0a1b2c3d4e5f60001 is also claimed by nodeclaim default-ready",
            "instance i-0a1b2c3d4e5f60001 was launched for nodeclaim default-ready (its karpenter.sh/nodeclaim tag)",
        ]
    );
    assert_eq!(
        found.last().map(|o| o.kind),
        Some(Kind::DuplicateProviderID),
        "listed last, in kind order"
    );
    assert!(
        !found.iter().any(|o| o.name == "default-ready"),
        "the owner is not an orphan"
    );
}

#[test]
fn without_a_cloud_view_every_claimant_of_a_shared_provider_id_is_flagged() {
    let mut w = world();
    copied_claim(&mut w);
    let cloud = CloudView::Unchecked {
        reason: "--no-cloud".into(),
    };
    let found = orphans(&w, &cloud);
    let dupes: Vec<(&str, &str)> = found
        .iter()
        .filter(|o| o.kind == Kind::DuplicateProviderID)
        .map(|o| (o.name.as_str(), o.detail[1].as_str()))
        .collect();
    let unknown = "instance not checked: which NodeClaim owns it is unknown";
    assert_eq!(
        dupes,
        [("default-copy", unknown), ("default-ready", unknown)]
    );
}

#[test]
fn a_duplicate_is_reported_as_that_alone() {
    let mut w = world();
    // A copy of default-unregistered's providerID: that claim would be NotRegistered, whose
    // clean-up terminates the instance; as a claimant of a shared providerID it is left alone.
    let mut copy = fixtures::launched("default-twin", "default", 2, None);
    fixtures::set_true_at(&mut copy, "Registered", "11:45:00");
    w.claims.push(copy);
    w.instances[1].nodeclaim = None;
    let found = orphans(&w, &checked(&w));
    let kinds: Vec<(Kind, &str)> = found
        .iter()
        .filter(|o| o.name.starts_with("default-unregistered") || o.name == "default-twin")
        .map(|o| (o.kind, o.name.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            (Kind::DuplicateProviderID, "default-twin"),
            (Kind::DuplicateProviderID, "default-unregistered"),
        ]
    );
    assert!(
        found[found.len() - 1].detail[1].contains("has no karpenter.sh/nodeclaim tag"),
        "{:?}",
        found[found.len() - 1].detail
    );
}
