//! Node repair (upstream `pkg/controllers/node/health/controller.go`, behind the `NodeRepair`
//! feature gate): a Karpenter node whose condition matches one of the cloud provider's
//! [`RepairPolicy`]s for longer than the policy tolerates is replaced, forcefully: its NodeClaim
//! gets `karpenter.sh/nodeclaim-termination-timestamp` = now (its drain deletes pods without
//! waiting for PodDisruptionBudgets) and is deleted, with no disruption budget and no
//! replacement launched first; the provisioner then serves the evicted pods. Repair stops while
//! more than 20% of a NodePool's nodes (of the cluster's nodes, for a NodeClaim without a
//! NodePool) are unhealthy: a fleet-wide outage is not fixed by replacing the fleet.
//!
//! Pure: [`decide`] takes the nodes, NodeClaims, NodePools, the policies and `now`, and returns
//! data ([`Decision`]); `controller::node::health` executes it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crds::labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION;
use crds::{NodeClaim, NodePool};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;

use crate::snapshot::nodepool_of;

/// One unhealthy state a cloud provider asks Karpenter to repair (upstream
/// `cloudprovider.RepairPolicy`, `pkg/cloudprovider/types.go`): a Node whose condition
/// `condition_type` has had the status `condition_status` for at least `toleration` is replaced.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RepairPolicy {
    /// The Node condition's `type`, e.g. `Ready`, `AcceleratedHardwareReady`.
    pub condition_type: String,
    /// The unhealthy `status`: `False` or `Unknown` (`True` for a condition that reports a
    /// problem).
    pub condition_status: String,
    /// How long the condition may hold before the node is replaced, measured from the
    /// condition's `lastTransitionTime`.
    pub toleration: Duration,
}

impl RepairPolicy {
    /// A policy for `condition_type` = `condition_status` held for `minutes` minutes.
    pub fn new(condition_type: &str, condition_status: &str, minutes: u64) -> RepairPolicy {
        RepairPolicy {
            condition_type: condition_type.into(),
            condition_status: condition_status.into(),
            toleration: Duration::from_secs(minutes * 60),
        }
    }

    /// `Type=Status`, e.g. `Ready=False`.
    pub fn condition(&self) -> String {
        format!("{}={}", self.condition_type, self.condition_status)
    }
}

/// The AWS provider's repair policies (upstream `aws:pkg/cloudprovider/cloudprovider.go`
/// `RepairPolicies`): the kubelet's `Ready` False or Unknown for 30 minutes, and the EKS node
/// monitoring agent's conditions: `AcceleratedHardwareReady` False for 10 minutes,
/// `StorageReady`, `NetworkingReady`, `KernelReady` and `ContainerRuntimeReady` False for 30
/// minutes. The simulated cloud has the same ones, and `kubectl karpenter status` reads them
/// from here, so the plugin and the controller agree on what is unhealthy.
pub fn aws_policies() -> Vec<RepairPolicy> {
    vec![
        RepairPolicy::new("Ready", "False", 30),
        RepairPolicy::new("Ready", "Unknown", 30),
        RepairPolicy::new("AcceleratedHardwareReady", "False", 10),
        RepairPolicy::new("StorageReady", "False", 30),
        RepairPolicy::new("NetworkingReady", "False", 30),
        RepairPolicy::new("KernelReady", "False", 30),
        RepairPolicy::new("ContainerRuntimeReady", "False", 30),
    ]
}

/// The share of a NodePool's (or the cluster's) nodes that may be unhealthy for repair to go
/// on, in percent (upstream `allowedUnhealthyPercent`, `20%`).
pub const ALLOWED_UNHEALTHY_PERCENT: usize = 20;

/// How soon a repair held back by the 20% rule is looked at again without a change (upstream
/// requeues after 5 minutes).
pub const BLOCKED_RECHECK: Duration = Duration::from_secs(300);

/// How many of `total` nodes may be unhealthy for repair to go on: 20% of them, rounded up
/// (upstream `intstr.GetScaledValueFromIntOrPercent(20%, total, roundUp=true)`, the rounding of
/// a PodDisruptionBudget's `maxUnavailable`): 1 of 1 to 5, 2 of 6 to 10. Repair is blocked when
/// more than this many are unhealthy.
pub fn allowed_unhealthy(total: usize) -> usize {
    (total * ALLOWED_UNHEALTHY_PERCENT).div_ceil(100)
}

/// A Node condition a repair policy matches.
#[derive(Clone, Debug, PartialEq)]
pub struct Unhealthy {
    /// The policy it matches.
    pub policy: RepairPolicy,
    /// The condition's `lastTransitionTime`; `None` when the node does not say, which counts
    /// as long ago (upstream reads Go's zero time): due at once.
    pub since: Option<Timestamp>,
}

impl Unhealthy {
    /// When the policy's toleration runs out: `since` + toleration.
    pub fn due_at(&self) -> Timestamp {
        let since = self.since.unwrap_or(Timestamp::MIN);
        SignedDuration::try_from(self.policy.toleration)
            .ok()
            .and_then(|t| since.checked_add(t).ok())
            .unwrap_or(Timestamp::MAX)
    }

    /// Whether the toleration has run out at `now` (upstream: not before `since` + toleration).
    pub fn is_due(&self, now: Timestamp) -> bool {
        now >= self.due_at()
    }

    /// How long the condition has held at `now` (zero when `since` is unknown or ahead).
    pub fn held_for(&self, now: Timestamp) -> Duration {
        self.since
            .and_then(|s| Duration::try_from(now.duration_since(s)).ok())
            .unwrap_or_default()
    }
}

/// The policy `node` matches, if any: of the policies whose condition the node reports with
/// the policy's status, the one whose toleration runs out first (the first listed on a tie;
/// upstream `findUnhealthyConditions`). Conditions the node does not report match nothing.
pub fn unhealthy(node: &Node, policies: &[RepairPolicy]) -> Option<Unhealthy> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    let mut found: Option<Unhealthy> = None;
    for policy in policies {
        let Some(c) = conditions.iter().find(|c| c.type_ == policy.condition_type) else {
            continue;
        };
        if c.status != policy.condition_status {
            continue;
        }
        let candidate = Unhealthy {
            policy: policy.clone(),
            since: c.last_transition_time.as_ref().map(|t| t.0),
        };
        if found
            .as_ref()
            .is_none_or(|f| candidate.due_at() < f.due_at())
        {
            found = Some(candidate);
        }
    }
    found
}

/// What [`decide`] looks at.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    /// Every Node in the cluster, Karpenter's or not (the cluster-wide rule counts them all).
    pub nodes: &'a [Arc<Node>],
    /// Every NodeClaim (a node is Karpenter's when exactly one has its providerID).
    pub nodeclaims: &'a [Arc<NodeClaim>],
    /// Every NodePool (a blocked NodePool's Event is about it).
    pub nodepools: &'a [Arc<NodePool>],
    /// The cloud provider's policies; none: nothing is ever repaired.
    pub policies: &'a [RepairPolicy],
    /// The time of the decision.
    pub now: Timestamp,
}

/// One node to repair.
#[derive(Clone, Debug, PartialEq)]
pub struct Repair {
    /// Its NodeClaim, as read (the executor's writes are guarded by its resourceVersion).
    pub nodeclaim: Arc<NodeClaim>,
    /// The unhealthy node.
    pub node: Arc<Node>,
    /// The condition and the policy it matches.
    pub unhealthy: Unhealthy,
    /// How long the condition has held.
    pub held_for: Duration,
    /// Write `karpenter.sh/nodeclaim-termination-timestamp` = this (now, to the second) first,
    /// so the drain does not wait for PodDisruptionBudgets; `None` when the NodeClaim already
    /// has a valid time that is not in the future (kept, as upstream keeps it).
    pub termination_timestamp: Option<Timestamp>,
    /// Delete the NodeClaim; false when it is already being deleted (then only the termination
    /// timestamp is written, which makes its drain forceful, as upstream does).
    pub delete: bool,
}

/// Where the 20% rule counts: a NodePool's nodes (those labelled `karpenter.sh/nodepool` with
/// its name), or the whole cluster's for a NodeClaim without a NodePool.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// The nodes of this NodePool.
    NodePool(String),
    /// Every node of the cluster.
    Cluster,
}

/// Repairs the 20% rule holds back in one scope.
#[derive(Clone, Debug, PartialEq)]
pub struct Blocked {
    /// Where the nodes were counted.
    pub scope: Scope,
    /// The NodePool object, when the scope is one that exists (its Event goes on it).
    pub nodepool: Option<Arc<NodePool>>,
    /// Nodes in the scope that match a repair policy, due or not.
    pub unhealthy: usize,
    /// Nodes in the scope.
    pub total: usize,
    /// How many may be unhealthy for repair to go on ([`allowed_unhealthy`]).
    pub allowed: usize,
    /// The nodes due for repair that are held back, with their NodeClaims and conditions, in
    /// node name order.
    pub held: Vec<(Arc<Node>, Arc<NodeClaim>, Unhealthy)>,
}

impl Blocked {
    /// The `NodeRepairBlocked` Event's message: how many of how many nodes are unhealthy and
    /// the limit, e.g. `3 of 5 nodes of NodePool fleet are unhealthy, more than 20% (at most 1
    /// may be); unhealthy nodes are not replaced until fewer are`.
    pub fn message(&self) -> String {
        let place = match &self.scope {
            Scope::NodePool(name) => format!("of NodePool {name}"),
            Scope::Cluster => "of the cluster".to_owned(),
        };
        let noun = if self.total == 1 { "node" } else { "nodes" };
        let verb = if self.unhealthy == 1 { "is" } else { "are" };
        format!(
            "{} of {} {noun} {place} {verb} unhealthy, more than {ALLOWED_UNHEALTHY_PERCENT}% \
             (at most {} may be); unhealthy nodes are not replaced until fewer are",
            self.unhealthy, self.total, self.allowed
        )
    }
}

/// What node repair does now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// Nodes to repair, in node name order.
    pub repairs: Vec<Repair>,
    /// Scopes where the 20% rule holds repairs back, in scope order.
    pub blocked: Vec<Blocked>,
    /// When to decide again if nothing changes: the earliest time an unhealthy node's
    /// toleration runs out, or [`BLOCKED_RECHECK`] from now when a repair is held back; `None`
    /// when nothing is waiting.
    pub recheck_at: Option<Timestamp>,
}

/// Unhealthy and total node counts, per NodePool label and for the cluster.
#[derive(Default)]
struct Counts {
    pools: HashMap<String, (usize, usize)>,
    cluster: (usize, usize),
}

impl Counts {
    fn of(nodes: &[Arc<Node>], policies: &[RepairPolicy]) -> Counts {
        let mut counts = Counts::default();
        for node in nodes {
            let sick = usize::from(unhealthy(node, policies).is_some());
            counts.cluster.0 += sick;
            counts.cluster.1 += 1;
            if let Some(pool) = nodepool_of(node.metadata.labels.as_ref()) {
                let c = counts.pools.entry(pool.to_owned()).or_default();
                c.0 += sick;
                c.1 += 1;
            }
        }
        counts
    }

    /// (unhealthy, total) in `scope`.
    fn of_scope(&self, scope: &Scope) -> (usize, usize) {
        match scope {
            Scope::NodePool(name) => self.pools.get(name).copied().unwrap_or_default(),
            Scope::Cluster => self.cluster,
        }
    }
}

/// The termination timestamp to write on `claim` at `now`: none when it already holds a valid
/// time before `now` (upstream `annotateTerminationGracePeriod`), else `now` to the second (as
/// upstream writes RFC 3339).
fn termination_timestamp(claim: &NodeClaim, now: Timestamp) -> Option<Timestamp> {
    let current = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION))
        .and_then(|t| t.parse::<Timestamp>().ok());
    match current {
        Some(t) if t < now => None,
        _ => Some(Timestamp::from_second(now.as_second()).unwrap_or(now)),
    }
}

/// Decide which nodes to repair now (upstream's health controller, one pass over every node):
/// a node matching a policy ([`unhealthy`]) whose toleration has run out, and that exactly one
/// NodeClaim owns (by providerID), is repaired unless more than [`allowed_unhealthy`] of the
/// nodes in its scope (its NodeClaim's NodePool, else the cluster) match a policy, due or not;
/// then it is held back in [`Decision::blocked`]. Budgets, `karpenter.sh/do-not-disrupt` and the
/// NodeClaim's `terminationGracePeriod` do not apply (forceful). Nodes without a NodeClaim, or
/// with several, are left alone.
pub fn decide(input: &Input<'_>) -> Decision {
    let now = input.now;
    let mut owners: HashMap<&str, Vec<&Arc<NodeClaim>>> = HashMap::new();
    for claim in input.nodeclaims {
        if let Some(pid) = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .filter(|p| !p.is_empty())
        {
            owners.entry(pid).or_default().push(claim);
        }
    }
    let counts = Counts::of(input.nodes, input.policies);
    let mut decision = Decision::default();
    let mut blocked: BTreeMap<Scope, Blocked> = BTreeMap::new();
    let recheck = |at: Timestamp, decision: &mut Decision| {
        decision.recheck_at = Some(decision.recheck_at.map_or(at, |r| r.min(at)));
    };
    for node in input.nodes {
        let Some(sick) = unhealthy(node, input.policies) else {
            continue;
        };
        let Some(pid) = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) else {
            continue;
        };
        let [claim] = owners.get(pid).map(Vec::as_slice).unwrap_or_default() else {
            continue;
        };
        if !sick.is_due(now) {
            recheck(sick.due_at(), &mut decision);
            continue;
        }
        let scope = match nodepool_of(claim.metadata.labels.as_ref()) {
            Some(pool) => Scope::NodePool(pool.to_owned()),
            None => Scope::Cluster,
        };
        let (unhealthy_count, total) = counts.of_scope(&scope);
        let allowed = allowed_unhealthy(total);
        if unhealthy_count > allowed {
            let at = now
                .checked_add(SignedDuration::try_from(BLOCKED_RECHECK).unwrap_or_default())
                .unwrap_or(now);
            recheck(at, &mut decision);
            let nodepool = match &scope {
                Scope::NodePool(name) => input
                    .nodepools
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some(name))
                    .cloned(),
                Scope::Cluster => None,
            };
            blocked
                .entry(scope.clone())
                .or_insert_with(|| Blocked {
                    scope,
                    nodepool,
                    unhealthy: unhealthy_count,
                    total,
                    allowed,
                    held: Vec::new(),
                })
                .held
                .push((Arc::clone(node), Arc::clone(claim), sick));
            continue;
        }
        let termination_timestamp = termination_timestamp(claim, now);
        let delete = claim.metadata.deletion_timestamp.is_none();
        if !delete && termination_timestamp.is_none() {
            continue;
        }
        decision.repairs.push(Repair {
            nodeclaim: Arc::clone(claim),
            node: Arc::clone(node),
            held_for: sick.held_for(now),
            unhealthy: sick,
            termination_timestamp,
            delete,
        });
    }
    let name = |n: &Node| n.metadata.name.clone().unwrap_or_default();
    decision.repairs.sort_by_key(|r| name(&r.node));
    decision.blocked = blocked
        .into_values()
        .map(|mut b| {
            b.held.sort_by_key(|(n, _, _)| name(n));
            b
        })
        .collect();
    decision
}

#[cfg(test)]
mod tests;
