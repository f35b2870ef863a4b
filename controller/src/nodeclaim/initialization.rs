//! Initialization (upstream `lifecycle/initialization.go`): a registered node is initialized once
//! it is Ready, its startup taints and known ephemeral taints are gone, and every resource the
//! NodeClaim requested is registered in its allocatable (e.g. GPUs from a device plugin). Then
//! the node gets `karpenter.sh/initialized=true`.

use crds::conditions::INITIALIZED;
use crds::labels::NODE_INITIALIZED_LABEL;
use crds::{NodeClaim, StatusConditions};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::runtime::Context;
use crate::runtime::events::{EventType, reason};
use crate::runtime::reconcile::ReconcileError;
use karpenter_core::lifecycle::initialization::pending_reason;

/// Mark the NodeClaim Initialized when its node is ready for pods.
///
/// Errors: the node label patch failed.
pub async fn initialize(ctx: &Context, claim: &mut NodeClaim) -> Result<(), ReconcileError> {
    let now = ctx.clock.now();
    let nodes = ctx.state.nodes_for_claim(claim);
    let [node] = nodes.as_slice() else {
        claim.condition_set(now).set_unknown_with_reason(
            INITIALIZED,
            "NodeNotFound",
            "Node not registered with cluster",
        );
        return Ok(());
    };
    if let Some((reason, message)) = pending_reason(claim, node) {
        claim
            .condition_set(now)
            .set_unknown_with_reason(INITIALIZED, reason, &message);
        return Ok(());
    }
    let labelled = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(NODE_INITIALIZED_LABEL))
        .map(String::as_str)
        == Some("true");
    if !labelled {
        let api: Api<Node> = Api::all(ctx.client.clone());
        let name = node.metadata.name.clone().unwrap_or_default();
        let patch = json!({"metadata": {"labels": {NODE_INITIALIZED_LABEL: "true"}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    claim.condition_set(now).set_true(INITIALIZED);
    let uid = claim.metadata.uid.as_deref().unwrap_or_default();
    if !ctx
        .state
        .lifecycle_memory()
        .first_announcement(uid, INITIALIZED, now)
    {
        return Ok(());
    }
    ctx.recorder.about(
        claim,
        EventType::Normal,
        reason::INITIALIZED,
        format!(
            "Node {} is initialized",
            node.metadata.name.as_deref().unwrap_or("")
        ),
    );
    tracing::info!(nodeclaim = %claim.metadata.name.as_deref().unwrap_or_default(), node = %node.metadata.name.as_deref().unwrap_or_default(), "initialized nodeclaim");
    Ok(())
}
