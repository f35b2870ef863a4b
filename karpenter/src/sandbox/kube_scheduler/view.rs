//! What the simulated kube-scheduler's actor hands its placer for one scheduling pass (the
//! pending pods in queue order and the cluster they are placed into), and the placer's trait:
//! the floor both the actor (`super`) and the placer ([`super::placer`]) stand on.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};

use super::unschedulable::Unschedulable;

/// What one scheduling pass sees of the cluster.
#[derive(Clone, Copy, Debug)]
pub struct ClusterView<'a> {
    /// Pods to schedule, in queue order.
    pub pending: &'a [Arc<Pod>],
    /// Pods still waiting in the queue (not in `pending`) with `status.nominatedNodeName`:
    /// they are not placed, but hold their room on the nominated node as kube-scheduler's
    /// nominator does for every nominated pod.
    pub nominated: &'a [Arc<Pod>],
    /// Every Node: the candidates the placer filters for each pending pod.
    pub nodes: &'a [Arc<Node>],
    /// Active pods bound to nodes.
    pub bound: &'a [Arc<Pod>],
    /// Namespaces and their labels (pod-affinity namespace selectors).
    pub namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
    /// PersistentVolumeClaims (volume topology).
    pub pvcs: &'a [Arc<PersistentVolumeClaim>],
    /// PersistentVolumes: a bound volume's node affinity confines its pods' zone.
    pub pvs: &'a [Arc<PersistentVolume>],
    /// StorageClasses: an unbound claim's class `allowedTopologies` confine its pod.
    pub storage_classes: &'a [Arc<StorageClass>],
    /// CSINodes: how many volumes of each CSI driver a node can attach (NodeVolumeLimits).
    pub csinodes: &'a [Arc<CSINode>],
    /// VolumeAttachments: volumes attached to a node count against its limits too.
    pub volume_attachments: &'a [Arc<VolumeAttachment>],
}

/// The filter-and-score half of kube-scheduler, injected so the actor's tests can place pods
/// with a stub; the sandbox runs [`super::placer::KubeScheduler`], the same core the controller
/// simulates with.
pub trait PodPlacer: Send + Sync {
    /// One scheduling pass: for each pending pod, in the given order, the node it binds to, or
    /// why none fits (the rejecting plugins, and the reasons that render as kube-scheduler's
    /// `0/N nodes are available: ...` message). Earlier placements in the pass count against
    /// later pods.
    fn place(&self, view: &ClusterView) -> Vec<Result<String, Unschedulable>>;
}
