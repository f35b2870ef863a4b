//! Launch (upstream `lifecycle/launch.go`): ask the cloud for an instance, copy providerID,
//! image, capacity and allocatable onto the NodeClaim and its resolved labels onto its metadata.
//! Capacity and node-class errors delete the NodeClaim so its pods are provisioned again.

use crds::conditions::LAUNCHED;
use crds::{NodeClaim, StatusConditions};
use serde_json::json;

use super::writes::{delete_claim, patch_metadata};
use crate::runtime::Context;
use crate::runtime::events::{DEFAULT_DEDUPE, EventSpec, EventType, reason, reference};
use crate::runtime::reconcile::ReconcileError;
use karpenter_core::cloud::CloudError;
use karpenter_core::lifecycle::stamp::launch_stamp;

/// What a launch attempt led to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The instance exists; the NodeClaim's status now says so.
    Launched,
    /// The NodeClaim was deleted (capacity or node class problem).
    Deleted,
    /// Retry later; `Launched` is Unknown with the reason.
    Retry,
}

/// Upstream truncates launch failure messages on the condition to this many characters.
const MAX_MESSAGE: usize = 300;

/// Launch the instance for a NodeClaim that is not Launched yet.
///
/// Errors: API failures writing labels or deleting the NodeClaim.
pub async fn launch(ctx: &Context, claim: &mut NodeClaim) -> Result<Outcome, ReconcileError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let class_name = claim.spec.node_class_ref.name.clone();
    let node_class = ctx
        .state
        .nodeclasses
        .state()
        .into_iter()
        .find(|nc| nc.metadata.name.as_deref() == Some(class_name.as_str()));
    let result = match &node_class {
        Some(nc) => ctx.cloud.create(claim, nc).await,
        None => Err(CloudError::NodeClassNotReady(format!(
            "{} {class_name:?} not found",
            claim.spec.node_class_ref.kind
        ))),
    };
    let now = ctx.clock.now();
    match result {
        Ok(launched) => {
            let mut labels = launched.labels.clone();
            labels.extend(claim.metadata.labels.clone().unwrap_or_default());
            // Only the launch's own annotations are written (a merge patch), so a concurrent
            // writer's annotations are kept.
            let stamp = node_class
                .as_ref()
                .map(|nc| launch_stamp(nc, &launched.image_id, &ctx.settings.hash_versions))
                .unwrap_or_default();
            let mut annotations = claim.metadata.annotations.clone().unwrap_or_default();
            annotations.extend(stamp.clone());
            if claim.metadata.labels.as_ref() != Some(&labels)
                || claim.metadata.annotations.as_ref() != Some(&annotations)
            {
                claim.metadata.resource_version =
                    patch_metadata(ctx, &name, json!({"labels": labels, "annotations": stamp}))
                        .await?;
            }
            claim.metadata.labels = Some(labels);
            claim.metadata.annotations = Some(annotations);
            let status = claim.status.get_or_insert_with(Default::default);
            status.provider_id = Some(launched.provider_id.clone());
            status.image_id = Some(launched.image_id.clone());
            status.capacity = launched.capacity.to_list();
            status.allocatable = launched.allocatable.to_list();
            claim.condition_set(now).set_true(LAUNCHED);
            let label = |k: &str| launched.labels.get(k).map(String::as_str).unwrap_or("");
            ctx.recorder.about(
                claim,
                EventType::Normal,
                reason::LAUNCHED,
                format!(
                    "Launched instance {}: {} {} in {}",
                    launched.provider_id,
                    label(crds::labels::INSTANCE_TYPE_LABEL),
                    label(crds::labels::CAPACITY_TYPE_LABEL),
                    label(crds::labels::TOPOLOGY_ZONE_LABEL)
                ),
            );
            for warning in &launched.warnings {
                ctx.recorder.publish(EventSpec {
                    regarding: reference(claim),
                    type_: EventType::Warning,
                    reason: reason::LAUNCH_FAILED,
                    message: truncate(&format!("launched after offering errors: {warning}")),
                    dedupe: DEFAULT_DEDUPE,
                });
            }
            tracing::info!(nodeclaim = %name, provider_id = %launched.provider_id,
                instance_type = launched.labels.get(crds::labels::INSTANCE_TYPE_LABEL).map(String::as_str).unwrap_or(""),
                zone = launched.labels.get(crds::labels::TOPOLOGY_ZONE_LABEL).map(String::as_str).unwrap_or(""),
                capacity_type = launched.labels.get(crds::labels::CAPACITY_TYPE_LABEL).map(String::as_str).unwrap_or(""),
                "launched nodeclaim");
            Ok(Outcome::Launched)
        }
        Err(e @ (CloudError::InsufficientCapacity(_) | CloudError::NodeClassNotReady(_))) => {
            let reason = if matches!(e, CloudError::InsufficientCapacity(_)) {
                reason::INSUFFICIENT_CAPACITY_ERROR
            } else {
                reason::NODE_CLASS_NOT_READY
            };
            ctx.recorder.publish(EventSpec {
                regarding: reference(claim),
                type_: EventType::Warning,
                reason,
                message: format!("NodeClaim {name} event: {e}"),
                dedupe: DEFAULT_DEDUPE,
            });
            tracing::info!(nodeclaim = %name, error = %e, "deleting nodeclaim that could not launch");
            delete_claim(ctx, &name).await?;
            ctx.metrics
                .nodeclaim_disrupted(claim, launch_failure_reason(&e), &ctx.state);
            Ok(Outcome::Deleted)
        }
        Err(CloudError::Create { reason, message }) => {
            claim.condition_set(now).set_unknown_with_reason(
                LAUNCHED,
                &reason,
                &truncate(&message),
            );
            Ok(Outcome::Retry)
        }
        Err(e) => {
            ctx.recorder.publish(EventSpec {
                regarding: reference(claim),
                type_: EventType::Warning,
                reason: reason::LAUNCH_FAILED,
                message: truncate(&e.to_string()),
                dedupe: DEFAULT_DEDUPE,
            });
            claim.condition_set(now).set_unknown_with_reason(
                LAUNCHED,
                "LaunchFailed",
                &truncate(&e.to_string()),
            );
            Ok(Outcome::Retry)
        }
    }
}

/// The disruption metric reason of a NodeClaim deleted because it could not launch.
fn launch_failure_reason(e: &CloudError) -> &'static str {
    match e {
        CloudError::InsufficientCapacity(_) => {
            crate::runtime::metrics::reason::INSUFFICIENT_CAPACITY
        }
        _ => crate::runtime::metrics::reason::NODECLASS_NOT_READY,
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(MAX_MESSAGE).collect()
}
