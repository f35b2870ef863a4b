//! The screen `kubectl karpenter status --watch` keeps on a terminal, to leave open beside
//! Karpenter: a summary (NodeClaims, pending pods, the cost per hour and per month of the nodes
//! that stay, how much of it is spot, and the pods' requests against every node's allocatable cpu
//! and memory as bars), the NodePools with their capacity against their limits, one line per
//! NodeClaim (requested cpu and memory as bars, pods, instance type, capacity type, price, age,
//! and its state: `Empty` for a ready node with nothing to move, and why a disrupted one goes,
//! e.g. `Terminating (Empty)`), and the nodes Karpenter does not manage, apart. Pure:
//! [`screen`] is a function of the document, the terminal's size and whether to colour.

use crossterm::style::Color;

use super::document::Document;
use super::fit::{self, Column, Span, Text};
use super::fleet::{Fleet, OtherNode};
use super::load::{Allocatable, Amounts, percent};
use super::pools::{PoolRow, bytes, cores};
use super::rows::{Row, State};
use super::table::{state_color, upgrade_color};

/// What fills a bar's requested part.
const FULL: char = '█';
/// What fills the rest of a bar.
const EMPTY: char = '░';
/// Placeholder of a value that is not known (yet).
const UNKNOWN: &str = "-";
/// Widest bar of the summary.
const SUMMARY_BAR: usize = 50;
/// Bar widths a NodeClaim line tries, widest first, before columns are dropped.
const ROW_BARS: [usize; 3] = [20, 12, 8];
/// The bar of a NodeClaim line when even the narrowest does not fit with every column.
const NARROW_BAR: usize = 5;

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

/// One line of the NodeClaim or other-node table.
struct Line {
    name: String,
    state: Text,
    requests: Amounts,
    allocatable: Option<Allocatable>,
    pods: usize,
    instance_type: Option<String>,
    capacity_type: Option<String>,
    price: Option<f64>,
    age: String,
}

/// The cockpit's STATE of a NodeClaim: a disrupted one says why (`Terminating (Empty)`,
/// `Disrupting (Underutilized)`, `Interrupted (SpotInterrupted)`; `Disrupting` alone when its
/// node carries the `karpenter.sh/disrupted` taint and no reason is recorded), an unhealthy one which
/// condition (`Unhealthy (Ready=False)`), a ready node running only DaemonSet or static pods is
/// `Empty`; otherwise the lifecycle state.
pub fn state_text(row: &Row) -> (String, Color) {
    let reason = row.disruption_reason.as_deref();
    match (row.state, reason) {
        (State::Terminating | State::Interrupted, Some(r)) => {
            (format!("{} ({r})", row.state), state_color(row.state))
        }
        (State::Ready | State::Drifted, Some(r)) => {
            (format!("Disrupting ({r})"), Color::DarkYellow)
        }
        (State::Ready | State::Drifted, None) if row.disrupted_taint => {
            ("Disrupting".to_owned(), Color::DarkYellow)
        }
        (State::Unhealthy, _) => {
            let condition = row.unhealthy.as_ref().map(|h| h.condition.as_str());
            match condition {
                Some(c) => (format!("Unhealthy ({c})"), state_color(row.state)),
                None => (row.state.to_string(), state_color(row.state)),
            }
        }
        (State::Ready, None) if row.node.is_some() && row.reschedulable_pods == 0 => {
            ("Empty".to_owned(), Color::Cyan)
        }
        (state, _) => (state.to_string(), state_color(state)),
    }
}

impl Line {
    fn of_claim(row: &Row) -> Line {
        let (state, color) = state_text(row);
        Line {
            name: row.name.clone(),
            state: vec![Span::colored(state, color)],
            requests: row.requests,
            allocatable: row.allocatable,
            pods: row.pods,
            instance_type: row.instance_type.clone(),
            capacity_type: row.capacity_type.clone(),
            price: row.price,
            age: row.age.clone(),
        }
    }

    fn of_other(node: &OtherNode) -> Line {
        let mut status = node.status.clone();
        if node.nodepool.is_some() {
            status.push_str(" (NodeClaim gone)");
        }
        let color = if node.status.starts_with("Ready") {
            Color::Green
        } else {
            Color::Red
        };
        Line {
            name: node.name.clone(),
            state: vec![Span::colored(status, color)],
            requests: node.requests,
            allocatable: node.allocatable,
            pods: node.pods,
            instance_type: node.instance_type.clone(),
            capacity_type: node.capacity_type.clone(),
            price: node.price,
            age: node.age.clone(),
        }
    }
}

/// `████░░░░  56%`: requests against allocatable, [`UNKNOWN`] when the allocatable is not
/// known.
fn usage(used: i64, of: Option<i64>, cells: usize) -> Text {
    match of {
        None => vec![Span::plain(UNKNOWN)],
        Some(of) => {
            let mut text = bar(used, of, cells);
            let pct = percent(used, of).map_or_else(|| UNKNOWN.to_owned(), |p| format!("{p}%"));
            text.push(Span::plain(format!(" {pct:>4}")));
            text
        }
    }
}

fn node_columns(rows: &[Line], name: &'static str, state: &'static str, bar: usize) -> Vec<Column> {
    let cells = |f: &dyn Fn(&Line) -> Text| rows.iter().map(f).collect::<Vec<Text>>();
    let plain = |s: &str| vec![Span::plain(s)];
    let or_unknown = |s: Option<&str>| plain(s.unwrap_or(UNKNOWN));
    vec![
        Column {
            header: name,
            short: name,
            drop_rank: 0,
            cells: cells(&|l| plain(&l.name)),
        },
        Column {
            header: "REQUESTED CPU",
            short: "REQ CPU",
            drop_rank: 2,
            cells: cells(&|l| usage(l.requests.cpu, l.allocatable.map(|a| a.cpu), bar)),
        },
        Column {
            header: "REQUESTED MEMORY",
            short: "REQ MEM",
            drop_rank: 3,
            cells: cells(&|l| usage(l.requests.memory, l.allocatable.map(|a| a.memory), bar)),
        },
        Column {
            header: "PODS",
            short: "PODS",
            drop_rank: 7,
            cells: cells(&|l| plain(&l.pods.to_string())),
        },
        Column {
            header: "INSTANCE-TYPE",
            short: "TYPE",
            drop_rank: 6,
            cells: cells(&|l| or_unknown(l.instance_type.as_deref())),
        },
        Column {
            header: "CAPACITY-TYPE",
            short: "CAPACITY",
            drop_rank: 5,
            cells: cells(&|l| or_unknown(l.capacity_type.as_deref())),
        },
        Column {
            header: "$/HOUR",
            short: "$/HOUR",
            drop_rank: 4,
            cells: cells(&|l| {
                plain(
                    &l.price
                        .map_or_else(|| UNKNOWN.to_owned(), |p| format!("${p:.3}")),
                )
            }),
        },
        Column {
            header: "AGE",
            short: "AGE",
            drop_rank: 8,
            cells: cells(&|l| plain(&l.age)),
        },
        Column {
            header: state,
            short: state,
            drop_rank: 0,
            cells: cells(&|l| l.state.clone()),
        },
    ]
}

/// The table of `rows`: the widest bars with which every column fits, else the narrowest
/// bars with columns dropped by rank (AGE first, then PODS, INSTANCE-TYPE, CAPACITY-TYPE,
/// $/HOUR, memory, cpu; never the name or the state).
fn node_table(rows: &[Line], name: &'static str, state: &'static str, width: usize) -> Vec<Text> {
    for bar in ROW_BARS {
        let columns = node_columns(rows, name, state, bar);
        if fit::fits(&columns, width, false) {
            return fit::table(columns, width).lines;
        }
    }
    fit::table(node_columns(rows, name, state, NARROW_BAR), width).lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::document::View;
    use crate::status::fixtures;

    fn doc() -> Document {
        Document::build(
            &fixtures::snapshot(),
            &View::default(),
            fixtures::now(),
            &fixtures::FixedPrices,
        )
    }

    #[test]
    fn no_line_passes_the_last_column_at_any_width() {
        let doc = doc();
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
        let lines = screen(&doc(), 80, 6, false);
        assert_eq!(lines.len(), 6);
        assert!(
            lines[5].starts_with("… ") && lines[5].contains(" more lines"),
            "{lines:#?}"
        );
        assert!(screen(&doc(), 80, 0, false).is_empty());
    }

    #[test]
    fn colour_only_when_asked() {
        crossterm::style::force_color_output(true);
        let plain = screen(&doc(), 120, 100, false);
        assert!(plain.iter().all(|l| !l.contains('\u{1b}')), "{plain:#?}");
        let coloured = screen(&doc(), 120, 100, true);
        assert!(coloured.iter().any(|l| l.contains('\u{1b}')));
        assert_eq!(plain.len(), coloured.len());
    }

    #[test]
    fn states_say_why_a_node_goes() {
        let doc = doc();
        let state = |name: &str| {
            let row = doc
                .node_claims
                .iter()
                .find(|r| r.name == name)
                .expect("a fixture row");
            state_text(row).0
        };
        assert_eq!(state("default-abcde"), "Ready");
        assert_eq!(state("gpu-uvwxy"), "Terminating");
        let mut row = doc.node_claims[0].clone();
        row.reschedulable_pods = 0;
        assert_eq!(state_text(&row).0, "Empty");
        row.disrupted_taint = true;
        assert_eq!(state_text(&row).0, "Disrupting");
        row.disruption_reason = Some("Empty".into());
        assert_eq!(state_text(&row).0, "Disrupting (Empty)");
        row.state = State::Terminating;
        assert_eq!(state_text(&row).0, "Terminating (Empty)");
        // No node yet: never called empty.
        row.state = State::Ready;
        row.disruption_reason = None;
        row.disrupted_taint = false;
        row.node = None;
        assert_eq!(state_text(&row).0, "Ready");
    }

    #[test]
    fn bars_round_down_and_stay_in_their_cells() {
        let text = |t: Text| fit::render(&t, false);
        assert_eq!(text(bar(56, 100, 10)), "█████░░░░░");
        assert_eq!(text(bar(150, 100, 4)), "████");
        assert_eq!(text(bar(5, 0, 3)), "░░░");
        assert_eq!(text(usage(1100, Some(1930), 5)), "██░░░  56%");
        assert_eq!(text(usage(1, None, 5)), "-");
    }
}
