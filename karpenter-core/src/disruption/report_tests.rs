//! Tests of the disruption report and the what-if: per-node verdicts from the orchestrator's
//! own candidates, budgets and simulations.

use std::collections::HashMap;
use std::sync::Arc;

use crate::pod_view::PodView;
use crds::labels::DO_NOT_DISRUPT_ANNOTATION;
use k8s_openapi::api::core::v1::Node;
use serde_json::json;
use testutil::{ec2nodeclass, pdb};

use super::*;
use crate::disruption::candidates::tests::{karpenter_node, pool, running};
use crate::scheduling::testing::small_medium_large;

const NOW: &str = "2026-01-01T01:00:00Z";

fn settings() -> Settings {
    Settings {
        now: NOW.parse().expect("time"),
        spot_to_spot: false,
        hash_versions: Default::default(),
        min_values_policy: Default::default(),
    }
}

fn listings() -> HashMap<String, Listing> {
    HashMap::from([("default".to_string(), Ok(Arc::new(small_medium_large())))])
}

/// Karpenter nodes `(name, instance type)` (on-demand) with `pods`, one NodePool with
/// `disruption`.
fn cluster(
    nodes: &[(&str, &str)],
    pods: Vec<Arc<PodView>>,
    disruption: serde_json::Value,
) -> Snapshot {
    let (nodeclaims, nodes): (Vec<_>, Vec<Arc<Node>>) = nodes
        .iter()
        .map(|(n, t)| karpenter_node(n, t, "on-demand"))
        .unzip();
    Snapshot {
        nodeclaims,
        nodes,
        pods,
        nodepools: vec![pool(disruption)],
        nodeclasses: vec![ec2nodeclass("default").arc()],
        ..Snapshot::default()
    }
}

fn pinned(name: &str, node: &str) -> Arc<PodView> {
    let mut pod = (*running(name, node, "100m")).clone();
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(DO_NOT_DISRUPT_ANNOTATION.into(), "true".into());
    Arc::new(pod)
}

fn by_claim<'r>(r: &'r Report, name: &str) -> &'r NodeReport {
    r.nodes
        .iter()
        .find(|n| n.nodeclaim == name)
        .unwrap_or_else(|| panic!("no report for {name}"))
}

#[test]
fn every_node_gets_a_verdict_with_its_action_or_blocker() {
    let snap = cluster(
        &[
            ("big", "gp.4xlarge"),
            ("empty", "gp.xlarge"),
            ("pinned", "gp.xlarge"),
        ],
        vec![running("a", "big", "1500m"), pinned("p", "pinned")],
        json!({"budgets": [{"nodes": "100%"}]}),
    );
    let r = report(&snap, &listings(), &settings());

    let big = by_claim(&r, "default-big");
    assert_eq!(big.verdict.status, Status::Consolidatable);
    assert_eq!(big.pods, 1);
    assert_eq!(big.price, Some(0.80));
    // Its 1500m pod fits beside the pinned node's 100m pod (4 CPUs): a delete, saving the
    // whole node.
    assert_eq!(
        big.verdict.action,
        Some(ActionReport::Delete {
            reason: DisruptionReason::Underutilized
        })
    );
    assert_eq!(
        big.verdict.message,
        "delete: its 1 pod(s) fit elsewhere (saves $0.8000/h)"
    );

    let empty = by_claim(&r, "default-empty");
    assert_eq!(empty.verdict.status, Status::Consolidatable);
    assert_eq!(empty.verdict.message, "delete: empty (saves $0.2000/h)");

    let pinned = by_claim(&r, "default-pinned");
    assert_eq!(pinned.verdict.status, Status::Blocked);
    assert_eq!(
        pinned.verdict.message,
        "pod default/p has karpenter.sh/do-not-disrupt"
    );
    let cause = serde_json::to_value(&pinned.verdict.cause).expect("json");
    assert_eq!(cause["kind"], "podOptsOut", "{cause}");
    assert_eq!(cause["pod"], "default/p", "{cause}");

    assert_eq!(r.nodepools.len(), 1);
    let pool = &r.nodepools[0];
    assert_eq!(
        (
            pool.nodepool.as_str(),
            pool.nodes,
            pool.consolidate_after.as_str()
        ),
        ("default", 3, "0s")
    );
    assert_eq!(
        pool.budgets
            .iter()
            .map(|b| (b.reason, b.allowed))
            .collect::<Vec<_>>(),
        [
            (DisruptionReason::Drifted, Some(3)),
            (DisruptionReason::Empty, Some(3)),
            (DisruptionReason::Underutilized, Some(3)),
        ]
    );
}

#[test]
fn an_oversized_node_alone_is_replaced_by_a_cheaper_one() {
    let snap = cluster(
        &[("big", "gp.4xlarge")],
        vec![running("a", "big", "1500m")],
        json!({}),
    );
    let r = report(&snap, &listings(), &settings());
    let big = by_claim(&r, "default-big");
    assert_eq!(
        big.verdict.action,
        Some(ActionReport::Replace {
            reason: DisruptionReason::Underutilized,
            instance_type: "gp.large".into(),
            options: 2,
            price: 0.10,
        })
    );
    assert_eq!(
        big.verdict.message,
        "replace with gp.large ($0.1000/h, 2 option(s)), saving $0.7000/h"
    );
    let json = serde_json::to_value(&big.verdict).expect("json");
    assert_eq!(json["action"]["instanceType"], "gp.large");
    assert_eq!(json["status"], "Consolidatable");
}

#[test]
fn a_closed_budget_blocks_until_its_window_ends() {
    // Midnight for two hours, nothing may be disrupted: at 01:00 the window closes at 02:00.
    let snap = cluster(
        &[("empty", "gp.xlarge")],
        vec![],
        json!({"budgets": [{"nodes": "0", "schedule": "0 0 * * *", "duration": "2h"}]}),
    );
    let r = report(&snap, &listings(), &settings());
    let empty = by_claim(&r, "default-empty");
    assert_eq!(empty.verdict.status, Status::Blocked);
    assert_eq!(
        empty.verdict.message,
        "NodePool default budget for Empty allows no more disruptions now (until 2026-01-01 02:00 UTC)"
    );
    let budgets = &r.nodepools[0].budgets;
    assert!(budgets.iter().all(|b| b.allowed == Some(0)), "{budgets:?}");
    assert_eq!(
        budgets[0].until.map(|t| t.to_string()).as_deref(),
        Some("2026-01-01T02:00:00Z")
    );
    // An unscheduled zero budget has no end.
    let frozen = cluster(
        &[("empty", "gp.xlarge")],
        vec![],
        json!({"budgets": [{"nodes": "0", "reasons": ["Empty"]}]}),
    );
    let r = report(&frozen, &listings(), &settings());
    assert_eq!(
        by_claim(&r, "default-empty").verdict.message,
        "NodePool default budget for Empty allows no more disruptions now"
    );
    let drifted = &r.nodepools[0].budgets[0];
    assert_eq!(
        (drifted.reason, drifted.allowed),
        (DisruptionReason::Drifted, None)
    );
}

#[test]
fn consolidate_after_counts_down_and_disrupting_nodes_say_so() {
    let snap = cluster(
        &[("a", "gp.xlarge")],
        vec![running("x", "a", "100m")],
        json!({"consolidateAfter": "2h"}),
    );
    let r = report(&snap, &listings(), &settings());
    let a = by_claim(&r, "default-a");
    assert_eq!(a.verdict.status, Status::Blocked);
    // Initialized at T0 (2026-01-01T00:00:00Z), so consolidatable at 02:00: an hour from now.
    assert_eq!(
        a.verdict.message,
        "consolidateAfter elapses in 60m (at 02:00:00 UTC)"
    );

    let mut snap = cluster(&[("a", "gp.xlarge")], vec![], json!({}));
    let mut claim = (*snap.nodeclaims[0]).clone();
    claim
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            crds::disruption::COMMAND_ANNOTATION.into(),
            "empty-x1".into(),
        );
    snap.nodeclaims[0] = Arc::new(claim);
    let r = report(&snap, &listings(), &settings());
    let a = by_claim(&r, "default-a");
    assert_eq!(a.verdict.status, Status::Disrupting);
    assert_eq!(r.nodepools[0].budgets[1].disrupting, 1);
}

#[test]
fn explain_simulates_a_blocked_node_and_names_every_blocker() {
    let mut snap = cluster(
        &[("a", "gp.xlarge"), ("b", "gp.xlarge")],
        vec![
            pinned("p1", "a"),
            pinned("p2", "a"),
            running("x", "b", "100m"),
        ],
        json!({"budgets": [{"nodes": "100%"}]}),
    );
    snap.pdbs = vec![
        pdb("web")
            .namespace("default")
            .selecting("app", "web")
            .disruptions_allowed(0)
            .arc(),
    ];
    let w = explain(&snap, &listings(), &settings(), "a").expect("node a");
    assert_eq!(w.node.nodeclaim, "default-a");
    assert_eq!(w.node.verdict.status, Status::Blocked);
    assert_eq!(
        w.blockers,
        [
            "pod default/p1 has karpenter.sh/do-not-disrupt",
            "pod default/p2 has karpenter.sh/do-not-disrupt",
        ]
    );
    // Without the blockers both pods would move to b, and the fleet would save a's price.
    assert_eq!(
        w.action,
        Some(ActionReport::Delete {
            reason: DisruptionReason::Underutilized
        })
    );
    assert_eq!(
        w.placements
            .iter()
            .map(|p| (p.pod.as_str(), p.to.clone()))
            .collect::<Vec<_>>(),
        [
            ("default/p1", Destination::Existing { name: "b".into() }),
            ("default/p2", Destination::Existing { name: "b".into() }),
        ]
    );
    assert_eq!(w.cost_change, Some(-0.20));

    // b's pod is covered by a PDB allowing nothing; explaining by NodeClaim name works too.
    let w = explain(&snap, &listings(), &settings(), "default-b").expect("node b");
    assert_eq!(
        w.blockers,
        ["PodDisruptionBudget default/web allows no disruption (pod default/x)"]
    );

    assert_eq!(
        explain(&snap, &listings(), &settings(), "nope").map(|_| ()),
        Err(ExplainError::NotFound("nope".into()))
    );
}

#[test]
fn explain_shows_the_new_nodeclaim_a_replacement_needs() {
    let snap = cluster(
        &[("big", "gp.4xlarge")],
        vec![running("a", "big", "1500m"), running("b", "big", "200m")],
        json!({}),
    );
    let w = explain(&snap, &listings(), &settings(), "big").expect("node");
    assert!(w.blockers.is_empty(), "{:?}", w.blockers);
    assert!(
        w.placements.iter().all(|p| matches!(
            &p.to,
            Destination::NewNodeClaim { claim: 0, nodepool, .. } if nodepool == "default"
        )),
        "{:?}",
        w.placements
    );
    assert_eq!(w.placements.len(), 2);
    assert!((w.cost_change.expect("priced") - (0.10 - 0.80)).abs() < 1e-9);
    assert_eq!(
        w.message,
        "replace with gp.large ($0.1000/h, 2 option(s)), saving $0.7000/h"
    );
}
