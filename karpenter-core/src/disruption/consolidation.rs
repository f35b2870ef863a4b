//! Consolidation decisions (upstream `disruption/emptiness.go`, `multinodeconsolidation.go`,
//! `singlenodeconsolidation.go`, `consolidation.go`): which nodes can go, computed by the same
//! solver the provisioner uses. A set of candidates is simulated away: their pods (and every
//! pending pod) are scheduled onto the remaining nodes, in-flight NodeClaims and new NodeClaims,
//! with every constraint the provisioner honours. No new NodeClaim needed: delete them. One new
//! NodeClaim strictly cheaper than what it removes: replace them. Anything else: leave them.
//!
//! Three methods, in upstream's order: emptiness (every empty candidate within budgets, one
//! command), multi-node (the longest prefix of the candidates, cheapest to disrupt first, that
//! can go; binary search over at most 100), single-node (the first candidate that can go).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use crds::labels::{
    CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, INSTANCE_TYPE_LABEL,
};
use crds::{DisruptionReason, NodePool};
use jiff::Timestamp;

use super::balanced::{PoolScore, Score, Scorer};
use super::budgets::budget_active;
use super::candidates::Candidate;
use crate::capacity::InstanceType;
use crate::lifecycle::drift::HashVersions;
use crate::provisioning::plan::{self, Listing, PlannedNodeClaim};
use crate::provisioning::template;
use crate::scheduling::choices::{self, MinValuesPolicy};
use crate::scheduling::pod::{PodInfo, PodKey};
use crate::scheduling::requirements::Requirement;
use crate::scheduling::solver::{self, Input, NewClaim};

use crate::scheduling::volumes::VolumeIndex;
use crate::snapshot::Snapshot;

/// Upstream's cap on the candidates one multi-node consolidation considers.
pub const MAX_MULTI_NODE_CANDIDATES: usize = 100;
/// Upstream's minimum of cheaper instance types a spot-to-spot replacement of one node must have
/// (and the most it is launched with), so it does not chase the single cheapest spot pool.
pub const SPOT_TO_SPOT_MIN_OPTIONS: usize = 15;

/// What consolidation is decided with besides the snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The time decisions are made at (`consolidateAfter`, do-not-disrupt windows, budgets).
    pub now: Timestamp,
    /// The `SpotToSpotConsolidation` feature gate: whether a spot node may be replaced by a
    /// cheaper spot node, and an on-demand node by a spot one.
    pub spot_to_spot: bool,
    /// The drift hash versions stamped on replacements.
    pub hash_versions: HashVersions,
    /// `MIN_VALUES_POLICY`: replacements are simulated as the provisioner would create them
    /// (upstream's `SimulateScheduling` passes the policy too).
    pub min_values_policy: MinValuesPolicy,
}

/// Which method found a command (the metric label `consolidation_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Empty nodes deleted together.
    Empty,
    /// Several nodes removed at once, replaced by at most one.
    Multi,
    /// One node removed or replaced.
    Single,
}

impl Method {
    /// `empty`, `multi` or `single`, as upstream's metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Empty => "empty",
            Method::Multi => "multi",
            Method::Single => "single",
        }
    }
}

/// A cheaper NodeClaim that takes the removed nodes' pods.
#[derive(Clone, Debug)]
pub struct Replacement {
    /// The NodeClaim to create (its NodePool's template; instance types filtered to those
    /// cheaper than what it replaces, cheapest first) and the solver's decision behind it.
    pub planned: PlannedNodeClaim,
    /// Its cheapest offering, USD/hour.
    pub price: f64,
}

/// Delete the candidates, or replace them.
#[derive(Clone, Debug)]
pub enum Action {
    /// Their pods fit the remaining capacity.
    Delete,
    /// Their pods need one new, cheaper NodeClaim.
    Replace(Box<Replacement>),
}

/// Why a set of candidates cannot go now.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Unconsolidatable {
    /// A pod would not schedule anywhere.
    PodWouldNotSchedule {
        /// `namespace/name`.
        pod: String,
        /// The solver's reason.
        why: String,
    },
    /// More than one new NodeClaim would be needed.
    NeedsSeveralNodeClaims {
        /// How many.
        count: usize,
    },
    /// The replacement would not be cheaper.
    NotCheaper {
        /// What the removed nodes cost, USD/hour (`None` when a price is unknown).
        current: Option<f64>,
        /// The cheapest replacement option, USD/hour.
        replacement: f64,
    },
    /// A spot node would be replaced by spot capacity, and `SpotToSpotConsolidation` is off.
    SpotToSpotDisabled,
    /// Spot-to-spot with fewer than [`SPOT_TO_SPOT_MIN_OPTIONS`] cheaper instance types.
    TooFewSpotOptions {
        /// How many cheaper types there are.
        options: usize,
    },
    /// The NodePool's `consolidationPolicy` is `Balanced` and the move saves too little for
    /// what it disrupts ([`super::balanced`]).
    BelowBalancedThreshold {
        /// The NodePool whose score falls short.
        nodepool: String,
        /// Its score.
        #[serde(flatten)]
        score: Score,
    },
    /// Filtering the options to cheaper ones broke a requirement's `minValues`.
    MinValues {
        /// The requirement's key.
        key: String,
        /// How many distinct values it needs.
        needed: usize,
        /// How many remain.
        left: usize,
    },
}

impl fmt::Display for Unconsolidatable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unconsolidatable::PodWouldNotSchedule { pod, why } => {
                write!(f, "pod {pod} would not schedule: {why}")
            }
            Unconsolidatable::NeedsSeveralNodeClaims { count } => {
                write!(f, "its pods would need {count} new NodeClaims")
            }
            Unconsolidatable::NotCheaper {
                current: Some(c),
                replacement,
            } => write!(
                f,
                "not cheaper: a replacement would cost ${replacement:.4}/h, the node(s) cost ${c:.4}/h"
            ),
            Unconsolidatable::NotCheaper {
                current: None,
                replacement,
            } => write!(
                f,
                "not provably cheaper: the node's own price is unknown (replacement ${replacement:.4}/h)"
            ),
            Unconsolidatable::SpotToSpotDisabled => f.write_str(
                "a spot replacement is needed and spot-to-spot consolidation is disabled \
                 (feature gate SpotToSpotConsolidation)",
            ),
            Unconsolidatable::TooFewSpotOptions { options } => write!(
                f,
                "spot-to-spot needs at least {SPOT_TO_SPOT_MIN_OPTIONS} cheaper instance types, found {options}"
            ),
            Unconsolidatable::BelowBalancedThreshold { nodepool, score } => write!(
                f,
                "NodePool {nodepool} is Balanced and the move saves too little for what it disrupts: {score}"
            ),
            Unconsolidatable::MinValues { key, needed, left } => write!(
                f,
                "the cheaper options leave {left} values of {key}, minValues is {needed}"
            ),
        }
    }
}

/// One consolidation decision: what to remove, and whether to replace it.
#[derive(Clone, Debug)]
pub struct Command {
    /// The method that found it.
    pub method: Method,
    /// The budget reason it is counted against: `Empty` for emptiness, else `Underutilized`.
    pub reason: DisruptionReason,
    /// The nodes to remove.
    pub candidates: Vec<Candidate>,
    /// Delete or replace.
    pub action: Action,
    /// The score of each `Balanced` NodePool among the candidates, all approved (empty when
    /// none is Balanced, and for emptiness, which is never scored).
    pub scores: Vec<PoolScore>,
}

impl Command {
    /// What the removed nodes cost, USD/hour (unknown prices count as 0).
    pub fn current_price(&self) -> f64 {
        self.candidates.iter().filter_map(|c| c.price).sum()
    }

    /// USD/hour saved: the removed nodes' price minus the replacement's.
    pub fn savings(&self) -> f64 {
        let replacement = match &self.action {
            Action::Delete => 0.0,
            Action::Replace(r) => r.price,
        };
        self.current_price() - replacement
    }
}

/// How many more nodes each NodePool may start disrupting now, per reason (upstream
/// `BuildDisruptionBudgetMapping`): the most restrictive active budget for the reason over the
/// pool's nodes, minus the nodes already disrupting (deleting or held by an upgrade step or a
/// consolidation command), never below 0.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Budgets {
    left: BTreeMap<(String, DisruptionReason), usize>,
    disrupting: HashMap<String, usize>,
}

impl Budgets {
    /// Budgets for every NodePool of `snap` at `now`: `disrupting` counts, per NodePool, the
    /// nodes already being disrupted (the in-progress set).
    pub fn new(snap: &Snapshot, disrupting: &HashMap<String, usize>, now: Timestamp) -> Budgets {
        let mut nodes: HashMap<&str, usize> = HashMap::new();
        for claim in &snap.nodeclaims {
            if let Some(pool) = crate::snapshot::nodepool_of(claim.metadata.labels.as_ref()) {
                *nodes.entry(pool).or_default() += 1;
            }
        }
        let mut left = BTreeMap::new();
        for pool in &snap.nodepools {
            let name = pool.metadata.name.clone().unwrap_or_default();
            let total = nodes.get(name.as_str()).copied().unwrap_or(0);
            let busy = disrupting.get(&name).copied().unwrap_or(0);
            for reason in [
                DisruptionReason::Empty,
                DisruptionReason::Underutilized,
                DisruptionReason::Drifted,
            ] {
                let allowed = pool.allowed_disruptions(total, reason, |b| budget_active(b, now));
                left.insert((name.clone(), reason), allowed.saturating_sub(busy));
            }
        }
        Budgets {
            left,
            disrupting: disrupting.clone(),
        }
    }

    /// How many of `pool`'s nodes were being disrupted when the budgets were computed.
    pub fn disrupting(&self, pool: &str) -> usize {
        self.disrupting.get(pool).copied().unwrap_or(0)
    }

    /// How many more nodes of `pool` may start disrupting for `reason` now.
    pub fn allowed(&self, pool: &str, reason: DisruptionReason) -> usize {
        self.left
            .get(&(pool.to_string(), reason))
            .copied()
            .unwrap_or(0)
    }

    /// Count one node of `pool` as disrupting now (every reason's allowance shrinks: a node
    /// disrupted for one reason is disrupting for all).
    pub fn take(&mut self, pool: &str) {
        for ((p, _), left) in self.left.iter_mut() {
            if p == pool {
                *left = left.saturating_sub(1);
            }
        }
    }
}

/// Whether a pod takes part in inter-pod constraints: topology spread, (anti-)affinity, or host
/// ports. Bound pods matter to a solve only through these.
fn interacts(p: &PodInfo) -> bool {
    let c = &p.constraints;
    !(c.spread.is_empty()
        && c.affinity.is_empty()
        && c.anti_affinity.is_empty()
        && c.preferred_affinity.is_empty()
        && c.preferred_anti_affinity.is_empty()
        && c.host_ports.is_empty())
}

/// Simulates removing sets of candidates with the provisioner's solver, over one snapshot.
pub struct Simulator<'a> {
    base: Input,
    /// The bound pods, kept aside while no pod in play interacts with others ([`interacts`]):
    /// then they change nothing in a solve, and leaving them out saves counting tens of
    /// thousands of pods per simulation.
    bound: Vec<crate::scheduling::solver::BoundPod>,
    bound_interact: bool,
    pools: HashMap<String, Arc<NodePool>>,
    pending: HashSet<PodKey>,
    volumes: VolumeIndex,
    settings: &'a Settings,
}

impl<'a> Simulator<'a> {
    /// The solver's input for `snap` (as the provisioner prepares it: ready NodePools with the
    /// instance types in `listings`, existing nodes and in-flight NodeClaims, pending pods).
    pub fn new(
        snap: &Snapshot,
        listings: &HashMap<String, Listing>,
        settings: &'a Settings,
    ) -> Self {
        let solve = plan::Settings {
            hash_versions: settings.hash_versions.clone(),
            repack: false,
            min_values_policy: settings.min_values_policy,
        };
        let mut prepared = plan::prepare(snap, listings, &solve);
        let pending = prepared.input.pods.iter().map(|p| p.key.clone()).collect();
        let bound_interact = prepared.input.bound_pods.iter().any(|b| interacts(&b.pod))
            || prepared.input.pods.iter().any(interacts);
        let bound = std::mem::take(&mut prepared.input.bound_pods);
        Simulator {
            bound,
            bound_interact,
            base: prepared.input,
            pools: prepared.pools,
            pending,
            volumes: VolumeIndex::new(&snap.pvcs, &snap.pvs, &snap.storage_classes),
            settings,
        }
    }

    /// What removing `candidates` would take: delete them, replace them with one cheaper
    /// NodeClaim, or why neither. The solver's input is borrowed and restored, not copied: a
    /// pass simulates hundreds of sets over thousands of bound pods.
    pub fn simulate(&mut self, candidates: &[&Candidate]) -> Result<Action, Unconsolidatable> {
        self.simulate_placed(candidates).0
    }

    /// [`Simulator::simulate`], and where the solver put each pod of the candidates: an
    /// existing node or in-flight NodeClaim (by name), the one new NodeClaim, or nowhere. The
    /// placements are those of the solve, whatever the verdict (`kubectl karpenter disruption
    /// explain` shows them for a node that cannot go).
    pub fn simulate_placed(
        &mut self,
        candidates: &[&Candidate],
    ) -> (Result<Action, Unconsolidatable>, Vec<Placement>) {
        let mut moving = HashSet::new();
        let mut infos = Vec::new();
        for c in candidates {
            for pod in &c.pods {
                let Ok(mut info) = PodInfo::from_pod(pod) else {
                    let why = Unconsolidatable::PodWouldNotSchedule {
                        pod: PodKey::of(pod).to_string(),
                        why: "its spec cannot be read".into(),
                    };
                    return (Err(why), Vec::new());
                };
                info.add_volume_requirements(&self.volumes.requirements(pod));
                info.volumes = self.volumes.attachments(pod);
                moving.insert(info.key.clone());
                infos.push(info);
            }
        }
        let removed_names: HashSet<&str> = candidates.iter().map(|c| c.node_name()).collect();
        let mut removed = Vec::new();
        let mut i = 0;
        while i < self.base.existing.len() {
            if removed_names.contains(self.base.existing[i].name.as_str()) {
                removed.push(self.base.existing.swap_remove(i));
            } else {
                i += 1;
            }
        }
        let pending = self.base.pods.len();
        let with_bound = self.bound_interact || infos.iter().any(interacts);
        self.base.pods.extend(infos);
        if with_bound {
            std::mem::swap(&mut self.base.bound_pods, &mut self.bound);
        }
        let out = solver::solve(&self.base);
        if with_bound {
            std::mem::swap(&mut self.base.bound_pods, &mut self.bound);
        }
        self.base.pods.truncate(pending);
        self.base.existing.extend(removed);
        let placements = placements(&out, &moving);
        if let Some(e) = out.errors.iter().find(|e| moving.contains(&e.pod)) {
            let why = Unconsolidatable::PodWouldNotSchedule {
                pod: e.pod.to_string(),
                why: e.to_string(),
            };
            return (Err(why), placements);
        }
        let needed: Vec<NewClaim> = out
            .new_claims
            .into_iter()
            .filter(|c| c.pods.iter().any(|p| !self.pending.contains(p)))
            .collect();
        let verdict = match needed.len() {
            0 => Ok(Action::Delete),
            1 => self.replacement(candidates, needed.into_iter().next().expect("one")),
            n => Err(Unconsolidatable::NeedsSeveralNodeClaims { count: n }),
        };
        (verdict, placements)
    }

    /// A replacement for a node whose `pods` must move to a node launched from its NodePool's
    /// current template (a drifted node): the solver places those pods alone (no existing node,
    /// no pending pod), so the replacement honours their zones, volumes, affinities and spread
    /// as a provisioned node would. `Ok(None)` when nothing needs placing (an empty node).
    ///
    /// Errors: a pod does not schedule on any NodePool, or needs more than one new NodeClaim.
    pub fn replacement_for(
        &mut self,
        pods: &[Arc<crate::pod_view::PodView>],
    ) -> Result<Option<PlannedNodeClaim>, Unconsolidatable> {
        let mut infos = Vec::new();
        for pod in pods {
            let Ok(mut info) = PodInfo::from_pod(pod) else {
                return Err(Unconsolidatable::PodWouldNotSchedule {
                    pod: PodKey::of(pod).to_string(),
                    why: "its spec cannot be read".into(),
                });
            };
            info.add_volume_requirements(&self.volumes.requirements(pod));
            info.volumes = self.volumes.attachments(pod);
            infos.push(info);
        }
        if infos.is_empty() {
            return Ok(None);
        }
        let pending = std::mem::replace(&mut self.base.pods, infos);
        let existing = std::mem::take(&mut self.base.existing);
        // Nothing exists in this solve: bound pods, whose nodes are not in it, count for nothing.
        let out = solver::solve(&self.base);
        self.base.pods = pending;
        self.base.existing = existing;
        if let Some(e) = out.errors.first() {
            return Err(Unconsolidatable::PodWouldNotSchedule {
                pod: e.pod.to_string(),
                why: e.to_string(),
            });
        }
        let mut claims = out.new_claims;
        if claims.len() > 1 {
            return Err(Unconsolidatable::NeedsSeveralNodeClaims {
                count: claims.len(),
            });
        }
        let Some(decision) = claims.pop() else {
            return Ok(None);
        };
        let Some(pool) = self.pools.get(&decision.nodepool) else {
            return Err(Unconsolidatable::NeedsSeveralNodeClaims { count: 0 });
        };
        Ok(Some(PlannedNodeClaim {
            nodeclaim: template::nodeclaim(pool, &decision, &self.settings.hash_versions),
            nodepool: Arc::clone(pool),
            decision,
        }))
    }

    /// The one new NodeClaim as a replacement, if it can be made strictly cheaper within the
    /// capacity-type rules.
    fn replacement(
        &self,
        candidates: &[&Candidate],
        mut decision: NewClaim,
    ) -> Result<Action, Unconsolidatable> {
        let current: Option<f64> = candidates.iter().map(|c| c.price).sum();
        let all_spot = candidates
            .iter()
            .all(|c| c.capacity_type == CAPACITY_TYPE_SPOT);
        let allows = |ct: &str| {
            decision
                .requirements
                .get(CAPACITY_TYPE_LABEL)
                .is_none_or(|r| r.has(ct))
        };
        let spot_to_spot = all_spot && allows(CAPACITY_TYPE_SPOT);
        if !self.settings.spot_to_spot {
            if all_spot {
                return Err(Unconsolidatable::SpotToSpotDisabled);
            }
            if !allows(CAPACITY_TYPE_ON_DEMAND) {
                return Err(Unconsolidatable::SpotToSpotDisabled);
            }
            decision.requirements.add(Requirement::is_in(
                CAPACITY_TYPE_LABEL,
                [CAPACITY_TYPE_ON_DEMAND],
            ));
        } else if allows(CAPACITY_TYPE_SPOT) && allows(CAPACITY_TYPE_ON_DEMAND) {
            // As upstream: the options were priced assuming spot launches; an on-demand
            // fallback could cost more than the nodes it replaces.
            decision.requirements.add(Requirement::is_in(
                CAPACITY_TYPE_LABEL,
                [CAPACITY_TYPE_SPOT],
            ));
        }
        let priced = rechoose(&mut decision);
        let cheapest = priced.iter().map(|(p, _)| *p).fold(f64::INFINITY, f64::min);
        let Some(current) = current else {
            return Err(Unconsolidatable::NotCheaper {
                current: None,
                replacement: cheapest,
            });
        };
        let mut cheaper: Vec<(f64, Arc<InstanceType>)> =
            priced.into_iter().filter(|(p, _)| *p < current).collect();
        cheaper.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.name.cmp(&b.1.name)));
        if cheaper.is_empty() {
            return Err(Unconsolidatable::NotCheaper {
                current: Some(current),
                replacement: cheapest,
            });
        }
        if spot_to_spot && self.settings.spot_to_spot {
            if candidates.len() == 1 && cheaper.len() < SPOT_TO_SPOT_MIN_OPTIONS {
                return Err(Unconsolidatable::TooFewSpotOptions {
                    options: cheaper.len(),
                });
            }
            cheaper.truncate(SPOT_TO_SPOT_MIN_OPTIONS.max(min_values_needed(&decision)));
        }
        let types: Vec<Arc<InstanceType>> = cheaper.iter().map(|(_, t)| Arc::clone(t)).collect();
        check_min_values(&decision, &types)?;
        decision.requirements.add(Requirement::is_in(
            INSTANCE_TYPE_LABEL,
            types.iter().map(|t| t.name.clone()),
        ));
        decision.instance_types = types;
        let Some(pool) = self.pools.get(&decision.nodepool) else {
            return Err(Unconsolidatable::NeedsSeveralNodeClaims { count: 0 });
        };
        let price = cheaper[0].0;
        Ok(Action::Replace(Box::new(Replacement {
            planned: PlannedNodeClaim {
                nodeclaim: template::nodeclaim(pool, &decision, &self.settings.hash_versions),
                nodepool: Arc::clone(pool),
                decision,
            },
            price,
        })))
    }
}

/// Where one moving pod went in a simulation.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// The pod, `namespace/name`.
    pub pod: String,
    /// Its destination.
    pub to: Destination,
}

/// A pod's destination in a simulation.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Destination {
    /// A node, or an in-flight NodeClaim, that exists already.
    Existing {
        /// The node's (or in-flight NodeClaim's) name.
        name: String,
    },
    /// A NodeClaim the simulation would create.
    #[serde(rename_all = "camelCase")]
    NewNodeClaim {
        /// Which new NodeClaim of the simulation, counted from 0 (pods sharing it share a node).
        claim: usize,
        /// Its NodePool.
        nodepool: String,
        /// Its cheapest instance-type option, e.g. `m5.large`.
        instance_type: String,
        /// How many instance types it could launch.
        options: usize,
        /// Its cheapest offering, USD/hour.
        price: Option<f64>,
    },
    /// Nowhere: the pod would not schedule.
    Unschedulable {
        /// The solver's reason.
        why: String,
    },
}

/// The destination of every pod of `moving` in a solve, in pod order.
fn placements(out: &solver::Output, moving: &HashSet<PodKey>) -> Vec<Placement> {
    let mut placed = Vec::new();
    for (name, pods) in &out.existing {
        for p in pods.iter().filter(|p| moving.contains(*p)) {
            placed.push((p.clone(), Destination::Existing { name: name.clone() }));
        }
    }
    for (i, claim) in out.new_claims.iter().enumerate() {
        let to = Destination::NewNodeClaim {
            claim: i,
            nodepool: claim.nodepool.clone(),
            instance_type: claim
                .instance_types
                .first()
                .map(|t| t.name.clone())
                .unwrap_or_default(),
            options: claim.instance_types.len(),
            price: claim.cheapest_price(),
        };
        for p in claim.pods.iter().filter(|p| moving.contains(*p)) {
            placed.push((p.clone(), to.clone()));
        }
    }
    for e in out.errors.iter().filter(|e| moving.contains(&e.pod)) {
        placed.push((
            e.pod.clone(),
            Destination::Unschedulable { why: e.to_string() },
        ));
    }
    placed.sort_by(|a, b| a.0.cmp(&b.0));
    placed
        .into_iter()
        .map(|(pod, to)| Placement {
            pod: pod.to_string(),
            to,
        })
        .collect()
}

/// The decision's options chosen again ([`choices::accepted`]) for its requirements as the
/// replacement launches with them (capacity type fixed), from every type that fits, with their
/// prices (USD/hour), cheapest first. The solver chose for the claim's own requirements, under
/// which, say, spot types dearer than on-demand ones go; an on-demand replacement keeps them.
/// The instance-type requirement is widened back to every fitting type (its `minValues` kept).
fn rechoose(decision: &mut NewClaim) -> Vec<(f64, Arc<InstanceType>)> {
    let min_values = decision
        .requirements
        .get(INSTANCE_TYPE_LABEL)
        .and_then(|r| r.min_values);
    decision.requirements.remove(INSTANCE_TYPE_LABEL);
    let mut fitting = Requirement::is_in(
        INSTANCE_TYPE_LABEL,
        decision.fitting.iter().map(|t| t.name.clone()),
    );
    fitting.min_values = min_values;
    decision.requirements.add(fitting);
    let mut priced: Vec<(f64, Arc<InstanceType>)> = decision
        .fitting
        .iter()
        .filter_map(|t| {
            t.cheapest_offering(&decision.requirements)
                .map(|o| (o.price, Arc::clone(t)))
        })
        .collect();
    priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.name.cmp(&b.1.name)));
    let types: Vec<&InstanceType> = priced.iter().map(|(_, t)| &**t).collect();
    choices::accepted(&decision.requirements, &types)
        .into_iter()
        .map(|i| priced[i].clone())
        .collect()
}

/// The largest `minValues` among a decision's requirements (0 without any).
fn min_values_needed(decision: &NewClaim) -> usize {
    decision
        .requirements
        .iter()
        .filter_map(|r| r.min_values)
        .max()
        .unwrap_or(0)
}

/// Every requirement with `minValues` still has that many distinct values among `types`.
fn check_min_values(
    decision: &NewClaim,
    types: &[Arc<InstanceType>],
) -> Result<(), Unconsolidatable> {
    match choices::min_values_shortfall(&decision.requirements, types) {
        None => Ok(()),
        Some(s) => Err(Unconsolidatable::MinValues {
            key: s.key,
            needed: s.needed,
            left: s.left,
        }),
    }
}

/// Candidates in the order consolidation tries them: cheapest to disrupt first, then the most
/// expensive node, then by name.
pub fn sort(candidates: &mut [Candidate]) {
    candidates.sort_by(|a, b| {
        a.disruption_cost
            .total_cmp(&b.disruption_cost)
            .then(b.price.unwrap_or(0.0).total_cmp(&a.price.unwrap_or(0.0)))
            .then(a.name().cmp(b.name()))
    });
}

/// Emptiness: every empty candidate the `Empty` budgets allow, deleted in one command.
pub fn emptiness(candidates: &[Candidate], budgets: &Budgets) -> Option<Command> {
    let mut budgets = budgets.clone();
    let chosen: Vec<Candidate> = candidates
        .iter()
        .filter(|c| c.is_empty())
        .filter(|c| {
            let ok = budgets.allowed(c.nodepool_name(), DisruptionReason::Empty) > 0;
            if ok {
                budgets.take(c.nodepool_name());
            }
            ok
        })
        .cloned()
        .collect();
    (!chosen.is_empty()).then_some(Command {
        method: Method::Empty,
        reason: DisruptionReason::Empty,
        candidates: chosen,
        action: Action::Delete,
        scores: Vec::new(),
    })
}

/// The candidates consolidation of underutilized nodes may use: NodePools whose policy allows it
/// (not `WhenEmpty`), within the `Underutilized` budgets, in [`sort`] order.
fn underutilized<'c>(candidates: &'c [Candidate], budgets: &Budgets) -> Vec<&'c Candidate> {
    let mut budgets = budgets.clone();
    candidates
        .iter()
        .filter(|c| {
            c.nodepool.spec.disruption.consolidation_policy != crds::ConsolidationPolicy::WhenEmpty
        })
        .filter(|c| {
            let ok = budgets.allowed(c.nodepool_name(), DisruptionReason::Underutilized) > 0;
            if ok {
                budgets.take(c.nodepool_name());
            }
            ok
        })
        .collect()
}

/// Multi-node consolidation: the longest prefix (at least two, at most
/// [`MAX_MULTI_NODE_CANDIDATES`]) of the usable candidates that can be deleted or replaced by one
/// cheaper NodeClaim, found by binary search; a prefix a `Balanced` NodePool does not approve
/// ([`Scorer::approve`]) counts as one that cannot go, as upstream's
/// `firstNConsolidationOption` counts it. `keep_going` is asked before each simulation (a time
/// budget: upstream gives up after a minute and keeps the best found).
pub fn multi_node(
    sim: &mut Simulator<'_>,
    scorer: &Scorer,
    candidates: &[Candidate],
    budgets: &Budgets,
    keep_going: &mut dyn FnMut() -> bool,
) -> Option<Command> {
    let usable = underutilized(candidates, budgets);
    let usable = &usable[..usable.len().min(MAX_MULTI_NODE_CANDIDATES)];
    if usable.len() < 2 {
        return None;
    }
    let (mut lo, mut hi) = (2, usable.len());
    let mut best: Option<Command> = None;
    while lo <= hi {
        if !keep_going() {
            break;
        }
        let mid = (lo + hi) / 2;
        let approved = sim.simulate(&usable[..mid]).ok().and_then(|action| {
            let mut command = Command {
                method: Method::Multi,
                reason: DisruptionReason::Underutilized,
                candidates: usable[..mid].iter().map(|c| (*c).clone()).collect(),
                action,
                scores: Vec::new(),
            };
            command.scores = scorer.approve(&command).ok()?;
            Some(command)
        });
        match approved {
            Some(command) => {
                best = Some(command);
                lo = mid + 1;
            }
            None => hi = mid - 1,
        }
    }
    best
}

/// Single-node consolidation: the first usable candidate that can be deleted or replaced by a
/// cheaper NodeClaim, and that its NodePool approves if it is `Balanced` ([`Scorer`]: a
/// candidate whose outright deletion would not be approved is not simulated); every candidate
/// tried before it is returned with why it could not go.
pub fn single_node(
    sim: &mut Simulator<'_>,
    scorer: &Scorer,
    candidates: &[Candidate],
    budgets: &Budgets,
    keep_going: &mut dyn FnMut() -> bool,
) -> (Option<Command>, Vec<(String, Unconsolidatable)>) {
    let mut rejected = Vec::new();
    for c in underutilized(candidates, budgets) {
        if !keep_going() {
            break;
        }
        if let Some(Err(score)) = scorer.upper_bound(c) {
            rejected.push((
                c.name().to_string(),
                Unconsolidatable::BelowBalancedThreshold {
                    nodepool: c.nodepool_name().to_string(),
                    score,
                },
            ));
            continue;
        }
        match sim.simulate(&[c]) {
            Ok(action) => {
                let mut command = Command {
                    method: Method::Single,
                    reason: DisruptionReason::Underutilized,
                    candidates: vec![c.clone()],
                    action,
                    scores: Vec::new(),
                };
                match scorer.approve(&command) {
                    Ok(scores) => {
                        command.scores = scores;
                        return (Some(command), rejected);
                    }
                    Err(PoolScore { nodepool, score }) => rejected.push((
                        c.name().to_string(),
                        Unconsolidatable::BelowBalancedThreshold { nodepool, score },
                    )),
                }
            }
            Err(why) => rejected.push((c.name().to_string(), why)),
        }
    }
    (None, rejected)
}

#[cfg(test)]
#[path = "consolidation_tests.rs"]
mod tests;
