//! Output of `orphans`: the kubectl-style table (KIND coloured: red where capacity runs or a
//! deletion is blocked, yellow for stale records), `-o wide` (instance type, zone, capacity type,
//! price and providerID before DETAIL, which stays last because it is long), `-o json|yaml`
//! (an `OrphanList` document) and `-o name`. Pure: writes to any `Write`.

use std::collections::{BTreeMap, HashSet};
use std::io::{self, Write};

use crossterm::style::Color;
use jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use super::{CloudView, InstanceState, Kind, Orphan};
use crate::age;
use crate::output::OutputError;
use crate::render::{Cell, TableOptions, format_price, write_aligned};

const HEADERS: [&str; 6] = ["KIND", "NAME", "NODEPOOL", "INSTANCE", "NODE", "SINCE"];
const WIDE_HEADERS: [&str; 5] = [
    "INSTANCE-TYPE",
    "CAPACITY-TYPE",
    "ZONE",
    "PRICE/HOUR",
    "PROVIDER-ID",
];
const DETAIL: &str = "DETAIL";

/// The colour of a kind: red when an instance may be running unaccounted for or a deletion is
/// blocked, yellow for records that are only stale.
pub fn kind_color(kind: Kind) -> Color {
    match kind {
        Kind::StuckTerminating
        | Kind::NodeWithoutNodeClaim
        | Kind::InstanceWithoutNodeClaim
        | Kind::DuplicateProviderID => Color::Red,
        Kind::NotLaunched | Kind::NotRegistered | Kind::InstanceGone => Color::Yellow,
    }
}

fn provider_id(instance: &InstanceState) -> Option<&str> {
    match instance {
        InstanceState::Running(i) => Some(&i.provider_id),
        InstanceState::Gone { provider_id } => Some(provider_id),
        InstanceState::Unchecked { provider_id } => provider_id.as_deref(),
        InstanceState::None => None,
    }
}

fn cells(o: &Orphan, now: Timestamp, wide: bool) -> Vec<Cell> {
    let running = o.instance.running();
    let mut cells = vec![
        Cell {
            text: o.kind.as_str().to_owned(),
            color: Some(kind_color(o.kind)),
        },
        Cell::plain(o.name.as_str()),
        Cell::or_none(o.nodepool.as_deref()),
        Cell::or_none(o.instance.id()),
        Cell::or_none(o.node.as_ref().map(|n| n.name.as_str())),
        Cell::plain(age::age(o.since, now)),
    ];
    if wide {
        let field = |f: fn(&super::CloudInstance) -> Option<&String>| {
            Cell::or_none(running.and_then(f).map(String::as_str))
        };
        cells.push(field(|i| i.instance_type.as_ref()));
        cells.push(field(|i| i.capacity_type.as_ref()));
        cells.push(field(|i| i.zone.as_ref()));
        cells.push(Cell::plain(match running {
            Some(i) => format_price(i.hourly_price),
            None => crate::render::NONE.to_owned(),
        }));
        cells.push(Cell::or_none(provider_id(&o.instance)));
    }
    cells.push(Cell::plain(if o.detail.is_empty() {
        crate::render::NONE.to_owned()
    } else {
        o.detail.join("; ")
    }));
    cells
}

/// The line under the table: counts per kind, what the cloud check covered, and what the
/// running orphaned instances cost.
pub fn summary(orphans: &[Orphan], cloud: &CloudView) -> String {
    let mut counts: BTreeMap<Kind, usize> = BTreeMap::new();
    for o in orphans {
        *counts.entry(o.kind).or_default() += 1;
    }
    let noun = if orphans.len() == 1 {
        "orphan"
    } else {
        "orphans"
    };
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let mut line = format!("{} {noun}: {}", orphans.len(), parts.join(", "));
    match cloud {
        CloudView::Checked { source, instances } => {
            let n = instances.len();
            let s = if n == 1 { "" } else { "s" };
            line.push_str(&format!("; cloud: {source}, {n} instance{s} checked"));
        }
        CloudView::Unchecked { reason } => {
            line.push_str(&format!("; cloud not checked ({reason})"));
        }
    }
    let mut seen = HashSet::new();
    // A duplicate's instance is its owner's, not orphaned.
    let cost: f64 = orphans
        .iter()
        .filter(|o| o.kind != Kind::DuplicateProviderID)
        .filter_map(|o| o.instance.running())
        .filter(|i| seen.insert(i.id.clone()))
        .filter_map(|i| i.hourly_price)
        .sum();
    if cost > 0.0 {
        line.push_str(&format!(
            "; running orphaned instances cost ${cost:.4}/hour"
        ));
    }
    line
}

/// Writes the table and, with headers, a blank line and the [`summary`]. Nothing for no rows.
///
/// Errors: writing failed.
pub fn write_table(
    out: &mut impl Write,
    orphans: &[Orphan],
    cloud: &CloudView,
    now: Timestamp,
    opts: TableOptions,
) -> io::Result<()> {
    if orphans.is_empty() {
        return Ok(());
    }
    let mut lines = Vec::with_capacity(orphans.len() + 1);
    if opts.headers {
        let mut header: Vec<Cell> = HEADERS.iter().map(|h| Cell::plain(*h)).collect();
        if opts.wide {
            header.extend(WIDE_HEADERS.iter().map(|h| Cell::plain(*h)));
        }
        header.push(Cell::plain(DETAIL));
        lines.push(header);
    }
    lines.extend(orphans.iter().map(|o| cells(o, now, opts.wide)));
    write_aligned(out, &lines, opts.color)?;
    if opts.headers {
        writeln!(out)?;
        writeln!(out, "{}", summary(orphans, cloud))?;
    }
    Ok(())
}

/// The `OrphanList` document of `-o json|yaml`: `cloud` (`checked`, and `source` or `reason`)
/// and `items`, keys sorted.
///
/// Errors: an orphan cannot be serialized.
pub fn list_value(orphans: &[Orphan], cloud: &CloudView) -> Result<Value, serde_json::Error> {
    let cloud = match cloud {
        CloudView::Checked { source, instances } => {
            json!({"checked": true, "source": source, "instances": instances.len()})
        }
        CloudView::Unchecked { reason } => json!({"checked": false, "reason": reason}),
    };
    let mut doc = json!({
        "kind": "OrphanList",
        "cloud": cloud,
        "items": serde_json::to_value(orphans)?,
    });
    doc.sort_all_objects();
    Ok(doc)
}

/// Writes the document as JSON (4-space indent) or YAML, as `yaml` says.
///
/// Errors: serializing or writing failed.
pub fn write_document(
    out: &mut impl Write,
    orphans: &[Orphan],
    cloud: &CloudView,
    yaml: bool,
) -> Result<(), OutputError> {
    let doc = list_value(orphans, cloud)?;
    if yaml {
        crate::output::write_yaml_value(out, &doc)
    } else {
        let mut ser = serde_json::Serializer::with_formatter(
            &mut *out,
            serde_json::ser::PrettyFormatter::with_indent(b"    "),
        );
        doc.serialize(&mut ser)?;
        writeln!(out)?;
        Ok(())
    }
}

/// Writes `nodeclaim.karpenter.sh/<name>`, `node/<name>` or `instance/<id>`, one per line.
///
/// Errors: writing failed.
pub fn write_names(out: &mut impl Write, orphans: &[Orphan]) -> io::Result<()> {
    for o in orphans {
        writeln!(out, "{}", o.qualified_name())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
