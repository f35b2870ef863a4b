//! The command line of `upgrade status|pause|resume|step`: which NodePools (`--nodepool NAME`
//! or `--all`) and the output format, with the help text an operator reads before steering a
//! rollout.

use clap::{Args, Subcommand, ValueEnum};

use super::UpgradeError;

/// Help text after `upgrade --help`.
pub const UPGRADE_HELP: &str = "\
The controller replaces drifted nodes one step at a time per NodePool; these commands read and
set the NodePool annotations that steer it (upgrades.karpenter.sh/paused, step-allowance).

Examples:
  # Where every rollout stands (exit 1 while anything is drifted)
  kubectl karpenter upgrade status
  # Go one node at a time through a NodePool's rollout
  kubectl karpenter upgrade pause --nodepool default
  kubectl karpenter upgrade step --nodepool default
  kubectl karpenter upgrade resume --nodepool default";

/// Help text after `upgrade status --help`.
pub const STATUS_HELP: &str = "\
Per NodePool: whether its rollout runs or is paused (by you, or by the controller after a failed
step, with the reason), the step allowance left while paused, how many steps may run at once
(1, or what the NodePool's Drifted budgets allow), the steps in progress with their phase
(LaunchingReplacement, WaitingForInitialization, Draining, Terminating) and elapsed time, the
drifted NodeClaims queued in the order they will be replaced (empty nodes first, then fewest
pods, then oldest) with their pods and drain timeout, the drifted NodeClaims skipped and why (a
PodDisruptionBudget that allows no disruption, karpenter.sh/do-not-disrupt), the recent steps
(the NodePool's Drifted records of the disruption history, with the pods each moved and its
duration from the step's start to the old node's release; `kubectl karpenter history` shows
every record), and an estimate of the time left.

The estimate goes by size: each step left (in progress, counted in full, or queued; skipped
NodeClaims are not counted) is expected to take the mean duration of the recent succeeded steps
that moved the fewest pods among those that moved at least as many as its node has (an empty
node goes by the empty ones). When a step left moves more pods than any recent succeeded step
did, or no step has succeeded yet, the estimate is unknown and names that NodeClaim rather than
guess from smaller nodes. It also says how long draining the queued nodes may take at most: their
drain timeouts added up (pods are forced off after that), since PodDisruptionBudgets and slow
shutdowns can make a drain run that long.

Every NodePool is shown unless --nodepool names one. -o json|yaml prints a list with, per
NodePool, the controller's plan (the fields above), its history and the estimate.

Exit status: 0 nothing drifted, 1 drifted NodeClaims are queued, in progress or skipped,
2 error (e.g. no such NodePool).

Examples:
  # Every NodePool's rollout
  kubectl karpenter upgrade status
  # One NodePool, as JSON
  kubectl karpenter upgrade status --nodepool default -o json";

/// Help text after `upgrade pause --help`.
pub const PAUSE_HELP: &str = "\
Sets the annotation upgrades.karpenter.sh/paused=true on the NodePool: no new replacement step
starts, and the step in progress, if any, finishes. Pausing a paused NodePool changes nothing.
`upgrade step` lets one more step run while paused; `upgrade resume` lets the rollout go on.

--nodepool NAME or --all is required: nothing is changed without naming what to change.
Exit status: 0 done, 2 error (e.g. no such NodePool).

Examples:
  kubectl karpenter upgrade pause --nodepool default
  # Stop every rollout in the cluster
  kubectl karpenter upgrade pause --all";

/// Help text after `upgrade resume --help`.
pub const RESUME_HELP: &str = "\
Removes the annotations upgrades.karpenter.sh/paused, upgrades.karpenter.sh/paused-reason (set
when the controller paused the rollout after a failed step) and upgrades.karpenter.sh/step-allowance
from the NodePool, so the rollout goes on with the next queued NodeClaim. Resuming a NodePool that
is not paused changes nothing.

--nodepool NAME or --all is required: nothing is changed without naming what to change.
Exit status: 0 done, 2 error (e.g. no such NodePool).

Examples:
  kubectl karpenter upgrade resume --nodepool default
  kubectl karpenter upgrade resume --all";

/// Help text after `upgrade step --help`.
pub const STEP_HELP: &str = "\
While a NodePool is paused, lets exactly one more replacement step start: adds 1 to the
annotation upgrades.karpenter.sh/step-allowance (a read-modify-write guarded by the NodePool's
resourceVersion, retried when another writer got there first). The controller takes one from the
allowance for each step it starts, then stays paused. Run it twice to allow two steps.

A NodePool that is not paused is left alone, with a note that its rollout is running: there is
nothing to step through (this is not an error, exit 0). Pause it first to go one node at a time.

--nodepool NAME or --all is required: nothing is changed without naming what to change.
Exit status: 0 done (or nothing to do), 2 error (e.g. no such NodePool).

Examples:
  kubectl karpenter upgrade pause --nodepool default
  kubectl karpenter upgrade step --nodepool default
  kubectl karpenter upgrade status --nodepool default";

/// `upgrade` subcommands.
#[derive(Debug, Args)]
#[command(subcommand_required = true, arg_required_else_help = true)]
pub struct UpgradeArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: UpgradeAction,
}

/// `upgrade` subcommands.
#[derive(Debug, Subcommand)]
pub enum UpgradeAction {
    /// Show the rollout of drifted nodes per NodePool: state, steps in progress, the queue,
    /// skipped nodes and why, recent steps, and the time left.
    #[command(after_help = STATUS_HELP)]
    Status(TargetArgs),
    /// Pause a NodePool's rollout: no new step starts; the step in progress finishes.
    #[command(after_help = PAUSE_HELP)]
    Pause(TargetArgs),
    /// Resume a paused rollout (also one the controller paused after a failed step).
    #[command(after_help = RESUME_HELP)]
    Resume(TargetArgs),
    /// Let one more replacement step start while a rollout is paused.
    #[command(after_help = STEP_HELP)]
    Step(TargetArgs),
}

impl UpgradeAction {
    /// The subcommand's name, as typed.
    pub fn name(&self) -> &'static str {
        match self {
            UpgradeAction::Status(_) => "status",
            UpgradeAction::Pause(_) => "pause",
            UpgradeAction::Resume(_) => "resume",
            UpgradeAction::Step(_) => "step",
        }
    }

    /// Its flags.
    pub fn args(&self) -> &TargetArgs {
        match self {
            UpgradeAction::Status(a)
            | UpgradeAction::Pause(a)
            | UpgradeAction::Resume(a)
            | UpgradeAction::Step(a) => a,
        }
    }

    /// The NodePools it acts on: `status` defaults to every NodePool; `pause`, `resume` and
    /// `step` change the cluster and need `--nodepool` or `--all`.
    ///
    /// Errors: [`UpgradeError::NoTarget`].
    pub fn selection(&self) -> Result<Selection, UpgradeError> {
        let args = self.args();
        match (&args.nodepool, args.all) {
            (Some(name), _) => Ok(Selection::One(name.clone())),
            (None, true) => Ok(Selection::All),
            (None, false) if matches!(self, UpgradeAction::Status(_)) => Ok(Selection::All),
            (None, false) => Err(UpgradeError::NoTarget {
                action: self.name(),
            }),
        }
    }
}

/// Flags of every `upgrade` subcommand.
#[derive(Clone, Debug, Args)]
pub struct TargetArgs {
    /// The NodePool to show or change.
    #[arg(long, value_name = "NAME", conflicts_with = "all")]
    pub nodepool: Option<String>,
    /// Every NodePool (what `status` shows by default; `pause`, `resume` and `step` need
    /// either --nodepool or --all).
    #[arg(long)]
    pub all: bool,
    /// Output format: text, json or yaml (a list with one entry per NodePool).
    #[arg(short, long, value_enum, default_value_t = UpgradeOutput::Text)]
    pub output: UpgradeOutput,
}

/// `upgrade -o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum UpgradeOutput {
    /// Like `kubectl describe`, one block per NodePool.
    Text,
    /// A JSON array.
    Json,
    /// The same array as YAML.
    Yaml,
}

/// Which NodePools a command acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// The one named.
    One(String),
    /// All of them.
    All,
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use crate::cli::{Command, parse_from};

    use super::*;

    fn parse(list: &[&str]) -> Result<UpgradeAction, clap::Error> {
        let mut args = vec!["kubectl-karpenter", "upgrade"];
        args.extend_from_slice(list);
        let cli = parse_from(args.into_iter().map(OsString::from).collect())?;
        let Command::Upgrade(upgrade) = cli.command else {
            panic!("upgrade expected");
        };
        Ok(upgrade.action)
    }

    #[test]
    fn status_defaults_to_every_nodepool_and_text() {
        let action = parse(&["status"]).expect("parse");
        assert_eq!(action.selection().expect("all"), Selection::All);
        assert_eq!(action.args().output, UpgradeOutput::Text);
        let action = parse(&["status", "--nodepool", "gpu", "-o", "yaml"]).expect("parse");
        assert_eq!(
            action.selection().expect("one"),
            Selection::One("gpu".into())
        );
        assert_eq!(action.args().output, UpgradeOutput::Yaml);
        assert!(parse(&["status", "-o", "wide"]).is_err());
        assert!(parse(&["status", "--nodepool", "a", "--all"]).is_err());
    }

    #[test]
    fn changes_need_a_nodepool_or_all() {
        for action in ["pause", "resume", "step"] {
            let parsed = parse(&[action]).expect("parse");
            let err = parsed.selection().expect_err("no target");
            assert_eq!(
                err.to_string(),
                format!(
                    "`upgrade {action}` changes NodePools and needs to be told which: \
                     --nodepool NAME for one, or --all for every NodePool (`kubectl karpenter \
                     upgrade status` lists them)"
                )
            );
            let parsed = parse(&[action, "--all"]).expect("parse");
            assert_eq!(parsed.selection().expect("all"), Selection::All);
            assert_eq!(parsed.name(), action);
            let parsed = parse(&[action, "--nodepool", "default"]).expect("parse");
            assert_eq!(
                parsed.selection().expect("one"),
                Selection::One("default".into())
            );
        }
        // `upgrade` alone prints usage as an error (exit 2).
        let bare = parse(&[]).expect_err("subcommand required");
        assert!(bare.use_stderr());
    }

    #[test]
    fn help_has_examples_and_exit_codes() {
        for (action, want) in [
            (
                "status",
                "Exit status: 0 nothing drifted, 1 drifted NodeClaims",
            ),
            ("pause", "kubectl karpenter upgrade pause --all"),
            ("resume", "upgrades.karpenter.sh/paused-reason"),
            (
                "step",
                "nothing to step through (this is not an error, exit 0)",
            ),
        ] {
            let err = parse_from(
                ["/x/kubectl-karpenter", "upgrade", action, "--help"]
                    .into_iter()
                    .map(OsString::from)
                    .collect(),
            )
            .expect_err("help");
            let help = err.render().to_string();
            for want in [
                &format!("Usage: kubectl karpenter upgrade {action} [OPTIONS]"),
                "Examples:",
                want,
                "--kubeconfig",
                "--context",
                "--nodepool <NAME>",
            ] {
                assert!(help.contains(want), "missing {want:?} in\n{help}");
            }
        }
    }
}
