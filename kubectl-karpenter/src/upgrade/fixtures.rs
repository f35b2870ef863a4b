//! Test builders for `upgrade`: the `default` NodePool with a history, its NodeClaims in every
//! rollout position (in progress, queued, skipped by a PodDisruptionBudget, not drifted), their
//! pods and the budget, at the shared fixed `now`.

use std::sync::Arc;

use crds::history::{Record, Replacement, reason};
use crds::upgrade::{
    Outcome, REPLACEMENT_ANNOTATION, REPLACES_ANNOTATION, STEP_STARTED_ANNOTATION, StepRecord,
};
use crds::{NodeClaim, NodePool};
use jiff::Timestamp;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_core::pod_view::PodView;
use serde_json::json;
use testutil::{PodBuilder, condition, nodeclaim, nodepool, pdb};

use super::report::PoolStatus;

/// The instant every snapshot is taken at.
pub fn now() -> Timestamp {
    crate::fixtures::now()
}

/// A finished step of `nodeclaim` that took `seconds`, ending an hour before [`now`].
pub fn record(nodeclaim: &str, outcome: Outcome, seconds: u64) -> StepRecord {
    StepRecord {
        nodeclaim: nodeclaim.into(),
        node: None,
        replacement: Some(format!("{nodeclaim}-r")),
        outcome,
        reason: (outcome == Outcome::RolledBack).then(|| {
            format!(
                "replacement {nodeclaim}-r for {nodeclaim} did not initialize within 600s \
                 (Launched=True, Registered=True, Initialized=False); rolled back"
            )
        }),
        started: "2025-06-01T10:50:00Z".into(),
        finished: "2025-06-01T11:00:00Z".into(),
        seconds,
        pods_moved: 0,
    }
}

/// The disruption history's record of a finished step of `nodeclaim` in `default` that took
/// `seconds`, ending an hour before [`now`] (as [`record`] shows it).
pub fn history_record(nodeclaim: &str, outcome: Outcome, seconds: u64) -> Record {
    let step = record(nodeclaim, outcome, seconds);
    let finished: Timestamp = step.finished.parse().expect("fixture time");
    let decided = finished - jiff::SignedDuration::from_secs(seconds as i64);
    Record {
        id: format!("uid-{nodeclaim}"),
        nodeclaim: nodeclaim.into(),
        nodepool: "default".into(),
        node: None,
        instance_type: None,
        capacity_type: None,
        zone: None,
        reason: reason::DRIFTED.into(),
        message: step.reason,
        outcome,
        decided,
        finished,
        pods_moved: step.pods_moved,
        pods: vec![],
        price: None,
        replacement: step.replacement.map(|nodeclaim| Replacement {
            nodeclaim,
            ..Replacement::default()
        }),
        cost_change: None,
    }
}

/// The disruption history: one succeeded step of `default` (250s, 3 pods moved) and one
/// rolled back, and a consolidation record that is no upgrade step.
pub fn records() -> Vec<Record> {
    let mut consolidated = history_record("default-small", Outcome::Succeeded, 30);
    consolidated.reason = reason::EMPTY.into();
    let mut succeeded = history_record("default-old1", Outcome::Succeeded, 250);
    succeeded.pods_moved = 3;
    vec![
        succeeded,
        history_record("default-old2", Outcome::RolledBack, 610),
        consolidated,
    ]
}

/// The `default` NodePool.
pub fn pool() -> NodePool {
    nodepool("default").resource_version("7").build()
}

/// Sets an annotation on `pool`.
pub fn annotate(pool: &mut NodePool, key: &str, value: &str) {
    pool.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
}

/// A NodeClaim of `default` created at 06:00 on `node`, with `conditions` True since 06:00 and
/// `annotations`.
fn claim(
    name: &str,
    node: Option<&str>,
    conditions: &[&str],
    annotations: &[(&str, &str)],
) -> Arc<NodeClaim> {
    let claim = conditions.iter().fold(
        nodeclaim(name)
            .created("2025-06-01T06:00:00Z")
            .nodepool("default")
            .annotations(annotations.iter().copied()),
        |claim, t| claim.with_condition(condition(t, "True").at("2025-06-01T06:00:00Z")),
    );
    match node {
        Some(node) => claim.node_name(node).arc(),
        None => claim.arc(),
    }
}

/// A running pod `ns/name` on `node` with one container `app` (image `app`).
fn pod(ns: &str, name: &str, node: &str) -> PodBuilder {
    testutil::pod(name)
        .namespace(ns)
        .on_node(node)
        .merge(json!({"spec": {"containers": [{"name": "app", "image": "app"}]}}))
        .phase("Running")
}

/// The NodeClaims of `default`, their pods and the PodDisruptionBudget `shop/cart`:
/// - `default-stepping` (ip-10-0-1-3) being replaced by `default-r1` (launched, not registered)
///   since 11:58;
/// - `default-busy` (ip-10-0-1-1): drifted, two pods (grace 45s and the default 30s) and a
///   DaemonSet pod;
/// - `default-blocked` (ip-10-0-1-2): drifted, its pod `shop/cart-0` covered by `shop/cart`,
///   which allows no disruption;
/// - `default-empty` (ip-10-0-1-4): drifted, no pods;
/// - `default-fresh` (ip-10-0-1-5): not drifted.
pub fn objects() -> Objects {
    let drifted = ["Launched", "Registered", "Initialized", "Ready", "Drifted"];
    let claims = vec![
        claim(
            "default-stepping",
            Some("ip-10-0-1-3.ec2.internal"),
            &drifted,
            &[
                (REPLACEMENT_ANNOTATION, "default-r1"),
                (STEP_STARTED_ANNOTATION, "2025-06-01T11:58:00Z"),
            ],
        ),
        claim(
            "default-r1",
            None,
            &["Launched"],
            &[(REPLACES_ANNOTATION, "default-stepping")],
        ),
        claim(
            "default-busy",
            Some("ip-10-0-1-1.ec2.internal"),
            &drifted,
            &[],
        ),
        claim(
            "default-blocked",
            Some("ip-10-0-1-2.ec2.internal"),
            &drifted,
            &[],
        ),
        claim(
            "default-empty",
            Some("ip-10-0-1-4.ec2.internal"),
            &drifted,
            &[],
        ),
        claim(
            "default-fresh",
            Some("ip-10-0-1-5.ec2.internal"),
            &drifted[..4],
            &[],
        ),
    ];
    let busy = "ip-10-0-1-1.ec2.internal";
    let pods = vec![
        pod("shop", "web-0", busy).grace_period(45).arc(),
        pod("shop", "web-1", busy).arc(),
        pod("kube-system", "agent-1", busy)
            .owner("apps/v1", "DaemonSet", "agent", "u1")
            .arc(),
        pod("shop", "cart-0", "ip-10-0-1-2.ec2.internal")
            .label("app", "cart")
            .arc(),
    ];
    let pdb = pdb("cart").namespace("shop").disruptions_allowed(0).arc();
    Objects {
        claims,
        pods,
        pdbs: vec![pdb],
    }
}

/// What the planner reads besides the NodePool.
pub struct Objects {
    /// The NodePool's NodeClaims.
    pub claims: Vec<Arc<NodeClaim>>,
    /// Every pod.
    pub pods: Vec<Arc<PodView>>,
    /// Every PodDisruptionBudget.
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
}

/// The status of [`pool`] over [`objects`] at [`now`].
pub fn status() -> PoolStatus {
    let o = objects();
    PoolStatus::of(&pool(), &o.claims, &o.pods, &o.pdbs, &records(), now())
}
