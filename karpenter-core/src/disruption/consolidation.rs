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
use std::time::{Duration, Instant};

use crds::{ConsolidationPolicy, DisruptionReason};
use kube::ResourceExt;

use super::balanced::Scorer;
use super::blockers::Blocker;
use super::candidates::{self, Candidate, NotCandidate};
use crate::provisioning::plan::Listing;
use crate::snapshot::Snapshot;

pub use super::budgets::Budgets;
pub use super::emptiness::emptiness;
pub use super::multi_node::multi_node;
pub use super::simulator::{Destination, Placement, Simulator};
pub use super::single_node::single_node;
pub use super::types::{
    Action, Command, MAX_MULTI_NODE_CANDIDATES, Method, Replacement, SPOT_TO_SPOT_MIN_OPTIONS,
    Settings, Unconsolidatable, sort,
};

/// How long multi-node consolidation may search (upstream: 1 minute), keeping the best found.
pub const MULTI_NODE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long single-node consolidation may search (upstream: 3 minutes).
pub const SINGLE_NODE_TIMEOUT: Duration = Duration::from_secs(180);
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
