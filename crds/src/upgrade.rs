//! Serial node upgrades (an extension of this project): the controls an operator sets on a
//! NodePool, and the state the upgrade orchestrator keeps on NodePools and NodeClaims so that a
//! restarted controller resumes (or rolls back) the step in progress instead of starting another.
//!
//! Controls, on the NodePool (plain `kubectl annotate` works):
//! - [`PAUSED_ANNOTATION`] `"true"`: no new step starts; the step in progress finishes.
//! - [`STEP_ALLOWANCE_ANNOTATION`] `"N"`: while paused, N more steps may start (each start
//!   takes one).
//!
//! State, written by the controller:
//! - on the drifted NodeClaim being replaced: [`REPLACEMENT_ANNOTATION`] (the replacement's
//!   name, or empty for an empty node replaced by nothing), [`STEP_STARTED_ANNOTATION`];
//! - on the replacement: [`REPLACES_ANNOTATION`];
//! - on the NodePool: [`PAUSED_REASON_ANNOTATION`] when the controller paused the rollout after
//!   a failed step, and the `Upgrading` condition with the phase of the step in progress.
//!
//! Finished steps are kept in the durable disruption history ([`crate::history`]: records with
//! reason `Drifted`), read back as [`StepRecord`]s by [`crate::history::upgrade_steps`].
//!
//! Pure: no I/O.

use serde::{Deserialize, Serialize};

/// On a NodePool: `"true"` pauses its rollout after the step in progress.
pub const PAUSED_ANNOTATION: &str = "upgrades.karpenter.sh/paused";
/// On a NodePool: why the controller paused the rollout (a failed step); cleared on resume.
pub const PAUSED_REASON_ANNOTATION: &str = "upgrades.karpenter.sh/paused-reason";
/// On a NodePool: how many more steps may start while paused (a non-negative integer).
pub const STEP_ALLOWANCE_ANNOTATION: &str = "upgrades.karpenter.sh/step-allowance";
/// On a drifted NodeClaim being replaced: the replacement NodeClaim's name (empty when the node
/// is empty and needs no replacement).
pub const REPLACEMENT_ANNOTATION: &str = "upgrades.karpenter.sh/replacement";
/// On a drifted NodeClaim being replaced: RFC 3339 time its step started.
pub const STEP_STARTED_ANNOTATION: &str = "upgrades.karpenter.sh/step-started";
/// On a replacement NodeClaim: the name of the drifted NodeClaim it replaces.
pub const REPLACES_ANNOTATION: &str = "upgrades.karpenter.sh/replaces";
/// NodePool condition type: `True` while a step is in progress (reason: its [`Phase`]).
pub const UPGRADING_CONDITION: &str = "Upgrading";
/// How many finished steps `upgrade status` shows (the newest).
pub const HISTORY_LENGTH: usize = 10;

/// The phase of a step, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// The replacement NodeClaim is launching or registering.
    LaunchingReplacement,
    /// The replacement is registered; waiting for it to be initialized.
    WaitingForInitialization,
    /// The old node is tainted and its pods are being evicted.
    Draining,
    /// The old node is drained; its instance is being terminated.
    Terminating,
}

impl Phase {
    /// The condition reason / column text, e.g. `WaitingForInitialization`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::LaunchingReplacement => "LaunchingReplacement",
            Phase::WaitingForInitialization => "WaitingForInitialization",
            Phase::Draining => "Draining",
            Phase::Terminating => "Terminating",
        }
    }
}

/// How a finished step (or any disruption in [`crate::history`]) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The old node is gone and its replacement (if any) initialized.
    Succeeded,
    /// The replacement did not initialize in time and was deleted; the old node stays.
    RolledBack,
}

/// One finished step, as `kubectl karpenter upgrade status` shows it (derived from the
/// disruption history by [`crate::history::upgrade_steps`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepRecord {
    /// Name of the drifted NodeClaim the step replaced (or removed, for an empty node).
    pub nodeclaim: String,
    /// Its node's name, when known as the step ended (`None` after a successful replacement,
    /// whose old NodeClaim is gone by then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The replacement NodeClaim, if one was launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    /// [`Outcome::Succeeded`] or [`Outcome::RolledBack`].
    pub outcome: Outcome,
    /// Why it ended so: the failure for a rollback, or a note such as an empty node drained
    /// without a replacement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// RFC 3339 time the step started: the [`STEP_STARTED_ANNOTATION`] the controller wrote on
    /// the drifted NodeClaim as it started the step (the record's `decided`).
    pub started: String,
    /// RFC 3339 time the step ended: the old NodeClaim released (its instance gone), or the
    /// rollback.
    pub finished: String,
    /// Whole seconds from `started` to `finished` (launching and initializing the replacement,
    /// draining and terminating the old node).
    pub seconds: u64,
    /// Pods the step's drain moved (DaemonSet pods excluded; 0 for an empty node and for a
    /// rollback), from the record's `podsMoved`. `upgrade status` compares the queued nodes
    /// with it to estimate their steps.
    #[serde(default)]
    pub pods_moved: u32,
}

/// The step allowance annotation as a number (absent or malformed: 0).
pub fn step_allowance(text: Option<&str>) -> u32 {
    text.and_then(|t| t.trim().parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_allowance_reads_leniently() {
        assert_eq!(step_allowance(Some("2")), 2);
        assert_eq!(step_allowance(Some(" 1 ")), 1);
        assert_eq!(step_allowance(Some("-1")), 0);
        assert_eq!(step_allowance(None), 0);
    }
}
