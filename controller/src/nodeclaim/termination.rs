//! The NodeClaim termination finalizer (upstream `lifecycle/controller.go` finalize): stamp the
//! termination time when the NodeClaim has a `terminationGracePeriod`, delete the NodeClaim's
//! node and wait for it (the node's own finalizer drains it), then terminate the instance and
//! wait until the cloud reports it gone, then release the finalizer.

use std::time::Duration;

use crds::NodeClaim;
use crds::conditions::INSTANCE_TERMINATING;
use crds::labels::{NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION, TERMINATION_FINALIZER};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::DeleteParams;
use kube::runtime::controller::Action;
use serde_json::json;

use super::lifecycle::patch_metadata;
use super::lifecycle::set_condition;
use crate::cloudprovider::CloudError;
use crate::operator::Context;
use crate::operator::events::{EventType, reason};
use crate::operator::reconcile::ReconcileError;

/// How often a terminating instance is polled until the cloud reports it gone.
pub const INSTANCE_POLL: Duration = Duration::from_secs(2);

/// When a deleting NodeClaim must be gone: its deletion time plus its `terminationGracePeriod`
/// (upstream's `karpenter.sh/nodeclaim-termination-timestamp`). `None` without a grace period
/// (the drain then waits for as long as PDBs and do-not-disrupt pods make it).
pub fn termination_deadline(claim: &NodeClaim) -> Option<Timestamp> {
    let deleted = claim.metadata.deletion_timestamp.as_ref()?.0;
    let grace = claim.spec.termination_grace_period.as_ref()?.duration();
    deleted
        .checked_add(SignedDuration::try_from(grace).ok()?)
        .ok()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_is_deletion_plus_the_grace_period() {
        let mut claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"requirements": [], "terminationGracePeriod": "1h30m",
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}))
        .expect("claim");
        assert_eq!(
            termination_deadline(&claim),
            Some("2026-01-01T01:30:00Z".parse().expect("timestamp"))
        );
        claim.spec.termination_grace_period = None;
        assert_eq!(termination_deadline(&claim), None);
    }
}
