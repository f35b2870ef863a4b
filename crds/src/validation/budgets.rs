//! Validation of disruption budgets (the `nodes`, `schedule` and `duration` patterns and CEL
//! rules in `pkg/apis/v1/nodepool.go`), and a budget's schedule read as upstream's
//! `Budget.IsActive` reads it (`cron.ParseStandard`), so a schedule the CRD's pattern admits
//! but no cron parser reads (`61 25 * * *`) fails validation instead of passing it.

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
        if let Some(schedule) = &b.schedule {
            if !matches_budget_schedule(schedule) {
                errs.push(FieldError::new(
                    format!("{item}.schedule"),
                    format!("{schedule:?} must be a cron expression with five fields or a macro such as @daily"),
                ));
            } else if let Err(why) = parse_budget_schedule(schedule) {
                errs.push(FieldError::new(
                    format!("{item}.schedule"),
                    format!("{schedule:?} is not a valid cron schedule: {why}"),
                ));
            }
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

/// The cron macros upstream's schedule pattern admits, with their five-field meaning
/// (robfig/cron's descriptors).
const SCHEDULE_MACROS: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// The five fields of a cron schedule, in order, with the values each allows, for error
/// messages.
const SCHEDULE_FIELDS: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day of month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day of week", "0-6 or SUN-SAT"),
];

/// A budget's schedule as a cron (UTC), read as upstream reads it (`cron.ParseStandard`): five
/// fields (minute 0-59, hour 0-23, day of month 1-31, month 1-12 or `JAN`-`DEC`, day of week
/// 0-6 or `SUN`-`SAT`; `*`, lists, ranges and steps) or one of upstream's macros (`@yearly`,
/// `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`).
///
/// Errors: why it is not one, naming the offending field, e.g. `minute "61": number out of
/// bounds (allowed: 0-59)`; a sixth (seconds) field; croner's extensions that upstream's parser
/// lacks (`L`, `W`, `#`).
pub fn parse_budget_schedule(schedule: &str) -> Result<croner::Cron, String> {
    let trimmed = schedule.trim();
    let expanded = SCHEDULE_MACROS
        .iter()
        .find(|(name, _)| *name == trimmed)
        .map_or(trimmed, |(_, fields)| *fields);
    let fields: Vec<&str> = expanded.split_whitespace().collect();
    if fields.len() != SCHEDULE_FIELDS.len() {
        return Err(format!(
            "expected exactly 5 fields (minute, hour, day of month, month, day of week), found {}",
            fields.len()
        ));
    }
    for (i, field) in fields.iter().enumerate() {
        let (name, allowed) = SCHEDULE_FIELDS[i];
        if uses_croner_extensions(field) {
            return Err(format!("{name} {field:?}: L, W and # are not supported"));
        }
        // Each field alone, the others `*`, to name the one that does not parse.
        let mut alone = ["*"; 5];
        alone[i] = field;
        if let Err(e) = croner::Cron::new(&alone.join(" ")).parse() {
            return Err(format!(
                "{name} {field:?}: {} (allowed: {allowed})",
                cron_reason(&e)
            ));
        }
    }
    croner::Cron::new(expanded)
        .parse()
        .map_err(|e| cron_reason(&e))
}

/// Month and weekday names, the only letters upstream's cron parser reads.
const CRON_NAMES: [&str; 19] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC", "SUN",
    "MON", "TUE", "WED", "THU", "FRI", "SAT",
];

/// Whether a field uses croner's `L` (last), `W` (weekday) or `#` (nth weekday), which
/// upstream's parser refuses (names such as `JUL` or `WED` are not these).
fn uses_croner_extensions(field: &str) -> bool {
    field.split([',', '-', '/']).any(|token| {
        let token = token.to_ascii_uppercase();
        !CRON_NAMES.contains(&token.as_str()) && token.contains(['L', 'W', '#'])
    })
}

/// croner's message without its category prefix or final period, lowercased at the start.
fn cron_reason(e: &croner::errors::CronError) -> String {
    use croner::errors::CronError;
    let text = match e {
        CronError::ComponentError(m) | CronError::InvalidPattern(m) => m.clone(),
        CronError::IllegalCharacters(m) => format!("illegal characters: {m}"),
        other => other.to_string(),
    };
    let text = text.trim_end_matches('.');
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}
