//! kube-scheduler's queueing hints (KEP-4247): the cluster events each plugin registers
//! (`EventsToRegister`) and its `QueueingHintFn`, which judges from the old and new object
//! whether an event may make a pod that plugin rejected schedulable. The scheduling queue moves
//! a pod out of the unschedulable pool only when one of its rejecting plugins says `Queue`.
//!
//! Hints may over-approximate (a needless retry costs one attempt) but must never miss an event
//! that makes the pod schedulable; where one here is coarser than upstream's, its doc says so.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, PersistentVolumeClaim, Pod, PodAffinityTerm, Taint, Toleration,
};
use kube::core::{Selector, SelectorExt};

use super::unschedulable::Plugin;

/// A change to the cluster the scheduler's informers saw, with the objects a hint compares
/// (upstream `framework.ClusterEvent` with its old and new objects). Assigned pods are bound,
/// non-terminal pods: one turning `Succeeded`/`Failed` leaves the scheduler's cache, so it is
/// an [`ClusterEvent::AssignedPodDelete`], as kube-scheduler's informer filter makes it.
#[derive(Clone, Copy, Debug)]
pub enum ClusterEvent<'a> {
    /// A Node appeared.
    NodeAdd(&'a Node),
    /// A Node changed (labels, taints, `spec.unschedulable`, allocatable, Ready).
    NodeUpdate {
        /// The Node before the change.
        old: &'a Node,
        /// The Node after it.
        new: &'a Node,
    },
    /// A pod was bound to a node (or appeared bound).
    AssignedPodAdd(&'a Pod),
    /// A bound pod changed (labels, requests).
    AssignedPodUpdate {
        /// The pod before the change.
        old: &'a Pod,
        /// The pod after it.
        new: &'a Pod,
    },
    /// A bound pod was deleted or terminated, freeing its room, ports and volumes.
    AssignedPodDelete(&'a Pod),
    /// A PersistentVolumeClaim was added or changed (created, bound).
    PvcChange(&'a PersistentVolumeClaim),
    /// A PersistentVolume was added or changed.
    PvChange,
    /// A StorageClass was added or changed.
    StorageClassChange,
    /// A CSINode was added or changed (attach limits).
    CsiNodeChange,
    /// A VolumeAttachment was deleted (an attach slot freed).
    VolumeAttachmentDelete,
}

/// Whether `plugin` registers `event`'s kind at all (its `EventsToRegister`): the queue looks
/// at a plugin's rejected pods only for events it registers, so an event most pods ignore (a
/// pod bound elsewhere) costs nothing per pod.
pub fn registers(plugin: Plugin, event: &ClusterEvent) -> bool {
    use ClusterEvent as E;
    match plugin {
        Plugin::NodeResourcesFit => matches!(
            event,
            E::NodeAdd(_) | E::NodeUpdate { .. } | E::AssignedPodDelete(_)
        ),
        Plugin::NodeAffinity | Plugin::TaintToleration | Plugin::NodeUnschedulable => {
            matches!(event, E::NodeAdd(_) | E::NodeUpdate { .. })
        }
        Plugin::NodePorts => matches!(event, E::NodeAdd(_) | E::AssignedPodDelete(_)),
        Plugin::NodeVolumeLimits => matches!(
            event,
            E::NodeAdd(_)
                | E::CsiNodeChange
                | E::AssignedPodDelete(_)
                | E::PvcChange(_)
                | E::VolumeAttachmentDelete
        ),
        Plugin::PodTopologySpread | Plugin::InterPodAffinity => matches!(
            event,
            E::NodeAdd(_)
                | E::NodeUpdate { .. }
                | E::AssignedPodAdd(_)
                | E::AssignedPodUpdate { .. }
                | E::AssignedPodDelete(_)
        ),
        Plugin::VolumeBinding => matches!(
            event,
            E::PvcChange(_)
                | E::PvChange
                | E::StorageClassChange
                | E::CsiNodeChange
                | E::NodeAdd(_)
                | E::NodeUpdate { .. }
        ),
    }
}

/// Whether `event` may make `pod`, rejected by `plugin`, schedulable (upstream
/// `QueueingHint`: `true` is `Queue`, `false` is `QueueSkip`); events the plugin does not
/// register are `QueueSkip`.
pub fn queue(plugin: Plugin, pod: &Pod, event: &ClusterEvent) -> bool {
    use ClusterEvent as E;
    match plugin {
        // noderesources/fit.go: Node Add|UpdateNodeAllocatable, Pod Delete. Upstream also
        // checks that the added node fits the pod's requests; here any added node queues.
        Plugin::NodeResourcesFit => match event {
            E::NodeAdd(_) | E::AssignedPodDelete(_) => true,
            E::NodeUpdate { old, new } => allocatable(old) != allocatable(new),
            _ => false,
        },
        // nodeaffinity/node_affinity.go isSchedulableAfterNodeChange: the node now matches the
        // pod's selector and affinity, and did not before.
        Plugin::NodeAffinity => match event {
            E::NodeAdd(n) => node_matches(pod, n),
            E::NodeUpdate { old, new } => node_matches(pod, new) && !node_matches(pod, old),
            _ => false,
        },
        // tainttoleration/taint_toleration.go isSchedulableAfterNodeChange: the node's
        // scheduling taints are now all tolerated, and were not before.
        Plugin::TaintToleration => match event {
            E::NodeAdd(n) => tolerated(pod, n),
            E::NodeUpdate { old, new } => tolerated(pod, new) && !tolerated(pod, old),
            _ => false,
        },
        // nodeunschedulable/node_unschedulable.go: the node is (now) schedulable for the pod.
        Plugin::NodeUnschedulable => match event {
            E::NodeAdd(n) => !cordoned(pod, n),
            E::NodeUpdate { old, new } => cordoned(pod, old) && !cordoned(pod, new),
            _ => false,
        },
        // nodeports/node_ports.go: a deleted pod freed one of the pod's host ports; any node.
        Plugin::NodePorts => match event {
            E::NodeAdd(_) => true,
            E::AssignedPodDelete(gone) => {
                let wanted = host_ports(pod);
                host_ports(gone).iter().any(|p| wanted.contains(p))
            }
            _ => false,
        },
        // nodevolumelimits/csi.go: CSINode Add|Update, Pod Delete, PVC Add, VolumeAttachment
        // Delete, Node Add; every event it registers queues.
        Plugin::NodeVolumeLimits => registers(plugin, event),
        // podtopologyspread/plugin.go: a pod the constraints count came or went (same
        // namespace, matching selector), or a node carrying the constraints' keys came or
        // changed its labels or taints.
        Plugin::PodTopologySpread => match event {
            E::AssignedPodAdd(p) | E::AssignedPodDelete(p) => counted_by_spread(pod, p),
            E::AssignedPodUpdate { old, new } => {
                old.metadata.labels != new.metadata.labels
                    && (counted_by_spread(pod, old) || counted_by_spread(pod, new))
            }
            E::NodeAdd(n) => spread_keys(pod).iter().all(|k| label(n, k).is_some()),
            E::NodeUpdate { old, new } => {
                spread_keys(pod)
                    .iter()
                    .any(|k| label(old, k) != label(new, k))
                    || scheduling_taints(old) != scheduling_taints(new)
            }
            _ => false,
        },
        // interpodaffinity/plugin.go: a pod matching one of the pod's affinity terms came, or
        // one matching an anti-affinity term (or carrying anti-affinity itself) went; node
        // label changes may form new topology domains. Namespaces are not checked: coarser.
        Plugin::InterPodAffinity => match event {
            E::AssignedPodAdd(p) => matches_terms(affinity_terms(pod, false), p),
            E::AssignedPodUpdate { old, new } => {
                old.metadata.labels != new.metadata.labels
                    && matches_terms(affinity_terms(pod, false), new)
            }
            E::AssignedPodDelete(p) => {
                matches_terms(affinity_terms(pod, true), p) || !affinity_terms(p, true).is_empty()
            }
            E::NodeAdd(_) => true,
            E::NodeUpdate { old, new } => old.metadata.labels != new.metadata.labels,
            _ => false,
        },
        // volumebinding/volume_binding.go: a claim the pod uses changed; volumes, classes and
        // CSINodes; nodes added or relabelled (volume topology).
        Plugin::VolumeBinding => match event {
            E::PvcChange(c) => {
                c.metadata.namespace == pod.metadata.namespace
                    && claims(pod).any(|n| Some(n) == c.metadata.name.as_deref())
            }
            E::PvChange | E::StorageClassChange | E::CsiNodeChange | E::NodeAdd(_) => true,
            E::NodeUpdate { old, new } => old.metadata.labels != new.metadata.labels,
            _ => false,
        },
    }
}

/// What an event to the pod itself asks of the queue (upstream `PriorityQueue.Update` with
/// `isPodUpdated`): a change beyond status (spec, labels, annotations) may make it schedulable;
/// the scheduler's own status writes do not.
pub fn pod_changed(old: &Pod, new: &Pod) -> bool {
    old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
}

fn allocatable(
    n: &Node,
) -> Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>> {
    n.status.as_ref()?.allocatable.as_ref()
}

fn label<'a>(n: &'a Node, key: &str) -> Option<&'a str> {
    n.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The node's taints that keep pods off (`NoSchedule`, `NoExecute`), with the
/// `node.kubernetes.io/not-ready` taint for a node that is not Ready (the node lifecycle
/// controller's, which the sandbox derives from the condition).
fn scheduling_taints(n: &Node) -> Vec<Taint> {
    let mut taints: Vec<Taint> = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .collect();
    let ready = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if !ready {
        taints.push(Taint {
            key: "node.kubernetes.io/not-ready".into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        });
    }
    taints
}

fn tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default()
}

/// `Toleration.ToleratesTaint` (`k8s.io/api/core/v1/toleration.go`).
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect = t.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        _ => {
            key == taint.key
                && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
    }
}

fn tolerated(pod: &Pod, n: &Node) -> bool {
    let ts = tolerations(pod);
    scheduling_taints(n)
        .iter()
        .all(|taint| ts.iter().any(|t| tolerates(t, taint)))
}

/// Whether the node is cordoned for this pod (NodeUnschedulable: the pod may tolerate the
/// `node.kubernetes.io/unschedulable:NoSchedule` taint).
fn cordoned(pod: &Pod, n: &Node) -> bool {
    let unschedulable = n
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let taint = Taint {
        key: "node.kubernetes.io/unschedulable".into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    };
    unschedulable && !tolerations(pod).iter().any(|t| tolerates(t, &taint))
}

/// `nodeSelector` and required node affinity against the node's labels and name
/// (`component-helpers/scheduling/corev1/nodeaffinity`).
fn node_matches(pod: &Pod, n: &Node) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let empty = BTreeMap::new();
    let labels = n.metadata.labels.as_ref().unwrap_or(&empty);
    let selected = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let name = n.metadata.name.as_deref().unwrap_or("");
    selected
        && required.is_none_or(|r| {
            r.node_selector_terms.iter().any(|term| {
                let exprs = term.match_expressions.as_deref().unwrap_or_default();
                let fields = term.match_fields.as_deref().unwrap_or_default();
                (!exprs.is_empty() || !fields.is_empty())
                    && exprs
                        .iter()
                        .all(|e| requirement(e, labels.get(&e.key).map(String::as_str)))
                    && fields
                        .iter()
                        .all(|f| f.key == "metadata.name" && requirement(f, Some(name)))
            })
        })
}

fn requirement(e: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = e.values.as_deref().unwrap_or_default();
    let number = |v: &str| v.parse::<i64>().ok();
    match (e.operator.as_str(), value) {
        ("In", Some(v)) => values.iter().any(|x| x == v),
        ("NotIn", v) => v.is_none_or(|v| !values.iter().any(|x| x == v)),
        ("Exists", v) => v.is_some(),
        ("DoesNotExist", v) => v.is_none(),
        ("Gt", Some(v)) => {
            matches!((number(v), values.first().and_then(|x| number(x))), (Some(a), Some(b)) if a > b)
        }
        ("Lt", Some(v)) => {
            matches!((number(v), values.first().and_then(|x| number(x))), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

fn host_ports(pod: &Pod) -> Vec<i32> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| p.host_port.filter(|&h| h > 0))
        .collect()
}

fn claims(pod: &Pod) -> impl Iterator<Item = &str> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.as_str())
}

fn selects(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    pod: &Pod,
) -> bool {
    let Some(sel) = selector.and_then(|s| Selector::try_from(s.clone()).ok()) else {
        return false;
    };
    let empty = BTreeMap::new();
    sel.matches(pod.metadata.labels.as_ref().unwrap_or(&empty))
}

fn spread_keys(pod: &Pod) -> Vec<&str> {
    pod.spec
        .iter()
        .flat_map(|s| s.topology_spread_constraints.iter().flatten())
        .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
        .map(|c| c.topology_key.as_str())
        .collect()
}

/// Whether the pod's hard spread constraints count `other` (same namespace, selected).
fn counted_by_spread(pod: &Pod, other: &Pod) -> bool {
    other.metadata.namespace == pod.metadata.namespace
        && pod
            .spec
            .iter()
            .flat_map(|s| s.topology_spread_constraints.iter().flatten())
            .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
            .any(|c| selects(c.label_selector.as_ref(), other))
}

/// The pod's required affinity (`anti == false`) or anti-affinity terms.
fn affinity_terms(pod: &Pod, anti: bool) -> &[PodAffinityTerm] {
    let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if anti {
        affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_deref()
            })
    } else {
        affinity
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_deref()
            })
    };
    terms.unwrap_or_default()
}

fn matches_terms(terms: &[PodAffinityTerm], other: &Pod) -> bool {
    terms
        .iter()
        .any(|t| selects(t.label_selector.as_ref(), other))
}
