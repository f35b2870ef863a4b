//! The NodeClaim lifecycle controller (upstream `nodeclaim/lifecycle/controller.go`): adds the
//! termination finalizer, then runs launch → registration → initialization → liveness on each
//! reconcile, and the termination finalizer once the NodeClaim is deleted. One metadata patch and
//! one status patch per reconcile.

use std::sync::Arc;
use std::time::Duration;

use crds::conditions::{self, INITIALIZED, LAUNCHED, REGISTERED};
use crds::labels::TERMINATION_FINALIZER;
use crds::{NodeClaim, StatusConditions};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use serde_json::json;

use super::{initialization, launch, registration, termination};
use crate::operator::Context;
use crate::operator::events::{EventType, reason};
use crate::operator::reconcile::{ReconcileError, drive};
use crds::duration::format_go_duration;

/// Run the controller until the task is aborted.
pub async fn run(ctx: Arc<Context>) {
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let state = ctx.state.clone();
    let controller = Controller::new(claims, watcher::Config::default()).watches(
        nodes,
        watcher::Config::default(),
        move |node: Node| {
            // A node maps to the NodeClaim with its providerID.
            let pid = node.spec.and_then(|s| s.provider_id);
            state
                .nodeclaims
                .state()
                .into_iter()
                .filter(|c| {
                    pid.is_some() && c.status.as_ref().and_then(|s| s.provider_id.clone()) == pid
                })
                .filter_map(|c| c.metadata.name.as_deref().map(ObjectRef::new))
                .collect::<Vec<_>>()
        },
    );
    drive(controller, reconcile, ctx).await;
}

/// Merge-patch a NodeClaim's metadata (labels, annotations, finalizers; with a
/// `resourceVersion` in `metadata` the patch conflicts when the NodeClaim changed). Returns its
/// new resourceVersion.
pub(crate) async fn patch_metadata(
    ctx: &Context,
    name: &str,
    metadata: serde_json::Value,
) -> Result<Option<String>, kube::Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let patched = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": metadata})),
        )
        .await?;
    Ok(patched.metadata.resource_version)
}

/// Change one of the NodeClaim's conditions, writing the status only when it changed, with the
/// NodeClaim's resourceVersion (a concurrent writer makes this conflict and retry, instead of
/// one overwriting the other's conditions). Returns whether it changed.
pub(crate) async fn set_condition(
    ctx: &Context,
    claim: &NodeClaim,
    change: impl FnOnce(&mut crds::conditions::ConditionSet<'_>) -> bool,
) -> Result<bool, ReconcileError> {
    let mut updated = claim.clone();
    if !change(&mut updated.condition_set(ctx.clock.now())) {
        return Ok(false);
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    api.patch_status(
        claim.metadata.name.as_deref().unwrap_or(""),
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"resourceVersion": claim.metadata.resource_version},
            "status": updated.status,
        })),
    )
    .await?;
    Ok(true)
}

/// Delete a NodeClaim (its finalizer then terminates the instance).
pub(crate) async fn delete_claim(ctx: &Context, name: &str) -> Result<(), kube::Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
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
        match launch::launch(&ctx, &mut claim).await? {
            launch::Outcome::Launched => {}
            launch::Outcome::Deleted => return Ok(Action::await_change()),
            launch::Outcome::Retry => requeue = Duration::from_secs(5),
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
    if let Some(why) = super::liveness::expired(&claim, &ctx.settings, now) {
        let (event, message) = match why {
            super::liveness::LAUNCH_TIMEOUT => (
                reason::LAUNCH_TIMEOUT,
                format!(
                    "Deleting NodeClaim: not launched within {} of creation",
                    format_go_duration(ctx.settings.launch_timeout)
                ),
            ),
            _ => (
                reason::REGISTRATION_TIMEOUT,
                format!(
                    "Deleting NodeClaim: no node registered within {}",
                    format_go_duration(ctx.settings.registration_ttl)
                ),
            ),
        };
        tracing::info!(nodeclaim = %name, reason = why, "deleting nodeclaim");
        ctx.recorder
            .about(&claim, EventType::Warning, event, message);
        write_status(&ctx, &obj, &claim).await?;
        delete_claim(&ctx, &name).await?;
        return Ok(Action::await_change());
    }
    if let Some(expires) = super::expiration::expires_at(&claim) {
        if expires <= now {
            tracing::info!(nodeclaim = %name, reason = "expired", "deleting nodeclaim");
            ctx.recorder.about(
                &claim,
                EventType::Normal,
                reason::EXPIRED,
                format!(
                    "Deleting NodeClaim: expireAfter {} elapsed",
                    claim.spec.expire_after.as_string()
                ),
            );
            write_status(&ctx, &obj, &claim).await?;
            delete_claim(&ctx, &name).await?;
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

/// One status patch, only when the status changed, with the resourceVersion the status was
/// computed from (`after`'s: the reconcile's own metadata patches update it), so a concurrent
/// writer, such as node termination setting `Drained`, makes it conflict and retry instead of
/// losing a condition.
async fn write_status(
    ctx: &Context,
    before: &NodeClaim,
    after: &NodeClaim,
) -> Result<(), kube::Error> {
    if before.status == after.status {
        return Ok(());
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let name = after.metadata.name.clone().unwrap_or_default();
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"resourceVersion": after.metadata.resource_version},
            "status": after.status,
        })),
    )
    .await?;
    Ok(())
}
