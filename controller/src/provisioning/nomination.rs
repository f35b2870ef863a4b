//! Plan = binding, the writes: `status.nominatedNodeName` on the pods the provisioner planned
//! onto a NodeClaim once its node registers, and cleared where the plan no longer holds
//! (decided by `karpenter_core::provisioning::nomination`; KEP-5278 makes the component that
//! set a nomination responsible for clearing it).
//!
//! The plan itself is recorded in memory ([`ClusterState::planned`]) when the executor creates
//! a NodeClaim or plans pods onto an in-flight one.
//!
//! [`ClusterState::planned`]: crate::state::ClusterState::planned

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use karpenter_core::provisioning::nomination;
use karpenter_core::scheduling::pod::PodKey;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::runtime::Context;

/// Pod status writes in flight at once.
const CONCURRENCY: usize = 16;

/// Why a nomination write failed.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    /// The patch could not be built (a bug: the patch is a literal).
    #[error("building the patch: {0}")]
    Patch(#[from] serde_json::Error),
    /// The API server refused or did not answer.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// Whether an API error means the pod moved on (gone, or its nomination changed meanwhile: a
/// JSON patch `test` that fails answers 422 Invalid, a conflict 409).
fn moved_on(e: &WriteError) -> bool {
    matches!(e, WriteError::Api(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422))
}

/// Set (`Some`) or clear (`None`) one pod's `status.nominatedNodeName`. Clearing tests that the
/// pod is still nominated to `expected`, so a newer nomination (kube-scheduler's preemption)
/// is never erased.
async fn write(
    ctx: &Context,
    pod: &PodKey,
    node: Option<&str>,
    expected: &str,
) -> Result<(), WriteError> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace);
    let patch = match node {
        Some(node) => Patch::Merge(json!({"status": {"nominatedNodeName": node}})),
        None => Patch::Json::<serde_json::Value>(serde_json::from_value(json!([
            {"op": "test", "path": "/status/nominatedNodeName", "value": expected},
            {"op": "remove", "path": "/status/nominatedNodeName"},
        ]))?),
    };
    api.patch_status(&pod.name, &PatchParams::default(), &patch)
        .await?;
    Ok(())
}

/// Nominate `pods` to `node` (several writes at once). Returns how many were nominated; a pod
/// that is gone is skipped, other failures are logged and retried by the next sweep.
pub async fn nominate(ctx: &Context, pods: &[PodKey], node: &str) -> usize {
    let writes = futures::stream::iter(pods.to_vec())
        .map(|pod| async move {
            let result = write(ctx, &pod, Some(node), "").await;
            (pod, result)
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let mut done = 0;
    for (pod, result) in writes {
        match result {
            Ok(()) => done += 1,
            Err(e) if moved_on(&e) => {}
            Err(e) => {
                tracing::warn!(pod = %pod, node, error = %e, "nominating pod failed; retrying on the next sweep");
            }
        }
    }
    if done > 0 {
        tracing::info!(
            node,
            pods = done,
            "nominated pods to the node planned for them"
        );
    }
    done
}

/// One pass over the current state: forget settled plan records, clear stale nominations
/// (so their pods can be provisioned again), and nominate planned pods whose node registered
/// while a write failed or before this replica led. Runs before every provisioning pass and on
/// the provisioner's requeue.
pub async fn sweep(ctx: &Context) {
    let snap = ctx.state.snapshot();
    let settled = nomination::settled(&snap, ctx.clock.now());
    if !settled.is_empty() {
        let mut planned = ctx.state.planned();
        for pod in &settled {
            planned.remove(pod);
        }
    }
    let stale = nomination::stale(&snap, ctx.clock.now());
    let cleared = futures::stream::iter(stale)
        .map(|s| async move {
            let result = write(ctx, &s.pod, None, &s.node).await;
            (s, result)
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    for (s, result) in cleared {
        match result {
            Ok(()) => {
                tracing::info!(pod = %s.pod, node = %s.node, reason = %s.reason, "cleared nomination")
            }
            Err(e) if moved_on(&e) => {}
            Err(e) => {
                tracing::warn!(pod = %s.pod, node = %s.node, error = %e, "clearing nomination failed")
            }
        }
    }
    let mut by_node: std::collections::BTreeMap<String, Vec<PodKey>> = Default::default();
    for n in nomination::to_nominate(&snap) {
        by_node.entry(n.node).or_default().push(n.pod);
    }
    for (node, pods) in by_node {
        nominate(ctx, &pods, &node).await;
    }
}
