//! The pod as Karpenter's decisions read it: what scheduling, disruption, drain, volume
//! detachment and nomination look at, and nothing else. Its fields keep the Kubernetes names and
//! nesting (`spec.nodeName`, `status.conditions`, ...), so it decodes straight from the API's
//! JSON (the controller's pod cache watches it, and never holds a full `Pod`) and decision code
//! reads it as it would read a `Pod`.
//!
//! Why not `k8s_openapi`'s `Pod`: its `Container` is 2,336 bytes and its `Volume` 3,280 bytes
//! inline, whatever they hold, and a cluster's every pod is cached. A view of an Online Boutique
//! pod takes a few hundred bytes besides its metadata.
//!
//! What a view keeps: all of `metadata` (labels for selectors, annotations such as
//! `karpenter.sh/do-not-disrupt`, owners, uid and resourceVersion for writes, deletion and
//! creation times) except managed fields and kubectl's last-applied annotation; of the spec the
//! node name, node selector, affinity, tolerations, spread constraints, scheduling gates,
//! priority, grace period, overhead, pod-level resources and, of each container, its name,
//! resources, ports and restart policy, and of each volume its name and claim (persistent or
//! ephemeral); of the status the phase, conditions, nominated node and start time.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EphemeralVolumeSource, PersistentVolumeClaimVolumeSource,
    Pod, PodCondition, PodSchedulingGate, PodSpec, PodStatus, ResourceRequirements, Toleration,
    TopologySpreadConstraint, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

/// The annotation `kubectl apply` writes: the whole object again, read by no decision.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A pod as decisions read it (see the module doc for what it keeps).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodView {
    /// The pod's metadata, without managed fields or the last-applied annotation once
    /// [`trimmed`](Self::trim).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What decisions read of `spec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodViewSpec>,
    /// What decisions read of `status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodViewStatus>,
}

/// What decisions read of a pod's `spec`; each field is the `PodSpec` field of that name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodViewSpec {
    /// `spec.nodeName`: the node it is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// `spec.nodeSelector`: node labels it requires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// `spec.affinity`: node affinity and pod (anti-)affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// `spec.tolerations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// `spec.topologySpreadConstraints`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    /// `spec.schedulingGates`: a gated pod is not provisioned for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_gates: Option<Vec<PodSchedulingGate>>,
    /// `spec.schedulerName`: only the default scheduler's pods are provisioned for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// `spec.priority`: the queue order and preemption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// `spec.priorityClassName`: critical pods are drained last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// `spec.terminationGracePeriodSeconds`: the drain's deadlines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    /// `spec.overhead`: the RuntimeClass's share, added to the requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<BTreeMap<String, Quantity>>,
    /// `spec.resources`: pod-level requests (`PodLevelResources`; limits are dropped as a
    /// container's are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// `spec.hostNetwork`: host ports then bind on the node's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    /// `spec.containers`, each as [`ContainerView`].
    #[serde(default)]
    pub containers: Vec<ContainerView>,
    /// `spec.initContainers`, each as [`ContainerView`] (sidecars have `restartPolicy: Always`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<ContainerView>>,
    /// `spec.volumes`, each as [`VolumeView`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<VolumeView>>,
}

/// What decisions read of a container: what it requests and which host ports it takes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView {
    /// `name`: named in errors about its requests.
    #[serde(default)]
    pub name: String,
    /// `resources`: its requests (limits and claims are dropped by [`PodView::trim`]: no
    /// decision reads them, and the API server has already defaulted requests from limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// `ports`: host ports conflict on a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ContainerPort>>,
    /// `restartPolicy`: `Always` on an init container makes it a sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

/// What decisions read of a volume: the claim it mounts, if any (volume topology, attach
/// limits, and the attachments node termination waits for).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeView {
    /// `name`: a generic ephemeral volume's claim is `<pod>-<volume name>`.
    #[serde(default)]
    pub name: String,
    /// `persistentVolumeClaim`: the claim it mounts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    /// `ephemeral`: a generic ephemeral volume, whose claim the pod owns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral: Option<Box<EphemeralVolumeSource>>,
}

/// What decisions read of a pod's `status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodViewStatus {
    /// `status.phase`: finished pods hold no capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `status.conditions` (e.g. `PodScheduled` with reason `Unschedulable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodCondition>>,
    /// `status.nominatedNodeName`: where a waiting pod is expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominated_node_name: Option<String>,
    /// `status.startTime`: a `do-not-disrupt` duration counts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
}

impl PodView {
    /// Drop what no decision reads but the view decodes (managed fields, the last-applied
    /// annotation, resource limits and claims) and give back the spare room serde leaves in
    /// lists.
    pub fn trim(&mut self) {
        self.metadata.managed_fields = None;
        if let Some(annotations) = self.metadata.annotations.as_mut() {
            annotations.remove(LAST_APPLIED);
        }
        if let Some(v) = self.metadata.owner_references.as_mut() {
            v.shrink_to_fit();
        }
        if let Some(spec) = self.spec.as_mut() {
            spec.containers.shrink_to_fit();
            let containers = spec
                .containers
                .iter_mut()
                .chain(spec.init_containers.iter_mut().flatten());
            for c in containers {
                if let Some(p) = c.ports.as_mut() {
                    p.shrink_to_fit();
                }
                if let Some(r) = c.resources.as_mut() {
                    r.limits = None;
                    r.claims = None;
                }
            }
            if let Some(r) = spec.resources.as_mut() {
                r.limits = None;
                r.claims = None;
            }
            if let Some(v) = spec.tolerations.as_mut() {
                v.shrink_to_fit();
            }
            if let Some(v) = spec.volumes.as_mut() {
                v.shrink_to_fit();
            }
            if let Some(v) = spec.init_containers.as_mut() {
                v.shrink_to_fit();
            }
        }
        if let Some(v) = self.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            v.shrink_to_fit();
        }
    }
}

impl From<&Container> for ContainerView {
    fn from(c: &Container) -> Self {
        ContainerView {
            name: c.name.clone(),
            resources: c.resources.clone(),
            ports: c.ports.clone(),
            restart_policy: c.restart_policy.clone(),
        }
    }
}

impl From<&Volume> for VolumeView {
    fn from(v: &Volume) -> Self {
        VolumeView {
            name: v.name.clone(),
            persistent_volume_claim: v.persistent_volume_claim.clone(),
            ephemeral: v.ephemeral.clone().map(Box::new),
        }
    }
}

impl From<&PodSpec> for PodViewSpec {
    fn from(s: &PodSpec) -> Self {
        PodViewSpec {
            node_name: s.node_name.clone(),
            node_selector: s.node_selector.clone(),
            affinity: s.affinity.clone(),
            tolerations: s.tolerations.clone(),
            topology_spread_constraints: s.topology_spread_constraints.clone(),
            scheduling_gates: s.scheduling_gates.clone(),
            scheduler_name: s.scheduler_name.clone(),
            priority: s.priority,
            priority_class_name: s.priority_class_name.clone(),
            termination_grace_period_seconds: s.termination_grace_period_seconds,
            overhead: s.overhead.clone(),
            resources: s.resources.clone(),
            host_network: s.host_network,
            containers: s.containers.iter().map(ContainerView::from).collect(),
            init_containers: s
                .init_containers
                .as_ref()
                .map(|v| v.iter().map(ContainerView::from).collect()),
            volumes: s
                .volumes
                .as_ref()
                .map(|v| v.iter().map(VolumeView::from).collect()),
        }
    }
}

impl From<&PodStatus> for PodViewStatus {
    fn from(s: &PodStatus) -> Self {
        PodViewStatus {
            phase: s.phase.clone(),
            conditions: s.conditions.clone(),
            nominated_node_name: s.nominated_node_name.clone(),
            start_time: s.start_time.clone(),
        }
    }
}

impl From<&Pod> for PodView {
    /// The view of a full pod (pods read from a file, from the API as `Pod`, or built by
    /// tests), trimmed.
    fn from(pod: &Pod) -> Self {
        let mut view = PodView {
            metadata: pod.metadata.clone(),
            spec: pod.spec.as_ref().map(PodViewSpec::from),
            status: pod.status.as_ref().map(PodViewStatus::from),
        };
        view.trim();
        view
    }
}

impl From<Pod> for PodView {
    /// [`PodView::from(&Pod)`](PodView#impl-From<%26Pod>-for-PodView).
    fn from(pod: Pod) -> Self {
        PodView::from(&pod)
    }
}

impl kube::Resource for PodView {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Pod".into()
    }

    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }

    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }

    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "pods".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod decoded from the API's JSON as a view keeps what decisions read and equals the
    /// view converted from the typed pod.
    #[test]
    fn decoding_json_and_converting_a_pod_agree() {
        let json = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "web"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true", LAST_APPLIED: "{}"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web", "uid": "r1", "controller": true}],
                "managedFields": [{"manager": "kubectl"}]
            },
            "spec": {
                "nodeName": "n1", "priority": 5, "terminationGracePeriodSeconds": 30,
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "containers": [{"name": "app", "image": "nginx", "command": ["x"],
                    "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}},
                    "ports": [{"containerPort": 80, "hostPort": 8080}]}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
                    {"name": "token", "projected": {"sources": []}}]
            },
            "status": {"phase": "Running", "nominatedNodeName": "n2",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "app", "image": "nginx", "imageID": "",
                    "ready": true, "restartCount": 0}]}
        });
        let mut view: PodView = serde_json::from_value(json.clone()).expect("a view");
        view.trim();
        let pod: Pod = serde_json::from_value(json).expect("a pod");
        assert_eq!(view, PodView::from(&pod));
        let spec = view.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.containers[0].ports.as_ref().map(Vec::len), Some(1));
        let resources = spec.containers[0].resources.as_ref().expect("resources");
        assert!(resources.requests.is_some() && resources.limits.is_none());
        let volumes = spec.volumes.as_ref().expect("volumes");
        assert_eq!(volumes.len(), 2, "every volume keeps its name");
        assert_eq!(
            volumes[0]
                .persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str()),
            Some("d")
        );
        assert_eq!(view.metadata.managed_fields, None);
        let annotations = view.metadata.annotations.as_ref().expect("annotations");
        assert!(annotations.contains_key("karpenter.sh/do-not-disrupt"));
        assert!(!annotations.contains_key(LAST_APPLIED));
        let status = view.status.as_ref().expect("status");
        assert_eq!(status.nominated_node_name.as_deref(), Some("n2"));
    }

    /// The reason for the view: a pod takes far less room inline than a `Pod`.
    #[test]
    fn a_view_is_smaller_than_a_pod() {
        let sizes = (
            size_of::<PodView>(),
            size_of::<Pod>(),
            size_of::<ContainerView>(),
            size_of::<Container>(),
            size_of::<VolumeView>(),
            size_of::<Volume>(),
        );
        assert!(sizes.0 * 2 < sizes.1, "{sizes:?}");
        assert!(sizes.2 * 10 < sizes.3, "{sizes:?}");
        assert!(sizes.4 * 20 < sizes.5, "{sizes:?}");
    }
}
