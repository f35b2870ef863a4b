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
    let allocatable = crate::snapshot::node_allocatable(node);
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
    use testutil::{NodeBuilder, nodeclaim};

    /// A NodeClaim requesting a cpu and a GPU, with the startup taint `agent:NoSchedule`.
    fn claim() -> NodeClaim {
        nodeclaim("c")
            .startup_taint("agent:NoSchedule")
            .request("cpu", "1")
            .request("nvidia.com/gpu", "1")
            .build()
    }

    /// The Node `n`, `Ready` = `ready`, with 4 cpus and `gpus` GPUs allocatable.
    fn node(ready: &str, gpus: &str) -> NodeBuilder {
        testutil::node("n")
            .ready(ready)
            .allocatable("cpu", "4")
            .allocatable("nvidia.com/gpu", gpus)
    }

    /// A NodePool's startup taints are copied to its NodeClaims, synced onto the Node when it
    /// registers, and hold initialization until whoever owns them removes them; the NodePool's
    /// ordinary taints do not.
    #[test]
    fn a_nodepools_startup_taints_reach_the_node_and_hold_initialization_until_removed() {
        use crate::lifecycle::drift::HashVersions;
        use crate::lifecycle::registration::registration_patch;
        use crate::provisioning::template::nodeclaim as claim_for;
        use crate::scheduling::requirements::Requirements;
        use crate::scheduling::solver::NewClaim;
        use k8s_openapi::api::core::v1::Taint;

        let decision = NewClaim {
            nodepool: "agents".into(),
            requirements: Requirements::new(),
            instance_types: Vec::new(),
            fitting: Vec::new(),
            requests: Resources::default(),
            pods: Vec::new(),
            min_values_relaxed: false,
        };
        let registered = |claim: &NodeClaim| -> Node {
            let bare = testutil::node("n").ready("True").build();
            let patch = registration_patch(claim, &bare).expect("a registration patch");
            let taints: Vec<Taint> =
                serde_json::from_value(patch["spec"]["taints"].clone()).expect("taints");
            let mut node = bare;
            node.spec.get_or_insert_with(Default::default).taints = Some(taints);
            node
        };
        let pool = testutil::nodepool("agents")
            .startup_taint("example.com/agent-not-ready:NoSchedule")
            .build();
        let claim = claim_for(&pool, &decision, &HashVersions::default());
        let node = registered(&claim);
        assert_eq!(
            pending_reason(&claim, &node),
            Some((
                "StartupTaintsExist",
                "StartupTaint \"example.com/agent-not-ready:NoSchedule\" still exists".into()
            ))
        );
        let mut cleared = node;
        if let Some(spec) = cleared.spec.as_mut() {
            spec.taints = Some(Vec::new());
        }
        assert_eq!(pending_reason(&claim, &cleared), None);
        // The same taint as an ordinary template taint stays and does not hold initialization.
        let pool = testutil::nodepool("agents")
            .taint("example.com/agent-not-ready:NoSchedule")
            .build();
        let claim = claim_for(&pool, &decision, &HashVersions::default());
        assert_eq!(pending_reason(&claim, &registered(&claim)), None);
    }

    #[test]
    fn initialization_gates_in_upstream_order() {
        let c = claim();
        assert_eq!(
            pending_reason(&c, &node("False", "1").build()).map(|r| r.0),
            Some("NodeNotReady")
        );
        assert_eq!(
            pending_reason(&c, &node("True", "1").taint("agent:NoSchedule").build()).map(|r| r.0),
            Some("StartupTaintsExist")
        );
        assert_eq!(
            pending_reason(
                &c,
                &node("True", "1")
                    .taint("node.kubernetes.io/not-ready:NoSchedule")
                    .build()
            )
            .map(|r| r.0),
            Some("KnownEphemeralTaintsExist")
        );
        let missing_gpu = pending_reason(&c, &node("True", "0").build()).expect("not initialized");
        assert_eq!(
            missing_gpu,
            (
                "ResourceNotRegistered",
                "Resource \"nvidia.com/gpu\" was requested but not registered".into()
            )
        );
        assert_eq!(pending_reason(&c, &node("True", "1").build()), None);
    }
}
