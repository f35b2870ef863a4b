//! The cloud's side of the cloud provider contract (upstream `pkg/cloudprovider/types.go`), as
//! data: what a launch produced, an instance as the provider lists it, a resolved node class,
//! and the typed errors the lifecycle controller decides retries from; plus the one AMI rule
//! launch and drift share. The async `CloudProvider` trait that produces these lives in the
//! controller (`controller::cloudprovider`).

use std::collections::BTreeMap;

use crds::{EC2NodeClassStatus, NodeClaim};

use crate::scheduling::requirements::Requirement;
use crate::scheduling::resources::Resources;

/// A cloud error, classified the way the lifecycle controller reacts to it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CloudError {
    /// The instance does not exist (deletion is complete; a get found nothing).
    #[error("nodeclaim not found: {0}")]
    NodeClaimNotFound(String),
    /// No offering had capacity; the offerings tried are marked unavailable for a while.
    #[error("insufficient capacity: {0}")]
    InsufficientCapacity(String),
    /// The node class is not ready (selectors resolve nothing, ...).
    #[error("node class not ready: {0}")]
    NodeClassNotReady(String),
    /// A launch failed for a reason the NodeClaim should show (`Launched=Unknown` with it).
    #[error("creating instance failed ({reason}): {message}")]
    Create {
        /// Machine-readable reason, e.g. `InstanceTypeNotCompatible`.
        reason: String,
        /// The cloud's explanation, shown as the `Launched` condition's message.
        message: String,
    },
    /// Anything else (API errors, throttling): retried with backoff.
    #[error("cloud provider error: {0}")]
    Other(String),
}

/// What a launch produced, to be copied onto the NodeClaim.
#[derive(Clone, Debug, PartialEq)]
pub struct Launched {
    /// `aws:///<zone>/<instance-id>`, written to `status.providerID`; the Node registers with
    /// the same value.
    pub provider_id: String,
    /// The image the instance booted.
    pub image_id: String,
    /// Labels resolved by the launch: instance type, zone, capacity type, arch, os and the
    /// provider's instance labels.
    pub labels: BTreeMap<String, String>,
    /// Capacity of the instance (cpu in millicores, memory in bytes, pods, ...).
    pub capacity: Resources,
    /// Capacity minus kube-reserved, system-reserved and eviction thresholds.
    pub allocatable: Resources,
    /// Errors the launch met on the way that did not stop it (e.g. a fleet's per-offering
    /// capacity errors next to the instance it did launch), to be reported on the NodeClaim.
    pub warnings: Vec<String>,
}

/// An instance as the provider lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// `aws:///<zone>/<instance-id>`: what NodeClaims (`status.providerID`) and Nodes
    /// (`spec.providerID`) are matched to it by.
    pub provider_id: String,
    /// Instance id, e.g. `i-0abc...`.
    pub id: String,
    /// The NodeClaim it was launched for (from its tag), if any.
    pub nodeclaim: Option<String>,
    /// The NodePool (from its tag), if any.
    pub nodepool: Option<String>,
    /// Instance type name, e.g. `m5.large`.
    pub instance_type: String,
    /// Availability zone, e.g. `us-east-1a`.
    pub zone: String,
    /// `on-demand` or `spot`.
    pub capacity_type: String,
    /// Price of its offering, USD/hour.
    pub price: f64,
    /// When the cloud launched it (EC2's `LaunchTime`); garbage collection spares instances
    /// younger than 30s.
    pub launched_at: jiff::Timestamp,
    /// The AMI it booted, e.g. `ami-0123456789abcdef0`; AMI drift compares it with the node
    /// class's resolved AMIs.
    pub image_id: String,
    /// The subnet the instance runs in (EC2's `SubnetId`); empty when the cloud does not say.
    /// Compared with the node class's resolved subnets for subnet drift.
    pub subnet_id: String,
    /// The security groups attached to the instance (EC2's `SecurityGroups[].GroupId`).
    /// Compared with the node class's resolved security groups for security group drift.
    pub security_group_ids: Vec<String>,
}

/// A node class resolved against the cloud: the status to write and whether it is ready.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeClassResolution {
    /// Resolved subnets, security groups, AMIs and instance profile.
    pub status: EC2NodeClassStatus,
    /// The first reason the node class is not ready (condition type, reason, message), if any.
    pub not_ready: Option<(String, String, String)>,
}

/// The instance-type names a NodeClaim allows, in the order it lists them (the provisioner lists
/// them cheapest first).
pub fn ordered_type_names(claim: &NodeClaim) -> Vec<String> {
    claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == crds::labels::INSTANCE_TYPE_LABEL && r.operator == crds::Operator::In)
        .map(|r| r.values.clone())
        .unwrap_or_default()
}

/// Whether the NodeClaim's instance types were chosen by prices a NodeOverlay changed
/// (`karpenter.sh/price-overlay-applied`): a launch then tries them in the NodeClaim's order
/// rather than by the cloud's prices ([`crate::capacity::launch_offerings`]; upstream's AWS
/// provider switches CreateFleet to a `prioritized` allocation strategy).
pub fn price_overlaid(claim: &NodeClaim) -> bool {
    claim
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(crds::labels::PRICE_OVERLAY_APPLIED_ANNOTATION))
}

/// What a launch checks each of the NodeClaim's instance types against: its requests (cpu in
/// millicores, memory and storage in bytes), without extended resources when a NodeOverlay
/// set capacity on its options (`karpenter.sh/capacity-overlay-applied`). The provisioner
/// chose the options with the overlaid capacity, which the cloud's instance types do not
/// report (a device plugin advertises such a resource on the node); checking it again would
/// refuse every option and delete the NodeClaim as out of capacity, the failure reported
/// upstream in aws/karpenter-provider-aws#8704 and fixed in the Azure provider by applying
/// overlays before this check. Unreadable requests count as none.
pub fn launch_requests(claim: &NodeClaim) -> Resources {
    let mut requests = Resources::from_list(&claim.spec.resources.requests).unwrap_or_default();
    let overlaid = claim
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(crds::labels::CAPACITY_OVERLAY_APPLIED_ANNOTATION));
    if overlaid {
        requests.extended.clear();
    }
    requests
}

/// A NodeClaim that stands for an instance known only by its providerID (and the NodeClaim
/// name its tag carries, if any), for the controller's `CloudProvider::delete`, which takes a
/// NodeClaim: an orphaned instance, or the instance of a node whose NodeClaim is gone.
///
/// Errors: the stand-in cannot be built (a defect in the NodeClaim type).
pub fn claim_for_instance(
    provider_id: &str,
    nodeclaim: Option<&str>,
) -> Result<NodeClaim, CloudError> {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": nodeclaim.unwrap_or_default()},
        "spec": {"nodeClassRef": {"group": "", "kind": "", "name": ""}, "requirements": []},
        "status": {"providerID": provider_id},
    }))
    .map_err(|e| CloudError::Other(format!("building a NodeClaim for {provider_id}: {e}")))
}

/// The AMI a launch picks for a node with `labels` (its instance type's labels): the first of
/// the node class's resolved AMIs whose every requirement the labels meet (a label the node
/// lacks meets only `NotIn` and `DoesNotExist`). Launch and drift use this one rule, so a node
/// is never drifted by the very AMI it was launched with.
pub fn compatible_ami<'a>(
    amis: &'a [crds::ec2nodeclass::Ami],
    labels: &BTreeMap<String, String>,
) -> Option<&'a crds::ec2nodeclass::Ami> {
    amis.iter().find(|ami| {
        ami.requirements.iter().all(|req| {
            Requirement::from_node_selector(req).is_ok_and(|req| match labels.get(&req.key) {
                Some(v) => req.has(v),
                None => req.allows_absent(),
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::labels::{CAPACITY_OVERLAY_APPLIED_ANNOTATION, PRICE_OVERLAY_APPLIED_ANNOTATION};
    use testutil::nodeclaim;

    #[test]
    fn overlay_annotations_change_what_a_launch_checks_and_its_order() {
        let claim = || {
            nodeclaim("c")
                .request("cpu", "500m")
                .request("example.com/fpga", "1")
        };
        let plain = claim().build();
        assert_eq!(launch_requests(&plain).get("example.com/fpga"), 1);
        assert!(!price_overlaid(&plain));
        let overlaid = claim()
            .annotation(CAPACITY_OVERLAY_APPLIED_ANNOTATION, "true")
            .annotation(PRICE_OVERLAY_APPLIED_ANNOTATION, "true")
            .build();
        let requests = launch_requests(&overlaid);
        assert_eq!(requests.get("example.com/fpga"), 0);
        assert_eq!(requests.cpu, 500);
        assert!(price_overlaid(&overlaid));
    }
}
