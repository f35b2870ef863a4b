//! The pure half of serial upgrades: for one NodePool, which replacement steps are in progress
//! and in which phase, which drifted NodeClaims wait in which order, which are skipped and why,
//! and how many new steps may start now (controls and `Drifted` budgets). The orchestrator acts
//! on it; `kubectl karpenter upgrade status` shows it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::pod_view::PodView;
use crds::conditions::{self, DRAINED, DRIFTED, INITIALIZED, REGISTERED};
use crds::disruption::{COMMAND_ANNOTATION, REPLACES_ANNOTATION as CONSOLIDATION_REPLACES};
use crds::upgrade::{
    PAUSED_ANNOTATION, PAUSED_REASON_ANNOTATION, Phase, REPLACEMENT_ANNOTATION,
    STEP_ALLOWANCE_ANNOTATION, STEP_STARTED_ANNOTATION, step_allowance,
};
use crds::{Budget, DisruptionReason, NodeClaim, NodePool, StatusConditions};
use jiff::Timestamp;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::blockers::{Blocker, opts_out, pod_blocker};
use crate::scheduling::pod::is_owned_by;

/// A pod's termination grace period when it sets none (Kubernetes' default), seconds.
const DEFAULT_POD_GRACE: i64 = 30;

/// What the planner reads, for one NodePool.
pub struct View<'a> {
    /// The NodePool rolled out: its upgrade controls (annotations) and disruption budgets.
    pub pool: &'a NodePool,
    /// Its NodeClaims (deleting ones included).
    pub claims: &'a [Arc<NodeClaim>],
    /// Every pod (only those bound to the pool's nodes matter).
    pub pods: &'a [Arc<PodView>],
    /// Every PodDisruptionBudget; one that selects a pod of a drifted node and allows no
    /// disruption (`status.disruptionsAllowed` < 1) skips that NodeClaim.
    pub pdbs: &'a [Arc<PodDisruptionBudget>],
    /// The time pods' `karpenter.sh/do-not-disrupt` durations are judged at.
    pub now: Timestamp,
    /// Whether a scheduled budget's window is open now.
    pub budget_active: &'a dyn Fn(&Budget) -> bool,
}

/// A replacement step in progress.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepInProgress {
    /// The drifted NodeClaim being replaced.
    pub nodeclaim: String,
    /// Its node's name (`status.nodeName`); `None` before registration.
    pub node: Option<String>,
    /// The replacement NodeClaim (none for an empty node).
    pub replacement: Option<String>,
    /// Where the step is: from the old NodeClaim's deletion and `Drained` condition and the
    /// replacement's `Registered`.
    pub phase: Phase,
    /// When it started (`upgrades.karpenter.sh/step-started`); `None` when missing or
    /// unparseable.
    pub started: Option<Timestamp>,
    /// Pods still on its node that the drain moves (DaemonSet pods excluded), as for a queued
    /// [`Candidate`]; 0 for an empty node or one already drained.
    pub pods: usize,
}

/// A drifted NodeClaim waiting for its step, in queue order.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// Name of the drifted, initialized NodeClaim.
    pub nodeclaim: String,
    /// Its node's name (`status.nodeName`).
    pub node: Option<String>,
    /// Pods that would move (DaemonSet pods excluded); 0 means an empty node.
    pub pods: usize,
    /// The drain timeout for it: its `terminationGracePeriod` (from the NodePool) if set, else
    /// the sum of its pods' `terminationGracePeriodSeconds` (the node-upgrade design's rule).
    /// Serialized as `drain_timeout_seconds`.
    #[serde(rename = "drain_timeout_seconds", serialize_with = "as_seconds")]
    pub drain_timeout: Duration,
    /// `metadata.creationTimestamp`: among equal pod counts, older NodeClaims go first.
    pub created: Option<Timestamp>,
}

fn as_seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}

/// A drifted NodeClaim the rollout passes over for now.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    /// Name of the drifted NodeClaim passed over.
    pub nodeclaim: String,
    /// Its node's name (`status.nodeName`).
    pub node: Option<String>,
    /// Why, e.g. `pod shop/cart has karpenter.sh/do-not-disrupt` or `PodDisruptionBudget
    /// shop/cart allows no disruption (pod shop/cart-abc)`.
    pub why: String,
}

/// The rollout state of one NodePool.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Name of the NodePool this plan is for.
    pub nodepool: String,
    /// Paused by the operator or by the controller after a failed step.
    pub paused: bool,
    /// Why the controller paused it, if it did.
    pub paused_reason: Option<String>,
    /// Steps that may still start while paused.
    pub step_allowance: u32,
    /// Steps in progress: NodeClaims that carry `upgrades.karpenter.sh/replacement`.
    pub in_progress: Vec<StepInProgress>,
    /// Drifted NodeClaims waiting, in the order they will be replaced: empty nodes first, then
    /// fewest pods, then oldest.
    pub queue: Vec<Candidate>,
    /// Drifted NodeClaims passed over, with why.
    pub skipped: Vec<Skipped>,
    /// How many steps may be in progress at once: 1, or what the NodePool's budgets allow for
    /// reason `Drifted` when a budget names that reason (0 while a budget blocks it).
    pub max_in_progress: usize,
    /// How many steps may start now.
    pub can_start: usize,
}

/// Plan one NodePool's rollout: steps in progress, the queue, what is skipped and how many
/// steps may start now ([`Plan::can_start`]).
pub fn plan(view: &View<'_>) -> Plan {
    let pool = view.pool;
    let annotations = pool.metadata.annotations.clone().unwrap_or_default();
    let paused = annotations.get(PAUSED_ANNOTATION).map(String::as_str) == Some("true");
    let allowance = step_allowance(
        annotations
            .get(STEP_ALLOWANCE_ANNOTATION)
            .map(String::as_str),
    );
    let mut in_progress = Vec::new();
    let mut queue = Vec::new();
    let mut skipped = Vec::new();
    let mut disrupting = 0;
    let by_node = pods_by_node(view.pods);
    for claim in view.claims {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let node = claim.status.as_ref().and_then(|s| s.node_name.clone());
        let deleting = claim.metadata.deletion_timestamp.is_some();
        if deleting {
            disrupting += 1;
        }
        let pods: Vec<&Arc<PodView>> = node
            .as_deref()
            .and_then(|n| by_node.get(n))
            .map(|p| p.iter().filter(|p| !is_owned_by(p, "DaemonSet")).collect())
            .unwrap_or_default();
        if let Some(step) = step_of(claim, view.claims, pods.len()) {
            if !deleting {
                disrupting += 1;
            }
            in_progress.push(step);
            continue;
        }
        let drifted = conditions::is_true(claim.status_conditions(), DRIFTED);
        let initialized = conditions::is_true(claim.status_conditions(), INITIALIZED);
        // One in-progress set with consolidation: a candidate of a consolidation command is
        // disrupting (it counts against the budget and is not replaced a second time), and
        // its replacement is never a candidate.
        if let Some(command) = consolidation_command(claim) {
            if let Some(command) = command.filter(|_| !deleting) {
                disrupting += 1;
                if drifted && initialized {
                    skipped.push(Skipped {
                        nodeclaim: name,
                        node,
                        why: format!("already being disrupted: consolidation command {command}"),
                    });
                }
            }
            continue;
        }
        if deleting || !drifted || !initialized {
            continue;
        }
        if let Some(why) = blocked(claim, &pods, view) {
            skipped.push(Skipped {
                nodeclaim: name,
                node,
                why,
            });
            continue;
        }
        let drain_timeout = drain_timeout(claim, &pods);
        queue.push(Candidate {
            nodeclaim: name,
            node,
            pods: pods.len(),
            drain_timeout,
            created: claim.metadata.creation_timestamp.as_ref().map(|t| t.0),
        });
    }
    queue.sort_by(|a, b| {
        (a.pods > 0, a.pods, a.created, &a.nodeclaim).cmp(&(
            b.pods > 0,
            b.pods,
            b.created,
            &b.nodeclaim,
        ))
    });
    let nodes = view.claims.len();
    let allowed = pool.allowed_disruptions(nodes, DisruptionReason::Drifted, view.budget_active);
    // More than one step at a time only when an active budget names `Drifted`; an inactive one
    // (outside its schedule window) does not widen anything.
    let names_drifted = pool.spec.disruption.budgets.iter().any(|b| {
        b.reasons
            .as_ref()
            .is_some_and(|r| r.contains(&DisruptionReason::Drifted))
            && (view.budget_active)(b)
    });
    let max_in_progress = if names_drifted {
        allowed
    } else {
        allowed.min(1)
    };
    let free = max_in_progress.saturating_sub(disrupting.max(in_progress.len()));
    let can_start = if paused {
        free.min(allowance as usize)
    } else {
        free
    }
    .min(queue.len());
    Plan {
        nodepool: pool.metadata.name.clone().unwrap_or_default(),
        paused,
        paused_reason: annotations.get(PAUSED_REASON_ANNOTATION).cloned(),
        step_allowance: allowance,
        in_progress,
        queue,
        skipped,
        max_in_progress,
        can_start,
    }
}

/// How long the drain of a NodeClaim's node may take before pods are forced off: the
/// NodeClaim's own `terminationGracePeriod` (the termination finalizer applies it), else the sum
/// of its pods' `terminationGracePeriodSeconds` (30s each when unset; the node-upgrade design's
/// rule), saturating.
pub fn drain_timeout(claim: &NodeClaim, pods: &[&Arc<PodView>]) -> Duration {
    if let Some(grace) = &claim.spec.termination_grace_period {
        return grace.duration();
    }
    let secs = pods
        .iter()
        .map(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(DEFAULT_POD_GRACE)
                .max(0) as u64
        })
        .fold(0u64, u64::saturating_add);
    Duration::from_secs(secs)
}

/// The step a NodeClaim is in, if it is being replaced: it carries the replacement annotation.
/// `pods` is how many pods on its node the drain moves ([`StepInProgress::pods`]).
pub fn step_of(
    claim: &NodeClaim,
    claims: &[Arc<NodeClaim>],
    pods: usize,
) -> Option<StepInProgress> {
    let annotations = claim.metadata.annotations.as_ref()?;
    let replacement = annotations.get(REPLACEMENT_ANNOTATION)?;
    let replacement = (!replacement.is_empty()).then(|| replacement.clone());
    let started = annotations
        .get(STEP_STARTED_ANNOTATION)
        .and_then(|t| t.parse::<Timestamp>().ok());
    let phase = if claim.metadata.deletion_timestamp.is_some() {
        if conditions::is_true(claim.status_conditions(), DRAINED) {
            Phase::Terminating
        } else {
            Phase::Draining
        }
    } else {
        let registered = replacement.as_ref().is_some_and(|r| {
            claims.iter().any(|c| {
                c.metadata.name.as_deref() == Some(r.as_str())
                    && conditions::is_true(c.status_conditions(), REGISTERED)
            })
        });
        if registered {
            Phase::WaitingForInitialization
        } else {
            Phase::LaunchingReplacement
        }
    };
    Some(StepInProgress {
        nodeclaim: claim.metadata.name.clone().unwrap_or_default(),
        node: claim.status.as_ref().and_then(|s| s.node_name.clone()),
        replacement,
        phase,
        started,
        pods,
    })
}

/// Whether a NodeClaim belongs to a consolidation command (`crds::disruption`): `Some(Some(id))`
/// for a candidate of command `id`, `Some(None)` for the replacement it launches, `None` when
/// consolidation does not hold it.
fn consolidation_command(claim: &NodeClaim) -> Option<Option<&str>> {
    let annotations = claim.metadata.annotations.as_ref()?;
    let id = annotations.get(COMMAND_ANNOTATION)?;
    if annotations.contains_key(CONSOLIDATION_REPLACES) {
        return Some(None);
    }
    Some(Some(id.as_str()))
}

/// Why a drifted NodeClaim cannot be replaced now: the NodeClaim or one of its pods opts out of
/// disruption, or a PodDisruptionBudget covering one of its pods allows no disruption.
fn blocked(claim: &NodeClaim, pods: &[&Arc<PodView>], view: &View<'_>) -> Option<String> {
    if opts_out(claim.metadata.annotations.as_ref()) {
        return Some(
            Blocker::NodeOptsOut {
                object: "NodeClaim".into(),
            }
            .to_string(),
        );
    }
    pods.iter()
        .find_map(|pod| pod_blocker(pod, view.pdbs, view.now, false))
        .map(|b| b.to_string())
}

/// Running pods by node name (finished pods hold nothing).
pub fn pods_by_node(pods: &[Arc<PodView>]) -> BTreeMap<String, Vec<Arc<PodView>>> {
    let mut out: BTreeMap<String, Vec<Arc<PodView>>> = BTreeMap::new();
    for pod in pods {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            out.entry(node).or_default().push(Arc::clone(pod));
        }
    }
    out
}

#[cfg(test)]
mod tests;
