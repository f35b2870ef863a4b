//! Nodes in capacity reservations that end (upstream's AWS `capacityreservation.capacitytype`
//! and `capacityreservation.expiration` controllers, one singleton here): every minute, with
//! the `ReservedCapacity` gate on, list the cloud's instances and describe the reservations the
//! NodeClaims are labelled with, then act on [`karpenter_core::lifecycle::reservations::decide`]:
//!
//! - a NodeClaim (and its registered Node) labelled `reserved` whose instance now runs as
//!   on-demand is relabelled `karpenter.sh/capacity-type: on-demand` and loses
//!   `karpenter.k8s.aws/capacity-reservation-id`, with a `CapacityReservationEnded` Event;
//! - a NodeClaim in a Capacity Block within 40 minutes of its end is deleted (reason
//!   `CapacityBlockExpiring` in its `DisruptionReason` condition and Event): its node drains
//!   and its pods are provisioned elsewhere before EC2 reclaims the instance.

use std::sync::Arc;
use std::time::Duration;

use crds::NodeClaim;
use crds::labels::{
    CAPACITY_RESERVATION_ID_LABEL, CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED, NODE_REGISTERED_LABEL,
};
use k8s_openapi::api::core::v1::Node;
use karpenter_core::cloud::CloudError;
use karpenter_core::lifecycle::reservations::{self, Changes};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::writes;
use crate::runtime::Context;
use crate::runtime::events::{DEFAULT_DEDUPE, EventSpec, EventType, reason, reference};

/// How often a pass runs (upstream: a singleton requeued every minute).
pub const PERIOD: Duration = Duration::from_secs(60);

/// Run until the task is aborted.
pub async fn run(ctx: Arc<Context>) {
    if ctx.state.wait_synced().await.is_err() {
        return;
    }
    loop {
        if let Err(e) = pass(&ctx).await {
            tracing::warn!(error = %e, "capacity reservation pass failed; retrying");
        }
        ctx.pause(PERIOD).await;
    }
}

/// One pass: list, describe, decide, act.
///
/// Errors: the cloud's instances or reservations could not be read (nothing changes then).
async fn pass(ctx: &Context) -> Result<Changes, CloudError> {
    let claims = ctx.state.nodeclaims.state();
    let ids = reservations::reservation_ids(&claims);
    let reserved = claims.iter().any(|c| {
        c.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(CAPACITY_TYPE_LABEL))
            .is_some_and(|t| t == CAPACITY_TYPE_RESERVED)
    });
    if ids.is_empty() && !reserved {
        return Ok(Changes::default());
    }
    let instances = ctx.cloud.list().await?;
    let records = ctx.cloud.capacity_reservations(&ids).await?;
    let changes = reservations::decide(&claims, &instances, &records, ctx.clock.now());
    for claim in &changes.demote {
        demote(ctx, claim).await;
    }
    for (claim, id) in &changes.expire {
        expire(ctx, claim, id).await;
    }
    Ok(changes)
}

/// The label change of a demotion, as a merge patch of `metadata`.
fn demoted_labels() -> serde_json::Value {
    json!({"labels": {
        CAPACITY_TYPE_LABEL: CAPACITY_TYPE_ON_DEMAND,
        CAPACITY_RESERVATION_ID_LABEL: null,
    }})
}

async fn demote(ctx: &Context, claim: &Arc<NodeClaim>) {
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let id = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CAPACITY_RESERVATION_ID_LABEL))
        .cloned()
        .unwrap_or_default();
    match writes::patch_metadata(ctx, name, demoted_labels()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return,
        Err(e) => {
            tracing::warn!(nodeclaim = %name, error = %e, "demoting nodeclaim to on-demand");
            return;
        }
    }
    tracing::info!(nodeclaim = %name, capacity_reservation_id = %id,
        "capacity reservation ended; nodeclaim is now on-demand");
    ctx.recorder.publish(EventSpec {
        regarding: reference(claim.as_ref()),
        type_: EventType::Normal,
        reason: reason::CAPACITY_RESERVATION_ENDED,
        message: format!(
            "Capacity reservation {id} ended; the instance runs on as on-demand and is priced so"
        ),
        dedupe: DEFAULT_DEDUPE,
    });
    // A Node that has not registered yet gets its labels from the NodeClaim at registration.
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    for node in ctx.state.nodes_for_claim(claim) {
        let labels = node.metadata.labels.as_ref();
        let registered = labels
            .and_then(|l| l.get(NODE_REGISTERED_LABEL))
            .is_some_and(|v| v == "true");
        let reserved = labels
            .and_then(|l| l.get(CAPACITY_TYPE_LABEL))
            .is_some_and(|v| v == CAPACITY_TYPE_RESERVED);
        if node.metadata.deletion_timestamp.is_some() || !registered || !reserved {
            continue;
        }
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        let patch = Patch::Merge(json!({"metadata": demoted_labels()}));
        match nodes
            .patch(node_name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => tracing::warn!(node = %node_name, error = %e, "demoting node to on-demand"),
        }
    }
}

async fn expire(ctx: &Context, claim: &Arc<NodeClaim>, id: &str) {
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let why = format!(
        "Capacity Block {id} ends within 40 minutes; draining before EC2 reclaims the instance"
    );
    let expiring = crds::history::reason::CAPACITY_BLOCK_EXPIRING;
    match writes::disrupt_claim(ctx, claim, expiring, &why).await {
        Ok(true) => {
            tracing::info!(nodeclaim = %name, capacity_reservation_id = %id,
                "initiating delete for capacity block expiration");
            ctx.recorder.publish(EventSpec {
                regarding: reference(claim.as_ref()),
                type_: EventType::Normal,
                reason: reason::CAPACITY_BLOCK_EXPIRING,
                message: why,
                dedupe: DEFAULT_DEDUPE,
            });
        }
        Ok(false) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {
            tracing::debug!(nodeclaim = %name, "nodeclaim changed since it was read; next pass decides again");
        }
        Err(e) => {
            tracing::warn!(nodeclaim = %name, error = %e, "deleting nodeclaim of an expiring capacity block")
        }
    }
}
