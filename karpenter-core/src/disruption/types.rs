//! What consolidation's methods share (upstream `disruption/types.go`): the [`Settings`] a pass
//! is decided with, a [`Command`] and its [`Action`], why a set of candidates cannot go
//! ([`Unconsolidatable`]), a Balanced move's [`Score`], the candidate order ([`sort`]) and the
//! underutilized filter. Every disruption module may import this one; it imports only
//! [`super::candidates`] and [`super::budgets`], so no method imports a module that imports it
//! back.

use std::fmt;

use crds::DisruptionReason;
use jiff::Timestamp;
use serde::Serialize;

use super::budgets::Budgets;
use super::candidates::Candidate;
use crate::lifecycle::drift::HashVersions;
use crate::provisioning::plan::PlannedNodeClaim;
use crate::scheduling::choices::MinValuesPolicy;

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

/// A move's score for one Balanced NodePool.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Score {
    /// USD/hour saved over the pool's cost (0 when the pool's cost or disruption cost is 0).
    pub savings_fraction: f64,
    /// The removed nodes' disruption cost over the pool's.
    pub disruption_fraction: f64,
    /// The policy's k ([`crds::nodepool::BALANCED_K`]).
    pub k: i32,
}

impl Score {
    /// Savings fraction / disruption fraction: 0 when nothing is saved, infinite when nothing
    /// is disrupted (upstream `ScoreResult.Score`).
    pub fn value(&self) -> f64 {
        if self.savings_fraction <= 0.0 || self.savings_fraction.is_nan() {
            0.0
        } else if self.disruption_fraction <= 0.0 {
            f64::INFINITY
        } else {
            self.savings_fraction / self.disruption_fraction
        }
    }

    /// The least approved score, 1/k.
    pub fn threshold(&self) -> f64 {
        1.0 / f64::from(self.k.max(1))
    }

    /// Whether the move goes ahead for this pool.
    pub fn approved(&self) -> bool {
        self.value() >= self.threshold()
    }
}

impl fmt::Display for Score {
    /// `score 0.31 < threshold 0.50 (k 2, savings 3.1%, disruption 10.0%)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "score {:.2} {} threshold {:.2} (k {}, savings {:.1}%, disruption {:.1}%)",
            self.value(),
            if self.approved() { ">=" } else { "<" },
            self.threshold(),
            self.k,
            self.savings_fraction * 100.0,
            self.disruption_fraction * 100.0
        )
    }
}

/// One pool's verdict on a move.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolScore {
    /// The NodePool.
    pub nodepool: String,
    /// Its score.
    #[serde(flatten)]
    pub score: Score,
}
