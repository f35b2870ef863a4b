//! Command line of the plugin: kubectl's global flags (`--kubeconfig`, `--context`, `--cluster`,
//! `--user`, `--color`) and the subcommands. Invoked through kubectl (argv[0] `kubectl-…`), usage
//! and help say `kubectl karpenter …`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

pub use crate::drift::args::{DriftAction, DriftArgs};
use crate::kubeconfig::Selection;
pub use crate::orphans::args::{
    DetectArgs, OrphansAction, OrphansArgs, OrphansDeleteArgs, OrphansListArgs, OrphansOutput,
};
pub use crate::upgrade::args::UpgradeArgs;

/// See and steer Karpenter: NodeClaims in flight and ready, what they cost, drift, upgrades, and
/// orphans.
#[derive(Debug, Parser)]
#[command(name = "kubectl-karpenter", version, propagate_version = true)]
pub struct Cli {
    /// Cluster connection flags.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every subcommand accepts, spelled like kubectl's.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// Path to the kubeconfig file to use (only that file is loaded; default: KUBECONFIG, then
    /// ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The name of the kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The name of the kubeconfig cluster to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The name of the kubeconfig user to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// When to colour output: auto colours only a terminal, and not when NO_COLOR is set.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

impl GlobalArgs {
    /// The kubeconfig selection these flags make.
    pub fn selection(&self) -> Selection {
        Selection {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            cluster: self.cluster.clone(),
            user: self.user.clone(),
        }
    }
}

/// `--color`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal and NO_COLOR is unset or empty.
    Auto,
    /// Always colour tables.
    Always,
    /// Never colour.
    Never,
}

impl ColorChoice {
    /// Whether to colour, given whether stdout is a terminal and the value of `NO_COLOR`.
    pub fn enabled(self, stdout_is_tty: bool, no_color: Option<&str>) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => stdout_is_tty && no_color.is_none_or(str::is_empty),
        }
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List NodeClaims with their lifecycle state (Launching, Registering, Initializing, Ready,
    /// Terminating), node, age and price, and totals of ready and in-flight capacity.
    Status(StatusArgs),
    /// Find what Karpenter launched or tracks that nothing owns or that is stuck: NodeClaims not
    /// launched or registered in time, NodeClaims stuck terminating, Nodes and cloud instances
    /// without a NodeClaim, NodeClaims whose instance is gone. `orphans delete` cleans them up.
    #[command(after_help = crate::orphans::args::ORPHANS_HELP)]
    Orphans(Box<OrphansArgs>),
    /// Explain drift (`drift explain`): why NodeClaims are drifted or not, their stamped and
    /// current NodePool and EC2NodeClass hashes, and the exact fields that changed.
    Drift(DriftArgs),
    /// See and steer serial node upgrades (`upgrade status|pause|resume|step`): the rollout of
    /// drifted nodes per NodePool, and the controls to pause it, resume it or let one step run.
    Upgrade(UpgradeArgs),
    /// Print the plugin version.
    Version,
}

/// `status` flags.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Output format: table, wide (adds PRICE/HOUR, NODECLASS, PROVIDER-ID), json, yaml or name.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Only NodeClaims of this NodePool.
    #[arg(long, value_name = "NAME")]
    pub nodepool: Option<String>,
    /// Print rows only: no header line and no totals line.
    #[arg(long)]
    pub no_headers: bool,
}

/// `-o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// A kubectl-style table with a totals line.
    Table,
    /// The table with extra columns.
    Wide,
    /// A `kind: List` of the NodeClaims as JSON.
    Json,
    /// A `kind: List` of the NodeClaims as YAML.
    Yaml,
    /// `nodeclaim.karpenter.sh/<name>` per line.
    Name,
}

/// The name to show in usage: `kubectl karpenter` when run as a kubectl plugin (argv[0] is
/// `kubectl-karpenter`, `kubectl-karpenter.exe` or a path to one), else argv[0]'s file name.
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

/// Parses `args` (argv[0] first).
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
    use std::time::Duration;

    use super::*;

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
    fn colour_decision() {
        use ColorChoice::*;
        assert!(Auto.enabled(true, None));
        assert!(Auto.enabled(true, Some("")));
        assert!(!Auto.enabled(true, Some("1")));
        assert!(!Auto.enabled(false, None));
        assert!(Always.enabled(false, Some("1")));
        assert!(!Never.enabled(true, None));
    }
}
