//! Text output of `disruption`: a NodePool table (settings, nodes being disrupted, and per reason
//! how many more its budgets allow: `ALLOWED-DRIFTED`, `ALLOWED-EMPTY`,
//! `ALLOWED-UNDERUTILIZED`, which are not counts of drifted, empty or underutilized nodes), a node table
//! (verdict and its detail) and a summary line; and of `disruption explain`: one block laid out
//! like `kubectl describe`. Pure: writes to any `Write`; VERDICT is coloured only when asked.

use std::io::{self, Write};

use crossterm::style::{Color, Stylize};
use karpenter_core::disruption::consolidation::Destination;
use karpenter_core::disruption::report::{BudgetReport, NodeReport, Report, Status, WhatIf};

use crate::render::{Cell, NONE, format_price, write_aligned};

/// Column where `explain`'s values start (`If Removed Now:` plus two spaces).
const KEY_WIDTH: usize = 17;

const POOL_HEADERS: [&str; 8] = [
    "NODEPOOL",
    "POLICY",
    "CONSOLIDATE-AFTER",
    "NODES",
    "DISRUPTING",
    "ALLOWED-DRIFTED",
    "ALLOWED-EMPTY",
    "ALLOWED-UNDERUTILIZED",
];

const NODE_HEADERS: [&str; 8] = [
    "NODE",
    "NODECLAIM",
    "NODEPOOL",
    "INSTANCE-TYPE",
    "PODS",
    "PRICE/HOUR",
    "VERDICT",
    "DETAIL",
];

/// The colour of a verdict: green when consolidatable, yellow when blocked, cyan while being
/// disrupted.
pub fn status_color(status: Status) -> Color {
    match status {
        Status::Consolidatable => Color::Green,
        Status::Blocked => Color::Yellow,
        Status::Disrupting => Color::Cyan,
    }
}

/// How many more nodes a budget lets start now: `3`, `0 until 17:00 UTC`, or `no limit`.
pub fn budget_cell(b: &BudgetReport) -> String {
    match (b.allowed, b.until) {
        (None, _) => "no limit".to_string(),
        (Some(0), Some(until)) => format!("0 until {}", until.strftime("%H:%M UTC")),
        (Some(n), _) => n.to_string(),
    }
}

/// The report: the NodePool table, a blank line, the node table (or `No nodes.`), a blank line
/// and the summary.
///
/// Errors: writing failed.
pub fn write_report(out: &mut impl Write, report: &Report, color: bool) -> io::Result<()> {
    let mut pools = vec![POOL_HEADERS.iter().map(|h| Cell::plain(*h)).collect()];
    for p in &report.nodepools {
        let mut row = vec![
            Cell::plain(&p.nodepool),
            Cell::plain(match p.replicas {
                Some(n) => format!("Static (replicas {n})"),
                None => p.consolidation_policy.clone(),
            }),
            Cell::plain(&p.consolidate_after),
            Cell::plain(p.nodes.to_string()),
            Cell::plain(p.budgets.first().map_or(0, |b| b.disrupting).to_string()),
        ];
        row.extend(p.budgets.iter().map(|b| Cell::plain(budget_cell(b))));
        pools.push(row);
    }
    if report.nodepools.is_empty() {
        writeln!(out, "No NodePools.")?;
    } else {
        write_aligned(out, &pools, color)?;
    }
    writeln!(out)?;
    if report.nodes.is_empty() {
        writeln!(out, "No nodes.")?;
        return Ok(());
    }
    let mut nodes = vec![NODE_HEADERS.iter().map(|h| Cell::plain(*h)).collect()];
    nodes.extend(report.nodes.iter().map(node_row));
    write_aligned(out, &nodes, color)?;
    writeln!(out)?;
    writeln!(out, "{}", summary(report))
}

fn node_row(n: &NodeReport) -> Vec<Cell> {
    vec![
        Cell::or_none(n.node.as_deref()),
        Cell::plain(&n.nodeclaim),
        Cell::or_none(n.nodepool.as_deref()),
        Cell::or_none(Some(n.instance_type.as_str()).filter(|t| !t.is_empty())),
        Cell::plain(n.pods.to_string()),
        Cell::plain(format_price(n.price)),
        Cell {
            text: n.verdict.status.as_str().to_string(),
            color: Some(status_color(n.verdict.status)),
        },
        Cell::plain(&n.verdict.message),
    ]
}

/// `3 nodes: 1 consolidatable (saving up to $0.2900/h), 1 blocked, 1 disrupting`.
pub fn summary(report: &Report) -> String {
    let count = |s: Status| {
        report
            .nodes
            .iter()
            .filter(|n| n.verdict.status == s)
            .count()
    };
    // A fold from +0.0: an empty f64 sum is -0.0, printed `$-0.0000`.
    let savings = report
        .nodes
        .iter()
        .filter_map(|n| n.verdict.savings)
        .fold(0.0, |a, b| a + b);
    let total = report.nodes.len();
    format!(
        "{total} node{}: {} consolidatable (saving up to ${savings:.4}/h), {} blocked, {} disrupting",
        if total == 1 { "" } else { "s" },
        count(Status::Consolidatable),
        count(Status::Blocked),
        count(Status::Disrupting),
    )
}

/// Where a pod would go, in words.
pub fn destination(d: &Destination) -> String {
    match d {
        Destination::Existing { name } => name.clone(),
        Destination::NewNodeClaim {
            claim,
            nodepool,
            instance_type,
            options,
            price,
        } => format!(
            "new NodeClaim #{} ({nodepool}: {instance_type}, {options} option(s), {}/h)",
            claim + 1,
            format_price(*price)
        ),
        Destination::Unschedulable { why } => format!("nowhere: {why}"),
    }
}

/// A signed cost change: `-$0.1920/h`, `+$0.0100/h`, or `<unknown>`.
pub fn cost_change(change: Option<f64>) -> String {
    match change {
        Some(c) if c < 0.0 => format!("-${:.4}/h", -c),
        Some(c) => format!("+${c:.4}/h"),
        None => crate::render::UNKNOWN.to_string(),
    }
}

/// The what-if, like `kubectl describe`.
///
/// Errors: writing failed.
pub fn write_explain(out: &mut impl Write, w: &WhatIf, color: bool) -> io::Result<()> {
    let n = &w.node;
    let field = |out: &mut dyn Write, key: &str, value: &str| -> io::Result<()> {
        let key = format!("{key}:");
        writeln!(out, "{key:<KEY_WIDTH$}{value}")
    };
    field(out, "Node", n.node.as_deref().unwrap_or(NONE))?;
    field(out, "NodeClaim", &n.nodeclaim)?;
    field(out, "NodePool", n.nodepool.as_deref().unwrap_or(NONE))?;
    field(
        out,
        "Offering",
        &format!(
            "{} {} in {} ({}/h)",
            n.instance_type,
            n.capacity_type,
            n.zone,
            format_price(n.price)
        ),
    )?;
    field(out, "Pods To Move", &n.pods.to_string())?;
    let status = n.verdict.status.as_str();
    let status = if color {
        status.with(status_color(n.verdict.status)).to_string()
    } else {
        status.to_string()
    };
    field(out, "Verdict", &format!("{status}: {}", n.verdict.message))?;
    if w.blockers.is_empty() {
        field(out, "Blockers", NONE)?;
    } else {
        writeln!(out, "Blockers:")?;
        for b in &w.blockers {
            writeln!(out, "  {b}")?;
        }
    }
    field(out, "If Removed Now", &w.message)?;
    field(out, "Cost Change", &cost_change(w.cost_change))?;
    if let Some(score) = &w.balanced {
        field(out, "Balanced Score", &score.to_string())?;
    }
    if w.placements.is_empty() {
        return field(out, "Placements", NONE);
    }
    writeln!(out, "Placements:")?;
    let mut lines = vec![vec![Cell::plain("POD"), Cell::plain("DESTINATION")]];
    lines.extend(
        w.placements
            .iter()
            .map(|p| vec![Cell::plain(&p.pod), Cell::plain(destination(&p.to))]),
    );
    let mut table = Vec::new();
    write_aligned(&mut table, &lines, false)?;
    for line in String::from_utf8_lossy(&table).lines() {
        writeln!(out, "  {line}")?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
