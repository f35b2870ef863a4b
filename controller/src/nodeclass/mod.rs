//! The EC2NodeClass status controller (upstream `aws:pkg/controllers/nodeclass`): resolves
//! subnets, security groups, AMIs and the instance profile through the cloud provider, writes
//! them to status with one condition each and a root `Ready` (a spec that breaks a CRD rule,
//! such as both `role` and `instanceProfile`, is `ValidationSucceeded=False`), and holds the
//! `karpenter.k8s.aws/termination` finalizer while NodeClaims still use the class.

use std::sync::Arc;
use std::time::Duration;

use crds::conditions::{
    AMIS_READY, CAPACITY_RESERVATIONS_READY, ConditionSet, INSTANCE_PROFILE_READY,
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
use crate::runtime::reconcile::{ReconcileError, drive};

/// Selectors are re-resolved at least this often (upstream refreshes subnets every minute).
const RESYNC: Duration = Duration::from_secs(60);

/// `CapacityReservationsReady=False`: DescribeCapacityReservations failed.
const CAPACITY_RESERVATIONS_RESOLUTION_FAILED: &str = "CapacityReservationsResolutionFailed";

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

/// `CapacityReservationsReady` for a node class that selects reservations (`selects`): True
/// when they resolved, False with reason `CapacityReservationsResolutionFailed` and the cloud's
/// error when they did not (the previous `status.capacityReservations` stands meanwhile). Not
/// among `Ready`'s dependents, so a failed DescribeCapacityReservations does not stop launches
/// into the other capacity. A class that selects none carries no such condition.
fn capacity_reservations_condition(set: &mut ConditionSet<'_>, selects: bool, error: Option<&str>) {
    match (selects, error) {
        (false, _) => {
            // Never a dependent of this set, so clearing cannot fail.
            let _ = set.clear(CAPACITY_RESERVATIONS_READY);
        }
        (true, None) => {
            set.set_true(CAPACITY_RESERVATIONS_READY);
        }
        (true, Some(e)) => {
            set.set_false(
                CAPACITY_RESERVATIONS_READY,
                CAPACITY_RESERVATIONS_RESOLUTION_FAILED,
                e,
            );
        }
    }
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
    nc.status = Some(status);
    {
        let mut set = nc.condition_set(ctx.clock.now());
        for t in [
            SUBNETS_READY,
            SECURITY_GROUPS_READY,
            AMIS_READY,
            INSTANCE_PROFILE_READY,
            VALIDATION_SUCCEEDED,
            PLACEMENT_GROUP_READY,
        ] {
            match &resolution.not_ready {
                Some((failed, reason, message)) if failed == t => set.set_false(t, reason, message),
                _ => set.set_true(t),
            };
        }
        capacity_reservations_condition(
            &mut set,
            !obj.spec.capacity_reservation_selector_terms.is_empty(),
            resolution.capacity_reservations_error.as_deref(),
        );
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

    #[test]
    fn a_failed_reservation_lookup_is_reported_without_making_the_class_unready() {
        let mut nc = class(json!({}));
        let now: jiff::Timestamp = "2026-03-10T12:00:00Z".parse().expect("time");
        let status = |nc: &EC2NodeClass, t: &str| {
            nc.status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == t))
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        {
            let mut set = nc.condition_set(now);
            for t in [
                SUBNETS_READY,
                SECURITY_GROUPS_READY,
                AMIS_READY,
                INSTANCE_PROFILE_READY,
                VALIDATION_SUCCEEDED,
                PLACEMENT_GROUP_READY,
            ] {
                set.set_true(t);
            }
            capacity_reservations_condition(
                &mut set,
                true,
                Some("RequestLimitExceeded: slow down"),
            );
        }
        assert_eq!(
            status(&nc, CAPACITY_RESERVATIONS_READY),
            Some((
                "False".into(),
                "CapacityReservationsResolutionFailed".into(),
                "RequestLimitExceeded: slow down".into()
            ))
        );
        assert_eq!(
            status(&nc, crds::conditions::READY).map(|c| c.0),
            Some("True".into())
        );
        capacity_reservations_condition(&mut nc.condition_set(now), true, None);
        assert_eq!(
            status(&nc, CAPACITY_RESERVATIONS_READY).map(|c| c.0),
            Some("True".into())
        );
        capacity_reservations_condition(&mut nc.condition_set(now), false, None);
        assert_eq!(status(&nc, CAPACITY_RESERVATIONS_READY), None);
    }
}
