//! Node termination (upstream `node/termination/controller.go`): when a Karpenter node is
//! deleted, delete its NodeClaim, taint the node `karpenter.sh/disrupted:NoSchedule`, drain it
//! through the eviction API in priority groups ([`karpenter_core::lifecycle::drain`];
//! PodDisruptionBudgets answer 429 and are retried with backoff, do-not-disrupt pods wait),
//! delete pods that the NodeClaim's termination time leaves no room for, mark the NodeClaim
//! `Drained` (having noted the pods it moves for the disruption history), wait for its volumes
//! to detach ([`super::volume_detachment`]), terminate the instance and wait until the cloud
//! reports it gone, and release the `karpenter.sh/termination` finalizer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crds::conditions::{self, DRAINED, INSTANCE_TERMINATING};
use crds::history::{DRAINED_PODS_ANNOTATION, DrainedPods};
use crds::labels::{
    DISRUPTED_TAINT_KEY, EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_LABEL,
    EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_VALUE, NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION,
    TERMINATION_FINALIZER, disrupted_no_schedule_taint,
};
use crds::{NodeClaim, StatusConditions};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use karpenter_core::pod_view::PodView;
use kube::Api;
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::json;

use crate::nodeclaim::termination::INSTANCE_POLL;
use crate::nodeclaim::writes::{patch_metadata, set_condition};
use crate::runtime::Context;
use crate::runtime::events::{DEFAULT_DEDUPE, EventSpec, EventType, reason, reference};
use crate::runtime::reconcile::{ReconcileError, affected_by, drive};
use karpenter_core::cloud::CloudError;
use karpenter_core::cloud::claim_for_instance;
use karpenter_core::disruption::candidates::is_reschedulable;
use karpenter_core::lifecycle::drain::{self, Blocker, Step};
use karpenter_core::snapshot::annotation;

/// The least time between a drain starting and `Drained=True` (upstream `MinDrainTime`), so
/// that pods evicted in the same instant are seen gone by every watcher first.
pub const MIN_DRAIN_TIME: SignedDuration = SignedDuration::from_secs(5);

/// Run the controller until the task is aborted.
pub async fn run(ctx: Arc<Context>) {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let controller = Controller::new(nodes, watcher::Config::default());
    // A deleting node waiting for its volumes is triggered by the VolumeAttachment cache that
    // the wait reads, so the reconcile a detachment triggers sees the attachment gone.
    let detachments = affected_by(
        ctx.state.volume_attachment_changes.subscribe(),
        controller.store(),
        |attachment: &VolumeAttachment, node: &Node| {
            node.metadata.deletion_timestamp.is_some()
                && node.metadata.name.as_deref() == Some(attachment.spec.node_name.as_str())
        },
    );
    drive(controller.reconcile_on(detachments), reconcile, ctx).await;
}

/// The NodeClaim's termination time (`karpenter.sh/nodeclaim-termination-timestamp`, RFC 3339),
/// if it has a valid one.
pub fn termination_time(claim: &NodeClaim) -> Option<Timestamp> {
    claim
        .metadata
        .annotations
        .as_ref()?
        .get(NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION)?
        .parse()
        .ok()
}

fn provider_id(node: &Node) -> String {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap_or_default()
}

/// Delete the NodeClaim of a node someone deleted, saying why when it can be told: the reason
/// of the disruption command that holds it (an interruption whose message is being handled),
/// else `InstanceTerminated` when its instance is gone (EC2 terminated it and the node went with
/// it, before the interruption message, if any, was read), so the disruption history names the
/// cause instead of a user's delete. Otherwise a plain delete (`Deleted` in the history).
///
/// Errors: the API failure of the delete (a conflict is retried by the reconcile).
async fn delete_claim_of_deleted_node(
    ctx: &Context,
    claim: &NodeClaim,
    provider_id: &str,
) -> Result<(), ReconcileError> {
    let name = claim.metadata.name.as_deref().unwrap_or("");
    let reason = match annotation(claim, crds::disruption::REASON_ANNOTATION) {
        Some(r) => Some((
            r.to_string(),
            format!("its node {provider_id} was deleted during {r}"),
        )),
        None if !provider_id.is_empty()
            && matches!(
                ctx.cloud.get(provider_id).await,
                Err(CloudError::NodeClaimNotFound(_))
            ) =>
        {
            let r = karpenter_core::interruption::Kind::InstanceTerminated
                .history_reason()
                .unwrap_or("InstanceTerminated");
            Some((
                r.to_string(),
                format!("its instance {provider_id} is gone and its node was deleted"),
            ))
        }
        None => None,
    };
    match reason {
        Some((reason, message)) => {
            crate::nodeclaim::writes::disrupt_claim(ctx, claim, &reason, &message).await?;
        }
        None => crate::nodeclaim::writes::delete_claim(ctx, name).await?,
    }
    Ok(())
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let finalizers = node.metadata.finalizers.clone().unwrap_or_default();
    if node.metadata.deletion_timestamp.is_none()
        || !finalizers.iter().any(|f| f == TERMINATION_FINALIZER)
    {
        return Ok(Action::await_change());
    }
    let name = node.metadata.name.clone().unwrap_or_default();
    let provider_id = provider_id(&node);
    let claim = ctx.state.nodeclaims.state().into_iter().find(|c| {
        !provider_id.is_empty()
            && c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(&provider_id)
    });
    if let Some(c) = claim
        .as_ref()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
    {
        delete_claim_of_deleted_node(&ctx, c, &provider_id).await?;
    }
    // A node that is not ready and whose instance is already gone has nothing left to drain.
    if !is_ready(&node)
        && (provider_id.is_empty()
            || matches!(
                ctx.cloud.get(&provider_id).await,
                Err(CloudError::NodeClaimNotFound(_))
            ))
    {
        return release(&ctx, &node, finalizers).await;
    }
    if cordon(&ctx, &node).await? == Cordon::Tainted {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let now = ctx.clock.now();
    let pods: Vec<Arc<PodView>> = ctx
        .state
        .pods
        .state()
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str()))
        .collect();
    let plan = drain::plan(&pods, now, claim.as_deref().and_then(termination_time));
    if let Some(c) = claim.as_deref()
        && !conditions::is_true(c.status_conditions(), DRAINED)
    {
        // The drain starts by saying so, even on an empty node: MinDrainTime counts from here.
        let draining = conditions::get(c.status_conditions(), DRAINED)
            .filter(|d| d.status == "Unknown" && d.reason == DRAINING)
            .map(|d| d.last_transition_time.0);
        let Some(draining_since) = draining else {
            // The pods this drain moves, for the disruption history: written once, before
            // the drain says it began, so a retry after a crash keeps the first count.
            let mut c = c.clone();
            if annotation(&c, DRAINED_PODS_ANNOTATION).is_none() {
                let moved = DrainedPods::of(
                    pods.iter()
                        .filter(|p| is_reschedulable(p))
                        .map(|p| {
                            format!(
                                "{}/{}",
                                p.metadata.namespace.as_deref().unwrap_or_default(),
                                p.metadata.name.as_deref().unwrap_or_default()
                            )
                        })
                        .collect(),
                );
                let text = serde_json::to_string(&moved).unwrap_or_default();
                c.metadata.resource_version = patch_metadata(
                    &ctx,
                    c.metadata.name.as_deref().unwrap_or_default(),
                    json!({"resourceVersion": c.metadata.resource_version,
                           "annotations": {DRAINED_PODS_ANNOTATION: text}}),
                )
                .await?;
            }
            set_condition(&ctx, &c, |set| {
                set.set_unknown_with_reason(DRAINED, DRAINING, DRAINING)
            })
            .await?;
            return Ok(Action::requeue(Duration::from_millis(200)));
        };
        if !plan.drained() {
            execute(&ctx, &node, Some(c), &plan).await?;
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        let wait = MIN_DRAIN_TIME - now.duration_since(draining_since);
        if wait.is_positive() {
            return Ok(Action::requeue(
                Duration::try_from(wait).unwrap_or(Duration::from_secs(1)),
            ));
        }
        set_condition(&ctx, c, |set| set.set_true(DRAINED)).await?;
        ctx.recorder.about(
            c,
            EventType::Normal,
            reason::DRAINED,
            format!("Drained node {name}"),
        );
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    if !plan.drained() {
        // A node without a NodeClaim (or whose NodeClaim already says Drained while pods came
        // back) is drained all the same.
        execute(&ctx, &node, claim.as_deref(), &plan).await?;
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    // Volumes detach before the instance goes; a node without a NodeClaim has no condition to
    // say so on and is terminated at once.
    if let Some(c) = claim.as_deref()
        && let Some(action) =
            super::volume_detachment::hold(&ctx, &node, c, &pods, now, termination_time(c)).await?
    {
        return Ok(action);
    }
    // Terminate the instance; without a NodeClaim the cloud is asked by providerID alone.
    let target = match claim.as_deref() {
        Some(c) => c.clone(),
        None if provider_id.is_empty() => return release(&ctx, &node, finalizers).await,
        None => claim_for_instance(&provider_id, None)?,
    };
    match ctx.cloud.delete(&target).await {
        Ok(()) => {
            if let Some(c) = claim.as_deref() {
                let changed =
                    set_condition(&ctx, c, |set| set.set_true(INSTANCE_TERMINATING)).await?;
                if changed {
                    ctx.recorder.about(
                        c,
                        EventType::Normal,
                        reason::INSTANCE_TERMINATING,
                        format!("Terminating instance {provider_id}"),
                    );
                }
            }
            Ok(Action::requeue(INSTANCE_POLL))
        }
        Err(CloudError::NodeClaimNotFound(_)) => release(&ctx, &node, finalizers).await,
        Err(e) => Err(e.into()),
    }
}

/// The reason of `Drained=Unknown` while a drain is under way (upstream's).
const DRAINING: &str = "Draining";

/// What [`cordon`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cordon {
    /// The node already carried the taint.
    AlreadyTainted,
    /// The taint was added just now.
    Tainted,
}

/// Taint the node `karpenter.sh/disrupted:NoSchedule` and exclude it from load balancers.
async fn cordon(ctx: &Context, node: &Node) -> Result<Cordon, ReconcileError> {
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if taints.iter().any(|t| t.key == DISRUPTED_TAINT_KEY) {
        return Ok(Cordon::AlreadyTainted);
    }
    taints.push(disrupted_no_schedule_taint());
    let patch = json!({
        "metadata": {"resourceVersion": node.metadata.resource_version,
            "labels": {EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_LABEL: EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_VALUE}},
        "spec": {"taints": taints},
    });
    let api: Api<Node> = Api::all(ctx.client.clone());
    api.patch(
        node.metadata.name.as_deref().unwrap_or(""),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await?;
    Ok(Cordon::Tainted)
}

/// Carry out one round of a drain plan: delete the pods out of time, evict the current group
/// (each pod no sooner than its backoff allows), and say what blocks the rest. Each pod is
/// handled on its own: one pod's failure is reported, backs that pod off, and does not stop the
/// others.
///
/// Errors: the first API failure other than a refusal or a pod already gone (after every pod
/// was tried), so the reconcile is retried.
async fn execute(
    ctx: &Context,
    node: &Node,
    claim: Option<&NodeClaim>,
    plan: &drain::Plan,
) -> Result<(), ReconcileError> {
    let node_name = node.metadata.name.clone().unwrap_or_default();
    let mut first_error: Option<kube::Error> = None;
    for (pod, step) in &plan.pods {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
        let result = match step {
            Step::ForceDelete { grace_seconds } => {
                let params = DeleteParams {
                    grace_period_seconds: u32::try_from(*grace_seconds).ok(),
                    ..DeleteParams::default()
                };
                api.delete(&pod_name, &params).await.map(|_| {
                    ctx.recorder.about(
                        pod.as_ref(),
                        EventType::Warning,
                        reason::DISRUPTED,
                        format!("Deleting the pod to accommodate the termination time of node {node_name} (grace period {grace_seconds}s)"),
                    );
                })
            }
            Step::Evict if ctx.evictions.ready(&uid, Instant::now()) => {
                let params = EvictParams {
                    delete_options: Some(DeleteParams {
                        preconditions: Some(kube::api::Preconditions {
                            uid: Some(uid.clone()),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    }),
                    ..EvictParams::default()
                };
                let evicted = api.evict(&pod_name, &params).await;
                ctx.metrics.eviction_requested(&evicted);
                evicted.map(|_| {
                    ctx.recorder.about(
                        pod.as_ref(),
                        EventType::Normal,
                        reason::EVICTED,
                        format!("Evicted pod from node {node_name}"),
                    );
                })
            }
            Step::Evict | Step::Wait(Blocker::Terminating | Blocker::LaterGroup { .. }) => {
                continue;
            }
            Step::Wait(Blocker::DoNotDisrupt) => {
                let until = if claim.and_then(termination_time).is_some() {
                    " or for the termination grace period"
                } else {
                    ""
                };
                blocked(
                    ctx,
                    node,
                    claim,
                    format!(
                        "Failed to drain node, pod {ns}/{pod_name} has the karpenter.sh/do-not-disrupt annotation; waiting for it to finish{until}"
                    ),
                );
                continue;
            }
        };
        match result {
            Ok(()) => ctx.evictions.forget(&uid),
            // Gone already, or replaced by another pod of the same name (UID precondition).
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
                ctx.evictions.forget(&uid)
            }
            Err(e) => {
                let delay = ctx.evictions.refused(&uid, Instant::now());
                let why = match &e {
                    kube::Error::Api(status) => status.message.clone(),
                    other => other.to_string(),
                };
                tracing::info!(node = %node_name, pod = %format!("{ns}/{pod_name}"), retry_in = ?delay, error = %why, "pod not evicted");
                blocked(
                    ctx,
                    node,
                    claim,
                    format!("Failed to drain node, evicting pod {ns}/{pod_name}: {why}"),
                );
                let refused = matches!(&e, kube::Error::Api(status) if status.code == 429);
                if !refused && first_error.is_none() {
                    first_error = Some(e);
                }
            }
        }
    }
    if let Some(c) = claim {
        ctx.recorder.about(
            c,
            EventType::Normal,
            reason::DRAINING,
            format!("Draining node {node_name}"),
        );
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Say why a drain cannot progress, on the node and on its NodeClaim.
fn blocked(ctx: &Context, node: &Node, claim: Option<&NodeClaim>, message: String) {
    ctx.recorder.publish(EventSpec {
        regarding: reference(node),
        type_: EventType::Warning,
        reason: reason::FAILED_DRAINING,
        message: message.clone(),
        dedupe: DEFAULT_DEDUPE,
    });
    if let Some(c) = claim {
        ctx.recorder
            .about(c, EventType::Warning, reason::FAILED_DRAINING, message);
    }
}

/// Remove the termination finalizer: the node object goes away.
async fn release(
    ctx: &Context,
    node: &Node,
    finalizers: Vec<String>,
) -> Result<Action, ReconcileError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let remaining: Vec<String> = finalizers
        .into_iter()
        .filter(|f| f != TERMINATION_FINALIZER)
        .collect();
    let api: Api<Node> = Api::all(ctx.client.clone());
    match api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                "resourceVersion": node.metadata.resource_version, "finalizers": remaining}})),
        )
        .await
    {
        Ok(_) => ctx.metrics.node_terminated(node, ctx.clock.now()),
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    tracing::info!(node = %name, provider_id = %provider_id(node), "deleted node");
    Ok(Action::await_change())
}
