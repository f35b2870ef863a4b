//! A cloud provider decorator that times every call and counts its errors (upstream
//! `pkg/cloudprovider/metrics`): `karpenter_cloudprovider_duration_seconds` and
//! `karpenter_cloudprovider_errors_total`, labelled by the calling controller, the method and
//! the provider's name.
//!
//! The calling controller is not an argument of the [`CloudProvider`] methods, so it travels in
//! a task-local: the operator runs each controller's future in [`in_controller`] with its name,
//! and `operator::reconcile::drive` wraps every reconcile future of a kube-runtime controller
//! the same way (kube-runtime may poll reconciles away from the controller's own future). Every
//! cloud call made inside is labelled with that name; calls from anywhere else carry
//! [`UNKNOWN_CONTROLLER`].

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use crds::{EC2NodeClass, NodeClaim};

use crate::cloudprovider::CloudProvider;
use crate::runtime::metrics::Metrics;
use karpenter_core::capacity::InstanceType;
use karpenter_core::capacity::reservation::Record;
use karpenter_core::cloud::{CloudError, Instance, Launched, NodeClassResolution};

tokio::task_local! {
    static CONTROLLER: &'static str;
}

/// The `controller` label of cloud calls made outside [`in_controller`].
pub const UNKNOWN_CONTROLLER: &str = "unknown";

/// Run `fut` as controller `name` (upstream's controller names, e.g. `provisioner`,
/// `nodeclaim.lifecycle`): cloud calls it makes are labelled `controller="<name>"`.
pub async fn in_controller<F: Future>(name: &'static str, fut: F) -> F::Output {
    CONTROLLER.scope(name, fut).await
}

/// The controller the current task runs as ([`UNKNOWN_CONTROLLER`] outside [`in_controller`]).
pub fn current_controller() -> &'static str {
    CONTROLLER.try_with(|c| *c).unwrap_or(UNKNOWN_CONTROLLER)
}

/// The `error` label of a failed call, in upstream's categories: `NodeClaimNotFoundError`,
/// `InsufficientCapacityError`, `NodeClassNotReadyError`, and `unknown` for every other error.
pub fn error_label(e: &CloudError) -> &'static str {
    match e {
        CloudError::NodeClaimNotFound(_) => "NodeClaimNotFoundError",
        CloudError::InsufficientCapacity(_) => "InsufficientCapacityError",
        CloudError::NodeClassNotReady(_) => "NodeClassNotReadyError",
        CloudError::Create { .. } | CloudError::Other(_) => "unknown",
    }
}

/// A [`CloudProvider`] that forwards every call to `inner` and records it in [`Metrics`].
/// Method labels follow upstream's interface names (`Create`, `Delete`, `Get`, `List`,
/// `GetInstanceTypes`); this project's extra methods are named the same way
/// (`ResolveNodeClass`, `DeleteInstances`, `NodeClassDeleted`).
pub struct MeteredCloud {
    inner: Arc<dyn CloudProvider>,
    metrics: Arc<Metrics>,
}

impl MeteredCloud {
    /// Wrap `inner`, recording into `metrics`.
    pub fn new(inner: Arc<dyn CloudProvider>, metrics: Arc<Metrics>) -> MeteredCloud {
        MeteredCloud { inner, metrics }
    }

    /// Wrap `inner` as a shared provider (what the operator's context holds).
    pub fn wrap(inner: Arc<dyn CloudProvider>, metrics: Arc<Metrics>) -> Arc<dyn CloudProvider> {
        Arc::new(MeteredCloud::new(inner, metrics))
    }

    async fn timed<T>(
        &self,
        method: &'static str,
        call: impl Future<Output = Result<T, CloudError>>,
    ) -> Result<T, CloudError> {
        let start = Instant::now();
        let result = call.await;
        let controller = current_controller();
        let provider = self.inner.name();
        self.metrics.cloud_call(
            controller,
            method,
            provider,
            start.elapsed(),
            result.as_ref().err().map(error_label),
        );
        result
    }
}

#[async_trait]
impl CloudProvider for MeteredCloud {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn create(
        &self,
        claim: &NodeClaim,
        node_class: &EC2NodeClass,
    ) -> Result<Launched, CloudError> {
        self.timed("Create", self.inner.create(claim, node_class))
            .await
    }

    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        self.timed("Delete", self.inner.delete(claim)).await
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        self.timed("Get", self.inner.get(provider_id)).await
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        self.timed("List", self.inner.list()).await
    }

    async fn instance_types(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<Arc<Vec<Arc<InstanceType>>>, CloudError> {
        self.timed("GetInstanceTypes", self.inner.instance_types(node_class))
            .await
    }

    async fn capacity_reservations(&self, ids: &[String]) -> Result<Vec<Record>, CloudError> {
        self.timed(
            "DescribeCapacityReservations",
            self.inner.capacity_reservations(ids),
        )
        .await
    }

    async fn resolve_node_class(&self, node_class: &EC2NodeClass) -> NodeClassResolution {
        let start = Instant::now();
        let resolution = self.inner.resolve_node_class(node_class).await;
        self.metrics.cloud_call(
            current_controller(),
            "ResolveNodeClass",
            self.inner.name(),
            start.elapsed(),
            None,
        );
        resolution
    }

    fn repair_policies(&self) -> Vec<karpenter_core::lifecycle::repair::RepairPolicy> {
        self.inner.repair_policies()
    }

    fn resolution_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.inner.resolution_changes()
    }

    fn interruption_queue(
        &self,
    ) -> Option<Arc<dyn crate::cloudprovider::queue::InterruptionQueue>> {
        self.inner.interruption_queue()
    }

    fn mark_offering_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str) {
        self.inner
            .mark_offering_unavailable(instance_type, zone, capacity_type);
    }

    async fn delete_instances(&self, instances: &[Instance]) -> Result<(), CloudError> {
        self.timed("DeleteInstances", self.inner.delete_instances(instances))
            .await
    }

    async fn node_class_deleted(&self, node_class: &EC2NodeClass) -> Result<(), CloudError> {
        self.timed(
            "NodeClassDeleted",
            self.inner.node_class_deleted(node_class),
        )
        .await
    }
}
