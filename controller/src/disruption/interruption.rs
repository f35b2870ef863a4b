//! Interruption commands, the orchestrator's forceful kind (an extension of upstream's AWS
//! interruption handling, which deletes the NodeClaim at once and lets the provisioner react
//! to the evicted pods): the replacement is launched at the warning, computed by the solver
//! from the interrupted node's pods ([`karpenter_core::disruption::interruption`]), and the
//! interrupted NodeClaim is deleted (cordon, drain, terminate) when the replacement is
//! initialized or at the command's drain-by time, whichever comes first.
//!
//! An interruption command is a consolidation command (`crds::disruption` annotations, so the
//! in-progress set, budgets' disrupting count, `kubectl karpenter status` and a restarted
//! controller all see it) whose reason is an interruption's history reason
//! (`SpotInterrupted`, `ScheduledChange`, `InstanceStopped`, `InstanceTerminated`) and which
//! carries `DRAIN_BY_ANNOTATION`. Unlike consolidation it bypasses budgets and is never rolled
//! back: the node goes whatever happens to its replacement.

use std::sync::Arc;

use crds::NodeClaim;
use crds::disruption::{
    COMMAND_ANNOTATION, DRAIN_BY_ANNOTATION, REASON_ANNOTATION, REPLACEMENT_ANNOTATION,
    STARTED_ANNOTATION,
};
use crds::history::CANDIDATES_ANNOTATION;
use crds::labels::{
    CAPACITY_TYPE_LABEL, CAPACITY_TYPE_SPOT, INSTANCE_TYPE_LABEL, TOPOLOGY_ZONE_LABEL,
};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_core::disruption::candidates::is_reschedulable;
use karpenter_core::disruption::command;
use karpenter_core::disruption::consolidation::Settings;
use karpenter_core::disruption::interruption::{self as decide, InterruptedOffering};
use karpenter_core::interruption::{Kind, Message};
use karpenter_core::pod_view::PodView;
use karpenter_core::snapshot::{Snapshot, annotation};
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::marks;
use crate::nodeclaim::writes::{disrupt_claim, generated_name, patch_metadata};
use crate::runtime::Context;
use crate::runtime::events::{EventType, reason};

/// Whether `claim` is the candidate of an interruption command, and for which kind.
pub fn interrupted(claim: &NodeClaim) -> Option<Kind> {
    annotation(claim, COMMAND_ANNOTATION)?;
    annotation(claim, REASON_ANNOTATION).and_then(Kind::from_history_reason)
}

/// The node of `claim` in `snap`, by providerID.
fn node_of<'s>(snap: &'s Snapshot, claim: &NodeClaim) -> Option<&'s Arc<Node>> {
    let pid = claim.status.as_ref()?.provider_id.as_deref()?;
    snap.nodes
        .iter()
        .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(pid))
}

/// The offering `claim` runs on, from its labels; `None` before launch.
fn offering_of(claim: &NodeClaim) -> Option<InterruptedOffering> {
    let labels = claim.metadata.labels.as_ref()?;
    Some(InterruptedOffering {
        instance_type: labels.get(INSTANCE_TYPE_LABEL)?.clone(),
        zone: labels.get(TOPOLOGY_ZONE_LABEL)?.clone(),
        capacity_type: labels.get(CAPACITY_TYPE_LABEL)?.clone(),
    })
}

/// Start the interruption command for `claim` (interrupted by `message`, whose action is to
/// replace and drain): plan the replacement from its node's pods, annotate and taint it,
/// launch the replacement, and delete it at once when its drain-by time has come (an instance
/// already stopping or terminating) or when nothing replaces it. A NodeClaim already in an
/// interruption command, or deleting, is left alone (a duplicate message); one in a
/// consolidation command is taken over (its replacement kept, the command made forceful).
///
/// The command is written with the NodeClaim's resourceVersion as a precondition, so it never
/// overwrites a command consolidation or an upgrade started meanwhile; on a conflict (409) the
/// NodeClaim is read again and the decision made again, up to [`CONFLICT_ATTEMPTS`] times.
///
/// Errors: an API failure, or conflicts on every attempt (the message stays in the queue and is
/// handled again).
pub async fn start(
    ctx: &Context,
    snap: &Arc<Snapshot>,
    message: &Message,
    claim: &NodeClaim,
) -> Result<(), kube::Error> {
    let mut attempt = 1;
    loop {
        match start_once(ctx, snap, message, claim).await {
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < CONFLICT_ATTEMPTS => {
                tracing::debug!(nodeclaim = %claim.name_any(), attempt, "interruption command raced another write; deciding again");
                attempt += 1;
            }
            done => return done,
        }
    }
}

/// How many times [`start`] decides again after a conflicting write to the NodeClaim (its
/// lifecycle, drift and consolidation controllers write it too).
pub const CONFLICT_ATTEMPTS: u32 = 5;

/// One attempt of [`start`], on the NodeClaim as the API server has it now.
async fn start_once(
    ctx: &Context,
    snap: &Arc<Snapshot>,
    message: &Message,
    claim: &NodeClaim,
) -> Result<(), kube::Error> {
    let kind = message.kind;
    let Some(history_reason) = kind.history_reason() else {
        return Ok(());
    };
    // Read it fresh: a duplicate message handled right after the first must see the first's
    // command, which the cache may not show yet.
    let Some(fresh) = Api::<NodeClaim>::all(ctx.client.clone())
        .get_opt(&claim.name_any())
        .await?
    else {
        return Ok(());
    };
    let claim = &fresh;
    if claim.metadata.deletion_timestamp.is_some() {
        return attribute(ctx, claim, history_reason, kind.event_message()).await;
    }
    if interrupted(claim).is_some() {
        return Ok(());
    }
    let name = claim.name_any();
    let now = ctx.clock.now();
    let drain_by = decide::drain_by(
        kind,
        message.time,
        now,
        ctx.settings.upgrade_initialization_timeout,
    );
    let node = node_of(snap, claim).cloned();
    if annotation(claim, COMMAND_ANNOTATION).is_some() {
        // A consolidation command holds it: its replacement (if any) serves, on a deadline.
        patch_metadata(
            ctx,
            &name,
            json!({"annotations": {REASON_ANNOTATION: history_reason,
                                   DRAIN_BY_ANNOTATION: drain_by.to_string()}}),
        )
        .await?;
        tracing::info!(nodeclaim = %name, kind = %kind, "interruption took over a consolidation command");
        return Ok(());
    }
    if annotation(claim, crds::upgrade::REPLACEMENT_ANNOTATION).is_some() {
        // An upgrade step is replacing it already: it only has to go sooner.
        return terminate(ctx, snap, claim, kind).await;
    }
    let replacement = plan_replacement(ctx, snap, claim, node.as_deref(), kind).await;
    let id = generated_name("interruption");
    let replacement_name = replacement
        .as_ref()
        .map(|p| generated_name(&p.decision.nodepool))
        .unwrap_or_default();
    patch_metadata(
        ctx,
        &name,
        json!({"resourceVersion": claim.metadata.resource_version,
               "annotations": {COMMAND_ANNOTATION: id, REASON_ANNOTATION: history_reason,
                               REPLACEMENT_ANNOTATION: replacement_name,
                               STARTED_ANNOTATION: now.to_string(),
                               DRAIN_BY_ANNOTATION: drain_by.to_string(),
                               CANDIDATES_ANNOTATION: "1"}}),
    )
    .await?;
    if let Some(node) = &node
        && let Err(e) = marks::taint(ctx, &node.name_any(), true).await
    {
        // Forceful either way: termination taints the node again before it drains.
        tracing::warn!(nodeclaim = %name, error = %e, "tainting an interrupted node");
    }
    tracing::info!(command = %id, nodeclaim = %name, kind = %kind, replacement = %replacement_name,
        drain_by = %drain_by, "interruption command started");
    if let Some(planned) = replacement {
        let new = marks::replacement_claim(&planned.nodeclaim, &replacement_name, &id, &name);
        let api: Api<NodeClaim> = Api::all(ctx.client.clone());
        match api.create(&PostParams::default(), &new).await {
            Ok(created) => {
                ctx.metrics.nodeclaim_created(&created, kind.as_str());
                let types: Vec<&str> = planned
                    .decision
                    .instance_types
                    .iter()
                    .map(|t| t.name.as_str())
                    .take(5)
                    .collect();
                ctx.recorder.about(
                    claim,
                    EventType::Normal,
                    reason::DISRUPTION_LAUNCHING,
                    format!(
                        "Launching NodeClaim {replacement_name} ({} ...) to replace {name}: {history_reason}, draining by {drain_by} at the latest",
                        types.join(", ")
                    ),
                );
            }
            Err(e) => {
                // The drain cannot wait for a replacement that does not exist.
                tracing::warn!(command = %id, error = %e, "interruption replacement not created; draining now");
                patch_metadata(
                    ctx,
                    &name,
                    json!({"annotations": {REPLACEMENT_ANNOTATION: ""}}),
                )
                .await?;
                return terminate(ctx, snap, claim, kind).await;
            }
        }
    }
    if replacement_name.is_empty() || drain_by <= now {
        terminate(ctx, snap, claim, kind).await?;
    }
    Ok(())
}

/// The replacement for the pods on `node` (see [`decide::replacement`]); `None` when nothing
/// needs one or the solver cannot make one (then the node is drained at once, as upstream).
async fn plan_replacement(
    ctx: &Context,
    snap: &Arc<Snapshot>,
    claim: &NodeClaim,
    node: Option<&Node>,
    kind: Kind,
) -> Option<karpenter_core::provisioning::plan::PlannedNodeClaim> {
    let node = node?.name_any();
    let pods: Vec<Arc<PodView>> = snap
        .pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .filter(|p| is_reschedulable(p))
        .cloned()
        .collect();
    if pods.is_empty() {
        return None;
    }
    let interrupted = (kind == Kind::SpotInterrupted)
        .then(|| offering_of(claim))
        .flatten()
        .filter(|o| o.capacity_type == CAPACITY_TYPE_SPOT);
    let listings = crate::provisioning::list_instance_types(ctx, snap).await;
    let settings = Settings {
        now: ctx.clock.now(),
        spot_to_spot: ctx
            .settings
            .feature_gates
            .enabled(crate::runtime::feature_gates::FeatureGate::SpotToSpotConsolidation),
        hash_versions: ctx.settings.hash_versions.clone(),
        min_values_policy: ctx.settings.min_values_policy,
    };
    let snap = Arc::clone(snap);
    let planned = tokio::task::spawn_blocking(move || {
        decide::replacement(&snap, &listings, &settings, &pods, interrupted.as_ref())
    })
    .await
    .ok()?;
    match planned {
        Ok(p) => p,
        Err(why) => {
            tracing::info!(nodeclaim = %claim.name_any(), why = %why,
                "no replacement for the interrupted node; draining it without one");
            None
        }
    }
}

/// Say why a NodeClaim that is deleting already was deleted, when nothing has said so yet: its
/// node went away with its instance (EC2 terminating or stopping it) before this message was
/// read, and a plain delete followed. Its `DisruptionReason` condition (which the termination
/// finalizer reads when it records the removal in the disruption history) gets the
/// interruption's `reason`, so the history names the interruption rather than a user's delete.
///
/// Errors: the API failure of the status write (a conflict: the message is handled again).
async fn attribute(
    ctx: &Context,
    claim: &NodeClaim,
    reason: &str,
    message: &str,
) -> Result<(), kube::Error> {
    if crds::history::disruption_reason(claim) != crds::history::reason::DELETED {
        return Ok(());
    }
    let written = crate::nodeclaim::writes::set_condition(ctx, claim, |set| {
        set.set_true_with_reason(crds::conditions::DISRUPTION_REASON, reason, message)
    })
    .await;
    match written {
        Ok(_) => {
            tracing::info!(nodeclaim = %claim.name_any(), reason, "interruption of a NodeClaim already deleting recorded as its reason");
            Ok(())
        }
        Err(crate::runtime::reconcile::ReconcileError::Kube(e)) => Err(e),
        Err(e) => {
            tracing::warn!(nodeclaim = %claim.name_any(), error = %e, "recording an interruption's reason");
            Ok(())
        }
    }
}

/// Delete an interrupted NodeClaim through the termination path (cordon, drain, terminate),
/// with its interruption's history reason, the `karpenter_nodeclaims_disrupted_total` reason of
/// the message kind (e.g. `spot_interrupted`) and the `TerminatingOnInterruption` Events.
///
/// Errors: an API failure, or conflicts on all [`CONFLICT_ATTEMPTS`].
pub async fn terminate(
    ctx: &Context,
    snap: &Snapshot,
    claim: &NodeClaim,
    kind: Kind,
) -> Result<(), kube::Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let reason_text = kind.history_reason().unwrap_or("Interrupted");
    // Read fresh and written with its resourceVersion; read again on a conflict.
    let mut attempt = 1;
    let fresh = loop {
        let Some(fresh) = api.get_opt(&claim.name_any()).await? else {
            return Ok(());
        };
        match disrupt_claim(ctx, &fresh, reason_text, kind.event_message()).await {
            Ok(true) => break fresh,
            Ok(false) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < CONFLICT_ATTEMPTS => {
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    };
    ctx.metrics
        .nodeclaim_disrupted(&fresh, kind.as_str(), &ctx.state);
    ctx.recorder.about(
        &fresh,
        EventType::Warning,
        reason::TERMINATING_ON_INTERRUPTION,
        "Interruption triggered termination for the NodeClaim".into(),
    );
    if let Some(node) = node_of(snap, &fresh) {
        ctx.recorder.about(
            node.as_ref(),
            EventType::Warning,
            reason::TERMINATING_ON_INTERRUPTION,
            "Interruption triggered termination for the Node".into(),
        );
    }
    tracing::info!(nodeclaim = %fresh.name_any(), kind = %kind, "initiating delete from interruption message");
    Ok(())
}

/// One step of an interruption command whose candidates not yet deleting are `waiting`:
/// delete them once the replacement is initialized, gone, or the drain-by time has come.
/// Returns whether it is still in progress.
///
/// Errors: an API failure.
pub async fn advance(
    ctx: &Context,
    snap: &Snapshot,
    now: Timestamp,
    id: &str,
    waiting: &[&Arc<NodeClaim>],
    replacement: Option<&NodeClaim>,
) -> Result<bool, kube::Error> {
    for c in waiting {
        let Some(kind) = interrupted(c) else { continue };
        let drain_by = annotation(c, DRAIN_BY_ANNOTATION)
            .and_then(|t| t.parse::<Timestamp>().ok())
            .unwrap_or(now);
        let name = annotation(c, REPLACEMENT_ANNOTATION).unwrap_or_default();
        let replacement = match replacement {
            Some(r) if r.name_any() == name => Some(r.clone()),
            _ if name.is_empty() => None,
            // The cache may lag the create: ask the API server.
            _ => {
                Api::<NodeClaim>::all(ctx.client.clone())
                    .get_opt(name)
                    .await?
            }
        };
        let state = command::Replacement::of(name, replacement.as_ref());
        let step = command::next_step(1, state, name, command::Deadline::DrainBy(drain_by), now);
        if step == command::Step::Terminate {
            tracing::info!(command = %id, nodeclaim = %c.name_any(), replacement = ?state,
                deadline = now >= drain_by, "interrupted node draining");
            terminate(ctx, snap, c, kind).await?;
        } else {
            ctx.recorder.about(
                c.as_ref(),
                EventType::Normal,
                reason::DISRUPTION_WAITING_READINESS,
                format!(
                    "Waiting on readiness to continue disruption: replacement {name}, draining by {drain_by} at the latest"
                ),
            );
        }
    }
    Ok(true)
}

#[cfg(test)]
#[path = "interruption_tests.rs"]
mod tests;
