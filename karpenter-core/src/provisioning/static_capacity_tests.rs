//! Static NodePools: how many NodeClaims to create or delete, within `limits.nodes`, and which
//! go first on a scale-down (upstream `pkg/controllers/static/*/suite_test.go` cases).

use std::sync::Arc;

use testutil::{nodeclaim, nodepool, pod};

use super::*;
use crate::scheduling::testing::small_medium_large;

const NOW: &str = "2026-01-01T12:00:00Z";

fn now() -> Timestamp {
    NOW.parse().expect("time")
}

fn static_pool(replicas: i64) -> Arc<NodePool> {
    Arc::new(nodepool("fixed").replicas(replicas).build())
}

fn snap(claims: Vec<NodeClaim>) -> Snapshot {
    Snapshot {
        nodeclaims: claims.into_iter().map(Arc::new).collect(),
        ..Snapshot::default()
    }
}

fn claim(name: &str) -> testutil::NodeClaimBuilder {
    nodeclaim(name)
        .nodepool("fixed")
        .created("2026-01-01T00:00:00Z")
}

fn names(claims: &[Arc<NodeClaim>]) -> Vec<&str> {
    claims
        .iter()
        .map(|c| c.metadata.name.as_deref().unwrap_or(""))
        .collect()
}

fn decide_for(pool: &Arc<NodePool>, s: &Snapshot) -> Decision {
    decide(s, pool, &small_medium_large(), &Settings::default(), now())
}

#[test]
fn replicas_with_no_nodeclaims_creates_that_many_on_the_cheapest_type() {
    let d = decide_for(&static_pool(3), &snap(vec![]));
    assert_eq!(d.create.len(), 3);
    assert!(d.delete.is_empty());
    assert_eq!(
        d.verdict,
        Verdict::Scaling {
            have: 0,
            replicas: 3
        }
    );
    let c = &d.create[0];
    assert!(c.decision.pods.is_empty());
    assert_eq!(c.decision.instance_types[0].name, "gp.large");
    assert_eq!(
        c.nodeclaim.metadata.generate_name.as_deref(),
        Some("fixed-")
    );
    let labels = c.nodeclaim.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("karpenter.sh/nodepool").map(String::as_str),
        Some("fixed")
    );
}

#[test]
fn deleting_nodeclaims_do_not_count_and_are_replaced() {
    let s = snap(vec![
        claim("a").build(),
        claim("b").deleting("2026-01-01T11:00:00Z").build(),
    ]);
    let d = decide_for(&static_pool(2), &s);
    assert_eq!(d.create.len(), 1);
    let d = decide_for(&static_pool(1), &s);
    assert!(d.create.is_empty() && d.delete.is_empty());
    assert_eq!(d.verdict, Verdict::Satisfied { replicas: 1 });
}

#[test]
fn limits_nodes_caps_replicas_counting_deleting_nodeclaims_and_says_so() {
    let pool = Arc::new(nodepool("fixed").replicas(3).limit("nodes", "2").build());
    let d = decide_for(&pool, &snap(vec![]));
    assert_eq!(d.create.len(), 2);
    assert_eq!(
        d.verdict,
        Verdict::NodeLimitReached {
            limit: 2,
            replicas: 3
        }
    );
    // A NodeClaim still terminating holds its place under the limit.
    let s = snap(vec![
        claim("a").build(),
        claim("b").deleting("2026-01-01T11:00:00Z").build(),
    ]);
    assert!(decide_for(&pool, &s).create.is_empty());
}

#[test]
fn scale_down_removes_unlaunched_then_empty_then_cheapest_to_disrupt() {
    let busy_pod = |name: &str, node: &str| pod(name).cpu("100m").on_node(node).arc();
    let mut s = snap(vec![
        claim("busy")
            .provider_id("aws:///a/i-1")
            .node_name("n-busy")
            .build(),
        claim("empty")
            .provider_id("aws:///a/i-2")
            .node_name("n-empty")
            .build(),
        claim("pending").build(),
        claim("light")
            .provider_id("aws:///a/i-3")
            .node_name("n-light")
            .build(),
    ]);
    s.pods = vec![
        busy_pod("p1", "n-busy"),
        busy_pod("p2", "n-busy"),
        busy_pod("p3", "n-light"),
    ];
    let d = decide_for(&static_pool(1), &s);
    assert!(d.create.is_empty());
    assert_eq!(names(&d.delete), vec!["pending", "empty", "light"]);
    assert_eq!(
        d.verdict,
        Verdict::Scaling {
            have: 4,
            replicas: 1
        }
    );
    // A do-not-disrupt pod puts its node last.
    let mut opted = (*s.pods[2]).clone();
    opted
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("karpenter.sh/do-not-disrupt".into(), "true".into());
    s.pods[2] = Arc::new(opted);
    let d = decide_for(&static_pool(1), &s);
    assert_eq!(names(&d.delete), vec!["pending", "empty", "busy"]);
}

#[test]
fn no_fitting_instance_type_is_reported_not_hidden() {
    let pool = Arc::new(
        nodepool("fixed")
            .replicas(2)
            .requirement(
                "node.kubernetes.io/instance-type",
                crds::Operator::In,
                ["x9.huge"],
            )
            .build(),
    );
    let d = decide_for(&pool, &snap(vec![]));
    assert!(d.create.is_empty());
    assert!(
        matches!(&d.verdict, Verdict::NoInstanceType(why) if why.contains("no instance type")),
        "{:?}",
        d.verdict
    );
}

#[test]
fn a_node_being_replaced_counts_for_creates_not_for_removal() {
    // An upgrade step replaces "old" with "new": three NodeClaims for replicas 2, none removed,
    // none created.
    let s = snap(vec![
        claim("keep").provider_id("aws:///a/i-1").build(),
        claim("old")
            .provider_id("aws:///a/i-2")
            .annotation(crds::upgrade::REPLACEMENT_ANNOTATION, "new")
            .build(),
        claim("new").build(),
    ]);
    let d = decide_for(&static_pool(2), &s);
    assert!(d.create.is_empty() && d.delete.is_empty(), "{d:?}");
}
