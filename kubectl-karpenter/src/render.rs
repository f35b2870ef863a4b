//! kubectl's table printer, shared by the commands' tables (`status`, `orphans`, `upgrade
//! status`): UPPERCASE headers, no borders, each column as wide as its widest cell plus 3 spaces
//! (at least 6), the last column unpadded, `<none>` for missing values, `<unknown>` for a price
//! that cannot be told; `-o wide` only appends columns. Hand-rolled rather than `tabled` so the
//! spacing matches kubectl's tabwriter exactly. Writes to any `Write`; knows no command's rows.

use std::io::{self, Write};

use crossterm::style::{Color, Stylize};

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
}
