//! `status --interval`: how often `--watch` redraws the cockpit (and reads what the watches do
//! not keep up to date). kubectl's duration syntax, as `--request-timeout` takes it: a whole
//! number of seconds or a Go duration (`500ms`, `5s`, `1m`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::request_timeout::parse_duration;

/// The shortest interval: more often would only redraw the same screen.
pub const MIN: Duration = Duration::from_millis(100);

/// `--interval`'s value; 2 s by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval(pub Duration);

impl Default for Interval {
    /// 2 s, as before the flag existed.
    fn default() -> Self {
        Interval(Duration::from_secs(2))
    }
}

impl fmt::Display for Interval {
    /// A Go-style duration, e.g. `2s`, `500ms` (what `--help` shows as the default).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", kube::core::Duration::from(self.0))
    }
}

impl FromStr for Interval {
    type Err = String;

    /// Errors: not a duration, or shorter than [`MIN`] (`0` included), with what a valid value
    /// looks like.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = |why: &str| {
            format!(
                "invalid interval {s:?}: {why}; it must be a whole number of seconds, or a \
                 number followed by a unit (e.g. 500ms, 5s, 1m), at least 100ms"
            )
        };
        let d = parse_duration(s).map_err(|why| invalid(&why))?;
        if d < MIN {
            return Err(invalid("it is shorter than 100ms"));
        }
        Ok(Interval(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_durations_and_bare_seconds() {
        let ok = [
            ("2", Duration::from_secs(2)),
            ("500ms", Duration::from_millis(500)),
            ("1m30s", Duration::from_secs(90)),
            (" 5s ", Duration::from_secs(5)),
        ];
        for (text, want) in ok {
            assert_eq!(text.parse::<Interval>(), Ok(Interval(want)), "{text}");
        }
        for bad in ["0", "50ms", "", "-1s", "2 parsecs", "1.5"] {
            let err = bad.parse::<Interval>().expect_err(bad);
            assert!(
                err.starts_with(&format!("invalid interval {bad:?}: ")),
                "{err}"
            );
            assert!(err.contains("at least 100ms"), "{err}");
        }
        assert_eq!(Interval::default().to_string(), "2s");
        assert_eq!(Interval(Duration::from_millis(500)).to_string(), "500ms");
    }
}
