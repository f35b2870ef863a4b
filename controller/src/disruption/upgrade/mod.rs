//! Serial node upgrades (the node-upgrade design): per NodePool, replace drifted nodes one at a
//! time (more only when the NodePool's `Drifted` budgets allow), launching the replacement first
//! and draining the old node only once the replacement is initialized; a replacement that does
//! not initialize in time is deleted (rolled back) and the rollout pauses with the reason, so a
//! bad AMI stops after one node. Operators pause, resume and step through NodePool annotations
//! (see [`crds::upgrade`]).
//!
//! All step state lives on the NodeClaims and the NodePool, so a restarted controller picks up
//! the step in progress (or rolls it back) and never starts a second one.

pub mod plan;

use std::sync::Arc;
use std::time::Duration;

use crds::conditions::INITIALIZED;
use crds::labels::{INSTANCE_TYPE_LABEL, NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION};
use crds::upgrade::{
    HISTORY_ANNOTATION, Outcome, PAUSED_ANNOTATION, PAUSED_REASON_ANNOTATION,
    REPLACEMENT_ANNOTATION, REPLACES_ANNOTATION, STEP_ALLOWANCE_ANNOTATION,
    STEP_STARTED_ANNOTATION, StepRecord, push_history,
};
use crds::{NodeClaim, NodePool, StatusConditions, conditions};
use jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use rand::Rng;
use serde_json::json;

use crate::nodeclaim::lifecycle::{delete_claim, patch_metadata};
use crate::operator::Context;
use crate::operator::events::{EventType, reason};
use crate::operator::reconcile::ReconcileError;
use crate::provisioning::template;
use crate::scheduling::requirements::Requirement;
use crate::scheduling::resources::Resources;
use crate::scheduling::solver::NewClaim;
use crate::state::snapshot::nodepool_of;
use plan::{Candidate, Plan, StepInProgress, View};

/// How often every NodePool's rollout is looked at.
const TICK: Duration = Duration::from_secs(1);

/// Run the orchestrator until the task is aborted.
pub async fn run(ctx: Arc<Context>) {
    if ctx.state.wait_synced().await.is_err() {
        tracing::error!("upgrade orchestrator not started: the cluster state never synced");
        return;
    }
    loop {
        for pool in ctx.state.nodepools.state() {
            if pool.metadata.deletion_timestamp.is_some() {
                continue;
            }
            // A conflict means the cache was behind: the next tick sees the fresh objects.
            if let Err(e) = reconcile(&ctx, &pool).await
                && !e.is_conflict()
            {
                tracing::warn!(nodepool = ?pool.metadata.name, error = %e, "upgrade step");
            }
        }
        tokio::time::sleep(TICK).await;
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
        budget_active: &|b| plan::budget_active(b, now),
    })
}

async fn reconcile(ctx: &Context, pool: &NodePool) -> Result<(), ReconcileError> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let claims = claims_of(ctx, &name);
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
    for candidate in plan.queue.iter().take(plan.can_start) {
        start(ctx, pool, &claims, candidate, plan.paused).await?;
    }
    Ok(())
}

/// Replacements whose drifted NodeClaim is gone: the step succeeded. Drop the marker, then
/// record the step in the NodePool's history.
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
        patch_metadata(
            ctx,
            &replacement,
            json!({"resourceVersion": claim.metadata.resource_version,
                   "annotations": {REPLACES_ANNOTATION: null, STEP_STARTED_ANNOTATION: null}}),
        )
        .await?;
        let started = annotation(claim, STEP_STARTED_ANNOTATION);
        record(
            ctx,
            pool,
            StepRecord {
                nodeclaim: old.clone(),
                node: None,
                replacement: Some(replacement.clone()),
                outcome: Outcome::Succeeded,
                reason: None,
                started: started.clone().unwrap_or_default(),
                finished: ctx.clock.now().to_string(),
                seconds: seconds_since(ctx, started.as_deref()),
            },
        )
        .await?;
        pool_event(
            ctx,
            pool,
            EventType::Normal,
            format!("Upgrade step done: {old} replaced by {replacement}"),
        );
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
    let Some(replacement_name) = &step.replacement else {
        // An empty node: nothing to wait for.
        return drain(ctx, pool, old, Duration::ZERO).await;
    };
    let replacement = claims
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(replacement_name.as_str()));
    let elapsed = step
        .started
        .map(|s| ctx.clock.now().duration_since(s).unsigned_abs())
        .unwrap_or_default();
    match replacement {
        Some(r) if conditions::is_true(r.status_conditions(), INITIALIZED) => {
            let timeout = plan_for(ctx, pool)
                .queue
                .iter()
                .find(|c| c.nodeclaim == step.nodeclaim)
                .map(|c| c.drain_timeout)
                .unwrap_or_else(|| drain_timeout_of(ctx, pool, old));
            drain(ctx, pool, old, timeout).await
        }
        _ if elapsed > ctx.settings.upgrade_initialization_timeout => {
            roll_back(ctx, pool, old, replacement_name, replacement.map(|r| &**r)).await
        }
        Some(_) => Ok(()),
        None => {
            // Created by an earlier run that stopped before creating it, or deleted by the
            // lifecycle (launch failed): create it (again) under the same name.
            create_replacement(ctx, pool, old, replacement_name).await
        }
    }
}

/// Delete the drifted NodeClaim; its termination finalizer taints, drains (PDBs and
/// do-not-disrupt respected) and terminates it. Without a NodePool `terminationGracePeriod`,
/// the drain is bounded by `timeout` through the termination-timestamp annotation.
async fn drain(
    ctx: &Context,
    pool: &NodePool,
    old: &NodeClaim,
    timeout: Duration,
) -> Result<(), ReconcileError> {
    let name = old.metadata.name.clone().unwrap_or_default();
    let has_grace = pool.spec.template.spec.termination_grace_period.is_some();
    if !has_grace && annotation(old, NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION).is_none() {
        let deadline = ctx
            .clock
            .now()
            .checked_add(jiff::SignedDuration::try_from(timeout).unwrap_or_default())
            .unwrap_or_else(|_| ctx.clock.now());
        patch_metadata(
            ctx,
            &name,
            json!({"resourceVersion": old.metadata.resource_version,
                   "annotations": {NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION: deadline.to_string()}}),
        )
        .await?;
    }
    delete_claim(ctx, &name).await?;
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

fn drain_timeout_of(ctx: &Context, pool: &NodePool, old: &NodeClaim) -> Duration {
    let node = old.status.as_ref().and_then(|s| s.node_name.clone());
    let secs: i64 = ctx
        .state
        .pods
        .state()
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()) == node && node.is_some())
        .filter(|p| !crate::scheduling::pod::is_owned_by(p, "DaemonSet"))
        .map(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(30)
                .max(0)
        })
        .sum();
    pool.spec
        .template
        .spec
        .termination_grace_period
        .as_ref()
        .map(|d| d.duration())
        .unwrap_or(Duration::from_secs(secs as u64))
}

/// The replacement did not initialize in time: delete it, end the step as rolled back, and
/// pause the NodePool's rollout with the reason.
async fn roll_back(
    ctx: &Context,
    pool: &NodePool,
    old: &NodeClaim,
    replacement_name: &str,
    replacement: Option<&NodeClaim>,
) -> Result<(), ReconcileError> {
    let old_name = old.metadata.name.clone().unwrap_or_default();
    let state = match replacement {
        None => "was never created".to_string(),
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
    let why = format!(
        "replacement {replacement_name} for {old_name} did not initialize within {}s ({state}); rolled back",
        ctx.settings.upgrade_initialization_timeout.as_secs()
    );
    delete_claim(ctx, replacement_name).await?;
    let started = annotation(old, STEP_STARTED_ANNOTATION);
    patch_metadata(
        ctx,
        &old_name,
        json!({"resourceVersion": old.metadata.resource_version,
               "annotations": {REPLACEMENT_ANNOTATION: null, STEP_STARTED_ANNOTATION: null}}),
    )
    .await?;
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
    record(
        ctx,
        pool,
        StepRecord {
            nodeclaim: old_name.clone(),
            node: old.status.as_ref().and_then(|s| s.node_name.clone()),
            replacement: Some(replacement_name.to_string()),
            outcome: Outcome::RolledBack,
            reason: Some(why.clone()),
            started: started.clone().unwrap_or_default(),
            finished: ctx.clock.now().to_string(),
            seconds: seconds_since(ctx, started.as_deref()),
        },
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
        format!("{pool_name}-{}", random_suffix())
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
        record(
            ctx,
            pool,
            StepRecord {
                nodeclaim: candidate.nodeclaim.clone(),
                node: candidate.node.clone(),
                replacement: None,
                outcome: Outcome::Succeeded,
                reason: Some("empty node: deleted without a replacement".into()),
                started: now.clone(),
                finished: now,
                seconds: 0,
            },
        )
        .await?;
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
    create_replacement(ctx, pool, old, &replacement).await
}

/// Create the replacement NodeClaim `name` for `old`: the NodePool's current template (so it
/// is not drifted itself), sized for what `old` was sized for, on the instance types the node
/// class offers now that fit, cheapest first.
async fn create_replacement(
    ctx: &Context,
    pool: &NodePool,
    old: &NodeClaim,
    name: &str,
) -> Result<(), ReconcileError> {
    let class_name = &pool.spec.template.spec.node_class_ref.name;
    let Some(class) = ctx
        .state
        .nodeclasses
        .state()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(class_name.as_str()))
    else {
        return Ok(());
    };
    let types = ctx.cloud.instance_types(&class).await?;
    let Ok(mut requirements) = template::pool_requirements(pool) else {
        return Ok(());
    };
    let requests = Resources::from_list(&old.spec.resources.requests).unwrap_or_default();
    let mut fitting: Vec<(f64, Arc<crate::cloudprovider::InstanceType>)> = types
        .iter()
        .filter(|t| t.compatible(&requirements) && requests.fits_in(&t.allocatable))
        .filter_map(|t| {
            t.cheapest_offering(&requirements)
                .map(|o| (o.price, Arc::clone(t)))
        })
        .collect();
    fitting.sort_by(|a, b| a.0.total_cmp(&b.0));
    if fitting.is_empty() {
        tracing::warn!(nodepool = ?pool.metadata.name, nodeclaim = ?old.metadata.name, "no instance type fits the replacement");
        return Ok(());
    }
    requirements.add(Requirement::is_in(
        INSTANCE_TYPE_LABEL,
        fitting.iter().map(|(_, t)| t.name.clone()),
    ));
    let decision = NewClaim {
        nodepool: pool.metadata.name.clone().unwrap_or_default(),
        requirements,
        instance_types: fitting.into_iter().map(|(_, t)| t).collect(),
        requests,
        pods: vec![],
    };
    let mut claim = template::nodeclaim(pool, &decision, &ctx.settings.hash_versions);
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
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Append a finished step to the NodePool's history (guarded by its resourceVersion).
async fn record(ctx: &Context, pool: &NodePool, step: StepRecord) -> Result<(), ReconcileError> {
    let api: Api<NodePool> = Api::all(ctx.client.clone());
    let name = pool.metadata.name.clone().unwrap_or_default();
    let fresh = api.get(&name).await?;
    let history = push_history(
        fresh
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(HISTORY_ANNOTATION))
            .map(String::as_str),
        step,
    );
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {
            "resourceVersion": fresh.metadata.resource_version,
            "annotations": {HISTORY_ANNOTATION: history}}})),
    )
    .await?;
    Ok(())
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

fn seconds_since(ctx: &Context, started: Option<&str>) -> u64 {
    started
        .and_then(|s| s.parse::<Timestamp>().ok())
        .map(|s| ctx.clock.now().duration_since(s).as_secs().max(0) as u64)
        .unwrap_or(0)
}

/// Five lowercase alphanumerics, like the API server's generateName suffix.
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}
