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
//!
//! This module holds what the methods share: [`Settings`], [`Command`] and its parts, why a set
//! cannot go ([`Unconsolidatable`]), the candidate order ([`sort`]) and the underutilized filter.
//! The methods live in [`super::emptiness`], [`super::multi_node`] and [`super::single_node`],
//! the solver-backed simulation in [`super::simulator`], the budgets in [`super::budgets`]; all
//! are re-exported here.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, Instant};

use crds::{ConsolidationPolicy, DisruptionReason};
use jiff::Timestamp;
use kube::ResourceExt;

use super::balanced::{PoolScore, Score, Scorer};
use super::blockers::Blocker;
use super::candidates::{self, Candidate, NotCandidate};
use crate::lifecycle::drift::HashVersions;
use crate::provisioning::plan::{Listing, PlannedNodeClaim};
use crate::scheduling::choices::MinValuesPolicy;
use crate::snapshot::Snapshot;

pub use super::budgets::Budgets;
pub use super::emptiness::emptiness;
pub use super::multi_node::multi_node;
pub use super::simulator::{Destination, Placement, Simulator};
pub use super::single_node::single_node;

/// How long multi-node consolidation may search (upstream: 1 minute), keeping the best found.
pub const MULTI_NODE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long single-node consolidation may search (upstream: 3 minutes).
pub const SINGLE_NODE_TIMEOUT: Duration = Duration::from_secs(180);
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

/// The candidates consolidation of underutilized nodes may use: NodePools whose policy allows it
/// (not `WhenEmpty`), within the `Underutilized` budgets, in [`sort`] order.
pub(crate) fn underutilized<'c>(
    candidates: &'c [Candidate],
    budgets: &Budgets,
) -> Vec<&'c Candidate> {
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

/// What [`decide`] found in one pass: a command (or none), why candidates were left alone, and
/// what the pass's metrics report. Turning these into Events and metrics is the controller's.
#[derive(Clone, Debug)]
pub struct Decision {
    /// The command to carry out, if any method found one.
    pub command: Option<Command>,
    /// NodeClaims that are no candidates because something blocks their disruption (a
    /// do-not-disrupt annotation or a PodDisruptionBudget), in verdict order.
    pub blocked: Vec<(String, Blocker)>,
    /// Candidates single-node consolidation tried and left, with why, in the order tried. A
    /// `Balanced` NodePool's rejection ([`Unconsolidatable::BelowBalancedThreshold`]) is not
    /// here but in [`Decision::moves`].
    pub unconsolidatable: Vec<(String, Unconsolidatable)>,
    /// How many candidates each reason (`Empty`, `Underutilized`) had.
    pub eligible: BTreeMap<&'static str, usize>,
    /// How many more nodes each NodePool may start disrupting, per reason.
    pub allowed: Vec<(String, DisruptionReason, usize)>,
    /// The methods that ran out of time ([`MULTI_NODE_TIMEOUT`], [`SINGLE_NODE_TIMEOUT`]).
    pub timed_out: Vec<Method>,
    /// Consolidation moves judged by their NodePool's policy: NodePool, policy, approved, and
    /// the Balanced score when it was scored.
    pub moves: Vec<(String, ConsolidationPolicy, bool, Option<f64>)>,
}

/// Decide one consolidation pass (pure; it may take minutes, so callers run it off any async
/// runtime): candidates, budgets, then emptiness, multi-node and single-node, each search within
/// its time budget.
pub fn decide(
    snap: &Snapshot,
    listings: &HashMap<String, Listing>,
    settings: &Settings,
) -> Decision {
    // Each node priced as its NodePool lists its type, NodeOverlays applied, like the
    // replacements the simulator prices.
    let types = crate::provisioning::listing::pool_types(snap, listings).index;
    let verdicts = candidates::verdicts(snap, &types, settings.now);
    let disrupting = candidates::disrupting_by_pool(&verdicts);
    let scorer = Scorer::new(snap, &types);
    let mut cands: Vec<Candidate> = Vec::new();
    let mut blocked = Vec::new();
    for v in verdicts {
        match v.standing {
            Ok(c) => cands.push(c),
            Err(NotCandidate::Blocked(b)) => blocked.push((v.nodeclaim, b)),
            Err(_) => {}
        }
    }
    sort(&mut cands);
    let budgets = Budgets::new(snap, &disrupting, settings.now);
    let mut eligible = BTreeMap::new();
    eligible.insert("Empty", cands.iter().filter(|c| c.is_empty()).count());
    eligible.insert("Underutilized", cands.len());
    let allowed = snap
        .nodepools
        .iter()
        .flat_map(|p| {
            let name = p.name_any();
            [
                DisruptionReason::Empty,
                DisruptionReason::Underutilized,
                DisruptionReason::Drifted,
            ]
            .map(|r| (name.clone(), r, budgets.allowed(&name, r)))
        })
        .collect();
    let mut timed_out = Vec::new();
    let mut moves = Vec::new();
    let mut unconsolidatable = Vec::new();
    let command = emptiness(&cands, &budgets).or_else(|| {
        let mut sim = Simulator::new(snap, listings, settings);
        let deadline = Instant::now() + MULTI_NODE_TIMEOUT;
        let mut in_time = || Instant::now() < deadline;
        let multi = multi_node(&mut sim, &scorer, &cands, &budgets, &mut in_time);
        if Instant::now() >= deadline {
            timed_out.push(Method::Multi);
        }
        multi.or_else(|| {
            let deadline = Instant::now() + SINGLE_NODE_TIMEOUT;
            let mut in_time = || Instant::now() < deadline;
            let (single, why) = single_node(&mut sim, &scorer, &cands, &budgets, &mut in_time);
            if Instant::now() >= deadline {
                timed_out.push(Method::Single);
            }
            for (name, why) in why {
                match why {
                    Unconsolidatable::BelowBalancedThreshold { nodepool, score } => moves.push((
                        nodepool,
                        ConsolidationPolicy::Balanced,
                        false,
                        Some(score.value()),
                    )),
                    why => unconsolidatable.push((name, why)),
                }
            }
            single
        })
    });
    if let Some(c) = command.as_ref().filter(|c| c.method != Method::Empty) {
        let pools: BTreeMap<&str, ConsolidationPolicy> = c
            .candidates
            .iter()
            .map(|c| {
                (
                    c.nodepool_name(),
                    c.nodepool.spec.disruption.consolidation_policy,
                )
            })
            .collect();
        for (pool, policy) in pools {
            let score = c
                .scores
                .iter()
                .find(|s| s.nodepool == pool)
                .map(|s| s.score.value());
            moves.push((pool.to_string(), policy, true, score));
        }
    }
    Decision {
        command,
        blocked,
        unconsolidatable,
        eligible,
        allowed,
        timed_out,
        moves,
    }
}

#[cfg(test)]
#[path = "consolidation_tests.rs"]
mod tests;
