//! Disruption budgets (upstream `pkg/apis/v1/nodepool.go` `Budget.IsActive` and
//! `GetAllowedDisruptionsByReason`): when a scheduled budget's window is open. How many nodes a
//! NodePool's budgets allow is `NodePool::allowed_disruptions` in `crds`, given this test.

use crds::Budget;
use crds::validation::parse_budget_schedule;
use jiff::Timestamp;

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
