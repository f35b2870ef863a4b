//! The `Balanced` consolidation policy (upstream v1.14, `designs/balanced-consolidation.md`,
//! `pkg/controllers/disruption/balanced.go`): a consolidation move of a Balanced NodePool goes
//! ahead only when what it saves is worth what it disrupts.
//!
//! - A move's **savings fraction** is the USD/hour it saves over what the NodePool costs.
//! - Its **disruption fraction** is the disruption cost of the nodes it removes over the
//!   NodePool's: each node costs 1 ([`PER_NODE_DISRUPTION_COST`]) plus the positive eviction
//!   costs of the pods that would move ([`super::candidates::eviction_cost`]).
//! - Its **score** is savings fraction / disruption fraction, and it is approved when the score
//!   is at least 1/k, k = [`crds::nodepool::BALANCED_K`] (2): a move must save at least half as large a
//!   share of the pool's cost as the share of the pool's disruption it causes.
//!
//! Empty nodes are never scored (emptiness deletes them as under any policy), nor are drift,
//! expiration and interruption. Pools of other policies are not scored. A move that spans
//! several Balanced pools is scored per pool, each with its share of the savings, and goes
//! ahead only if every one approves.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crds::ConsolidationPolicy;
use crds::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, TOPOLOGY_ZONE_LABEL};
use serde::Serialize;

use super::candidates::{Candidate, is_reschedulable, offering_price};
pub use super::candidates::{PER_NODE_DISRUPTION_COST, reschedule_cost};
use super::types::{Action, Command};
pub use super::types::{PoolScore, Score};
use crate::capacity::index::TypeIndex;
use crate::pod_view::PodView;
use crate::snapshot::{Snapshot, nodepool_of};

/// One NodePool's totals the fractions are taken of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolTotals {
    /// What its NodeClaims cost, USD/hour (offerings whose price is unknown count 0).
    pub cost: f64,
    /// The sum of its nodes' [`reschedule_cost`]s (an in-flight NodeClaim counts
    /// [`PER_NODE_DISRUPTION_COST`]).
    pub disruption_cost: f64,
}

/// The totals of every Balanced NodePool of `snap`, by name, over its NodeClaims that are not
/// being deleted; `types` price each offering as its NodePool lists it (as candidates are
/// priced). Upstream takes the pool's cost from its cost tracker and sums the disruption cost
/// over the pool's state nodes.
pub fn pool_totals(snap: &Snapshot, types: &TypeIndex) -> HashMap<String, PoolTotals> {
    let balanced: Vec<&str> = snap
        .nodepools
        .iter()
        .filter(|p| p.spec.disruption.consolidation_policy == ConsolidationPolicy::Balanced)
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    if balanced.is_empty() {
        return HashMap::new();
    }
    let mut pods_by_node: HashMap<&str, Vec<&Arc<PodView>>> = HashMap::new();
    for pod in snap.pods.iter().filter(|p| is_reschedulable(p)) {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            pods_by_node.entry(node).or_default().push(pod);
        }
    }
    let nodes = snap.nodes_by_provider_id();
    let mut totals: HashMap<String, PoolTotals> = HashMap::new();
    for claim in snap
        .nodeclaims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
    {
        let Some(pool) =
            nodepool_of(claim.metadata.labels.as_ref()).filter(|p| balanced.contains(p))
        else {
            continue;
        };
        let label = |k: &str| {
            claim
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(k))
                .map(String::as_str)
                .unwrap_or_default()
        };
        let price = offering_price(
            types,
            Some(pool),
            label(INSTANCE_TYPE_LABEL),
            label(TOPOLOGY_ZONE_LABEL),
            label(CAPACITY_TYPE_LABEL),
        )
        .filter(|p| p.is_finite())
        .unwrap_or(0.0);
        let node = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(|id| nodes.get(id))
            .and_then(|n| n.metadata.name.as_deref());
        let pods = node.and_then(|n| pods_by_node.get(n));
        let entry = totals.entry(pool.to_string()).or_default();
        entry.cost += price;
        entry.disruption_cost += reschedule_cost(pods.into_iter().flatten().copied());
    }
    totals
}

/// Score a move that saves `savings` USD/hour and disrupts `disruption_cost` of a pool with
/// `totals` (upstream `ScoreMove`). A pool without totals, or whose cost or disruption cost is
/// 0, scores 0: nothing proves the move worth it.
pub fn score_move(savings: f64, disruption_cost: f64, totals: Option<&PoolTotals>) -> Score {
    let k = crds::nodepool::BALANCED_K;
    match totals {
        Some(t) if t.cost > 0.0 && t.disruption_cost > 0.0 => Score {
            savings_fraction: savings / t.cost,
            disruption_fraction: disruption_cost / t.disruption_cost,
            k,
        },
        _ => Score {
            savings_fraction: 0.0,
            disruption_fraction: 0.0,
            k,
        },
    }
}

/// The Balanced NodePools' totals for one pass, and the scoring of its moves.
#[derive(Clone, Debug, Default)]
pub struct Scorer {
    totals: HashMap<String, PoolTotals>,
}

impl Scorer {
    /// The scorer of a pass over `snap` ([`pool_totals`]).
    pub fn new(snap: &Snapshot, types: &TypeIndex) -> Scorer {
        Scorer {
            totals: pool_totals(snap, types),
        }
    }

    /// A pool's totals, if it is Balanced and has NodeClaims.
    pub fn totals(&self, pool: &str) -> Option<&PoolTotals> {
        self.totals.get(pool)
    }

    /// The best score any move of `candidate` alone can reach: deleting it outright (upstream
    /// `CanPassThreshold`). `None` for a pool that is not Balanced; `Err` with the score when
    /// even that falls short, so the candidate need not be simulated.
    pub fn upper_bound(&self, candidate: &Candidate) -> Option<Result<Score, Score>> {
        if !is_balanced(candidate) {
            return None;
        }
        let score = score_move(
            candidate.price.filter(|p| p.is_finite()).unwrap_or(0.0),
            candidate.reschedule_cost,
            self.totals(candidate.nodepool_name()),
        );
        Some(if score.approved() {
            Ok(score)
        } else {
            Err(score)
        })
    }

    /// The score of removing `candidate` alone with `action`, if its NodePool is Balanced (what
    /// [`Scorer::approve`] scores for a single-node command). `kubectl karpenter disruption`
    /// shows it.
    pub fn score_one(&self, candidate: &Candidate, action: &Action) -> Option<Score> {
        if !is_balanced(candidate) {
            return None;
        }
        let price = candidate.price.filter(|p| p.is_finite()).unwrap_or(0.0);
        let replacement = match action {
            Action::Delete => 0.0,
            Action::Replace(r) => r.price,
        };
        Some(score_move(
            price - replacement,
            candidate.reschedule_cost,
            self.totals(candidate.nodepool_name()),
        ))
    }

    /// Score `command` for each Balanced NodePool among its candidates (upstream
    /// `EvaluateBalancedMove`): the savings are split by each pool's share of what the
    /// candidates cost. `Ok` with every pool's score (none when no pool is Balanced) when all
    /// approve; `Err` with the first pool that does not.
    pub fn approve(&self, command: &Command) -> Result<Vec<PoolScore>, PoolScore> {
        let mut by_pool: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
        for c in command.candidates.iter().filter(|c| is_balanced(c)) {
            let entry = by_pool.entry(c.nodepool_name()).or_default();
            entry.0 += c.price.filter(|p| p.is_finite()).unwrap_or(0.0);
            entry.1 += c.reschedule_cost;
        }
        if by_pool.is_empty() {
            return Ok(Vec::new());
        }
        let source = command.current_price();
        let savings = command.savings();
        let several = command
            .candidates
            .iter()
            .any(|c| c.nodepool_name() != command.candidates[0].nodepool_name());
        let mut scores = Vec::with_capacity(by_pool.len());
        for (pool, (cost, disruption)) in by_pool {
            let share = if several && source > 0.0 {
                savings * cost / source
            } else {
                savings
            };
            let score = PoolScore {
                nodepool: pool.to_string(),
                score: score_move(share, disruption, self.totals(pool)),
            };
            if !score.score.approved() {
                return Err(score);
            }
            scores.push(score);
        }
        Ok(scores)
    }
}

/// Whether the candidate's NodePool is Balanced.
fn is_balanced(c: &Candidate) -> bool {
    c.nodepool.spec.disruption.consolidation_policy == ConsolidationPolicy::Balanced
}

#[cfg(test)]
#[path = "balanced_tests.rs"]
mod tests;
