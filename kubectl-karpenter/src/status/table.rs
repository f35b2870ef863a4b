//! The `status` tables: the NodePool section (limits against usage, NodeClaim counts by
//! lifecycle state, where the serial upgrade stands), then one row per NodeClaim, then the totals
//! line, separated by blank lines, laid out by kubectl's printer ([`crate::render`]). STATE is
//! coloured by lifecycle state and UPGRADE by rollout state when colour is on; an interrupted
//! NodeClaim's STATE names the interruption, e.g. `Interrupted (SpotInterrupted)`.

use std::io::{self, Write};

use crossterm::style::Color;

use super::document::Document;
use super::load::percent;
use super::pools::{PoolRow, bytes, cores};
use super::rows::{Row, State};
use crate::render::{Cell, TableOptions, format_price, write_aligned};
use crate::upgrade::report;

/// The NodeClaim columns of the default table: what tells an idle or busy node at a glance,
/// within 100 columns for usual names and ages. CPU and memory are the pods' requests against
/// the node's allocatable (`REQ-`), as the cockpit's `REQ` bars are.
const HEADERS: [&str; 7] = [
    "NAME",
    "STATE",
    "INSTANCE-TYPE",
    "PODS",
    "REQ-CPU",
    "REQ-MEMORY",
    "AGE",
];
const WIDE_HEADERS: [&str; 10] = [
    "NODEPOOL",
    "CAPACITY-TYPE",
    "ZONE",
    "NODE",
    "PRICE/HOUR",
    "NODECLASS",
    "PROVIDER-ID",
    "LIMITED-BY",
    "DISRUPTION-REASON",
    "DRAIN-BY",
];
/// The NodePool columns: CPU and memory are its nodes' capacity against its limit
/// (`CAP/LIMIT-`, `-` without one), a different measure from the NodeClaims' requests.
const POOL_HEADERS: [&str; 9] = [
    "NODEPOOL",
    "CAP/LIMIT-CPU",
    "CAP/LIMIT-MEMORY",
    "READY",
    "IN-FLIGHT",
    "DRIFTED",
    "UNHEALTHY",
    "TERMINATING",
    "UPGRADE",
];
const POOL_WIDE_HEADERS: [&str; 1] = ["NODES"];

/// The colour of a state: green when ready, yellow while in flight, magenta when drifted, dark
/// red when interrupted, red when unhealthy or terminating.
pub fn state_color(state: State) -> Color {
    match state {
        State::Ready => Color::Green,
        State::Launching | State::Registering | State::Initializing => Color::Yellow,
        State::Drifted => Color::Magenta,
        State::Interrupted => Color::DarkRed,
        State::Unhealthy | State::Terminating => Color::Red,
    }
}

/// The STATE column: the state, and for an interrupted NodeClaim the interruption
/// (`Interrupted (SpotInterrupted)`).
pub fn state_cell(row: &Row) -> String {
    match (row.state, row.disruption_reason.as_deref()) {
        (State::Interrupted, Some(reason)) => format!("Interrupted ({reason})"),
        (state, _) => state.as_str().to_owned(),
    }
}

/// The colour of the UPGRADE column: cyan while a step runs, yellow when paused by an operator,
/// red when paused by the controller after a failed step, none otherwise.
pub fn upgrade_color(pool: &PoolRow) -> Option<Color> {
    match (pool.upgrade.phase, pool.upgrade.state) {
        (Some(_), _) => Some(Color::Cyan),
        (None, report::State::PausedByController) => Some(Color::Red),
        (None, report::State::Paused) => Some(Color::Yellow),
        (None, report::State::Running) => None,
    }
}

/// The PODS column: the pods on the node, with `(empty)` when a ready, drifted or unhealthy node
/// runs nothing consolidation would have to move (only DaemonSet and static pods, or none).
pub fn pods_cell(row: &Row) -> String {
    let settled = matches!(
        row.state,
        State::Ready | State::Drifted | State::Unhealthy | State::Interrupted
    );
    if settled && row.node.is_some() && row.reschedulable_pods == 0 {
        format!("{} (empty)", row.pods)
    } else {
        row.pods.to_string()
    }
}

/// The unit of an amount as [`bytes`] writes it (`Gi` of `7.1Gi`; empty for a plain number).
fn unit_of(amount: &str) -> &str {
    amount.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
}

/// The CPU or MEMORY column: `requested/allocatable (percent%)`, the unit written once when
/// both share it, e.g. `1.1/1.93 (56%)` (cores), `2.1/7.1Gi (29%)`, `128Mi/6.7Gi (1%)`;
/// [`crate::render::NONE`] when the allocatable is not known.
pub fn usage_cell(requested: i64, allocatable: Option<i64>, unit: fn(i64) -> String) -> Cell {
    let Some(allocatable) = allocatable else {
        return Cell::or_none(None);
    };
    let (requested_text, allocatable_text) = (unit(requested), unit(allocatable));
    let shared = unit_of(&allocatable_text);
    let requested_text = match requested_text.strip_suffix(shared) {
        Some(number) if !shared.is_empty() && unit_of(&requested_text) == shared => number,
        _ => &requested_text,
    };
    let mut text = format!("{requested_text}/{allocatable_text}");
    if let Some(p) = percent(requested, allocatable) {
        text.push_str(&format!(" ({p}%)"));
    }
    Cell::plain(text)
}

fn cells(row: &Row, wide: bool) -> Vec<Cell> {
    let mut cells = vec![
        Cell::plain(row.name.as_str()),
        Cell {
            text: state_cell(row),
            color: Some(state_color(row.state)),
        },
        Cell::or_none(row.instance_type.as_deref()),
        Cell::plain(pods_cell(row)),
        usage_cell(row.requests.cpu, row.allocatable.map(|a| a.cpu), |m| {
            cores(i128::from(m))
        }),
        usage_cell(
            row.requests.memory,
            row.allocatable.map(|a| a.memory),
            bytes,
        ),
        Cell::plain(row.age.as_str()),
    ];
    if wide {
        cells.push(Cell::or_none(row.nodepool.as_deref()));
        cells.push(Cell::or_none(row.capacity_cell().as_deref()));
        cells.push(Cell::or_none(row.zone.as_deref()));
        cells.push(Cell::or_none(row.node.as_deref()));
        cells.push(Cell::plain(format_price(row.price)));
        cells.push(Cell::or_none(row.node_class.as_deref()));
        cells.push(Cell::or_none(row.provider_id.as_deref()));
        cells.push(Cell::or_none(
            row.limited_by.as_ref().map(ToString::to_string).as_deref(),
        ));
        cells.push(Cell::or_none(row.disruption_reason.as_deref()));
        cells.push(Cell::or_none(
            row.drain_by.map(|t| t.to_string()).as_deref(),
        ));
    }
    cells
}

fn pool_cells(pool: &PoolRow, wide: bool) -> Vec<Cell> {
    let counts = pool.node_claims;
    let mut cells = vec![
        Cell::plain(pool.label()),
        Cell::plain(pool.usage_of("cpu")),
        Cell::plain(pool.usage_of("memory")),
        Cell::plain(counts.ready.to_string()),
        Cell::plain(counts.in_flight.to_string()),
        Cell::plain(counts.drifted.to_string()),
        Cell::plain(counts.unhealthy.to_string()),
        Cell::plain(counts.terminating.to_string()),
        Cell {
            text: pool.upgrade.summary(),
            color: upgrade_color(pool),
        },
    ];
    if wide {
        cells.push(Cell::plain(pool.usage_of("nodes")));
    }
    cells
}

fn header(names: &[&str], wide: &[&str], opts: TableOptions) -> Vec<Cell> {
    let extra = if opts.wide { wide } else { &[] };
    names.iter().chain(extra).map(|h| Cell::plain(*h)).collect()
}

/// Writes the status document as tables: with headers, the NodePool section (when there are
/// NodePools), the NodeClaims (when there are some) and the totals line, separated by blank
/// lines; without headers, the NodeClaim rows only. Writes nothing for an empty document (the
/// caller reports "No resources found").
///
/// Errors: writing to `out` failed.
pub fn write_status(out: &mut impl Write, doc: &Document, opts: TableOptions) -> io::Result<()> {
    if !opts.headers {
        let rows: Vec<Vec<Cell>> = doc
            .node_claims
            .iter()
            .map(|r| cells(r, opts.wide))
            .collect();
        return write_aligned(out, &rows, opts.color);
    }
    if doc.is_empty() {
        return Ok(());
    }
    if !doc.node_pools.is_empty() {
        let mut lines = vec![header(&POOL_HEADERS, &POOL_WIDE_HEADERS, opts)];
        lines.extend(doc.node_pools.iter().map(|p| pool_cells(p, opts.wide)));
        write_aligned(out, &lines, opts.color)?;
        writeln!(out)?;
    }
    if !doc.node_claims.is_empty() {
        let mut lines = vec![header(&HEADERS, &WIDE_HEADERS, opts)];
        lines.extend(doc.node_claims.iter().map(|r| cells(r, opts.wide)));
        write_aligned(out, &lines, opts.color)?;
        writeln!(out)?;
    }
    writeln!(out, "{}", doc.totals)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::document::View;
    use crate::status::fixtures;

    fn render(opts: TableOptions) -> String {
        let snapshot = fixtures::snapshot();
        let doc = Document::build(
            &snapshot,
            &View::default(),
            fixtures::now(),
            &fixtures::FixedPrices,
        );
        let mut out = Vec::new();
        write_status(&mut out, &doc, opts).expect("write to a Vec");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn no_headers_prints_nodeclaim_rows_only() {
        let got = render(TableOptions::default());
        assert_eq!(got.lines().count(), 7, "{got}");
        assert!(
            got.starts_with(
                "default-abcde   Ready          m5.large    3           1.1/1.93 (56%)   "
            ),
            "{got}"
        );
        assert!(!got.contains("nodeclaims:"), "{got}");
        assert!(!got.contains("UPGRADE"), "{got}");
    }

    fn strip_escapes(text: &str) -> String {
        let mut stripped = String::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                for c in chars.by_ref() {
                    if c == 'm' {
                        break;
                    }
                }
            } else {
                stripped.push(c);
            }
        }
        stripped
    }

    #[test]
    fn colour_wraps_only_state_and_upgrade_and_keeps_alignment() {
        crossterm::style::force_color_output(true);
        let plain = render(TableOptions {
            headers: true,
            ..TableOptions::default()
        });
        let coloured = render(TableOptions {
            headers: true,
            color: true,
            ..TableOptions::default()
        });
        assert_ne!(plain, coloured);
        let ready_line = coloured
            .lines()
            .find(|l| l.starts_with("default-abcde"))
            .expect("ready row");
        assert!(
            ready_line
                .starts_with("default-abcde   \u{1b}[38;5;10mReady\u{1b}[39m          m5.large"),
            "{ready_line:?}"
        );
        let gpu_pool = coloured
            .lines()
            .find(|l| l.starts_with("gpu ") && l.contains("Paused"))
            .expect("gpu pool row");
        assert!(
            gpu_pool.ends_with("\u{1b}[38;5;11mPaused\u{1b}[39m"),
            "{gpu_pool:?}"
        );
        assert_eq!(strip_escapes(&coloured), plain);
    }

    #[test]
    fn pods_cpu_and_memory_cells() {
        let doc = Document::build(
            &fixtures::snapshot(),
            &View::default(),
            fixtures::now(),
            &fixtures::FixedPrices,
        );
        let row = |name: &str| {
            doc.node_claims
                .iter()
                .find(|r| r.name == name)
                .expect("a fixture row")
        };
        // Two web pods and a DaemonSet's; only the DaemonSet's (empty); a node being drained
        // and one initializing are never called empty; no node, no pods.
        assert_eq!(pods_cell(row("default-abcde")), "3");
        assert_eq!(pods_cell(row("default-drift")), "1 (empty)");
        assert_eq!(pods_cell(row("gpu-uvwxy")), "2");
        assert_eq!(pods_cell(row("gpu-pqrst")), "0");
        assert_eq!(pods_cell(row("stray")), "0");
        let cpu = |m: i64| cores(i128::from(m));
        assert_eq!(usage_cell(1100, Some(1930), cpu).text, "1.1/1.93 (56%)");
        assert_eq!(usage_cell(250, Some(4000), cpu).text, "0.25/4 (6%)");
        assert_eq!(
            usage_cell(2176 << 20, Some(7291 << 20), bytes).text,
            "2.1/7.1Gi (29%)"
        );
        assert_eq!(
            usage_cell(128 << 20, Some(6903 << 20), bytes).text,
            "128Mi/6.7Gi (1%)"
        );
        assert_eq!(usage_cell(0, Some(16 << 30), bytes).text, "0/16Gi (0%)");
        // Nothing allocatable: no share; unknown allocatable: <none>.
        assert_eq!(usage_cell(0, Some(0), cpu).text, "0/0");
        assert_eq!(usage_cell(100, None, cpu).text, "<none>");
    }

    #[test]
    fn empty_writes_nothing() {
        let doc = Document {
            node_pools: Vec::new(),
            node_claims: Vec::new(),
            totals: crate::status::rows::Totals::default(),
            other_nodes: Vec::new(),
            fleet: crate::status::fleet::Fleet::default(),
        };
        let mut out = Vec::new();
        let opts = TableOptions {
            headers: true,
            ..TableOptions::default()
        };
        write_status(&mut out, &doc, opts).expect("write");
        assert!(out.is_empty());
    }
}
