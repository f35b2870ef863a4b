//! The NodeClaim termination finalizer (upstream `lifecycle/controller.go` finalize): delete the
//! NodeClaim's node and wait for it (the node's own finalizer drains it), then terminate the
//! instance and wait until the cloud reports it gone, then release the finalizer.

use std::time::Duration;

use crds::conditions::INSTANCE_TERMINATING;
use crds::labels::TERMINATION_FINALIZER;
use crds::{NodeClaim, StatusConditions};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;

use super::lifecycle::patch_metadata;
use crate::cloudprovider::CloudError;
use crate::operator::Context;
use crate::operator::reconcile::ReconcileError;

/// Run the finalizer of a deleting NodeClaim.
///
/// Errors: API or cloud failures (retried).
pub async fn finalize(ctx: &Context, claim: &NodeClaim) -> Result<Action, ReconcileError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
    if !finalizers.iter().any(|f| f == TERMINATION_FINALIZER) {
        return Ok(Action::await_change());
    }
    let nodes = ctx.state.nodes_for_claim(claim);
    if !nodes.is_empty() {
        let api: Api<Node> = Api::all(ctx.client.clone());
        for node in nodes
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
        {
            let node_name = node.metadata.name.clone().unwrap_or_default();
            match api.delete(&node_name, &DeleteParams::default()).await {
                Ok(_) => tracing::info!(nodeclaim = %name, node = %node_name, "deleted node"),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    match ctx.cloud.delete(claim).await {
        Ok(()) => {
            let mut updated = claim.clone();
            if updated
                .condition_set(ctx.clock.now())
                .set_true(INSTANCE_TERMINATING)
            {
                let api: Api<NodeClaim> = Api::all(ctx.client.clone());
                api.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": updated.status})),
                )
                .await?;
            }
            Ok(Action::requeue(Duration::from_millis(500)))
        }
        Err(CloudError::NodeClaimNotFound(_)) => {
            let remaining: Vec<String> = finalizers
                .into_iter()
                .filter(|f| f != TERMINATION_FINALIZER)
                .collect();
            patch_metadata(ctx, &name, json!({"finalizers": remaining})).await?;
            tracing::info!(nodeclaim = %name, "deleted nodeclaim");
            Ok(Action::await_change())
        }
        Err(e) => Err(e.into()),
    }
}
