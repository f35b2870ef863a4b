//! The consolidation command executor (upstream `disruption/queue.go`): [`start`] a validated
//! command (annotate and taint the candidates, then create the replacement or delete them),
//! [`advance_all`] the commands found in the cluster one step each (terminate, wait, roll
//! back, as `karpenter_core::disruption::command::next_step` says), [`abandon`] one, and
//! [`sweep_stale_taints`] left by any. Every write goes through `crate::nodeclaim::writes`
//! and [`super::marks`]; nothing here decides what to disrupt.
//!
//! A command's state lives in annotations (`crds::disruption`), so a restarted controller finds
//! it: candidates are annotated and their nodes tainted `karpenter.sh/disrupted:NoSchedule`;
//! a delete deletes them at once; a replace creates the replacement, waits until it is
//! initialized and only then deletes the candidates, or rolls back (deletes the replacement,
//! clears the annotations and taints) when it does not initialize within
//! `Settings::upgrade_initialization_timeout` or goes away.

use std::collections::BTreeMap;
use std::sync::Arc;

use crds::disruption::{
    COMMAND_ANNOTATION, REASON_ANNOTATION, REPLACEMENT_ANNOTATION, REPLACES_ANNOTATION,
    STARTED_ANNOTATION,
};
use crds::history::{CANDIDATES_ANNOTATION, reason::ROLLED_BACK};
use crds::{DisruptionReason, NodeClaim};
use jiff::Timestamp;
use karpenter_core::disruption::candidates::Candidate;
use karpenter_core::disruption::command::{self, Step};
use karpenter_core::disruption::consolidation::{Action, Command};
use karpenter_core::snapshot::{Snapshot, annotation};
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::marks;
use crate::nodeclaim::history;
use crate::nodeclaim::writes::{
    disrupt_by_name, generated_name, patch_metadata, terminate_candidate,
};
use crate::runtime::Context;
use crate::runtime::events::{DEFAULT_DEDUPE, EventSpec, EventType, reason, reference};
use crate::runtime::metrics;

/// Start a validated command: annotate and taint the candidates, then create the replacement
/// or delete the candidates.
///
/// Errors: an API failure; candidates annotated before it are rolled back.
pub(super) async fn start(
    ctx: &Context,
    snap: &Snapshot,
    command: &Command,
) -> Result<(), kube::Error> {
    let reason = command.reason;
    let id = generated_name(&reason.as_str().to_lowercase());
    let replacement = match &command.action {
        Action::Delete => String::new(),
        Action::Replace(r) => generated_name(&r.planned.decision.nodepool),
    };
    let now = ctx.clock.now().to_string();
    // Every candidate whose annotation may have been written: a write whose answer was lost
    // may have taken effect, so a failed start clears it too (only if it names this command).
    let mut marked = Vec::new();
    for c in &command.candidates {
        let result = patch_metadata(
            ctx,
            c.name(),
            json!({"resourceVersion": c.nodeclaim.metadata.resource_version,
                   "annotations": {COMMAND_ANNOTATION: id, REASON_ANNOTATION: reason.as_str(),
                                   REPLACEMENT_ANNOTATION: replacement, STARTED_ANNOTATION: now,
                                   CANDIDATES_ANNOTATION: command.candidates.len().to_string()}}),
        )
        .await;
        if result.as_ref().err().is_none_or(outcome_unknown) {
            marked.push(c.name().to_string());
        }
        let started = match result {
            Ok(_) => marks::taint(ctx, &c.node.name_any(), true)
                .await
                .map(|_| ()),
            Err(e) => Err(e),
        };
        if let Err(e) = started {
            marks::abandon(ctx, snap, &id, &marked).await;
            return Err(e);
        }
    }
    let decision = match &command.action {
        Action::Delete => "delete",
        Action::Replace(_) => "replace",
    };
    ctx.metrics
        .disruption_decided(decision, reason.as_str(), command.method.as_str());
    let names: Vec<&str> = command.candidates.iter().map(Candidate::name).collect();
    tracing::info!(command = %id, method = command.method.as_str(), reason = reason.as_str(),
        nodeclaims = ?names, replacement = %replacement, savings = command.savings(),
        "consolidation command started");
    match &command.action {
        Action::Delete => {
            for c in &command.candidates {
                terminate_candidate(
                    ctx,
                    snap,
                    c.name(),
                    reason,
                    &format!(
                        "Disrupting NodeClaim: {} ({}, saves ${:.4}/h)",
                        reason.as_str(),
                        command.method.as_str(),
                        command.savings()
                    ),
                )
                .await?;
            }
        }
        Action::Replace(r) => {
            let claim =
                marks::replacement_claim(&r.planned.nodeclaim, &replacement, &id, &names.join(","));
            let api: Api<NodeClaim> = Api::all(ctx.client.clone());
            match api.create(&PostParams::default(), &claim).await {
                Ok(created) => {
                    ctx.metrics
                        .nodeclaim_created(&created, metrics::reason::UNDERUTILIZED);
                    let types: Vec<&str> = r
                        .planned
                        .decision
                        .instance_types
                        .iter()
                        .map(|t| t.name.as_str())
                        .take(5)
                        .collect();
                    for c in &command.candidates {
                        ctx.recorder.about(
                            c.nodeclaim.as_ref(),
                            EventType::Normal,
                            reason::DISRUPTION_LAUNCHING,
                            format!(
                                "Launching NodeClaim {replacement} ({} ...) to replace {}: {}, saves ${:.4}/h",
                                types.join(", "),
                                names.join(", "),
                                reason.as_str(),
                                command.savings()
                            ),
                        );
                    }
                }
                Err(e) => {
                    marks::abandon(ctx, snap, &id, &marked).await;
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Whether a write that failed with `e` may still have taken effect: its answer was lost (a
/// timeout, a dropped connection, a 5xx after the write) rather than a refusal.
fn outcome_unknown(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code >= 500,
        _ => true,
    }
}

/// One command found in the cluster: its candidates and its replacement, if any.
type InFlight = (Vec<Arc<NodeClaim>>, Option<Arc<NodeClaim>>);

/// Drive every command found in the cluster one step. Returns whether any is in progress.
pub(super) async fn advance_all(ctx: &Context, snap: &Snapshot, now: Timestamp) -> bool {
    let mut commands: BTreeMap<String, InFlight> = BTreeMap::new();
    for claim in &snap.nodeclaims {
        let Some(id) = annotation(claim, COMMAND_ANNOTATION) else {
            continue;
        };
        let entry = commands.entry(id.to_string()).or_default();
        if annotation(claim, REPLACES_ANNOTATION).is_some() {
            entry.1 = Some(Arc::clone(claim));
        } else {
            entry.0.push(Arc::clone(claim));
        }
    }
    let mut busy = false;
    for (id, (candidates, replacement)) in commands {
        match advance(ctx, snap, now, &id, &candidates, replacement.as_deref()).await {
            Ok(in_progress) => busy |= in_progress,
            Err(e) => {
                busy = true;
                tracing::warn!(command = %id, error = %e, "consolidation command");
            }
        }
    }
    busy
}

/// One step of one command. Returns whether it is still in progress.
async fn advance(
    ctx: &Context,
    snap: &Snapshot,
    now: Timestamp,
    id: &str,
    candidates: &[Arc<NodeClaim>],
    replacement: Option<&NodeClaim>,
) -> Result<bool, kube::Error> {
    let waiting: Vec<&Arc<NodeClaim>> = candidates
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .collect();
    if waiting.is_empty() {
        // Every candidate is gone or going: the replacement becomes an ordinary node.
        if let Some(r) = replacement {
            patch_metadata(
                ctx,
                &r.name_any(),
                json!({"annotations": {COMMAND_ANNOTATION: null, REPLACES_ANNOTATION: null}}),
            )
            .await?;
            tracing::info!(command = %id, replacement = %r.name_any(), "consolidation command done");
        }
        return Ok(false);
    }
    let first = waiting[0];
    if super::interruption::interrupted(first).is_some() {
        return super::interruption::advance(ctx, snap, now, id, &waiting, replacement).await;
    }
    let reason = match annotation(first, REASON_ANNOTATION) {
        Some("Empty") => DisruptionReason::Empty,
        _ => DisruptionReason::Underutilized,
    };
    let replacement_name = annotation(first, REPLACEMENT_ANNOTATION).unwrap_or_default();
    let names: Vec<String> = candidates.iter().map(|c| c.name_any()).collect();
    let replacement = match replacement {
        _ if replacement_name.is_empty() => None,
        Some(r) if r.name_any() == replacement_name => Some(r.clone()),
        _ => {
            // The cache may lag the create: ask the API server before deciding it is missing.
            let api: Api<NodeClaim> = Api::all(ctx.client.clone());
            api.get_opt(replacement_name).await?
        }
    };
    // A command is carried out only once fully started: every candidate annotated and its
    // node tainted, which a created replacement proves (it is created last). A command the
    // cluster shows otherwise (a start whose answer was lost, a crash between its writes) is
    // abandoned before anything is deleted; the next pass decides again from scratch.
    if replacement.is_none() {
        for c in &waiting {
            if !marks::candidate_tainted(ctx, snap, c).await? {
                tracing::warn!(command = %id, nodeclaim = %c.name_any(),
                    "consolidation command found half-started (its node is not tainted); abandoning it");
                marks::abandon(ctx, snap, id, &names).await;
                return Ok(false);
            }
        }
    }
    let started = annotation(first, STARTED_ANNOTATION)
        .and_then(|s| s.parse::<Timestamp>().ok())
        .unwrap_or(now);
    let state = command::Replacement::of(replacement_name, replacement.as_ref());
    let deadline = command::Deadline::RollBackAfter {
        started,
        timeout: ctx.settings.upgrade_initialization_timeout,
    };
    match command::next_step(waiting.len(), state, replacement_name, deadline, now) {
        Step::Done => Ok(false),
        Step::Terminate => {
            let message = if replacement_name.is_empty() {
                format!("Disrupting NodeClaim: {} (command {id})", reason.as_str())
            } else {
                format!(
                    "Disrupting NodeClaim: {}, replaced by {replacement_name} (command {id})",
                    reason.as_str()
                )
            };
            for c in &waiting {
                terminate_candidate(ctx, snap, &c.name_any(), reason, &message).await?;
            }
            Ok(true)
        }
        Step::Wait => {
            for c in &waiting {
                ctx.recorder.publish(EventSpec {
                    regarding: reference(c.as_ref()),
                    type_: EventType::Normal,
                    reason: reason::DISRUPTION_WAITING_READINESS,
                    message: format!(
                        "Waiting on readiness to continue disruption: replacement {replacement_name}"
                    ),
                    dedupe: DEFAULT_DEDUPE,
                });
            }
            Ok(true)
        }
        Step::RollBack(why) => {
            tracing::warn!(command = %id, why = %why, "consolidation command rolled back");
            let rolled_back = format!("{why}; rolled back");
            if replacement.is_some() {
                disrupt_by_name(ctx, replacement_name, ROLLED_BACK, &rolled_back).await?;
            }
            for c in &waiting {
                let record = history::rollback_record(
                    ctx,
                    c,
                    reason.as_str(),
                    replacement_name,
                    replacement.as_ref(),
                    &rolled_back,
                );
                if let Err(e) = history::append(ctx, record).await {
                    tracing::warn!(command = %id, error = %e, "consolidation rollback not recorded");
                }
            }
            marks::abandon(ctx, snap, id, &names).await;
            for c in &waiting {
                ctx.recorder.about(
                    c.as_ref(),
                    EventType::Warning,
                    reason::UNCONSOLIDATABLE,
                    format!("Consolidation rolled back: {why}; the node keeps running"),
                );
            }
            Ok(false)
        }
    }
}
