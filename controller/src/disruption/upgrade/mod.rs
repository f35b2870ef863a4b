//! Serial node upgrades (the node-upgrade design): per NodePool, replace drifted nodes one at a
//! time (more only when the NodePool's `Drifted` budgets allow), launching the replacement first
//! and draining the old node only once the replacement is initialized; a replacement that does
//! not initialize in time is deleted (rolled back) and the rollout pauses with the reason, so a
//! bad AMI stops after one node. Operators pause, resume and step through NodePool annotations
//! (see [`crds::upgrade`]).
//!
//! All step state lives on the NodeClaims and the NodePool, so a restarted controller picks up
//! the step in progress (or rolls it back) and never starts a second one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crds::conditions::INITIALIZED;
use crds::history;
use crds::labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION;
use crds::upgrade::{
    PAUSED_ANNOTATION, PAUSED_REASON_ANNOTATION, REPLACEMENT_ANNOTATION, REPLACES_ANNOTATION,
    STEP_ALLOWANCE_ANNOTATION, STEP_STARTED_ANNOTATION,
};
use crds::{NodeClaim, NodePool, StatusConditions, conditions};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::nodeclaim::writes::{disrupt_by_name, disrupt_claim, generated_name, patch_metadata};
use crate::runtime::Context;
use crate::runtime::events::{EventType, reason};
use crate::runtime::reconcile::ReconcileError;
use karpenter_core::disruption::budgets::budget_active;
use karpenter_core::disruption::candidates::is_reschedulable;
use karpenter_core::disruption::consolidation;
use karpenter_core::disruption::upgrade::{self as plan, Candidate, Plan, StepInProgress, View};
use karpenter_core::provisioning::template;
use karpenter_core::scheduling::resources::Resources;
use karpenter_core::snapshot::nodepool_of;

/// The shortest drain before pods are forced off, whatever their grace periods add up to.
pub const MIN_DRAIN: Duration = Duration::from_secs(30);

/// Steps this orchestrator started whose marker the cache has not shown yet, by NodePool: no
/// other step starts in that pool until it does (a lagging cache must not start a second).
#[derive(Debug, Default)]
pub struct Unobserved(HashMap<String, String>);

impl Unobserved {
    /// Whether every step this orchestrator started shows in the cache. Until it does,
    /// consolidation must not decide from the cache: it would not count that step against the
    /// NodePool's budget, nor see its NodeClaim as already being disrupted.
    pub fn all_observed(&self) -> bool {
        self.0.is_empty()
    }
}

/// Look at every NodePool's rollout once: finish, advance or roll back the steps in progress
/// and start what the plan allows. The disruption orchestrator (`crate::disruption`) calls this
/// first on every tick, before consolidation.
pub async fn tick(ctx: &Context, unobserved: &mut Unobserved) {
    let pools = ctx.state.nodepools.state();
    // A NodePool being deleted is not reconciled: forget its unobserved step.
    unobserved.0.retain(|name, _| {
        pools.iter().any(|p| {
            p.metadata.name.as_deref() == Some(name.as_str())
                && p.metadata.deletion_timestamp.is_none()
        })
    });
    for pool in pools {
        if pool.metadata.deletion_timestamp.is_some() {
            continue;
        }
        // A conflict means the cache was behind: the next tick sees the fresh objects.
        if let Err(e) = reconcile(ctx, &pool, &mut unobserved.0).await
            && !e.is_conflict()
        {
            tracing::warn!(nodepool = ?pool.metadata.name, error = %e, "upgrade step");
        }
    }
}

/// The NodeClaims of a NodePool, from the cache.
fn claims_of(ctx: &Context, pool: &str) -> Vec<Arc<NodeClaim>> {
    ctx.state
        .nodeclaims
        .state()
        .into_iter()
        .filter(|c| nodepool_of(c.metadata.labels.as_ref()) == Some(pool))
        .collect()
}

/// The rollout plan of one NodePool now (what `kubectl karpenter upgrade status` shows too).
pub fn plan_for(ctx: &Context, pool: &NodePool) -> Plan {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let claims = claims_of(ctx, &name);
    let pods = ctx.state.pods.state();
    let pdbs = ctx.state.pdbs.state();
    let now = ctx.clock.now();
    plan::plan(&View {
        pool,
        claims: &claims,
        pods: &pods,
        pdbs: &pdbs,
        now,
        budget_active: &|b| budget_active(b, now),
    })
}

async fn reconcile(
    ctx: &Context,
    pool: &NodePool,
    unobserved: &mut HashMap<String, String>,
) -> Result<(), ReconcileError> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let claims = claims_of(ctx, &name);
    if let Some(started) = unobserved.get(&name) {
        let seen = claims.iter().any(|c| {
            c.metadata.name.as_deref() == Some(started.as_str())
                && annotation(c, REPLACEMENT_ANNOTATION).is_some()
        });
        let gone = !claims
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(started.as_str()));
        if seen || gone {
            unobserved.remove(&name);
        }
    }
    finish_steps(ctx, pool, &claims).await?;
    let plan = plan_for(ctx, pool);
    for skipped in &plan.skipped {
        if let Some(claim) = claims
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(skipped.nodeclaim.as_str()))
        {
            // The recorder drops repeats of the same message, so this is one Event per cause.
            ctx.recorder.about(
                &**claim,
                EventType::Normal,
                reason::UPGRADE_BLOCKED,
                format!("Upgrade skips this drifted node for now: {}", skipped.why),
            );
        }
    }
    for step in &plan.in_progress {
        advance(ctx, pool, &claims, step).await?;
    }
    if unobserved.contains_key(&name) {
        return Ok(());
    }
    if let Some(candidate) = plan.queue.iter().take(plan.can_start).next() {
        // One start per tick: the next waits until the cache shows this one.
        start(ctx, pool, &claims, candidate, plan.paused).await?;
        unobserved.insert(name, candidate.nodeclaim.clone());
    }
    Ok(())
}

/// Replacements whose drifted NodeClaim is gone: once the replacement is initialized, the step
/// succeeded (the old NodeClaim's removal is in the disruption history); say so on the NodePool,
/// then drop the marker. A
/// replacement that is itself being deleted (rolled back, interrupted) just loses its marker.
async fn finish_steps(
    ctx: &Context,
    pool: &NodePool,
    claims: &[Arc<NodeClaim>],
) -> Result<(), ReconcileError> {
    for claim in claims {
        let Some(old) = annotation(claim, REPLACES_ANNOTATION) else {
            continue;
        };
        if old.is_empty()
            || claims
                .iter()
                .any(|c| c.metadata.name.as_deref() == Some(&old))
        {
            continue;
        }
        let replacement = claim.metadata.name.clone().unwrap_or_default();
        let deleting = claim.metadata.deletion_timestamp.is_some();
        if !deleting && !conditions::is_true(claim.status_conditions(), INITIALIZED) {
            // The old node went away early (deleted by someone else): keep waiting for this
            // replacement; the provisioner and its liveness checks look after it.
            continue;
        }
        if !deleting {
            // The step's record is the old NodeClaim's removal, which its termination
            // finalizer wrote to the disruption history as it released it.
            pool_event(
                ctx,
                pool,
                EventType::Normal,
                format!("Upgrade step done: {old} replaced by {replacement}"),
            );
        }
        match patch_metadata(
            ctx,
            &replacement,
            json!({"resourceVersion": claim.metadata.resource_version,
                   "annotations": {REPLACES_ANNOTATION: null, STEP_STARTED_ANNOTATION: null}}),
        )
        .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Move a step along: (re)create a missing replacement, drain the old node once the
/// replacement is initialized, or roll back when it did not initialize in time.
async fn advance(
    ctx: &Context,
    pool: &NodePool,
    claims: &[Arc<NodeClaim>],
    step: &StepInProgress,
) -> Result<(), ReconcileError> {
    let Some(old) = claims
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(step.nodeclaim.as_str()))
    else {
        return Ok(());
    };
    if old.metadata.deletion_timestamp.is_some() {
        // Draining or terminating: the termination finalizer does the rest.
        return Ok(());
    }
    let Some(started) = step.started else {
        // A marker without a (readable) start time: restart the clock rather than never time
        // out.
        patch_metadata(
            ctx,
            &step.nodeclaim,
            json!({"resourceVersion": old.metadata.resource_version,
                   "annotations": {STEP_STARTED_ANNOTATION: ctx.clock.now().to_string()}}),
        )
        .await?;
        return Ok(());
    };
    let Some(replacement_name) = &step.replacement else {
        // An empty node: nothing to wait for (its removal is recorded as it goes).
        return drain(ctx, pool, old).await;
    };
    let replacement = claims
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(replacement_name.as_str()))
        .filter(|c| c.metadata.deletion_timestamp.is_none());
    // A start time in the future (clock skew) counts as now.
    let elapsed = ctx
        .clock
        .now()
        .duration_since(started)
        .max(jiff::SignedDuration::ZERO)
        .unsigned_abs();
    match replacement {
        Some(r) if conditions::is_true(r.status_conditions(), INITIALIZED) => {
            drain(ctx, pool, old).await
        }
        _ if elapsed > ctx.settings.upgrade_initialization_timeout => {
            let why = format!(
                "did not initialize within {}s",
                ctx.settings.upgrade_initialization_timeout.as_secs()
            );
            roll_back(
                ctx,
                pool,
                old,
                replacement_name,
                replacement.map(|r| &**r),
                &why,
            )
            .await
        }
        Some(_) => Ok(()),
        None => {
            // The cache may show the marker before the replacement created right after it:
            // ask the API server before deciding it is missing.
            let api: Api<NodeClaim> = Api::all(ctx.client.clone());
            if let Some(found) = api.get_opt(replacement_name).await?
                && found.metadata.deletion_timestamp.is_none()
            {
                return Ok(());
            }
            // Never created (the controller stopped first), or deleted since (its launch
            // failed): create one under a fresh name, so a launch is not replayed under an
            // idempotency token that already failed.
            let fresh = generated_name(pool.metadata.name.as_deref().unwrap_or_default());
            patch_metadata(
                ctx,
                &step.nodeclaim,
                json!({"resourceVersion": old.metadata.resource_version,
                       "annotations": {REPLACEMENT_ANNOTATION: fresh}}),
            )
            .await?;
            match create_replacement(ctx, pool, old, &fresh).await? {
                Ok(()) => Ok(()),
                Err(why) => roll_back(ctx, pool, old, &fresh, None, &why).await,
            }
        }
    }
}

/// Delete the drifted NodeClaim; its termination finalizer taints, drains (PDBs and
/// do-not-disrupt respected) and terminates it. Unless the NodeClaim has its own
/// `terminationGracePeriod`, the drain is bounded through the termination-timestamp annotation,
/// written just before the delete: pods are evicted normally for the drain timeout (the sum of
/// the node's pods' grace periods, at least [`MIN_DRAIN`]), and only then forced off, each with
/// its full grace period.
async fn drain(ctx: &Context, pool: &NodePool, old: &NodeClaim) -> Result<(), ReconcileError> {
    let name = old.metadata.name.clone().unwrap_or_default();
    let node = old.status.as_ref().and_then(|s| s.node_name.clone());
    let all_pods = ctx.state.pods.state();
    let by_node = plan::pods_by_node(&all_pods);
    let pods: Vec<&Arc<karpenter_core::pod_view::PodView>> = node
        .as_deref()
        .and_then(|n| by_node.get(n))
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    let timeout = plan::drain_timeout(old, &pods).max(MIN_DRAIN);
    let mut as_read = old.clone();
    if old.spec.termination_grace_period.is_none() {
        let longest_grace = pods
            .iter()
            .filter_map(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .max()
            .unwrap_or(0)
            .max(0) as u64;
        let total = timeout.saturating_add(Duration::from_secs(longest_grace));
        // A deadline that cannot be written (overflow) is left out: the drain then waits as
        // long as it takes, which is the safe side.
        let deadline = jiff::SignedDuration::try_from(total)
            .ok()
            .and_then(|d| ctx.clock.now().checked_add(d).ok());
        if let Some(deadline) = deadline {
            let written = patch_metadata(
                ctx,
                &name,
                json!({"resourceVersion": old.metadata.resource_version,
                       "annotations": {NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION: deadline.to_string()}}),
            )
            .await?;
            as_read.metadata.resource_version = written;
        }
    }
    // Counted only when this call started the deletion: a repeated step on a stale cache (or
    // another replica) finds the NodeClaim changed and counts nothing.
    let why = format!("Upgrading: replacing drifted NodeClaim {name}");
    if disrupt_claim(ctx, &as_read, history::reason::DRIFTED, &why).await? {
        let policy = Some(pool.spec.disruption.consolidation_policy);
        let drifted = crate::runtime::metrics::reason::DRIFTED;
        ctx.metrics.nodeclaim_disrupted_with(old, drifted, policy);
    }
    ctx.recorder.about(
        old,
        EventType::Normal,
        reason::DISRUPTION_TERMINATING,
        format!(
            "Upgrading: draining drifted NodeClaim {name} (drain timeout {}s)",
            timeout.as_secs()
        ),
    );
    pool_event(
        ctx,
        pool,
        EventType::Normal,
        format!("Upgrade step: draining {name}"),
    );
    Ok(())
}

/// End a step whose replacement failed (`why`): pause the NodePool's rollout with the reason
/// first (so nothing else starts, whatever happens next), delete the replacement, record the
/// step as rolled back, and only then clear the old NodeClaim's markers.
async fn roll_back(
    ctx: &Context,
    pool: &NodePool,
    old: &NodeClaim,
    replacement_name: &str,
    replacement: Option<&NodeClaim>,
    why: &str,
) -> Result<(), ReconcileError> {
    let old_name = old.metadata.name.clone().unwrap_or_default();
    let state = match replacement {
        None => "not running".to_string(),
        Some(r) => {
            let c = |t: &str| crds::conditions::status(r.status_conditions(), t).as_str();
            format!(
                "Launched={}, Registered={}, Initialized={}",
                c(crds::conditions::LAUNCHED),
                c(crds::conditions::REGISTERED),
                c(INITIALIZED)
            )
        }
    };
    let why = format!("replacement {replacement_name} for {old_name} {why} ({state}); rolled back");
    let api: Api<NodePool> = Api::all(ctx.client.clone());
    api.patch(
        pool.metadata.name.as_deref().unwrap_or_default(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            PAUSED_ANNOTATION: "true",
            PAUSED_REASON_ANNOTATION: why,
            STEP_ALLOWANCE_ANNOTATION: null,
        }}})),
    )
    .await?;
    disrupt_by_name(ctx, replacement_name, history::reason::ROLLED_BACK, &why).await?;
    let record = crate::nodeclaim::history::rollback_record(
        ctx,
        old,
        history::reason::DRIFTED,
        replacement_name,
        replacement,
        &why,
    );
    crate::nodeclaim::history::append(ctx, record).await?;
    patch_metadata(
        ctx,
        &old_name,
        json!({"annotations": {REPLACEMENT_ANNOTATION: null, STEP_STARTED_ANNOTATION: null}}),
    )
    .await?;
    tracing::warn!(nodepool = ?pool.metadata.name, nodeclaim = %old_name, why = %why, "upgrade step rolled back; rollout paused");
    ctx.recorder.about(
        old,
        EventType::Warning,
        reason::UPGRADE_ROLLED_BACK,
        why.clone(),
    );
    pool_event(
        ctx,
        pool,
        EventType::Warning,
        format!("Upgrade paused: {why}"),
    );
    Ok(())
}

/// Start a step for a drifted NodeClaim: take one step from the allowance when paused, mark the
/// NodeClaim with its replacement's name (chosen now, so a restart creates the same one), then
/// create the replacement; an empty node is drained at once, with nothing to replace it.
async fn start(
    ctx: &Context,
    pool: &NodePool,
    claims: &[Arc<NodeClaim>],
    candidate: &Candidate,
    paused: bool,
) -> Result<(), ReconcileError> {
    let pool_name = pool.metadata.name.clone().unwrap_or_default();
    let Some(old) = claims
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(candidate.nodeclaim.as_str()))
    else {
        return Ok(());
    };
    if paused {
        let left = crds::upgrade::step_allowance(
            pool.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(STEP_ALLOWANCE_ANNOTATION))
                .map(String::as_str),
        );
        let api: Api<NodePool> = Api::all(ctx.client.clone());
        api.patch(
            &pool_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                "resourceVersion": pool.metadata.resource_version,
                "annotations": {STEP_ALLOWANCE_ANNOTATION: left.saturating_sub(1).to_string()}}})),
        )
        .await?;
    }
    let replacement = if candidate.pods == 0 {
        String::new()
    } else {
        generated_name(&pool_name)
    };
    let now = ctx.clock.now().to_string();
    patch_metadata(
        ctx,
        &candidate.nodeclaim,
        json!({"resourceVersion": old.metadata.resource_version,
               "annotations": {REPLACEMENT_ANNOTATION: replacement, STEP_STARTED_ANNOTATION: now}}),
    )
    .await?;
    if replacement.is_empty() {
        return Ok(());
    }
    pool_event(
        ctx,
        pool,
        EventType::Normal,
        format!(
            "Upgrade step: replacing drifted {} ({} pods) with {replacement}",
            candidate.nodeclaim, candidate.pods
        ),
    );
    match create_replacement(ctx, pool, old, &replacement).await? {
        Ok(()) => Ok(()),
        Err(why) => {
            // The cache's copy of `old` predates the marker just written: re-read it.
            let api: Api<NodeClaim> = Api::all(ctx.client.clone());
            let fresh = api.get(&candidate.nodeclaim).await?;
            roll_back(ctx, pool, &fresh, &replacement, None, &why).await
        }
    }
}

/// The replacement for `old` as the provisioner would launch it for the pods on `old`'s node:
/// the solver places those pods on the NodePool's current template alone, so the replacement
/// keeps the zones, volumes and affinities they need (the node-upgrade design: "match the
/// scheduling constraints and the resource requirements of the pods on the drifted nodes").
/// `None` when the solver cannot make one NodeClaim of them (the caller then sizes the
/// replacement from `old`'s requests).
async fn solver_replacement(ctx: &Context, pool: &NodePool, old: &NodeClaim) -> Option<NodeClaim> {
    let snap = Arc::new(ctx.state.snapshot());
    let node = old.status.as_ref().and_then(|s| s.node_name.clone())?;
    let pods: Vec<Arc<karpenter_core::pod_view::PodView>> = snap
        .pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .filter(|p| is_reschedulable(p))
        .cloned()
        .collect();
    let listings = crate::provisioning::list_instance_types(ctx, &snap).await;
    let settings = consolidation::Settings {
        now: ctx.clock.now(),
        spot_to_spot: false,
        hash_versions: ctx.settings.hash_versions.clone(),
        min_values_policy: ctx.settings.min_values_policy,
    };
    let pool_name = pool.metadata.name.clone().unwrap_or_default();
    let planned = tokio::task::spawn_blocking(move || {
        let mut sim = consolidation::Simulator::new(&snap, &listings, &settings);
        sim.replacement_for(&pods)
    })
    .await
    .ok()?;
    match planned {
        Ok(Some(p)) if p.decision.nodepool == pool_name => Some(p.nodeclaim),
        Ok(_) => None,
        Err(why) => {
            tracing::info!(nodeclaim = ?old.metadata.name, why = %why,
                "sizing the upgrade replacement from the old NodeClaim's requests");
            None
        }
    }
}

/// Create the replacement NodeClaim `name` for `old`: the NodePool's current template (so it
/// is not drifted itself), computed by the solver from the pods on `old`'s node
/// ([`solver_replacement`]), or else sized for what `old` was sized for, on the instance types
/// the node class offers now that fit, cheapest first. `Ok(Err(why))` when no replacement can
/// be made (no node class, no instance type fits): the step rolls back at once with that
/// reason.
///
/// Errors: API or cloud failures (retried).
async fn create_replacement(
    ctx: &Context,
    pool: &NodePool,
    old: &NodeClaim,
    name: &str,
) -> Result<Result<(), String>, ReconcileError> {
    let class_ref = &pool.spec.template.spec.node_class_ref;
    let Some(class) = ctx
        .state
        .nodeclasses
        .state()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(class_ref.name.as_str()))
    else {
        return Ok(Err(format!(
            "could not be created: {} {:?} not found",
            class_ref.kind, class_ref.name
        )));
    };
    let types = ctx.cloud.instance_types(&class).await?;
    let requirements = match template::pool_requirements(pool) {
        Ok(r) => r,
        Err(e) => return Ok(Err(format!("could not be created: {e}"))),
    };
    let requests = Resources::from_list(&old.spec.resources.requests).unwrap_or_default();
    let nodepool = pool.metadata.name.clone().unwrap_or_default();
    let decision = match template::sized_claim(&nodepool, requirements, requests, &types) {
        Ok(d) => d,
        Err(template::SizedClaimError::NoFit(requests)) => {
            return Ok(Err(format!(
                "could not be created: no instance type the NodePool allows fits {requests}"
            )));
        }
        Err(e) => return Ok(Err(format!("could not be created: {e}"))),
    };
    let mut claim = match solver_replacement(ctx, pool, old).await {
        Some(claim) => claim,
        None => template::nodeclaim(pool, &decision, &ctx.settings.hash_versions),
    };
    claim.metadata.generate_name = None;
    claim.metadata.name = Some(name.to_string());
    let annotations = claim
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(
        REPLACES_ANNOTATION.into(),
        old.metadata.name.clone().unwrap_or_default(),
    );
    if let Some(started) = annotation(old, STEP_STARTED_ANNOTATION) {
        annotations.insert(STEP_STARTED_ANNOTATION.into(), started);
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    match api.create(&PostParams::default(), &claim).await {
        Ok(created) => {
            ctx.metrics
                .nodeclaim_created(&created, crate::runtime::metrics::reason::DRIFTED);
            Ok(Ok(()))
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Ok(())),
        Err(e) => Err(e.into()),
    }
}

fn pool_event(ctx: &Context, pool: &NodePool, type_: EventType, message: String) {
    ctx.recorder.about(pool, type_, reason::UPGRADE, message);
}

fn annotation(claim: &NodeClaim, key: &str) -> Option<String> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
}
