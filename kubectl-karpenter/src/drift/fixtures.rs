//! Test builders for `drift explain`: a NodePool, an EC2NodeClass with a resolved AMI, and
//! launched NodeClaims stamped from them the way the controller stamps them.

use crds::hash::{nodeclass_fields, nodeclass_stamp, nodepool_fields, nodepool_stamp};
use crds::{EC2NodeClass, NodeClaim, NodePool};
use karpenter_core::lifecycle::drift::{Finding, HashVersions, Verdict};
use serde_json::{Value, json};

/// The AMI the node class resolves and NodeClaims were launched from.
pub const AMI: &str = "ami-0aaa";

/// The `default` NodePool, with `taints` in its template.
pub fn pool(taints: Value) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {
            "metadata": {"labels": {"team": "web"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                ],
                "taints": taints,
            },
        }},
    }))
    .expect("valid NodePool")
}

/// The taint added to the NodePool after stamping in the drift tests.
pub fn gpu_taint() -> Value {
    json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
}

/// The `default` EC2NodeClass, resolving [`AMI`].
pub fn class() -> EC2NodeClass {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
        },
        "status": {
            "subnets": [{"id": "subnet-a", "zone": "us-east-1a"}],
            "securityGroups": [{"id": "sg-1"}],
            "amis": [{"id": AMI, "name": "al2023-x86_64", "requirements": []}],
        },
    }))
    .expect("valid EC2NodeClass")
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
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {
                "karpenter.sh/nodepool": "default", "team": "web",
                "karpenter.sh/capacity-type": "on-demand",
                "node.kubernetes.io/instance-type": "m5.large",
            },
            "annotations": annotations,
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [],
        },
        "status": {
            "providerID": format!("aws:///us-east-1a/i-{name}"),
            "nodeName": format!("ip-{name}.ec2.internal"),
            "imageID": AMI,
            "conditions": [{"type": "Launched", "status": "True", "reason": "Launched",
                            "message": "", "lastTransitionTime": "2025-06-01T06:00:00Z"}],
        },
    }))
    .expect("valid NodeClaim")
}

/// Sets `Drifted=True` as the controller writes it for `findings`, at 11:55.
pub fn mark_drifted(claim: &mut NodeClaim, findings: &[Finding]) {
    let reason = findings.first().map(|f| f.reason).unwrap_or_default();
    let condition = serde_json::from_value(json!({
        "type": "Drifted", "status": "True", "reason": reason,
        "message": Verdict::message(findings),
        "lastTransitionTime": "2025-06-01T11:55:00Z",
    }))
    .expect("valid condition");
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
