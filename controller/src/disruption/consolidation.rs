//! Consolidation's executor (upstream `disruption/queue.go`, `validation.go`,
//! `nodeclaim/disruption/consolidation.go`, `nodeclaim/podevents`): keeps each NodeClaim's
//! `status.lastPodEventTime` and `Consolidatable` condition, asks
//! `karpenter_core::disruption::consolidation::decide` for a command, reports what the pass
//! found as Events and metrics, carries the command out only when the same command is decided
//! again `Settings::consolidation_validation_delay` (15 s) later, and drives it to the end.
//!
//! A command's state lives in annotations (`crds::disruption`), so a restarted controller finds
//! it: candidates are annotated and their nodes tainted `karpenter.sh/disrupted:NoSchedule`;
//! a delete deletes them at once; a replace creates the replacement, waits until it is
//! initialized and only then deletes the candidates, or rolls back (deletes the replacement,
//! clears the annotations and taints) when it does not initialize within
//! `Settings::upgrade_initialization_timeout` or goes away.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crds::conditions::{CONSOLIDATABLE, INITIALIZED};
use crds::disruption::{
    COMMAND_ANNOTATION, REASON_ANNOTATION, REPLACEMENT_ANNOTATION, REPLACES_ANNOTATION,
    STARTED_ANNOTATION,
};
use crds::history::{CANDIDATES_ANNOTATION, reason::ROLLED_BACK};
use crds::{DisruptionReason, NodeClaim, StatusConditions, conditions};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_core::disruption::candidates::{self, Candidate, consolidatable_at};
use karpenter_core::disruption::command::{self, Step};
use karpenter_core::disruption::consolidation::{
    self as decide, Action, Command, Decision, Method, Settings,
};
use karpenter_core::snapshot::{Snapshot, annotation, nodepool_of};
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::marks;
use crate::nodeclaim::history;
use crate::nodeclaim::writes::{
    disrupt_by_name, disrupt_claim, generated_name, patch_metadata, set_condition,
};
use crate::runtime::Context;
use crate::runtime::events::{
    DEFAULT_DEDUPE, EventSpec, EventType, UNCONSOLIDATABLE_DEDUPE, reason, reference,
};
use crate::runtime::feature_gates::FeatureGate;
use crate::runtime::metrics;

pub use karpenter_core::disruption::consolidation::{MULTI_NODE_TIMEOUT, SINGLE_NODE_TIMEOUT};

/// What identifies a decision across passes: the candidates and the replacement's options.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fingerprint {
    candidates: Vec<String>,
    replacement: Option<Vec<String>>,
}

impl Fingerprint {
    fn of(command: &Command) -> Fingerprint {
        Fingerprint {
            candidates: command
                .candidates
                .iter()
                .map(|c| c.name().to_string())
                .collect(),
            replacement: match &command.action {
                Action::Delete => None,
                Action::Replace(r) => Some(
                    r.planned
                        .decision
                        .instance_types
                        .iter()
                        .map(|t| t.name.clone())
                        .collect(),
                ),
            },
        }
    }
}

/// Consolidation's memory between passes (nothing here is needed for correctness after a
/// restart: pod events start counting again, and a pending decision is decided again).
#[derive(Debug, Default)]
pub struct Consolidation {
    /// Each NodeClaim's node's pod-event count (`ClusterState::pod_events`) at the last pass.
    pod_events: HashMap<String, u64>,
    /// The decision waiting for validation, and when it was made (on the context's clock).
    pending: Option<(Timestamp, Fingerprint)>,
}

impl Consolidation {
    /// One consolidation pass. Returns how soon to look again: at once (`None`) while a command
    /// is in progress or was just started (upstream re-runs immediately), when the decision
    /// waiting for validation is due, or after `Settings::disruption_poll` when idle.
    pub async fn tick(&mut self, ctx: &Context) -> Option<Duration> {
        let idle = Some(ctx.settings.disruption_poll);
        let mut snap = ctx.state.snapshot();
        let now = ctx.clock.now();
        // This pass decides with the pod events it just wrote, which the cache may not show yet.
        for written in self.pod_events(ctx, &snap, now).await {
            if let Some(c) = snap
                .nodeclaims
                .iter_mut()
                .find(|c| c.metadata.name == written.metadata.name)
            {
                *c = Arc::new(written);
            }
        }
        let snap = Arc::new(snap);
        sweep_stale_taints(ctx, &snap).await;
        if advance_commands(ctx, &snap, now).await {
            self.pending = None;
            return None;
        }
        let listings = crate::provisioning::list_instance_types(ctx, &snap).await;
        let settings = Settings {
            now,
            spot_to_spot: ctx
                .settings
                .feature_gates
                .enabled(FeatureGate::SpotToSpotConsolidation),
            hash_versions: ctx.settings.hash_versions.clone(),
            min_values_policy: ctx.settings.min_values_policy,
        };
        let started = Instant::now();
        let decision = {
            let snap = Arc::clone(&snap);
            match tokio::task::spawn_blocking(move || decide::decide(&snap, &listings, &settings))
                .await
            {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(error = %e, "consolidation decision failed");
                    return idle;
                }
            }
        };
        ctx.metrics
            .scheduling_simulated(metrics::DISRUPTION, started.elapsed());
        self.report(ctx, &snap, &decision);
        let Some(command) = decision.command else {
            self.pending = None;
            return idle;
        };
        let fingerprint = Fingerprint::of(&command);
        let delay = ctx.settings.consolidation_validation_delay;
        // How long the pending decision has waited, on the clock (a decision "made in the
        // future", by a clock that was moved back, has waited nothing).
        let waited = |at: &Timestamp| {
            Duration::try_from(ctx.clock.now().duration_since(*at)).unwrap_or(Duration::ZERO)
        };
        match &self.pending {
            Some((at, f)) if *f == fingerprint && waited(at) >= delay => {
                self.pending = None;
                if let Err(e) = start(ctx, &snap, &command).await {
                    tracing::warn!(error = %e, "starting a consolidation command failed");
                }
                None
            }
            Some((at, f)) if *f == fingerprint => Some(delay.saturating_sub(waited(at))),
            _ => {
                tracing::info!(method = command.method.as_str(), nodeclaims = ?fingerprint.candidates,
                    replacement = ?fingerprint.replacement, savings = command.savings(),
                    "consolidation decided; validating");
                self.pending = Some((ctx.clock.now(), fingerprint));
                Some(delay)
            }
        }
    }

    /// Metrics and Events of a pass: eligible nodes, allowed disruptions, timeouts, and why
    /// candidates and blocked nodes stay.
    fn report(&self, ctx: &Context, snap: &Snapshot, d: &Decision) {
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

    /// Upstream's pod-event tracking: when a pod arrived on or left a NodeClaim's node since the
    /// last pass (counted by the pod cache as it applies each change, so a pod that came and
    /// went between two passes counts too), its `status.lastPodEventTime` becomes now (so
    /// `consolidateAfter` counts from the last change); and its `Consolidatable` condition
    /// follows `consolidateAfter`. Returns the NodeClaims whose pod event it wrote, as written.
    async fn pod_events(
        &mut self,
        ctx: &Context,
        snap: &Snapshot,
        now: Timestamp,
    ) -> Vec<NodeClaim> {
        let mut written = Vec::new();
        let events = &ctx.state.pod_events;
        let nodes: BTreeSet<&str> = snap
            .nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        events.retain(|n| nodes.contains(n));
        let pools: HashMap<&str, _> = snap
            .nodepools
            .iter()
            .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
            .collect();
        let mut seen = HashMap::new();
        for claim in &snap.nodeclaims {
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(pool) = nodepool_of(claim.metadata.labels.as_ref()).and_then(|p| pools.get(p))
            else {
                continue;
            };
            let name = claim.name_any();
            let node = claim.status.as_ref().and_then(|s| s.node_name.as_deref());
            let count = node.map_or(0, |n| events.count(n));
            let before = self.pod_events.get(&name).copied();
            let changed = before.is_some_and(|c| c != count);
            let mut updated = (**claim).clone();
            if changed {
                updated
                    .status
                    .get_or_insert_with(Default::default)
                    .last_pod_event_time = Some(Time(now));
            }
            let consolidatable = consolidatable_at(&updated, pool).is_some_and(|at| at <= now);
            let initialized = conditions::is_true(claim.status_conditions(), INITIALIZED);
            let result = if changed {
                write_pod_event(ctx, claim, &updated, consolidatable && initialized).await
            } else if initialized {
                set_condition(ctx, claim, |set| {
                    if consolidatable {
                        set.set_true(CONSOLIDATABLE)
                    } else {
                        set.set_false(CONSOLIDATABLE, "NotConsolidatable", "")
                    }
                })
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
            } else {
                Ok(())
            };
            match result {
                // A pod event not written is written at the next pass, not lost.
                Err(e) if changed => {
                    tracing::debug!(nodeclaim = %name, error = %e, "writing pod event");
                    seen.insert(name, before.unwrap_or(count));
                }
                Err(e) => {
                    tracing::debug!(nodeclaim = %name, error = %e, "writing Consolidatable");
                    seen.insert(name, count);
                }
                Ok(()) => {
                    if changed {
                        written.push(updated);
                    }
                    seen.insert(name, count);
                }
            }
        }
        self.pod_events = seen;
        written
    }
}

/// Write a pod event: `lastPodEventTime` and the `Consolidatable` condition in one status patch.
async fn write_pod_event(
    ctx: &Context,
    before: &NodeClaim,
    after: &NodeClaim,
    consolidatable: bool,
) -> Result<(), String> {
    let mut after = after.clone();
    let mut set = after.condition_set(ctx.clock.now());
    if consolidatable {
        set.set_true(CONSOLIDATABLE);
    } else {
        set.set_false(CONSOLIDATABLE, "NotConsolidatable", "");
    }
    crate::nodeclaim::writes::write_status(ctx, before, &after)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn metric_reason(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Empty => metrics::reason::EMPTY,
        DisruptionReason::Underutilized => metrics::reason::UNDERUTILIZED,
        DisruptionReason::Drifted => metrics::reason::DRIFTED,
    }
}

/// Start a validated command: annotate and taint the candidates, then create the replacement
/// or delete the candidates.
///
/// Errors: an API failure; candidates annotated before it are rolled back.
async fn start(ctx: &Context, snap: &Snapshot, command: &Command) -> Result<(), kube::Error> {
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
            abandon(ctx, snap, &id, &marked).await;
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
                terminate(
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
            let mut claim = r.planned.nodeclaim.clone();
            claim.metadata.generate_name = None;
            claim.metadata.name = Some(replacement.clone());
            let annotations = claim
                .metadata
                .annotations
                .get_or_insert_with(Default::default);
            annotations.insert(COMMAND_ANNOTATION.into(), id.clone());
            annotations.insert(REPLACES_ANNOTATION.into(), names.join(","));
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
                    abandon(ctx, snap, &id, &marked).await;
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Delete a candidate through the termination path (drain, then terminate), with the
/// `DisruptionTerminating` Event, counted once.
async fn terminate(
    ctx: &Context,
    snap: &Snapshot,
    name: &str,
    reason: DisruptionReason,
    message: &str,
) -> Result<(), kube::Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let Some(fresh) = api.get_opt(name).await? else {
        return Ok(());
    };
    if disrupt_claim(ctx, &fresh, reason.as_str(), message).await? {
        let policy = snap
            .nodepools
            .iter()
            .find(|p| Some(p.name_any().as_str()) == nodepool_of(fresh.metadata.labels.as_ref()))
            .map(|p| p.spec.disruption.consolidation_policy);
        ctx.metrics
            .nodeclaim_disrupted_with(&fresh, metric_reason(reason), policy);
        ctx.recorder.about(
            &fresh,
            EventType::Normal,
            reason::DISRUPTION_TERMINATING,
            message.to_string(),
        );
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

/// Abandon command `id` on the NodeClaims `names`: remove its annotations (where they still
/// name this command) and then the disrupted taint from each node no disruption holds any
/// more; every change read live and retried until it holds ([`marks`]). A change that still
/// fails is logged, and the next pass finds what is left: a half-started command is abandoned
/// again ([`advance`]), a leaked taint is swept ([`sweep_stale_taints`]).
async fn abandon(ctx: &Context, snap: &Snapshot, id: &str, names: &[String]) {
    for name in names {
        let claim = match marks::clear_command(ctx, name, id).await {
            Ok(Some(claim)) => claim,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(command = %id, nodeclaim = %name, error = %e, "clearing a consolidation command");
                continue;
            }
        };
        if candidates::is_held(&claim) {
            continue;
        }
        let Some(node) = node_name(snap, &claim) else {
            continue;
        };
        if let Err(e) = marks::taint(ctx, &node, false).await {
            tracing::warn!(command = %id, node = %node, error = %e, "removing the disrupted taint");
        }
    }
}

/// The name of `claim`'s node: its status, else the node of its providerID in `snap`.
fn node_name(snap: &Snapshot, claim: &NodeClaim) -> Option<String> {
    let status = claim.status.as_ref()?;
    if let Some(n) = &status.node_name {
        return Some(n.clone());
    }
    let pid = status.provider_id.as_deref()?;
    snap.nodes
        .iter()
        .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(pid))
        .and_then(|n| n.metadata.name.clone())
}

/// Remove the disrupted taints nothing holds any more
/// ([`candidates::stale_disrupted_taints`]), each after reading its NodeClaim again: the
/// cache may show a command's taint before the annotations written just before it.
async fn sweep_stale_taints(ctx: &Context, snap: &Snapshot) {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for (node, claim) in candidates::stale_disrupted_taints(snap) {
        match api.get_opt(&claim).await {
            Ok(Some(live))
                if live.metadata.deletion_timestamp.is_none() && !candidates::is_held(&live) => {}
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(nodeclaim = %claim, error = %e, "reading a NodeClaim before sweeping its node's taint");
                continue;
            }
        }
        match marks::taint(ctx, &node, false).await {
            Ok(_) => tracing::info!(node = %node, nodeclaim = %claim,
                "removed a karpenter.sh/disrupted taint no disruption holds"),
            Err(e) => tracing::warn!(node = %node, error = %e, "removing a stale disrupted taint"),
        }
    }
}

/// Whether the node of candidate `claim` carries the disrupted taint: in `snap`, else as the
/// API server has it now (the cache may not show a taint just written). No node: `false`.
///
/// Errors: the API failure of the live read.
async fn candidate_tainted(
    ctx: &Context,
    snap: &Snapshot,
    claim: &NodeClaim,
) -> Result<bool, kube::Error> {
    let Some(node) = node_name(snap, claim) else {
        return Ok(false);
    };
    let cached = snap
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node.as_str()));
    if cached.is_some_and(|n| marks::has_taint(n)) {
        return Ok(true);
    }
    marks::is_tainted(ctx, &node).await
}

/// One command found in the cluster: its candidates and its replacement, if any.
type InFlight = (Vec<Arc<NodeClaim>>, Option<Arc<NodeClaim>>);

/// Drive every command found in the cluster one step. Returns whether any is in progress.
async fn advance_commands(ctx: &Context, snap: &Snapshot, now: Timestamp) -> bool {
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
            if !candidate_tainted(ctx, snap, c).await? {
                tracing::warn!(command = %id, nodeclaim = %c.name_any(),
                    "consolidation command found half-started (its node is not tainted); abandoning it");
                abandon(ctx, snap, id, &names).await;
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
                terminate(ctx, snap, &c.name_any(), reason, &message).await?;
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
            abandon(ctx, snap, id, &names).await;
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
