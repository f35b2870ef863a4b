//! Which nodes consolidation may consider, and why the others are left alone (upstream
//! `disruption/types.go` `NewCandidate`, `state/statenode.go`, `nodeclaim/disruption/
//! consolidation.go`): an initialized Karpenter node with its NodeClaim, NodePool and priced
//! offering, not being deleted or replaced already (one in-progress set shared with serial
//! upgrades), past `consolidateAfter` since its last pod event, allowed by its NodePool's
//! `consolidationPolicy`, and free of do-not-disrupt annotations and PodDisruptionBudgets that
//! allow nothing. Every node gets a verdict, so `kubectl karpenter disruption` can say why.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use crds::conditions::{self, DISRUPTION_REASON, INITIALIZED};
use crds::disruption::{COMMAND_ANNOTATION, REPLACES_ANNOTATION as CONSOLIDATION_REPLACES};
use crds::labels::{
    CAPACITY_TYPE_LABEL, DISRUPTED_TAINT_KEY, INSTANCE_TYPE_LABEL, TOPOLOGY_ZONE_LABEL,
};
use crds::upgrade::{REPLACEMENT_ANNOTATION, REPLACES_ANNOTATION};
use crds::{ConsolidationPolicy, NodeClaim, NodePool, StatusConditions};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;

use crate::pod_view::PodView;
use kube::ResourceExt;

use super::blockers::{Blocker, opts_out, pod_blocker};
use crate::capacity::index::TypeIndex;
use crate::scheduling::pod::{is_owned_by, is_terminal};
use crate::snapshot::{Snapshot, annotation, nodepool_of};

/// A node consolidation may remove or replace.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Its NodeClaim.
    pub nodeclaim: Arc<NodeClaim>,
    /// Its node.
    pub node: Arc<Node>,
    /// Its NodePool.
    pub nodepool: Arc<NodePool>,
    /// Instance type name, e.g. `m5.large`.
    pub instance_type: String,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    /// Availability zone.
    pub zone: String,
    /// What its offering costs, USD/hour; `None` when the instance type or offering is no longer
    /// listed (it can then be deleted, never replaced: nothing proves a replacement cheaper).
    pub price: Option<f64>,
    /// The pods that must move elsewhere (active, not DaemonSet pods, not static pods).
    pub pods: Vec<Arc<PodView>>,
    /// Upstream's disruption cost: per pod 1 + deletion cost / 2^27 + priority / 2^25 (clamped
    /// to ±10), times the fraction of the NodeClaim's `expireAfter` still ahead. Cheaper first.
    pub disruption_cost: f64,
    /// The Balanced policy's cost of moving its pods
    /// ([`reschedule_cost`]): 1 plus each pod's positive
    /// eviction cost, with no lifetime factor.
    pub reschedule_cost: f64,
}

impl Candidate {
    /// The NodeClaim's name.
    pub fn name(&self) -> &str {
        self.nodeclaim.metadata.name.as_deref().unwrap_or_default()
    }

    /// The node's name.
    pub fn node_name(&self) -> &str {
        self.node.metadata.name.as_deref().unwrap_or_default()
    }

    /// The NodePool's name.
    pub fn nodepool_name(&self) -> &str {
        self.nodepool.metadata.name.as_deref().unwrap_or_default()
    }

    /// No pod would have to move.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

/// Why a node is not a consolidation candidate now.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum NotCandidate {
    /// Not `Initialized` yet, or no node registered.
    NotInitialized,
    /// Being deleted (drained, terminated).
    Deleting,
    /// Already being disrupted: replaced by an upgrade step, or part of a consolidation command.
    InProgress {
        /// What is under way, e.g. `upgrade step (replacement default-x7k2p)`.
        what: String,
    },
    /// A replacement launched by an upgrade step or a consolidation command, not yet done.
    Replacement {
        /// The NodeClaims it replaces.
        replaces: String,
    },
    /// No `karpenter.sh/nodepool` label, or its NodePool is gone.
    NoNodePool,
    /// The NodePool says `consolidateAfter: Never`.
    ConsolidationDisabled,
    /// The NodePool is static (`spec.replicas`): it keeps its node count, and consolidation
    /// leaves its nodes alone (upstream `Candidate.OwnedByStaticNodePool`).
    StaticNodePool,
    /// `consolidateAfter` has not passed since the node's last pod event.
    ConsolidateAfter {
        /// When it will have passed.
        at: Timestamp,
    },
    /// Pending pods are nominated to the node (`status.nominatedNodeName`) or planned onto its
    /// NodeClaim and wait to land there (upstream: "state node is nominated for a pending
    /// pod").
    Nominated {
        /// How many pending pods wait for it.
        pods: usize,
    },
    /// The NodePool's `consolidationPolicy: WhenEmpty` and the node has pods to move.
    WhenEmptyOnly {
        /// How many pods would have to move.
        pods: usize,
    },
    /// Something keeps the node from voluntary disruption (serialized as the [`Blocker`], whose
    /// `kind` names it).
    #[serde(untagged)]
    Blocked(Blocker),
}

impl fmt::Display for NotCandidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotCandidate::NotInitialized => f.write_str("not initialized"),
            NotCandidate::Deleting => f.write_str("being deleted"),
            NotCandidate::InProgress { what } => write!(f, "already being disrupted: {what}"),
            NotCandidate::Replacement { replaces } => {
                write!(f, "a replacement being launched for {replaces}")
            }
            NotCandidate::NoNodePool => f.write_str("its NodePool is gone"),
            NotCandidate::ConsolidationDisabled => {
                f.write_str("consolidation disabled (consolidateAfter: Never)")
            }
            NotCandidate::StaticNodePool => {
                f.write_str("static NodePool (spec.replicas): its nodes are never consolidated")
            }
            NotCandidate::ConsolidateAfter { at } => write!(
                f,
                "consolidateAfter has not elapsed (at {})",
                at.strftime("%Y-%m-%dT%H:%M:%SZ")
            ),
            NotCandidate::Nominated { pods } => {
                write!(f, "nominated for {pods} pending pod(s)")
            }
            NotCandidate::WhenEmptyOnly { pods } => write!(
                f,
                "consolidationPolicy WhenEmpty and {pods} pod(s) would have to move"
            ),
            NotCandidate::Blocked(b) => b.fmt(f),
        }
    }
}

/// One Karpenter NodeClaim's standing for consolidation.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// The NodeClaim's name.
    pub nodeclaim: String,
    /// Its node's name, if one registered.
    pub node: Option<String>,
    /// Its NodePool's name, if labelled.
    pub nodepool: Option<String>,
    /// A candidate, or why not.
    pub standing: Result<Candidate, NotCandidate>,
}

/// When consolidation may first consider `claim` (upstream's `Consolidatable` condition):
/// `consolidateAfter` after its last pod event (`status.lastPodEventTime`), or after it
/// initialized when no pod event was seen. `None` with `consolidateAfter: Never` or before it
/// initialized.
pub fn consolidatable_at(claim: &NodeClaim, pool: &NodePool) -> Option<Timestamp> {
    let after = pool.spec.disruption.consolidate_after.duration()?;
    let initialized = conditions::get(claim.status_conditions(), INITIALIZED)
        .filter(|c| c.status == "True")
        .map(|c| c.last_transition_time.0)?;
    let last_event = claim
        .status
        .as_ref()
        .and_then(|s| s.last_pod_event_time.as_ref())
        .map(|t| t.0)
        .map_or(initialized, |t| t.max(initialized));
    last_event
        .checked_add(SignedDuration::try_from(after).ok()?)
        .ok()
}

/// Whether a pod bound to a node would have to move if the node went away (upstream
/// `IsReschedulable`): active, not a DaemonSet pod, not a static (node-owned) pod.
pub fn is_reschedulable(pod: &PodView) -> bool {
    !is_terminal(pod)
        && pod.metadata.deletion_timestamp.is_none()
        && !is_owned_by(pod, "DaemonSet")
        && !is_owned_by(pod, "Node")
}

/// Upstream's eviction cost of one pod (`disruptionutils.EvictionCost`): 1, plus its
/// `controller.kubernetes.io/pod-deletion-cost` / 2^27, plus its priority / 2^25, clamped to
/// [-10, 10].
pub fn eviction_cost(pod: &PodView) -> f64 {
    let deletion_cost = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("controller.kubernetes.io/pod-deletion-cost"))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    let priority = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority)
        .map_or(0.0, f64::from);
    (1.0 + deletion_cost / 2f64.powi(27) + priority / 2f64.powi(25)).clamp(-10.0, 10.0)
}

/// What every node adds to a disruption cost, on top of its pods' (upstream
/// `PerNodeBaseDisruptionCost`): removing a node has a cost even when no pod moves.
pub const PER_NODE_DISRUPTION_COST: f64 = 1.0;

/// A node's disruption cost for Balanced: [`PER_NODE_DISRUPTION_COST`] plus each pod's
/// eviction cost, negative costs counted as 0 (upstream `computeRescheduleDisruptionCost`).
/// `pods` are the pods that would have to move (not DaemonSet or static pods).
pub fn reschedule_cost<'a>(pods: impl IntoIterator<Item = &'a Arc<PodView>>) -> f64 {
    PER_NODE_DISRUPTION_COST
        + pods
            .into_iter()
            .map(|p| eviction_cost(p).max(0.0))
            .sum::<f64>()
}

/// The fraction of a NodeClaim's life still ahead: 1 without `expireAfter`, else the time left
/// until expiry over `expireAfter` (upstream `LifetimeRemaining`), in [0, 1].
fn lifetime_remaining(claim: &NodeClaim, now: Timestamp) -> f64 {
    let Some(life) = claim.spec.expire_after.duration() else {
        return 1.0;
    };
    let Some(created) = claim.metadata.creation_timestamp.as_ref().map(|t| t.0) else {
        return 1.0;
    };
    if life.is_zero() {
        return 1.0;
    }
    let age = now.duration_since(created).as_secs_f64().max(0.0);
    ((life.as_secs_f64() - age) / life.as_secs_f64()).clamp(0.0, 1.0)
}

/// Whether a disruption holds `claim` (an upgrade step or a disruption command, as a
/// candidate or a replacement, or a deletion for a disruption reason), judged by its own marks
/// only: the disrupted taint on its node is not one (see [`stale_disrupted_taints`]).
pub fn is_held(claim: &NodeClaim) -> bool {
    in_progress(claim, None).is_some()
}

/// The nodes whose `karpenter.sh/disrupted:NoSchedule` taint nothing stands behind: the node is
/// not deleting, and its NodeClaim exists, is not deleting and is held by no disruption
/// ([`is_held`]). Such a taint is left by a command whose start failed or whose marks were
/// cleared while the taint's removal failed; it keeps pods off the node and counts the node as
/// disrupting in every budget, so the orchestrator removes it at start and on every pass
/// (upstream `disruption/controller.go` removes the taint from every node that no queued
/// command holds and that is not marked for deletion). Nodes no NodeClaim claims are left to
/// their own termination. Node names with their NodeClaim's name, sorted by node.
pub fn stale_disrupted_taints(snap: &Snapshot) -> Vec<(String, String)> {
    let claims: HashMap<&str, &NodeClaim> = snap
        .nodeclaims
        .iter()
        .filter_map(|c| Some((c.status.as_ref()?.provider_id.as_deref()?, c.as_ref())))
        .collect();
    let mut out: Vec<(String, String)> = snap
        .nodes
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none() && has_disrupted_taint(n))
        .filter_map(|n| {
            let pid = n.spec.as_ref()?.provider_id.as_deref()?;
            let claim = claims.get(pid)?;
            (claim.metadata.deletion_timestamp.is_none() && !is_held(claim))
                .then(|| Some((n.metadata.name.clone()?, claim.metadata.name.clone()?)))?
        })
        .collect();
    out.sort();
    out
}

fn has_disrupted_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == DISRUPTED_TAINT_KEY))
}

/// The in-progress set: whether an upgrade step or a consolidation command already holds this
/// NodeClaim, as it or its replacement.
fn in_progress(claim: &NodeClaim, node: Option<&Node>) -> Option<NotCandidate> {
    if let Some(r) = annotation(claim, REPLACES_ANNOTATION).filter(|r| !r.is_empty()) {
        return Some(NotCandidate::Replacement {
            replaces: r.to_string(),
        });
    }
    if let Some(r) = annotation(claim, CONSOLIDATION_REPLACES).filter(|r| !r.is_empty()) {
        return Some(NotCandidate::Replacement {
            replaces: r.to_string(),
        });
    }
    if let Some(r) = annotation(claim, REPLACEMENT_ANNOTATION) {
        let what = if r.is_empty() {
            "upgrade step (empty node)".to_string()
        } else {
            format!("upgrade step (replacement {r})")
        };
        return Some(NotCandidate::InProgress { what });
    }
    if let Some(cmd) = annotation(claim, COMMAND_ANNOTATION) {
        return Some(NotCandidate::InProgress {
            what: format!("consolidation command {cmd}"),
        });
    }
    if let Some(c) =
        conditions::get(claim.status_conditions(), DISRUPTION_REASON).filter(|c| c.status == "True")
    {
        return Some(NotCandidate::InProgress {
            what: format!("disruption ({})", c.reason),
        });
    }
    node.is_some_and(has_disrupted_taint)
        .then(|| NotCandidate::InProgress {
            what: format!("node tainted {DISRUPTED_TAINT_KEY}"),
        })
}

/// The price of a NodeClaim's offering, USD/hour, from the listed instance types as its
/// NodePool `pool` lists them (NodeOverlays applied, as the replacement it is compared with).
pub(crate) fn offering_price(
    types: &TypeIndex,
    pool: Option<&str>,
    instance_type: &str,
    zone: &str,
    capacity_type: &str,
) -> Option<f64> {
    types
        .get(pool, instance_type)?
        .offerings
        .iter()
        .find(|o| o.zone == zone && o.capacity_type == capacity_type)
        .map(|o| o.price)
}

/// Every Karpenter NodeClaim of `snap` (labelled with a NodePool) judged for consolidation at
/// `now`, in NodeClaim name order. `types` are the instance types listed for the pass, by name
/// and per NodePool (to price each node's offering as its NodePool lists it).
pub fn verdicts(snap: &Snapshot, types: &TypeIndex, now: Timestamp) -> Vec<Verdict> {
    let pools: HashMap<&str, &Arc<NodePool>> = snap
        .nodepools
        .iter()
        .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
        .collect();
    let nodes: HashMap<&str, &Arc<Node>> = snap
        .nodes
        .iter()
        .filter_map(|n| Some((n.spec.as_ref()?.provider_id.as_deref()?, n)))
        .collect();
    let mut pods_by_node: BTreeMap<&str, Vec<&Arc<PodView>>> = BTreeMap::new();
    for pod in &snap.pods {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            pods_by_node.entry(node).or_default().push(pod);
        }
    }
    let mut waiting: HashMap<String, usize> = HashMap::new();
    for r in snap.reservations() {
        *waiting.entry(r.target).or_default() += 1;
    }
    let mut out: Vec<Verdict> = snap
        .nodeclaims
        .iter()
        .filter_map(|claim| {
            let pool_name = nodepool_of(claim.metadata.labels.as_ref())?;
            let node = claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .and_then(|p| nodes.get(p))
                .copied();
            let bound = node
                .and_then(|n| n.metadata.name.as_deref())
                .and_then(|n| pods_by_node.get(n))
                .map(Vec::as_slice)
                .unwrap_or_default();
            Some(Verdict {
                nodeclaim: claim.name_any(),
                node: node.map(|n| n.name_any()),
                nodepool: Some(pool_name.to_string()),
                standing: {
                    let standing = judge(
                        claim,
                        node,
                        pools.get(pool_name).copied(),
                        bound,
                        snap,
                        types,
                        now,
                    );
                    let nominated = node
                        .and_then(|n| n.metadata.name.as_deref())
                        .and_then(|n| waiting.get(n));
                    match (standing, nominated) {
                        (
                            s @ Err(
                                NotCandidate::Deleting
                                | NotCandidate::InProgress { .. }
                                | NotCandidate::Replacement { .. },
                            ),
                            _,
                        ) => s,
                        (_, Some(&pods)) => Err(NotCandidate::Nominated { pods }),
                        (s, None) => s,
                    }
                },
            })
        })
        .collect();
    out.sort_by(|a, b| a.nodeclaim.cmp(&b.nodeclaim));
    out
}

/// The in-progress set counted per NodePool: nodes being deleted, or held by an upgrade step or
/// a consolidation command (what [`Budgets`](super::consolidation::Budgets) subtracts).
pub fn disrupting_by_pool(verdicts: &[Verdict]) -> HashMap<String, usize> {
    let mut disrupting: HashMap<String, usize> = HashMap::new();
    for v in verdicts {
        if let Err(NotCandidate::Deleting | NotCandidate::InProgress { .. }) = &v.standing {
            *disrupting
                .entry(v.nodepool.clone().unwrap_or_default())
                .or_default() += 1;
        }
    }
    disrupting
}

fn judge(
    claim: &Arc<NodeClaim>,
    node: Option<&Arc<Node>>,
    pool: Option<&Arc<NodePool>>,
    bound: &[&Arc<PodView>],
    snap: &Snapshot,
    types: &TypeIndex,
    now: Timestamp,
) -> Result<Candidate, NotCandidate> {
    if claim.metadata.deletion_timestamp.is_some()
        || node.is_some_and(|n| n.metadata.deletion_timestamp.is_some())
    {
        return Err(NotCandidate::Deleting);
    }
    if let Some(why) = in_progress(claim, node.map(|n| n.as_ref())) {
        return Err(why);
    }
    let Some(node) = node.filter(|_| conditions::is_true(claim.status_conditions(), INITIALIZED))
    else {
        return Err(NotCandidate::NotInitialized);
    };
    let Some(pool) = pool else {
        return Err(NotCandidate::NoNodePool);
    };
    if pool.is_static() {
        return Err(NotCandidate::StaticNodePool);
    }
    if opts_out(node.metadata.annotations.as_ref()) {
        return Err(NotCandidate::Blocked(Blocker::NodeOptsOut {
            object: "node".into(),
        }));
    }
    if opts_out(claim.metadata.annotations.as_ref()) {
        return Err(NotCandidate::Blocked(Blocker::NodeOptsOut {
            object: "NodeClaim".into(),
        }));
    }
    let Some(at) = consolidatable_at(claim, pool) else {
        return Err(if pool.spec.disruption.consolidate_after.is_never() {
            NotCandidate::ConsolidationDisabled
        } else {
            NotCandidate::NotInitialized
        });
    };
    if at > now {
        return Err(NotCandidate::ConsolidateAfter { at });
    }
    let pods: Vec<Arc<PodView>> = bound
        .iter()
        .filter(|p| is_reschedulable(p))
        .map(|p| Arc::clone(p))
        .collect();
    if pool.spec.disruption.consolidation_policy == ConsolidationPolicy::WhenEmpty
        && !pods.is_empty()
    {
        return Err(NotCandidate::WhenEmptyOnly { pods: pods.len() });
    }
    if let Some(b) = pods
        .iter()
        .find_map(|p| pod_blocker(p, &snap.pdbs, now, true))
    {
        return Err(NotCandidate::Blocked(b));
    }
    Ok(build(claim, node, pool, pods, types, now))
}

/// The candidate a judged node would be: its offering, price, pods and disruption cost.
fn build(
    claim: &Arc<NodeClaim>,
    node: &Arc<Node>,
    pool: &Arc<NodePool>,
    pods: Vec<Arc<PodView>>,
    types: &TypeIndex,
    now: Timestamp,
) -> Candidate {
    let label = |k: &str| {
        claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(k))
            .or_else(|| node.metadata.labels.as_ref().and_then(|l| l.get(k)))
            .cloned()
            .unwrap_or_default()
    };
    let (instance_type, zone, capacity_type) = (
        label(INSTANCE_TYPE_LABEL),
        label(TOPOLOGY_ZONE_LABEL),
        label(CAPACITY_TYPE_LABEL),
    );
    let disruption_cost =
        pods.iter().map(|p| eviction_cost(p)).sum::<f64>() * lifetime_remaining(claim, now);
    Candidate {
        price: offering_price(
            types,
            pool.metadata.name.as_deref(),
            &instance_type,
            &zone,
            &capacity_type,
        ),
        nodeclaim: Arc::clone(claim),
        node: Arc::clone(node),
        nodepool: Arc::clone(pool),
        instance_type,
        capacity_type,
        zone,
        reschedule_cost: reschedule_cost(&pods),
        pods,
        disruption_cost,
    }
}

/// The NodeClaim named `name` (or the one whose node is named `name`) as a candidate whatever
/// stands in its way (do-not-disrupt, PDBs, `consolidateAfter`, policy, the in-progress set),
/// for a what-if: `kubectl karpenter disruption explain` simulates removing it and lists the
/// blockers beside ([`blockers_of`]). `types` price its offering, as in [`verdicts`].
///
/// Errors: no such Karpenter NodeClaim ([`None`]); it has no initialized node or no NodePool
/// (the [`NotCandidate`] says which).
pub fn what_if(
    snap: &Snapshot,
    types: &TypeIndex,
    name: &str,
    now: Timestamp,
) -> Option<Result<Candidate, NotCandidate>> {
    let node_of = |claim: &NodeClaim| {
        let provider_id = claim.status.as_ref()?.provider_id.as_deref()?;
        snap.nodes
            .iter()
            .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
    };
    let (claim, node) = snap
        .nodeclaims
        .iter()
        .filter(|c| nodepool_of(c.metadata.labels.as_ref()).is_some())
        .map(|c| (c, node_of(c)))
        .find(|(c, n)| {
            c.metadata.name.as_deref() == Some(name)
                || n.is_some_and(|n| n.metadata.name.as_deref() == Some(name))
        })?;
    let Some(node) = node.filter(|_| conditions::is_true(claim.status_conditions(), INITIALIZED))
    else {
        return Some(Err(NotCandidate::NotInitialized));
    };
    let pool_name = nodepool_of(claim.metadata.labels.as_ref()).unwrap_or_default();
    let Some(pool) = snap
        .nodepools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(pool_name))
    else {
        return Some(Err(NotCandidate::NoNodePool));
    };
    let node_name = node.metadata.name.as_deref();
    let pods = snap
        .pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == node_name)
        .filter(|p| is_reschedulable(p))
        .cloned()
        .collect();
    Some(Ok(build(claim, node, pool, pods, types, now)))
}

/// Every blocker that keeps `candidate` from voluntary disruption at `now`, not just the first:
/// the node or NodeClaim annotated `karpenter.sh/do-not-disrupt`, then each pod's
/// do-not-disrupt annotation or PodDisruptionBudget ([`pod_blocker`]), in pod order.
pub fn blockers_of(candidate: &Candidate, snap: &Snapshot, now: Timestamp) -> Vec<Blocker> {
    let mut out = Vec::new();
    if opts_out(candidate.node.metadata.annotations.as_ref()) {
        out.push(Blocker::NodeOptsOut {
            object: "node".into(),
        });
    }
    if opts_out(candidate.nodeclaim.metadata.annotations.as_ref()) {
        out.push(Blocker::NodeOptsOut {
            object: "NodeClaim".into(),
        });
    }
    out.extend(
        candidate
            .pods
            .iter()
            .filter_map(|p| pod_blocker(p, &snap.pdbs, now, true)),
    );
    out
}

#[cfg(test)]
#[path = "candidates_tests.rs"]
pub(crate) mod tests;
