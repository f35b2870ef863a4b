//! The step a started disruption command takes next (upstream `disruption/queue.go`, which
//! waits for a command's replacements to initialize before it deletes the candidates, and
//! rolls the command back when they do not): one pure rule for consolidation and interruption,
//! which the orchestrator's executor carries out.
//!
//! - A consolidation command deletes its candidates once its replacement is initialized, waits
//!   while the replacement launches, and rolls back (deletes the replacement, untaints the
//!   candidates) when the replacement is deleted, gone, or not initialized within the timeout
//!   (upstream's 10 minutes for a replacement to initialize; this project's
//!   `UPGRADE_INITIALIZATION_TIMEOUT`).
//! - An interruption command has a drain-by time instead (the interruption's deadline): it
//!   deletes its candidates once the replacement is initialized, gone, or the time has come,
//!   and never rolls back: the instance is going whatever is decided.

use std::time::Duration;

use crds::conditions::{self, INITIALIZED};
use crds::{NodeClaim, StatusConditions};
use jiff::Timestamp;

/// What the cluster shows of a command's replacement NodeClaim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replacement {
    /// The command has none (a delete).
    NotNeeded,
    /// It is named on the candidates but neither the cache nor the API server has it.
    Gone,
    /// It is being deleted.
    Deleted,
    /// It exists and is not `Initialized` yet.
    Launching,
    /// It is `Initialized`.
    Initialized,
}

impl Replacement {
    /// The state of the replacement named `name` (empty: the command has none), as `found` (the
    /// cache's or the API server's copy, `None` when neither has it).
    pub fn of(name: &str, found: Option<&NodeClaim>) -> Replacement {
        match found {
            _ if name.is_empty() => Replacement::NotNeeded,
            None => Replacement::Gone,
            Some(r) if r.metadata.deletion_timestamp.is_some() => Replacement::Deleted,
            Some(r) if conditions::is_true(r.status_conditions(), INITIALIZED) => {
                Replacement::Initialized
            }
            Some(_) => Replacement::Launching,
        }
    }
}

/// When a command stops waiting for its replacement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// Consolidation: roll back once the replacement has not initialized within `timeout` of
    /// `started` (the command's start, from its candidates' annotation).
    RollBackAfter {
        /// When the command started.
        started: Timestamp,
        /// How long the replacement may take to initialize.
        timeout: Duration,
    },
    /// Interruption: delete the candidates at this time whatever the replacement does.
    DrainBy(Timestamp),
}

/// The next step of a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Delete the candidates that are not being deleted yet.
    Terminate,
    /// Wait: the replacement is launching and the deadline has not come.
    Wait,
    /// Give the command up: delete the replacement (if it exists) and untaint the candidates,
    /// which keep running. The reason, for people: `replacement default-x7k2p was deleted`.
    RollBack(String),
    /// Nothing is left to do: every candidate is being deleted or gone.
    Done,
}

/// The next step of a command with `waiting` candidates not yet being deleted, whose
/// replacement is `replacement` (named `name`), at `now`.
pub fn next_step(
    waiting: usize,
    replacement: Replacement,
    name: &str,
    deadline: Deadline,
    now: Timestamp,
) -> Step {
    if waiting == 0 {
        return Step::Done;
    }
    match (replacement, deadline) {
        (Replacement::NotNeeded | Replacement::Initialized, _) => Step::Terminate,
        (_, Deadline::DrainBy(at)) => match replacement {
            Replacement::Launching if now < at => Step::Wait,
            _ => Step::Terminate,
        },
        (Replacement::Deleted, Deadline::RollBackAfter { .. }) => {
            Step::RollBack(format!("replacement {name} was deleted"))
        }
        (Replacement::Gone, Deadline::RollBackAfter { .. }) => {
            Step::RollBack(format!("replacement {name} is gone"))
        }
        (Replacement::Launching, Deadline::RollBackAfter { started, timeout }) => {
            let elapsed = now
                .duration_since(started)
                .max(jiff::SignedDuration::ZERO)
                .unsigned_abs();
            if elapsed <= timeout {
                Step::Wait
            } else {
                Step::RollBack(format!(
                    "replacement {name} did not initialize within {}s",
                    timeout.as_secs()
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("time")
    }

    const START: &str = "2026-01-01T00:00:00Z";

    fn consolidation() -> Deadline {
        Deadline::RollBackAfter {
            started: at(START),
            timeout: Duration::from_secs(600),
        }
    }

    #[test]
    fn a_command_with_nothing_left_waiting_is_done_whatever_its_replacement() {
        for r in [
            Replacement::NotNeeded,
            Replacement::Gone,
            Replacement::Deleted,
            Replacement::Launching,
            Replacement::Initialized,
        ] {
            assert_eq!(next_step(0, r, "r", consolidation(), at(START)), Step::Done);
        }
    }

    #[test]
    fn a_delete_terminates_at_once_and_a_replace_once_its_replacement_is_initialized() {
        let now = at("2026-01-01T00:01:00Z");
        assert_eq!(
            next_step(2, Replacement::NotNeeded, "", consolidation(), now),
            Step::Terminate
        );
        assert_eq!(
            next_step(1, Replacement::Initialized, "r", consolidation(), now),
            Step::Terminate
        );
        assert_eq!(
            next_step(1, Replacement::Launching, "r", consolidation(), now),
            Step::Wait
        );
    }

    #[test]
    fn a_consolidation_rolls_back_when_its_replacement_is_deleted_gone_or_late() {
        let now = at("2026-01-01T00:01:00Z");
        assert_eq!(
            next_step(1, Replacement::Deleted, "r-1", consolidation(), now),
            Step::RollBack("replacement r-1 was deleted".into())
        );
        assert_eq!(
            next_step(1, Replacement::Gone, "r-1", consolidation(), now),
            Step::RollBack("replacement r-1 is gone".into())
        );
        // Exactly the timeout still waits; a second more rolls back.
        assert_eq!(
            next_step(
                1,
                Replacement::Launching,
                "r-1",
                consolidation(),
                at("2026-01-01T00:10:00Z")
            ),
            Step::Wait
        );
        assert_eq!(
            next_step(
                1,
                Replacement::Launching,
                "r-1",
                consolidation(),
                at("2026-01-01T00:10:01Z")
            ),
            Step::RollBack("replacement r-1 did not initialize within 600s".into())
        );
        // A clock that went back waits (no negative elapsed time).
        assert_eq!(
            next_step(
                1,
                Replacement::Launching,
                "r-1",
                consolidation(),
                at("2025-12-31T23:00:00Z")
            ),
            Step::Wait
        );
    }

    #[test]
    fn an_interruption_never_rolls_back_and_drains_by_its_deadline() {
        let drain_by = Deadline::DrainBy(at("2026-01-01T00:02:00Z"));
        let before = at("2026-01-01T00:01:00Z");
        let after = at("2026-01-01T00:02:00Z");
        assert_eq!(
            next_step(1, Replacement::Launching, "r", drain_by, before),
            Step::Wait
        );
        assert_eq!(
            next_step(1, Replacement::Launching, "r", drain_by, after),
            Step::Terminate
        );
        for r in [
            Replacement::Gone,
            Replacement::Deleted,
            Replacement::Initialized,
            Replacement::NotNeeded,
        ] {
            assert_eq!(next_step(1, r, "r", drain_by, before), Step::Terminate);
        }
    }
}
