//! One copy of the cluster state and the pure derivations decisions need from it: pending pods,
//! requests per node, existing and in-flight capacity, and NodePool usage.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crds::conditions::{self, INITIALIZED, LAUNCHED};
use crds::labels::{NODEPOOL_LABEL, is_known_ephemeral_taint};
use crds::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

use crate::pod_view::PodView;

use crate::capacity::InstanceType;
use crate::capacity::index::TypeIndex;
use crate::scheduling::attach::{self, AttachLimits, EBS_CSI_DRIVER, Volumes};
use crate::scheduling::pod::{PodInfo, PodKey, is_provisionable, is_terminal, pod_requests};
use crate::scheduling::requirements::{Requirement, Requirements};
use crate::scheduling::resources::Resources;
use crate::scheduling::solver::{ExistingNode, NodeLabels};
use crate::scheduling::volumes::VolumeIndex;

/// Copies of every cache at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Every pod in every namespace, in any phase: pending ones are provisioned for, bound
    /// active ones fill their node's capacity.
    pub pods: Vec<Arc<PodView>>,
    /// Every Node, Karpenter's or not: capacity the solver fills before launching (except a
    /// Karpenter node whose NodeClaim is gone).
    pub nodes: Vec<Arc<Node>>,
    /// Every NodeClaim; deleting ones count toward NodePool limits but offer no capacity.
    pub nodeclaims: Vec<Arc<NodeClaim>>,
    /// Every NodePool, whatever its readiness.
    pub nodepools: Vec<Arc<NodePool>>,
    /// Every EC2NodeClass, found by name from a NodePool's `nodeClassRef`
    /// ([`Snapshot::nodeclass`]).
    pub nodeclasses: Vec<Arc<EC2NodeClass>>,
    /// Every NodeOverlay, applied to each NodePool's instance types wherever decisions read
    /// them (`provisioning::overlays`). Empty when the `NodeOverlay` feature gate is off: the
    /// controller then does not watch them and `karpenter simulate` leaves them out, so the
    /// gate is decided once, where the snapshot is filled, and no decision reads it.
    pub nodeoverlays: Vec<Arc<NodeOverlay>>,
    /// Every DaemonSet: their pods' requests are each NodePool's overhead on a new node.
    pub daemonsets: Vec<Arc<DaemonSet>>,
    /// Every Namespace: their labels resolve pod-affinity `namespaceSelector`s.
    pub namespaces: Vec<Arc<Namespace>>,
    /// Every PersistentVolumeClaim: with PVs and StorageClasses, a pod's volume zones.
    pub pvcs: Vec<Arc<PersistentVolumeClaim>>,
    /// Every PersistentVolume: a bound volume's node affinity confines its pods' zone.
    pub pvs: Vec<Arc<PersistentVolume>>,
    /// Every StorageClass: an unbound claim's class `allowedTopologies` confine its pod.
    pub storage_classes: Vec<Arc<StorageClass>>,
    /// Every CSINode (named as its node): how many volumes each CSI driver may attach there.
    pub csinodes: Vec<Arc<CSINode>>,
    /// PodDisruptionBudgets (with their `status.disruptionsAllowed`), which decide whether a
    /// node's pods may be evicted now.
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    /// The provisioner's plan for pods still waiting for an in-flight NodeClaim: pod → the
    /// name of the NodeClaim it was planned onto (the controller's in-memory record; empty
    /// where no provisioner ran, e.g. in the plugin). Each such pod is reserved on its
    /// NodeClaim ([`Snapshot::reservations`]) until its node registers and the pod is
    /// nominated there (`status.nominatedNodeName`), binds, or the NodeClaim goes away.
    pub planned: HashMap<PodKey, String>,
}

/// A pod that waits for a node (not bound, not finished, not deleting) and where it is
/// expected: the node in its `status.nominatedNodeName`, or the in-flight NodeClaim the
/// provisioner planned it onto.
#[derive(Clone, Debug)]
pub struct Reservation {
    /// The waiting pod.
    pub pod: Arc<PodView>,
    /// Where its room is held, named as [`Snapshot::existing_capacity`] names capacity: the
    /// node's name (a nominated node, or the registered node of the planned NodeClaim), else
    /// the NodeClaim's name.
    pub target: String,
}

/// The node a pod is nominated to (`status.nominatedNodeName`), if set and not empty.
pub fn nominated_node(pod: &PodView) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// The registered node of a NodeClaim: the node whose providerID is the NodeClaim's, looked up
/// in [`Snapshot::nodes_by_provider_id`].
pub fn registered_node<'a>(
    claim: &NodeClaim,
    by_provider: &HashMap<&str, &'a Arc<Node>>,
) -> Option<&'a Arc<Node>> {
    let pid = claim.status.as_ref()?.provider_id.as_deref()?;
    by_provider.get(pid).copied()
}

/// A node's `status.allocatable` (zero where missing or unreadable).
pub fn node_allocatable(node: &Node) -> Resources {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| Resources::from_list(a).ok())
        .unwrap_or_default()
}

pub use crate::scheduling::pod::is_waiting;

/// The NodePool a NodeClaim or Node belongs to (its `karpenter.sh/nodepool` label).
pub fn nodepool_of(labels: Option<&BTreeMap<String, String>>) -> Option<&str> {
    labels
        .and_then(|l| l.get(NODEPOOL_LABEL))
        .map(String::as_str)
}

/// The value of annotation `key` on a NodeClaim, if set.
pub fn annotation<'a>(claim: &'a NodeClaim, key: &str) -> Option<&'a str> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

impl Snapshot {
    /// Pods Karpenter should provision for: provisionable ([`is_provisionable`]; a nominated
    /// pod is not) and not already planned onto a live in-flight NodeClaim
    /// ([`planned`](Self::planned)).
    pub fn provisionable_pods(&self) -> Vec<Arc<PodView>> {
        let live = self.live_claims();
        self.pods
            .iter()
            .filter(|p| is_provisionable(p))
            .filter(|p| {
                self.planned.is_empty()
                    || !self
                        .planned
                        .get(&PodKey::of(p))
                        .is_some_and(|c| live.contains_key(c.as_str()))
            })
            .cloned()
            .collect()
    }

    /// NodeClaims not being deleted, by name.
    pub fn live_claims(&self) -> HashMap<&str, &Arc<NodeClaim>> {
        self.nodeclaims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter_map(|c| Some((c.metadata.name.as_deref()?, c)))
            .collect()
    }

    /// The nodes of this snapshot by providerID: with [`registered_node`], a NodeClaim's node in
    /// constant time.
    pub fn nodes_by_provider_id(&self) -> HashMap<&str, &Arc<Node>> {
        self.nodes
            .iter()
            .filter_map(|n| Some((n.spec.as_ref()?.provider_id.as_deref()?, n)))
            .collect()
    }

    /// Room held for waiting pods ([`Reservation`]), as kube-scheduler holds a nominated pod's
    /// room on its node (for pods of equal or lower priority) and as the provisioner planned
    /// its in-flight NodeClaims: every waiting pod nominated to a node of this snapshot, and
    /// every waiting pod [`planned`](Self::planned) onto a NodeClaim that is not being deleted.
    /// A nomination to a node that is not here holds nothing.
    pub fn reservations(&self) -> Vec<Reservation> {
        let nodes: HashSet<&str> = self
            .nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        let live = if self.planned.is_empty() {
            HashMap::new()
        } else {
            self.live_claims()
        };
        let by_provider = if self.planned.is_empty() {
            HashMap::new()
        } else {
            self.nodes_by_provider_id()
        };
        let mut out = Vec::new();
        for pod in self.pods.iter().filter(|p| is_waiting(p)) {
            if let Some(node) = nominated_node(pod) {
                if nodes.contains(node) {
                    out.push(Reservation {
                        pod: Arc::clone(pod),
                        target: node.to_string(),
                    });
                }
                continue;
            }
            if self.planned.is_empty() {
                continue;
            }
            let Some(claim) = self
                .planned
                .get(&PodKey::of(pod))
                .and_then(|c| live.get(c.as_str()))
            else {
                continue;
            };
            let target = match registered_node(claim, &by_provider) {
                Some(node) => node.metadata.name.clone().unwrap_or_default(),
                None => claim.metadata.name.clone().unwrap_or_default(),
            };
            out.push(Reservation {
                pod: Arc::clone(pod),
                target,
            });
        }
        out
    }

    /// Requests of the reserved pods ([`Snapshot::reservations`]) per node or NodeClaim name.
    fn reserved_by_target(&self) -> HashMap<String, Resources> {
        let mut out: HashMap<String, Resources> = HashMap::new();
        for r in self.reservations() {
            if let Ok(requests) = pod_requests(&r.pod) {
                out.entry(r.target).or_default().add(&requests);
            }
        }
        out
    }

    /// Namespaces with their labels.
    pub fn namespace_labels(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.namespaces
            .iter()
            .filter_map(|n| {
                Some((
                    n.metadata.name.clone()?,
                    n.metadata.labels.clone().unwrap_or_default(),
                ))
            })
            .collect()
    }

    /// Active pods bound to one of `nodes` (names of nodes or in-flight NodeClaims, as
    /// [`Snapshot::existing_capacity`] names them), and the waiting pods reserved there
    /// ([`Snapshot::reservations`]), compiled ([`PodInfo::from_bound_pod`]: a DaemonSet pod
    /// counts; pods that do not compile are skipped).
    pub fn bound_pods(&self, nodes: &HashSet<String>) -> Vec<crate::scheduling::solver::BoundPod> {
        let reserved = self
            .reservations()
            .into_iter()
            .filter(|r| nodes.contains(&r.target))
            .filter_map(|r| {
                Some(crate::scheduling::solver::BoundPod {
                    pod: PodInfo::from_pod(&r.pod).ok()?,
                    node: r.target,
                })
            });
        self.pods
            .iter()
            .filter(|p| !is_terminal(p))
            .filter_map(|p| {
                let node = p
                    .spec
                    .as_ref()?
                    .node_name
                    .clone()
                    .filter(|n| nodes.contains(n))?;
                Some(crate::scheduling::solver::BoundPod {
                    pod: PodInfo::from_bound_pod(p).ok()?,
                    node,
                })
            })
            .chain(reserved)
            .collect()
    }

    /// The node class a NodePool references, if it exists.
    pub fn nodeclass(&self, name: &str) -> Option<&Arc<EC2NodeClass>> {
        self.nodeclasses
            .iter()
            .find(|nc| nc.metadata.name.as_deref() == Some(name))
    }

    /// Requests of the active pods bound to each node.
    pub fn requests_by_node(&self) -> HashMap<String, Resources> {
        let mut out: HashMap<String, Resources> = HashMap::new();
        for p in &self.pods {
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
                continue;
            };
            if is_terminal(p) {
                continue;
            }
            // Resources only: a DaemonSet pod's `matchFields` affinity, which the provisioner
            // cannot compile, must not drop its requests from the node's usage.
            if let Ok(requests) = pod_requests(p) {
                out.entry(node.to_string()).or_default().add(&requests);
            }
        }
        out
    }

    /// Existing nodes and in-flight NodeClaims as capacity the solver fills before launching.
    ///
    /// `daemon_overhead` is each NodePool's DaemonSet overhead, subtracted from NodeClaims whose
    /// nodes do not run those pods yet; `types` resolves an unlaunched claim's options (as its
    /// NodePool lists them, overlays applied). The
    /// room of reserved pods ([`Snapshot::reservations`]) is taken, as their bound pods'.
    pub fn existing_capacity(
        &self,
        daemon_overhead: &HashMap<String, Resources>,
        types: &TypeIndex,
    ) -> Vec<ExistingNode> {
        let mut used = self.requests_by_node();
        let reserved = self.reserved_by_target();
        for (target, requests) in &reserved {
            used.entry(target.clone()).or_default().add(requests);
        }
        let mut attached = self.volumes_by_target();
        let csinodes: HashMap<&str, AttachLimits> = self
            .csinodes
            .iter()
            .filter_map(|c| Some((c.metadata.name.as_deref()?, attach::csinode_limits(c))))
            .collect();
        let nodes_by_provider: HashMap<&str, &Arc<Node>> = self
            .nodes
            .iter()
            .filter_map(|n| Some((n.spec.as_ref()?.provider_id.as_deref()?, n)))
            .collect();
        let mut out = Vec::new();
        let mut claimed_nodes = HashSet::new();
        for claim in &self.nodeclaims {
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = claim.metadata.name.clone().unwrap_or_default();
            let status = claim.status.as_ref();
            let conds = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
            let pool = nodepool_of(claim.metadata.labels.as_ref()).unwrap_or_default();
            let overhead = daemon_overhead.get(pool).cloned().unwrap_or_default();
            let node = status
                .and_then(|s| s.provider_id.as_deref())
                .and_then(|p| nodes_by_provider.get(p));
            if let Some(node) = node {
                claimed_nodes.insert(node.metadata.name.clone().unwrap_or_default());
                if let Some(mut e) = node_capacity(
                    node,
                    &used,
                    !conditions::is_true(conds, INITIALIZED),
                    &claim.spec.startup_taints,
                ) {
                    e.volumes = attached.remove(&e.name).unwrap_or_default();
                    e.attach_limits = csinodes.get(e.name.as_str()).cloned().unwrap_or_default();
                    // Until the EBS driver registers on the node, its type's limit stands.
                    if !e.attach_limits.contains_key(EBS_CSI_DRIVER) {
                        e.attach_limits.extend(claim_limits(claim, types));
                    }
                    out.push(e);
                }
                continue;
            }
            let mut available = match status.filter(|_| conditions::is_true(conds, LAUNCHED)) {
                Some(s) => Resources::from_list(&s.allocatable).unwrap_or_default(),
                None => smallest_option(claim, types),
            };
            available.sub(&overhead);
            if let Some(r) = reserved.get(&name) {
                available.sub(r);
            }
            let mut reqs = Requirements::from_api(&claim.spec.requirements);
            for (k, v) in claim.metadata.labels.iter().flatten() {
                reqs.add(Requirement::is_in(k, [v.clone()]));
            }
            out.push(ExistingNode {
                volumes: attached.remove(&name).unwrap_or_default(),
                attach_limits: claim_limits(claim, types),
                name,
                labels: NodeLabels::Pending(reqs),
                taints: claim.spec.taints.clone(),
                available,
                initialized: false,
            });
        }
        for node in &self.nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            if claimed_nodes.contains(&name) {
                continue;
            }
            // A Karpenter node whose NodeClaim is gone is being removed; others are capacity.
            if nodepool_of(node.metadata.labels.as_ref()).is_some() && !self.has_claim_for(node) {
                continue;
            }
            if let Some(mut e) = node_capacity(node, &used, false, &[]) {
                e.volumes = attached.remove(&e.name).unwrap_or_default();
                e.attach_limits = csinodes.get(e.name.as_str()).cloned().unwrap_or_default();
                out.push(e);
            }
        }
        out
    }

    /// The volumes attached per node or in-flight NodeClaim (named as
    /// [`Snapshot::existing_capacity`] names them): those of active pods bound there and of
    /// the waiting pods reserved there ([`Snapshot::reservations`]).
    fn volumes_by_target(&self) -> HashMap<String, Volumes> {
        let mut out: HashMap<String, Volumes> = HashMap::new();
        let uses_volumes = |p: &PodView| {
            p.spec
                .iter()
                .flat_map(|s| s.volumes.iter().flatten())
                .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
        };
        if !self.pods.iter().any(|p| uses_volumes(p)) {
            return out;
        }
        let index = VolumeIndex::new(&self.pvcs, &self.pvs, &self.storage_classes);
        let bound = self
            .pods
            .iter()
            .filter(|p| !is_terminal(p))
            .filter_map(|p| {
                let node = p.spec.as_ref()?.node_name.clone()?;
                Some((node, Arc::clone(p)))
            });
        let reserved = self.reservations().into_iter().map(|r| (r.target, r.pod));
        for (target, pod) in bound.chain(reserved) {
            if uses_volumes(&pod) {
                out.entry(target).or_default().add(&index.attachments(&pod));
            }
        }
        out
    }

    fn has_claim_for(&self, node: &Node) -> bool {
        let pid = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        pid.is_some()
            && self
                .nodeclaims
                .iter()
                .any(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == pid)
    }

    /// Capacity of a NodePool's nodes and in-flight NodeClaims (cpu, memory, ... and the
    /// `nodes` count), for limits: launched claims count their capacity, unlaunched ones their
    /// largest option.
    pub fn pool_usage(&self, pool: &str, types: &TypeIndex) -> (Resources, i64) {
        let mut used = Resources::default();
        let mut count = 0;
        for claim in &self.nodeclaims {
            if nodepool_of(claim.metadata.labels.as_ref()) != Some(pool) {
                continue;
            }
            count += 1;
            let capacity = claim
                .status
                .as_ref()
                .filter(|s| !s.capacity.is_empty())
                .and_then(|s| Resources::from_list(&s.capacity).ok())
                .unwrap_or_else(|| largest_option(claim, types));
            used.add(&capacity);
        }
        (used, count)
    }
}

fn option_types<'a>(claim: &NodeClaim, types: &'a TypeIndex) -> Vec<&'a Arc<InstanceType>> {
    let pool = nodepool_of(claim.metadata.labels.as_ref());
    claim
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == crds::labels::INSTANCE_TYPE_LABEL && r.operator == crds::Operator::In)
        .flat_map(|r| r.values.iter())
        .filter_map(|n| types.get(pool, n))
        .collect()
}

fn smallest_option(claim: &NodeClaim, types: &TypeIndex) -> Resources {
    let options = option_types(claim, types);
    let mut it = options.iter();
    let Some(first) = it.next() else {
        // Unknown options: assume exactly what was planned fits.
        return Resources::from_list(&claim.spec.resources.requests).unwrap_or_default();
    };
    it.fold(first.allocatable.clone(), |acc, t| {
        let a = &t.allocatable;
        let mut m = acc.clone();
        m.cpu = m.cpu.min(a.cpu);
        m.memory = m.memory.min(a.memory);
        m.pods = m.pods.min(a.pods);
        m.ephemeral = m.ephemeral.min(a.ephemeral);
        for (k, v) in m.extended.iter_mut() {
            *v = (*v).min(a.get(k));
        }
        m
    })
}

/// The attach limits of a NodeClaim's instance type: the launched type (its instance-type
/// label), else the tightest of its options (it may launch as any of them); beyond upstream,
/// which counts no limit before the node's CSINode reports one.
fn claim_limits(claim: &NodeClaim, types: &TypeIndex) -> AttachLimits {
    let launched = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(crds::labels::INSTANCE_TYPE_LABEL))
        .and_then(|t| types.get(nodepool_of(claim.metadata.labels.as_ref()), t));
    match launched {
        Some(it) => attach::instance_type_limits(it),
        None => attach::tightest(option_types(claim, types).into_iter().map(|t| &**t)),
    }
}

fn largest_option(claim: &NodeClaim, types: &TypeIndex) -> Resources {
    option_types(claim, types)
        .iter()
        .fold(Resources::default(), |acc, t| acc.max(&t.capacity))
}

/// A registered node as solver capacity; cordoned and deleting nodes offer none.
fn node_capacity(
    node: &Node,
    used: &HashMap<String, Resources>,
    initializing: bool,
    startup_taints: &[Taint],
) -> Option<ExistingNode> {
    if node.metadata.deletion_timestamp.is_some()
        || node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
    {
        return None;
    }
    let name = node.metadata.name.clone()?;
    let mut available = node_allocatable(node);
    if let Some(u) = used.get(&name) {
        available.sub(u);
    }
    let taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        // While a node initializes, its ephemeral and startup taints are expected to go away.
        .filter(|t| {
            let expected_to_clear = is_known_ephemeral_taint(t)
                || startup_taints
                    .iter()
                    .any(|s| s.key == t.key && s.effect == t.effect);
            !(initializing && expected_to_clear)
        })
        .collect();
    Some(ExistingNode {
        name,
        labels: NodeLabels::Known(node.metadata.labels.clone().unwrap_or_default()),
        taints,
        available,
        initialized: !initializing,
        volumes: Volumes::default(),
        attach_limits: AttachLimits::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daemonset_pod_pinned_with_match_fields_counts_on_its_node() {
        // The DaemonSet controller pins its pods with `matchFields metadata.name`, which the
        // provisioner cannot compile; their requests still use the node's room.
        let daemon = testutil::pod("agent-x")
            .cpu("500m")
            .memory("128Mi")
            .on_node("n1")
            .phase("Running")
            .owner("apps/v1", "DaemonSet", "agent", "ds-uid")
            .merge(serde_json::json!({"spec": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            ]}}}}}))
            .arc();
        let web = testutil::pod("web")
            .cpu("250m")
            .on_node("n1")
            .phase("Running")
            .arc();
        let snap = Snapshot {
            pods: vec![daemon, web],
            ..Snapshot::default()
        };
        let used = snap.requests_by_node();
        assert_eq!(used["n1"].get("cpu"), 750);
        assert_eq!(used["n1"].pods, 2);
        // And the solver sees it there: its labels (for affinity and spread) and host ports.
        let held = snap.bound_pods(&HashSet::from(["n1".to_string()]));
        let agent = held
            .iter()
            .find(|b| b.pod.key.name == "agent-x")
            .expect("the DaemonSet pod is a bound pod of n1");
        assert_eq!(agent.node, "n1");
        assert_eq!(agent.pod.requests.cpu, 500);
        assert_eq!(held.len(), 2);
    }
}
