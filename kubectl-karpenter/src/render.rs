//! The `status` table, laid out like kubectl's printer: UPPERCASE headers, no borders, each
//! column as wide as its widest cell plus 3 spaces (at least 6), the last column unpadded,
//! `<none>` for missing values; `-o wide` only appends columns. Hand-rolled rather than
//! `tabled` so the spacing matches kubectl's tabwriter exactly. Writes to any `Write`.

use std::io::{self, Write};

use crossterm::style::{Color, Stylize};

use crate::status::{Row, State, Totals};

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
    /// Append PRICE/HOUR, NODECLASS and PROVIDER-ID (`-o wide`).
    pub wide: bool,
    /// Print the header line and the totals line (off with `--no-headers`).
    pub headers: bool,
    /// Colour the STATE column with ANSI escapes.
    pub color: bool,
}

const HEADERS: [&str; 8] = [
    "NAME",
    "NODEPOOL",
    "INSTANCE-TYPE",
    "CAPACITY-TYPE",
    "ZONE",
    "STATE",
    "NODE",
    "AGE",
];
const WIDE_HEADERS: [&str; 3] = ["PRICE/HOUR", "NODECLASS", "PROVIDER-ID"];

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

/// The colour of a state: green when ready, yellow while in flight, red while terminating.
pub fn state_color(state: State) -> Color {
    match state {
        State::Ready => Color::Green,
        State::Launching | State::Registering | State::Initializing => Color::Yellow,
        State::Terminating => Color::Red,
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
        Cell::or_none(row.instance_type.as_deref()),
        Cell::or_none(row.capacity_type.as_deref()),
        Cell::or_none(row.zone.as_deref()),
        Cell {
            text: row.state.as_str().to_owned(),
            color: Some(state_color(row.state)),
        },
        Cell::or_none(row.node.as_deref()),
        Cell::plain(row.age.as_str()),
    ];
    if wide {
        cells.push(Cell::plain(format_price(row.price)));
        cells.push(Cell::or_none(row.node_class.as_deref()));
        cells.push(Cell::or_none(row.provider_id.as_deref()));
    }
    cells
}

/// Writes the table of `rows` and, with headers, the totals line after a blank line.
/// Writes nothing for no rows (the caller reports "No resources found").
///
/// Errors: writing to `out` failed.
pub fn write_table(out: &mut impl Write, rows: &[Row], opts: TableOptions) -> io::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut lines: Vec<Vec<Cell>> = Vec::with_capacity(rows.len() + 1);
    if opts.headers {
        let mut header: Vec<Cell> = HEADERS.iter().map(|h| Cell::plain(*h)).collect();
        if opts.wide {
            header.extend(WIDE_HEADERS.iter().map(|h| Cell::plain(*h)));
        }
        lines.push(header);
    }
    lines.extend(rows.iter().map(|r| cells(r, opts.wide)));
    write_aligned(out, &lines, opts.color)?;
    if opts.headers {
        writeln!(out)?;
        writeln!(out, "{}", Totals::of(rows))?;
    }
    Ok(())
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
    use crate::fixtures;
    use crate::status::build_rows;

    fn render(opts: TableOptions) -> String {
        let rows = build_rows(&fixtures::sample(), fixtures::now(), &fixtures::FixedPrices);
        let mut out = Vec::new();
        write_table(&mut out, &rows, opts).expect("write to a Vec");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn table_snapshot() {
        let want = "\
NAME            NODEPOOL   INSTANCE-TYPE   CAPACITY-TYPE   ZONE         STATE          NODE                         AGE
default-abcde   default    m5.large        on-demand       us-east-1a   Ready          ip-10-0-1-17.ec2.internal    5h12m
default-fghij   default    c5.xlarge       spot            us-east-1b   Registering    <none>                       95s
default-klmno   default    <none>          <none>          <none>       Launching      <none>                       5s
gpu-pqrst       gpu        g5.xlarge       on-demand       us-east-1c   Initializing   ip-10-0-3-9.ec2.internal     3m
gpu-uvwxy       gpu        g5.xlarge       spot            us-east-1a   Terminating    ip-10-0-1-200.ec2.internal   30h
stray           <none>     <none>          <none>          <none>       Ready          <none>                       <unknown>

6 nodeclaims: 2 ready, 3 in flight (1 launching, 1 registering, 1 initializing), 1 terminating; $1.2345/hour (2 without a known price)
";
        let got = render(TableOptions {
            headers: true,
            ..TableOptions::default()
        });
        assert_eq!(got, want, "\n{got}");
    }

    #[test]
    fn wide_snapshot_appends_columns() {
        let want = "\
NAME            NODEPOOL   INSTANCE-TYPE   CAPACITY-TYPE   ZONE         STATE          NODE                         AGE         PRICE/HOUR   NODECLASS   PROVIDER-ID
default-abcde   default    m5.large        on-demand       us-east-1a   Ready          ip-10-0-1-17.ec2.internal    5h12m       $0.0960      default     aws:///us-east-1a/i-0a1b2c3d4e5f60001
default-fghij   default    c5.xlarge       spot            us-east-1b   Registering    <none>                       95s         $0.0685      default     aws:///us-east-1b/i-0a1b2c3d4e5f60002
default-klmno   default    <none>          <none>          <none>       Launching      <none>                       5s          <unknown>    default     <none>
gpu-pqrst       gpu        g5.xlarge       on-demand       us-east-1c   Initializing   ip-10-0-3-9.ec2.internal     3m          $1.0060      default     aws:///us-east-1c/i-0a1b2c3d4e5f60003
gpu-uvwxy       gpu        g5.xlarge       spot            us-east-1a   Terminating    ip-10-0-1-200.ec2.internal   30h         $0.0640      default     aws:///us-east-1a/i-0a1b2c3d4e5f60004
stray           <none>     <none>          <none>          <none>       Ready          <none>                       <unknown>   <unknown>    default     <none>

6 nodeclaims: 2 ready, 3 in flight (1 launching, 1 registering, 1 initializing), 1 terminating; $1.2345/hour (2 without a known price)
";
        let got = render(TableOptions {
            wide: true,
            headers: true,
            color: false,
        });
        assert_eq!(got, want, "\n{got}");
    }

    #[test]
    fn no_headers_prints_rows_only() {
        let got = render(TableOptions::default());
        assert_eq!(got.lines().count(), 6);
        assert!(
            got.starts_with("default-abcde   default   m5.large    on-demand "),
            "{got}"
        );
        assert!(!got.contains("nodeclaims:"), "{got}");
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

    #[test]
    fn colour_wraps_only_the_state_and_keeps_alignment() {
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
        let ready_line = coloured.lines().nth(1).expect("first row");
        assert!(
            ready_line.contains("us-east-1a   \u{1b}[38;5;10mReady\u{1b}[39m          ip-10"),
            "{ready_line:?}"
        );
        // Stripping the escapes gives back the plain table.
        let mut stripped = String::new();
        let mut chars = coloured.chars();
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
        assert_eq!(stripped, plain);
    }

    #[test]
    fn empty_writes_nothing() {
        let mut out = Vec::new();
        write_table(
            &mut out,
            &[],
            TableOptions {
                headers: true,
                ..TableOptions::default()
            },
        )
        .expect("write");
        assert!(out.is_empty());
    }
}
