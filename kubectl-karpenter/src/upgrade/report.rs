//! What `upgrade status` reports about one NodePool: the controller's rollout [`Plan`] (run by
//! the same pure planner the orchestrator uses), the state in words, the recent steps from the
//! disruption history (its `Drifted` records) and an estimate of the time left. The JSON and YAML document; pure.

use std::sync::Arc;

use crds::history::{Record, upgrade_steps};
use crds::upgrade::{Outcome, StepRecord};
use crds::{NodeClaim, NodePool};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_core::disruption::upgrade::{Plan, View, plan};
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

/// The time left, from the recent succeeded steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    /// Steps left: queued plus in progress (skipped NodeClaims are not counted).
    pub remaining_steps: usize,
    /// How many succeeded steps of the history the mean is taken over.
    pub succeeded_steps: usize,
    /// Their mean duration; absent without one.
    pub mean_step_seconds: Option<u64>,
    /// Mean × remaining steps; 0 with nothing left; absent (unknown) without history.
    pub seconds: Option<u64>,
}

impl Estimate {
    /// The estimate for `remaining` steps given the history.
    pub fn of(remaining: usize, history: &[StepRecord]) -> Estimate {
        let durations: Vec<u64> = history
            .iter()
            .filter(|r| r.outcome == Outcome::Succeeded)
            .map(|r| r.seconds)
            .collect();
        let count = durations.len() as u64;
        let mean = (count > 0).then(|| {
            let total: u64 = durations.iter().sum();
            (total + count / 2) / count
        });
        let seconds = if remaining == 0 {
            Some(0)
        } else {
            mean.map(|m| m.saturating_mul(remaining as u64))
        };
        Estimate {
            remaining_steps: remaining,
            succeeded_steps: durations.len(),
            mean_step_seconds: mean,
            seconds,
        }
    }
}

impl PoolStatus {
    /// The status of `pool` given its NodeClaims, every pod and PodDisruptionBudget and the
    /// disruption history's records (any NodePool's; its own `Drifted` ones are its steps).
    /// Scheduled budgets count as active, as the orchestrator's own view does.
    pub fn of(
        pool: &NodePool,
        claims: &[Arc<NodeClaim>],
        pods: &[Arc<Pod>],
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
        let estimate = Estimate::of(plan.queue.len() + plan.in_progress.len(), &history);
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
    pods: &[Arc<Pod>],
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
    use super::*;
    use crate::upgrade::fixtures::{self, record};

    #[test]
    fn estimate_is_the_mean_of_succeeded_steps_times_the_steps_left() {
        let history = vec![
            record("a", Outcome::Succeeded, 200),
            record("b", Outcome::RolledBack, 900),
            record("c", Outcome::Succeeded, 301),
        ];
        let e = Estimate::of(3, &history);
        assert_eq!(e.succeeded_steps, 2);
        assert_eq!(e.mean_step_seconds, Some(251));
        assert_eq!(e.seconds, Some(753));
        // Nothing left is known to take no time; without a succeeded step it is unknown.
        assert_eq!(Estimate::of(0, &[]).seconds, Some(0));
        let rolled_back = [record("b", Outcome::RolledBack, 900)];
        let e = Estimate::of(2, &rolled_back);
        assert_eq!((e.mean_step_seconds, e.seconds), (None, None));
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
