//! kubectl's table printer, shared by the commands' tables (`status`, `orphans`, `upgrade
//! status`): UPPERCASE headers, no borders, each column as wide as its widest cell plus 3 spaces
//! (at least 6), the last column unpadded, `<none>` for missing values, `<unknown>` for a price
//! that cannot be told; `-o wide` only appends columns. Rendered with `tabled` (no borders, the
//! tabwriter's padding and minimum width). Writes to any `Write`; knows no command's rows.

use std::io::{self, Write};

use crossterm::style::{Color, Stylize};
use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Padding, Style, Width};

/// Placeholder for a missing value.
pub const NONE: &str = "<none>";
/// Placeholder for a value that cannot be determined (an unknown price).
pub const UNKNOWN: &str = "<unknown>";

/// Spaces between columns (kubectl's tabwriter padding).
const PADDING: usize = 3;
/// Narrowest column, padding included (kubectl's tabwriter minimum width).
const MIN_WIDTH: usize = 6;

/// How to print a command's table (`-o table|wide`, `--no-headers`, `--color`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableOptions {
    /// Append the wide columns (`-o wide`).
    pub wide: bool,
    /// Print header lines and what the command prints around its rows (`status`: the NodePool
    /// section and the totals line; `orphans`: the summary line); off with `--no-headers`.
    pub headers: bool,
    /// Colour the cells that carry a colour (STATE, UPGRADE, KIND) with ANSI escapes.
    pub color: bool,
}

/// One table cell: its text and the colour it may be printed in (STATE, UPGRADE, KIND).
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

/// `$0.0960`, or [`UNKNOWN`].
pub fn format_price(price: Option<f64>) -> String {
    price.map_or_else(|| UNKNOWN.to_owned(), |p| format!("${p:.4}"))
}

/// Pads every column but the last to a common width, as kubectl's tabwriter does
/// (`tabwriter.NewWriter(out, 6, 4, 3, ' ', 0)` in kubectl's printers): each column is as wide
/// as its widest cell plus [`PADDING`], at least [`MIN_WIDTH`]; the last cell of a line is not
/// padded. Rendered by `tabled` with no borders; colour escapes do not count towards widths.
pub(crate) fn write_aligned(
    out: &mut impl Write,
    lines: &[Vec<Cell>],
    color: bool,
) -> io::Result<()> {
    let columns = lines.iter().map(Vec::len).max().unwrap_or(0);
    if columns == 0 {
        for _ in lines {
            writeln!(out)?;
        }
        return Ok(());
    }
    let mut builder = Builder::with_capacity(lines.len(), columns);
    for line in lines {
        let mut row: Vec<String> = line
            .iter()
            .map(|cell| match cell.color.filter(|_| color) {
                Some(c) => cell.text.as_str().with(c).to_string(),
                None => cell.text.clone(),
            })
            .collect();
        row.resize(columns, String::new());
        builder.push_record(row);
    }
    let mut table = builder.build();
    table
        .with(Style::empty())
        .with(Padding::new(0, PADDING, 0, 0))
        .modify(Columns::new(..), Width::increase(MIN_WIDTH - PADDING))
        .modify(Columns::last(), Padding::zero());
    // Every line ends at its last cell's text, unpadded, as tabwriter ends a line at its last
    // cell; tabled pads the last column (and a short line's missing cells), so that padding is
    // cut. tabled cannot end a line with an empty cell after padding: for such a line the
    // padding of the cells before it is put back by hand (tabwriter prints it, trailing).
    let widths = plain_widths(lines, columns);
    for (line, rendered) in lines.iter().zip(table.to_string().lines()) {
        let trimmed = rendered.trim_end_matches(' ');
        match line.split_last() {
            Some((last, before)) if last.text.is_empty() && !before.is_empty() => {
                let shown: usize = before
                    .iter()
                    .rposition(|c| !c.text.is_empty())
                    .map_or(0, |k| {
                        widths[..k].iter().sum::<usize>() + before[k].text.chars().count()
                    });
                let pad = widths[..before.len()].iter().sum::<usize>() - shown;
                writeln!(out, "{trimmed}{}", " ".repeat(pad))?;
            }
            _ => writeln!(out, "{trimmed}")?,
        }
    }
    Ok(())
}

/// Each column's width as tabwriter sets it: its widest cell (in characters, colour aside)
/// plus [`PADDING`], at least [`MIN_WIDTH`].
fn plain_widths(lines: &[Vec<Cell>], columns: usize) -> Vec<usize> {
    (0..columns)
        .map(|i| {
            let widest = lines
                .iter()
                .filter_map(|l| l.get(i))
                .map(|c| c.text.chars().count())
                .max()
                .unwrap_or(0);
            (widest + PADDING).max(MIN_WIDTH)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Byte for byte what kubectl v1.32 printed for the same cells (`kubectl get configmaps -A
    /// -o custom-columns=A:.metadata.name,NAMESPACE:.metadata.namespace,K:.data.k`, captured
    /// against the sandbox): a short column at its minimum width, a long one, an empty last
    /// cell (kubectl keeps the padding before it) and `<none>`.
    #[test]
    fn the_output_is_what_kubectl_get_prints() {
        let rows = [
            ["A", "NAMESPACE", "K"],
            ["a", "x", "1"],
            ["a-much-longer-name", "yy", "22"],
            ["b", "x", ""],
            ["c", "x", "<none>"],
            ["mid", "x", "333333333"],
        ];
        let lines: Vec<Vec<Cell>> = rows
            .iter()
            .map(|r| r.iter().map(|c| Cell::plain(*c)).collect())
            .collect();
        let mut out = Vec::new();
        write_aligned(&mut out, &lines, false).expect("write");
        let kubectl = "\
A                    NAMESPACE   K
a                    x           1
a-much-longer-name   yy          22
b                    x           \n\
c                    x           <none>
mid                  x           333333333
";
        assert_eq!(String::from_utf8(out).expect("utf-8"), kubectl);
    }

    #[test]
    fn colour_escapes_do_not_widen_a_column() {
        let lines = vec![
            vec![Cell::plain("STATE"), Cell::plain("NAME")],
            vec![
                Cell {
                    text: "Ready".into(),
                    color: Some(Color::Green),
                },
                Cell::plain("n1"),
            ],
        ];
        let mut plain = Vec::new();
        write_aligned(&mut plain, &lines, false).expect("write");
        let mut coloured = Vec::new();
        write_aligned(&mut coloured, &lines, true).expect("write");
        let coloured = String::from_utf8(coloured).expect("utf-8");
        assert!(coloured.contains("\u{1b}["), "{coloured:?}");
        // Without the escapes, the coloured table is the plain one.
        let stripped: String = {
            let mut s = String::new();
            let mut chars = coloured.chars();
            while let Some(c) = chars.next() {
                if c == '\u{1b}' {
                    for d in chars.by_ref() {
                        if d == 'm' {
                            break;
                        }
                    }
                } else {
                    s.push(c);
                }
            }
            s
        };
        assert_eq!(stripped, String::from_utf8(plain).expect("utf-8"));
    }
}
