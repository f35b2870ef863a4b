//! Registration (upstream `lifecycle/registration.go`): find the Node whose `spec.providerID`
//! matches the NodeClaim, sync the NodeClaim's labels, annotations and taints onto it, add the
//! termination finalizer and an owner reference, and remove the `karpenter.sh/unregistered`
//! taint. Karpenter never creates the Node: the kubelet registers it.

use std::sync::Arc;

use crds::conditions::REGISTERED;
use crds::labels::{NODE_REGISTERED_LABEL, UNREGISTERED_TAINT_KEY};
use crds::{NodeClaim, StatusConditions};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::runtime::Context;
use crate::runtime::events::{DEFAULT_DEDUPE, EventSpec, EventType, reason, reference};
use crate::runtime::reconcile::ReconcileError;
use karpenter_core::lifecycle::registration::registration_patch;
use karpenter_core::lifecycle::registration_health;
use karpenter_core::snapshot::nodepool_of;

/// Nominate the pods the provisioner planned onto this NodeClaim to its node (plan = binding),
/// before the registration patch lifts the `karpenter.sh/unregistered` taint, so kube-scheduler
/// holds their room from the moment any pod could land there. Failed writes are retried by the
/// provisioner's nomination sweep. Returns how many pods were nominated.
async fn nominate_planned_pods(ctx: &Context, claim: &NodeClaim, node: &str) -> usize {
    let Some(name) = claim.metadata.name.as_deref() else {
        return 0;
    };
    let planned: std::collections::HashMap<_, _> = ctx
        .state
        .planned()
        .iter()
        .filter(|(_, c)| c.as_str() == name)
        .map(|(p, c)| (p.clone(), c.clone()))
        .collect();
    if planned.is_empty() {
        return 0;
    }
    // Only this NodeClaim's pods, looked up by key in the pod cache.
    let pods = planned
        .keys()
        .filter_map(|k| {
            ctx.state
                .pods
                .get(&kube::runtime::reflector::ObjectRef::new(&k.name).within(&k.namespace))
        })
        .collect();
    let snap = karpenter_core::snapshot::Snapshot {
        pods,
        planned,
        ..Default::default()
    };
    let pods = karpenter_core::provisioning::nomination::planned_onto(&snap, name);
    if pods.is_empty() {
        return 0;
    }
    crate::provisioning::nomination::nominate(ctx, &pods, node).await
}

/// Register the node for a launched NodeClaim, if it has appeared.
///
/// Errors: the node patch failed (retried; a conflict means the node changed meanwhile).
pub async fn register(ctx: &Context, claim: &mut NodeClaim) -> Result<(), ReconcileError> {
    let now = ctx.clock.now();
    let nodes = ctx.state.nodes_for_claim(claim);
    let node = match nodes.as_slice() {
        [] => {
            claim.condition_set(now).set_unknown_with_reason(
                REGISTERED,
                "NodeNotFound",
                "Node not registered with cluster",
            );
            return Ok(());
        }
        [node] => node,
        _ => {
            claim.condition_set(now).set_false(
                REGISTERED,
                "MultipleNodesFound",
                "Invariant violated, matched multiple nodes",
            );
            return Ok(());
        }
    };
    let node_name = node.metadata.name.clone().unwrap_or_default();
    let has_taint = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == UNREGISTERED_TAINT_KEY));
    let has_label = node
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(NODE_REGISTERED_LABEL));
    if !has_taint && !has_label {
        ctx.recorder.publish(EventSpec {
            regarding: reference(node.as_ref()),
            type_: EventType::Warning,
            reason: reason::UNREGISTERED_TAINT_MISSING,
            message: format!("Missing {UNREGISTERED_TAINT_KEY} taint which prevents pods from scheduling before Karpenter registers the node"),
            dedupe: DEFAULT_DEDUPE,
        });
    }
    // Nominate this NodeClaim's planned pods while the taint still keeps other pods off, then
    // read the node afresh from the API: the registration patch is bound to the resourceVersion
    // it reads, and the node (its kubelet's status) changed while the nominations were written.
    let mut fresh = None;
    if ctx.settings.nominate_planned_pods
        && has_taint
        && !has_label
        && nominate_planned_pods(ctx, claim, &node_name).await > 0
    {
        let api: Api<Node> = Api::all(ctx.client.clone());
        fresh = Some(Arc::new(api.get(&node_name).await?));
    }
    let node = fresh.as_ref().unwrap_or(node);
    if let Some(mut patch) = registration_patch(claim, node) {
        if !has_label {
            // The write that adds the registered label counts the node as created; bound to
            // the Node as read, so a second write from a stale cache (or another replica)
            // answers 409 Conflict and counts nothing.
            patch["metadata"]["resourceVersion"] = json!(node.metadata.resource_version);
        }
        let api: Api<Node> = Api::all(ctx.client.clone());
        api.patch(&node_name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        if !has_label {
            ctx.metrics.node_created(claim);
        }
    }
    claim.status.get_or_insert_with(Default::default).node_name = Some(node_name.clone());
    claim.condition_set(now).set_true(REGISTERED);
    let uid = claim.metadata.uid.as_deref().unwrap_or_default();
    if !ctx
        .state
        .lifecycle_memory()
        .first_announcement(uid, REGISTERED, now)
    {
        return Ok(());
    }
    if let Some(pool) = nodepool_of(claim.metadata.labels.as_ref()) {
        ctx.state
            .report_registration(pool, registration_health::Outcome::Registered);
    }
    ctx.recorder.about(
        claim,
        EventType::Normal,
        reason::REGISTERED,
        format!("Registered node {node_name}"),
    );
    tracing::info!(nodeclaim = %claim.metadata.name.as_deref().unwrap_or_default(), node = %node_name, provider_id = %node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).unwrap_or_default(), "registered nodeclaim");
    Ok(())
}
