//! Initialization as a predicate (upstream `lifecycle/initialization.go`): a registered node is
//! initialized once it is Ready, its startup taints and known ephemeral taints are gone, and
//! every resource the NodeClaim requested is registered in its allocatable (e.g. GPUs from a
//! device plugin). The controller labels it (`controller::nodeclaim::initialization`).

use crds::NodeClaim;
use crds::labels::is_known_ephemeral_taint;
use k8s_openapi::api::core::v1::Node;

use crate::scheduling::resources::Resources;
use crate::scheduling::taints::taint_string;

/// Why the node is not initialized yet (condition reason and message), or `None` if it is.
pub fn pending_reason(claim: &NodeClaim, node: &Node) -> Option<(&'static str, String)> {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if !ready {
        return Some(("NodeNotReady", "Node status is NotReady".into()));
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if let Some(t) = taints.iter().find(|t| {
        claim
            .spec
            .startup_taints
            .iter()
            .any(|s| s.key == t.key && s.effect == t.effect)
    }) {
        return Some((
            "StartupTaintsExist",
            format!("StartupTaint {:?} still exists", taint_string(t)),
        ));
    }
    if let Some(t) = taints.iter().find(|t| is_known_ephemeral_taint(t)) {
        return Some((
            "KnownEphemeralTaintsExist",
            format!("KnownEphemeralTaint {:?} still exists", taint_string(t)),
        ));
    }
    let requested = Resources::from_list(&claim.spec.resources.requests).unwrap_or_default();
    let allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| Resources::from_list(a).ok())
        .unwrap_or_default();
    if let Some((name, _)) = requested
        .iter()
        .find(|(name, _)| allocatable.get(name) == 0)
    {
        return Some((
            "ResourceNotRegistered",
            format!("Resource {name:?} was requested but not registered"),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim() -> NodeClaim {
        serde_json::from_value(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "startupTaints": [{"key": "agent", "effect": "NoSchedule"}],
                "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}}))
        .expect("claim")
    }

    fn node(ready: &str, taints: serde_json::Value, gpus: &str) -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": "n"}, "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready}],
                "allocatable": {"cpu": "4", "nvidia.com/gpu": gpus}}}),
        )
        .expect("node")
    }

    #[test]
    fn initialization_gates_in_upstream_order() {
        let c = claim();
        assert_eq!(
            pending_reason(&c, &node("False", json!([]), "1")).map(|r| r.0),
            Some("NodeNotReady")
        );
        assert_eq!(
            pending_reason(
                &c,
                &node(
                    "True",
                    json!([{"key": "agent", "effect": "NoSchedule"}]),
                    "1"
                )
            )
            .map(|r| r.0),
            Some("StartupTaintsExist")
        );
        assert_eq!(
            pending_reason(
                &c,
                &node(
                    "True",
                    json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]),
                    "1"
                )
            )
            .map(|r| r.0),
            Some("KnownEphemeralTaintsExist")
        );
        let missing_gpu =
            pending_reason(&c, &node("True", json!([]), "0")).expect("not initialized");
        assert_eq!(
            missing_gpu,
            (
                "ResourceNotRegistered",
                "Resource \"nvidia.com/gpu\" was requested but not registered".into()
            )
        );
        assert_eq!(pending_reason(&c, &node("True", json!([]), "1")), None);
    }
}
