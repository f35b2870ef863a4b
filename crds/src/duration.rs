//! Durations as Kubernetes users read and write them: Go-style durations used by
//! NodePool/NodeClaim fields (`expireAfter` and `consolidateAfter` as [`NillableDuration`],
//! which also accepts `Never`; `terminationGracePeriod` and budget `duration` as
//! [`GoDuration`], a `metav1.Duration`), and kubectl's AGE ([`human_duration`]).
//!
//! Both types remember the exact string they were parsed from and write it back unchanged, as
//! upstream's `NillableDuration.Raw` does (`pkg/apis/v1/duration.go`), so `720h` never comes
//! back as `720h0m0s` and GitOps tools see no diff. Equality compares the duration only.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use jiff::SignedDuration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The literal that disables a [`NillableDuration`] (`expireAfter: Never`, `consolidateAfter: Never`).
pub const NEVER: &str = "Never";

/// CRD pattern for `expireAfter` and `consolidateAfter` (`pkg/apis/v1/nodepool.go`).
pub const NILLABLE_DURATION_PATTERN: &str = r"^(([0-9]+(s|m|h))+|Never)$";

/// CRD pattern for `terminationGracePeriod` (`pkg/apis/v1/nodepool.go`).
pub const TERMINATION_GRACE_PERIOD_PATTERN: &str = r"^([0-9]+(s|m|h))+$";

/// CRD pattern for a disruption budget's `duration`: hours and/or minutes, optionally followed by
/// the `0s` that Go's `Duration.String()` appends (`pkg/apis/v1/nodepool.go`).
pub const BUDGET_DURATION_PATTERN: &str = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$";

/// Why a string is not a Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The input was empty.
    #[error("invalid duration \"\": empty string")]
    Empty,
    /// A component had no digits, e.g. `h` or `.s`.
    #[error("invalid duration {0:?}: expected a number")]
    InvalidNumber(String),
    /// A number was not followed by a unit, e.g. `10`.
    #[error("invalid duration {0:?}: missing unit (one of ns, us, µs, ms, s, m, h)")]
    MissingUnit(String),
    /// A unit other than ns, us, µs, ms, s, m, h.
    #[error("invalid duration {input:?}: unknown unit {unit:?}")]
    UnknownUnit {
        /// The whole string as given, e.g. `10d`.
        input: String,
        /// The unit that is not a Go duration unit, e.g. `d`.
        unit: String,
    },
    /// A negative duration; Karpenter's durations are never negative.
    #[error("invalid duration {0:?}: negative durations are not allowed")]
    Negative(String),
    /// Larger than Go's `time.Duration` (about 292 years).
    #[error("invalid duration {0:?}: overflows a Go time.Duration")]
    Overflow(String),
}

const NANOS_PER_SEC: u128 = 1_000_000_000;
/// Go's `time.Duration` is an `int64` of nanoseconds.
const MAX_GO_NANOS: u128 = i64::MAX as u128;

/// Parses a duration the way Go's `time.ParseDuration` does: a sequence of decimal numbers, each
/// with an optional fraction and a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`), e.g. `720h`,
/// `1h30m`, `1.5s`, `0s`, or the bare `0`. A leading `+` is accepted; negative values are
/// rejected (except `-0`) because no Karpenter duration may be negative.
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let mut s = input;
    let mut negative = false;
    if let Some(rest) = s.strip_prefix('-') {
        negative = true;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total: u128 = 0;
    while !s.is_empty() {
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, rest) = s.split_at(int_len);
        s = rest;
        let mut frac_digits = "";
        if let Some(rest) = s.strip_prefix('.') {
            let frac_len = rest.bytes().take_while(u8::is_ascii_digit).count();
            (frac_digits, s) = rest.split_at(frac_len);
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(DurationError::InvalidNumber(input.to_string()));
        }
        let unit_len = s
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(s.len(), |(i, _)| i);
        let (unit, rest) = s.split_at(unit_len);
        s = rest;
        let unit_nanos: u128 = match unit {
            "" => return Err(DurationError::MissingUnit(input.to_string())),
            "ns" => 1,
            "us" | "\u{00b5}s" | "\u{03bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => NANOS_PER_SEC,
            "m" => 60 * NANOS_PER_SEC,
            "h" => 3_600 * NANOS_PER_SEC,
            other => {
                return Err(DurationError::UnknownUnit {
                    input: input.to_string(),
                    unit: other.to_string(),
                });
            }
        };
        let overflow = || DurationError::Overflow(input.to_string());
        let whole: u128 = if int_digits.is_empty() {
            0
        } else {
            int_digits.parse::<u128>().map_err(|_| overflow())?
        };
        let mut component = whole.checked_mul(unit_nanos).ok_or_else(overflow)?;
        if !frac_digits.is_empty() {
            // Digits beyond nanosecond precision of the largest unit cannot change the result.
            let kept = &frac_digits[..frac_digits.len().min(20)];
            let numerator = kept.parse::<u128>().map_err(|_| overflow())?;
            let scale = 10u128.pow(kept.len() as u32);
            component += numerator * unit_nanos / scale;
        }
        total = total.checked_add(component).ok_or_else(overflow)?;
        if total > MAX_GO_NANOS {
            return Err(overflow());
        }
    }
    if negative && total != 0 {
        return Err(DurationError::Negative(input.to_string()));
    }
    let secs = u64::try_from(total / NANOS_PER_SEC)
        .map_err(|_| DurationError::Overflow(input.to_string()))?;
    // The remainder is below 1e9 and so always fits in a u32.
    let nanos = (total % NANOS_PER_SEC) as u32;
    Ok(Duration::new(secs, nanos))
}

/// Formats a duration exactly like Go's `time.Duration.String()`: `720h0m0s`, `1m30s`, `0s`,
/// `1.5s`, `500ms`, `1.5µs`.
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < NANOS_PER_SEC {
        let (unit, div, prec) = if nanos < 1_000 {
            ("ns", 1u128, 0usize)
        } else if nanos < 1_000_000 {
            ("\u{00b5}s", 1_000, 3)
        } else {
            ("ms", 1_000_000, 6)
        };
        return format!("{}{}{unit}", nanos / div, fraction(nanos % div, prec));
    }
    let total_secs = nanos / NANOS_PER_SEC;
    let sub = nanos % NANOS_PER_SEC;
    let hours = total_secs / 3_600;
    let minutes = (total_secs / 60) % 60;
    let seconds = total_secs % 60;
    let secs_part = format!("{seconds}{}s", fraction(sub, 9));
    if hours > 0 {
        format!("{hours}h{minutes}m{secs_part}")
    } else if minutes > 0 {
        format!("{minutes}m{secs_part}")
    } else {
        secs_part
    }
}

/// `.ddd` with `prec` digits and trailing zeros removed, or `""` when the fraction is zero.
fn fraction(value: u128, prec: usize) -> String {
    if value == 0 || prec == 0 {
        return String::new();
    }
    let digits = format!("{value:0prec$}");
    format!(".{}", digits.trim_end_matches('0'))
}

/// A `metav1.Duration`: a Go duration string such as `24h` or `1h30m` that keeps its original
/// spelling (see the module docs).
///
/// Used for `terminationGracePeriod` and a budget's `duration`; the CRD pattern for each field is
/// applied where the field is declared.
#[derive(Clone, Debug, Default)]
pub struct GoDuration {
    duration: Duration,
    raw: Option<String>,
}

impl GoDuration {
    /// A duration that serializes in Go's canonical form (e.g. `24h0m0s`).
    pub fn new(duration: Duration) -> Self {
        Self {
            duration,
            raw: None,
        }
    }

    /// Parses a Go duration string and remembers its spelling.
    pub fn parse(s: &str) -> Result<Self, DurationError> {
        Ok(Self {
            duration: parse_go_duration(s)?,
            raw: Some(s.to_string()),
        })
    }

    /// The parsed length (nanosecond precision, as Go's `time.Duration`), whatever its spelling.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// The string this value serializes to.
    pub fn as_string(&self) -> Cow<'_, str> {
        match &self.raw {
            Some(raw) => Cow::Borrowed(raw),
            None => Cow::Owned(format_go_duration(self.duration)),
        }
    }
}

impl From<Duration> for GoDuration {
    fn from(duration: Duration) -> Self {
        Self::new(duration)
    }
}

impl PartialEq for GoDuration {
    fn eq(&self, other: &Self) -> bool {
        self.duration == other.duration
    }
}

impl Eq for GoDuration {}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_string())
    }
}

impl std::str::FromStr for GoDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.as_string())
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = Cow::<'de, str>::deserialize(deserializer)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for GoDuration {
    fn schema_name() -> Cow<'static, str> {
        "GoDuration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string" })
    }
}

/// A duration that may be disabled with `Never` (upstream `NillableDuration`).
///
/// `expireAfter: Never` means nodes never expire; `consolidateAfter: Never` disables
/// consolidation. [`NillableDuration::duration`] is `None` for `Never`.
#[derive(Clone, Debug, Default)]
pub struct NillableDuration {
    duration: Option<Duration>,
    raw: Option<String>,
}

impl NillableDuration {
    /// `Never`: no duration; [`NillableDuration::duration`] is `None` and it serializes as `Never`.
    pub fn never() -> Self {
        Self::default()
    }

    /// A duration that serializes in Go's canonical form (e.g. `720h0m0s`).
    pub fn new(duration: Duration) -> Self {
        Self {
            duration: Some(duration),
            raw: None,
        }
    }

    /// Parses `Never` or a Go duration string, remembering its spelling.
    pub fn parse(s: &str) -> Result<Self, DurationError> {
        if s == NEVER {
            return Ok(Self::never());
        }
        Ok(Self {
            duration: Some(parse_go_duration(s)?),
            raw: Some(s.to_string()),
        })
    }

    /// The duration, or `None` for `Never`.
    pub fn duration(&self) -> Option<Duration> {
        self.duration
    }

    /// Whether this is `Never`.
    pub fn is_never(&self) -> bool {
        self.duration.is_none()
    }

    /// The string this value serializes to.
    pub fn as_string(&self) -> Cow<'_, str> {
        match (&self.raw, self.duration) {
            (Some(raw), Some(_)) => Cow::Borrowed(raw),
            (_, Some(d)) => Cow::Owned(format_go_duration(d)),
            (_, None) => Cow::Borrowed(NEVER),
        }
    }
}

impl From<Duration> for NillableDuration {
    fn from(duration: Duration) -> Self {
        Self::new(duration)
    }
}

impl From<Option<Duration>> for NillableDuration {
    fn from(duration: Option<Duration>) -> Self {
        Self {
            duration,
            raw: None,
        }
    }
}

impl PartialEq for NillableDuration {
    fn eq(&self, other: &Self) -> bool {
        self.duration == other.duration
    }
}

impl Eq for NillableDuration {}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_string())
    }
}

impl std::str::FromStr for NillableDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for NillableDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.as_string())
    }
}

impl<'de> Deserialize<'de> for NillableDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = Cow::<'de, str>::deserialize(deserializer)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for NillableDuration {
    fn schema_name() -> Cow<'static, str> {
        "NillableDuration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "pattern": NILLABLE_DURATION_PATTERN })
    }
}

/// Whether `s` matches [`NILLABLE_DURATION_PATTERN`] (`Never` or digits+unit groups in s/m/h).
pub fn matches_nillable_pattern(s: &str) -> bool {
    s == NEVER || matches_unit_groups(s, &['s', 'm', 'h'])
}

/// Whether `s` matches [`TERMINATION_GRACE_PERIOD_PATTERN`].
pub fn matches_termination_grace_period_pattern(s: &str) -> bool {
    matches_unit_groups(s, &['s', 'm', 'h'])
}

/// Whether `s` matches [`BUDGET_DURATION_PATTERN`]: `Nh`, `Nm` or `NhMm`, optionally followed by `0s`.
pub fn matches_budget_duration_pattern(s: &str) -> bool {
    let body_ok = |body: &str| {
        unit_groups(body).is_some_and(|groups| {
            let units: String = groups.iter().map(|(_, unit)| *unit).collect();
            matches!(units.as_str(), "h" | "m" | "hm")
        })
    };
    body_ok(s) || s.strip_suffix("0s").is_some_and(body_ok)
}

/// Splits `s` into `(digits, unit)` groups where every unit is one ASCII letter; `None` if `s`
/// has any other shape.
fn unit_groups(s: &str) -> Option<Vec<(&str, char)>> {
    if s.is_empty() {
        return None;
    }
    let mut groups = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let unit = rest[digits..].chars().next()?;
        if !unit.is_ascii_alphabetic() {
            return None;
        }
        groups.push((&rest[..digits], unit));
        rest = &rest[digits + 1..];
    }
    Some(groups)
}

fn matches_unit_groups(s: &str, units: &[char]) -> bool {
    unit_groups(s).is_some_and(|groups| groups.iter().all(|(_, u)| units.contains(u)))
}

/// kubectl's HumanDuration (apimachinery `pkg/util/duration`), the AGE column of `kubectl get`
/// and of the plugin's tables: about two significant figures (`95s`, `5m3s`, `47m`, `5h12m`, `30h`,
/// `2d4h`, `45d`, `3y12d`); `0s` up to a second in the future, `<invalid>` beyond that.
pub fn human_duration(d: SignedDuration) -> String {
    let secs = d.as_secs();
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let (minutes, hours) = (secs / 60, secs / 3600);
    let (days, years) = (hours / 24, hours / 24 / 365);
    let pair = |big: i64, unit: &str, small: i64, small_unit: &str| match small {
        0 => format!("{big}{unit}"),
        _ => format!("{big}{unit}{small}{small_unit}"),
    };
    match () {
        _ if minutes < 10 => pair(minutes, "m", secs % 60, "s"),
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 => pair(hours, "h", minutes % 60, "m"),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 => pair(days, "d", hours % 24, "h"),
        _ if hours < 24 * 365 * 2 => format!("{days}d"),
        _ if hours < 24 * 365 * 8 => pair(years, "y", days % 365, "d"),
        _ => format!("{years}y"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = 3600;

    #[test]
    fn parses_go_durations() {
        let cases: &[(&str, Duration)] = &[
            ("720h", Duration::from_secs(720 * H)),
            ("1h30m", Duration::from_secs(H + 1800)),
            ("0s", Duration::ZERO),
            ("0", Duration::ZERO),
            ("-0", Duration::ZERO),
            ("+5s", Duration::from_secs(5)),
            ("90s", Duration::from_secs(90)),
            ("1.5s", Duration::from_millis(1500)),
            (".5s", Duration::from_millis(500)),
            ("5.s", Duration::from_secs(5)),
            ("10.5s4m", Duration::from_millis(250_500)),
            ("1h2m3s4ms5us6ns", Duration::new(H + 123, 4_005_006)),
            ("12µs", Duration::from_micros(12)),
            ("12μs", Duration::from_micros(12)),
            (
                "0.3333333333333333333h",
                Duration::from_secs(1199) + Duration::from_nanos(999_999_999),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse_go_duration(input).as_ref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn rejects_bad_durations() {
        let cases: &[(&str, DurationError)] = &[
            ("", DurationError::Empty),
            ("3", DurationError::MissingUnit("3".into())),
            ("h", DurationError::InvalidNumber("h".into())),
            (".s", DurationError::InvalidNumber(".s".into())),
            ("-5s", DurationError::Negative("-5s".into())),
            (
                "5d",
                DurationError::UnknownUnit {
                    input: "5d".into(),
                    unit: "d".into(),
                },
            ),
            ("9999999999h", DurationError::Overflow("9999999999h".into())),
        ];
        for (input, want) in cases {
            assert_eq!(parse_go_duration(input).as_ref(), Err(want), "{input}");
        }
    }

    #[test]
    fn formats_like_go() {
        let cases: &[(Duration, &str)] = &[
            (Duration::ZERO, "0s"),
            (Duration::from_secs(720 * H), "720h0m0s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(H), "1h0m0s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(1500), "1.5µs"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::new(H + 1, 500_000_000), "1h0m1.5s"),
        ];
        for (d, want) in cases {
            assert_eq!(format_go_duration(*d), *want);
            assert_eq!(parse_go_duration(want), Ok(*d), "round trip {want}");
        }
    }

    #[test]
    fn nillable_keeps_spelling_and_never() {
        let d: NillableDuration = serde_json::from_str("\"720h\"").expect("parse");
        assert_eq!(d.duration(), Some(Duration::from_secs(720 * H)));
        assert_eq!(serde_json::to_string(&d).expect("ser"), "\"720h\"");
        assert_eq!(d, NillableDuration::new(Duration::from_secs(720 * H)));
        assert_eq!(
            NillableDuration::new(Duration::from_secs(720 * H)).to_string(),
            "720h0m0s"
        );

        let never: NillableDuration = serde_json::from_str("\"Never\"").expect("parse");
        assert!(never.is_never());
        assert_eq!(never.duration(), None);
        assert_eq!(serde_json::to_string(&never).expect("ser"), "\"Never\"");
        assert!(serde_json::from_str::<NillableDuration>("\"never\"").is_err());
        assert!(serde_json::from_str::<NillableDuration>("30").is_err());
    }

    #[test]
    fn go_duration_keeps_spelling() {
        let d: GoDuration = serde_json::from_str("\"24h\"").expect("parse");
        assert_eq!(d.duration(), Duration::from_secs(24 * H));
        assert_eq!(serde_json::to_string(&d).expect("ser"), "\"24h\"");
        assert_eq!(
            GoDuration::new(Duration::from_secs(90)).to_string(),
            "1m30s"
        );
    }

    #[test]
    fn patterns() {
        for ok in ["720h", "Never", "0s", "1h30m", "90s"] {
            assert!(matches_nillable_pattern(ok), "{ok}");
        }
        for bad in ["", "never", "1.5h", "500ms", "1d", "h"] {
            assert!(!matches_nillable_pattern(bad), "{bad}");
        }
        assert!(matches_termination_grace_period_pattern("24h"));
        assert!(!matches_termination_grace_period_pattern("Never"));
        for ok in ["1h", "30m", "1h30m", "10h0s", "1h30m0s", "0m"] {
            assert!(matches_budget_duration_pattern(ok), "{ok}");
        }
        for bad in ["", "30s", "1h30m10s", "0s", "1d", "1m1h"] {
            assert!(!matches_budget_duration_pattern(bad), "{bad}");
        }
    }

    #[test]
    fn human_duration_matches_kubectl_boundaries() {
        #[rustfmt::skip]
        let cases = [
            (-3, "<invalid>"), (-2, "<invalid>"), (-1, "0s"), (0, "0s"), (95, "95s"), (119, "119s"),
            (120, "2m"), (303, "5m3s"), (599, "9m59s"), (600, "10m"), (47 * 60, "47m"), (179 * 60, "179m"),
            (180 * 60, "3h"), (5 * 3600 + 12 * 60, "5h12m"), (8 * 3600, "8h"), (30 * 3600, "30h"),
            (47 * 3600, "47h"), (48 * 3600, "2d"), (52 * 3600, "2d4h"), (191 * 3600, "7d23h"),
            (8 * 86400, "8d"), (45 * 86400, "45d"), (729 * 86400, "729d"), (730 * 86400, "2y"),
            ((3 * 365 + 12) * 86400, "3y12d"), (8 * 365 * 86400, "8y"), (20 * 365 * 86400, "20y"),
        ];
        for (secs, want) in cases {
            assert_eq!(
                human_duration(SignedDuration::from_secs(secs)),
                want,
                "{secs}s"
            );
        }
        assert_eq!(human_duration(SignedDuration::from_millis(-1900)), "0s");
    }
}
