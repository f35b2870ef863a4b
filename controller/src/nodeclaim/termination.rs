//! The NodeClaim termination finalizer (upstream `lifecycle/controller.go` finalize): stamp the
//! termination time when the NodeClaim has a `terminationGracePeriod`, delete the NodeClaim's
//! node and wait for it (the node's own finalizer drains it), then terminate the instance and
//! wait until the cloud reports it gone, then record the removal in the disruption history
//! ([`super::history::record_removal`]) and release the finalizer.

use std::time::Duration;

use crds::NodeClaim;
use crds::conditions::INSTANCE_TERMINATING;
use crds::labels::{NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION, TERMINATION_FINALIZER};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::DeleteParams;
use kube::runtime::controller::Action;
use serde_json::json;

use super::writes::{patch_metadata, set_condition};
use crate::runtime::Context;
use crate::runtime::events::{EventType, reason};
use crate::runtime::reconcile::ReconcileError;
use karpenter_core::cloud::CloudError;
use karpenter_core::lifecycle::termination::termination_deadline;

/// How often a terminating instance is polled until the cloud reports it gone.
pub const INSTANCE_POLL: Duration = Duration::from_secs(2);

/// Run the finalizer of a deleting NodeClaim.
///
/// Errors: API or cloud failures (retried).
pub async fn finalize(ctx: &Context, claim: &NodeClaim) -> Result<Action, ReconcileError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
    if !finalizers.iter().any(|f| f == TERMINATION_FINALIZER) {
        return Ok(Action::await_change());
    }
    let stamped = claim
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION));
    if !stamped && let Some(deadline) = termination_deadline(claim) {
        let at = deadline.to_string();
        patch_metadata(
            ctx,
            &name,
            json!({"resourceVersion": claim.metadata.resource_version,
                "annotations": {NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION: at}}),
        )
        .await?;
        ctx.recorder.about(
            claim,
            EventType::Normal,
            reason::TERMINATION_GRACE_PERIOD_EXPIRING,
            format!("All pods will be deleted by {at}"),
        );
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
                Ok(_) => tracing::info!(nodeclaim = %name, node = %node_name, "deleting node"),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    match ctx.cloud.delete(claim).await {
        Ok(()) => {
            if set_condition(ctx, claim, |set| set.set_true(INSTANCE_TERMINATING)).await? {
                let id = claim
                    .status
                    .as_ref()
                    .and_then(|s| s.provider_id.clone())
                    .unwrap_or_default();
                ctx.recorder.about(
                    claim,
                    EventType::Normal,
                    reason::INSTANCE_TERMINATING,
                    format!("Terminating instance {id}"),
                );
            }
            Ok(Action::requeue(INSTANCE_POLL))
        }
        Err(CloudError::NodeClaimNotFound(_)) => {
            // Recorded before the finalizer goes (a record is written at most once, by uid):
            // a failure that may pass holds the finalizer for another try; one that cannot
            // (no RBAC, no namespace) is logged and never blocks the termination.
            if let Err(e) = super::history::record_removal(ctx, claim).await {
                if super::history::retryable(&e) {
                    return Err(e.into());
                }
                tracing::warn!(nodeclaim = %name, error = %e, "disruption history not written");
            }
            let remaining: Vec<String> = finalizers
                .into_iter()
                .filter(|f| f != TERMINATION_FINALIZER)
                .collect();
            patch_metadata(
                ctx,
                &name,
                json!({"resourceVersion": claim.metadata.resource_version, "finalizers": remaining}),
            )
            .await?;
            ctx.metrics.nodeclaim_terminated(claim);
            tracing::info!(nodeclaim = %name, "deleted nodeclaim");
            Ok(Action::await_change())
        }
        Err(e) => Err(e.into()),
    }
}
