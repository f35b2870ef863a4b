//! The command line of `disruption` and `disruption explain NODE`: which NodePool, the output
//! format, and whether the controller runs with spot-to-spot consolidation.

use clap::{Args, Subcommand};
use karpenter_core::scheduling::choices::MinValuesPolicy;

/// Help text after `disruption --help`.
pub const DISRUPTION_HELP: &str = "\
Per NodePool: consolidationPolicy, consolidateAfter, its nodes, how many are being disrupted
(DISRUPTING), and per disruption reason how many more nodes its budgets let start being
disrupted now (ALLOWED-DRIFTED, ALLOWED-EMPTY, ALLOWED-UNDERUTILIZED: `no limit`, a number, or
`0 until 17:00 UTC` while a scheduled budget holds it closed). These are what the budgets allow,
not how many nodes are drifted, empty or underutilized: the node table says that. Per node: Consolidatable (delete, or
replace with the cheapest instance type that takes its pods, and the saving per hour), Blocked
with exactly what blocks it (a pod with karpenter.sh/do-not-disrupt, a PodDisruptionBudget that
allows no disruption, the budget, consolidateAfter still running, consolidationPolicy WhenEmpty,
no cheaper placement), or Disrupting (being deleted or replaced already).

The verdicts are computed by the disruption orchestrator's own code over what the cluster shows
now; each node is judged alone, as single-node consolidation judges it (the controller may also
remove several nodes in one command). Instance types and prices are the vendored EC2 catalog
of the region of each EC2NodeClass's resolved subnets, in their zones. Pass --spot-to-spot when
the controller runs with --feature-gates SpotToSpotConsolidation=true.

Exit status: 0 listed, 2 error.

Examples:
  # Every NodePool's budgets and every node's verdict
  kubectl karpenter disruption
  # One NodePool, as JSON
  kubectl karpenter disruption --nodepool default -o json
  # What would happen if this node were removed now?
  kubectl karpenter disruption explain ip-10-0-1-17.ec2.internal";

/// Help text after `disruption explain --help`.
pub const EXPLAIN_HELP: &str = "\
The what-if of removing one node now, whatever blocks it: its verdict, every blocker (each pod's
do-not-disrupt annotation and PodDisruptionBudget, the node's own annotation, consolidateAfter,
the budget), what removing it would take (delete: its pods fit elsewhere; replace: one cheaper
NodeClaim; or why neither), where each pod would go (an existing node or in-flight NodeClaim, or
a new NodeClaim of an instance type) and the fleet's cost change per hour.

The name is a Node's or a NodeClaim's; node/NAME and nodeclaim.karpenter.sh/NAME work too.

Exit status: 0 explained, 2 error (e.g. no such node).

Examples:
  kubectl karpenter disruption explain ip-10-0-1-17.ec2.internal
  kubectl karpenter disruption explain default-x7k2p -o yaml";

/// `disruption` flags and its subcommand.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DisruptionArgs {
    /// `explain NODE`, or none for the report.
    #[command(subcommand)]
    pub action: Option<DisruptionAction>,
    /// Only this NodePool and its nodes.
    #[arg(long, value_name = "NAME")]
    pub nodepool: Option<String>,
    /// Output format: text (a NodePool table, a node table and a summary line), json or yaml
    /// (one document with `time`, `nodepools` and `nodes`).
    #[arg(short, long, value_enum, default_value_t = DisruptionOutput::Text)]
    pub output: DisruptionOutput,
    /// Judge as a controller with the SpotToSpotConsolidation feature gate on.
    #[arg(long, global = true)]
    pub spot_to_spot: bool,
    /// Judge replacements as a controller with this `MIN_VALUES_POLICY` (`Strict` or
    /// `BestEffort`).
    #[arg(long, global = true, default_value = "Strict",
          value_parser = |s: &str| s.parse::<MinValuesPolicy>())]
    pub min_values_policy: MinValuesPolicy,
}

/// `disruption` subcommands.
#[derive(Debug, Subcommand)]
pub enum DisruptionAction {
    /// The what-if of removing one node now: where each pod would go, the cost change, every
    /// blocker.
    #[command(after_help = EXPLAIN_HELP)]
    Explain(ExplainArgs),
}

/// `disruption explain` flags.
#[derive(Clone, Debug, Args)]
pub struct ExplainArgs {
    /// A Node or NodeClaim name.
    #[arg(value_name = "NODE|NODECLAIM")]
    pub name: String,
    /// Output format: text (like kubectl describe), json or yaml (one what-if document).
    #[arg(short, long, value_enum, default_value_t = DisruptionOutput::Text)]
    pub output: DisruptionOutput,
}

impl ExplainArgs {
    /// The name without a `node/`, `nodes/` or `nodeclaim(s)[.karpenter.sh]/` prefix.
    pub fn bare_name(&self) -> &str {
        match self.name.split_once('/') {
            Some((
                "node"
                | "nodes"
                | "nodeclaim"
                | "nodeclaims"
                | "nodeclaim.karpenter.sh"
                | "nodeclaims.karpenter.sh",
                name,
            )) => name,
            _ => &self.name,
        }
    }
}

/// `disruption -o` and `disruption explain -o`: text, or the one document as JSON or YAML
/// (not an array: `disruption` prints one report of every NodePool and node, `explain` one
/// what-if).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DisruptionOutput {
    /// Tables and a summary line (`disruption`), or a block like `kubectl describe`
    /// (`explain`).
    Text,
    /// One JSON document: `time`, `nodepools` and `nodes` (`disruption`), or the what-if
    /// (`explain`).
    Json,
    /// The same document as YAML.
    Yaml,
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use crate::cli::{Command, parse_from};

    use super::*;

    fn parse(list: &[&str]) -> Result<crate::cli::Cli, clap::Error> {
        parse_from(list.iter().map(OsString::from).collect())
    }

    fn disruption(list: &[&str]) -> DisruptionArgs {
        match parse(list).expect("parse").command {
            Command::Disruption(args) => args,
            other => panic!("disruption expected, got {other:?}"),
        }
    }

    #[test]
    fn the_report_takes_a_nodepool_an_output_and_the_gate() {
        let args = disruption(&[
            "kubectl-karpenter",
            "disruption",
            "--nodepool",
            "gpu",
            "-o",
            "yaml",
            "--spot-to-spot",
        ]);
        assert!(args.action.is_none());
        assert_eq!(args.nodepool.as_deref(), Some("gpu"));
        assert_eq!(args.output, DisruptionOutput::Yaml);
        assert!(args.spot_to_spot);
    }

    #[test]
    fn explain_takes_a_name_with_or_without_a_kind() {
        for (given, bare) in [
            ("ip-10-0-1-1", "ip-10-0-1-1"),
            ("node/ip-10-0-1-1", "ip-10-0-1-1"),
            ("nodeclaim.karpenter.sh/default-x", "default-x"),
        ] {
            let args = disruption(&[
                "kubectl-karpenter",
                "disruption",
                "explain",
                given,
                "-o",
                "json",
            ]);
            let Some(DisruptionAction::Explain(explain)) = args.action else {
                panic!("explain expected");
            };
            assert_eq!(explain.bare_name(), bare);
            assert_eq!(explain.output, DisruptionOutput::Json);
        }
        assert!(parse(&["kubectl-karpenter", "disruption", "explain"]).is_err());
    }
}
