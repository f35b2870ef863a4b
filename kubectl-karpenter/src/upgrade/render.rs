//! Output of `upgrade`: per NodePool a block laid out like `kubectl describe` (keys aligned,
//! the steps in progress, the queue, skipped NodeClaims and recent steps as indented tables)
//! and a summary line, or the documents as a JSON or YAML array; the controls print one line
//! per NodePool. Pure: writes to any `Write`; colour (state, phase, outcome) only when asked.

use std::fmt::Display;
use std::io::{self, Write};

use crds::upgrade::{Outcome, StepRecord};
use crossterm::style::{Color, Stylize};
use jiff::Timestamp;
use serde::Serialize;

use super::control::ControlResult;
use super::report::{Estimate, PoolStatus, State};
use crate::age::{self, UNKNOWN};
use crate::output::{self, OutputError};
use crate::render::{Cell, NONE, write_aligned};

/// Column where values start (`Max In Progress:` plus two spaces).
const KEY_WIDTH: usize = 18;

/// `1h2m3s`, `4m10s`, `45s`, `0s`: a duration to the second, as Go prints it without the
/// zero units.
pub fn duration(seconds: u64) -> String {
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    let mut text = String::new();
    if h > 0 {
        text.push_str(&format!("{h}h"));
    }
    if m > 0 {
        text.push_str(&format!("{m}m"));
    }
    if s > 0 || text.is_empty() {
        text.push_str(&format!("{s}s"));
    }
    text
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Writes text, coloured or not.
struct Block<'a, W: Write> {
    out: &'a mut W,
    color: bool,
}

impl<W: Write> Block<'_, W> {
    fn field(&mut self, key: &str, value: impl Display, color: Option<Color>) -> io::Result<()> {
        let key = format!("{key}:");
        let value = value.to_string();
        let value = match color.filter(|_| self.color) {
            Some(c) => value.as_str().with(c).to_string(),
            None => value,
        };
        writeln!(self.out, "{key:<KEY_WIDTH$}{value}")
    }

    /// A section holding a table indented by two spaces, or `<none>` without rows.
    fn table(&mut self, key: &str, header: &[&str], rows: Vec<Vec<Cell>>) -> io::Result<()> {
        if rows.is_empty() {
            return self.field(key, NONE, None);
        }
        writeln!(self.out, "{key}:")?;
        let mut lines = vec![header.iter().map(|h| Cell::plain(*h)).collect::<Vec<_>>()];
        lines.extend(rows);
        let mut table = Vec::new();
        write_aligned(&mut table, &lines, self.color)?;
        for line in String::from_utf8_lossy(&table).lines() {
            writeln!(self.out, "  {line}")?;
        }
        Ok(())
    }
}

/// The state in words and its colour.
fn state_text(s: &PoolStatus) -> (String, Color) {
    match s.state {
        State::Running => ("Running".to_owned(), Color::Green),
        State::Paused => ("Paused".to_owned(), Color::Yellow),
        State::PausedByController => (
            format!(
                "Paused by the controller: {}",
                s.plan.paused_reason.as_deref().unwrap_or_default()
            ),
            Color::Red,
        ),
    }
}

/// `about 12m30s for 3 steps (each as long as recent succeeded steps that moved as many pods)`,
/// `nothing left`, or `unknown …` with why; then how long draining the queued nodes may take
/// (their drain timeouts added up) and the skipped NodeClaims not counted, when there are any.
pub fn estimate_text(e: &Estimate, skipped: usize) -> String {
    let steps = plural(e.remaining_steps, "step", "steps");
    let mut text = match (e.remaining_steps, e.seconds, &e.larger) {
        (0, _, _) => "nothing left".to_owned(),
        (_, Some(total), _) => format!(
            "about {} for {steps} (each as long as recent succeeded steps that moved as many pods)",
            duration(total)
        ),
        (_, None, Some(larger)) => format!(
            "unknown for {steps}: {} moves {}, more than any recent succeeded step ({})",
            larger.nodeclaim,
            plural(larger.pods, "pod", "pods"),
            plural(larger.most_moved as usize, "pod", "pods"),
        ),
        (_, None, None) => format!("unknown for {steps} (no succeeded step in the history)"),
    };
    if e.remaining_steps > 0 && e.drain_timeout_seconds > 0 {
        text.push_str(&format!(
            "; draining the queued nodes may take up to {}",
            duration(e.drain_timeout_seconds)
        ));
    }
    if skipped > 0 {
        text.push_str(&format!(
            "; {} not counted",
            plural(skipped, "skipped NodeClaim", "skipped NodeClaims")
        ));
    }
    text
}

fn ago(at: Option<Timestamp>, now: Timestamp) -> String {
    match at {
        Some(t) => format!("{} ago", age::age(Some(t), now)),
        None => UNKNOWN.to_owned(),
    }
}

fn history_row(r: &StepRecord, now: Timestamp) -> Vec<Cell> {
    let (outcome, color) = match r.outcome {
        Outcome::Succeeded => ("Succeeded", Color::Green),
        Outcome::RolledBack => ("RolledBack", Color::Red),
    };
    vec![
        Cell::plain(r.nodeclaim.as_str()),
        Cell::or_none(r.replacement.as_deref()),
        Cell {
            text: outcome.to_owned(),
            color: Some(color),
        },
        Cell::plain(r.pods_moved.to_string()),
        Cell::plain(duration(r.seconds)),
        Cell::plain(ago(r.finished.parse().ok(), now)),
        Cell::or_none(r.reason.as_deref()),
    ]
}

fn write_pool<W: Write>(b: &mut Block<'_, W>, s: &PoolStatus, now: Timestamp) -> io::Result<()> {
    let plan = &s.plan;
    b.field("NodePool", &plan.nodepool, None)?;
    let (state, color) = state_text(s);
    b.field("State", state, Some(color))?;
    b.field("Step Allowance", plan.step_allowance, None)?;
    b.field("Max In Progress", plan.max_in_progress, None)?;
    b.field("Can Start Now", plan.can_start, None)?;
    let in_progress = plan
        .in_progress
        .iter()
        .map(|step| {
            let elapsed = step
                .started
                .map(|t| age::human_duration(now.duration_since(t)))
                .unwrap_or_else(|| UNKNOWN.to_owned());
            vec![
                Cell::plain(step.nodeclaim.as_str()),
                Cell::or_none(step.node.as_deref()),
                Cell::or_none(step.replacement.as_deref()),
                Cell {
                    text: step.phase.as_str().to_owned(),
                    color: Some(Color::Yellow),
                },
                Cell::plain(elapsed),
            ]
        })
        .collect();
    b.table(
        "In Progress",
        &["NODECLAIM", "NODE", "REPLACEMENT", "PHASE", "ELAPSED"],
        in_progress,
    )?;
    let queue = plan
        .queue
        .iter()
        .enumerate()
        .map(|(i, c)| {
            vec![
                Cell::plain((i + 1).to_string()),
                Cell::plain(c.nodeclaim.as_str()),
                Cell::or_none(c.node.as_deref()),
                Cell::plain(c.pods.to_string()),
                Cell::plain(duration(c.drain_timeout.as_secs())),
            ]
        })
        .collect();
    b.table(
        "Queue",
        &["#", "NODECLAIM", "NODE", "PODS", "DRAIN-TIMEOUT"],
        queue,
    )?;
    let skipped = plan
        .skipped
        .iter()
        .map(|k| {
            vec![
                Cell::plain(k.nodeclaim.as_str()),
                Cell::or_none(k.node.as_deref()),
                Cell::plain(k.why.as_str()),
            ]
        })
        .collect();
    b.table("Skipped", &["NODECLAIM", "NODE", "WHY"], skipped)?;
    let history = s.history.iter().map(|r| history_row(r, now)).collect();
    b.table(
        "Recent Steps",
        &[
            "NODECLAIM",
            "REPLACEMENT",
            "OUTCOME",
            "PODS",
            "DURATION",
            "FINISHED",
            "REASON",
        ],
        history,
    )?;
    b.field(
        "Estimate",
        estimate_text(&s.estimate, plan.skipped.len()),
        None,
    )
}

/// The summary line over several NodePools.
pub fn summary(statuses: &[PoolStatus]) -> String {
    let sum = |f: &dyn Fn(&PoolStatus) -> usize| statuses.iter().map(f).sum::<usize>();
    let paused = sum(&|s| usize::from(s.state != State::Running));
    let in_progress = sum(&|s| s.plan.in_progress.len());
    let queued = sum(&|s| s.plan.queue.len());
    let skipped = sum(&|s| s.plan.skipped.len());
    format!(
        "{}: {paused} paused; {} in progress, {queued} queued, {skipped} skipped",
        plural(statuses.len(), "nodepool", "nodepools"),
        plural(in_progress, "step", "steps"),
    )
}

/// Writes one block per NodePool, separated by blank lines; with more than one, a summary.
///
/// Errors: writing failed.
pub fn write_text(
    out: &mut impl Write,
    statuses: &[PoolStatus],
    now: Timestamp,
    color: bool,
) -> io::Result<()> {
    let mut b = Block { out, color };
    for (i, s) in statuses.iter().enumerate() {
        if i > 0 {
            writeln!(b.out)?;
        }
        write_pool(&mut b, s, now)?;
    }
    if statuses.len() > 1 {
        writeln!(b.out)?;
        writeln!(b.out, "{}", summary(statuses))?;
    }
    Ok(())
}

/// Writes the results of a control, one line each.
///
/// Errors: writing failed.
pub fn write_results(out: &mut impl Write, results: &[ControlResult]) -> io::Result<()> {
    for r in results {
        writeln!(out, "{}", r.message)?;
    }
    Ok(())
}

/// Writes `items` as a JSON array (4-space indent, as kubectl) or as YAML.
///
/// Errors: serializing or writing failed.
pub fn write_document<T: Serialize>(
    out: &mut impl Write,
    items: &[T],
    yaml: bool,
) -> Result<(), OutputError> {
    if yaml {
        output::write_yaml_value(out, &items)
    } else {
        output::write_json_value(out, &items)
    }
}

#[cfg(test)]
mod tests;
