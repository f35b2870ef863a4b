//! Disruption budgets (upstream `pkg/apis/v1/nodepool.go` `Budget.IsActive` and
//! `GetAllowedDisruptionsByReason`, and `disruption/helpers.go` `BuildDisruptionBudgetMapping`):
//! when a scheduled budget's window is open, and [`Budgets`], how many more nodes each NodePool
//! may start disrupting now. How many nodes a NodePool's budgets allow is
//! `NodePool::allowed_disruptions` in `crds`, given this test.

use std::collections::{BTreeMap, HashMap};

use crds::validation::parse_budget_schedule;
use crds::{Budget, DisruptionReason};
use jiff::Timestamp;

use crate::snapshot::Snapshot;

/// Whether a budget is active at `now` (upstream `Budget.IsActive`): a budget without a
/// schedule always is; a scheduled one is for `duration` after each time its cron schedule
/// (UTC; five fields or a macro such as `@daily`, read by `parse_budget_schedule`) fires. A
/// schedule that does not parse counts as active, so a malformed budget restricts rather than
/// frees (NodePool validation reports it: `ValidationSucceeded=False`).
pub fn budget_active(budget: &Budget, now: Timestamp) -> bool {
    let (Some(schedule), Some(duration)) = (&budget.schedule, &budget.duration) else {
        return true;
    };
    let Ok(cron) = parse_budget_schedule(schedule) else {
        return true;
    };
    let window = jiff::SignedDuration::try_from(duration.duration()).unwrap_or_default();
    let Ok(from) = now.checked_sub(window) else {
        return true;
    };
    let Some(from) =
        chrono::DateTime::from_timestamp(from.as_second(), from.subsec_nanosecond().max(0) as u32)
    else {
        return true;
    };
    // Active iff the schedule fires somewhere in (now - duration, now].
    match cron.find_next_occurrence(&from, false) {
        Ok(hit) => hit.timestamp() <= now.as_second(),
        Err(_) => true,
    }
}

/// When an active scheduled budget's window closes: its latest schedule hit in
/// `(now - duration, now]` plus `duration`. `None` for a budget without a schedule (always
/// active), one whose schedule does not parse, or one not active at `now`. At most 10,000 hits
/// are walked (a every-minute schedule with a week-long duration), then the latest found counts.
pub fn window_end(budget: &Budget, now: Timestamp) -> Option<Timestamp> {
    let (schedule, duration) = (budget.schedule.as_ref()?, budget.duration.as_ref()?);
    let cron = parse_budget_schedule(schedule).ok()?;
    let window = jiff::SignedDuration::try_from(duration.duration()).ok()?;
    let from = now.checked_sub(window).ok()?;
    let mut at = chrono::DateTime::from_timestamp(from.as_second(), 0)?;
    let mut latest = None;
    for _ in 0..10_000 {
        let Ok(hit) = cron.find_next_occurrence(&at, false) else {
            break;
        };
        if hit.timestamp() > now.as_second() {
            break;
        }
        latest = Some(hit.timestamp());
        at = hit;
    }
    Timestamp::from_second(latest?)
        .ok()?
        .checked_add(window)
        .ok()
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
