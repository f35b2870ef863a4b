//! The volume-detachment step of node termination (upstream
//! `node/termination/volumedetachment.go`): between `Drained=True` and the instance's
//! termination, say on the NodeClaim's `VolumesDetached` condition whether the node's
//! VolumeAttachments are gone ([`karpenter_core::lifecycle::volume_detachment`] decides), and
//! hold the termination while they are not. The node termination controller is triggered by
//! VolumeAttachment changes, so a detachment is acted on when the cache sees it go.

use std::sync::Arc;
use std::time::Duration;

use crds::conditions::reason::{AWAITING_VOLUME_DETACHMENT, TERMINATION_GRACE_PERIOD_ELAPSED};
use crds::conditions::{self, VOLUMES_DETACHED};
use crds::{NodeClaim, StatusConditions};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_core::lifecycle::volume_detachment::{Detachment, detachment};
use karpenter_core::pod_view::PodView;
use kube::runtime::controller::Action;

use crate::nodeclaim::writes::set_condition;
use crate::runtime::Context;
use crate::runtime::events::{DEFAULT_DEDUPE, EventSpec, EventType, reason, reference};
use crate::runtime::reconcile::ReconcileError;

/// How often a node whose volumes are still attached is looked at again, besides the
/// VolumeAttachment changes that trigger it (upstream's requeue).
pub const DETACH_POLL: Duration = Duration::from_secs(5);
/// How soon after its condition changed the termination goes on (the next reconcile reads the
/// NodeClaim as written).
const AFTER_WRITE: Duration = Duration::from_millis(100);

/// Hold a drained node's termination while its volumes are attached: `Some(action)` to stop this
/// reconcile there, `None` to go on and terminate the instance. `pods` are the pods bound to
/// the node; `termination_time` is the NodeClaim's termination timestamp. Writes only the
/// NodeClaim's `VolumesDetached` condition, and Events while it waits.
///
/// Errors: the condition could not be written (a conflict retries on the fresh NodeClaim).
pub async fn hold(
    ctx: &Context,
    node: &Node,
    claim: &NodeClaim,
    pods: &[Arc<PodView>],
    now: Timestamp,
    termination_time: Option<Timestamp>,
) -> Result<Option<Action>, ReconcileError> {
    if conditions::is_true(claim.status_conditions(), VOLUMES_DETACHED) {
        return Ok(None);
    }
    // An attachment the cache has not listed yet must not read as detached.
    if ctx.state.wait_synced().await.is_err() {
        return Ok(Some(Action::requeue(DETACH_POLL)));
    }
    let node_name = node.metadata.name.as_deref().unwrap_or_default();
    let decision = detachment(
        node_name,
        &ctx.state.volume_attachments.state(),
        pods,
        &ctx.state.pvcs.state(),
        now,
        termination_time,
    );
    match decision {
        Detachment::Detached => {
            let changed = set_condition(ctx, claim, |set| set.set_true(VOLUMES_DETACHED)).await?;
            Ok(changed.then(|| Action::requeue(AFTER_WRITE)))
        }
        Detachment::GracePeriodElapsed => {
            let changed = set_condition(ctx, claim, |set| {
                set.set_false(
                    VOLUMES_DETACHED,
                    TERMINATION_GRACE_PERIOD_ELAPSED,
                    "The termination grace period elapsed before the node's volumes detached",
                )
            })
            .await?;
            Ok(changed.then(|| Action::requeue(AFTER_WRITE)))
        }
        Detachment::Awaiting(volumes) => {
            let message = format!(
                "Awaiting deletion of VolumeAttachments of node {node_name} for volumes {}",
                volumes.join(", ")
            );
            set_condition(ctx, claim, |set| {
                set.set_unknown_with_reason(VOLUMES_DETACHED, AWAITING_VOLUME_DETACHMENT, &message)
            })
            .await?;
            ctx.recorder.publish(EventSpec {
                regarding: reference(node),
                type_: EventType::Normal,
                reason: reason::AWAITING_VOLUME_DETACHMENT,
                message: message.clone(),
                dedupe: DEFAULT_DEDUPE,
            });
            ctx.recorder.about(
                claim,
                EventType::Normal,
                reason::AWAITING_VOLUME_DETACHMENT,
                message,
            );
            tracing::info!(node = %node_name, volumes = ?volumes, "awaiting volume detachment");
            Ok(Some(Action::requeue(DETACH_POLL)))
        }
    }
}

#[cfg(test)]
#[path = "volume_detachment_tests.rs"]
mod tests;
