//! Liveness (upstream `lifecycle/liveness.go`): a NodeClaim not launched within the launch
//! timeout of its creation, or not registered within the registration TTL of its launch, is
//! deleted so its pods get capacity elsewhere.

use crds::NodeClaim;
use crds::conditions::{self, LAUNCHED, REGISTERED};
use jiff::Timestamp;

/// How long a NodeClaim may take to launch and to register (upstream's `launchTimeout`, 5m, and
/// `registrationTTL`, 15m; settings `LAUNCH_TIMEOUT` and `REGISTRATION_TTL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// From creation to `Launched=True`.
    pub launch: std::time::Duration,
    /// From `Launched=True` to `Registered=True`.
    pub registration: std::time::Duration,
}

/// Metric reason for a NodeClaim deleted because it never launched.
pub const LAUNCH_TIMEOUT: &str = "launch_timeout";
/// Metric reason for a NodeClaim deleted because its node never registered.
pub const REGISTRATION_TIMEOUT: &str = "registration_timeout";

/// Why the NodeClaim should be deleted now, if it should.
pub fn expired(claim: &NodeClaim, timeouts: Timeouts, now: Timestamp) -> Option<&'static str> {
    let conds = claim
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let since = |type_: &str| {
        conditions::get(conds, type_)
            .map(|c| c.last_transition_time.0)
            .or_else(|| claim.metadata.creation_timestamp.as_ref().map(|t| t.0))
    };
    let older_than = |t: Option<Timestamp>, limit: std::time::Duration| {
        t.is_some_and(|t| now.duration_since(t).as_secs_f64() > limit.as_secs_f64())
    };
    if !conditions::is_true(conds, LAUNCHED) {
        return older_than(since(LAUNCHED), timeouts.launch).then_some(LAUNCH_TIMEOUT);
    }
    if !conditions::is_true(conds, REGISTERED) {
        return older_than(since(REGISTERED), timeouts.registration)
            .then_some(REGISTRATION_TIMEOUT);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use testutil::{T0, condition, nodeclaim};

    fn settings() -> Timeouts {
        Timeouts {
            launch: Duration::from_secs(300),
            registration: Duration::from_secs(900),
        }
    }

    #[test]
    fn launch_and_registration_timeouts() {
        let t = |s: &str| s.parse::<Timestamp>().expect("timestamp");
        let unlaunched = nodeclaim("c").created(T0).build();
        assert_eq!(
            expired(&unlaunched, settings(), t("2026-01-01T00:04:00Z")),
            None
        );
        assert_eq!(
            expired(&unlaunched, settings(), t("2026-01-01T00:06:00Z")),
            Some(LAUNCH_TIMEOUT)
        );
        let launched = nodeclaim("c")
            .created(T0)
            .with_condition(condition("Launched", "True").at("2026-01-01T00:01:00Z"))
            .with_condition(
                condition("Registered", "Unknown")
                    .reason("NodeNotFound")
                    .at("2026-01-01T00:01:00Z"),
            )
            .build();
        assert_eq!(
            expired(&launched, settings(), t("2026-01-01T00:15:00Z")),
            None
        );
        assert_eq!(
            expired(&launched, settings(), t("2026-01-01T00:16:30Z")),
            Some(REGISTRATION_TIMEOUT)
        );
    }
}
