//! What the disruption orchestrator would do with each node now, for people: `kubectl karpenter
//! disruption` prints [`report`], `kubectl karpenter disruption explain NODE` prints
//! [`explain`]. Both are computed by the orchestrator's own code over one snapshot: the same
//! candidate verdicts ([`super::candidates::verdicts`]), budgets ([`Budgets`]) and solver-backed
//! simulation ([`Simulator`]) consolidation decides with. Each candidate is judged alone, as
//! single-node consolidation would judge it; the orchestrator may still remove it sooner as part
//! of an emptiness or multi-node command.
//!
//! Pure: no I/O, no clock (the time is an argument).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crds::{DisruptionReason, NodePool};
use jiff::Timestamp;
use serde::Serialize;

use super::balanced::{Score, Scorer};
use super::blockers::Blocker;
use super::budgets::{budget_active, window_end};
use super::candidates::{self, Candidate, NotCandidate, Verdict, blockers_of, what_if};
use super::consolidation::{
    Action, Budgets, Destination, Placement, Settings, Simulator, Unconsolidatable,
};
use crate::capacity::index::TypeIndex;
use crate::provisioning::listing::{self, Listing};
use crate::snapshot::{Snapshot, nodepool_of};

/// The reasons voluntary disruption budgets are kept for, in upstream's order.
pub const BUDGET_REASONS: [DisruptionReason; 3] = [
    DisruptionReason::Drifted,
    DisruptionReason::Empty,
    DisruptionReason::Underutilized,
];

/// Every NodePool's budgets and every Karpenter node's verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// When the report was computed.
    pub time: Timestamp,
    /// Per NodePool, in name order.
    pub nodepools: Vec<PoolReport>,
    /// Per NodeClaim of a NodePool, in NodeClaim name order.
    pub nodes: Vec<NodeReport>,
}

/// One NodePool's disruption settings and budgets now.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolReport {
    /// The NodePool's name.
    pub nodepool: String,
    /// `WhenEmpty` or `WhenEmptyOrUnderutilized`.
    pub consolidation_policy: String,
    /// `consolidateAfter` as written, e.g. `0s`, `5m` or `Never`.
    pub consolidate_after: String,
    /// Its NodeClaims (deleting ones included, as budgets count them).
    pub nodes: usize,
    /// Per reason, in [`BUDGET_REASONS`] order.
    pub budgets: Vec<BudgetReport>,
    /// `spec.replicas` of a static NodePool, whose nodes are never consolidated (its policy and
    /// `consolidateAfter` are ignored, as upstream ignores them); absent for a dynamic one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
}

/// How many more of a NodePool's nodes may start being disrupted for one reason now.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetReport {
    /// `Drifted`, `Empty` or `Underutilized`.
    pub reason: DisruptionReason,
    /// How many more may start now; `None` when no budget limits the reason.
    pub allowed: Option<usize>,
    /// Nodes of the NodePool being disrupted now (for any reason: they count against every
    /// reason's budget).
    pub disrupting: usize,
    /// When nothing more is allowed because of scheduled budgets: when the last of their
    /// windows closes (`None` when an unscheduled budget keeps it at 0, or something is allowed).
    pub until: Option<Timestamp>,
}

/// One Karpenter node's verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    /// The NodeClaim's name.
    pub nodeclaim: String,
    /// Its node's name, once registered.
    pub node: Option<String>,
    /// Its NodePool's name.
    pub nodepool: Option<String>,
    /// Instance type, e.g. `m5.large` (from its labels; empty before launch).
    pub instance_type: String,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    /// Availability zone.
    pub zone: String,
    /// What its offering costs, USD/hour, when the instance type is still listed.
    pub price: Option<f64>,
    /// Pods that would have to move (not DaemonSet or static pods).
    pub pods: usize,
    /// Consolidatable, blocked or already being disrupted, and why.
    pub verdict: NodeVerdict,
}

/// What the orchestrator would do with one node.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeVerdict {
    /// The verdict's kind.
    pub status: Status,
    /// One line for people, e.g. `replace with m5.large ($0.0960/h), saving $0.0960/h` or
    /// `pod shop/web-1 has karpenter.sh/do-not-disrupt`.
    pub message: String,
    /// For a consolidatable node: delete it, or replace it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<ActionReport>,
    /// For a consolidatable node: USD/hour saved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub savings: Option<f64>,
    /// For a blocked node: what blocks it, as data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    /// For a node of a `Balanced` NodePool that was scored: the score of removing it
    /// ([`super::balanced`]); below the threshold, the node stays.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balanced: Option<Score>,
}

/// The kind of a [`NodeVerdict`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Status {
    /// Consolidation would remove or replace it now (budgets permitting it at once).
    Consolidatable,
    /// Something keeps it: a blocker, a setting, the budget, or no cheaper placement.
    Blocked,
    /// Already being deleted, replaced, or launched as a replacement.
    Disrupting,
}

impl Status {
    /// `Consolidatable`, `Blocked` or `Disrupting`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Consolidatable => "Consolidatable",
            Status::Blocked => "Blocked",
            Status::Disrupting => "Disrupting",
        }
    }
}

/// What consolidation would do with a node.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ActionReport {
    /// Delete it: its pods fit elsewhere (or it has none).
    Delete {
        /// `Empty` or `Underutilized`: the budget it counts against.
        reason: DisruptionReason,
    },
    /// Replace it with one cheaper NodeClaim.
    #[serde(rename_all = "camelCase")]
    Replace {
        /// `Underutilized`.
        reason: DisruptionReason,
        /// The replacement's cheapest instance type, e.g. `m5.large`.
        instance_type: String,
        /// How many instance types the replacement may launch.
        options: usize,
        /// The replacement's cheapest offering, USD/hour.
        price: f64,
    },
}

/// Why a node is blocked, as data (`kind` names the variant in JSON).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Cause {
    /// It is not a candidate (do-not-disrupt, PDB, `consolidateAfter`, policy, in progress…).
    NotCandidate(NotCandidate),
    /// The simulation found no cheaper placement for its pods.
    Unconsolidatable(Unconsolidatable),
    /// Its NodePool's budget for the reason allows nothing more now.
    Budget(BudgetExhausted),
}

/// A NodePool's budget for a reason allows no more disruption now.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename = "budgetExhausted", rename_all = "camelCase")]
pub struct BudgetExhausted {
    /// The NodePool.
    pub nodepool: String,
    /// The reason the node would be disrupted for.
    pub reason: DisruptionReason,
    /// When the scheduled budget window keeping it at 0 closes, if one does.
    pub until: Option<Timestamp>,
}

impl fmt::Display for BudgetExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NodePool {} budget for {} allows no more disruptions now",
            self.nodepool, self.reason
        )?;
        match self.until {
            Some(t) => write!(f, " (until {})", t.strftime("%Y-%m-%d %H:%M UTC")),
            None => Ok(()),
        }
    }
}

/// The what-if of removing one node now.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WhatIf {
    /// The node's verdict, as [`report`] gives it.
    pub node: NodeReport,
    /// Every blocker, not just the first: each do-not-disrupt annotation and PDB, the setting
    /// or budget that holds it, as lines for people.
    pub blockers: Vec<String>,
    /// What removing it now would do if nothing blocked it (`None`: it cannot go).
    pub action: Option<ActionReport>,
    /// Why it cannot go even if nothing blocked it, when it cannot.
    pub why_not: Option<Unconsolidatable>,
    /// For a node of a `Balanced` NodePool whose removal was simulated: its score and the
    /// threshold ([`super::balanced`]).
    pub balanced: Option<Score>,
    /// The simulation's result for people, e.g. `delete: its 3 pod(s) fit elsewhere`.
    pub message: String,
    /// Where each of its pods would go.
    pub placements: Vec<Placement>,
    /// The fleet's cost change, USD/hour (negative: cheaper): the new NodeClaims the simulation
    /// needs minus the node's price; `None` when a price is unknown.
    pub cost_change: Option<f64>,
}

/// Why [`explain`] cannot simulate a node.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExplainError {
    /// No NodeClaim of a NodePool has this name, nor a node of this name.
    #[error("no Karpenter NodeClaim or node named {0:?}")]
    NotFound(String),
    /// It exists but cannot be simulated yet (not initialized, NodePool gone).
    #[error("{name}: {why}")]
    NotSimulable {
        /// The name asked for.
        name: String,
        /// Why, e.g. `not initialized`.
        why: NotCandidate,
    },
}

/// The instance types of every listing, by name and per NodePool with NodeOverlays applied
/// (to price offerings as the provisioner does, [`listing::pool_types`]).
fn types_by_name(snap: &Snapshot, listings: &HashMap<String, Listing>) -> TypeIndex {
    listing::pool_types(snap, listings).index
}

/// Every NodePool's budgets and every Karpenter node's verdict at `settings.now`: nodes that are
/// not candidates say why; candidates are checked against their NodePool's budget for their
/// reason (`Empty` for a node without pods, else `Underutilized`) and then simulated alone.
/// `listings` are the instance types per node class, as the orchestrator lists them.
pub fn report(snap: &Snapshot, listings: &HashMap<String, Listing>, settings: &Settings) -> Report {
    let types = types_by_name(snap, listings);
    let verdicts = candidates::verdicts(snap, &types, settings.now);
    let disrupting = candidates::disrupting_by_pool(&verdicts);
    let budgets = Budgets::new(snap, &disrupting, settings.now);
    let scorer = Scorer::new(snap, &types);
    let mut sim = Simulator::new(snap, listings, settings);
    let nodes = verdicts
        .into_iter()
        .map(|v| judge(v, &budgets, &scorer, snap, &types, &mut sim, settings.now))
        .collect();
    Report {
        time: settings.now,
        nodepools: pool_reports(snap, &disrupting, settings.now),
        nodes,
    }
}

/// The what-if of removing the node or NodeClaim `name` now: its verdict, every blocker, where
/// each pod would go and the cost change, simulated whatever blocks it.
///
/// Errors: [`ExplainError`] when no such Karpenter node exists or it cannot be simulated.
pub fn explain(
    snap: &Snapshot,
    listings: &HashMap<String, Listing>,
    settings: &Settings,
    name: &str,
) -> Result<WhatIf, ExplainError> {
    let types = types_by_name(snap, listings);
    let now = settings.now;
    let candidate = match what_if(snap, &types, name, now) {
        None => return Err(ExplainError::NotFound(name.to_string())),
        Some(Err(why)) => {
            return Err(ExplainError::NotSimulable {
                name: name.to_string(),
                why,
            });
        }
        Some(Ok(c)) => c,
    };
    let verdicts = candidates::verdicts(snap, &types, now);
    let disrupting = candidates::disrupting_by_pool(&verdicts);
    let budgets = Budgets::new(snap, &disrupting, now);
    let scorer = Scorer::new(snap, &types);
    let mut sim = Simulator::new(snap, listings, settings);
    let verdict = verdicts
        .into_iter()
        .find(|v| v.nodeclaim == candidate.name())
        .expect("what_if found a NodeClaim of the snapshot");
    let node = judge(
        verdict.clone(),
        &budgets,
        &scorer,
        snap,
        &types,
        &mut sim,
        now,
    );

    let mut blockers: Vec<String> = blockers_of(&candidate, snap, now)
        .iter()
        .map(Blocker::to_string)
        .collect();
    match &verdict.standing {
        Err(NotCandidate::Blocked(_)) | Ok(_) => {}
        Err(other) => blockers.insert(0, other.to_string()),
    }
    if let Some(Cause::Budget(b)) = &node.verdict.cause {
        blockers.push(b.to_string());
    }

    let (outcome, placements) = sim.simulate_placed(&[&candidate]);
    // An empty node is never scored: emptiness deletes it under any policy.
    let balanced = match &outcome {
        Ok(action) if !candidate.is_empty() => scorer.score_one(&candidate, action),
        _ => None,
    };
    let outcome = match (outcome, balanced) {
        (Ok(_), Some(score)) if !score.approved() => {
            Err(Unconsolidatable::BelowBalancedThreshold {
                nodepool: candidate.nodepool_name().to_string(),
                score,
            })
        }
        (outcome, _) => outcome,
    };
    let outcome = outcome.map(|a| action_report(&candidate, &a));
    let cost_change = match &outcome {
        Ok(ActionReport::Replace { price, .. }) => candidate.price.map(|p| price - p),
        _ => new_claims_cost(&placements).and_then(|new| Some(new - candidate.price?)),
    };
    let message = match &outcome {
        Ok(a) => action_message(&candidate, a, -cost_change.unwrap_or(0.0)),
        Err(why) => why.to_string(),
    };
    let (action, why_not) = match outcome {
        Ok(a) => (Some(a), None),
        Err(why) => (None, Some(why)),
    };
    Ok(WhatIf {
        node,
        blockers,
        action,
        why_not,
        balanced,
        message,
        placements,
        cost_change,
    })
}

/// The price of the distinct new NodeClaims among `placements`, USD/hour (`None` when one has
/// no price).
fn new_claims_cost(placements: &[Placement]) -> Option<f64> {
    let mut claims: BTreeMap<usize, Option<f64>> = BTreeMap::new();
    for p in placements {
        if let Destination::NewNodeClaim { claim, price, .. } = &p.to {
            claims.insert(*claim, *price);
        }
    }
    claims.values().copied().sum()
}

/// The reason a candidate would be disrupted for.
fn reason_of(c: &Candidate) -> DisruptionReason {
    if c.is_empty() {
        DisruptionReason::Empty
    } else {
        DisruptionReason::Underutilized
    }
}

fn action_report(c: &Candidate, action: &Action) -> ActionReport {
    let reason = reason_of(c);
    match action {
        Action::Delete => ActionReport::Delete { reason },
        Action::Replace(r) => ActionReport::Replace {
            reason,
            instance_type: r
                .planned
                .decision
                .instance_types
                .first()
                .map(|t| t.name.clone())
                .unwrap_or_default(),
            options: r.planned.decision.instance_types.len(),
            price: r.price,
        },
    }
}

/// One verdict as a node report: not a candidate, over budget, or simulated.
fn judge(
    v: Verdict,
    budgets: &Budgets,
    scorer: &Scorer,
    snap: &Snapshot,
    types: &TypeIndex,
    sim: &mut Simulator<'_>,
    now: Timestamp,
) -> NodeReport {
    let claim = snap
        .nodeclaims
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(v.nodeclaim.as_str()));
    let label = |key: &str| {
        claim
            .and_then(|c| c.metadata.labels.as_ref())
            .and_then(|l| l.get(key))
            .cloned()
            .unwrap_or_default()
    };
    let mut report = NodeReport {
        nodeclaim: v.nodeclaim.clone(),
        node: v.node.clone(),
        nodepool: v.nodepool.clone(),
        instance_type: label(crds::labels::INSTANCE_TYPE_LABEL),
        capacity_type: label(crds::labels::CAPACITY_TYPE_LABEL),
        zone: label(crds::labels::TOPOLOGY_ZONE_LABEL),
        price: None,
        pods: v.node.as_deref().map_or(0, |node| {
            snap.pods
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
                .filter(|p| candidates::is_reschedulable(p))
                .count()
        }),
        verdict: NodeVerdict {
            status: Status::Blocked,
            message: String::new(),
            action: None,
            savings: None,
            cause: None,
            balanced: None,
        },
    };
    report.price = candidates::offering_price(
        types,
        report.nodepool.as_deref(),
        &report.instance_type,
        &report.zone,
        &report.capacity_type,
    );
    let c = match v.standing {
        Err(why) => {
            report.verdict.status = match why {
                NotCandidate::Deleting
                | NotCandidate::InProgress { .. }
                | NotCandidate::Replacement { .. } => Status::Disrupting,
                _ => Status::Blocked,
            };
            report.verdict.message = not_candidate_message(&why, now);
            report.verdict.cause = Some(Cause::NotCandidate(why));
            return report;
        }
        Ok(c) => c,
    };
    let reason = reason_of(&c);
    if budgets.allowed(c.nodepool_name(), reason) == 0 {
        let pool = c.nodepool_name();
        let b = BudgetExhausted {
            nodepool: pool.to_string(),
            reason,
            until: pool_budget_until(
                &c.nodepool,
                pool_sizes(snap).get(pool).copied().unwrap_or(0),
                budgets.disrupting(pool),
                reason,
                now,
            ),
        };
        report.verdict.message = b.to_string();
        report.verdict.cause = Some(Cause::Budget(b));
        return report;
    }
    // As single-node consolidation judges it: a Balanced pool's candidate whose outright
    // deletion would not be approved is not simulated; one whose move is not approved stays.
    let outcome = if c.is_empty() {
        Ok(Action::Delete)
    } else if let Some(Err(score)) = scorer.upper_bound(&c) {
        report.verdict.balanced = Some(score);
        Err(Unconsolidatable::BelowBalancedThreshold {
            nodepool: c.nodepool_name().to_string(),
            score,
        })
    } else {
        sim.simulate(&[&c]).and_then(|action| {
            let Some(score) = scorer.score_one(&c, &action) else {
                return Ok(action);
            };
            report.verdict.balanced = Some(score);
            if score.approved() {
                Ok(action)
            } else {
                Err(Unconsolidatable::BelowBalancedThreshold {
                    nodepool: c.nodepool_name().to_string(),
                    score,
                })
            }
        })
    };
    match outcome {
        Ok(action) => {
            let savings = match &action {
                Action::Delete => c.price.unwrap_or(0.0),
                Action::Replace(r) => c.price.unwrap_or(0.0) - r.price,
            };
            let a = action_report(&c, &action);
            report.verdict.message = action_message(&c, &a, savings);
            if let Some(score) = report.verdict.balanced {
                report.verdict.message += &format!("; Balanced: {score}");
            }
            report.verdict.status = Status::Consolidatable;
            report.verdict.action = Some(a);
            report.verdict.savings = Some(savings);
        }
        Err(why) => {
            report.verdict.message = why.to_string();
            report.verdict.cause = Some(Cause::Unconsolidatable(why));
        }
    }
    report
}

/// A consolidatable node's action for people, with the USD/hour it saves.
fn action_message(c: &Candidate, a: &ActionReport, savings: f64) -> String {
    match a {
        ActionReport::Delete { .. } if c.is_empty() => {
            format!("delete: empty (saves ${savings:.4}/h)")
        }
        ActionReport::Delete { .. } => format!(
            "delete: its {} pod(s) fit elsewhere (saves ${savings:.4}/h)",
            c.pods.len()
        ),
        ActionReport::Replace {
            instance_type,
            options,
            price,
            ..
        } => format!(
            "replace with {instance_type} (${price:.4}/h, {options} option(s)), saving ${savings:.4}/h"
        ),
    }
}

/// A not-candidate's reason for people; `consolidateAfter` counts down from `now`.
fn not_candidate_message(why: &NotCandidate, now: Timestamp) -> String {
    match why {
        NotCandidate::ConsolidateAfter { at } => {
            let left = at.duration_since(now);
            format!(
                "consolidateAfter elapses in {} (at {})",
                crds::duration::human_duration(left),
                at.strftime("%H:%M:%S UTC")
            )
        }
        other => other.to_string(),
    }
}

/// When a NodePool's zero budget for `reason` reopens: the latest end of the active scheduled
/// budgets that allow no more than the `busy` nodes already disrupting (of `total`); `None`
/// when an unscheduled budget is among them.
fn pool_budget_until(
    pool: &NodePool,
    total: usize,
    busy: usize,
    reason: DisruptionReason,
    now: Timestamp,
) -> Option<Timestamp> {
    let mut until = None;
    for b in pool
        .spec
        .disruption
        .budgets
        .iter()
        .filter(|b| b.applies_to(reason) && budget_active(b, now))
    {
        if b.allowed_disruptions(total).unwrap_or(0) > busy {
            continue;
        }
        match window_end(b, now) {
            None => return None,
            Some(end) => until = until.max(Some(end)),
        }
    }
    until
}

/// How many NodeClaims each NodePool has (deleting ones included, as budgets count them).
fn pool_sizes(snap: &Snapshot) -> HashMap<&str, usize> {
    let mut sizes = HashMap::new();
    for c in &snap.nodeclaims {
        if let Some(pool) = nodepool_of(c.metadata.labels.as_ref()) {
            *sizes.entry(pool).or_default() += 1;
        }
    }
    sizes
}

/// Per NodePool: policy, `consolidateAfter`, size and per-reason budgets.
fn pool_reports(
    snap: &Snapshot,
    disrupting: &HashMap<String, usize>,
    now: Timestamp,
) -> Vec<PoolReport> {
    let budgets = Budgets::new(snap, disrupting, now);
    let sizes = pool_sizes(snap);
    let mut out: Vec<PoolReport> = snap
        .nodepools
        .iter()
        .map(|pool| {
            let name = pool.metadata.name.clone().unwrap_or_default();
            let nodes = sizes.get(name.as_str()).copied().unwrap_or(0);
            let busy = disrupting.get(&name).copied().unwrap_or(0);
            let budgets = BUDGET_REASONS
                .iter()
                .map(|&reason| {
                    let limit = pool.allowed_disruptions(nodes, reason, |b| budget_active(b, now));
                    let allowed = (limit != usize::MAX).then(|| budgets.allowed(&name, reason));
                    BudgetReport {
                        reason,
                        allowed,
                        disrupting: busy,
                        until: (allowed == Some(0))
                            .then(|| pool_budget_until(pool, nodes, busy, reason, now))
                            .flatten(),
                    }
                })
                .collect();
            let d = &pool.spec.disruption;
            PoolReport {
                consolidation_policy: serde_json::to_value(d.consolidation_policy)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                consolidate_after: serde_json::to_value(&d.consolidate_after)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                nodepool: name,
                nodes,
                budgets,
                replicas: pool.spec.replicas,
            }
        })
        .collect();
    out.sort_by(|a, b| a.nodepool.cmp(&b.nodepool));
    out
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
