//! The EC2NodeClass status controller (upstream `aws:pkg/controllers/nodeclass`): resolves
//! subnets, security groups, AMIs and the instance profile through the cloud provider, writes
//! them to status with one condition each and a root `Ready` (a spec that breaks a CRD rule,
//! such as both `role` and `instanceProfile`, is `ValidationSucceeded=False`), and holds the
//! `karpenter.k8s.aws/termination` finalizer while NodeClaims still use the class.

use std::sync::Arc;
use std::time::Duration;

use crds::conditions::{
    AMIS_READY, CAPACITY_RESERVATIONS_READY, EC2NODECLASS_CONDITIONS,
    EC2NODECLASS_CONDITIONS_WITH_CAPACITY_RESERVATIONS, INSTANCE_PROFILE_READY,
    PLACEMENT_GROUP_READY, SECURITY_GROUPS_READY, SUBNETS_READY, VALIDATION_SUCCEEDED,
};
use crds::labels::EC2NODECLASS_TERMINATION_FINALIZER;
use crds::validation;
use crds::{EC2NodeClass, StatusConditions};
use futures::StreamExt;
use karpenter_core::capacity::node_class::{CapacityConfig, CapacityOptions};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::json;
use tokio_stream::wrappers::WatchStream;

use crate::runtime::Context;
use crate::runtime::events::{EventSpec, EventType, reason, reference};
use crate::runtime::feature_gates::FeatureGate;
use crate::runtime::reconcile::{ReconcileError, drive};

/// Selectors are re-resolved at least this often (upstream refreshes subnets every minute).
const RESYNC: Duration = Duration::from_secs(60);

/// Run the controller until the task is aborted. Besides changes to EC2NodeClasses and the
/// periodic resync, every node class is re-resolved when the cloud signals that resolutions
/// changed ([`crate::cloudprovider::CloudProvider::resolution_changes`]; the simulated cloud
/// does when an AMI release is published).
pub async fn run(ctx: Arc<Context>) {
    let classes: Api<EC2NodeClass> = Api::all(ctx.client.clone());
    let mut controller = Controller::new(classes, watcher::Config::default());
    if let Some(changes) = ctx.cloud.resolution_changes() {
        controller = controller.reconcile_all_on(WatchStream::from_changes(changes).map(|_| ()));
    }
    drive(controller, reconcile, ctx).await;
}

/// The condition that keeps a node class from being ready, as `(type, reason, message)`: a
/// spec that breaks a rule of the CRD comes first (`ValidationSucceeded=False`, reason
/// `NodeClassValidationFailed`, the rules' messages: upstream's CRD refuses such a spec with
/// CEL, so one here got past an API server that did not enforce the rules), then what the
/// cloud's resolution reported (`resolved`), then kubelet settings the capacity model cannot
/// read (they would fail every launch). `None` when the class is ready.
fn not_ready(
    obj: &EC2NodeClass,
    resolved: Option<(String, String, String)>,
) -> Option<(String, String, String)> {
    let spec_errors = validation::validate_ec2nodeclass_spec(&obj.spec);
    if !spec_errors.is_empty() {
        return Some((
            VALIDATION_SUCCEEDED.to_string(),
            validation::NODE_CLASS_VALIDATION_FAILED_REASON.to_string(),
            validation::summarize(&spec_errors),
        ));
    }
    if resolved.is_some() {
        return resolved;
    }
    CapacityConfig::from_node_class(obj, CapacityOptions::default())
        .err()
        .map(|e| {
            (
                VALIDATION_SUCCEEDED.to_string(),
                e.condition_reason().to_string(),
                e.to_string(),
            )
        })
}

async fn reconcile(obj: Arc<EC2NodeClass>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let api: Api<EC2NodeClass> = Api::all(ctx.client.clone());
    let finalizers = obj.metadata.finalizers.clone().unwrap_or_default();
    let has_finalizer = finalizers
        .iter()
        .any(|f| f == EC2NODECLASS_TERMINATION_FINALIZER);
    if obj.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        let users: Vec<String> = ctx
            .state
            .nodeclaims
            .state()
            .iter()
            .filter(|c| c.spec.node_class_ref.name == name)
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        if !users.is_empty() {
            ctx.recorder.publish(EventSpec {
                regarding: reference(obj.as_ref()),
                type_: EventType::Normal,
                reason: reason::WAITING_ON_NODECLAIM_TERMINATION,
                message: format!("Waiting on NodeClaim termination for {}", users.join(", ")),
                dedupe: Duration::from_secs(600),
            });
            return Ok(Action::requeue(Duration::from_secs(10)));
        }
        if let Err(e) = ctx.cloud.node_class_deleted(&obj).await {
            tracing::warn!(ec2nodeclass = %name, error = %e, "cleaning up after node class");
            return Ok(Action::requeue(Duration::from_secs(10)));
        }
        let remaining: Vec<String> = finalizers
            .into_iter()
            .filter(|f| f != EC2NODECLASS_TERMINATION_FINALIZER)
            .collect();
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": remaining}})),
        )
        .await?;
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        let mut f = finalizers;
        f.push(EC2NODECLASS_TERMINATION_FINALIZER.to_string());
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": f}})),
        )
        .await?;
        return Ok(Action::await_change());
    }
    crate::runtime::unsupported::report_fields(&ctx, obj.as_ref(), "EC2NodeClass", &obj.spec);
    let restamp_pending = crate::drift::stamp::stamp_nodeclass(&ctx, &obj).await? > 0;
    let mut resolution = ctx.cloud.resolve_node_class(&obj).await;
    resolution.not_ready = not_ready(&obj, resolution.not_ready.take());
    let mut nc = (*obj).clone();
    let mut status = resolution.status;
    status.conditions = nc
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    // Upstream resolves reservations, and has `CapacityReservationsReady` count towards
    // `Ready`, only with the `ReservedCapacity` gate on; with it off no reservation is offered.
    let reserved = ctx
        .settings
        .feature_gates
        .enabled(FeatureGate::ReservedCapacity);
    if !reserved {
        status.capacity_reservations.clear();
    }
    nc.status = Some(status);
    {
        let (types, checked): (_, &[&str]) = if reserved {
            (
                EC2NODECLASS_CONDITIONS_WITH_CAPACITY_RESERVATIONS,
                &[CAPACITY_RESERVATIONS_READY],
            )
        } else {
            (EC2NODECLASS_CONDITIONS, &[])
        };
        let mut set = nc.condition_set_with(types, ctx.clock.now());
        for t in [
            SUBNETS_READY,
            SECURITY_GROUPS_READY,
            AMIS_READY,
            INSTANCE_PROFILE_READY,
            VALIDATION_SUCCEEDED,
            PLACEMENT_GROUP_READY,
        ]
        .iter()
        .chain(checked)
        {
            match &resolution.not_ready {
                Some((failed, reason, message)) if failed == t => set.set_false(t, reason, message),
                _ => set.set_true(t),
            };
        }
    }
    if nc.status != obj.status {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": nc.status})),
        )
        .await?;
    }
    Ok(Action::requeue(if restamp_pending {
        crate::drift::stamp::RESTAMP_RETRY
    } else {
        RESYNC
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(spec: serde_json::Value) -> EC2NodeClass {
        testutil::ec2nodeclass("default")
            .role("KarpenterNodeRole-c")
            .discovery("c")
            .merge(json!({"spec": spec}))
            .build()
    }

    #[test]
    fn a_spec_that_breaks_a_crd_rule_is_not_valid_whatever_the_cloud_resolved() {
        let both = class(json!({"instanceProfile": "KarpenterNodeInstanceProfile-c"}));
        let (condition, reason, message) = not_ready(&both, None).expect("not ready");
        assert_eq!(condition, VALIDATION_SUCCEEDED);
        assert_eq!(reason, "NodeClassValidationFailed");
        assert_eq!(
            message,
            "spec: must specify exactly one of ['role', 'instanceProfile']"
        );
        // The spec is the root cause, before what resolving it reported.
        let subnets = Some((
            SUBNETS_READY.to_string(),
            "SubnetsNotFound".to_string(),
            "no subnets".to_string(),
        ));
        assert_eq!(
            not_ready(&both, subnets.clone()).map(|n| n.1),
            Some("NodeClassValidationFailed".to_string())
        );
        let valid = class(json!({}));
        assert_eq!(not_ready(&valid, None), None);
        assert_eq!(not_ready(&valid, subnets.clone()), subnets);
    }
}
