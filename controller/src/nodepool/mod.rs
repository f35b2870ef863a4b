//! NodePool controllers (upstream `nodepool/readiness`, `nodepool/validation`,
//! `nodepool/counter`, `static/*`): `ValidationSucceeded` from the pool's own rules,
//! `NodeClassReady` from its node class, `Ready` from both; `status.resources` and
//! `status.nodes` from its nodes; a static pool's NodeClaims kept at `spec.replicas`
//! ([`static_capacity`]). Only Ready NodePools launch capacity.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crds::conditions::{
    self, NODE_CLASS_READY, NODE_REGISTRATION_HEALTHY, READY, STATIC_CAPACITY, VALIDATION_SUCCEEDED,
};
use crds::upgrade::UPGRADING_CONDITION;
use crds::validation::VALIDATION_FAILED_REASON;
use crds::{NodePool, StatusConditions};
use karpenter_core::provisioning::template::validate;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::json;

mod static_capacity;

use crate::runtime::Context;
use crate::runtime::reconcile::{ReconcileError, affected_by, drive};
use crate::state::RegistrationHealth;
use karpenter_core::disruption::upgrade::Plan;
use karpenter_core::lifecycle::registration_health::{Tracker, Verdict};
use karpenter_core::scheduling::resources::Resources;
use karpenter_core::snapshot::nodepool_of;

/// Counters are refreshed at least this often (upstream: every 5s).
const RESYNC: Duration = Duration::from_secs(5);

/// Run the controller until the task is aborted.
pub async fn run(ctx: Arc<Context>) {
    // Readiness read from half-filled caches would flap (a node class not listed yet).
    if ctx.state.wait_synced().await.is_err() {
        tracing::error!("nodepool controller not started: the cluster state never synced");
        return;
    }
    let pools: Api<NodePool> = Api::all(ctx.client.clone());
    let controller = Controller::new(pools, watcher::Config::default());
    // A node class change re-evaluates the NodePools that use it, once the cache reconcile
    // reads from holds the change.
    let class_triggers = affected_by(
        ctx.state.nodeclass_changes.subscribe(),
        controller.store(),
        |class, pool| {
            class.metadata.name.as_deref() == Some(&pool.spec.template.spec.node_class_ref.name)
        },
    );
    let controller = controller.reconcile_on(class_triggers);
    drive(controller, reconcile, ctx).await;
}

/// The `Upgrading` condition for a rollout plan: True with the phase while a step is in
/// progress; otherwise False, saying whether the rollout is paused (and why), has drifted nodes
/// waiting, or has nothing to do.
fn upgrading(plan: &Plan) -> (bool, &'static str, String) {
    if let Some(step) = plan.in_progress.first() {
        let with = step
            .replacement
            .as_deref()
            .map(|r| format!(" with {r}"))
            .unwrap_or_default();
        return (
            true,
            step.phase.as_str(),
            format!(
                "replacing {}{with}: {}",
                step.nodeclaim,
                step.phase.as_str()
            ),
        );
    }
    // Messages carry no counts: a PDB whose allowance flaps would otherwise rewrite the status
    // every few seconds (`kubectl karpenter upgrade status` has the numbers).
    let waiting = plan.queue.len() + plan.skipped.len();
    if plan.paused {
        let why = plan
            .paused_reason
            .clone()
            .unwrap_or_else(|| "paused by the operator".into());
        return (false, "Paused", why);
    }
    if waiting > 0 {
        return (
            false,
            "Waiting",
            "drifted nodes are waiting for a step (blocked, or beyond the budget)".into(),
        );
    }
    (false, "UpToDate", "no drifted nodes".into())
}

/// The NodePool's `NodeRegistrationHealthy` verdict: its tracker (seeded, the first time, from
/// the condition as stored, with the generations it was written for) reset when the NodePool's
/// or node class's generation moved on (`generations`), then fed the registration outcomes the
/// NodeClaim lifecycle reported since the last reconcile (upstream
/// `nodepool/registrationhealth`, `nodeclaim/lifecycle` registration and liveness).
fn registration_verdict(
    ctx: &Context,
    pool: &NodePool,
    name: &str,
    generations: (i64, i64),
) -> Verdict {
    let mut health = ctx.state.registration_health();
    let RegistrationHealth { pending, trackers } = &mut *health;
    let tracker = trackers.entry(name.to_string()).or_insert_with(|| {
        let stored = conditions::get(pool.status_conditions(), NODE_REGISTRATION_HEALTHY);
        let class_generation = pool
            .status
            .as_ref()
            .map_or(0, |s| s.node_class_observed_generation);
        Tracker::seeded(
            stored.map(|c| c.status.as_str()),
            stored.map_or("", |c| c.reason.as_str()),
            stored.map_or("", |c| c.message.as_str()),
            (
                stored.and_then(|c| c.observed_generation).unwrap_or(0),
                class_generation,
            ),
        )
    });
    tracker.observe(generations);
    for outcome in pending.remove(name).unwrap_or_default() {
        tracker.record(&outcome);
    }
    tracker.verdict().clone()
}

async fn reconcile(obj: Arc<NodePool>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = obj.metadata.name.clone().unwrap_or_default();
    crate::runtime::unsupported::report_fields(&ctx, obj.as_ref(), "NodePool", &obj.spec);
    let restamp_pending = crate::drift::stamp::stamp_nodepool(&ctx, &obj).await? > 0;
    let mut pool = (*obj).clone();
    let now = ctx.clock.now();
    let verdict = validate(&pool);
    let class_ref = pool.spec.template.spec.node_class_ref.clone();
    // A reference of another group or kind names none of our node classes, whatever its name.
    let unsupported = class_ref.unsupported();
    let class = match unsupported {
        Some(_) => None,
        None => ctx
            .state
            .nodeclasses
            .state()
            .into_iter()
            .find(|nc| nc.metadata.name.as_deref() == Some(class_ref.name.as_str())),
    };
    {
        let mut set = pool.condition_set(now);
        match &verdict {
            Ok(()) => set.set_true(VALIDATION_SUCCEEDED),
            Err(msg) => set.set_false(VALIDATION_SUCCEEDED, VALIDATION_FAILED_REASON, msg),
        };
        match &class {
            None => set.set_false(
                NODE_CLASS_READY,
                "NodeClassNotFound",
                &unsupported.clone().unwrap_or_else(|| {
                    format!("{} {:?} not found", class_ref.kind, class_ref.name)
                }),
            ),
            Some(nc) => {
                let conds = nc
                    .status
                    .as_ref()
                    .map(|s| s.conditions.as_slice())
                    .unwrap_or_default();
                match conditions::get(conds, READY) {
                    Some(c) if c.status == "True" => set.set_true(NODE_CLASS_READY),
                    Some(c) if c.status == "False" => set.set_false(
                        NODE_CLASS_READY,
                        "NodeClassNotReady",
                        &format!(
                            "{} {:?} is not ready: {}",
                            class_ref.kind, class_ref.name, c.message
                        ),
                    ),
                    _ => set.set_unknown_with_reason(
                        NODE_CLASS_READY,
                        "NodeClassNotReady",
                        "node class readiness is unknown",
                    ),
                }
            }
        };
    }
    if let Some(nc) = &class {
        let generations = (
            pool.metadata.generation.unwrap_or(0),
            nc.metadata.generation.unwrap_or(0),
        );
        let verdict = registration_verdict(&ctx, &pool, &name, generations);
        let mut set = pool.condition_set(now);
        match verdict {
            Verdict::Unknown => set.set_unknown(NODE_REGISTRATION_HEALTHY),
            Verdict::Healthy => set.set_true(NODE_REGISTRATION_HEALTHY),
            Verdict::Unhealthy { reason, message } => {
                set.set_false(NODE_REGISTRATION_HEALTHY, &reason, &message)
            }
        };
    }
    if pool.is_static() {
        // Decided on the conditions just computed: Ready gates creating NodeClaims.
        let c = static_capacity::reconcile(&ctx, &Arc::new(pool.clone())).await?;
        let mut set = pool.condition_set(now);
        match c.ok {
            true => set.set_true_with_reason(STATIC_CAPACITY, c.reason, &c.message),
            false => set.set_false(STATIC_CAPACITY, c.reason, &c.message),
        };
    }
    {
        let (status, reason, message) =
            upgrading(&crate::disruption::upgrade::plan_for(&ctx, &pool));
        let mut set = pool.condition_set(now);
        match status {
            true => set.set_true_with_reason(UPGRADING_CONDITION, reason, &message),
            false => set.set_false(UPGRADING_CONDITION, reason, &message),
        };
    }
    let mut resources = Resources::default();
    let mut nodes = 0;
    for claim in ctx.state.nodeclaims.state() {
        if nodepool_of(claim.metadata.labels.as_ref()) != Some(name.as_str()) {
            continue;
        }
        let Some(status) = claim.status.as_ref().filter(|s| s.node_name.is_some()) else {
            continue;
        };
        nodes += 1;
        resources.add(&Resources::from_list(&status.capacity).unwrap_or_default());
    }
    let status = pool.status.get_or_insert_with(Default::default);
    let mut list: BTreeMap<_, _> = resources.to_list();
    list.insert(
        "nodes".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity(nodes.to_string()),
    );
    status.resources = list;
    status.nodes = nodes;
    if let Some(nc) = &class {
        status.node_class_observed_generation = nc.metadata.generation.unwrap_or(0);
    }
    if pool.status != obj.status {
        let api: Api<NodePool> = Api::all(ctx.client.clone());
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": pool.status})),
        )
        .await?;
    }
    Ok(Action::requeue(if restamp_pending {
        crate::drift::stamp::RESTAMP_RETRY
    } else {
        RESYNC
    }))
}
