//! The `status` tables: the NodePool section (limits against usage, NodeClaim counts by
//! lifecycle state, where the serial upgrade stands), then one row per NodeClaim, then the totals
//! line, separated by blank lines, laid out by kubectl's printer ([`crate::render`]). STATE is
//! coloured by lifecycle state and UPGRADE by rollout state when colour is on.

use std::io::{self, Write};

use crossterm::style::Color;

use super::document::Document;
use super::pools::PoolRow;
use super::rows::{Row, State};
use crate::render::{Cell, TableOptions, format_price, write_aligned};
use crate::upgrade::report;

const HEADERS: [&str; 9] = [
    "NAME",
    "NODEPOOL",
    "STATE",
    "INSTANCE-TYPE",
    "CAPACITY-TYPE",
    "ZONE",
    "NODE",
    "PRICE/HOUR",
    "AGE",
];
const WIDE_HEADERS: [&str; 2] = ["NODECLASS", "PROVIDER-ID"];
const POOL_HEADERS: [&str; 8] = [
    "NODEPOOL",
    "CPU",
    "MEMORY",
    "READY",
    "IN-FLIGHT",
    "DRIFTED",
    "TERMINATING",
    "UPGRADE",
];
const POOL_WIDE_HEADERS: [&str; 1] = ["NODES"];

/// The colour of a state: green when ready, yellow while in flight, magenta when drifted, red
/// while terminating.
pub fn state_color(state: State) -> Color {
    match state {
        State::Ready => Color::Green,
        State::Launching | State::Registering | State::Initializing => Color::Yellow,
        State::Drifted => Color::Magenta,
        State::Terminating => Color::Red,
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

fn cells(row: &Row, wide: bool) -> Vec<Cell> {
    let mut cells = vec![
        Cell::plain(row.name.as_str()),
        Cell::or_none(row.nodepool.as_deref()),
        Cell {
            text: row.state.as_str().to_owned(),
            color: Some(state_color(row.state)),
        },
        Cell::or_none(row.instance_type.as_deref()),
        Cell::or_none(row.capacity_type.as_deref()),
        Cell::or_none(row.zone.as_deref()),
        Cell::or_none(row.node.as_deref()),
        Cell::plain(format_price(row.price)),
        Cell::plain(row.age.as_str()),
    ];
    if wide {
        cells.push(Cell::or_none(row.node_class.as_deref()));
        cells.push(Cell::or_none(row.provider_id.as_deref()));
    }
    cells
}

fn pool_cells(pool: &PoolRow, wide: bool) -> Vec<Cell> {
    let counts = pool.node_claims;
    let mut cells = vec![
        Cell::plain(pool.name.as_str()),
        Cell::plain(pool.usage_of("cpu")),
        Cell::plain(pool.usage_of("memory")),
        Cell::plain(counts.ready.to_string()),
        Cell::plain(counts.in_flight.to_string()),
        Cell::plain(counts.drifted.to_string()),
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
    use crate::status::document::{Snapshot, View};
    use crate::status::fixtures;

    fn render(opts: TableOptions) -> String {
        let snapshot = Snapshot {
            pools: fixtures::pools(),
            claims: fixtures::claims(),
        };
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
            got.starts_with("default-abcde   default   Ready          m5.large    on-demand "),
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
            ready_line.contains("default    \u{1b}[38;5;10mReady\u{1b}[39m          m5.large"),
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
    fn empty_writes_nothing() {
        let doc = Document {
            node_pools: Vec::new(),
            node_claims: Vec::new(),
            totals: crate::status::rows::Totals::default(),
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
