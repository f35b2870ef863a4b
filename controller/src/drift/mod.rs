//! The drift controller (upstream core `nodeclaim/disruption`): runs the drift checks of
//! `karpenter_core::lifecycle::drift` on each NodeClaim when it, its NodePool or its node class
//! changes (and every [`DRIFT_POLL`] for what only the cloud sees) and writes the `Drifted`
//! condition; and the drift hash stamps on NodePools, EC2NodeClasses and NodeClaims
//! ([`stamp`]). Drifted nodes are replaced by `crate::disruption::upgrade`.

pub mod stamp;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crds::conditions::{self, DRIFTED};
use crds::{NodeClaim, NodePool, StatusConditions};
use futures::StreamExt;
use kube::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;

use crate::nodeclaim::writes::set_condition;
use crate::runtime::Context;
use crate::runtime::events::{EventType, reason};
use crate::runtime::reconcile::{ReconcileError, affected_by, drive};
use karpenter_core::cloud::CloudError;
use karpenter_core::lifecycle::drift::{self, Inputs, Lookup, Verdict};
use karpenter_core::snapshot::nodepool_of;

/// Every NodeClaim is re-checked at least this often, for changes only the cloud sees (upstream:
/// 5 minutes). Changes to its NodePool or node class are seen at once through watches.
pub const DRIFT_POLL: Duration = Duration::from_secs(300);

/// Run the drift controller until the task is aborted: NodeClaims are checked when they, their
/// NodePool or their node class change, and every [`DRIFT_POLL`].
pub async fn run(ctx: Arc<Context>) {
    // Checking before the caches hold every NodePool and node class would clear real drift.
    if ctx.state.wait_synced().await.is_err() {
        tracing::error!("drift controller not started: the cluster state never synced");
        return;
    }
    let seen = Mutex::new(HashMap::new());
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    let controller = Controller::new(claims, watcher::Config::default());
    // Triggered by the caches reconcile reads from, so a change is never checked against an
    // older copy of its NodePool or node class.
    let pool_changes = ctx
        .state
        .nodepool_changes
        .subscribe()
        .filter(move |pool| futures::future::ready(relevant_change(&seen, pool)));
    let pool_triggers = affected_by(pool_changes, controller.store(), |pool, claim| {
        pool.metadata.name.is_some()
            && nodepool_of(claim.metadata.labels.as_ref()) == pool.metadata.name.as_deref()
    });
    let class_triggers = affected_by(
        ctx.state.nodeclass_changes.subscribe(),
        controller.store(),
        |class, claim| class.metadata.name.as_deref() == Some(&claim.spec.node_class_ref.name),
    );
    let controller = controller
        .reconcile_on(pool_triggers)
        .reconcile_on(class_triggers);
    drive(controller, reconcile, ctx).await;
}

async fn reconcile(claim: Arc<NodeClaim>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    if claim.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(pool_name) = nodepool_of(claim.metadata.labels.as_ref()) else {
        return Ok(Action::await_change());
    };
    let Some(pool) = ctx
        .state
        .nodepools
        .state()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(pool_name))
    else {
        // Its NodePool is gone: ownership deletes the NodeClaim.
        return Ok(Action::requeue(DRIFT_POLL));
    };
    let class_name = &claim.spec.node_class_ref.name;
    let class = ctx
        .state
        .nodeclasses
        .state()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(class_name.as_str()));
    let launched = conditions::is_true(claim.status_conditions(), conditions::LAUNCHED);
    let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.clone());
    // Cloud lookups that fail leave the checks that need them as they were (no flapping).
    let instance = match provider_id.filter(|_| launched) {
        Some(pid) => match ctx.cloud.get(&pid).await {
            Ok(i) => Lookup::Found(i),
            // Garbage collection deals with NodeClaims whose instance is gone.
            Err(e @ CloudError::NodeClaimNotFound(_)) => Lookup::Unavailable(e.to_string()),
            Err(e) => Lookup::Unavailable(format!("describing the instance: {e}")),
        },
        None => Lookup::NotAsked,
    };
    let types = match (&class, launched) {
        (Some(c), true) => match ctx.cloud.instance_types(c).await {
            Ok(t) => Lookup::Found(t),
            Err(e) => Lookup::Unavailable(format!("listing instance types: {e}")),
        },
        _ => Lookup::NotAsked,
    };
    let verdict = drift::detect(&Inputs {
        claim: &claim,
        pool: &pool,
        node_class: class.as_deref(),
        instance: match &instance {
            Lookup::Found(i) => Lookup::Found(i),
            Lookup::Unavailable(why) => Lookup::Unavailable(why.clone()),
            Lookup::NotAsked => Lookup::NotAsked,
        },
        instance_types: match &types {
            Lookup::Found(t) => Lookup::Found(t.as_slice()),
            Lookup::Unavailable(why) => Lookup::Unavailable(why.clone()),
            Lookup::NotAsked => Lookup::NotAsked,
        },
        versions: &ctx.settings.hash_versions,
    });
    apply(&ctx, &claim, verdict).await?;
    Ok(Action::requeue(poll_with_jitter()))
}

/// [`DRIFT_POLL`] plus up to 10% so that NodeClaims created together are not all checked (and
/// their instances described) in the same second.
fn poll_with_jitter() -> Duration {
    use rand::Rng;
    let spread = DRIFT_POLL.as_millis() as u64 / 10;
    DRIFT_POLL + Duration::from_millis(rand::rng().random_range(0..=spread))
}

/// Whether a NodePool change can change drift: a new NodePool (uid), a new generation (spec) or
/// new annotations (the hash stamps). Status updates (counters every few seconds) are not.
fn relevant_change(seen: &Mutex<HashMap<String, String>>, pool: &NodePool) -> bool {
    let key = format!(
        "{:?}/{}/{:?}",
        pool.metadata.uid,
        pool.metadata.generation.unwrap_or(0),
        pool.metadata.annotations
    );
    let name = pool.metadata.name.clone().unwrap_or_default();
    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    seen.insert(name, key.clone()).as_ref() != Some(&key)
}

/// Write a verdict to the NodeClaim's `Drifted` condition, with an Event when it changes.
async fn apply(ctx: &Context, claim: &NodeClaim, verdict: Verdict) -> Result<(), ReconcileError> {
    let was = conditions::get(claim.status_conditions(), DRIFTED).cloned();
    match verdict {
        Verdict::Unknown(why) => {
            tracing::debug!(nodeclaim = %claim.metadata.name.as_deref().unwrap_or_default(), why = %why, "drift not checked");
        }
        Verdict::NotLaunched | Verdict::NotDrifted => {
            if set_condition(ctx, claim, |set| set.clear(DRIFTED).unwrap_or(false)).await?
                && was.is_some_and(|c| c.status == "True")
            {
                ctx.recorder.about(
                    claim,
                    EventType::Normal,
                    reason::DRIFTED,
                    "No longer drifted: the NodeClaim matches its NodePool and node class again"
                        .into(),
                );
            }
        }
        Verdict::Drifted(findings) => {
            let why = findings.first().map(|f| f.reason).unwrap_or_default();
            let message = Verdict::message(&findings);
            if set_condition(ctx, claim, |set| {
                set.set_true_with_reason(DRIFTED, why, &message)
            })
            .await?
            {
                tracing::info!(nodeclaim = %claim.metadata.name.as_deref().unwrap_or_default(), reason = why, changes = %message, "nodeclaim drifted");
                ctx.recorder
                    .about(claim, EventType::Normal, reason::DRIFTED, message);
            }
        }
    }
    Ok(())
}
