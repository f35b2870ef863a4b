//! The command line of `drift explain`: which NodeClaims (one by NodeClaim or Node name, those of
//! a NodePool, or all) and the output format.

use clap::{Args, Subcommand};

/// Help text after `drift --help`.
pub const DRIFT_HELP: &str = "\
Exit status: 0 nothing drifted, 1 something drifted, 2 error.

Examples:
  # Explain every NodeClaim
  kubectl karpenter drift explain
  # Why is this node drifted (or not)?
  kubectl karpenter drift explain ip-10-0-1-17.ec2.internal";

/// Help text after `drift explain --help`.
pub const EXPLAIN_HELP: &str = "\
For each NodeClaim: its Drifted condition as the controller wrote it (reason, when, and the
changes its message lists), the NodePool and EC2NodeClass hashes it was stamped with against the
current ones and the controller's hash versions, and the fields that changed. The checks that need
no cloud (NodePool and EC2NodeClass hashes, NodePool requirements against the NodeClaim's labels,
AMI against the EC2NodeClass status) are also run now, so drift the controller has not marked yet
shows up as \"detected now, not yet marked\". A NodeClaim stamped under another hash version (an
older controller, or upstream Karpenter) is re-stamped by the controller, never drifted.

The name given is a NodeClaim's, or a Node's (matched by the NodeClaim's status.nodeName or
providerID); the `-o name` forms nodeclaim.karpenter.sh/NAME and node/NAME work too.

Exit status: 0 nothing drifted, 1 something drifted, 2 error (e.g. no such NodeClaim or Node).

Examples:
  # Explain every NodeClaim
  kubectl karpenter drift explain
  # Why is this node drifted (or not)?
  kubectl karpenter drift explain ip-10-0-1-17.ec2.internal
  # One NodeClaim, as JSON
  kubectl karpenter drift explain default-x7k2p -o json
  # The NodeClaims of one NodePool
  kubectl karpenter drift explain --nodepool gpu";

/// `drift` subcommands.
#[derive(Debug, Args)]
#[command(subcommand_required = true, arg_required_else_help = true)]
pub struct DriftArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: DriftAction,
}

/// `drift` subcommands.
#[derive(Debug, Subcommand)]
pub enum DriftAction {
    /// Explain why NodeClaims are drifted or not: the Drifted condition, stamped against current
    /// NodePool and EC2NodeClass hashes and hash versions, and the exact fields that changed.
    #[command(after_help = EXPLAIN_HELP)]
    Explain(ExplainArgs),
}

/// `drift explain` flags.
#[derive(Clone, Debug, Args)]
pub struct ExplainArgs {
    /// A NodeClaim or Node name (default: every NodeClaim).
    #[arg(value_name = "NODE|NODECLAIM")]
    pub name: Option<String>,
    /// Only NodeClaims of this NodePool.
    #[arg(long, value_name = "NAME", conflicts_with = "name")]
    pub nodepool: Option<String>,
    /// Output format: text (like kubectl describe), json or yaml (a list of explanations).
    #[arg(short, long, value_enum, default_value_t = ExplainOutput::Text)]
    pub output: ExplainOutput,
}

/// `drift explain -o`: text (one block per NodeClaim), or the explanations as JSON or YAML.
pub type ExplainOutput = crate::output::ReportFormat;

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use crate::cli::{Command, parse_from};

    use super::*;

    fn parse(list: &[&str]) -> Result<crate::cli::Cli, clap::Error> {
        parse_from(list.iter().map(OsString::from).collect())
    }

    #[test]
    fn explain_takes_a_name_or_a_nodepool_and_an_output() {
        let cli = parse(&[
            "kubectl-karpenter",
            "drift",
            "explain",
            "ip-10-0-1-1",
            "-o",
            "json",
        ])
        .expect("parse");
        let Command::Drift(DriftArgs {
            action: DriftAction::Explain(args),
        }) = cli.command
        else {
            panic!("drift explain expected");
        };
        assert_eq!(args.name.as_deref(), Some("ip-10-0-1-1"));
        assert_eq!(args.output, ExplainOutput::Json);
        let cli =
            parse(&["kubectl-karpenter", "drift", "explain", "--nodepool", "gpu"]).expect("parse");
        let Command::Drift(DriftArgs {
            action: DriftAction::Explain(args),
        }) = cli.command
        else {
            panic!("drift explain expected");
        };
        assert_eq!(args.nodepool.as_deref(), Some("gpu"));
        assert_eq!(args.output, ExplainOutput::Text);
        assert!(args.name.is_none());

        let both = parse(&[
            "kubectl-karpenter",
            "drift",
            "explain",
            "x",
            "--nodepool",
            "gpu",
        ]);
        assert!(both.is_err());
        let bad = parse(&["kubectl-karpenter", "drift", "explain", "-o", "wide"]);
        assert!(bad.is_err());
        // `drift` alone prints usage as an error (exit 2).
        let bare = parse(&["kubectl-karpenter", "drift"]).expect_err("subcommand required");
        assert!(bare.use_stderr());
        assert!(
            bare.render().to_string().contains("explain"),
            "{}",
            bare.render()
        );
    }

    #[test]
    fn help_has_examples_and_exit_codes() {
        let err = parse(&["/x/kubectl-karpenter", "drift", "explain", "--help"]).expect_err("help");
        let help = err.render().to_string();
        for want in [
            "Usage: kubectl karpenter drift explain [OPTIONS] [NODE|NODECLAIM]",
            "Examples:",
            "kubectl karpenter drift explain --nodepool gpu",
            "Exit status: 0 nothing drifted, 1 something drifted, 2 error",
            "--kubeconfig",
            "--context",
        ] {
            assert!(help.contains(want), "missing {want:?} in\n{help}");
        }
    }
}
