//! Validation of disruption budgets (the `nodes`, `schedule` and `duration` patterns and CEL
//! rules in `pkg/apis/v1/nodepool.go`).

use std::collections::BTreeSet;

use super::FieldError;
use crate::duration;
use crate::nodepool::{self, Budget};

/// Validates disruption budgets at `path` (`spec.disruption.budgets`).
pub fn validate_budgets(budgets: &[Budget], path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if budgets.len() > nodepool::MAX_BUDGETS {
        errs.push(FieldError::new(
            path,
            format!(
                "{} budgets exceed the maximum of {}",
                budgets.len(),
                nodepool::MAX_BUDGETS
            ),
        ));
    }
    for (i, b) in budgets.iter().enumerate() {
        let item = format!("{path}[{i}]");
        if !matches_budget_nodes(&b.nodes) {
            errs.push(FieldError::new(
                format!("{item}.nodes"),
                format!(
                    "{:?} must be a node count (e.g. 5) or a percentage from 0% to 100%",
                    b.nodes
                ),
            ));
        }
        if let Some(schedule) = &b.schedule
            && !matches_budget_schedule(schedule)
        {
            errs.push(FieldError::new(
                format!("{item}.schedule"),
                format!("{schedule:?} must be a cron expression with five fields or a macro such as @daily"),
            ));
        }
        if let Some(d) = &b.duration {
            let d = d.as_string();
            if !duration::matches_budget_duration_pattern(&d) {
                errs.push(FieldError::new(
                    format!("{item}.duration"),
                    format!("{d:?} must be hours and/or minutes, e.g. 8h or 1h30m"),
                ));
            }
        }
        if b.schedule.is_some() != b.duration.is_some() {
            errs.push(FieldError::new(
                item.clone(),
                "'schedule' must be set with 'duration'",
            ));
        }
        if let Some(reasons) = &b.reasons {
            if reasons.len() > 50 {
                errs.push(FieldError::new(
                    format!("{item}.reasons"),
                    "at most 50 reasons are allowed",
                ));
            }
            let unique: BTreeSet<_> = reasons.iter().collect();
            if unique.len() != reasons.len() {
                errs.push(FieldError::new(
                    format!("{item}.reasons"),
                    "reasons must not repeat",
                ));
            }
        }
    }
    errs
}

/// Whether `s` matches [`nodepool::BUDGET_NODES_PATTERN`].
pub fn matches_budget_nodes(s: &str) -> bool {
    let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    match s.strip_suffix('%') {
        Some(pct) => pct == "100" || (all_digits(pct) && pct.len() <= 2),
        None => all_digits(s),
    }
}

/// Whether `s` matches [`nodepool::BUDGET_SCHEDULE_PATTERN`]: it starts with a cron macro
/// (`@daily`, ...) or ends with five non-empty whitespace-separated parts.
pub fn matches_budget_schedule(s: &str) -> bool {
    const MACROS: [&str; 7] = [
        "annually", "yearly", "monthly", "weekly", "daily", "midnight", "hourly",
    ];
    if let Some(rest) = s.strip_prefix('@')
        && MACROS.iter().any(|m| rest.starts_with(m))
    {
        return true;
    }
    // Earliest choice of four separators, each with at least one character before it.
    let chars: Vec<char> = s.chars().collect();
    let mut next_min = 1;
    let mut found = 0;
    let mut last = 0;
    for (i, c) in chars.iter().enumerate() {
        if found < 4 && i >= next_min && c.is_whitespace() {
            found += 1;
            last = i;
            next_min = i + 2;
        }
    }
    found == 4 && last + 1 < chars.len()
}
