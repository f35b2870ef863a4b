//! The NodeClaim lifecycle controller (upstream `nodeclaim/lifecycle/controller.go`): adds the
//! termination finalizer, then runs launch → registration → initialization → liveness →
//! expiration on each reconcile, and the termination finalizer once the NodeClaim is deleted.
//! The phases change a copy of the NodeClaim; this controller writes it: at most one metadata
//! patch and one status patch per reconcile (or the delete a phase asked for).

use std::sync::Arc;
use std::time::Duration;

use crds::conditions::{self, INITIALIZED, LAUNCHED, REGISTERED};
use crds::labels::TERMINATION_FINALIZER;
use crds::{NodeClaim, StatusConditions};
use kube::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::watcher;
use serde_json::json;

use super::writes::{disrupt_claim, patch_metadata, write_metadata, write_status};
use super::{initialization, launch, registration, termination};
use crate::runtime::Context;
use crate::runtime::events::{EventType, reason};
use crate::runtime::metrics::reason as metrics_reason;
use crate::runtime::reconcile::{ReconcileError, affected_by_key, drive, linear_scale_reconciles};
use crds::duration::format_go_duration;
use crds::history;
use k8s_openapi::api::core::v1::Node;
use karpenter_core::lifecycle::{expiration, liveness, registration_health};
use karpenter_core::snapshot::nodepool_of;

/// Concurrent lifecycle reconciles (launches among them) at 1 core of CPU requests, and at 60
/// cores: upstream's `minReconciles` and `maxReconciles` for this controller.
const RECONCILES: (usize, usize) = (1000, 5000);

/// How many NodeClaims are reconciled at once, launches included: upstream's
/// `LinearScaleReconciles(CPUCount, 1000, 5000)`, 1000 at the default `CPU_REQUESTS` of one
/// core. A NodeClaim is never reconciled twice at once (kube-runtime's guarantee, as
/// controller-runtime's), so each launch still runs once per NodeClaim.
pub fn concurrency(settings: &crate::runtime::options::Settings) -> usize {
    linear_scale_reconciles(settings.cpu_requests, RECONCILES.0, RECONCILES.1)
}

/// Run the controller until the task is aborted.
pub async fn run(ctx: Arc<Context>) {
    // Registration read from a half-filled node cache would wait for a node already there.
    if ctx.state.wait_synced().await.is_err() {
        tracing::error!("nodeclaim controller not started: the cluster state never synced");
        return;
    }
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    let reconciles = u16::try_from(concurrency(&ctx.settings)).unwrap_or(u16::MAX);
    let controller = Controller::new(claims, watcher::Config::default())
        .with_config(controller::Config::default().concurrency(reconciles));
    // A node maps to the NodeClaim with its providerID. Triggered by the node cache that
    // registration and initialization read, so they see the node that triggered them.
    let node_triggers = affected_by_key(
        ctx.state.node_changes.subscribe(),
        controller.store(),
        |node: &Node| node.spec.as_ref()?.provider_id.clone(),
        |claim: &NodeClaim| claim.status.as_ref()?.provider_id.clone(),
    );
    let controller = controller.reconcile_on(node_triggers);
    drive(controller, reconcile, ctx).await;
}

async fn reconcile(obj: Arc<NodeClaim>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    if obj.metadata.deletion_timestamp.is_some() {
        return termination::finalize(&ctx, &obj).await;
    }
    let finalizers = obj.metadata.finalizers.clone().unwrap_or_default();
    if !finalizers.iter().any(|f| f == TERMINATION_FINALIZER) {
        let mut f = finalizers;
        f.push(TERMINATION_FINALIZER.to_string());
        patch_metadata(
            &ctx,
            &name,
            json!({"resourceVersion": obj.metadata.resource_version, "finalizers": f}),
        )
        .await?;
        return Ok(Action::await_change());
    }
    let now = ctx.clock.now();
    let mut claim = (*obj).clone();
    claim.condition_set(now);
    let mut requeue = Duration::from_secs(60);
    if !conditions::is_true(claim.status_conditions(), LAUNCHED) {
        match launch::launch(&ctx, &mut claim).await {
            launch::Outcome::Launched { events } => {
                // Only the launch's own labels and annotations are written (a merge patch), so
                // a concurrent writer's are kept.
                if let Some(rv) = write_metadata(&ctx, &obj, &claim).await? {
                    claim.metadata.resource_version = Some(rv);
                }
                events.into_iter().for_each(|e| ctx.recorder.publish(e));
            }
            launch::Outcome::Delete {
                metric_reason,
                event,
            } => {
                let message = event.message.clone();
                ctx.recorder.publish(*event);
                let why = if metric_reason == metrics_reason::INSUFFICIENT_CAPACITY {
                    history::reason::INSUFFICIENT_CAPACITY
                } else {
                    history::reason::NODE_CLASS_NOT_READY
                };
                if disrupt_claim(&ctx, &claim, why, &message).await? {
                    ctx.metrics
                        .nodeclaim_disrupted(&claim, metric_reason, &ctx.state);
                }
                return Ok(Action::await_change());
            }
            launch::Outcome::Retry { events } => {
                events.into_iter().for_each(|e| ctx.recorder.publish(e));
                requeue = Duration::from_secs(5);
            }
        }
    }
    if conditions::is_true(claim.status_conditions(), LAUNCHED)
        && !conditions::is_true(claim.status_conditions(), REGISTERED)
    {
        registration::register(&ctx, &mut claim).await?;
    }
    if conditions::is_true(claim.status_conditions(), REGISTERED)
        && !conditions::is_true(claim.status_conditions(), INITIALIZED)
    {
        initialization::initialize(&ctx, &mut claim).await?;
    }
    if let Some(why) = liveness::expired(&claim, ctx.settings.liveness_timeouts(), now) {
        let (event, message, recorded) = match why {
            liveness::LAUNCH_TIMEOUT => (
                reason::LAUNCH_TIMEOUT,
                format!(
                    "Deleting NodeClaim: not launched within {} of creation",
                    format_go_duration(ctx.settings.launch_timeout)
                ),
                history::reason::LAUNCH_TIMEOUT,
            ),
            _ => (
                reason::REGISTRATION_TIMEOUT,
                format!(
                    "Deleting NodeClaim: no node registered within {}",
                    format_go_duration(ctx.settings.registration_ttl)
                ),
                history::reason::REGISTRATION_TIMEOUT,
            ),
        };
        tracing::info!(nodeclaim = %name, reason = why, "deleting nodeclaim");
        if let Some(pool) = nodepool_of(claim.metadata.labels.as_ref()) {
            let launch = conditions::get(claim.status_conditions(), LAUNCHED);
            ctx.state.report_registration(
                pool,
                registration_health::Outcome::TimedOut {
                    launched: launch.is_some_and(|c| c.status == "True"),
                    reason: launch.map(|c| c.reason.clone()).unwrap_or_default(),
                    message: launch.map(|c| c.message.clone()).unwrap_or_default(),
                },
            );
        }
        ctx.recorder
            .about(&claim, EventType::Warning, event, message.clone());
        claim.metadata.resource_version = write_status(&ctx, &obj, &claim).await?;
        if disrupt_claim(&ctx, &claim, recorded, &message).await? {
            ctx.metrics.nodeclaim_disrupted(&claim, why, &ctx.state);
        }
        return Ok(Action::await_change());
    }
    if let Some(expires) = expiration::expires_at(&claim) {
        if expires <= now {
            tracing::info!(nodeclaim = %name, reason = "expired", "deleting nodeclaim");
            let message = format!(
                "Deleting NodeClaim: expireAfter {} elapsed",
                claim.spec.expire_after.as_string()
            );
            ctx.recorder
                .about(&claim, EventType::Normal, reason::EXPIRED, message.clone());
            claim.metadata.resource_version = write_status(&ctx, &obj, &claim).await?;
            if disrupt_claim(&ctx, &claim, history::reason::EXPIRED, &message).await? {
                let expired = crate::runtime::metrics::reason::EXPIRED;
                ctx.metrics.nodeclaim_disrupted(&claim, expired, &ctx.state);
            }
            return Ok(Action::await_change());
        }
        if let Ok(left) = Duration::try_from(expires.duration_since(now)) {
            requeue = requeue.min(left);
        }
    }
    write_status(&ctx, &obj, &claim).await?;
    if !conditions::is_true(claim.status_conditions(), INITIALIZED) {
        requeue = requeue.min(Duration::from_secs(10));
    }
    Ok(Action::requeue(requeue))
}

#[cfg(test)]
mod tests {
    use super::concurrency;
    use crate::runtime::options::Settings;

    #[test]
    fn launches_and_creates_at_once_scale_with_cpu_requests() {
        let at = |cpu_requests| {
            concurrency(&Settings {
                cpu_requests,
                ..Settings::default()
            })
        };
        // Upstream's lifecycle controller: 1000 at one core or less, 5000 from 60 cores on.
        assert_eq!(at(Settings::default().cpu_requests), 1000);
        assert_eq!(at(250), 1000);
        assert_eq!(at(8000), 1474);
        assert_eq!(at(60_000), 5000);
        assert_eq!(at(u32::MAX), 5000);
    }
}
