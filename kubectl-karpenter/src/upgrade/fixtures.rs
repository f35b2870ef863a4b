//! Test builders for `upgrade`: the `default` NodePool with a history, its NodeClaims in every
//! rollout position (in progress, queued, skipped by a PodDisruptionBudget, not drifted), their
//! pods and the budget, at the shared fixed `now`.

use std::sync::Arc;

use crds::upgrade::{
    HISTORY_ANNOTATION, Outcome, REPLACEMENT_ANNOTATION, REPLACES_ANNOTATION,
    STEP_STARTED_ANNOTATION, StepRecord,
};
use crds::{NodeClaim, NodePool};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{Value, json};

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
    }
}

/// The `default` NodePool with one succeeded (250s) and one rolled-back step in its history.
pub fn pool() -> NodePool {
    let history = vec![
        record("default-old1", Outcome::Succeeded, 250),
        record("default-old2", Outcome::RolledBack, 610),
    ];
    let history = serde_json::to_string(&history).expect("history JSON");
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default", "resourceVersion": "7",
                     "annotations": {HISTORY_ANNOTATION: history}},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [],
        }}},
    }))
    .expect("valid NodePool")
}

/// Sets an annotation on `pool`.
pub fn annotate(pool: &mut NodePool, key: &str, value: &str) {
    pool.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
}

fn condition(t: &str) -> Value {
    json!({"type": t, "status": "True", "reason": t, "message": "",
           "lastTransitionTime": "2025-06-01T06:00:00Z"})
}

/// A NodeClaim of `default` on `node` with `conditions` True and `annotations`.
fn claim(name: &str, node: Option<&str>, conditions: &[&str], annotations: Value) -> NodeClaim {
    let conditions: Vec<Value> = conditions.iter().map(|t| condition(t)).collect();
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "creationTimestamp": "2025-06-01T06:00:00Z",
                     "labels": {"karpenter.sh/nodepool": "default"},
                     "annotations": annotations},
        "spec": {"requirements": [],
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
        "status": {"nodeName": node, "conditions": conditions},
    }))
    .expect("valid NodeClaim")
}

fn pod(ns: &str, name: &str, node: &str, extra: Value) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": ns, "name": name},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app"}]},
        "status": {"phase": "Running"},
    });
    merge(&mut pod, extra);
    serde_json::from_value(pod).expect("valid Pod")
}

/// Merges `extra` into `base`, objects key by key.
fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(base), Value::Object(extra)) => {
            for (k, v) in extra {
                merge(base.entry(k).or_insert(Value::Null), v);
            }
        }
        (base, extra) => *base = extra,
    }
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
            json!({REPLACEMENT_ANNOTATION: "default-r1",
                   STEP_STARTED_ANNOTATION: "2025-06-01T11:58:00Z"}),
        ),
        claim(
            "default-r1",
            None,
            &["Launched"],
            json!({REPLACES_ANNOTATION: "default-stepping"}),
        ),
        claim(
            "default-busy",
            Some("ip-10-0-1-1.ec2.internal"),
            &drifted,
            json!({}),
        ),
        claim(
            "default-blocked",
            Some("ip-10-0-1-2.ec2.internal"),
            &drifted,
            json!({}),
        ),
        claim(
            "default-empty",
            Some("ip-10-0-1-4.ec2.internal"),
            &drifted,
            json!({}),
        ),
        claim(
            "default-fresh",
            Some("ip-10-0-1-5.ec2.internal"),
            &drifted[..4],
            json!({}),
        ),
    ];
    let busy = "ip-10-0-1-1.ec2.internal";
    let pods = vec![
        pod(
            "shop",
            "web-0",
            busy,
            json!({"spec": {"terminationGracePeriodSeconds": 45}}),
        ),
        pod("shop", "web-1", busy, json!({})),
        pod(
            "kube-system",
            "agent-1",
            busy,
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1",
                "kind": "DaemonSet", "name": "agent", "uid": "u1", "controller": true}]}}),
        ),
        pod(
            "shop",
            "cart-0",
            "ip-10-0-1-2.ec2.internal",
            json!({"metadata": {"labels": {"app": "cart"}}}),
        ),
    ];
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"namespace": "shop", "name": "cart"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "cart"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
                   "expectedPods": 1},
    }))
    .expect("valid PodDisruptionBudget");
    Objects {
        claims: claims.into_iter().map(Arc::new).collect(),
        pods: pods.into_iter().map(Arc::new).collect(),
        pdbs: vec![Arc::new(pdb)],
    }
}

/// What the planner reads besides the NodePool.
pub struct Objects {
    /// The NodePool's NodeClaims.
    pub claims: Vec<Arc<NodeClaim>>,
    /// Every pod.
    pub pods: Vec<Arc<Pod>>,
    /// Every PodDisruptionBudget.
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
}

/// The status of [`pool`] over [`objects`] at [`now`].
pub fn status() -> PoolStatus {
    let o = objects();
    PoolStatus::of(&pool(), &o.claims, &o.pods, &o.pdbs, now())
}
