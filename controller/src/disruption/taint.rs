//! The `karpenter.sh/disrupted:NoSchedule` taint a disruption command puts on its candidates'
//! nodes (upstream `disruption/queue.go` StartCommand) and removes when it rolls back.

use crds::labels::{DISRUPTED_TAINT_KEY, disrupted_no_schedule_taint};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::runtime::Context;

/// Add or remove the `karpenter.sh/disrupted:NoSchedule` taint (a merge patch of the node's
/// taints, guarded by the resourceVersion read). Failures are logged: the termination path
/// taints again before it drains.
pub async fn taint(ctx: &Context, node: &Node, on: bool) {
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let has = taints.iter().any(|t| t.key == DISRUPTED_TAINT_KEY);
    if has == on {
        return;
    }
    if on {
        taints.push(disrupted_no_schedule_taint());
    } else {
        taints.retain(|t| t.key != DISRUPTED_TAINT_KEY);
    }
    let api: Api<Node> = Api::all(ctx.client.clone());
    let patch = json!({"metadata": {"resourceVersion": node.metadata.resource_version},
                       "spec": {"taints": taints}});
    if let Err(e) = api
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        tracing::debug!(node = %node.name_any(), error = %e, "disrupted taint not written");
    }
}
