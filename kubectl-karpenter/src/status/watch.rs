//! What `kubectl karpenter status --watch` prints as the cluster changes. On a terminal it
//! redraws one screen in place (crossterm: each line drawn over the last frame's and the rest
//! cleared, line wrap off; the command enters the alternate screen through [`AlternateScreen`],
//! which restores the terminal however the watch ends): for `-o table` the
//! [`cockpit`] fitted to the terminal's width and height, for the other formats
//! (`wide` tables, JSON, YAML, names) the document cut to them, so that no line is ever written
//! past the last column. On a pipe it streams: a new table block after a blank
//! line, one compact JSON document per line (NDJSON), or YAML documents after `---`, and only
//! when something other than the ages changed. Pure apart from writing to a `Write`.

use std::io::{self, Write};

use crossterm::cursor::MoveTo;
use crossterm::queue;
use crossterm::terminal::{Clear, ClearType};
use jiff::{Timestamp, Unit};
use std::time::Duration;

use super::cockpit;
use super::document::Document;
use super::fit;
use super::print::{Print, write_document};
use crate::cli::OutputFormat;
use crate::output::OutputError;

/// Where the frames go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Screen {
    /// A terminal `cols` columns wide and `rows` lines high (when known): each frame replaces
    /// the last.
    Redraw {
        /// Terminal width; no line is longer ([`UNKNOWN_WIDTH`] when not known).
        cols: Option<u16>,
        /// Terminal height; longer frames are cut to fit.
        rows: Option<u16>,
    },
    /// A pipe or file: each change is appended.
    Stream,
}

/// The width frames are fitted to on a terminal that does not report its width.
pub const UNKNOWN_WIDTH: usize = 80;

/// Decides what to write for each new document.
#[derive(Debug)]
pub struct Printer {
    screen: Screen,
    print: Print,
    interval: Duration,
    /// The last document shown, ages blanked (stream mode compares these).
    last_key: Option<Document>,
    /// The last document shown (redraw mode re-renders it with a warning).
    last_doc: Option<Document>,
    /// The last frame drawn (redraw mode compares these).
    last_frame: Option<String>,
    /// The size the last frame was fitted to, (columns, rows) (a resize redraws).
    last_size: (Option<u16>, Option<u16>),
    /// Blocks written so far (stream mode separates them).
    blocks: usize,
}

impl Printer {
    /// A printer for `screen` printing as `print` says, reading the cluster every `interval`
    /// (what the title line says).
    pub fn new(screen: Screen, print: Print, interval: Duration) -> Printer {
        let compact = screen == Screen::Stream && print.format == OutputFormat::Json;
        Printer {
            screen,
            print: Print { compact, ..print },
            interval,
            last_key: None,
            last_doc: None,
            last_frame: None,
            last_size: (None, None),
            blocks: 0,
        }
    }

    /// Where the frames go.
    pub fn screen(&self) -> Screen {
        self.screen
    }

    /// Sets the terminal's width and height (read again before every draw, so a resized
    /// terminal gets frames fitted to its new size). `None` or 0 (a pseudo-terminal may report
    /// 0): frames are not cut to that height, and fitted to [`UNKNOWN_WIDTH`] columns. No
    /// effect on a pipe.
    pub fn resize(&mut self, cols: Option<u16>, rows: Option<u16>) {
        if let Screen::Redraw { cols: c, rows: r } = &mut self.screen {
            *c = cols.filter(|&n| n > 0);
            *r = rows.filter(|&n| n > 0);
        }
    }

    /// Shows `doc`, read at `now`, if it changed; says whether anything was written.
    ///
    /// Errors: serializing or writing failed.
    pub fn show(
        &mut self,
        out: &mut impl Write,
        doc: &Document,
        now: Timestamp,
    ) -> Result<bool, OutputError> {
        match self.screen {
            Screen::Stream => {
                let key = doc.without_ages();
                if self.last_key.as_ref() == Some(&key) {
                    return Ok(false);
                }
                self.last_key = Some(key);
                let mut block = Vec::new();
                write_document(&mut block, doc, self.print)?;
                if block.is_empty() {
                    // An empty table: nothing to print until something appears.
                    return Ok(false);
                }
                if self.blocks > 0 {
                    match self.print.format {
                        OutputFormat::Json => {}
                        OutputFormat::Yaml => out.write_all(b"---\n")?,
                        _ => writeln!(out)?,
                    }
                }
                self.blocks += 1;
                out.write_all(&block)?;
                out.flush()?;
                Ok(true)
            }
            Screen::Redraw { .. } => {
                self.last_doc = Some(doc.clone());
                self.draw(out, doc, None, now)
            }
        }
    }

    /// Reports a failed read after the first (the watch goes on): on a pipe as a `warning:`
    /// line on `err`, on a terminal under the last frame.
    ///
    /// Errors: serializing or writing failed.
    pub fn warn(
        &mut self,
        out: &mut impl Write,
        err: &mut impl Write,
        message: &str,
        now: Timestamp,
    ) -> Result<(), OutputError> {
        match (self.screen, self.last_doc.clone()) {
            (Screen::Redraw { .. }, Some(doc)) => {
                self.draw(out, &doc, Some(message), now)?;
            }
            _ => writeln!(err, "warning: {message}; retrying")?,
        }
        Ok(())
    }

    /// The last frame drawn on the terminal, without the title line (printed again after
    /// leaving the alternate screen, so the final state stays in the scrollback).
    pub fn last_frame(&self) -> Option<&str> {
        self.last_frame
            .as_deref()
            .map(|f| f.split_once('\n').map_or("", |(_, rest)| rest))
    }

    fn draw(
        &mut self,
        out: &mut impl Write,
        doc: &Document,
        warning: Option<&str>,
        now: Timestamp,
    ) -> Result<bool, OutputError> {
        let size = match self.screen {
            Screen::Redraw { cols, rows } => (cols, rows),
            Screen::Stream => (None, None),
        };
        let width = size.0.map_or(UNKNOWN_WIDTH, usize::from);
        // The title line, then at least one line of the frame.
        let height = size.1.map_or(usize::MAX, |r| usize::from(r).max(2));
        let title = format!(
            "Every {}: kubectl karpenter status (Ctrl-C to quit)   {}",
            kube::core::Duration::from(self.interval),
            now.round(Unit::Second).unwrap_or(now)
        );
        let mut lines = vec![title];
        let warning = warning.map(|w| format!("warning: {w}; retrying"));
        // The warning takes the last line (with a blank line above it) when there is one.
        let reserved = if warning.is_some() { 3 } else { 1 };
        let room = height.saturating_sub(reserved);
        if self.print.format == OutputFormat::Table {
            lines.extend(cockpit::screen(doc, width, room, self.print.color));
        } else {
            let mut body = Vec::new();
            write_document(&mut body, doc, self.print)?;
            if doc.is_empty() && body.is_empty() {
                lines.push("No resources found".to_owned());
            }
            lines.extend(
                String::from_utf8_lossy(&body)
                    .lines()
                    .take(room)
                    .map(str::to_owned),
            );
        }
        if let Some(w) = warning {
            lines.push(String::new());
            lines.push(w);
        }
        // The cockpit fits itself; the title, the warning and the other formats (the wide
        // table among them) are cut here.
        for line in &mut lines {
            *line = fit::cut_escaped(line, width);
        }
        lines.truncate(height);
        let mut frame = lines.join("\n");
        frame.push('\n');
        if self.last_frame.as_deref() == Some(frame.as_str()) && self.last_size == size {
            return Ok(false);
        }
        // Each line overwrites the one drawn before it and clears what is left of it, then the
        // rest of the screen is cleared: nothing blanks between frames (no flicker). A resize
        // clears the whole screen first. One write for the frame.
        let mut bytes = Vec::new();
        if self.last_size != size {
            queue!(bytes, Clear(ClearType::All))?;
        }
        for (row, line) in lines.iter().enumerate() {
            queue!(bytes, MoveTo(0, u16::try_from(row).unwrap_or(u16::MAX)))?;
            bytes.extend_from_slice(line.as_bytes());
            queue!(bytes, Clear(ClearType::UntilNewLine))?;
        }
        queue!(bytes, Clear(ClearType::FromCursorDown))?;
        out.write_all(&bytes)?;
        out.flush()?;
        self.last_frame = Some(frame);
        self.last_size = size;
        Ok(true)
    }
}

/// The terminal while `--watch` draws on it: the alternate screen, the cursor hidden and line
/// wrap off. Dropping it (at the end of the watch, on an early return or a panic) shows the
/// cursor, turns line wrap back on and leaves the alternate screen. Writes go through it
/// ([`AlternateScreen::out`]).
pub struct AlternateScreen<'a, W: Write> {
    out: &'a mut W,
}

impl<'a, W: Write> AlternateScreen<'a, W> {
    /// Enters the alternate screen, hides the cursor and turns line wrap off.
    ///
    /// Errors: writing to the terminal failed (what was already changed is restored).
    pub fn enter(out: &'a mut W) -> io::Result<AlternateScreen<'a, W>> {
        let screen = AlternateScreen { out };
        crossterm::execute!(
            screen.out,
            crossterm::terminal::EnterAlternateScreen,
            crossterm::cursor::Hide,
            crossterm::terminal::DisableLineWrap
        )?;
        Ok(screen)
    }

    /// Where to draw.
    pub fn out(&mut self) -> &mut W {
        self.out
    }
}

impl<W: Write> Drop for AlternateScreen<'_, W> {
    fn drop(&mut self) {
        // Nothing useful can be done when the terminal cannot be written to any more.
        let _ = crossterm::execute!(
            self.out,
            crossterm::cursor::Show,
            crossterm::terminal::EnableLineWrap,
            crossterm::terminal::LeaveAlternateScreen
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::document::{Snapshot, View};
    use crate::status::fixtures;

    const TWO_SECONDS: Duration = Duration::from_secs(2);

    fn doc_at(snapshot: &Snapshot, now: &str) -> (Document, Timestamp) {
        let now: Timestamp = now.parse().expect("time");
        let doc = Document::build(snapshot, &View::default(), now, &fixtures::FixedPrices);
        (doc, now)
    }

    fn print(format: OutputFormat) -> Print {
        Print {
            format,
            headers: true,
            color: false,
            compact: false,
        }
    }

    fn snapshots() -> (Snapshot, Snapshot) {
        let before = fixtures::snapshot();
        let mut after = before.clone();
        // default-klmno launches.
        crate::fixtures::set_true(&mut after.claims[2], &["Launched"]);
        (before, after)
    }

    /// Feeds: before, before 5s later, after, after again; returns what was written.
    fn stream(format: OutputFormat) -> (String, Vec<bool>) {
        let (before, after) = snapshots();
        let mut printer = Printer::new(Screen::Stream, print(format), TWO_SECONDS);
        let mut out = Vec::new();
        let mut wrote = Vec::new();
        for (snapshot, now) in [
            (&before, "2025-06-01T12:00:00Z"),
            (&before, "2025-06-01T12:00:05Z"),
            (&after, "2025-06-01T12:00:07Z"),
            (&after, "2025-06-01T12:00:09Z"),
        ] {
            let (doc, now) = doc_at(snapshot, now);
            wrote.push(printer.show(&mut out, &doc, now).expect("show"));
        }
        (String::from_utf8(out).expect("utf-8"), wrote)
    }

    #[test]
    fn json_on_a_pipe_is_one_document_per_change() {
        let (text, wrote) = stream(OutputFormat::Json);
        assert_eq!(wrote, [true, false, true, false]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        let states: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("each line is JSON"))
            .filter_map(|d| {
                let claims = d["nodeClaims"].as_array()?.clone();
                claims
                    .into_iter()
                    .find(|c| c["name"] == "default-klmno")
                    .map(|c| c["state"].clone())
            })
            .collect();
        assert_eq!(states, ["Launching", "Registering"]);
    }

    #[test]
    fn tables_on_a_pipe_are_blocks_separated_by_a_blank_line() {
        let (text, wrote) = stream(OutputFormat::Table);
        assert_eq!(wrote, [true, false, true, false]);
        let (before, _) = snapshots();
        let (first, now) = doc_at(&before, "2025-06-01T12:00:00Z");
        let mut one = Vec::new();
        Printer::new(Screen::Stream, print(OutputFormat::Table), TWO_SECONDS)
            .show(&mut one, &first, now)
            .expect("show");
        let one = String::from_utf8(one).expect("utf-8");
        let rest = text.strip_prefix(&one).expect("first block comes first");
        let second = rest.strip_prefix('\n').expect("blank line between blocks");
        assert!(second.starts_with("NODEPOOL "), "{second}");
        assert!(second.contains("default-klmno   Registering"), "{second}");
        // The second block shows the ages as of its own read.
        assert!(second.contains("   12s\n"), "{second}");
    }

    #[test]
    fn yaml_on_a_pipe_separates_documents() {
        let (text, _) = stream(OutputFormat::Yaml);
        assert!(text.starts_with("nodePools:\n"), "{text}");
        assert_eq!(text.matches("\n---\nnodePools:\n").count(), 1, "{text}");
    }

    #[test]
    fn a_terminal_redraws_in_place_and_cuts_to_its_height() {
        let (before, after) = snapshots();
        let mut printer = Printer::new(
            Screen::Redraw {
                cols: Some(80),
                rows: Some(5),
            },
            print(OutputFormat::Table),
            TWO_SECONDS,
        );
        let mut out = Vec::new();
        let (doc, now) = doc_at(&before, "2025-06-01T12:00:00Z");
        assert!(printer.show(&mut out, &doc, now).expect("show"));
        // Same document, same second: nothing to redraw.
        assert!(!printer.show(&mut out, &doc, now).expect("show"));
        let text = String::from_utf8(out).expect("utf-8");
        // A new size: the screen is cleared, then five lines drawn in place, each clearing
        // the rest of its line, then the rest of the screen.
        assert!(
            text.starts_with("\u{1b}[2J\u{1b}[1;1HEvery 2s: "),
            "{text:?}"
        );
        for row in 1..=5 {
            assert!(text.contains(&format!("\u{1b}[{row};1H")), "{text:?}");
        }
        assert!(!text.contains("\u{1b}[6;1H"), "{text:?}");
        assert_eq!(text.matches("\u{1b}[K").count(), 5, "{text:?}");
        assert!(text.ends_with("\u{1b}[K\u{1b}[J"), "{text:?}");
        assert!(!text.contains('\n'), "{text:?}");
        assert!(text.contains(
            "Every 2s: kubectl karpenter status (Ctrl-C to quit)   2025-06-01T12:00:00Z"
        ));

        let mut out = Vec::new();
        let (doc, now) = doc_at(&after, "2025-06-01T12:00:02Z");
        assert!(printer.show(&mut out, &doc, now).expect("show"));
        let mut err = Vec::new();
        printer
            .warn(
                &mut out,
                &mut err,
                "listing NodeClaims: connection refused",
                now,
            )
            .expect("warn");
        assert!(err.is_empty());
        let frame = printer.last_frame().expect("a frame");
        assert!(
            frame.starts_with("7 NodeClaims  1 pending pod  "),
            "{frame}"
        );
        assert!(frame.lines().all(|l| l.chars().count() <= 80), "{frame}");
        assert!(
            frame.ends_with("\nwarning: listing NodeClaims: connection refused; retrying\n"),
            "{frame}"
        );
    }

    #[test]
    fn the_terminal_is_restored_however_the_watch_ends() {
        const ENTER: [&str; 3] = ["\u{1b}[?1049h", "\u{1b}[?25l", "\u{1b}[?7l"];
        const LEAVE: [&str; 3] = ["\u{1b}[?25h", "\u{1b}[?7h", "\u{1b}[?1049l"];
        let mut out = Vec::new();
        {
            let mut screen = AlternateScreen::enter(&mut out).expect("enter");
            screen.out().write_all(b"frame").expect("write");
        }
        let text = String::from_utf8(out).expect("utf-8");
        assert_eq!(text, format!("{}frame{}", ENTER.concat(), LEAVE.concat()));
        // A panic while drawing restores it too.
        let mut out = Vec::new();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _screen = AlternateScreen::enter(&mut out).expect("enter");
            panic!("drawing failed");
        }));
        assert!(caught.is_err());
        assert!(
            String::from_utf8(out)
                .expect("utf-8")
                .ends_with(&LEAVE.concat())
        );
    }

    #[test]
    fn a_resized_terminal_gets_a_new_frame_cut_to_its_height() {
        let (before, _) = snapshots();
        let mut printer = Printer::new(
            Screen::Redraw {
                cols: Some(80),
                rows: Some(5),
            },
            print(OutputFormat::Table),
            TWO_SECONDS,
        );
        let (doc, now) = doc_at(&before, "2025-06-01T12:00:00Z");
        let mut out = Vec::new();
        assert!(printer.show(&mut out, &doc, now).expect("show"));
        printer.resize(Some(80), Some(3));
        let mut out = Vec::new();
        assert!(printer.show(&mut out, &doc, now).expect("show"));
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.starts_with("\u{1b}[2J"), "a new size clears: {text:?}");
        assert_eq!(text.matches("\u{1b}[K").count(), 3, "{text:?}");
        // Same size again: nothing to redraw. 0 rows: not cut.
        assert!(!printer.show(&mut Vec::new(), &doc, now).expect("show"));
        printer.resize(Some(0), Some(0));
        assert_eq!(
            printer.screen(),
            Screen::Redraw {
                cols: None,
                rows: None
            }
        );
    }

    #[test]
    fn wide_tables_on_a_terminal_are_cut_at_its_edge_and_redrawn_over() {
        let (before, after) = snapshots();
        let mut printer = Printer::new(
            Screen::Redraw {
                cols: Some(60),
                rows: Some(40),
            },
            print(OutputFormat::Wide),
            TWO_SECONDS,
        );
        let (doc, now) = doc_at(&before, "2025-06-01T12:00:00Z");
        assert!(printer.show(&mut Vec::new(), &doc, now).expect("show"));
        let (doc, now) = doc_at(&after, "2025-06-01T12:00:02Z");
        let mut out = Vec::new();
        assert!(printer.show(&mut out, &doc, now).expect("show"));
        let text = String::from_utf8(out).expect("utf-8");
        assert!(
            !text.contains("\u{1b}[2J"),
            "same size: drawn over, not cleared"
        );
        let frame = printer.last_frame().expect("a frame");
        assert!(frame.starts_with("NODEPOOL "), "the wide table: {frame}");
        assert!(frame.lines().all(|l| l.chars().count() <= 60), "{frame}");
        assert!(frame.lines().any(|l| l.ends_with('…')), "{frame}");
    }

    #[test]
    fn warnings_on_a_pipe_go_to_stderr() {
        let mut printer = Printer::new(Screen::Stream, print(OutputFormat::Json), TWO_SECONDS);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        printer
            .warn(&mut out, &mut err, "timed out", fixtures::now())
            .expect("warn");
        assert!(out.is_empty());
        assert_eq!(
            String::from_utf8(err).expect("utf-8"),
            "warning: timed out; retrying\n"
        );
    }
}
