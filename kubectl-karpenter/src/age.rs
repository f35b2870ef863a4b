//! The AGE column: how long ago a NodeClaim was created, printed the way kubectl prints it
//! (apimachinery's `HumanDuration`: `95s`, `5m3s`, `47m`, `5h12m`, `30h`, `2d4h`, `45d`,
//! `3y12d`, `9y`).

use jiff::{SignedDuration, Timestamp};

/// Printed when the creation time is unknown (kubectl's placeholder for a zero timestamp).
pub const UNKNOWN: &str = "<unknown>";

/// Printed when the creation time is more than a second in the future (clock skew).
pub const INVALID: &str = "<invalid>";

const MINUTE: i64 = 60;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
const YEAR: i64 = 365 * DAY;

/// The age of something created at `created`, as seen at `now`; [`UNKNOWN`] without a time.
pub fn age(created: Option<Timestamp>, now: Timestamp) -> String {
    match created {
        Some(created) => human_duration(now.duration_since(created)),
        None => UNKNOWN.to_owned(),
    }
}

/// Formats an elapsed duration with kubectl's precision rules: the coarser the age, the fewer
/// units shown. Negative durations of up to (but excluding) two whole seconds count as `0s` to
/// tolerate clock skew; anything further in the future is [`INVALID`].
pub fn human_duration(elapsed: SignedDuration) -> String {
    // Whole seconds, truncated toward zero (so -1.9s is -1s, still tolerated).
    let secs = elapsed.as_secs();
    if secs < -1 {
        return INVALID.to_owned();
    }
    if secs < 0 {
        return "0s".to_owned();
    }
    if secs < 2 * MINUTE {
        return format!("{secs}s");
    }
    let minutes = secs / MINUTE;
    if minutes < 10 {
        return with_remainder(minutes, "m", secs % MINUTE, "s");
    }
    if minutes < 3 * 60 {
        return format!("{minutes}m");
    }
    let hours = secs / HOUR;
    if hours < 8 {
        return with_remainder(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = secs / DAY;
    if hours < 8 * 24 {
        return with_remainder(days, "d", hours % 24, "h");
    }
    if days < 2 * 365 {
        return format!("{days}d");
    }
    let years = secs / YEAR;
    if days < 8 * 365 {
        return with_remainder(years, "y", days % 365, "d");
    }
    format!("{years}y")
}

/// `5m3s`, or just `5m` when the smaller unit is zero.
fn with_remainder(major: i64, major_unit: &str, minor: i64, minor_unit: &str) -> String {
    if minor == 0 {
        format!("{major}{major_unit}")
    } else {
        format!("{major}{major_unit}{minor}{minor_unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: i64) -> SignedDuration {
        SignedDuration::from_secs(s)
    }

    #[test]
    fn boundaries_follow_kubectl() {
        let cases: &[(SignedDuration, &str)] = &[
            (SignedDuration::from_millis(-2000), "<invalid>"),
            (SignedDuration::from_millis(-1999), "0s"),
            (SignedDuration::from_millis(-500), "0s"),
            (secs(0), "0s"),
            (SignedDuration::from_millis(1999), "1s"),
            (secs(95), "95s"),
            (secs(119), "119s"),
            (secs(120), "2m"),
            (secs(121), "2m1s"),
            (secs(5 * MINUTE + 3), "5m3s"),
            (secs(10 * MINUTE - 1), "9m59s"),
            (secs(10 * MINUTE), "10m"),
            (secs(47 * MINUTE + 59), "47m"),
            (secs(3 * HOUR - 1), "179m"),
            (secs(3 * HOUR), "3h"),
            (secs(5 * HOUR + 12 * MINUTE + 59), "5h12m"),
            (secs(8 * HOUR - 1), "7h59m"),
            (secs(8 * HOUR), "8h"),
            (secs(30 * HOUR), "30h"),
            (secs(48 * HOUR - 1), "47h"),
            (secs(48 * HOUR), "2d"),
            (secs(2 * DAY + 4 * HOUR), "2d4h"),
            (secs(8 * DAY - 1), "7d23h"),
            (secs(8 * DAY), "8d"),
            (secs(45 * DAY), "45d"),
            (secs(2 * YEAR - 1), "729d"),
            (secs(2 * YEAR), "2y"),
            (secs(3 * YEAR + 12 * DAY), "3y12d"),
            (secs(8 * YEAR - 1), "7y364d"),
            (secs(8 * YEAR), "8y"),
            (secs(9 * YEAR + 200 * DAY), "9y"),
        ];
        for (elapsed, want) in cases {
            assert_eq!(human_duration(*elapsed), *want, "{elapsed:?}");
        }
    }

    #[test]
    fn age_from_timestamps() {
        let now: Timestamp = "2025-06-01T12:00:00Z".parse().expect("now");
        let created: Timestamp = "2025-06-01T11:54:57Z".parse().expect("created");
        assert_eq!(age(Some(created), now), "5m3s");
        assert_eq!(age(None, now), "<unknown>");
        let future: Timestamp = "2025-06-01T12:00:05Z".parse().expect("future");
        assert_eq!(age(Some(future), now), "<invalid>");
    }
}
