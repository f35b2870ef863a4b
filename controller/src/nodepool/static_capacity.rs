//! The executor of static NodePools (`spec.replicas`, gate `StaticCapacity`; upstream
//! `static.provisioning` and `static.deprovisioning`): each NodePool reconcile of a static pool
//! decides with [`karpenter_core::provisioning::static_capacity::decide`], creates the
//! NodeClaims through the provisioner's executor (limits re-checked, own writes awaited), deletes
//! the surplus, and returns the pool's `StaticCapacity` condition for the reconcile's one status
//! write. With the gate off nothing is created or deleted, and the condition says why.

use std::collections::HashMap;
use std::sync::Arc;

use crds::NodePool;
use crds::conditions::{self, READY};
use karpenter_core::provisioning::listing;
use karpenter_core::provisioning::plan::{self, Plan};
use karpenter_core::provisioning::static_capacity::{Verdict, decide};

use crate::nodeclaim::writes::delete_claim_as_read;
use crate::runtime::Context;
use crate::runtime::events::{DEFAULT_DEDUPE, EventSpec, EventType, reason, reference};
use crate::runtime::feature_gates::FeatureGate;
use crate::runtime::reconcile::ReconcileError;

/// A condition to set: True, or False with a reason; and the message.
pub struct StaticCondition {
    /// The condition's status.
    pub ok: bool,
    /// Its reason (CamelCase), e.g. `NodeLimitReached`.
    pub reason: &'static str,
    /// Its message, e.g. `limits.nodes 2 holds spec.replicas 3 at 2 NodeClaims`.
    pub message: String,
}

impl StaticCondition {
    fn not(reason: &'static str, message: String) -> StaticCondition {
        StaticCondition {
            ok: false,
            reason,
            message,
        }
    }
}

/// The condition for a verdict.
fn condition(verdict: &Verdict) -> StaticCondition {
    match verdict {
        Verdict::Satisfied { replicas } => StaticCondition {
            ok: true,
            reason: "ReplicasReady",
            message: format!("{replicas} NodeClaim(s), as spec.replicas asks"),
        },
        Verdict::Scaling { have, replicas } => StaticCondition::not(
            "Scaling",
            format!("scaling from {have} to {replicas} NodeClaim(s)"),
        ),
        Verdict::NodeLimitReached { limit, replicas } => StaticCondition::not(
            "NodeLimitReached",
            format!("limits.nodes {limit} holds spec.replicas {replicas} at {limit} NodeClaim(s)"),
        ),
        Verdict::NoInstanceType(why) => StaticCondition::not("NoInstanceType", why.clone()),
    }
}

/// Bring static NodePool `pool` toward `spec.replicas` and say where it stands. Not Ready: nothing
/// is done (as upstream). Gate off: nothing is done and the condition names the gate.
///
/// Errors: the instance types could not be listed (retried with the reconcile).
pub async fn reconcile(
    ctx: &Context,
    pool: &Arc<NodePool>,
) -> Result<StaticCondition, ReconcileError> {
    if !ctx
        .settings
        .feature_gates
        .enabled(FeatureGate::StaticCapacity)
    {
        return Ok(StaticCondition::not(
            "FeatureGateDisabled",
            "spec.replicas is not honoured: the StaticCapacity feature gate is off (set \
             FEATURE_GATES=StaticCapacity=true)"
                .into(),
        ));
    }
    let conds = pool
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    if !conditions::is_true(conds, READY) {
        return Ok(StaticCondition::not(
            "NodePoolNotReady",
            "the NodePool is not Ready; no NodeClaim is created or removed".into(),
        ));
    }
    let snap = ctx.state.snapshot();
    let class_name = &pool.spec.template.spec.node_class_ref.name;
    let Some(class) = snap.nodeclass(class_name).cloned() else {
        return Ok(StaticCondition::not(
            "NodeClassNotFound",
            format!("EC2NodeClass {class_name:?} not found"),
        ));
    };
    let listed = ctx.cloud.instance_types(&class).await?;
    // The pool's own instance types, its NodeOverlays applied as for every other NodeClaim.
    let listings: HashMap<String, listing::Listing> =
        HashMap::from([(class_name.clone(), Ok(Arc::clone(&listed)))]);
    let pass = listing::pool_types(&snap, &listings);
    let types = pass
        .pools
        .iter()
        .find(|(p, _)| p.metadata.name == pool.metadata.name)
        .and_then(|(_, t)| t.as_ref().ok().cloned())
        // The provisioner's listing leaves static pools out (SkipReason::Static), so their
        // NodeOverlays are not applied yet: the cloud's types as listed.
        .unwrap_or(listed);
    let settings = plan::Settings {
        hash_versions: ctx.settings.hash_versions.clone(),
        ..plan::Settings::default()
    };
    let decision = decide(&snap, pool, &types, &settings, ctx.clock.now());
    if !decision.create.is_empty() {
        let planned = Plan {
            nodeclaims: decision.create,
            types: pass.index,
            ..Plan::default()
        };
        let result = crate::provisioning::execute(ctx, &snap, planned).await;
        tracing::info!(nodepool = %pool.metadata.name.as_deref().unwrap_or_default(), created = result.created.len(),
            "created static nodeclaim(s)");
    }
    for claim in &decision.delete {
        match delete_claim_as_read(&ctx.client, claim).await {
            Ok(true) => ctx.recorder.publish(EventSpec {
                regarding: reference(claim.as_ref()),
                type_: EventType::Normal,
                reason: reason::STATIC_SCALE_DOWN,
                message: format!(
                    "Removing NodeClaim: NodePool {} asks for {} replica(s)",
                    pool.metadata.name.as_deref().unwrap_or_default(),
                    pool.spec.replicas.unwrap_or(0)
                ),
                dedupe: DEFAULT_DEDUPE,
            }),
            Ok(false) => {}
            // Changed since read: the next reconcile decides again on the fresh object.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(condition(&decision.verdict))
}
