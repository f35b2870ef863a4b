//! The builders' defaults build, setters land where the API has the field, and `merge` follows
//! RFC 7386.

use crds::Operator;
use serde_json::json;

use super::*;

#[test]
fn merge_follows_rfc_7386() {
    let mut target = json!({"a": {"b": 1, "c": 2}, "list": [1, 2], "keep": true});
    merge(
        &mut target,
        json!({"a": {"b": 3, "c": null, "d": {"e": 4}}, "list": [9], "new": "x"}),
    );
    assert_eq!(
        target,
        json!({"a": {"b": 3, "d": {"e": 4}}, "list": [9], "keep": true, "new": "x"})
    );
    let mut scalar = json!(1);
    merge(&mut scalar, json!({"a": null, "b": 2}));
    assert_eq!(scalar, json!({"b": 2}));
}

#[test]
fn defaults_are_minimal_valid_objects() {
    assert_eq!(
        pod("p").json(),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "default"},
               "spec": {"containers": [{"name": "c"}]}})
    );
    let p = pod("p").build();
    assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
    assert!(p.status.is_none() && p.metadata.uid.is_none());
    assert!(node("n").build().status.is_none());
    let pool = nodepool("default").build();
    assert_eq!(pool.spec.template.spec.node_class_ref.name, "default");
    assert!(pool.status.is_none() && pool.metadata.labels.is_none());
    let claim = nodeclaim("c").build();
    assert_eq!(claim.spec.node_class_ref.kind, "EC2NodeClass");
    assert!(claim.metadata.labels.is_none() && claim.status.is_none());
    let class = ec2nodeclass("default").build();
    assert_eq!(class.spec.role.as_deref(), Some("r"));
    let budget = pdb("cart").build();
    assert_eq!(
        budget
            .spec
            .and_then(|s| s.selector)
            .and_then(|s| s.match_labels),
        Some([("app".to_string(), "cart".to_string())].into())
    );
}

#[test]
fn setters_write_the_api_fields() {
    let p = pod("web-1")
        .namespace("shop")
        .cpu("100m")
        .memory("128Mi")
        .on_node("n1")
        .label("app", "web")
        .owner("apps/v1", "DaemonSet", "agent", "u")
        .do_not_disrupt()
        .unschedulable()
        .json();
    assert_eq!(
        p["spec"]["containers"][0]["resources"]["requests"],
        json!({"cpu": "100m", "memory": "128Mi"})
    );
    assert_eq!(p["spec"]["nodeName"], "n1");
    assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        p["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"],
        "true"
    );
    assert_eq!(
        p["status"],
        json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]})
    );

    let pool = nodepool("default")
        .requirement("karpenter.sh/capacity-type", Operator::In, ["spot"])
        .taint("dedicated=gpu:NoSchedule")
        .taint("agent:NoExecute")
        .json();
    assert_eq!(
        pool["spec"]["template"]["spec"]["requirements"],
        json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}])
    );
    assert_eq!(
        pool["spec"]["template"]["spec"]["taints"],
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
               {"key": "agent", "effect": "NoExecute"}])
    );

    let claim = nodeclaim("default-abc")
        .nodepool("default")
        .provider_id("aws:///us-east-1a/i-1")
        .condition("Launched", "True")
        .with_condition(
            condition("Drifted", "True")
                .reason("NodePoolDrifted")
                .at("2026-01-01T01:00:00Z"),
        )
        .build();
    assert_eq!(
        claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("karpenter.sh/nodepool"))
            .map(String::as_str),
        Some("default")
    );
    let status = claim.status.expect("status");
    assert_eq!(status.provider_id.as_deref(), Some("aws:///us-east-1a/i-1"));
    assert_eq!(status.conditions.len(), 2);
    assert_eq!(status.conditions[0].reason, "Launched");
    assert_eq!(status.conditions[1].reason, "NodePoolDrifted");
}

#[test]
fn empty_label_and_annotation_sets_exist() {
    let none: [(&str, &str); 0] = [];
    let n = node("n").labels(none).annotations(none).build();
    assert_eq!(n.metadata.labels, Some(Default::default()));
    assert_eq!(n.metadata.annotations, Some(Default::default()));
}
