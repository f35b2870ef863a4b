//! The screen `kubectl karpenter status --watch` keeps on a terminal, to leave open beside
//! Karpenter: a summary (NodeClaims, pending pods, the cost per hour and per month of the nodes
//! that stay, how much of it is spot, and the pods' requests against every node's allocatable cpu
//! and memory as bars), the NodePools with their capacity against their limits, one line per
//! NodeClaim (requested cpu and memory as bars, pods, instance type, capacity type, price, age,
//! and its state: `Empty` for a ready node with nothing to move, and why a disrupted one goes,
//! e.g. `Terminating (Empty)`), and the nodes Karpenter does not manage, apart. Pure:
//! [`screen`] is a function of the document, the terminal's size and whether to colour.

use crossterm::style::Color;

pub mod nodes;

use nodes::{Line, node_table};

use super::document::Document;
use super::fit::{self, Column, Span, Text};
use super::fleet::Fleet;
use super::load::percent;
use super::pools::{PoolRow, bytes, cores};
use super::table::upgrade_color;

/// What fills a bar's requested part.
const FULL: char = '█';
/// What fills the rest of a bar.
const EMPTY: char = '░';
/// Placeholder of a value that is not known (yet).
const UNKNOWN: &str = "-";
/// Widest bar of the summary.
const SUMMARY_BAR: usize = 50;

/// The screen for `doc` on a terminal `width` columns wide and `height` lines high, coloured
/// when `color` is on: every line at most `width` columns (escapes aside), at most `height`
/// lines (the last one then says how many were left out).
pub fn screen(doc: &Document, width: usize, height: usize, color: bool) -> Vec<String> {
    let mut lines: Vec<Text> = summary(&doc.fleet, width);
    if !doc.node_pools.is_empty() {
        lines.push(Vec::new());
        lines.extend(pool_table(&doc.node_pools, width));
    }
    lines.push(Vec::new());
    if doc.node_claims.is_empty() {
        lines.push(vec![Span::plain("No NodeClaims")]);
    } else {
        let rows: Vec<Line> = doc.node_claims.iter().map(Line::of_claim).collect();
        lines.extend(node_table(&rows, "NODECLAIM", "STATE", width));
    }
    if !doc.other_nodes.is_empty() {
        lines.push(Vec::new());
        lines.push(fit::cut(
            &[Span::plain(
                "Nodes without a NodeClaim (not managed by Karpenter):",
            )],
            width,
        ));
        let rows: Vec<Line> = doc.other_nodes.iter().map(Line::of_other).collect();
        lines.extend(node_table(&rows, "NODE", "STATUS", width));
    }
    if lines.len() > height {
        let left_out = lines.len() - height.saturating_sub(1);
        lines.truncate(height.saturating_sub(1));
        if height > 0 {
            let more =
                format!("… {left_out} more lines: enlarge the terminal, or use --nodepool or -l");
            lines.push(fit::cut(&[Span::plain(more)], width));
        }
    }
    lines.iter().map(|l| fit::render(l, color)).collect()
}

/// USD per hour with three decimals (`$1.335/h`).
fn per_hour(usd: f64) -> String {
    format!("${usd:.3}/h")
}

/// The summary: one line of counts and cost, then the cpu and memory requested of every node's
/// allocatable.
fn summary(fleet: &Fleet, width: usize) -> Vec<Text> {
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut items: Vec<(u8, Text)> = vec![(
        0,
        vec![Span::plain(plural(
            fleet.node_claims,
            "NodeClaim",
            "NodeClaims",
        ))],
    )];
    if fleet.other_nodes > 0 {
        let text = format!(
            "+{}",
            plural(fleet.other_nodes, "other node", "other nodes")
        );
        items.push((6, vec![Span::plain(text)]));
    }
    let pending = plural(fleet.pending_pods, "pending pod", "pending pods");
    items.push((
        1,
        vec![match fleet.pending_pods {
            0 => Span::plain(pending),
            _ => Span::colored(pending, Color::Yellow),
        }],
    ));
    items.push((2, vec![Span::plain(per_hour(fleet.price_per_hour))]));
    items.push((
        4,
        vec![Span::plain(format!("${:.0}/month", fleet.price_per_month))],
    ));
    let spot = format!(
        "spot {}/{} nodes {}",
        fleet.spot_nodes,
        fleet.staying_nodes,
        per_hour(fleet.spot_price_per_hour)
    );
    items.push((3, vec![Span::plain(spot)]));
    if fleet.terminating_price_per_hour > 0.0 {
        let leaving = format!("{} terminating", per_hour(fleet.terminating_price_per_hour));
        items.push((5, vec![Span::colored(leaving, Color::Red)]));
    }
    if fleet.unpriced > 0 {
        items.push((7, vec![Span::plain(format!("{} unpriced", fleet.unpriced))]));
    }
    let cpu = Resource {
        label: "CPU",
        used: fleet.requested.cpu,
        of: fleet.allocatable.cpu,
        amount: |m| cores(i128::from(m)),
        unit: " cores",
    };
    let memory = Resource {
        label: "Memory",
        used: fleet.requested.memory,
        of: fleet.allocatable.memory,
        amount: bytes,
        unit: "",
    };
    // One bar width for both lines, so that they line up.
    let room = [&cpu, &memory]
        .iter()
        .map(|r| width.saturating_sub(LABEL + 2 + r.text().chars().count()))
        .min()
        .unwrap_or(0);
    vec![
        fit::items(items, width),
        cpu.line(room, width),
        memory.line(room, width),
    ]
}

/// Width of the label of a summary bar (`Memory` and spaces).
const LABEL: usize = 8;

/// One resource of the summary: requests against allocatable.
struct Resource {
    label: &'static str,
    /// Requested, in the resource's unit (millicores, bytes).
    used: i64,
    /// Allocatable, in the same unit.
    of: i64,
    /// Writes an amount readably (`2.4`, `4.5Gi`).
    amount: fn(i64) -> String,
    /// After the allocatable (` cores`).
    unit: &'static str,
}

impl Resource {
    /// ` 11%  2.4 of 21.47 cores requested`.
    fn text(&self) -> String {
        let pct =
            percent(self.used, self.of).map_or_else(|| UNKNOWN.to_owned(), |p| format!("{p}%"));
        format!(
            "{pct:>4}  {} of {}{} requested",
            (self.amount)(self.used),
            (self.amount)(self.of),
            self.unit
        )
    }

    /// `CPU     ████░░░░  11%  2.4 of 21.47 cores requested`: a bar `room` columns wide (at
    /// most [`SUMMARY_BAR`]), left out below 5 columns.
    fn line(&self, room: usize, width: usize) -> Text {
        let mut line = vec![Span::plain(format!("{:<LABEL$}", self.label))];
        if room >= 5 {
            line.extend(bar(self.used, self.of, room.min(SUMMARY_BAR)));
            line.push(Span::plain("  "));
        }
        line.push(Span::plain(self.text()));
        fit::cut(&line, width)
    }
}

/// A bar `cells` wide whose requested part is `used` of `of`, rounded down (full at or over
/// 100%), coloured green.
fn bar(used: i64, of: i64, cells: usize) -> Text {
    let filled = if of <= 0 {
        0
    } else {
        let share = used.clamp(0, of) as f64 / of as f64;
        ((share * cells as f64).floor() as usize).min(cells)
    };
    vec![
        Span::colored(FULL.to_string().repeat(filled), Color::Green),
        Span::colored(EMPTY.to_string().repeat(cells - filled), Color::DarkGrey),
    ]
}

/// A NodePool's capacity against its limit: `6/1000`, `4/-` without a limit.
fn pool_table(pools: &[PoolRow], width: usize) -> Vec<Text> {
    let cells = |f: &dyn Fn(&PoolRow) -> Text| pools.iter().map(f).collect::<Vec<Text>>();
    let plain = |s: String| vec![Span::plain(s)];
    let columns = vec![
        Column {
            header: "NODEPOOL",
            short: "NODEPOOL",
            drop_rank: 0,
            cells: cells(&|p| plain(p.label())),
        },
        Column {
            header: "CAPACITY/LIMIT CPU",
            short: "CAP/LIMIT CPU",
            drop_rank: 2,
            cells: cells(&|p| plain(p.usage_of("cpu"))),
        },
        Column {
            header: "CAPACITY/LIMIT MEMORY",
            short: "CAP/LIMIT MEM",
            drop_rank: 3,
            cells: cells(&|p| plain(p.usage_of("memory"))),
        },
        Column {
            header: "READY",
            short: "READY",
            drop_rank: 4,
            cells: cells(&|p| plain(p.node_claims.ready.to_string())),
        },
        Column {
            header: "IN-FLIGHT",
            short: "IN-FLIGHT",
            drop_rank: 5,
            cells: cells(&|p| plain(p.node_claims.in_flight.to_string())),
        },
        Column {
            header: "DRIFTED",
            short: "DRIFTED",
            drop_rank: 7,
            cells: cells(&|p| plain(p.node_claims.drifted.to_string())),
        },
        Column {
            header: "TERMINATING",
            short: "TERM",
            drop_rank: 6,
            cells: cells(&|p| plain(p.node_claims.terminating.to_string())),
        },
        Column {
            header: "UPGRADE",
            short: "UPGRADE",
            drop_rank: 1,
            cells: cells(&|p| {
                let text = p.upgrade.summary();
                match upgrade_color(p) {
                    Some(c) => vec![Span::colored(text, c)],
                    None => plain(text),
                }
            }),
        },
    ];
    fit::table(columns, width).lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::fixtures;

    #[test]
    fn no_line_passes_the_last_column_at_any_width() {
        let doc = fixtures::document();
        for width in [0, 1, 5, 20, 40, 60, 79, 80, 81, 120, 200, 300] {
            let lines = screen(&doc, width, 100, false);
            for line in &lines {
                assert!(
                    line.chars().count() <= width,
                    "{width} columns: {line:?} is {} wide",
                    line.chars().count()
                );
            }
            // The state of every NodeClaim survives down to 40 columns.
            if width >= 60 {
                assert!(
                    lines.iter().any(|l| l.ends_with("Terminating")),
                    "{width}: {lines:#?}"
                );
            }
        }
    }

    #[test]
    fn a_short_terminal_says_how_much_is_left_out() {
        let lines = screen(&fixtures::document(), 80, 6, false);
        assert_eq!(lines.len(), 6);
        assert!(
            lines[5].starts_with("… ") && lines[5].contains(" more lines"),
            "{lines:#?}"
        );
        assert!(screen(&fixtures::document(), 80, 0, false).is_empty());
    }

    #[test]
    fn colour_only_when_asked() {
        crossterm::style::force_color_output(true);
        let plain = screen(&fixtures::document(), 120, 100, false);
        assert!(plain.iter().all(|l| !l.contains('\u{1b}')), "{plain:#?}");
        let coloured = screen(&fixtures::document(), 120, 100, true);
        assert!(coloured.iter().any(|l| l.contains('\u{1b}')));
        assert_eq!(plain.len(), coloured.len());
    }

    #[test]
    fn bars_round_down_and_stay_in_their_cells() {
        let text = |t: Text| fit::render(&t, false);
        assert_eq!(text(bar(56, 100, 10)), "█████░░░░░");
        assert_eq!(text(bar(150, 100, 4)), "████");
        assert_eq!(text(bar(5, 0, 3)), "░░░");
    }
}
