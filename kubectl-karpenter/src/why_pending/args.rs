//! The command line of `why-pending`: one pod or every pending pod of the namespace (`-n`,
//! `-A` and the context's namespace come from the global flags), and the output format.

use clap::Args;

/// Help text after `why-pending --help`.
pub const WHY_PENDING_HELP: &str = "\
A pod is pending while it is not bound to a node. For each one: the NodeClaim (or node) it was
nominated to, from Karpenter's `Nominated` Event, and that NodeClaim's state; otherwise every
NodePool's verdict from the controller's own scheduling core, heaviest weight first: compatible
(the cheapest instance type it would launch), or rejected with the exact reason (NodePool not
ready, taint not tolerated, requirement conflict with both sides, no instance type large enough,
limit reached, minValues not satisfiable). NodePool verdicts judge each pod alone; a pod that
fits an existing node or in-flight NodeClaim is reported as waiting for it. Only pods Karpenter
itself considers get verdicts: a pod kube-scheduler has not yet marked Unschedulable, one held
by schedulingGates, or one for another schedulerName is reported as such and is not a problem.
Instance types are the vendored EC2 catalog of the region of each EC2NodeClass's resolved
subnets, in their zones.

Exit status: 0 no pod is stuck (none pending, or all waiting for capacity or provisionable),
1 some pending pod has no NodePool that can take it, 2 error (e.g. no such pod).

Examples:
  # Every pending pod of the current namespace
  kubectl karpenter why-pending
  # One pod
  kubectl karpenter why-pending web-7d4b9c-x2x9z -n shop
  # Every namespace, as JSON
  kubectl karpenter why-pending -A -o json";

/// `why-pending` flags.
#[derive(Clone, Debug, Args)]
pub struct WhyPendingArgs {
    /// A pod name, or `pod/NAME` (default: every pending pod in the namespace).
    #[arg(value_name = "POD")]
    pub pod: Option<String>,
    /// Output format: text, json or yaml (a list of pod reports).
    #[arg(short, long, value_enum, default_value_t = WhyPendingOutput::Text)]
    pub output: WhyPendingOutput,
}

impl WhyPendingArgs {
    /// The pod name without a `pod/` or `pods/` prefix.
    pub fn pod_name(&self) -> Option<&str> {
        self.pod.as_deref().map(|p| {
            p.strip_prefix("pod/")
                .or_else(|| p.strip_prefix("pods/"))
                .unwrap_or(p)
        })
    }
}

/// `why-pending -o`: text (one block per pod), or the pod reports as JSON or YAML.
pub type WhyPendingOutput = crate::output::ReportFormat;

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use crate::cli::{Command, parse_from};
    use crate::global_args::Namespaces;

    use super::*;

    fn parse(list: &[&str]) -> Result<crate::cli::Cli, clap::Error> {
        parse_from(list.iter().map(OsString::from).collect())
    }

    #[test]
    fn takes_a_pod_namespace_flags_and_output() {
        let cli = parse(&[
            "kubectl-karpenter",
            "why-pending",
            "pod/web-1",
            "-n",
            "shop",
            "-o",
            "yaml",
        ])
        .expect("parse");
        assert_eq!(
            cli.global.namespaces(Some("ctx")),
            Namespaces::One("shop".into())
        );
        let Command::WhyPending(args) = cli.command else {
            panic!("why-pending expected");
        };
        assert_eq!(args.pod_name(), Some("web-1"));
        assert_eq!(args.output, WhyPendingOutput::Yaml);
        let cli = parse(&["kubectl-karpenter", "why-pending", "-A"]).expect("parse");
        assert_eq!(cli.global.namespaces(None), Namespaces::All);
        assert!(parse(&["kubectl-karpenter", "why-pending", "-o", "wide"]).is_err());
    }

    #[test]
    fn help_has_examples_and_exit_codes() {
        let err = parse(&["/x/kubectl-karpenter", "why-pending", "--help"]).expect_err("help");
        let help = err.render().to_string();
        for want in [
            "Usage: kubectl karpenter why-pending [OPTIONS] [POD]",
            "Examples:",
            "kubectl karpenter why-pending -A -o json",
            "Exit status: 0 no pod is stuck",
            "--namespace",
        ] {
            assert!(help.contains(want), "missing {want:?} in\n{help}");
        }
    }
}
