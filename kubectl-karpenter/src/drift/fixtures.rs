//! Test builders for `drift explain`: a NodePool, an EC2NodeClass with a resolved AMI, and
//! launched NodeClaims stamped from them the way the controller stamps them.

use crds::hash::{nodeclass_fields, nodeclass_stamp, nodepool_fields, nodepool_stamp};
use crds::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL};
use crds::{EC2NodeClass, NodeClaim, NodePool, Operator};
use karpenter_core::lifecycle::drift::{Finding, HashVersions, Verdict};
use serde_json::{Value, json};
use testutil::{condition, ec2nodeclass, nodeclaim, nodepool};

/// The AMI the node class resolves and NodeClaims were launched from.
pub const AMI: &str = "ami-0aaa";

/// The `default` NodePool (template label `team: web`, spot or on-demand), with `taints` (a
/// JSON array) in its template.
pub fn pool(taints: Value) -> NodePool {
    nodepool("default")
        .template_label("team", "web")
        .requirement(CAPACITY_TYPE_LABEL, Operator::In, ["spot", "on-demand"])
        .merge(json!({"spec": {"template": {"spec": {"taints": taints}}}}))
        .build()
}

/// The taint added to the NodePool after stamping in the drift tests.
pub fn gpu_taint() -> Value {
    json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
}

/// The `default` EC2NodeClass (role `KarpenterNodeRole`, discovery tag `c`), resolving [`AMI`]
/// in `us-east-1a`.
pub fn class() -> EC2NodeClass {
    ec2nodeclass("default")
        .role("KarpenterNodeRole")
        .discovery("c")
        .merge(json!({"status": {
            "subnets": [{"id": "subnet-a", "zone": "us-east-1a"}],
            "securityGroups": [{"id": "sg-1"}],
            "amis": [{"id": AMI, "name": "al2023-x86_64", "requirements": []}],
        }}))
        .build()
}

/// A launched and registered NodeClaim of `default`, stamped from `pool` and `class` under the
/// controller's versions.
pub fn claim(name: &str, pool: &NodePool, class: &EC2NodeClass) -> NodeClaim {
    let versions = HashVersions::default();
    let mut annotations = nodepool_stamp(&nodepool_fields(pool), &versions.nodepool);
    annotations.extend(nodeclass_stamp(
        &nodeclass_fields(class),
        &versions.nodeclass,
    ));
    nodeclaim(name)
        .nodepool("default")
        .labels([
            ("team", "web"),
            (CAPACITY_TYPE_LABEL, "on-demand"),
            (INSTANCE_TYPE_LABEL, "m5.large"),
        ])
        .annotations(annotations)
        .provider_id(format!("aws:///us-east-1a/i-{name}"))
        .node_name(format!("ip-{name}.ec2.internal"))
        .image_id(AMI)
        .with_condition(condition("Launched", "True").at("2025-06-01T06:00:00Z"))
        .build()
}

/// Sets `Drifted=True` as the controller writes it for `findings`, at 11:55.
pub fn mark_drifted(claim: &mut NodeClaim, findings: &[Finding]) {
    let reason = findings.first().map(|f| f.reason).unwrap_or_default();
    let condition = condition("Drifted", "True")
        .reason(reason)
        .message(Verdict::message(findings))
        .at("2025-06-01T11:55:00Z");
    let condition = serde_json::from_value(condition.json()).expect("valid condition");
    claim
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .push(condition);
}

/// Replaces the stamps with upstream Karpenter's (versions `v3` and `v6`, no snapshots).
pub fn stamp_upstream(claim: &mut NodeClaim) {
    let annotations = claim
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.clear();
    for (k, v) in [
        ("karpenter.sh/nodepool-hash", "6821555240594823858"),
        ("karpenter.sh/nodepool-hash-version", "v3"),
        ("karpenter.k8s.aws/ec2nodeclass-hash", "4929514813234187212"),
        ("karpenter.k8s.aws/ec2nodeclass-hash-version", "v6"),
    ] {
        annotations.insert(k.into(), v.into());
    }
}
