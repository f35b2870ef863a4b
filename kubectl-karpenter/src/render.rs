//! The `status` tables, laid out like kubectl's printer: UPPERCASE headers, no borders, each
//! column as wide as its widest cell plus 3 spaces (at least 6), the last column unpadded,
//! `<none>` for missing values; `-o wide` only appends columns. First the NodePool section, then
//! the NodeClaims, then the totals line, separated by blank lines. Hand-rolled rather than
//! `tabled` so the spacing matches kubectl's tabwriter exactly. Writes to any `Write`.

use std::io::{self, Write};

use crossterm::style::{Color, Stylize};

use crate::status::document::Document;
use crate::status::pools::PoolRow;
use crate::status::{Row, State};
use crate::upgrade::report;

/// Placeholder for a missing value.
pub const NONE: &str = "<none>";
/// Placeholder for a value that cannot be determined (an unknown price).
pub const UNKNOWN: &str = "<unknown>";

/// Spaces between columns (kubectl's tabwriter padding).
const PADDING: usize = 3;
/// Narrowest column, padding included (kubectl's tabwriter minimum width).
const MIN_WIDTH: usize = 6;

/// How to print the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableOptions {
    /// Append the wide columns (`-o wide`).
    pub wide: bool,
    /// Print header lines, the NodePool section and the totals line (off with `--no-headers`).
    pub headers: bool,
    /// Colour the STATE and UPGRADE columns with ANSI escapes.
    pub color: bool,
}

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

/// One table cell: its text and the colour it may be printed in (STATE, KIND).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Cell {
    /// What is printed.
    pub(crate) text: String,
    /// Its colour, used only when colour is on.
    pub(crate) color: Option<Color>,
}

impl Cell {
    /// A cell without colour.
    pub(crate) fn plain(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            color: None,
        }
    }

    /// The value, or [`NONE`].
    pub(crate) fn or_none(value: Option<&str>) -> Cell {
        Cell::plain(value.unwrap_or(NONE))
    }
}

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

/// `$0.0960`, or [`UNKNOWN`].
pub fn format_price(price: Option<f64>) -> String {
    price.map_or_else(|| UNKNOWN.to_owned(), |p| format!("${p:.4}"))
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

/// Pads every column but the last to a common width, as kubectl's tabwriter does.
pub(crate) fn write_aligned(
    out: &mut impl Write,
    lines: &[Vec<Cell>],
    color: bool,
) -> io::Result<()> {
    let columns = lines.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            let widest = lines
                .iter()
                .filter_map(|l| l.get(i))
                .map(|c| c.text.chars().count())
                .max()
                .unwrap_or(0);
            (widest + PADDING).max(MIN_WIDTH)
        })
        .collect();
    for line in lines {
        let mut text = String::new();
        for (i, cell) in line.iter().enumerate() {
            match cell.color.filter(|_| color) {
                Some(c) => text.push_str(&cell.text.as_str().with(c).to_string()),
                None => text.push_str(&cell.text),
            }
            if i + 1 < line.len() {
                let pad = widths[i].saturating_sub(cell.text.chars().count());
                text.extend(std::iter::repeat_n(' ', pad));
            }
        }
        writeln!(out, "{text}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::document::View;
    use crate::status::fixtures;

    fn render(opts: TableOptions) -> String {
        let snapshot = crate::status::document::Snapshot {
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

    #[test]
    fn narrow_columns_keep_kubectl_minimum_width() {
        let lines = vec![
            vec![Cell::plain("A"), Cell::plain("B"), Cell::plain("C")],
            vec![Cell::plain("x"), Cell::plain("yyyy"), Cell::plain("z")],
        ];
        let mut out = Vec::new();
        write_aligned(&mut out, &lines, false).expect("write");
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "A     B      C\nx     yyyy   z\n"
        );
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
