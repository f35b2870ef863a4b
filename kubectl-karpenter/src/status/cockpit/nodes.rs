//! The cockpit's node tables: one line per NodeClaim (and, apart, per Node no NodeClaim names)
//! with requested cpu and memory as bars against the node's allocatable, pods, instance type,
//! capacity type, price, age and a state that says why a node goes. Pure.

use crossterm::style::Color;

use super::{UNKNOWN, bar};
use crate::status::fit::{self, Column, Span, Text};
use crate::status::fleet::OtherNode;
use crate::status::load::{Allocatable, Amounts, percent};
use crate::status::rows::{Row, State};
use crate::status::table::state_color;

/// Bar widths a NodeClaim line tries, widest first, before columns are dropped.
const ROW_BARS: [usize; 3] = [20, 12, 8];
/// The bar of a NodeClaim line when even the narrowest does not fit with every column.
const NARROW_BAR: usize = 5;

/// One line of the NodeClaim or other-node table.
pub(super) struct Line {
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

/// The cockpit's STATE of a NodeClaim, and its colour: a disrupted one says why
/// (`Terminating (Empty)`, `Disrupting (Underutilized)`, `Interrupted (SpotInterrupted)`;
/// `Disrupting` alone when its node carries the `karpenter.sh/disrupted` taint and no reason is
/// recorded), an unhealthy one which condition (`Unhealthy (Ready=False)`), a ready node running
/// only DaemonSet or static pods is `Empty`; otherwise the lifecycle state.
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
    pub(super) fn of_claim(row: &Row) -> Line {
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

    pub(super) fn of_other(node: &OtherNode) -> Line {
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

/// PODS: the pods on the node against the most it admits, `3/8` (eks-node-viewer's
/// `pods/maxPods`), or the count alone when its allocatable does not say.
fn pods_cell(pods: usize, max: Option<i64>) -> String {
    match max {
        Some(max) => format!("{pods}/{max}"),
        None => pods.to_string(),
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
            cells: cells(&|l| plain(&pods_cell(l.pods, l.allocatable.and_then(|a| a.pods)))),
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

/// The table of `rows`: the widest bars with which every column fits with the full headers,
/// else with the short ones (`REQ CPU`), else the narrowest bars with columns dropped by rank
/// (AGE first, then PODS, INSTANCE-TYPE, CAPACITY-TYPE, $/HOUR, memory, cpu; never the name or
/// the state).
pub(super) fn node_table(
    rows: &[Line],
    name: &'static str,
    state: &'static str,
    width: usize,
) -> Vec<Text> {
    for short in [false, true] {
        for bar in ROW_BARS {
            let columns = node_columns(rows, name, state, bar);
            if fit::fits(&columns, width, short) {
                return fit::table(columns, width).lines;
            }
        }
    }
    fit::table(node_columns(rows, name, state, NARROW_BAR), width).lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::fixtures;

    #[test]
    fn states_say_why_a_node_goes() {
        let doc = fixtures::document();
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
    fn bars_narrow_and_headers_shorten_before_columns_go() {
        let doc = fixtures::document();
        let rows: Vec<Line> = doc.node_claims.iter().map(Line::of_claim).collect();
        let header = |width| {
            let lines = node_table(&rows, "NODECLAIM", "STATE", width);
            fit::render(&lines[0], false)
        };
        let words = |h: String| {
            h.split("  ")
                .filter(|w| !w.is_empty())
                .map(|w| w.trim().to_owned())
                .collect::<Vec<_>>()
        };
        // Wide: full headers, every column.
        assert_eq!(
            words(header(200)),
            [
                "NODECLAIM",
                "REQUESTED CPU",
                "REQUESTED MEMORY",
                "PODS",
                "INSTANCE-TYPE",
                "CAPACITY-TYPE",
                "$/HOUR",
                "AGE",
                "STATE"
            ]
        );
        // Narrower: short headers keep every column before any is dropped.
        assert_eq!(
            words(header(100)),
            [
                "NODECLAIM",
                "REQ CPU",
                "REQ MEM",
                "PODS",
                "TYPE",
                "CAPACITY",
                "$/HOUR",
                "AGE",
                "STATE"
            ]
        );
        // 80 columns: AGE, PODS and INSTANCE-TYPE go; capacity type and price stay.
        assert_eq!(
            words(header(80)),
            [
                "NODECLAIM",
                "REQ CPU",
                "REQ MEM",
                "CAPACITY",
                "$/HOUR",
                "STATE"
            ]
        );
    }

    #[test]
    fn usage_is_a_bar_and_a_share_or_unknown() {
        let text = |t: Text| fit::render(&t, false);
        assert_eq!(text(usage(1100, Some(1930), 5)), "██░░░  56%");
        assert_eq!(text(usage(1, None, 5)), "-");
        assert_eq!(pods_cell(3, Some(8)), "3/8");
        assert_eq!(pods_cell(0, None), "0");
    }
}
