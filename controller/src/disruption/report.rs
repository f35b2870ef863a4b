//! What a consolidation pass reports (upstream `disruption/events`, `disruption/metrics.go`):
//! eligible nodes and allowed disruptions per NodePool and reason, Balanced's scores, decision
//! timeouts, and why candidates and blocked nodes stay, as metrics and Events.

use karpenter_core::disruption::consolidation::{Decision, Method};
use karpenter_core::snapshot::Snapshot;
use kube::ResourceExt;

use crate::runtime::Context;
use crate::runtime::events::{EventSpec, EventType, UNCONSOLIDATABLE_DEDUPE, reason, reference};

/// Metrics and Events of a pass: eligible nodes, allowed disruptions, timeouts, and why
/// candidates and blocked nodes stay.
pub fn pass(ctx: &Context, snap: &Snapshot, d: &Decision) {
    for (reason, n) in &d.eligible {
        ctx.metrics.disruption_eligible(reason, *n);
    }
    for (pool, reason, n) in &d.allowed {
        ctx.metrics.allowed_disruptions(pool, reason.as_str(), *n);
    }
    for method in &d.timed_out {
        ctx.metrics.consolidation_timed_out(method.as_str());
    }
    for (pool, policy, approved, score) in &d.moves {
        ctx.metrics
            .consolidation_move(pool, *policy, *approved, *score);
    }
    // Approvals of Balanced moves are Events, on the node and NodeClaim of a single-node
    // move and on the NodePool of a multi-node one (upstream `ConsolidationApproved`);
    // rejections are metrics only, as upstream keeps them (they are many).
    if let Some(command) = &d.command {
        for scored in &command.scores {
            let message = scored.score.to_string();
            let mut regarding = Vec::new();
            match command.method {
                Method::Single => {
                    for c in &command.candidates {
                        regarding.push(reference(c.nodeclaim.as_ref()));
                        regarding.push(reference(c.node.as_ref()));
                    }
                }
                _ => {
                    if let Some(pool) = snap
                        .nodepools
                        .iter()
                        .find(|p| p.metadata.name.as_deref() == Some(scored.nodepool.as_str()))
                    {
                        regarding.push(reference(pool.as_ref()));
                    }
                }
            }
            for object in regarding {
                ctx.recorder.publish(EventSpec {
                    regarding: object,
                    type_: EventType::Normal,
                    reason: reason::CONSOLIDATION_APPROVED,
                    message: message.clone(),
                    dedupe: UNCONSOLIDATABLE_DEDUPE,
                });
            }
        }
    }
    // Candidates left alone: `DisruptionBlocked` for a do-not-disrupt or PodDisruptionBudget
    // blocker, `Unconsolidatable` for one single-node consolidation tried.
    let blocked = d
        .blocked
        .iter()
        .map(|(name, b)| (name, reason::DISRUPTION_BLOCKED, b.to_string()));
    let unconsolidatable = d
        .unconsolidatable
        .iter()
        .map(|(name, why)| (name, reason::UNCONSOLIDATABLE, why.to_string()));
    for (name, event, why) in blocked.chain(unconsolidatable) {
        if let Some(claim) = snap.nodeclaims.iter().find(|c| c.name_any() == *name) {
            ctx.recorder.publish(EventSpec {
                regarding: reference(claim.as_ref()),
                type_: EventType::Normal,
                reason: event,
                message: why,
                dedupe: UNCONSOLIDATABLE_DEDUPE,
            });
        }
    }
}
