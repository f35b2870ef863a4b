//! How `history` prints records: a kubectl-style table (AGE, NODECLAIM, NODEPOOL,
//! INSTANCE-TYPE, REASON, OUTCOME, PODS, COST-CHANGE; `-o wide` adds NODE, ZONE, CAPACITY-TYPE,
//! PRICE/HOUR, REPLACEMENT, DECIDED, MESSAGE), or the records as a JSON or YAML list. Pure:
//! writes to any `Write`.

use std::io::Write;

use crds::history::Record;
use crds::upgrade::Outcome;
use crossterm::style::Color;
use jiff::Timestamp;

use crate::age::age;
use crate::output::{OutputError, write_json_value, write_yaml_value};
use crate::render::{Cell, NONE, TableOptions, UNKNOWN, format_price, write_aligned};

const HEADERS: [&str; 8] = [
    "AGE",
    "NODECLAIM",
    "NODEPOOL",
    "INSTANCE-TYPE",
    "REASON",
    "OUTCOME",
    "PODS",
    "COST-CHANGE",
];
const WIDE_HEADERS: [&str; 7] = [
    "NODE",
    "ZONE",
    "CAPACITY-TYPE",
    "PRICE/HOUR",
    "REPLACEMENT",
    "DECIDED",
    "MESSAGE",
];

/// `-$0.0960/h`, `+$0.0120/h`, `$0.0000/h`; [`UNKNOWN`] without a price.
pub fn format_cost_change(change: Option<f64>) -> String {
    match change {
        None => UNKNOWN.to_owned(),
        Some(c) if c.abs() < 0.00005 => "$0.0000/h".to_owned(),
        Some(c) if c < 0.0 => format!("-${:.4}/h", -c),
        Some(c) => format!("+${c:.4}/h"),
    }
}

fn outcome(r: &Record) -> Cell {
    match r.outcome {
        Outcome::Succeeded => Cell::plain("Removed"),
        Outcome::RolledBack => Cell {
            text: "RolledBack".into(),
            color: Some(Color::Yellow),
        },
    }
}

fn row(r: &Record, now: Timestamp, wide: bool) -> Vec<Cell> {
    let cost = match r.outcome {
        Outcome::RolledBack => Cell::plain(NONE),
        Outcome::Succeeded => Cell {
            text: format_cost_change(r.cost_change),
            color: r
                .cost_change
                .filter(|c| c.abs() >= 0.00005)
                .map(|c| if c < 0.0 { Color::Green } else { Color::Red }),
        },
    };
    let mut cells = vec![
        Cell::plain(age(Some(r.finished), now)),
        Cell::plain(&r.nodeclaim),
        Cell::or_none(Some(r.nodepool.as_str()).filter(|p| !p.is_empty())),
        Cell::or_none(r.instance_type.as_deref()),
        Cell::plain(&r.reason),
        outcome(r),
        Cell::plain(r.pods_moved.to_string()),
        cost,
    ];
    if wide {
        let replacement = r.replacement.as_ref().map(|x| match &x.instance_type {
            Some(t) => format!("{} ({t})", x.nodeclaim),
            None => x.nodeclaim.clone(),
        });
        cells.extend([
            Cell::or_none(r.node.as_deref()),
            Cell::or_none(r.zone.as_deref()),
            Cell::or_none(r.capacity_type.as_deref()),
            Cell::plain(format_price(r.price)),
            Cell::or_none(replacement.as_deref()),
            Cell::plain(r.decided.to_string()),
            Cell::or_none(r.message.as_deref()),
        ]);
    }
    cells
}

/// The table of `records` (in the order given).
///
/// Errors: writing failed.
pub fn write_table(
    out: &mut impl Write,
    records: &[Record],
    now: Timestamp,
    options: TableOptions,
) -> Result<(), OutputError> {
    let mut lines = Vec::new();
    if options.headers {
        let mut header: Vec<Cell> = HEADERS.iter().map(|h| Cell::plain(*h)).collect();
        if options.wide {
            header.extend(WIDE_HEADERS.iter().map(|h| Cell::plain(*h)));
        }
        lines.push(header);
    }
    lines.extend(records.iter().map(|r| row(r, now, options.wide)));
    write_aligned(out, &lines, options.color)?;
    Ok(())
}

/// The records as a JSON (`yaml == false`) or YAML list.
///
/// Errors: encoding or writing failed.
pub fn write_document(
    out: &mut impl Write,
    records: &[Record],
    yaml: bool,
) -> Result<(), OutputError> {
    if yaml {
        write_yaml_value(out, &records)
    } else {
        write_json_value(out, &records)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crds::history::{Replacement, reason};

    fn at(s: &str) -> Timestamp {
        s.parse().expect("time")
    }

    /// Four records, oldest first: an empty node (default-a, 2 days ago), an underutilized
    /// node replaced by a cheaper one (default-b, 30m ago), a user's delete in another
    /// NodePool without a price (gpu-c, 20m ago), a rolled-back upgrade step (default-d, 10m
    /// ago).
    pub(crate) fn sample() -> Vec<Record> {
        let base = Record {
            id: "u-a".into(),
            nodeclaim: "default-a".into(),
            nodepool: "default".into(),
            node: Some("ip-10-0-1-1.ec2.internal".into()),
            instance_type: Some("m5.large".into()),
            capacity_type: Some("on-demand".into()),
            zone: Some("us-east-1a".into()),
            reason: reason::EMPTY.into(),
            message: None,
            outcome: Outcome::Succeeded,
            decided: at("2026-02-27T11:59:00Z"),
            finished: at("2026-02-27T12:00:00Z"),
            pods_moved: 0,
            pods: vec![],
            price: Some(0.096),
            replacement: None,
            cost_change: Some(-0.096),
        };
        let b = Record {
            id: "u-b".into(),
            nodeclaim: "default-b".into(),
            node: Some("ip-10-0-1-2.ec2.internal".into()),
            instance_type: Some("m5.2xlarge".into()),
            reason: reason::UNDERUTILIZED.into(),
            decided: at("2026-03-01T11:29:00Z"),
            finished: at("2026-03-01T11:30:00Z"),
            pods_moved: 3,
            pods: vec![
                "shop/cart-0".into(),
                "shop/web-0".into(),
                "shop/web-1".into(),
            ],
            price: Some(0.384),
            replacement: Some(Replacement {
                nodeclaim: "default-r".into(),
                instance_type: Some("m5.large".into()),
                price: Some(0.096),
                replaces: 1,
            }),
            cost_change: Some(0.096 - 0.384),
            ..base.clone()
        };
        let c = Record {
            id: "u-c".into(),
            nodeclaim: "gpu-c".into(),
            nodepool: "gpu".into(),
            node: None,
            instance_type: None,
            capacity_type: None,
            zone: None,
            reason: reason::DELETED.into(),
            decided: at("2026-03-01T11:39:00Z"),
            finished: at("2026-03-01T11:40:00Z"),
            price: None,
            cost_change: None,
            ..base.clone()
        };
        let d = Record {
            id: "u-d/rollback/default-r2".into(),
            nodeclaim: "default-d".into(),
            reason: reason::DRIFTED.into(),
            message: Some(
                "replacement default-r2 did not initialize within 600s; rolled back".into(),
            ),
            outcome: Outcome::RolledBack,
            decided: at("2026-03-01T11:40:00Z"),
            finished: at("2026-03-01T11:50:00Z"),
            price: None,
            replacement: Some(Replacement {
                nodeclaim: "default-r2".into(),
                instance_type: None,
                price: None,
                replaces: 1,
            }),
            cost_change: None,
            ..base.clone()
        };
        vec![base, b, c, d]
    }

    fn now() -> Timestamp {
        at("2026-03-01T12:00:00Z")
    }

    fn table(options: TableOptions) -> String {
        let mut out = Vec::new();
        write_table(&mut out, &sample(), now(), options).expect("write");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn table_snapshot() {
        let got = table(TableOptions {
            wide: false,
            headers: true,
            color: false,
        });
        let want = "\
AGE   NODECLAIM   NODEPOOL   INSTANCE-TYPE   REASON          OUTCOME      PODS   COST-CHANGE
2d    default-a   default    m5.large        Empty           Removed      0      -$0.0960/h
30m   default-b   default    m5.2xlarge      Underutilized   Removed      3      -$0.2880/h
20m   gpu-c       gpu        <none>          Deleted         Removed      0      <unknown>
10m   default-d   default    m5.large        Drifted         RolledBack   0      <none>
";
        assert_eq!(got, want, "\n{got}");
        let rows = table(TableOptions {
            wide: false,
            headers: false,
            color: false,
        });
        assert_eq!(rows.lines().count(), 4);
        assert!(rows.starts_with("2d "));
    }

    #[test]
    fn wide_table_snapshot() {
        let got = table(TableOptions {
            wide: true,
            headers: true,
            color: false,
        });
        let lines: Vec<&str> = got.lines().collect();
        assert!(lines[0].ends_with(
            "COST-CHANGE   NODE                       ZONE         CAPACITY-TYPE   PRICE/HOUR   REPLACEMENT            DECIDED                MESSAGE"
        ), "{}", lines[0]);
        assert!(lines[2].ends_with(
            "ip-10-0-1-2.ec2.internal   us-east-1a   on-demand       $0.3840      default-r (m5.large)   2026-03-01T11:29:00Z   <none>"
        ), "{}", lines[2]);
        assert!(lines[3].contains("<unknown>     <none>"), "{}", lines[3]);
        assert!(
            lines[4]
                .ends_with("replacement default-r2 did not initialize within 600s; rolled back"),
            "{}",
            lines[4]
        );
    }

    #[test]
    fn interruption_and_repair_reasons_read_as_recorded() {
        let base = sample().remove(1);
        let record = |id: &str, reason: &str, message: Option<&str>| Record {
            id: id.into(),
            nodeclaim: format!("default-{id}"),
            capacity_type: Some("spot".into()),
            instance_type: Some("m5.large".into()),
            reason: reason.into(),
            message: message.map(String::from),
            price: Some(0.035),
            replacement: Some(Replacement {
                nodeclaim: format!("default-{id}r"),
                instance_type: Some("c5.large".into()),
                price: Some(0.032),
                replaces: 1,
            }),
            cost_change: Some(0.032 - 0.035),
            ..base.clone()
        };
        let records = [
            record(
                "s",
                "SpotInterrupted",
                Some("Spot interruption warning was triggered"),
            ),
            record("h", "ScheduledChange", None),
            record("p", "InstanceStopped", None),
            Record {
                replacement: None,
                cost_change: Some(-0.035),
                pods_moved: 0,
                ..record("t", "InstanceTerminated", None)
            },
            record("u", "Unhealthy", Some("Ready=False for 30m")),
        ];
        for kind in [
            karpenter_core::interruption::Kind::SpotInterrupted,
            karpenter_core::interruption::Kind::ScheduledChange,
            karpenter_core::interruption::Kind::InstanceStopped,
            karpenter_core::interruption::Kind::InstanceTerminated,
        ] {
            let reason = kind.history_reason().expect("a removal");
            assert!(records.iter().any(|r| r.reason == reason), "{reason}");
        }
        let mut out = Vec::new();
        let options = TableOptions {
            wide: true,
            headers: true,
            color: false,
        };
        write_table(&mut out, &records, now(), options).expect("write");
        let got = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = got.lines().collect();
        assert!(
            lines[0].starts_with(
                "AGE   NODECLAIM   NODEPOOL   INSTANCE-TYPE   REASON               OUTCOME   PODS   COST-CHANGE"
            ),
            "\n{got}"
        );
        assert!(
            lines[1].starts_with(
                "30m   default-s   default    m5.large        SpotInterrupted      Removed   3      -$0.0030/h    ip-10-0-1-2.ec2.internal   us-east-1a   spot            $0.0350      default-sr (c5.large)"
            ),
            "\n{got}"
        );
        assert!(
            lines[1].ends_with("Spot interruption warning was triggered"),
            "\n{got}"
        );
        assert!(
            lines[4].starts_with(
                "30m   default-t   default    m5.large        InstanceTerminated   Removed   0      -$0.0350/h"
            ),
            "\n{got}"
        );
        assert!(lines[5].contains(" Unhealthy "), "\n{got}");
        assert!(lines[5].ends_with("Ready=False for 30m"), "\n{got}");
    }

    #[test]
    fn colour_only_when_asked() {
        let plain = table(TableOptions {
            wide: false,
            headers: true,
            color: false,
        });
        assert!(!plain.contains('\u{1b}'));
        let coloured = table(TableOptions {
            wide: false,
            headers: true,
            color: true,
        });
        assert!(coloured.contains('\u{1b}'));
    }

    #[test]
    fn cost_changes_read_as_signed_dollars_per_hour() {
        assert_eq!(format_cost_change(Some(-0.5)), "-$0.5000/h");
        assert_eq!(format_cost_change(Some(0.0123)), "+$0.0123/h");
        assert_eq!(format_cost_change(Some(-0.00001)), "$0.0000/h");
        assert_eq!(format_cost_change(None), "<unknown>");
    }

    #[test]
    fn documents_are_camel_case_lists() {
        let mut json = Vec::new();
        write_document(&mut json, &sample(), false).expect("json");
        let v: serde_json::Value = serde_json::from_slice(&json).expect("valid JSON");
        assert_eq!(v.as_array().map(Vec::len), Some(4));
        assert_eq!(v[1]["podsMoved"], 3);
        assert_eq!(v[1]["replacement"]["instanceType"], "m5.large");
        assert_eq!(v[3]["outcome"], "RolledBack");
        assert_eq!(v[0]["finished"], "2026-02-27T12:00:00Z");
        assert!(
            String::from_utf8_lossy(&json).contains("\n    {"),
            "indented by 4"
        );
        let mut yaml = Vec::new();
        write_document(&mut yaml, &sample(), true).expect("yaml");
        let text = String::from_utf8(yaml).expect("utf-8");
        assert!(text.starts_with("- id: u-a\n"), "{text}");
        assert!(text.contains("  costChange: -0.096\n"), "{text}");
        let back: Vec<Record> = serde_saphyr::from_str(&text).expect("YAML reads back");
        assert_eq!(back, sample());
    }
}
