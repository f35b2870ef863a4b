//! A NodePool's `NodeRegistrationHealthy` condition (upstream v1.4,
//! `designs/noderegistrationhealthy-status-condition.md`, `pkg/state/nodepoolhealth`): whether
//! the nodes it launches join the cluster. Each NodeClaim that registers counts as a success,
//! each deleted for its launch or registration timeout as a failure; the last [`WINDOW`] (4)
//! outcomes decide:
//!
//! - no outcome yet: `Unknown` (a new NodePool, or one whose spec or node class changed);
//! - half the window or more failed: `False`, reason `RegistrationFailed` ("Failed to register
//!   node") when the NodeClaim had launched, else its `Launched` condition's reason and message;
//! - otherwise `True`.
//!
//! As upstream, the condition moves to False only on a failure and to True only on a success,
//! never on a restart: a restarted controller seeds the window from the condition it finds.
//! It is not a prerequisite of `Ready`: an unhealthy NodePool still provisions.

use std::collections::VecDeque;

/// How many of the latest outcomes are weighed (upstream `BufferSize`).
pub const WINDOW: usize = 4;

/// The share of [`WINDOW`] that must be failures for the condition to go False (upstream
/// `ThresholdFalse`): 2 of 4.
pub const UNHEALTHY_SHARE: f64 = 0.5;

/// Upstream's reason when a launched NodeClaim's node never registered.
pub const REGISTRATION_FAILED: &str = "RegistrationFailed";

/// How registration stands over the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// No outcome in the window.
    Unknown,
    /// Fewer than half the window failed.
    Healthy,
    /// Half the window or more failed.
    Unhealthy,
}

/// What the condition should say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// `Unknown`: reset (the NodePool's spec or its node class changed), nothing known yet.
    Unknown,
    /// `True`.
    Healthy,
    /// `False` with this reason and message.
    Unhealthy {
        /// `RegistrationFailed`, or the failed launch's reason.
        reason: String,
        /// `Failed to register node`, or the failed launch's message.
        message: String,
    },
}

/// One launch's end, as a NodeClaim's lifecycle saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Its node registered.
    Registered,
    /// It was deleted for its launch or registration timeout; `launched` says whether it had
    /// launched (then the node never joined), else `reason`/`message` are its `Launched`
    /// condition's.
    TimedOut {
        /// Whether the NodeClaim had launched.
        launched: bool,
        /// Its `Launched` condition's reason (used when it had not launched).
        reason: String,
        /// Its `Launched` condition's message (used when it had not launched).
        message: String,
    },
}

/// One NodePool's registration outcomes and the verdict they led to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracker {
    window: VecDeque<bool>,
    verdict: Verdict,
    /// The NodePool's and its node class's `metadata.generation` the window was kept for.
    generations: (i64, i64),
}

fn health(window: &VecDeque<bool>) -> Health {
    if window.is_empty() {
        return Health::Unknown;
    }
    let failures = window.iter().filter(|ok| !**ok).count();
    if failures as f64 / WINDOW as f64 >= UNHEALTHY_SHARE {
        Health::Unhealthy
    } else {
        Health::Healthy
    }
}

impl Tracker {
    /// A tracker for a NodePool first seen (e.g. after a restart) with its condition's
    /// `status` (`True`, `False`, `Unknown` or none), `reason` and `message`, at the NodePool's
    /// and node class's generations `generations`: the window holds what the condition implies
    /// (one success for True, enough failures for False), as upstream's `SetStatus` does.
    pub fn seeded(
        status: Option<&str>,
        reason: &str,
        message: &str,
        generations: (i64, i64),
    ) -> Tracker {
        let (window, verdict) = match status {
            Some("True") => (VecDeque::from([true]), Verdict::Healthy),
            Some("False") => (
                std::iter::repeat_n(false, (WINDOW as f64 * UNHEALTHY_SHARE) as usize).collect(),
                Verdict::Unhealthy {
                    reason: reason.to_string(),
                    message: message.to_string(),
                },
            ),
            _ => (VecDeque::new(), Verdict::Unknown),
        };
        Tracker {
            window,
            verdict,
            generations,
        }
    }

    /// The verdict the condition should carry.
    pub fn verdict(&self) -> &Verdict {
        &self.verdict
    }

    /// The window's health.
    pub fn health(&self) -> Health {
        health(&self.window)
    }

    /// Forget every outcome and say `Unknown` when the NodePool's or node class's generation
    /// is not the one the window was kept for (upstream resets on any spec change of either).
    /// Returns whether it reset.
    pub fn observe(&mut self, generations: (i64, i64)) -> bool {
        if self.generations == generations {
            return false;
        }
        self.generations = generations;
        self.window.clear();
        self.verdict = Verdict::Unknown;
        true
    }

    /// Count `outcome`: a success turns the verdict True when the window with it is healthy;
    /// a failure turns it False when the window with it is unhealthy and it is not False
    /// already. The window keeps the last [`WINDOW`] outcomes.
    pub fn record(&mut self, outcome: &Outcome) {
        let ok = matches!(outcome, Outcome::Registered);
        self.window.push_back(ok);
        while self.window.len() > WINDOW {
            self.window.pop_front();
        }
        let health = self.health();
        match outcome {
            Outcome::Registered if health == Health::Healthy => self.verdict = Verdict::Healthy,
            Outcome::TimedOut {
                launched,
                reason,
                message,
            } if health == Health::Unhealthy
                && !matches!(self.verdict, Verdict::Unhealthy { .. }) =>
            {
                self.verdict = if *launched {
                    Verdict::Unhealthy {
                        reason: REGISTRATION_FAILED.into(),
                        message: "Failed to register node".into(),
                    }
                } else {
                    Verdict::Unhealthy {
                        reason: reason.clone(),
                        message: message.clone(),
                    }
                };
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> Outcome {
        Outcome::TimedOut {
            launched: true,
            reason: String::new(),
            message: String::new(),
        }
    }

    fn verdicts(outcomes: &[Outcome]) -> Vec<Verdict> {
        let mut t = Tracker::seeded(None, "", "", (1, 1));
        outcomes
            .iter()
            .map(|o| {
                t.record(o);
                t.verdict().clone()
            })
            .collect()
    }

    fn unhealthy() -> Verdict {
        Verdict::Unhealthy {
            reason: REGISTRATION_FAILED.into(),
            message: "Failed to register node".into(),
        }
    }

    #[test]
    fn two_failures_in_four_turn_it_false_and_a_healthy_window_turns_it_back() {
        use Outcome::Registered as ok;
        // Upstream's examples: [true] True; [false] still Unknown; [false, false] False.
        assert_eq!(verdicts(&[ok]), [Verdict::Healthy]);
        assert_eq!(verdicts(&[failed()]), [Verdict::Unknown]);
        assert_eq!(
            verdicts(&[failed(), failed(), ok, ok, ok]),
            [
                Verdict::Unknown,
                unhealthy(),
                // [f, f, t] and [f, f, t, t]: half the window still failed.
                unhealthy(),
                unhealthy(),
                // [f, t, t, t]: healthy again.
                Verdict::Healthy,
            ]
        );
        // A True condition goes False once half the window failed.
        assert_eq!(
            verdicts(&[ok, failed(), failed()]).last(),
            Some(&unhealthy())
        );
    }

    #[test]
    fn a_launch_that_never_happened_gives_its_own_reason() {
        let mut t = Tracker::seeded(None, "", "", (1, 1));
        let not_launched = Outcome::TimedOut {
            launched: false,
            reason: "LaunchFailed".into(),
            message: "no capacity".into(),
        };
        t.record(&not_launched);
        t.record(&not_launched);
        assert_eq!(
            t.verdict(),
            &Verdict::Unhealthy {
                reason: "LaunchFailed".into(),
                message: "no capacity".into()
            }
        );
    }

    #[test]
    fn a_spec_change_resets_and_a_restart_keeps_the_condition() {
        let mut t = Tracker::seeded(Some("False"), REGISTRATION_FAILED, "m", (3, 7));
        assert_eq!(t.health(), Health::Unhealthy);
        assert!(!t.observe((3, 7)));
        // One success after a restart does not hide two failures.
        t.record(&Outcome::Registered);
        assert!(matches!(t.verdict(), Verdict::Unhealthy { .. }));
        assert!(t.observe((4, 7)));
        assert_eq!(
            (t.verdict(), t.health()),
            (&Verdict::Unknown, Health::Unknown)
        );
        let healthy = Tracker::seeded(Some("True"), "", "", (1, 1));
        assert_eq!(healthy.verdict(), &Verdict::Healthy);
    }
}
