//! The NodeClaim lifecycle controller (upstream `nodeclaim/lifecycle/controller.go`): adds the
//! termination finalizer, then runs launch → registration → initialization → liveness on each
//! reconcile, and the termination finalizer once the NodeClaim is deleted. One metadata patch and
//! one status patch per reconcile.

use std::sync::Arc;
use std::time::Duration;

use crds::conditions::{self, INITIALIZED, LAUNCHED, REGISTERED};
use crds::labels::TERMINATION_FINALIZER;
use crds::{NodeClaim, StatusConditions};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::json;

use super::{initialization, launch, registration, termination};
use crate::operator::Context;
use crate::operator::events::{EventType, reason};
use crate::operator::reconcile::{ReconcileError, affected_by, drive};
use crds::duration::format_go_duration;

/// Run the controller until the task is aborted.
pub async fn run(ctx: Arc<Context>) {
    // Registration read from a half-filled node cache would wait for a node already there.
    if ctx.state.wait_synced().await.is_err() {
        tracing::error!("nodeclaim controller not started: the cluster state never synced");
        return;
    }
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    let controller = Controller::new(claims, watcher::Config::default());
    // A node maps to the NodeClaim with its providerID. Triggered by the node cache that
    // registration and initialization read, so they see the node that triggered them.
    let node_triggers = affected_by(
        ctx.state.node_changes.subscribe(),
        controller.store(),
        |node, claim| {
            let pid = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
            pid.is_some() && claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) == pid
        },
    );
    let controller = controller.reconcile_on(node_triggers);
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

/// Delete `claim` only if it is still as it was read: not already deleting, and with a
/// precondition on its `resourceVersion`, so the API server answers 409 Conflict when anyone
/// (another replica, or this controller acting on a stale cache) changed or deleted it since.
/// Returns whether this call started the deletion, which is when a disruption is counted: a
/// repeated DELETE of a NodeClaim held by its finalizer answers 200 too, and must not count
/// again. Already deleting, or gone (404): `Ok(false)`.
///
/// Errors: 409 Conflict when the NodeClaim changed since it was read (someone else acted
/// first; reconcilers retry conflicts quietly and decide again on the fresh object), and any
/// other API failure.
pub(crate) async fn delete_claim_as_read(
    client: &kube::Client,
    claim: &NodeClaim,
) -> Result<bool, kube::Error> {
    if claim.metadata.deletion_timestamp.is_some() {
        return Ok(false);
    }
    let name = claim.metadata.name.as_deref().unwrap_or("");
    let api: Api<NodeClaim> = Api::all(client.clone());
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: claim.metadata.resource_version.clone(),
            uid: claim.metadata.uid.clone(),
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
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
        claim.metadata.resource_version = write_status(&ctx, &obj, &claim).await?;
        if delete_claim_as_read(&ctx.client, &claim).await? {
            ctx.metrics.nodeclaim_disrupted(&claim, why, &ctx.state);
        }
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
            claim.metadata.resource_version = write_status(&ctx, &obj, &claim).await?;
            if delete_claim_as_read(&ctx.client, &claim).await? {
                let expired = crate::operator::metrics::reason::EXPIRED;
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

/// One status patch, only when the status changed, with the resourceVersion the status was
/// computed from (`after`'s: the reconcile's own metadata patches update it), so a concurrent
/// writer, such as node termination setting `Drained`, makes it conflict and retry instead of
/// losing a condition.
async fn write_status(
    ctx: &Context,
    before: &NodeClaim,
    after: &NodeClaim,
) -> Result<Option<String>, kube::Error> {
    if before.status == after.status {
        return Ok(after.metadata.resource_version.clone());
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let name = after.metadata.name.clone().unwrap_or_default();
    let written = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"resourceVersion": after.metadata.resource_version},
                "status": after.status,
            })),
        )
        .await?;
    Ok(written.metadata.resource_version)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the sandbox API server: the first delete of a NodeClaim as read starts its
    /// deletion; repeating it with the same (now stale) read is refused with 409, and with a
    /// fresh read (already deleting) does nothing, so a disruption is counted once.
    #[tokio::test]
    async fn a_nodeclaim_is_deleted_once_per_read() {
        let server = sandbox::runtime::Sandbox::start(0).await.expect("sandbox");
        let store = server.store();
        let crd_type = store
            .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .expect("CRDs are served");
        for crd in crds::generate::crds() {
            let crd = serde_json::to_value(&crd).expect("CRD as JSON");
            store.create(&crd_type, "", crd).expect("install the CRD");
        }
        let config = kube::Config::new(server.url().parse().expect("sandbox URL"));
        let client = kube::Client::try_from(config).expect("client");
        let api: Api<NodeClaim> = Api::all(client.clone());
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-x", "finalizers": [TERMINATION_FINALIZER]},
            "spec": {"requirements": [], "nodeClassRef":
                {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
        }))
        .expect("claim");
        let read = api
            .create(&kube::api::PostParams::default(), &claim)
            .await
            .expect("create");
        assert_eq!(delete_claim_as_read(&client, &read).await.ok(), Some(true));
        let again = delete_claim_as_read(&client, &read).await;
        assert!(
            matches!(&again, Err(kube::Error::Api(e)) if e.code == 409),
            "a stale read must conflict: {again:?}"
        );
        let fresh = api.get("default-x").await.expect("still there (finalizer)");
        assert!(fresh.metadata.deletion_timestamp.is_some());
        assert_eq!(
            delete_claim_as_read(&client, &fresh).await.ok(),
            Some(false)
        );
        let mut gone = fresh.clone();
        gone.metadata.deletion_timestamp = None;
        gone.metadata.name = Some("never-existed".into());
        assert_eq!(delete_claim_as_read(&client, &gone).await.ok(), Some(false));
    }
}
