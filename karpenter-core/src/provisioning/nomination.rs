//! Plan = binding: carrying the provisioner's placement into the cluster as
//! `status.nominatedNodeName` (KEP-5278, "nominated node name for an expected pod placement").
//!
//! The provisioner plans pods onto NodeClaims it creates; the controller remembers that plan
//! ([`Snapshot::planned`]). When a planned NodeClaim's node registers, its pods are nominated
//! there ([`to_nominate`]): kube-scheduler then evaluates the nominated node first and keeps its
//! room for the pod against pods of equal or lower priority (`schedule_one.go`
//! `evaluateNominatedNode`, `RunFilterPluginsWithNominatedPods`), so CPU-only pods pending at
//! the same time cannot fill the GPU node planned for GPU pods. Since KEP-5278 (beta, on by
//! default in Kubernetes 1.35) kube-scheduler no longer clears a nomination it cannot honour:
//! the component that set it must ([`stale`]). A nominated pod is not provisionable
//! (upstream's `pod.IsProvisionable`), so a nomination left standing would strand its pod.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use crds::StatusConditions;
use crds::conditions::{self, INITIALIZED};
use crds::labels::{DISRUPTED_TAINT_KEY, NODE_INITIALIZED_LABEL, NODEPOOL_LABEL};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;

use crate::pod_view::PodView;

use crate::scheduling::pod::{PodKey, pod_requests};
use crate::scheduling::resources::Resources;
use crate::snapshot::{Snapshot, is_waiting, node_allocatable, nominated_node, registered_node};

/// A pod to nominate: the registered node of the NodeClaim it was planned onto.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nominate {
    /// The waiting pod.
    pub pod: PodKey,
    /// The node's name, for `status.nominatedNodeName`.
    pub node: String,
}

/// How long kube-scheduler has, once a nominated node initialized, to bind the pods nominated
/// to it before the nominations are taken back (and how long a plan waits for a nomination that
/// could not be written): three times upstream's nomination window (twice the default
/// `BATCH_MAX_DURATION` of 10 s, during which upstream's cluster state treats a node as
/// nominated), so a busy kube-scheduler working through a large backlog is not second-guessed;
/// a nomination taken back too early costs a provisioning pass, one left too long only delay.
pub const NOMINATION_WINDOW: SignedDuration = SignedDuration::from_secs(60);

/// Why a nomination no longer holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StaleReason {
    /// The nominated node is not in the cluster (deleted, or never registered).
    NodeGone,
    /// The nominated node is being deleted, cordoned or disrupted (`karpenter.sh/disrupted`).
    NodeLeaving,
    /// The initialized node cannot hold the pod beside its bound pods and the nominations
    /// ahead of it (higher priority first, then older): the kubelet reported less than the plan
    /// assumed, or other pods took the room.
    DoesNotFit,
    /// The node initialized more than [`NOMINATION_WINDOW`] ago and kube-scheduler still has not
    /// bound the pod there (a constraint the plan did not foresee, e.g. a topology spread that
    /// changed meanwhile).
    NotBound,
}

impl fmt::Display for StaleReason {
    /// Lower-case words for logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StaleReason::NodeGone => "nominated node is gone",
            StaleReason::NodeLeaving => "nominated node is being removed",
            StaleReason::DoesNotFit => "nominated node cannot hold the pod",
            StaleReason::NotBound => "not bound to its initialized nominated node in time",
        })
    }
}

/// A nomination to clear, on a Karpenter node or a node that is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stale {
    /// The waiting pod.
    pub pod: PodKey,
    /// The node it is nominated to.
    pub node: String,
    /// Why the nomination no longer holds.
    pub reason: StaleReason,
}

/// Pods to nominate now: each waiting, un-nominated pod [`planned`](Snapshot::planned) onto a
/// NodeClaim (not being deleted) whose node has registered, with that node. Sorted by pod.
pub fn to_nominate(snap: &Snapshot) -> Vec<Nominate> {
    if snap.planned.is_empty() {
        return Vec::new();
    }
    let claims = snap.live_claims();
    let by_provider = snap.nodes_by_provider_id();
    let mut out: Vec<Nominate> = snap
        .pods
        .iter()
        .filter(|p| is_waiting(p) && nominated_node(p).is_none())
        .filter_map(|p| {
            let key = PodKey::of(p);
            let claim = claims.get(snap.planned.get(&key)?.as_str())?;
            let node = registered_node(claim, &by_provider)?
                .metadata
                .name
                .clone()?;
            Some(Nominate { pod: key, node })
        })
        .collect();
    out.sort_by(|a, b| a.pod.cmp(&b.pod));
    out
}

/// The pods of `snap` planned onto NodeClaim `claim`, waiting and not nominated yet, sorted:
/// what registration nominates to the NodeClaim's node before it lifts the
/// `karpenter.sh/unregistered` taint (so no other pod can take their room first).
pub fn planned_onto(snap: &Snapshot, claim: &str) -> Vec<PodKey> {
    let mut out: Vec<PodKey> = snap
        .pods
        .iter()
        .filter(|p| is_waiting(p) && nominated_node(p).is_none())
        .map(|p| PodKey::of(p))
        .filter(|k| snap.planned.get(k).is_some_and(|c| c == claim))
        .collect();
    out.sort();
    out
}

/// Entries of [`Snapshot::planned`] that hold nothing any more: the pod is gone, bound,
/// finished or nominated (its node registered), its NodeClaim is gone, or its NodeClaim
/// initialized more than [`NOMINATION_WINDOW`] before `now` and the pod is still not nominated
/// (the nomination could not be written, e.g. RBAC without `pods/status`): the pod is then
/// provisioned for again rather than held for a node it may never get. The controller drops
/// them from its record.
pub fn settled(snap: &Snapshot, now: Timestamp) -> Vec<PodKey> {
    if snap.planned.is_empty() {
        return Vec::new();
    }
    let waiting: HashSet<PodKey> = snap
        .pods
        .iter()
        .filter(|p| is_waiting(p) && nominated_node(p).is_none())
        .map(|p| PodKey::of(p))
        .collect();
    let claims: HashSet<&str> = snap
        .live_claims()
        .into_iter()
        .filter(|(_, c)| initialized_at(c).is_none_or(|at| !window_passed(at, now)))
        .map(|(name, _)| name)
        .collect();
    let mut out: Vec<PodKey> = snap
        .planned
        .iter()
        .filter(|(pod, claim)| !waiting.contains(*pod) || !claims.contains(claim.as_str()))
        .map(|(pod, _)| pod.clone())
        .collect();
    out.sort();
    out
}

/// When a NodeClaim's `Initialized` condition turned true, if it is.
fn initialized_at(claim: &crds::NodeClaim) -> Option<Timestamp> {
    Some(
        conditions::get(claim.status_conditions(), INITIALIZED)
            .filter(|c| c.status == "True")?
            .last_transition_time
            .0,
    )
}

/// Whether [`NOMINATION_WINDOW`] has passed since `initialized` at `now`.
fn window_passed(initialized: Timestamp, now: Timestamp) -> bool {
    initialized
        .checked_add(NOMINATION_WINDOW)
        .is_ok_and(|deadline| now > deadline)
}

/// Whether a node is leaving: being deleted, cordoned, or tainted `karpenter.sh/disrupted`.
fn leaving(node: &Node) -> bool {
    let spec = node.spec.as_ref();
    node.metadata.deletion_timestamp.is_some()
        || spec.and_then(|s| s.unschedulable).unwrap_or(false)
        || spec
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == DISRUPTED_TAINT_KEY))
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn priority(pod: &PodView) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Nominations the plan no longer holds, sorted by pod. Any node's nomination is stale when the
/// node is gone; on a Karpenter node (one with a `karpenter.sh/nodepool` label) also when the
/// node is leaving, or when it is initialized (`karpenter.sh/initialized`, so its extended
/// resources are reported) and cannot hold the pod: the node's allocatable minus its active
/// bound pods' requests (terminating pods' room is about to be freed, as kube-scheduler's
/// preemption expects) is filled by its nominated pods in kube-scheduler's queue order (higher
/// priority first, then older, then by name), and each pod that does not fit is stale. Pods on
/// other nodes, nominated by kube-scheduler's preemption, are left alone. Last, a nomination
/// to a Karpenter node whose NodeClaim initialized more than [`NOMINATION_WINDOW`] before
/// `now` is stale: kube-scheduler had its chance.
pub fn stale(snap: &Snapshot, now: Timestamp) -> Vec<Stale> {
    let nodes: HashMap<&str, &Arc<Node>> = snap
        .nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
        .collect();
    let initialized: HashMap<&str, Timestamp> = snap
        .nodeclaims
        .iter()
        .filter_map(|c| Some((c.status.as_ref()?.node_name.as_deref()?, initialized_at(c)?)))
        .collect();
    let window_passed = |node: &str| {
        initialized
            .get(node)
            .is_some_and(|at| window_passed(*at, now))
    };
    let mut out = Vec::new();
    let mut by_node: BTreeMap<&str, Vec<&Arc<PodView>>> = BTreeMap::new();
    for pod in snap.pods.iter().filter(|p| is_waiting(p)) {
        let Some(name) = nominated_node(pod) else {
            continue;
        };
        let reason = match nodes.get(name) {
            None => Some(StaleReason::NodeGone),
            Some(node) if label(node, NODEPOOL_LABEL).is_none() => None,
            Some(node) if leaving(node) => Some(StaleReason::NodeLeaving),
            Some(_) if window_passed(name) => Some(StaleReason::NotBound),
            Some(node) => {
                if label(node, NODE_INITIALIZED_LABEL) == Some("true") {
                    by_node.entry(name).or_default().push(pod);
                }
                None
            }
        };
        if let Some(reason) = reason {
            out.push(Stale {
                pod: PodKey::of(pod),
                node: name.to_string(),
                reason,
            });
        }
    }
    if !by_node.is_empty() {
        let mut used: HashMap<&str, Resources> = HashMap::new();
        for pod in &snap.pods {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
                continue;
            };
            if !by_node.contains_key(node)
                || crate::scheduling::pod::is_terminal(pod)
                || pod.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            if let Ok(r) = pod_requests(pod) {
                used.entry(node).or_default().add(&r);
            }
        }
        for (name, mut pods) in by_node {
            let Some(node) = nodes.get(name) else {
                continue;
            };
            let allocatable = node_allocatable(node);
            let mut total = used.remove(name).unwrap_or_default();
            pods.sort_by(|a, b| {
                let created = |p: &PodView| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
                priority(b)
                    .cmp(&priority(a))
                    .then(created(a).cmp(&created(b)))
                    .then(a.metadata.name.cmp(&b.metadata.name))
            });
            for pod in pods {
                let requests = pod_requests(pod).unwrap_or_default();
                let after = total.plus(&requests);
                if after.fits_in(&allocatable) {
                    total = after;
                } else {
                    out.push(Stale {
                        pod: PodKey::of(pod),
                        node: name.to_string(),
                        reason: StaleReason::DoesNotFit,
                    });
                }
            }
        }
    }
    out.sort_by(|a, b| a.pod.cmp(&b.pod));
    out
}

#[cfg(test)]
mod tests;
