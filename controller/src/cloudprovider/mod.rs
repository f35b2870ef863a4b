//! The cloud provider contract (upstream `pkg/cloudprovider/types.go`): launch an instance for a
//! NodeClaim, delete, get and list instances, offer instance types with priced zonal offerings,
//! resolve a node class, and name the node conditions to repair; its implementations (`sim`, `aws`) and how one is chosen
//! ([`build`]). The data it trades in (instances, launches, typed errors) is
//! [`karpenter_core::cloud`], so pure decisions can read it.

#[cfg(feature = "aws")]
pub mod aws;
pub mod build;
pub mod queue;
pub mod sim;

use std::sync::Arc;

use async_trait::async_trait;
use crds::{EC2NodeClass, NodeClaim};
use karpenter_core::capacity::InstanceType;
use karpenter_core::capacity::reservation::Record;
use karpenter_core::cloud::{
    CloudError, Instance, Launched, NodeClassResolution, claim_for_instance,
};
use karpenter_core::lifecycle::repair::RepairPolicy;

/// A cloud that launches instances for NodeClaims.
#[async_trait]
pub trait CloudProvider: Send + Sync {
    /// Provider name, e.g. `aws` or `sim`.
    fn name(&self) -> &str;

    /// Launch the cheapest available offering that satisfies the NodeClaim's requirements.
    /// Idempotent: a NodeClaim that already has an instance gets that instance back.
    async fn create(
        &self,
        claim: &NodeClaim,
        node_class: &EC2NodeClass,
    ) -> Result<Launched, CloudError>;

    /// Terminate the NodeClaim's instance; `NodeClaimNotFound` once it is gone.
    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudError>;

    /// The instance behind a providerID. Errors: `NodeClaimNotFound`.
    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError>;

    /// Every instance this provider launched that is not terminated.
    async fn list(&self) -> Result<Vec<Instance>, CloudError>;

    /// Instance types a NodePool using `node_class` can launch, with offerings limited to the
    /// node class's zones and current availability.
    async fn instance_types(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<Arc<Vec<Arc<InstanceType>>>, CloudError>;

    /// The capacity reservations `ids` as the cloud describes them now
    /// (DescribeCapacityReservations by id); ids it does not know are left out. What the
    /// reservation controller reads to drain expiring Capacity Blocks. A cloud without
    /// reservations returns none.
    ///
    /// Errors: the cloud's API failed.
    async fn capacity_reservations(&self, _ids: &[String]) -> Result<Vec<Record>, CloudError> {
        Ok(Vec::new())
    }

    /// Resolve a node class's selectors (subnets, security groups, AMIs, instance profile).
    async fn resolve_node_class(&self, node_class: &EC2NodeClass) -> NodeClassResolution;

    /// The unhealthy node conditions this cloud asks Karpenter to repair, with how long each
    /// may hold (upstream `RepairPolicies`); node repair (`NodeRepair` feature gate) replaces a
    /// node that matches one for longer. The default: none, and node repair does not run.
    fn repair_policies(&self) -> Vec<RepairPolicy> {
        Vec::new()
    }

    /// A signal that [`CloudProvider::resolve_node_class`] may answer differently now (the
    /// simulated cloud published an image, changed its network): the value is bumped on every
    /// such change and the node class controller then re-resolves every node class at once.
    /// `None` (the default): changes are seen at the controller's periodic resync only.
    fn resolution_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }

    /// The interruption queue this cloud feeds (`--interruption-queue`), read by the
    /// interruption controller; `None` (the default) when interruption handling is off.
    fn interruption_queue(&self) -> Option<Arc<dyn queue::InterruptionQueue>> {
        None
    }

    /// Mark an offering (instance type, zone, capacity type) unavailable for the provider's
    /// capacity-error cache period (3 minutes), as a launch that ran out of capacity does: an
    /// interrupted spot offering is not launched into again at once (upstream
    /// `UnavailableOfferings.MarkUnavailable` on a spot interruption). The default does
    /// nothing (a provider without such a cache).
    fn mark_offering_unavailable(&self, _instance_type: &str, _zone: &str, _capacity_type: &str) {}

    /// Terminate instances no NodeClaim owns (garbage collection). The default deletes them one
    /// by one through [`CloudProvider::delete`]; providers with a batch API override it.
    ///
    /// Errors: the first failure (instances already gone are not errors).
    async fn delete_instances(&self, instances: &[Instance]) -> Result<(), CloudError> {
        for i in instances {
            let stub = claim_for_instance(&i.provider_id, i.nodeclaim.as_deref())?;
            match self.delete(&stub).await {
                Ok(()) | Err(CloudError::NodeClaimNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Clean up what the provider made for a node class that is being deleted (launch
    /// templates), once no NodeClaim uses it. Errors are retried by the caller.
    async fn node_class_deleted(&self, _node_class: &EC2NodeClass) -> Result<(), CloudError> {
        Ok(())
    }
}
