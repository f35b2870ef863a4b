//! Command line of the plugin: kubectl's global flags (`--kubeconfig`, `--context`, `--cluster`,
//! `--user`, `-n/--namespace`, `-A/--all-namespaces`, `--color`, defined in `global_args`) and
//! the subcommands, each with examples in its `--help`. Invoked through kubectl (`argv[0]`
//! `kubectl-…`), usage and help say `kubectl karpenter …`. Completers of names are attached in
//! `completion`, not here.

use std::ffi::OsString;
use std::path::Path;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

pub use crate::drift::args::{DriftAction, DriftArgs};
use crate::global_args::GlobalArgs;
pub use crate::orphans::args::{
    DetectArgs, OrphansAction, OrphansArgs, OrphansDeleteArgs, OrphansListArgs, OrphansOutput,
};
use crate::status::interval::Interval;
pub use crate::status::sort::SortBy;
pub use crate::upgrade::args::UpgradeArgs;
pub use crate::version::VersionOutput;

/// Help text after `kubectl karpenter --help`.
pub const ROOT_HELP: &str = "\
The cluster is chosen like kubectl chooses it: --kubeconfig loads only that file; otherwise the
files of KUBECONFIG (a colon-separated list) are merged, the first file to set a value winning;
otherwise ~/.kube/config; otherwise the in-cluster service account. --context, --cluster and
--user pick entries from it. -n/--namespace and -A/--all-namespaces apply to namespaced views
(pods); NodePools, NodeClaims and Nodes are cluster-scoped, so other commands ignore them.
--request-timeout limits how long each request waits for the server to answer (kubectl's
syntax; default 30s, where kubectl's is 0; 0 waits forever).

Exit status: 0 ok (nothing found), 1 problems found (drift, orphans, queued upgrades, pending
pods no NodePool can take), 2 error.

Examples:
  # NodeClaims in flight and ready, with what they cost
  kubectl karpenter status -o wide
  # Why is this node drifted?
  kubectl karpenter drift explain ip-10-0-1-17.ec2.internal
  # Where each NodePool's rollout of drifted nodes stands
  kubectl karpenter upgrade status
  # What Karpenter removed in the last day, and why
  kubectl karpenter history --since 24h
  # Why is this pod still pending?
  kubectl karpenter why-pending web-7d4b9c-x2x9z -n shop
  # Which nodes consolidation would remove or replace, and what keeps the others
  kubectl karpenter disruption
  # What Karpenter launched that nothing owns, in another cluster
  kubectl karpenter orphans --context prod
  # Shell completion for kubectl-karpenter (see `kubectl karpenter completion --help`)
  source <(kubectl karpenter completion bash)";

/// See and steer Karpenter: NodeClaims in flight and ready, what they cost, drift, upgrades, and
/// orphans.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-karpenter",
    version,
    propagate_version = true,
    after_help = ROOT_HELP
)]
pub struct Cli {
    /// Cluster connection flags.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands: `status`, `orphans`, `drift`, `upgrade`, `history`, `version`,
/// `completion`, `why-pending` and `disruption`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The operator's cockpit: per NodePool, limits vs usage, nodes ready / in flight / drifted /
    /// terminating and the upgrade state; then NodeClaims with their lifecycle state (Launching,
    /// Registering, Initializing, Ready, Drifted, Interrupted, Terminating), instance type, their
    /// node's pods and requested/allocatable cpu and memory and age (offering, node and price
    /// with -o wide); then totals including the fleet's cost per hour.
    #[command(after_help = STATUS_HELP)]
    Status(StatusArgs),
    /// Find what Karpenter launched or tracks that nothing owns or that is stuck: NodeClaims not
    /// launched or registered in time, NodeClaims stuck terminating, Nodes and cloud instances
    /// without a NodeClaim, NodeClaims whose instance is gone. `orphans delete` cleans them up.
    #[command(after_help = crate::orphans::args::ORPHANS_HELP)]
    Orphans(Box<OrphansArgs>),
    /// Explain drift (`drift explain`): why NodeClaims are drifted or not, their stamped and
    /// current NodePool and EC2NodeClass hashes, and the exact fields that changed.
    #[command(after_help = crate::drift::args::DRIFT_HELP)]
    Drift(DriftArgs),
    /// See and steer serial node upgrades (`upgrade status|pause|resume|step`): the rollout of
    /// drifted nodes per NodePool, and the controls to pause it, resume it or let one step run.
    #[command(after_help = crate::upgrade::args::UPGRADE_HELP)]
    Upgrade(UpgradeArgs),
    /// Every NodeClaim Karpenter removed and every disruption it rolled back: when, why
    /// (Empty, Underutilized, Drifted, Expired, ... or Deleted), the pods moved and the cost
    /// change, from the durable disruption history.
    #[command(after_help = crate::history::args::HISTORY_HELP)]
    History(crate::history::args::HistoryArgs),
    /// Print the plugin version (and the git commit it was built from, when known). Never
    /// contacts the cluster.
    #[command(after_help = VERSION_HELP)]
    Version(VersionArgs),
    /// Print a shell completion script for `kubectl-karpenter` (bash, zsh, fish, powershell,
    /// elvish).
    #[command(after_help = COMPLETION_HELP)]
    Completion(CompletionArgs),
    /// Why pods are pending: the NodeClaim each waits for, or every NodePool's verdict from the
    /// controller's scheduling core (taint not tolerated, requirement conflict, no instance type
    /// large enough, limit reached, minValues, NodePool not ready).
    #[command(after_help = crate::why_pending::args::WHY_PENDING_HELP)]
    WhyPending(crate::why_pending::args::WhyPendingArgs),
    /// What consolidation would do with each node now (`disruption [explain NODE]`): per
    /// NodePool the budgets; per node consolidatable (delete, or replace with which instance type,
    /// saving how much) or blocked and by exactly what; `explain` is the what-if of removing one.
    #[command(after_help = crate::disruption::args::DISRUPTION_HELP)]
    Disruption(crate::disruption::args::DisruptionArgs),
}

/// Help text after `status --help`.
pub const STATUS_HELP: &str = "\
NodeClaims are cluster-scoped: -n/--namespace and -A are accepted and ignored.
Per NodeClaim, what runs on its node: PODS counts the pods bound to it that are not Succeeded or
Failed, DaemonSet and static pods included; `3 (empty)` marks a ready (or drifted) node whose
pods are all DaemonSet or static pods (nothing for consolidation to move). CPU and MEMORY are
the pods' requests (as kube-scheduler counts them) against the Node's allocatable, e.g.
`1.1/1.93 (56%)` (cores) and `2.1/7.1Gi (29%)`; a NodeClaim whose Node has not joined shows 0
against its own allocatable. Reading them lists every pod once (one call): the user needs list
on pods and nodes. -o wide adds the NodePool, offering, node, price and provider id, and for a
NodeClaim being disrupted its DISRUPTION-REASON (and DRAIN-BY, when its drain starts at the
latest). STATE `Interrupted (SpotInterrupted)` marks a NodeClaim Karpenter is replacing because
EC2 interrupts its instance (SpotInterrupted, ScheduledChange, InstanceStopped,
InstanceTerminated): the replacement launches at once and the node drains when it is ready or at
DRAIN-BY, whichever comes first.
--watch on a terminal (with the default -o table) is a cockpit fitted to the terminal: a summary
(NodeClaims, pending pods, the cost per hour and per month of the nodes that stay, terminating
ones counted apart, the spot share, cpu and memory requested of all allocatable as bars); the
NodePools, whose CAPACITY/LIMIT CPU and MEMORY are their nodes' capacity against spec.limits
(`-`: no limit); per NodeClaim REQUESTED CPU and MEMORY (the pods' requests against the node's
allocatable, as bars), pods, instance type, capacity type, $/HOUR, age and STATE, which says why a
node goes (`Terminating (Empty)`, `Disrupting (Underutilized)`) and calls a ready node running
only DaemonSet or static pods `Empty`; then the Nodes no NodeClaim names (not managed by
Karpenter). Narrower terminals get narrower bars, then fewer columns; no line passes the edge.
With -o wide, json, yaml or name, --watch redraws that output, each line cut at the edge.
While watching, pods come from one watch instead of a list per refresh (needs watch on pods).
Exit status: 0 listed (also when there are none), 2 error (e.g. Karpenter's CRDs not installed).

Examples:
  # NodePools, every NodeClaim with its node's pods, cpu and memory, and totals
  kubectl karpenter status
  # Idle nodes first: smallest share of allocatable cpu requested
  kubectl karpenter status --sort-by cpu
  # Add NodePool, capacity type, zone, node, price, node class and provider id, dearest first
  kubectl karpenter status -o wide --sort-by price
  # One NodePool and its NodeClaims, as YAML
  kubectl karpenter status --nodepool gpu -o yaml
  # The cockpit: summary, NodePools and every node with bars, redrawn every 5s
  kubectl karpenter status --watch --interval 5s
  # Only spot capacity
  kubectl karpenter status -w -l karpenter.sh/capacity-type=spot
  # Keep watching; on a pipe, one JSON document per line whenever something changes
  kubectl karpenter status --watch -o json | jq -c .fleet";

/// Help text after `version --help`.
pub const VERSION_HELP: &str = "\
Text output is `kubectl-karpenter VERSION`, followed by ` (commit SHA)` when the build recorded
one (KUBECTL_KARPENTER_GIT_COMMIT at build time). -o json|yaml prints an object with
version, gitCommit (null when unknown) and the platform (os/arch) it was built for.

Examples:
  kubectl karpenter version
  kubectl karpenter version -o json
  # The same as the first line of `version`
  kubectl karpenter --version";

/// Help text after `completion --help`.
pub const COMPLETION_HELP: &str = "\
The script completes the `kubectl-karpenter` command. For `kubectl karpenter <TAB>` (kubectl
1.26 or later), put an executable named kubectl_complete-karpenter on PATH: either a symlink to
kubectl-karpenter (which then answers kubectl's completion requests), or a script running
`kubectl karpenter __complete \"$@\"`.

Examples:
  # bash: this shell, then every new one
  source <(kubectl karpenter completion bash)
  kubectl karpenter completion bash > ~/.local/share/bash-completion/completions/kubectl-karpenter
  # zsh (a directory on $fpath)
  kubectl karpenter completion zsh > \"${fpath[1]}/_kubectl-karpenter\"
  # fish
  kubectl karpenter completion fish > ~/.config/fish/completions/kubectl-karpenter.fish
  # `kubectl karpenter <TAB>` through kubectl's plugin completion
  ln -s \"$(command -v kubectl-karpenter)\" ~/.local/bin/kubectl_complete-karpenter";

/// `version` flags.
#[derive(Debug, Args)]
pub struct VersionArgs {
    /// Output format: text, json or yaml.
    #[arg(short, long, value_enum, default_value_t = VersionOutput::Text)]
    pub output: VersionOutput,
    /// Accepted as in `kubectl version --client`; the plugin never asks the server anyway.
    #[arg(long)]
    pub client: bool,
}

/// `completion` arguments.
#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell to write the script for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `status` flags.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Output format: table (NodePools, NodeClaims with their nodes' pods, cpu and memory,
    /// totals), wide (adds NODES per NodePool and NODEPOOL, CAPACITY-TYPE, ZONE, NODE,
    /// PRICE/HOUR, NODECLASS, PROVIDER-ID per NodeClaim), json or yaml (one document with
    /// `nodePools`, `nodeClaims` and `totals`), or name.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Only this NodePool and its NodeClaims.
    #[arg(long, value_name = "NAME")]
    pub nodepool: Option<String>,
    /// Print NodeClaim rows only: no headers, no NodePool section and no totals line.
    #[arg(long)]
    pub no_headers: bool,
    /// Keep watching: on a terminal, a cockpit redrawn in place every --interval and fitted to
    /// the terminal (summary with cost and spot share, requested cpu and memory as bars, why a
    /// node is being disrupted, nodes Karpenter does not manage; q, Esc or Ctrl-C quits); on a
    /// pipe, print again whenever something changes (`-o json`: one document per line).
    #[arg(short, long)]
    pub watch: bool,
    /// How often --watch redraws: a whole number of seconds or a duration with a unit (500ms,
    /// 5s, 1m), at least 100ms.
    #[arg(long, value_name = "DURATION", default_value_t = Interval::default())]
    pub interval: Interval,
    /// Only the NodeClaims and Nodes whose labels match this selector (kubectl's label query,
    /// e.g. `karpenter.sh/capacity-type=spot` or `node.kubernetes.io/instance-type in
    /// (m5.large,m5.xlarge)`; NodeClaims carry the labels Karpenter gives their nodes).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Order of the NodeClaims (ties by NodePool, then name).
    #[arg(long, value_enum, value_name = "KEY", default_value_t = SortBy::Nodepool)]
    pub sort_by: SortBy,
}

/// `-o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// A kubectl-style table with a totals line.
    Table,
    /// The table with extra columns.
    Wide,
    /// The status document (nodePools, nodeClaims, totals) as JSON.
    Json,
    /// The status document (nodePools, nodeClaims, totals) as YAML.
    Yaml,
    /// `nodeclaim.karpenter.sh/<name>` per line.
    Name,
}

/// The name to show in usage: `kubectl karpenter` when run as a kubectl plugin (`argv[0]` is
/// `kubectl-karpenter`, `kubectl-karpenter.exe` or a path to one), else `argv[0]`'s file name.
/// krew's underscores stand for dashes in the command name.
pub fn display_name(argv0: Option<&OsString>) -> String {
    let file = argv0
        .and_then(|a| Path::new(a).file_name())
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| "kubectl-karpenter".to_owned());
    let file = file.strip_suffix(".exe").unwrap_or(&file);
    match file.strip_prefix("kubectl-") {
        Some(plugin) if !plugin.is_empty() => format!("kubectl {}", plugin.replace('_', "-")),
        _ => file.to_owned(),
    }
}

/// The clap command with usage named for how the binary was invoked.
pub fn command(display: &str) -> clap::Command {
    Cli::command().bin_name(display.to_owned())
}

/// Parses `args` (`argv[0]` first).
///
/// Errors: clap's usage errors, and `--help`/`--version` (which clap reports as errors to print).
pub fn parse_from(args: Vec<OsString>) -> Result<Cli, clap::Error> {
    let display = display_name(args.first());
    let mut cmd = command(&display);
    let matches = cmd.try_get_matches_from_mut(args)?;
    Cli::from_arg_matches(&matches).map_err(|e| e.with_cmd(&cmd))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::global_args::Namespaces;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn clap_definition_is_consistent() {
        command("kubectl karpenter").debug_assert();
    }

    #[test]
    fn display_name_for_plugin_and_plain_invocations() {
        let cases = [
            ("/usr/local/bin/kubectl-karpenter", "kubectl karpenter"),
            ("kubectl-karpenter", "kubectl karpenter"),
            ("C:\\bin\\kubectl-karpenter.exe", "kubectl karpenter"),
            ("kubectl-karpenter_status", "kubectl karpenter-status"),
            ("/tmp/karpenter-plugin", "karpenter-plugin"),
            ("kubectl-", "kubectl-"),
        ];
        for (argv0, want) in cases {
            let argv0 = OsString::from(argv0);
            // Backslash paths only split on Windows; the file name is what matters elsewhere.
            if argv0.to_string_lossy().contains('\\') && !cfg!(windows) {
                continue;
            }
            assert_eq!(display_name(Some(&argv0)), want, "{argv0:?}");
        }
        assert_eq!(display_name(None), "kubectl karpenter");
    }

    #[test]
    fn help_says_kubectl_karpenter() {
        let err = parse_from(args(&["/x/kubectl-karpenter", "status", "--help"]))
            .expect_err("help is reported as an error");
        let help = err.render().to_string();
        assert!(
            help.contains("Usage: kubectl karpenter status [OPTIONS]"),
            "{help}"
        );
        let err = parse_from(args(&["kubectl-karpenter", "bogus"])).expect_err("bad command");
        assert!(
            err.render().to_string().contains("kubectl karpenter"),
            "{err}"
        );
        let root = parse_from(args(&["kubectl-karpenter", "--help"])).expect_err("help");
        let root = root.render().to_string();
        for want in [
            "kubectl karpenter why-pending web-7d4b9c-x2x9z -n shop",
            "pending\npods no NodePool can take), 2 error.",
        ] {
            assert!(root.contains(want), "missing {want:?} in\n{root}");
        }
        let status = parse_from(args(&["kubectl-karpenter", "status", "--help"]))
            .expect_err("help")
            .render()
            .to_string();
        assert!(
            status.contains("The status document (nodePools, nodeClaims, totals) as JSON"),
            "{status}"
        );
        let version = parse_from(args(&["kubectl-karpenter", "version", "--help"]))
            .expect_err("help")
            .render()
            .to_string();
        assert!(version.contains("platform (os/arch)"), "{version}");
    }

    #[test]
    fn global_flags_anywhere() {
        let cli = parse_from(args(&[
            "kubectl-karpenter",
            "status",
            "--context",
            "dev",
            "-o",
            "wide",
            "--nodepool",
            "gpu",
            "--kubeconfig",
            "/tmp/kc",
        ]))
        .expect("parse");
        assert_eq!(cli.global.context.as_deref(), Some("dev"));
        assert_eq!(cli.global.kubeconfig, Some(PathBuf::from("/tmp/kc")));
        let Command::Status(status) = cli.command else {
            panic!("status expected");
        };
        assert_eq!(status.output, OutputFormat::Wide);
        assert_eq!(status.nodepool.as_deref(), Some("gpu"));
    }

    #[test]
    fn orphans_lists_by_default_and_takes_list_flags_either_way() {
        let cli = parse_from(args(&["kubectl-karpenter", "orphans", "-o", "wide"])).expect("parse");
        let Command::Orphans(o) = cli.command else {
            panic!("orphans expected");
        };
        assert!(o.action.is_none());
        assert_eq!(o.list_args().output, OrphansOutput::Wide);
        assert_eq!(
            o.list_args().detect.thresholds(),
            crate::orphans::Thresholds::default()
        );
        let cli = parse_from(args(&[
            "kubectl-karpenter",
            "orphans",
            "list",
            "--registration-ttl",
            "1m30s",
            "--stuck-after",
            "0s",
            "--no-cloud",
        ]))
        .expect("parse");
        let Command::Orphans(o) = cli.command else {
            panic!("orphans expected");
        };
        let detect = &o.list_args().detect;
        assert_eq!(detect.registration_ttl, Duration::from_secs(90));
        assert_eq!(detect.stuck_after, Duration::ZERO);
        assert!(detect.no_cloud);
        // Flags before the subcommand are refused rather than silently ignored.
        assert!(
            parse_from(args(&[
                "kubectl-karpenter",
                "orphans",
                "-o",
                "json",
                "list"
            ]))
            .is_err()
        );
    }

    #[test]
    fn orphans_delete_needs_names_or_all() {
        let cli = parse_from(args(&[
            "kubectl-karpenter",
            "orphans",
            "delete",
            "--all",
            "--dry-run",
            "-y",
        ]))
        .expect("parse");
        let Command::Orphans(o) = cli.command else {
            panic!("orphans expected");
        };
        let Some(OrphansAction::Delete(d)) = o.action else {
            panic!("delete expected");
        };
        assert!(d.all && d.dry_run && d.yes && d.names.is_empty());
        let err =
            parse_from(args(&["kubectl-karpenter", "orphans", "delete"])).expect_err("no targets");
        assert!(
            err.render().to_string().contains("<NAME|--all>"),
            "{}",
            err.render()
        );
        assert!(
            parse_from(args(&[
                "kubectl-karpenter",
                "orphans",
                "delete",
                "x",
                "--all"
            ]))
            .is_err()
        );
        let err = parse_from(args(&[
            "kubectl-karpenter",
            "orphans",
            "--launch-timeout",
            "soon",
        ]))
        .expect_err("bad duration");
        assert!(
            err.render()
                .to_string()
                .contains("\"soon\" is not a duration like 30s, 5m or 1h30m"),
            "{}",
            err.render()
        );
        let help = parse_from(args(&["kubectl-karpenter", "orphans", "delete", "--help"]))
            .expect_err("help");
        let help = help.render().to_string();
        assert!(
            help.contains("Usage: kubectl karpenter orphans delete [OPTIONS] <NAME|--all>"),
            "{help}"
        );
        assert!(
            help.contains("kubectl karpenter orphans delete --all --dry-run"),
            "{help}"
        );
    }

    #[test]
    fn every_command_has_examples_and_says_kubectl_karpenter() {
        fn walk(cmd: &clap::Command, path: &str, seen: &mut Vec<String>) {
            let path = if path.is_empty() {
                cmd.get_name().to_owned()
            } else {
                format!("{path} {}", cmd.get_name())
            };
            let after = cmd
                .get_after_help()
                .map(ToString::to_string)
                .unwrap_or_default();
            assert!(
                after.contains("Examples:\n") && after.contains("  kubectl karpenter "),
                "`{path} --help` has no examples section"
            );
            // Every example line of a command runs that command (or one of its subcommands).
            let invocation = path.replacen("kubectl-karpenter", "kubectl karpenter", 1);
            let examples = after.split("Examples:\n").nth(1).unwrap_or_default();
            assert!(
                examples
                    .lines()
                    .filter(|l| l.trim_start().starts_with("kubectl karpenter"))
                    .any(|l| l.contains(&invocation)),
                "no example of `{path}` runs `{invocation}`:\n{examples}"
            );
            seen.push(path.clone());
            for sub in cmd.get_subcommands() {
                // clap's own `help` subcommand has nothing to show.
                if sub.get_name() != "help" {
                    walk(sub, &path, seen);
                }
            }
        }
        let mut cmd = command("kubectl karpenter");
        cmd.build();
        let mut seen = Vec::new();
        walk(&cmd, "", &mut seen);
        for want in [
            "kubectl-karpenter status",
            "kubectl-karpenter drift explain",
            "kubectl-karpenter upgrade step",
            "kubectl-karpenter orphans delete",
            "kubectl-karpenter version",
            "kubectl-karpenter completion",
        ] {
            assert!(
                seen.iter().any(|s| s == want),
                "{want} not walked: {seen:?}"
            );
        }
        // And the rendered help of the root says how it is invoked.
        let help = parse_from(args(&["kubectl-karpenter", "--help"])).expect_err("help");
        let help = help.render().to_string();
        assert!(
            help.contains("Usage: kubectl karpenter [OPTIONS] <COMMAND>"),
            "{help}"
        );
        assert!(help.contains("-n, --namespace <NS>"), "{help}");
    }

    #[test]
    fn namespace_flags() {
        let parse = |list: &[&str]| {
            let mut all = vec!["kubectl-karpenter"];
            all.extend_from_slice(list);
            parse_from(args(&all))
        };
        let cli = parse(&["status"]).expect("parse");
        assert_eq!(
            cli.global.namespaces(Some("team-a")),
            Namespaces::One("team-a".into())
        );
        assert_eq!(
            cli.global.namespaces(None),
            Namespaces::One("default".into())
        );
        assert_eq!(
            cli.global.namespaces(Some("")),
            Namespaces::One("default".into())
        );
        let cli = parse(&["status", "-n", "kube-system"]).expect("parse");
        let scope = cli.global.namespaces(Some("team-a"));
        assert_eq!(scope, Namespaces::One("kube-system".into()));
        assert_eq!(scope.as_namespace(), Some("kube-system"));
        let cli = parse(&["--namespace=x", "drift", "explain"]).expect("parse");
        assert_eq!(cli.global.namespace.as_deref(), Some("x"));
        let cli = parse(&["upgrade", "status", "-A"]).expect("parse");
        assert_eq!(cli.global.namespaces(Some("team-a")), Namespaces::All);
        assert_eq!(Namespaces::All.as_namespace(), None);
        let err = parse(&["status", "-n", "a", "-A"]).expect_err("conflict");
        assert!(
            err.render().to_string().contains("cannot be used with"),
            "{}",
            err.render()
        );
    }

    #[test]
    fn request_timeout_flag() {
        use crate::request_timeout::RequestTimeout;

        let timeout = |list: &[&str]| {
            let mut all = vec!["kubectl-karpenter"];
            all.extend_from_slice(list);
            parse_from(args(&all)).map(|cli| cli.global.request_timeout)
        };
        assert_eq!(
            timeout(&["status"]).expect("parse"),
            RequestTimeout(Duration::from_secs(30))
        );
        assert_eq!(
            timeout(&["why-pending", "--request-timeout", "5"]).expect("parse"),
            RequestTimeout(Duration::from_secs(5))
        );
        assert_eq!(
            timeout(&["--request-timeout=1m", "upgrade", "status"]).expect("parse"),
            RequestTimeout(Duration::from_secs(60))
        );
        assert_eq!(
            timeout(&["disruption", "--request-timeout", "0"]).expect("parse"),
            RequestTimeout(Duration::ZERO)
        );
        let err = timeout(&["status", "--request-timeout", "5d"]).expect_err("unknown unit");
        assert!(
            err.render().to_string().contains("invalid timeout \"5d\""),
            "{}",
            err.render()
        );
        let help = parse_from(args(&["kubectl-karpenter", "status", "--help"]))
            .expect_err("help")
            .render()
            .to_string();
        assert!(help.contains("--request-timeout <DURATION>"), "{help}");
        assert!(help.contains("[default: 30s]"), "{help}");
    }

    #[test]
    fn version_and_completion_parse() {
        let cli = parse_from(args(&["kubectl-karpenter", "version", "-o", "json"])).expect("parse");
        let Command::Version(v) = cli.command else {
            panic!("version expected");
        };
        assert_eq!(v.output, VersionOutput::Json);
        let cli = parse_from(args(&["kubectl-karpenter", "completion", "zsh"])).expect("parse");
        let Command::Completion(c) = cli.command else {
            panic!("completion expected");
        };
        assert_eq!(c.shell, clap_complete::Shell::Zsh);
        let err = parse_from(args(&["kubectl-karpenter", "completion", "tcsh"]))
            .expect_err("unknown shell");
        assert!(
            err.render().to_string().contains("possible values"),
            "{}",
            err.render()
        );
        let err = parse_from(args(&["kubectl-karpenter", "--version"])).expect_err("version");
        assert!(!err.use_stderr());
        assert_eq!(
            err.render().to_string(),
            format!("kubectl-karpenter {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
}
