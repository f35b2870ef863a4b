//! Log output. `karpenter run` writes one JSON object per line, as upstream Karpenter's zap
//! logger does: `level`, `time` (RFC 3339, milliseconds), `logger`, `message`, then the fields
//! of every enclosing span (`controller`, and `nodeclaim`, `nodepool` where a reconcile names
//! them) and of the event itself, all at the top level so log queries need no nesting.
//! The sandbox and `LOG_FORMAT=text` write tracing's human-readable lines.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use super::options::LogFormat;

/// The `logger` value of every line (upstream: `controller`).
pub const LOGGER: &str = "controller";

/// Formats each event as one flat JSON object. Span fields are read from the JSON the
/// subscriber's field formatter stored, so install it with [`JsonFields`] (as [`init_json`]
/// does); spans formatted otherwise contribute nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonLines;

struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .insert(field.name().into(), Value::from(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), Value::from(format!("{value:?}")));
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Map::new();
        line.insert(
            "level".into(),
            Value::from(meta.level().as_str().to_ascii_lowercase()),
        );
        line.insert(
            "time".into(),
            Value::from(format!("{:.3}", jiff::Timestamp::now())),
        );
        line.insert("logger".into(), Value::from(LOGGER));
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                if let Some(stored) = ext.get::<FormattedFields<N>>()
                    && let Ok(Value::Object(fields)) = serde_json::from_str(stored.as_str())
                {
                    line.extend(fields);
                }
            }
        }
        event.record(&mut Fields(&mut line));
        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

fn filter(level: &str) -> EnvFilter {
    EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"))
}

/// The logger of `karpenter run`: `format` lines (`LOG_FORMAT`) of the events `level`
/// (`LOG_LEVEL`, a level or a tracing filter) lets through, written to `writer`; text lines are
/// coloured when `ansi`. Settings validation ([`super::ControllerOptions::settings`]) refuses an
/// invalid level before `karpenter run` starts its logger; here one falls back to `info`.
pub fn subscriber<W>(
    format: LogFormat,
    level: &str,
    ansi: bool,
    writer: W,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter(level))
        .with_writer(writer);
    match format {
        LogFormat::Json => Box::new(
            builder
                .fmt_fields(JsonFields::new())
                .event_format(JsonLines)
                .finish(),
        ),
        LogFormat::Text => Box::new(builder.with_ansi(ansi).finish()),
    }
}

/// Install the [`subscriber`] of `format` and `level` on stderr: JSON lines, or text lines
/// coloured only when stderr is a terminal and `NO_COLOR` is unset or empty (as the plugin and
/// kubectl colour). Does nothing when a subscriber is already installed.
pub fn init(format: LogFormat, level: &str) {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let ansi = std::io::stderr().is_terminal() && !no_color;
    let _ = subscriber(format, level, ansi, std::io::stderr).try_init();
}

/// [`init`] with JSON lines.
pub fn init_json(level: &str) {
    init(LogFormat::Json, level);
}

/// [`init`] with human-readable lines.
pub fn init_text(level: &str) {
    init(LogFormat::Text, level);
}

/// Install human-readable lines without colour into `file` at `level`.
pub fn init_file(level: &str, file: std::fs::File) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter(level))
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `karpenter run` with `args` (its `LOG_FORMAT` and `LOG_LEVEL` flags) writes for an
    /// info and a debug event.
    fn logged(args: &[&str]) -> Vec<String> {
        use super::super::options::{ControllerOptions, RunOptions};
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            controller: ControllerOptions,
            #[command(flatten)]
            run: RunOptions,
        }
        let cli = Cli::try_parse_from(std::iter::once("karpenter").chain(args.iter().copied()))
            .expect("flags parse");
        let buf = Buffer::default();
        let writer = buf.clone();
        let logger = subscriber(
            cli.run.log_format,
            &cli.controller.log_level,
            false,
            move || writer.clone(),
        );
        tracing::subscriber::with_default(logger, || {
            tracing::info!(nodepool = "default", "launched nodeclaim");
            tracing::debug!(pods = 3, "batch window closed");
        });
        let text = String::from_utf8(buf.0.lock().expect("buffer").clone()).expect("utf-8");
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn log_format_and_log_level_decide_what_is_written() {
        // Defaults: JSON lines at info; the debug event is left out.
        let lines = logged(&[]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        let info: Value = serde_json::from_str(&lines[0]).expect("a JSON line");
        assert_eq!(
            (&info["level"], &info["message"], &info["nodepool"]),
            (
                &Value::from("info"),
                &Value::from("launched nodeclaim"),
                &Value::from("default")
            )
        );
        // LOG_LEVEL=debug lets the debug event through.
        let lines = logged(&["--log-level", "debug"]);
        assert_eq!(lines.len(), 2, "{lines:?}");
        let debug: Value = serde_json::from_str(&lines[1]).expect("a JSON line");
        assert_eq!(debug["level"], "debug");
        assert_eq!(debug["pods"], 3);
        // LOG_LEVEL=error hides both.
        assert_eq!(logged(&["--log-level", "error"]), Vec::<String>::new());
        // LOG_FORMAT=text writes human-readable lines, not JSON.
        let lines = logged(&["--log-format", "text", "--log-level", "debug"]);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines
                .iter()
                .all(|l| serde_json::from_str::<Value>(l).is_err()),
            "{lines:?}"
        );
        assert!(
            lines[0].contains(" INFO ")
                && lines[0].contains("launched nodeclaim")
                && lines[0].contains("nodepool=\"default\""),
            "{lines:?}"
        );
        assert!(
            lines[1].contains("DEBUG") && lines[1].contains("pods=3"),
            "{lines:?}"
        );
    }

    #[test]
    fn lines_are_flat_json_with_span_fields() {
        let buf = Buffer::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::new("info"))
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("controller", controller = "provisioner");
            let _g = span.enter();
            let reconcile = tracing::info_span!("reconcile", nodeclaim = "default-abc");
            let _r = reconcile.enter();
            tracing::info!(nodepool = "default", count = 2, "launched nodeclaim");
            tracing::debug!("filtered out");
        });
        let text = String::from_utf8(buf.0.lock().expect("buffer").clone()).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let v: Value = serde_json::from_str(lines[0]).expect("one JSON object per line");
        assert_eq!(v["level"], "info");
        assert_eq!(v["logger"], "controller");
        assert_eq!(v["message"], "launched nodeclaim");
        assert_eq!(v["controller"], "provisioner");
        assert_eq!(v["nodeclaim"], "default-abc");
        assert_eq!(v["nodepool"], "default");
        assert_eq!(v["count"], 2);
        let time = v["time"].as_str().expect("time");
        assert!(time.parse::<jiff::Timestamp>().is_ok(), "{time}");
        assert_eq!(
            time.split('.').nth(1).map(str::len),
            Some(4),
            "ms + Z: {time}"
        );
    }
}
