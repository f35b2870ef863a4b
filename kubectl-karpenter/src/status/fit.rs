//! Fitting the `status --watch` cockpit to the terminal: text made of coloured [`Span`]s whose
//! width is counted in terminal columns (one per character: the cockpit writes no wide
//! characters), cut with `…` where it would pass the last column, and tables whose columns are
//! dropped by priority until the rest fits. Pure: lines in, lines out; colour escapes are added
//! only when asked and never count towards a width.

use crossterm::style::{Color, Stylize};

/// Spaces between two columns of a cockpit table.
pub const GAP: usize = 2;

/// What marks text cut short.
pub const CUT: char = '…';

/// A run of text in one colour (or none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// The text; one terminal column per character.
    pub text: String,
    /// Its colour when colour is on.
    pub color: Option<Color>,
}

impl Span {
    /// Text without colour.
    pub fn plain(text: impl Into<String>) -> Span {
        Span {
            text: text.into(),
            color: None,
        }
    }

    /// Text in `color`.
    pub fn colored(text: impl Into<String>, color: Color) -> Span {
        Span {
            text: text.into(),
            color: Some(color),
        }
    }
}

/// A line or a table cell: spans written one after the other.
pub type Text = Vec<Span>;

/// The width of `text` in terminal columns.
pub fn width(text: &[Span]) -> usize {
    text.iter().map(|s| s.text.chars().count()).sum()
}

/// `text` cut to at most `max` columns: when it is longer, its first `max - 1` columns and
/// [`CUT`] (nothing at all when `max` is 0).
pub fn cut(text: &[Span], max: usize) -> Text {
    if width(text) <= max {
        return text.to_vec();
    }
    let mut left = max.saturating_sub(1);
    let mut out = Vec::new();
    for span in text {
        if left == 0 {
            break;
        }
        let taken: String = span.text.chars().take(left).collect();
        left -= taken.chars().count();
        out.push(Span {
            text: taken,
            color: span.color,
        });
    }
    if max > 0 {
        let color = out.last().and_then(|s| s.color);
        out.push(Span {
            text: CUT.to_string(),
            color,
        });
    }
    out
}

/// `text` as one line: colour escapes around coloured spans when `color` is on.
pub fn render(text: &[Span], color: bool) -> String {
    text.iter()
        .map(|s| match s.color.filter(|_| color) {
            Some(c) => s.text.as_str().with(c).to_string(),
            None => s.text.clone(),
        })
        .collect()
}

/// `line`, which may hold SGR colour escapes (`ESC [ ... m`, as [`render`] and the tables
/// write them), cut to at most `max` visible columns: when it is longer, its first `max - 1`
/// visible characters, [`CUT`] and a colour reset. Escapes are kept and never counted.
pub fn cut_escaped(line: &str, max: usize) -> String {
    let visible = |s: &str| {
        let mut n = 0;
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                // The control sequence runs to its final byte, '@' to '~'.
                let _ = chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            } else {
                n += 1;
            }
        }
        n
    };
    if visible(line) <= max {
        return line.to_owned();
    }
    let mut out = String::new();
    let mut left = max.saturating_sub(1);
    let mut escaped = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            escaped = true;
            out.push(c);
            if let Some(open) = chars.next() {
                out.push(open);
            }
            for c in chars.by_ref() {
                out.push(c);
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else if left > 0 {
            out.push(c);
            left -= 1;
        }
    }
    if max > 0 {
        out.push(CUT);
    }
    if escaped {
        out.push_str("\u{1b}[0m");
    }
    out
}

/// One column of a cockpit table.
#[derive(Clone, Debug)]
pub struct Column {
    /// The header, e.g. `REQUESTED CPU`.
    pub header: &'static str,
    /// A shorter header used when the table does not fit the terminal, e.g. `REQ CPU`.
    pub short: &'static str,
    /// 0 for a column that is never dropped; otherwise the higher, the sooner it is dropped
    /// when the table is too wide.
    pub drop_rank: u8,
    /// Its cells, one per row.
    pub cells: Vec<Text>,
}

impl Column {
    fn natural(&self, short: bool) -> usize {
        let header = if short { self.short } else { self.header };
        self.cells
            .iter()
            .map(|c| width(c))
            .chain([header.chars().count()])
            .max()
            .unwrap_or(0)
    }
}

/// How a table was fitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fitted {
    /// The header line and one line per row, each at most the width asked for.
    pub lines: Vec<Text>,
    /// The headers of the columns left out.
    pub dropped: Vec<&'static str>,
}

/// Whether `columns` fit `max` columns with `short` headers.
pub fn fits(columns: &[Column], max: usize, short: bool) -> bool {
    total(columns, short) <= max
}

fn total(columns: &[Column], short: bool) -> usize {
    let gaps = GAP * columns.len().saturating_sub(1);
    columns.iter().map(|c| c.natural(short)).sum::<usize>() + gaps
}

/// Lays `columns` out in at most `max` terminal columns: with the full headers when everything
/// fits, else with the short ones, dropping the columns of highest `drop_rank` first until the
/// rest fits; when even the columns never dropped are too wide, the first one (the name) is cut
/// down to no less than 8 columns and every line is cut at `max`. Each column is as wide as its
/// widest cell or header, followed by [`GAP`] spaces; the last one is not padded.
pub fn table(mut columns: Vec<Column>, max: usize) -> Fitted {
    let short = !fits(&columns, max, false);
    let mut dropped = Vec::new();
    while total(&columns, short) > max {
        let Some((at, _)) = columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.drop_rank > 0)
            .max_by_key(|(i, c)| (c.drop_rank, *i))
        else {
            break;
        };
        dropped.push(columns.remove(at).header);
    }
    let mut widths: Vec<usize> = columns.iter().map(|c| c.natural(short)).collect();
    let over = total(&columns, short).saturating_sub(max);
    if let Some(first) = widths.first_mut() {
        *first = first.saturating_sub(over).max(8.min(*first));
    }
    let rows = columns.first().map_or(0, |c| c.cells.len());
    let mut lines = Vec::with_capacity(rows + 1);
    for row in 0..=rows {
        let mut line: Text = Vec::new();
        for (i, (column, &w)) in columns.iter().zip(&widths).enumerate() {
            let cell = if row == 0 {
                vec![Span::plain(if short {
                    column.short
                } else {
                    column.header
                })]
            } else {
                column.cells.get(row - 1).cloned().unwrap_or_default()
            };
            let cell = cut(&cell, w);
            let pad = w - width(&cell);
            line.extend(cell);
            if i + 1 < columns.len() {
                line.push(Span::plain(" ".repeat(pad + GAP)));
            }
        }
        lines.push(cut(&line, max));
    }
    Fitted { lines, dropped }
}

/// Joins the `items` that fit in `max` columns, separated by [`GAP`] spaces, keeping their
/// order: each item has a rank, and the items of highest rank are left out first; rank 0 is
/// always kept (and cut when it alone is too wide).
pub fn items(items: Vec<(u8, Text)>, max: usize) -> Text {
    let mut kept = items;
    loop {
        let total: usize =
            kept.iter().map(|(_, t)| width(t)).sum::<usize>() + GAP * kept.len().saturating_sub(1);
        if total <= max {
            break;
        }
        let Some((at, _)) = kept
            .iter()
            .enumerate()
            .filter(|(_, (rank, _))| *rank > 0)
            .max_by_key(|(i, (rank, _))| (*rank, *i))
        else {
            break;
        };
        kept.remove(at);
    }
    let mut line = Vec::new();
    for (i, (_, text)) in kept.into_iter().enumerate() {
        if i > 0 {
            line.push(Span::plain(" ".repeat(GAP)));
        }
        line.extend(text);
    }
    cut(&line, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(lines: &[Text]) -> Vec<String> {
        lines.iter().map(|l| render(l, false)).collect()
    }

    fn column(header: &'static str, short: &'static str, rank: u8, cells: &[&str]) -> Column {
        Column {
            header,
            short,
            drop_rank: rank,
            cells: cells.iter().map(|c| vec![Span::plain(*c)]).collect(),
        }
    }

    fn columns() -> Vec<Column> {
        vec![
            column("NAME", "NAME", 0, &["default-abcde", "b"]),
            column("REQUESTED CPU", "REQ CPU", 1, &["56%", "2%"]),
            column("AGE", "AGE", 2, &["5h12m", "2d"]),
            column("STATE", "STATE", 0, &["Terminating (Empty)", "Ready"]),
        ]
    }

    #[test]
    fn columns_are_dropped_by_rank_and_nothing_passes_the_edge() {
        let wide = table(columns(), 80);
        assert_eq!(
            plain(&wide.lines),
            [
                "NAME           REQUESTED CPU  AGE    STATE",
                "default-abcde  56%            5h12m  Terminating (Empty)",
                "b              2%             2d     Ready",
            ]
        );
        assert!(wide.dropped.is_empty());
        // Short headers first, then AGE goes, then REQ CPU.
        let narrower = table(columns(), 45);
        assert_eq!(narrower.dropped, ["AGE"]);
        assert_eq!(
            plain(&narrower.lines)[1],
            "default-abcde  56%      Terminating (Empty)"
        );
        let narrow = table(columns(), 36);
        assert_eq!(narrow.dropped, ["AGE", "REQUESTED CPU"]);
        // Too narrow even for NAME and STATE: the name is cut, then the line.
        let tiny = table(columns(), 20);
        let lines = plain(&tiny.lines);
        assert_eq!(lines[1], "default…  Terminati…");
        for width in [1, 10, 20, 33, 36, 45, 80] {
            for line in plain(&table(columns(), width).lines) {
                assert!(line.chars().count() <= width, "{width}: {line:?}");
            }
        }
    }

    #[test]
    fn cutting_keeps_colours_and_marks_the_cut() {
        let text = vec![
            Span::colored("█████", Color::Green),
            Span::plain("░░░░░ 50%"),
        ];
        assert_eq!(width(&text), 14);
        let short = cut(&text, 7);
        assert_eq!(render(&short, false), "█████░…");
        assert_eq!(short[0].color, Some(Color::Green));
        assert_eq!(cut(&text, 0), Vec::<Span>::new());
        assert_eq!(cut(&text, 14), text);
    }

    #[test]
    fn escaped_lines_are_cut_by_what_shows() {
        let green = "\u{1b}[38;5;10m";
        let line = format!("ab {green}Ready\u{1b}[39m and more");
        assert_eq!(cut_escaped(&line, 40), line, "fits: unchanged");
        assert_eq!(
            cut_escaped(&line, 6),
            format!("ab {green}Re\u{1b}[39m…\u{1b}[0m")
        );
        assert_eq!(cut_escaped("plain text", 5), "plai…");
        assert_eq!(cut_escaped("plain", 0), "");
    }

    #[test]
    fn items_of_highest_rank_are_left_out_first() {
        let item = |rank, text: &str| (rank, vec![Span::plain(text)]);
        let all = || {
            vec![
                item(0, "7 NodeClaims"),
                item(3, "1 other node"),
                item(1, "$1.34/h"),
                item(2, "$975/month"),
            ]
        };
        assert_eq!(
            render(&items(all(), 80), false),
            "7 NodeClaims  1 other node  $1.34/h  $975/month"
        );
        assert_eq!(
            render(&items(all(), 35), false),
            "7 NodeClaims  $1.34/h  $975/month"
        );
        assert_eq!(render(&items(all(), 10), false), "7 NodeCla…");
    }
}
