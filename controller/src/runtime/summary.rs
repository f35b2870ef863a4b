//! Prometheus summaries, which `prometheus-client` does not provide: quantiles over the
//! observations of a sliding window, plus the running sum and count (client_golang's
//! `SummaryVec`, which upstream's `karpenter_pods_startup_duration_seconds` and
//! `karpenter_nodes_termination_duration_seconds` are). Encoded as OpenMetrics text
//! (`# TYPE <name> summary`, `<name>{quantile="0.5"}`, `<name>_sum`, `<name>_count`) and spliced
//! into the registry's exposition before its `# EOF` ([`splice`]).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The quantiles reported, as upstream's summaries report them.
pub const QUANTILES: [f64; 5] = [0.0, 0.5, 0.9, 0.99, 1.0];
/// How long an observation counts towards the quantiles (client_golang's default `MaxAge`).
pub const MAX_AGE: Duration = Duration::from_secs(600);
/// The most observations a series keeps for its quantiles (the oldest are dropped first).
const MAX_KEPT: usize = 10_000;

#[derive(Debug, Default)]
struct Series {
    window: VecDeque<(Instant, f64)>,
    sum: f64,
    count: u64,
}

/// A summary family: one series per label values, in the order of `labels`.
#[derive(Debug)]
pub struct Summary {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    series: Mutex<BTreeMap<Vec<String>, Series>>,
}

impl Summary {
    /// An empty family `name` (with its unit suffix, e.g. `_seconds`) whose series are told
    /// apart by `labels`.
    pub const fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Summary {
        Summary {
            name,
            help,
            labels,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    /// Observe `value` (seconds, for a duration) in the series of `values` (one per label).
    pub fn observe(&self, values: &[&str], value: f64) {
        if !value.is_finite() {
            return;
        }
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let s = series
            .entry(values.iter().map(|v| v.to_string()).collect())
            .or_default();
        s.window.push_back((Instant::now(), value));
        if s.window.len() > MAX_KEPT {
            s.window.pop_front();
        }
        s.sum += value;
        s.count += 1;
    }

    /// The family as OpenMetrics text, observations older than [`MAX_AGE`] forgotten for the
    /// quantiles (a series with none left reports `NaN`, as client_golang does).
    pub fn encode(&self, out: &mut String) {
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} summary", self.name);
        let now = Instant::now();
        for (values, s) in series.iter_mut() {
            while s
                .window
                .front()
                .is_some_and(|(at, _)| now.duration_since(*at) > MAX_AGE)
            {
                s.window.pop_front();
            }
            let mut sorted: Vec<f64> = s.window.iter().map(|(_, v)| *v).collect();
            sorted.sort_by(f64::total_cmp);
            let labels: Vec<String> = self
                .labels
                .iter()
                .zip(values)
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            for q in QUANTILES {
                let mut all = labels.clone();
                all.push(format!("quantile=\"{q}\""));
                let _ = writeln!(
                    out,
                    "{}{{{}}} {}",
                    self.name,
                    all.join(","),
                    number(quantile(&sorted, q))
                );
            }
            let braces = if labels.is_empty() {
                String::new()
            } else {
                format!("{{{}}}", labels.join(","))
            };
            let _ = writeln!(out, "{}_sum{braces} {}", self.name, number(s.sum));
            let _ = writeln!(out, "{}_count{braces} {}", self.name, s.count);
        }
    }
}

/// The `q` quantile of `sorted` (nearest rank), `NaN` when empty.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// A sample value as OpenMetrics writes it (`NaN`, `+Inf`, or the shortest round trip).
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v:?}")
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `exposition` (the registry's OpenMetrics text, ending `# EOF`) with `extra` families added
/// before its end marker.
pub fn splice(mut exposition: String, extra: &str) -> String {
    match exposition.rfind("# EOF") {
        Some(at) => {
            exposition.insert_str(at, extra);
            exposition
        }
        None => exposition + extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_sum_and_count_per_series() {
        let s = Summary::new("x_seconds", "Test.", &["nodepool"]);
        for v in [1.0, 2.0, 3.0, 4.0, 10.0] {
            s.observe(&["default"], v);
        }
        s.observe(&["gpu"], 7.5);
        let mut out = String::new();
        s.encode(&mut out);
        assert!(out.starts_with("# HELP x_seconds Test.\n# TYPE x_seconds summary\n"));
        assert!(out.contains("x_seconds{nodepool=\"default\",quantile=\"0\"} 1.0\n"));
        assert!(out.contains("x_seconds{nodepool=\"default\",quantile=\"0.5\"} 3.0\n"));
        assert!(out.contains("x_seconds{nodepool=\"default\",quantile=\"1\"} 10.0\n"));
        assert!(out.contains("x_seconds_sum{nodepool=\"default\"} 20.0\n"));
        assert!(out.contains("x_seconds_count{nodepool=\"default\"} 5\n"));
        assert!(out.contains("x_seconds{nodepool=\"gpu\",quantile=\"0.99\"} 7.5\n"));
        let spliced = splice("a 1\n# EOF\n".into(), &out);
        assert!(
            spliced.ends_with("_count{nodepool=\"gpu\"} 1\n# EOF\n"),
            "{spliced}"
        );
    }

    #[test]
    fn a_series_without_labels_and_no_recent_observation() {
        let s = Summary::new("y_seconds", "Test.", &[]);
        s.observe(&[], f64::NAN);
        let mut out = String::new();
        s.encode(&mut out);
        assert!(!out.contains("y_seconds_count"), "NaN is not observed");
        s.observe(&[], 2.0);
        let mut out = String::new();
        s.encode(&mut out);
        assert!(out.contains("y_seconds{quantile=\"0.9\"} 2.0\n"));
        assert!(out.contains("y_seconds_sum 2.0\ny_seconds_count 1\n"));
    }
}
