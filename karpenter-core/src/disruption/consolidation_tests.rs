//! Tests of consolidation decisions: deletes and replacements found by the solver, the cheaper
//! rule, spot rules, budgets, and the three methods.

use std::collections::HashMap;
use std::sync::Arc;

use crate::pod_view::PodView;
use crds::DisruptionReason;
use crds::labels::TOPOLOGY_ZONE_LABEL;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use testutil::ec2nodeclass;

use super::*;
use crate::disruption::candidates::tests::{karpenter_node, pool, running, types};
use crate::disruption::candidates::verdicts;
use crate::provisioning::plan::Listing;
use crate::scheduling::testing::small_medium_large;

const NOW: &str = "2026-01-01T01:00:00Z";

fn now() -> Timestamp {
    NOW.parse().expect("time")
}

fn settings(spot_to_spot: bool) -> Settings {
    Settings {
        now: now(),
        spot_to_spot,
        hash_versions: Default::default(),
        min_values_policy: Default::default(),
    }
}

fn listings() -> HashMap<String, Listing> {
    HashMap::from([("default".to_string(), Ok(Arc::new(small_medium_large())))])
}

/// A cluster of Karpenter nodes `(name, instance type, capacity type)` and pods.
fn cluster(
    nodes: &[(&str, &str, &str)],
    pods: Vec<Arc<PodView>>,
    disruption: serde_json::Value,
) -> Snapshot {
    let (claims, nodes): (Vec<_>, Vec<Arc<Node>>) = nodes
        .iter()
        .map(|(n, t, ct)| karpenter_node(n, t, ct))
        .unzip();
    Snapshot {
        nodeclaims: claims,
        nodes,
        pods,
        nodepools: vec![pool(disruption)],
        nodeclasses: vec![ec2nodeclass("default").arc()],
        ..Snapshot::default()
    }
}

fn candidates(snap: &Snapshot) -> Vec<Candidate> {
    let mut c: Vec<Candidate> = verdicts(snap, &types(), now())
        .into_iter()
        .filter_map(|v| v.standing.ok())
        .collect();
    sort(&mut c);
    c
}

fn budgets(snap: &Snapshot) -> Budgets {
    Budgets::new(snap, &HashMap::new(), now())
}

fn replacement_types(action: &Action) -> Vec<String> {
    match action {
        Action::Replace(r) => r
            .planned
            .decision
            .instance_types
            .iter()
            .map(|t| t.name.clone())
            .collect(),
        Action::Delete => vec![],
    }
}

#[test]
fn a_node_whose_pods_fit_elsewhere_is_deleted() {
    let snap = cluster(
        &[
            ("big", "gp.4xlarge", "on-demand"),
            ("small", "gp.xlarge", "on-demand"),
        ],
        vec![running("a", "big", "500m"), running("b", "small", "500m")],
        serde_json::json!({}),
    );
    let cands = candidates(&snap);
    let s = settings(false);
    let mut sim = Simulator::new(&snap, &listings(), &s);
    let (cmd, rejected) = single_node(
        &mut sim,
        &Scorer::default(),
        &cands,
        &budgets(&snap),
        &mut || true,
    );
    let cmd = cmd.expect("a command");
    assert_eq!(cmd.method, Method::Single);
    assert_eq!(cmd.reason, DisruptionReason::Underutilized);
    // Both hold one 500m pod at equal cost; the dearer node sorts first and its pod fits the
    // other.
    assert_eq!(cmd.candidates[0].name(), "default-big");
    assert!(matches!(cmd.action, Action::Delete), "{:?}", cmd.action);
    assert!(rejected.is_empty());
    assert!((cmd.savings() - 0.80).abs() < 1e-9);
}

#[test]
fn an_oversized_node_is_replaced_by_a_cheaper_one_of_the_same_capacity_type() {
    let snap = cluster(
        &[("big", "gp.4xlarge", "on-demand")],
        vec![running("a", "big", "1500m")],
        serde_json::json!({}),
    );
    let s = settings(false);
    let mut sim = Simulator::new(&snap, &listings(), &s);
    let cands = candidates(&snap);
    let action = sim.simulate(&[&cands[0]]).expect("consolidatable");
    assert_eq!(replacement_types(&action), ["gp.large", "gp.xlarge"]);
    let Action::Replace(r) = &action else {
        unreachable!()
    };
    assert_eq!(r.price, 0.10);
    let ct = r
        .planned
        .nodeclaim
        .spec
        .requirements
        .iter()
        .find(|q| q.key == "karpenter.sh/capacity-type")
        .map(|q| q.values.clone());
    assert_eq!(
        ct,
        Some(vec!["on-demand".to_string()]),
        "never on-demand -> spot without the gate"
    );
    assert_eq!(
        r.planned.nodeclaim.metadata.generate_name.as_deref(),
        Some("default-")
    );
}

#[test]
fn a_replacement_must_be_strictly_cheaper() {
    let snap = cluster(
        &[("n", "gp.large", "on-demand")],
        vec![running("a", "n", "1500m")],
        serde_json::json!({}),
    );
    let s = settings(false);
    let mut sim = Simulator::new(&snap, &listings(), &s);
    let cands = candidates(&snap);
    let why = sim
        .simulate(&[&cands[0]])
        .expect_err("nothing cheaper than gp.large");
    assert_eq!(
        why,
        Unconsolidatable::NotCheaper {
            current: Some(0.10),
            replacement: 0.10
        }
    );
    assert_eq!(
        why.to_string(),
        "not cheaper: a replacement would cost $0.1000/h, the node(s) cost $0.1000/h"
    );
}

/// A node in a capacity reservation costs what its reserved offering costs (upstream:
/// on-demand / 10,000,000, already paid for): no on-demand replacement is cheaper, so an
/// oversized reserved node is kept where the same node on demand would be replaced.
#[test]
fn a_reserved_node_is_priced_at_its_reservation_and_kept() {
    use crate::capacity::catalog::with_reservations;
    use crate::capacity::index::TypeIndex;
    use crate::capacity::reservation::ReservedCapacity;

    let base = small_medium_large();
    let on_demand = |name: &str| {
        base.iter()
            .find(|t| t.name == name)
            .and_then(|t| t.offerings.iter().find(|o| o.capacity_type == "on-demand"))
            .map(|o| o.price)
    };
    let reserved = [ReservedCapacity {
        id: "cr-1".into(),
        instance_type: "gp.4xlarge".into(),
        zone: "test-zone-a".into(),
        available: 0,
        reservation_type: "default".into(),
    }];
    let zones = ["test-zone-a".to_string(), "test-zone-b".to_string()].into();
    let listed = with_reservations(base.clone(), &zones, &reserved, on_demand);
    let snap = cluster(
        &[("big", "gp.4xlarge", "reserved")],
        vec![running("a", "big", "1500m")],
        serde_json::json!({}),
    );
    let mut index = TypeIndex::default();
    index.add_listed(&listed);
    let cands: Vec<Candidate> = verdicts(&snap, &index, now())
        .into_iter()
        .filter_map(|v| v.standing.ok())
        .collect();
    let price = cands[0].price.expect("priced");
    assert!((price - 0.80 / 10_000_000.0).abs() < 1e-15, "{price}");
    let listings = HashMap::from([("default".to_string(), Ok(Arc::new(listed)))]);
    let s = settings(false);
    let mut sim = Simulator::new(&snap, &listings, &s);
    let why = sim
        .simulate(&[&cands[0]])
        .expect_err("nothing is cheaper than a reservation already paid for");
    assert!(
        matches!(why, Unconsolidatable::NotCheaper { .. }),
        "{why:?}"
    );
}

#[test]
fn spot_nodes_are_replaced_by_spot_only_behind_the_gate_and_with_enough_options() {
    let snap = cluster(
        &[("s", "gp.4xlarge", "spot")],
        vec![running("a", "s", "1500m")],
        serde_json::json!({}),
    );
    let cands = candidates(&snap);
    let off = settings(false);
    let mut sim = Simulator::new(&snap, &listings(), &off);
    assert_eq!(
        sim.simulate(&[&cands[0]]).expect_err("gate off"),
        Unconsolidatable::SpotToSpotDisabled
    );
    let on = settings(true);
    let mut sim = Simulator::new(&snap, &listings(), &on);
    assert_eq!(
        sim.simulate(&[&cands[0]]).expect_err("three types only"),
        Unconsolidatable::TooFewSpotOptions { options: 2 }
    );
}

#[test]
fn a_pod_that_fits_nowhere_keeps_its_node() {
    // Two nodes full of 3.5-cpu pods: neither pod fits on the other node, and a replacement
    // for one is not cheaper than a gp.xlarge.
    let snap = cluster(
        &[
            ("a", "gp.xlarge", "on-demand"),
            ("b", "gp.xlarge", "on-demand"),
        ],
        vec![running("pa", "a", "3500m"), running("pb", "b", "3500m")],
        serde_json::json!({"budgets": [{"nodes": "100%"}]}),
    );
    let cands = candidates(&snap);
    let s = settings(false);
    let mut sim = Simulator::new(&snap, &listings(), &s);
    let (cmd, rejected) = single_node(
        &mut sim,
        &Scorer::default(),
        &cands,
        &budgets(&snap),
        &mut || true,
    );
    assert!(cmd.is_none());
    assert_eq!(rejected.len(), 2);
    assert!(
        matches!(rejected[0].1, Unconsolidatable::NotCheaper { .. }),
        "{:?}",
        rejected[0].1
    );
    assert!(
        multi_node(
            &mut sim,
            &Scorer::default(),
            &cands,
            &budgets(&snap),
            &mut || true
        )
        .is_none()
    );
}

#[test]
fn multi_node_folds_several_nodes_into_one_cheaper_node() {
    let snap = cluster(
        &[
            ("a", "gp.xlarge", "on-demand"),
            ("b", "gp.xlarge", "on-demand"),
            ("c", "gp.xlarge", "on-demand"),
        ],
        vec![
            running("pa", "a", "500m"),
            running("pb", "b", "500m"),
            running("pc", "c", "500m"),
        ],
        serde_json::json!({"budgets": [{"nodes": "100%"}]}),
    );
    let cands = candidates(&snap);
    let s = settings(false);
    let mut sim = Simulator::new(&snap, &listings(), &s);
    let cmd = multi_node(
        &mut sim,
        &Scorer::default(),
        &cands,
        &budgets(&snap),
        &mut || true,
    )
    .expect("a command");
    assert_eq!(cmd.method, Method::Multi);
    assert_eq!(cmd.candidates.len(), 3);
    assert_eq!(replacement_types(&cmd.action), ["gp.large", "gp.xlarge"]);
    assert!((cmd.savings() - (0.60 - 0.10)).abs() < 1e-9);
    // With the default 10% budget only one node of three may be disrupted: no multi command.
    let tight = cluster(
        &[
            ("a", "gp.xlarge", "on-demand"),
            ("b", "gp.xlarge", "on-demand"),
            ("c", "gp.xlarge", "on-demand"),
        ],
        vec![],
        serde_json::json!({}),
    );
    let mut sim = Simulator::new(&tight, &listings(), &s);
    assert!(
        multi_node(
            &mut sim,
            &Scorer::default(),
            &candidates(&tight),
            &budgets(&tight),
            &mut || { true }
        )
        .is_none()
    );
}

#[test]
fn emptiness_deletes_every_empty_node_its_budget_allows() {
    let snap = cluster(
        &[
            ("a", "gp.xlarge", "on-demand"),
            ("b", "gp.xlarge", "on-demand"),
            ("c", "gp.xlarge", "on-demand"),
        ],
        vec![running("pc", "c", "500m")],
        serde_json::json!({"budgets": [{"nodes": "2"}]}),
    );
    let cands = candidates(&snap);
    let cmd = emptiness(&cands, &budgets(&snap)).expect("empty nodes");
    let names: Vec<&str> = cmd.candidates.iter().map(Candidate::name).collect();
    assert_eq!(names, ["default-a", "default-b"]);
    assert_eq!(cmd.reason, DisruptionReason::Empty);
    let one = cluster(
        &[
            ("a", "gp.xlarge", "on-demand"),
            ("b", "gp.xlarge", "on-demand"),
        ],
        vec![],
        serde_json::json!({"budgets": [{"nodes": "1"}]}),
    );
    assert_eq!(
        emptiness(&candidates(&one), &budgets(&one)).map(|c| c.candidates.len()),
        Some(1)
    );
    let frozen = cluster(
        &[("a", "gp.xlarge", "on-demand")],
        vec![],
        serde_json::json!({"budgets": [{"nodes": "0", "reasons": ["Empty"]}]}),
    );
    assert!(emptiness(&candidates(&frozen), &budgets(&frozen)).is_none());
    // No budget names Drifted: drift is not limited by this one (upstream: the minimum over the
    // budgets that apply, unlimited when none does).
    assert_eq!(
        budgets(&frozen).allowed("default", DisruptionReason::Drifted),
        usize::MAX
    );
}

#[test]
fn nodes_already_disrupting_use_up_the_budget() {
    let snap = cluster(
        &[
            ("a", "gp.xlarge", "on-demand"),
            ("b", "gp.xlarge", "on-demand"),
        ],
        vec![],
        serde_json::json!({"budgets": [{"nodes": "1"}]}),
    );
    let busy = HashMap::from([("default".to_string(), 1)]);
    let b = Budgets::new(&snap, &busy, now());
    assert_eq!(b.allowed("default", DisruptionReason::Empty), 0);
    assert!(emptiness(&candidates(&snap), &b).is_none());
}

#[test]
fn a_replacement_keeps_the_zone_its_pods_need() {
    let pinned = testutil::pod("zonal")
        .cpu("1500m")
        .memory("256Mi")
        .on_node("big")
        .phase("Running")
        .node_selector(TOPOLOGY_ZONE_LABEL, "test-zone-a")
        .owner("apps/v1", "ReplicaSet", "z", "z-uid")
        .arc();
    let snap = cluster(
        &[("big", "gp.4xlarge", "on-demand")],
        vec![pinned],
        serde_json::json!({}),
    );
    let s = settings(false);
    let mut sim = Simulator::new(&snap, &listings(), &s);
    let cands = candidates(&snap);
    let Action::Replace(r) = sim.simulate(&[&cands[0]]).expect("consolidatable") else {
        panic!("a replacement expected");
    };
    let zones = r
        .planned
        .nodeclaim
        .spec
        .requirements
        .iter()
        .find(|q| q.key == TOPOLOGY_ZONE_LABEL)
        .map(|q| q.values.clone());
    assert_eq!(zones, Some(vec!["test-zone-a".to_string()]));
}

#[test]
fn a_drift_replacement_is_sized_and_placed_by_the_solver_from_the_pods() {
    let zonal = testutil::pod("zonal")
        .cpu("1500m")
        .memory("256Mi")
        .on_node("old")
        .phase("Running")
        .node_selector(TOPOLOGY_ZONE_LABEL, "test-zone-b")
        .owner("apps/v1", "ReplicaSet", "z", "z-uid")
        .arc();
    let snap = cluster(
        &[
            ("old", "gp.4xlarge", "on-demand"),
            ("roomy", "gp.4xlarge", "on-demand"),
        ],
        vec![Arc::clone(&zonal)],
        serde_json::json!({}),
    );
    let s = settings(false);
    let mut sim = Simulator::new(&snap, &listings(), &s);
    let planned = sim
        .replacement_for(&[zonal])
        .expect("schedulable")
        .expect("a replacement");
    // Sized from the pod (a 1.5-cpu pod fits gp.large first), not from the old node, and in
    // the zone the pod needs, although other nodes have room for it.
    assert_eq!(planned.decision.instance_types[0].name, "gp.large");
    let zones = planned
        .nodeclaim
        .spec
        .requirements
        .iter()
        .find(|q| q.key == TOPOLOGY_ZONE_LABEL)
        .map(|q| q.values.clone());
    assert_eq!(zones, Some(vec!["test-zone-b".to_string()]));
    assert!(
        sim.replacement_for(&[])
            .expect("nothing to place")
            .is_none()
    );
}

/// Three full gp.4xlarge nodes (one pod each) and `extra`, in a NodePool of `policy`.
fn balanced_cluster(policy: &str, extra: (&str, &str), pods: Vec<Arc<PodView>>) -> Snapshot {
    let mut all = vec![
        running("f1", "full1", "15000m"),
        running("f2", "full2", "15000m"),
        running("f3", "full3", "15000m"),
    ];
    all.extend(pods);
    cluster(
        &[
            ("full1", "gp.4xlarge", "on-demand"),
            ("full2", "gp.4xlarge", "on-demand"),
            ("full3", "gp.4xlarge", "on-demand"),
            (extra.0, extra.1, "on-demand"),
        ],
        all,
        serde_json::json!({"consolidationPolicy": policy, "budgets": [{"nodes": "100%"}]}),
    )
}

#[test]
fn balanced_keeps_a_busy_node_whose_move_saves_little_and_the_default_policy_moves_it() {
    // A gp.xlarge ($0.20/h) with ten pods in a $2.60/h pool: moving it saves at most 7.7% of
    // the pool's cost and disrupts 11 of its 17 disruption cost (65%), a score under 0.12.
    let pods: Vec<Arc<PodView>> = (0..10)
        .map(|i| running(&format!("w{i}"), "busy", "150m"))
        .collect();
    let snap = balanced_cluster("Balanced", ("busy", "gp.xlarge"), pods.clone());
    let cands = candidates(&snap);
    let scorer = Scorer::new(&snap, &types());
    let totals = scorer
        .totals("default")
        .expect("a Balanced pool has totals");
    assert!((totals.cost - 2.6).abs() < 1e-9, "{totals:?}");
    assert_eq!(totals.disruption_cost, 17.0);
    let s = settings(false);
    let mut sim = Simulator::new(&snap, &listings(), &s);
    let (cmd, rejected) = single_node(&mut sim, &scorer, &cands, &budgets(&snap), &mut || true);
    assert!(
        cmd.is_none(),
        "{:?}",
        cmd.map(|c| c.candidates[0].name().to_string())
    );
    let (_, why) = rejected
        .iter()
        .find(|(n, _)| n == "default-busy")
        .expect("the busy node was judged");
    let Unconsolidatable::BelowBalancedThreshold { nodepool, score } = why else {
        panic!("{why:?}");
    };
    assert_eq!(nodepool, "default");
    assert!(score.value() < 0.12 && !score.approved(), "{score}");
    assert!(
        why.to_string()
            .starts_with("NodePool default is Balanced and the move saves too little"),
        "{why}"
    );
    assert!(multi_node(&mut sim, &scorer, &cands, &budgets(&snap), &mut || true).is_none());

    // The same cluster under WhenEmptyOrUnderutilized moves it.
    let snap = balanced_cluster("WhenEmptyOrUnderutilized", ("busy", "gp.xlarge"), pods);
    let cands = candidates(&snap);
    let scorer = Scorer::new(&snap, &types());
    assert!(
        scorer.totals("default").is_none(),
        "only Balanced pools are scored"
    );
    let mut sim = Simulator::new(&snap, &listings(), &s);
    let (cmd, _) = single_node(&mut sim, &scorer, &cands, &budgets(&snap), &mut || true);
    let cmd = cmd.expect("consolidated without scoring");
    assert_eq!(cmd.candidates[0].name(), "default-busy");
    assert!(cmd.scores.is_empty());
}

#[test]
fn balanced_approves_a_move_worth_its_disruption_and_says_its_score() {
    // A gp.4xlarge ($0.80/h) with one small pod: whichever gp.4xlarge goes (the idle one, or
    // a full one whose pod moves onto it), the move saves 25% of the pool's cost for 25% of
    // its disruption (2 of 8).
    let snap = balanced_cluster(
        "Balanced",
        ("idle", "gp.4xlarge"),
        vec![running("w", "idle", "100m")],
    );
    let cands = candidates(&snap);
    let scorer = Scorer::new(&snap, &types());
    let s = settings(false);
    let mut sim = Simulator::new(&snap, &listings(), &s);
    let (cmd, _) = single_node(&mut sim, &scorer, &cands, &budgets(&snap), &mut || true);
    let cmd = cmd.expect("approved");
    assert_eq!(cmd.scores.len(), 1);
    let score = cmd.scores[0].score;
    assert!(score.approved() && score.value() >= 0.75, "{score}");
    assert_eq!(score.disruption_fraction, 0.25);
}
