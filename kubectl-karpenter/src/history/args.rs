//! The command line of `history`: which records (`--nodepool`, `--since`) and how to print them
//! (`-o table|wide|json|yaml`, `--no-headers`).

use std::time::Duration;

use clap::{Args, ValueEnum};

/// Help text after `history --help`.
pub const HISTORY_HELP: &str = "\
Reads the ConfigMap karpenter-disruption-history that the controller keeps in its own namespace
(the leader Lease's; `kubectl get configmap -A --field-selector
metadata.name=karpenter-disruption-history -o yaml` shows it too): one record per NodeClaim
Karpenter removed, for any reason (Empty, Underutilized, Drifted, Expired, LaunchTimeout,
RegistrationTimeout, GarbageCollected, InsufficientCapacity, NodeClassNotReady; SpotInterrupted,
ScheduledChange, InstanceStopped, InstanceTerminated when EC2 interrupted its instance; Unhealthy
when node repair replaced it; or Deleted when someone deleted it without a Karpenter reason), and
one per disruption it rolled back (OUTCOME RolledBack: the replacement did not initialize and
the node kept running). It survives controller restarts and Event expiry; the controller keeps
the newest 500 records.

Records are listed oldest first, the newest last (as `kubectl get events` and logs read). AGE is
the time since the NodeClaim was released; PODS the reschedulable pods its node had when the
drain began; COST-CHANGE the hourly cost the fleet lost or gained: the replacement's price (its
share, when one replacement took several NodeClaims' place) minus the removed NodeClaim's.
-o wide adds the node, zone, capacity type, price, replacement, decision time and message.
-o json|yaml prints the records as a list (camelCase fields).

The ConfigMap is looked up in every namespace, or only in the one -n names.
Exit status: 0 listed (also when there is nothing to list), 2 error.

Examples:
  # Everything Karpenter removed, oldest first
  kubectl karpenter history
  # One NodePool's last day, with replacements and prices
  kubectl karpenter history --nodepool default --since 24h -o wide
  # The cost change of the last hour's disruptions, as JSON
  kubectl karpenter history --since 1h -o json | jq '[.[].costChange // 0] | add'";

/// `history` flags.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only the records of this NodePool.
    #[arg(long, value_name = "NAME")]
    pub nodepool: Option<String>,
    /// Only the records finished this long ago or less (a duration such as 30m, 24h, 1h30m).
    #[arg(long, value_name = "DURATION", value_parser = crate::orphans::args::parse_duration)]
    pub since: Option<Duration>,
    /// Output format: table, wide (more columns), json or yaml (the list of records).
    #[arg(short, long, value_enum, default_value_t = HistoryOutput::Table)]
    pub output: HistoryOutput,
    /// Print rows only, without the header line.
    #[arg(long)]
    pub no_headers: bool,
}

/// `history -o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HistoryOutput {
    /// A kubectl-style table.
    Table,
    /// The table with the wide columns.
    Wide,
    /// The records as a JSON list.
    Json,
    /// The records as a YAML list.
    Yaml,
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use crate::cli::{Command, parse_from};

    use super::*;

    fn parse(list: &[&str]) -> Result<HistoryArgs, clap::Error> {
        let mut args = vec!["kubectl-karpenter", "history"];
        args.extend_from_slice(list);
        let cli = parse_from(args.into_iter().map(OsString::from).collect())?;
        let Command::History(history) = cli.command else {
            panic!("history expected");
        };
        Ok(history)
    }

    #[test]
    fn flags_parse_like_kubectl() {
        let a = parse(&[]).expect("parse");
        assert_eq!(
            (a.nodepool, a.since, a.output),
            (None, None, HistoryOutput::Table)
        );
        let a = parse(&["--nodepool", "gpu", "--since", "24h", "-o", "wide"]).expect("parse");
        assert_eq!(a.nodepool.as_deref(), Some("gpu"));
        assert_eq!(a.since, Some(Duration::from_secs(24 * 3600)));
        assert_eq!(a.output, HistoryOutput::Wide);
        let err = parse(&["--since", "yesterday"]).expect_err("not a duration");
        assert!(err.to_string().contains("is not a duration"), "{err}");
        assert!(parse(&["-o", "name"]).is_err());
    }

    #[test]
    fn help_has_examples_and_exit_codes() {
        let err = parse_from(
            ["/x/kubectl-karpenter", "history", "--help"]
                .into_iter()
                .map(OsString::from)
                .collect(),
        )
        .expect_err("help");
        let help = err.render().to_string();
        for want in [
            "Usage: kubectl karpenter history [OPTIONS]",
            "Examples:",
            "Exit status: 0 listed",
            "--since <DURATION>",
            "--nodepool <NAME>",
            "karpenter-disruption-history",
        ] {
            assert!(help.contains(want), "missing {want:?} in\n{help}");
        }
    }
}
