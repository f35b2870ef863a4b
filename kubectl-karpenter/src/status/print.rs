//! How `kubectl karpenter status` prints its document for each `-o`: `table` and `wide` as
//! kubectl-style tables, `json` (indented, or one line per document for `--watch` on a pipe),
//! `yaml`, or `name` (`nodeclaim.karpenter.sh/<name>` per line). Pure apart from writing to a
//! `Write`.

use std::io::Write;

use super::document::Document;
use super::table::write_status;
use crate::cli::OutputFormat;
use crate::output::{self, OutputError};
use crate::render::TableOptions;

/// How to print a document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Print {
    /// `-o`: table (default), `wide`, `json`, `yaml` or `name`.
    pub format: OutputFormat,
    /// Header lines, the NodePool section and the totals line (off with `--no-headers`).
    pub headers: bool,
    /// Colour the tables.
    pub color: bool,
    /// JSON on one line (for `--watch` on a pipe: one document per line).
    pub compact: bool,
}

/// Writes `doc` as `print` asks. Tables with no NodePool and no NodeClaim write nothing (the
/// caller says "No resources found").
///
/// Errors: serializing or writing failed.
pub fn write_document(
    out: &mut impl Write,
    doc: &Document,
    print: Print,
) -> Result<(), OutputError> {
    match print.format {
        OutputFormat::Table | OutputFormat::Wide => {
            let opts = TableOptions {
                wide: print.format == OutputFormat::Wide,
                headers: print.headers,
                color: print.color,
            };
            write_status(out, doc, opts)?;
        }
        OutputFormat::Json if print.compact => {
            serde_json::to_writer(&mut *out, doc)?;
            writeln!(out)?;
        }
        OutputFormat::Json => output::write_json_value(out, doc)?,
        OutputFormat::Yaml => output::write_yaml_value(out, doc)?,
        OutputFormat::Name => {
            for row in &doc.node_claims {
                writeln!(out, "nodeclaim.karpenter.sh/{}", row.name)?;
            }
        }
    }
    Ok(())
}

/// Whether `format` prints nothing for an empty document (so "No resources found" is said).
pub fn silent_when_empty(format: OutputFormat) -> bool {
    matches!(
        format,
        OutputFormat::Table | OutputFormat::Wide | OutputFormat::Name
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::document::{Snapshot, View};
    use crate::status::fixtures;

    fn snapshot() -> Snapshot {
        fixtures::snapshot()
    }

    #[test]
    fn compact_json_is_one_line() {
        let doc = Document::build(
            &snapshot(),
            &View::default(),
            fixtures::now(),
            &fixtures::FixedPrices,
        );
        let mut out = Vec::new();
        let print = Print {
            format: OutputFormat::Json,
            headers: true,
            color: false,
            compact: true,
        };
        write_document(&mut out, &doc, print).expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        assert_eq!(text.lines().count(), 1);
        let back: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(back["totals"]["nodeClaims"], 7);
    }
}
