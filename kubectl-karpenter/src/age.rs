//! The AGE column: how long ago a NodeClaim was created, printed the way kubectl prints it
//! (apimachinery's `HumanDuration`: `95s`, `5m3s`, `47m`, `5h12m`, `30h`, `2d4h`, `45d`,
//! `3y12d`, `9y`).

use jiff::Timestamp;

/// Printed when the creation time is unknown (kubectl's placeholder for a zero timestamp).
pub const UNKNOWN: &str = "<unknown>";

/// The age of something created at `created`, as seen at `now`; [`UNKNOWN`] without a time.
pub fn age(created: Option<Timestamp>, now: Timestamp) -> String {
    match created {
        Some(created) => human_duration(now.duration_since(created)),
        None => UNKNOWN.to_owned(),
    }
}

/// kubectl's `HumanDuration` (one implementation serves the sandbox's server-side Tables and
/// this plugin).
pub use crds::duration::human_duration;

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;

    const MINUTE: i64 = 60;
    const HOUR: i64 = 60 * MINUTE;
    const DAY: i64 = 24 * HOUR;
    const YEAR: i64 = 365 * DAY;

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
