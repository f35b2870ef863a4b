//! Node termination (upstream `node/termination/controller.go`): when a Karpenter node is
//! deleted, delete its NodeClaim, taint it `karpenter.sh/disrupted:NoSchedule`, evict its pods
//! through the eviction API (PodDisruptionBudgets answer 429 and are retried), terminate the
//! instance, and release the `karpenter.sh/termination` finalizer.

use std::sync::Arc;
use std::time::Duration;

use crds::labels::{
    DISRUPTED_TAINT_KEY, EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_LABEL,
    EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_VALUE, TERMINATION_FINALIZER, disrupted_no_schedule_taint,
};
use crds::{NodeClaim, NodeClaimStatus};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::json;

use crate::cloudprovider::CloudError;
use crate::operator::Context;
use crate::operator::events::{DEFAULT_DEDUPE, EventSpec, EventType, reason, reference};
use crate::operator::reconcile::{ReconcileError, drive};
use crate::scheduling::pod::{is_owned_by, is_terminal};
use crate::scheduling::taints::tolerates;

/// Pods that block the drain: active, not owned by a DaemonSet or the node itself, and not
/// tolerating the disrupted taint.
pub fn drainable(pod: &Pod) -> bool {
    let disrupted = disrupted_no_schedule_taint();
    let tolerates_disrupted = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| tolerates(t, &disrupted)));
    !is_terminal(pod)
        && !is_owned_by(pod, "DaemonSet")
        && !is_owned_by(pod, "Node")
        && !tolerates_disrupted
}

/// Run the controller until the task is aborted.
pub async fn run(ctx: Arc<Context>) {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    drive(
        Controller::new(nodes, watcher::Config::default()),
        reconcile,
        ctx,
    )
    .await;
}

async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let finalizers = node.metadata.finalizers.clone().unwrap_or_default();
    if node.metadata.deletion_timestamp.is_none()
        || !finalizers.iter().any(|f| f == TERMINATION_FINALIZER)
    {
        return Ok(Action::await_change());
    }
    let name = node.metadata.name.clone().unwrap_or_default();
    let api: Api<Node> = Api::all(ctx.client.clone());
    let provider_id = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap_or_default();
    let claim = ctx.state.nodeclaims.state().into_iter().find(|c| {
        c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id.as_str())
    });
    if let Some(c) = claim
        .as_ref()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
    {
        let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
        if let Err(e) = claims
            .delete(
                c.metadata.name.as_deref().unwrap_or(""),
                &DeleteParams::default(),
            )
            .await
            && !matches!(&e, kube::Error::Api(a) if a.code == 404)
        {
            return Err(e.into());
        }
    }
    // Cordon for disruption.
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if !taints.iter().any(|t| t.key == DISRUPTED_TAINT_KEY) {
        taints.push(disrupted_no_schedule_taint());
        let patch = json!({
            "metadata": {"resourceVersion": node.metadata.resource_version,
                "labels": {EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_LABEL: EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_VALUE}},
            "spec": {"taints": taints},
        });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    // Drain.
    let pods: Vec<Arc<Pod>> = ctx
        .state
        .pods
        .state()
        .into_iter()
        .filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str())
                && drainable(p)
        })
        .collect();
    if !pods.is_empty() {
        for pod in pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            match pods_api.evict(&pod_name, &EvictParams::default()).await {
                Ok(_) => ctx.recorder.publish(EventSpec {
                    regarding: reference(pod.as_ref()),
                    type_: EventType::Normal,
                    reason: reason::EVICTED,
                    message: "Evicted pod".into(),
                    dedupe: DEFAULT_DEDUPE,
                }),
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(kube::Error::Api(e)) if e.code == 429 => ctx.recorder.publish(EventSpec {
                    regarding: reference(node.as_ref()),
                    type_: EventType::Warning,
                    reason: reason::FAILED_DRAINING,
                    message: format!(
                        "Failed to drain node, evicting pod {ns}/{pod_name}: {}",
                        e.message
                    ),
                    dedupe: DEFAULT_DEDUPE,
                }),
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    // Terminate the instance.
    // Without a NodeClaim, the cloud is asked by providerID alone.
    let target = match claim.as_deref() {
        Some(c) => c.clone(),
        None => {
            let mut c: NodeClaim = match serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {},
                "spec": {"requirements": [], "nodeClassRef": {"group": "", "kind": "", "name": ""}}}))
            {
                Ok(c) => c,
                Err(_) => return Ok(Action::await_change()),
            };
            c.status = Some(NodeClaimStatus {
                provider_id: Some(provider_id.clone()),
                ..Default::default()
            });
            c
        }
    };
    match ctx.cloud.delete(&target).await {
        Ok(()) => return Ok(Action::requeue(Duration::from_millis(500))),
        Err(CloudError::NodeClaimNotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let remaining: Vec<String> = finalizers
        .into_iter()
        .filter(|f| f != TERMINATION_FINALIZER)
        .collect();
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": remaining}})),
    )
    .await?;
    tracing::info!(node = %name, provider_id = %provider_id, "deleted node");
    Ok(Action::await_change())
}
