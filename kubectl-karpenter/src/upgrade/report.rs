//! What `upgrade status` reports about one NodePool: the controller's rollout [`Plan`] (run by
//! the same pure planner the orchestrator uses), the state in words, the recent steps from the
//! disruption history (its `Drifted` records) and an estimate of the time left. The JSON and YAML document; pure.

use std::sync::Arc;

use crds::history::{Record, upgrade_steps};
use crds::upgrade::{Outcome, StepRecord};
use crds::{NodeClaim, NodePool};
use jiff::Timestamp;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_core::disruption::upgrade::{Plan, View, plan};
use karpenter_core::pod_view::PodView;
use karpenter_core::snapshot::nodepool_of;
use serde::Serialize;

/// Everything `upgrade status` says about one NodePool (the JSON and YAML document: the plan's
/// fields, then `state`, `history` and `estimate`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    /// The controller's plan for the NodePool now.
    #[serde(flatten)]
    pub plan: Plan,
    /// Running, paused, or paused by the controller.
    pub state: State,
    /// The NodePool's most recent finished steps from the disruption history, oldest first.
    pub history: Vec<StepRecord>,
    /// How long the rest of the rollout should take.
    pub estimate: Estimate,
}

/// Whether a rollout runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum State {
    /// Steps start as the budgets allow.
    Running,
    /// Paused by an operator: only the step allowance may start.
    Paused,
    /// Paused by the controller after a failed step (the plan's `paused_reason` says why).
    PausedByController,
}

/// The time left, from the recent succeeded steps and what is queued ([`Estimate::of`] has the
/// rule).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    /// Steps left: queued plus in progress (skipped NodeClaims are not counted).
    pub remaining_steps: usize,
    /// Succeeded steps in the history the estimate draws on (at most
    /// [`crds::upgrade::HISTORY_LENGTH`]).
    pub succeeded_steps: usize,
    /// Seconds the steps left should take; 0 with nothing left; absent (unknown) when a step
    /// left has no recent succeeded step to go by (see [`Estimate::larger`]), or there is none.
    pub seconds: Option<u64>,
    /// When the estimate is unknown because of its size: the step left with the most pods,
    /// larger than any recent succeeded step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub larger: Option<Larger>,
    /// The queued NodeClaims' drain timeouts added up, seconds: how long their drains may run
    /// before pods are forced off (PodDisruptionBudgets and slow shutdowns can make them take
    /// that long); 0 with nothing queued.
    pub drain_timeout_seconds: u64,
}

/// A step left that moves more pods than any recent succeeded step moved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Larger {
    /// The drifted NodeClaim (queued or in progress).
    pub nodeclaim: String,
    /// Pods its drain moves (DaemonSet pods excluded).
    pub pods: usize,
    /// The most pods a recent succeeded step moved.
    pub most_moved: u32,
}

/// A step left, as the estimate sees it.
struct Left<'a> {
    nodeclaim: &'a str,
    pods: usize,
}

impl Estimate {
    /// The estimate for the steps left in `plan` (in progress, then queued) given the NodePool's
    /// recent steps. Each step left is expected to take the mean duration of the recent succeeded
    /// steps nearest its size: those that moved the fewest pods among the ones that moved at
    /// least as many as its node has now (an empty node goes by the empty ones, if any). When a
    /// step left has more pods than any recent succeeded step moved, or there is no succeeded
    /// step, the estimate is unknown: the history says nothing about it, and a mean of smaller
    /// nodes would be a wrong small number. Steps in progress count in full.
    pub fn of(plan: &Plan, history: &[StepRecord]) -> Estimate {
        let succeeded: Vec<&StepRecord> = history
            .iter()
            .filter(|r| r.outcome == Outcome::Succeeded)
            .collect();
        let left: Vec<Left<'_>> = plan
            .in_progress
            .iter()
            .map(|s| Left {
                nodeclaim: &s.nodeclaim,
                pods: s.pods,
            })
            .chain(plan.queue.iter().map(|c| Left {
                nodeclaim: &c.nodeclaim,
                pods: c.pods,
            }))
            .collect();
        let drain_timeout_seconds = plan
            .queue
            .iter()
            .map(|c| c.drain_timeout.as_secs())
            .fold(0, u64::saturating_add);
        let mut estimate = Estimate {
            remaining_steps: left.len(),
            succeeded_steps: succeeded.len(),
            seconds: None,
            larger: None,
            drain_timeout_seconds,
        };
        if left.is_empty() {
            estimate.seconds = Some(0);
            return estimate;
        }
        let Some(most_moved) = succeeded.iter().map(|r| r.pods_moved).max() else {
            return estimate;
        };
        if let Some(big) = left
            .iter()
            .filter(|l| l.pods as u64 > u64::from(most_moved))
            .max_by_key(|l| l.pods)
        {
            estimate.larger = Some(Larger {
                nodeclaim: big.nodeclaim.to_owned(),
                pods: big.pods,
                most_moved,
            });
            return estimate;
        }
        let seconds = left
            .iter()
            .filter_map(|l| nearest_mean(&succeeded, l.pods))
            .fold(0, u64::saturating_add);
        estimate.seconds = Some(seconds);
        estimate
    }
}

/// The mean duration (rounded) of the succeeded steps that moved the fewest pods among those
/// that moved at least `pods`; `None` when none did.
fn nearest_mean(succeeded: &[&StepRecord], pods: usize) -> Option<u64> {
    let size = succeeded
        .iter()
        .map(|r| r.pods_moved)
        .filter(|moved| u64::from(*moved) >= pods as u64)
        .min()?;
    let durations: Vec<u64> = succeeded
        .iter()
        .filter(|r| r.pods_moved == size)
        .map(|r| r.seconds)
        .collect();
    let count = durations.len() as u64;
    let total = durations.iter().fold(0, |a: u64, s| a.saturating_add(*s));
    Some(total.saturating_add(count / 2) / count.max(1))
}

impl PoolStatus {
    /// The status of `pool` given its NodeClaims, every pod and PodDisruptionBudget and the
    /// disruption history's records (any NodePool's; its own `Drifted` ones are its steps).
    /// Scheduled budgets count as active, as the orchestrator's own view does.
    pub fn of(
        pool: &NodePool,
        claims: &[Arc<NodeClaim>],
        pods: &[Arc<PodView>],
        pdbs: &[Arc<PodDisruptionBudget>],
        records: &[Record],
        now: Timestamp,
    ) -> PoolStatus {
        let plan = plan(&View {
            pool,
            claims,
            pods,
            pdbs,
            now,
            budget_active: &|b| karpenter_core::disruption::budgets::budget_active(b, now),
        });
        let reason = plan.paused_reason.as_deref().is_some_and(|r| !r.is_empty());
        let state = match (plan.paused, reason) {
            (false, _) => State::Running,
            (true, false) => State::Paused,
            (true, true) => State::PausedByController,
        };
        let history = upgrade_steps(records, pool.metadata.name.as_deref().unwrap_or_default());
        let estimate = Estimate::of(&plan, &history);
        PoolStatus {
            plan,
            state,
            history,
            estimate,
        }
    }

    /// Whether any NodeClaim of the NodePool is drifted: queued, in progress or skipped.
    pub fn drifted(&self) -> bool {
        !(self.plan.queue.is_empty()
            && self.plan.in_progress.is_empty()
            && self.plan.skipped.is_empty())
    }
}

/// The status of each of `pools` (in name order), given every NodeClaim, pod and
/// PodDisruptionBudget and the disruption history's records; NodeClaims belong to the NodePool
/// their `karpenter.sh/nodepool` label names.
pub fn statuses(
    pools: &[NodePool],
    claims: &[NodeClaim],
    pods: &[Arc<PodView>],
    pdbs: &[Arc<PodDisruptionBudget>],
    records: &[Record],
    now: Timestamp,
) -> Vec<PoolStatus> {
    let mut pools: Vec<&NodePool> = pools.iter().collect();
    pools.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    pools
        .into_iter()
        .map(|pool| {
            let name = pool.metadata.name.as_deref();
            let mine: Vec<Arc<NodeClaim>> = claims
                .iter()
                .filter(|c| name.is_some() && nodepool_of(c.metadata.labels.as_ref()) == name)
                .map(|c| Arc::new(c.clone()))
                .collect();
            PoolStatus::of(pool, &mine, pods, pdbs, records, now)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use karpenter_core::disruption::upgrade::Candidate;

    use super::*;
    use crate::upgrade::fixtures::{self, record};

    /// A succeeded step that moved `pods` and took `seconds`.
    fn moved(pods: u32, seconds: u64) -> StepRecord {
        StepRecord {
            pods_moved: pods,
            ..record("x", Outcome::Succeeded, seconds)
        }
    }

    /// A plan with a step in progress on a node with `stepping` pods (if any) and queued nodes
    /// of (pods, drain timeout seconds).
    fn left(stepping: Option<usize>, queued: &[(usize, u64)]) -> Plan {
        let mut plan = fixtures::status().plan;
        plan.in_progress.truncate(usize::from(stepping.is_some()));
        if let (Some(pods), Some(step)) = (stepping, plan.in_progress.first_mut()) {
            step.pods = pods;
        }
        let template = plan.queue[0].clone();
        plan.queue = queued
            .iter()
            .enumerate()
            .map(|(i, (pods, drain))| Candidate {
                nodeclaim: format!("queued-{i}"),
                pods: *pods,
                drain_timeout: std::time::Duration::from_secs(*drain),
                ..template.clone()
            })
            .collect();
        plan
    }

    #[test]
    fn each_step_left_takes_as_long_as_recent_steps_of_its_size() {
        let history = [
            moved(0, 2),
            moved(0, 4),
            moved(12, 200),
            moved(12, 301),
            moved(40, 900),
            record("b", Outcome::RolledBack, 5),
        ];
        // In progress with 5 pods: the 12-pod steps (251s); empty: the empty ones (3s); 12:
        // 251s; 30: the 40-pod step.
        let e = Estimate::of(&left(Some(5), &[(0, 0), (12, 360), (30, 900)]), &history);
        assert_eq!(e.remaining_steps, 4);
        assert_eq!(e.succeeded_steps, 5);
        assert_eq!(e.seconds, Some(251 + 3 + 251 + 900));
        assert_eq!(e.larger, None);
        assert_eq!(
            e.drain_timeout_seconds, 1260,
            "the queued nodes' drain timeouts"
        );
        // Without empty steps in the history an empty node goes by the smallest ones.
        let e = Estimate::of(&left(None, &[(0, 0)]), &[moved(12, 200)]);
        assert_eq!(e.seconds, Some(200));
        // Nothing left is known to take no time.
        let e = Estimate::of(&left(None, &[]), &[]);
        assert_eq!((e.remaining_steps, e.seconds), (0, Some(0)));
    }

    #[test]
    fn a_step_larger_than_the_history_makes_the_estimate_unknown() {
        // The issue: empty-node steps of 0-1s in the history, a 120-pod node queued with a
        // 26m40s drain timeout: "about 2s for 2 steps" was a wrong small number.
        let history = [moved(0, 1), moved(0, 0)];
        let e = Estimate::of(&left(None, &[(0, 0), (120, 1600)]), &history);
        assert_eq!(e.seconds, None);
        assert_eq!(
            e.larger,
            Some(Larger {
                nodeclaim: "queued-1".into(),
                pods: 120,
                most_moved: 0
            })
        );
        assert_eq!(e.drain_timeout_seconds, 1600);
        // The step in progress counts too; the largest step left is named.
        let e = Estimate::of(&left(Some(50), &[(20, 600)]), &[moved(12, 10)]);
        let larger = e.larger.expect("larger than the history");
        assert_eq!(
            (larger.nodeclaim.as_str(), larger.pods),
            ("default-stepping", 50)
        );
        // Without a succeeded step it is unknown too.
        let rolled_back = [record("b", Outcome::RolledBack, 900)];
        let e = Estimate::of(&left(None, &[(0, 0), (2, 60)]), &rolled_back);
        assert_eq!((e.seconds, e.larger, e.succeeded_steps), (None, None, 0));
    }

    #[test]
    fn rollout_of_the_sample_pool() {
        let status = fixtures::status();
        let plan = &status.plan;
        assert_eq!(plan.nodepool, "default");
        assert_eq!(status.state, State::Running);
        let names = |v: Vec<&String>| v.into_iter().cloned().collect::<Vec<_>>();
        assert_eq!(
            names(plan.in_progress.iter().map(|s| &s.nodeclaim).collect()),
            ["default-stepping"]
        );
        // Empty nodes first, then fewest pods; the DaemonSet pod does not count.
        assert_eq!(
            names(plan.queue.iter().map(|c| &c.nodeclaim).collect()),
            ["default-empty", "default-busy"]
        );
        assert_eq!(plan.queue[1].pods, 2);
        assert_eq!(plan.skipped.len(), 1);
        assert_eq!(
            plan.skipped[0].why,
            "PodDisruptionBudget shop/cart allows no disruption (pod shop/cart-0)"
        );
        assert_eq!(status.history.len(), 2);
        assert_eq!(status.estimate.seconds, Some(3 * 250));
        assert!(status.drifted());
    }

    #[test]
    fn state_and_drift_follow_the_annotations() {
        let mut pool = fixtures::pool();
        fixtures::annotate(&mut pool, crds::upgrade::PAUSED_ANNOTATION, "true");
        let s = PoolStatus::of(&pool, &[], &[], &[], &[], fixtures::now());
        assert_eq!(s.state, State::Paused);
        assert!(!s.drifted());
        assert_eq!(s.estimate.seconds, Some(0));
        fixtures::annotate(
            &mut pool,
            crds::upgrade::PAUSED_REASON_ANNOTATION,
            "replacement did not initialize",
        );
        let s = PoolStatus::of(&pool, &[], &[], &[], &[], fixtures::now());
        assert_eq!(s.state, State::PausedByController);
        fixtures::annotate(&mut pool, crds::upgrade::PAUSED_ANNOTATION, "false");
        let s = PoolStatus::of(&pool, &[], &[], &[], &[], fixtures::now());
        assert_eq!(s.state, State::Running);
    }

    #[test]
    fn nodeclaims_go_to_the_nodepool_their_label_names() {
        let mut other = fixtures::pool();
        other.metadata.name = Some("gpu".into());
        let o = fixtures::objects();
        let claims: Vec<NodeClaim> = o.claims.iter().map(|c| (**c).clone()).collect();
        let pools = [other, fixtures::pool()];
        let records = fixtures::records();
        let all = statuses(&pools, &claims, &o.pods, &o.pdbs, &records, fixtures::now());
        assert_eq!(all[0].plan.nodepool, "default");
        assert!(all[0].drifted());
        assert_eq!(all[1].plan.nodepool, "gpu");
        assert!(!all[1].drifted());
        assert_eq!(all[0], fixtures::status());
    }
}
