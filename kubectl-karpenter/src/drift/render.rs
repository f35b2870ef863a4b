//! Output of `drift explain`: one block per NodeClaim laid out like `kubectl describe` (keys
//! aligned, nested sections indented two spaces) and a summary line, or the reports as a JSON or
//! YAML array. Pure: writes to any `Write`; colour (the verdict and hash comparisons) only when
//! asked.

use std::fmt::Display;
use std::io::{self, Write};

use crossterm::style::{Color, Stylize};
use jiff::Timestamp;
use karpenter_core::lifecycle::drift::HashComparison;
use serde::Serialize;

use super::report::{HashReport, LiveVerdict, Report, Source};
use crate::age;
use crate::output::OutputError;
use crate::render::NONE;

/// Column where values start (`EC2NodeClass Hash:` is a section header, longer on purpose).
const KEY_WIDTH: usize = 15;

/// Writes text, coloured or not.
struct Block<'a, W: Write> {
    out: &'a mut W,
    color: bool,
}

impl<W: Write> Block<'_, W> {
    /// `Key:` padded to [`KEY_WIDTH`], then the value.
    fn field(&mut self, indent: usize, key: &str, value: impl Display) -> io::Result<()> {
        self.colored(indent, key, value, None)
    }

    fn colored(
        &mut self,
        indent: usize,
        key: &str,
        value: impl Display,
        color: Option<Color>,
    ) -> io::Result<()> {
        let key = format!("{}{key}:", " ".repeat(indent));
        let value = value.to_string();
        let value = match color.filter(|_| self.color) {
            Some(c) => value.as_str().with(c).to_string(),
            None => value,
        };
        writeln!(self.out, "{key:<KEY_WIDTH$}{value}")
    }

    /// A section header (`Changes:`).
    fn header(&mut self, key: &str) -> io::Result<()> {
        writeln!(self.out, "{key}:")
    }

    /// An indented line of a list section.
    fn item(&mut self, text: impl Display) -> io::Result<()> {
        writeln!(self.out, "  {text}")
    }
}

fn comparison_text(c: Option<&HashComparison>) -> (&'static str, Option<Color>) {
    match c {
        None => (NONE, None),
        Some(HashComparison::Equal) => ("Equal", Some(Color::Green)),
        Some(HashComparison::Differs) => ("Differs", Some(Color::Yellow)),
        Some(HashComparison::NotStamped) => ("NotStamped (not compared)", None),
        Some(HashComparison::VersionMismatch) => (
            "VersionMismatch (will be re-stamped, not drifted)",
            Some(Color::Cyan),
        ),
    }
}

fn write_hash<W: Write>(
    b: &mut Block<'_, W>,
    title: &str,
    h: &HashReport,
    object: Option<String>,
) -> io::Result<()> {
    b.header(title)?;
    let stamped = match (&h.stamped, &h.stamped_version) {
        (Some(hash), Some(v)) => format!("{hash} (version {v})"),
        (Some(hash), None) => format!("{hash} (no version)"),
        (None, Some(v)) => format!("{NONE} (version {v})"),
        (None, None) => NONE.to_owned(),
    };
    b.field(2, "Stamped", stamped)?;
    let current = match (&h.current, object) {
        (Some(hash), _) => format!("{hash} (version {})", h.current_version),
        (None, Some(object)) => format!("{NONE} ({object} not found)"),
        (None, None) => NONE.to_owned(),
    };
    b.field(2, "Current", current)?;
    let (text, color) = comparison_text(h.comparison.as_ref());
    b.colored(2, "Comparison", text, color)
}

fn write_report<W: Write>(b: &mut Block<'_, W>, r: &Report, now: Timestamp) -> io::Result<()> {
    let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| NONE.to_owned());
    b.field(0, "Name", &r.name)?;
    b.field(0, "Node", or_none(&r.node))?;
    b.field(0, "NodePool", or_none(&r.nodepool))?;
    b.field(0, "EC2NodeClass", or_none(&r.nodeclass))?;
    let verdict = match (r.source, r.live.verdict) {
        (Some(Source::Detected), _) => "True (detected now, not yet marked by the controller)",
        (Some(_), _) => "True (marked by the controller)",
        (None, LiveVerdict::NotLaunched) => "False (not launched)",
        (None, _) => "False",
    };
    let color = if r.drifted {
        Color::Yellow
    } else {
        Color::Green
    };
    b.colored(0, "Drifted", verdict, Some(color))?;
    if let Some(reason) = &r.reason {
        b.field(0, "Reason", reason)?;
    }
    if let Some(c) = &r.condition {
        if c.status != "True" {
            b.field(
                0,
                "Condition",
                format!("Drifted={} ({})", c.status, c.reason),
            )?;
        }
        if let Some(t) = c.last_transition_time {
            let key = if c.status == "True" {
                "Since"
            } else {
                "Changed"
            };
            b.field(0, key, format!("{t} ({} ago)", age::age(Some(t), now)))?;
        }
    }
    if !r.changes.is_empty() {
        b.header("Changes")?;
        for c in &r.changes {
            let note = match (r.source, c.source, r.live.verdict) {
                (Some(Source::Controller), Source::Detected, _) => {
                    " (detected now; not in the condition yet)"
                }
                (Some(Source::Controller), Source::Controller, LiveVerdict::Drifted) => {
                    " (in the condition; not detected now)"
                }
                _ => "",
            };
            b.item(format!("{}: {}{note}", c.reason, c.change))?;
        }
    }
    if !r.why.is_empty() {
        b.header(if r.drifted { "Notes" } else { "Why" })?;
        for line in &r.why {
            b.item(line)?;
        }
    }
    write_hash(
        b,
        "NodePool Hash",
        &r.nodepool_hash,
        r.nodepool.as_ref().map(|n| format!("nodepool {n}")),
    )?;
    write_hash(
        b,
        "EC2NodeClass Hash",
        &r.nodeclass_hash,
        r.nodeclass.as_ref().map(|n| format!("ec2nodeclass {n}")),
    )?;
    Ok(())
}

/// The summary line: how many are drifted (by whom), not drifted and not launched.
pub fn summary(reports: &[Report]) -> String {
    let count = |f: &dyn Fn(&Report) -> bool| reports.iter().filter(|r| f(r)).count();
    let marked = count(&|r| r.source == Some(Source::Controller));
    let detected = count(&|r| r.source == Some(Source::Detected));
    let not_launched = count(&|r| !r.drifted && r.live.verdict == LiveVerdict::NotLaunched);
    let clean = reports.len() - marked - detected - not_launched;
    let noun = if reports.len() == 1 {
        "nodeclaim"
    } else {
        "nodeclaims"
    };
    let mut text = format!(
        "{} {noun}: {} drifted ({marked} marked by the controller, {detected} detected now), \
         {clean} not drifted",
        reports.len(),
        marked + detected
    );
    if not_launched > 0 {
        text.push_str(&format!(", {not_launched} not launched"));
    }
    text
}

/// Writes one block per report, separated by blank lines; with more than one, a summary line.
///
/// Errors: writing failed.
pub fn write_text(
    out: &mut impl Write,
    reports: &[Report],
    now: Timestamp,
    color: bool,
) -> io::Result<()> {
    let mut b = Block { out, color };
    for (i, r) in reports.iter().enumerate() {
        if i > 0 {
            writeln!(b.out)?;
        }
        write_report(&mut b, r, now)?;
    }
    if reports.len() > 1 {
        writeln!(b.out)?;
        writeln!(b.out, "{}", summary(reports))?;
    }
    Ok(())
}

/// Writes the reports as a JSON array (4-space indent, as kubectl) or as YAML, fields in
/// [`Report`]'s order.
///
/// Errors: serializing or writing failed.
pub fn write_document(
    out: &mut impl Write,
    reports: &[Report],
    yaml: bool,
) -> Result<(), OutputError> {
    if yaml {
        return crate::output::write_yaml_value(out, &reports);
    }
    let mut ser = serde_json::Serializer::with_formatter(
        &mut *out,
        serde_json::ser::PrettyFormatter::with_indent(b"    "),
    );
    reports.serialize(&mut ser)?;
    writeln!(out)?;
    Ok(())
}

#[cfg(test)]
mod tests;
